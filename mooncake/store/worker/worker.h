// Worker: contributes memory to the store. It owns memfd-backed DRAM
// segments, serves them through a transport Router (local for clients in its
// own process, SHM for clients on its host, RDMA where the build and the host
// have it, TCP for everyone), mounts them with the master, heartbeats,
// remounts when the master asks, and unmounts on a graceful Shutdown.
//
//   ASSIGN_OR_RETURN(auto channel, rpc::TcpChannel::Connect(master_address));
//   ASSIGN_OR_RETURN(auto worker, Worker<rpc::TcpChannel>::Start(options, channel.get()));
//   ...
//   RETURN_IF_ERROR(worker->Shutdown());   // the destructor does it too
//
// The worker never sees puts or gets: clients write and read its segments
// one-sidedly (transport.h) at offsets the master handed out. A client gets
// from the master's segment id to a transport segment through DescribeSegments
// (client/segment_resolver.h); the worker id and the directory segment this
// worker publishes follow rpc/worker_id.h and rpc/segment_directory_format.h.
//
// Remount. When a heartbeat answer says remount_required (the master expired
// this worker or restarted), every replica the master knew here is gone. The
// worker then mounts *fresh* memory (a new memfd per segment) and retires the
// old: a client still holding a read lease on an old replica keeps reading the
// old, intact bytes through its SHM mapping, or gets NotFound over TCP and
// falls back; no new object can land in memory an old lease still covers.
//
// Tenants (WorkerOptions::auth listing "cluster"): the TCP transport serves a
// tenant's connection only the ranges the master's capabilities cover
// (base/capability.h, scope = this worker id, segment = the master's segment
// id), and the directory segment to read; docs/security.md.
//
// Thread-safety: every method may be called from any thread. One background
// thread sends the heartbeats.
#ifndef MOONCAKE_STORE_WORKER_WORKER_H_
#define MOONCAKE_STORE_WORKER_WORKER_H_

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/capability.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/client/link_arbiter.h"
#include "mooncake/store/client/rdma_route.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/channel.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/segment_directory_format.h"
#include "mooncake/store/rpc/worker_id.h"
#include "mooncake/store/worker/copy_agent.h"
#include "mooncake/store/worker/tier_agent.h"
#include "mooncake/transport/internal/rdma_path.h"
#include "mooncake/transport/internal/router_ids.h"
#include "mooncake/transport/local_transport.h"
#include "mooncake/transport/router.h"
#include "mooncake/transport/shm_transport.h"
#include "mooncake/transport/tcp_transport.h"

namespace mooncake::worker {

namespace proto = ::mooncake::store::proto;

struct WorkerOptions {
  size_t segment_count = 1;  // in [1, rpc::kDirectoryEntriesMax]
  // The name the segments are mounted under (what PutOptions::
  // preferred_segment_names matches): segment 0 takes it as is, segment i > 0
  // takes name + "#" + i. Workers may share a name. "" = "seg-<i>-g<n>" (n:
  // the remount generation).
  std::string segment_name;
  uint64_t segment_bytes = uint64_t{64} << 20;  // each; > 0
  // Segments' memory allocated and mapped at start (Backing::kReserved): a
  // host without it fails Start with RESOURCE_EXHAUSTED instead of meeting
  // the OOM killer mid-serving, and no put pays first-touch page faults.
  // false: pages come on first write. The store binary sets it (true).
  bool reserve_memory = false;
  std::string host_id;                      // "" = gethostname() (what SHM matching uses)
  std::string tcp_bind_host = "127.0.0.1";  // where the TCP transport listens
  uint16_t tcp_port = 0;                    // 0: any free port
  // Several addresses of this host for the TCP transport (docs/transport.md,
  // "Aggregation"; mooncake_store --route_policy fills them from a plan):
  // it then listens on every address (tcp_bind_host must be "0.0.0.0" or
  // "::"), advertises these, so that a client spreads a value's slices over
  // them, and binds its own outgoing lanes to them (weight 1 each). Numeric
  // addresses, at most 8. Empty: tcp_bind_host alone.
  std::vector<std::string> tcp_path_hosts;
  // The RDMA transport's local ports (RdmaOptions::paths, at most 8).
  // Empty: MOONCAKE_RDMA_PATHS, else the first device's port 1.
  std::vector<transport_internal::RdmaPath> rdma_paths;
  bool serve_local = true;  // clients in this process
  bool serve_shm = true;    // clients on this host
  bool serve_tcp = true;    // everyone
  // Cross-process QoS (client/link_arbiter.h): the host's link arbiter that
  // this worker's copies to other workers (drain, repair, hot replicas, copy
  // and move tasks) take bulk grants from over TCP and RDMA, so that they
  // yield to latency-critical reads of the processes that share the link.
  // Empty: none.
  std::string qos_link;
  uint64_t qos_link_bytes_per_s = 0;
  // Access control (docs/security.md): the TCP transport serves only peers
  // proving a principal these credentials list, and proves self() (the
  // cluster) when it reads from other workers (copies). Null: none.
  std::shared_ptr<const auth::Credentials> auth;
  // RDMA (store/client/rdma_route.h): on by default where the build has it
  // (--config=rdma); a host with no device serves without it. Its control
  // channel listens on tcp_bind_host. `rdma_factory` empty: the real verbs.
  bool serve_rdma = client::kRdmaBuilt;
  bool require_rdma = false;  // serve_rdma and no RDMA device: Start fails (FAILED_PRECONDITION)
  client::RdmaTransportFactory rdma_factory;
  int64_t rpc_timeout_ms = 2'000;                 // each master call
  int64_t initial_heartbeat_interval_ms = 1'000;  // until the master names one
  bool heartbeat_thread = true;                   // false: the owner calls HeartbeatOnce (tests)
  // An SSD tier under the segments (tier_agent.h): evicted objects are written
  // back to it and loaded again on a read. nullopt: none. Its files are
  // emptied at start (the master knows no record of a new worker).
  std::optional<TierAgentOptions> tier;
  // Runs the master's copy tasks (copy_agent.h): what moves replicas off a
  // draining worker and onto new ones. false: none (tests of other pieces).
  bool copy_agent = true;
  CopyAgentOptions copy_agent_options;  // rpc_timeout_ms is taken from above
};

// Drain: how often the master is asked how a drain goes, and how long past
// the deadline the worker keeps asking (the master's last copies finishing).
inline constexpr absl::Duration kDrainPollInterval = absl::Milliseconds(100);
inline constexpr absl::Duration kDrainGrace = absl::Seconds(2);

struct WorkerStats {
  uint64_t heartbeats_ok = 0;
  uint64_t heartbeats_failed = 0;
  uint64_t remounts = 0;
  int64_t heartbeat_interval_ms = 0;
  bool last_heartbeat_ok = false;  // the most recent heartbeat's outcome (false before any)
};

// One mounted segment as the worker sees it.
struct MountedSegment {
  uint64_t master_segment_id = 0;
  transport::SegmentId router_segment_id = 0;
  uint64_t size_bytes = 0;
  void* data = nullptr;  // this process's mapping (tests look at the bytes)
};

template <rpc::RpcChannel C>
class Worker {
 public:
  // Creates the memory and transports, mounts every segment and starts
  // heartbeating. `channel` reaches the master and must outlive the worker.
  // Errors: INVALID_ARGUMENT (options), what memfd/transports/the master say.
  static absl::StatusOr<std::unique_ptr<Worker>> Start(WorkerOptions options, C* channel) {
    RETURN_IF_ERROR(Validate(options));
    MC_ASSERT(channel != nullptr, "a worker needs a channel to the master");
    if (options.host_id.empty()) options.host_id = HostName();
    std::unique_ptr<Worker> w(new Worker(std::move(options), channel));
    RETURN_IF_ERROR(w->Init());
    if (w->options_.tier.has_value()) {
      TierAgentOptions t = *w->options_.tier;
      t.rpc_timeout_ms = w->options_.rpc_timeout_ms;
      ASSIGN_OR_RETURN(w->tier_agent_,
                       TierAgent<C>::Start(std::move(t), channel, w->worker_id_,
                                           [p = w.get()](uint64_t id) { return p->Lookup(id); }));
    }
    if (w->options_.copy_agent) {
      CopyAgentOptions c = w->options_.copy_agent_options;
      c.rpc_timeout_ms = w->options_.rpc_timeout_ms;
      ASSIGN_OR_RETURN(w->copy_agent_,
                       CopyAgent<C>::Start(std::move(c), channel, w->router_.get(), w->worker_id_,
                                           [p = w.get()](uint64_t id) { return p->Lookup(id); }));
    }
    if (w->options_.heartbeat_thread) {
      w->heartbeat_ = std::thread([p = w.get()] { p->HeartbeatLoop(); });
    }
    return w;
  }

  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker() {
    Shutdown().IgnoreError();
    // Stop serving before the memory is unmapped: unregistering waits for
    // in-process copies and turns later requests into NotFound.
    {
      MutexLock lock(&mu_);
      for (const Slot& s : slots_) {
        if (s.router_id != 0) router_->UnregisterMemory(s.router_id).IgnoreError();
      }
    }  // slots_ is empty unless the router was made
    if (router_ != nullptr && directory_id_ != 0) {
      router_->UnregisterMemory(directory_id_).IgnoreError();
    }
    router_.reset();
  }

  // Stops heartbeating and unmounts every segment (the master drops their
  // replicas). Idempotent. The memory stays served until the destructor, so
  // reads already admitted finish. Returns the first unmount error.
  absl::Status Shutdown() {
    {
      MutexLock lock(&mu_);
      if (stopping_) return absl::OkStatus();
      stopping_ = true;
      wake_.SignalAll();
    }
    if (heartbeat_.joinable()) heartbeat_.join();
    // No lock held: its lookups take mu_. Stopped, not destroyed: readers of
    // tier_agent() (a node's metrics) may still look at its stats.
    if (tier_agent_ != nullptr) tier_agent_->Stop();
    if (copy_agent_ != nullptr) copy_agent_->Stop();
    absl::Status status;
    MutexLock lock(&mu_);
    for (Slot& s : slots_) {
      if (s.master_segment_id == 0) continue;
      proto::UnmountSegmentRequest req;
      req.set_worker_id(worker_id_);
      req.set_segment_id(s.master_segment_id);
      status.Update(rpc::Call<rpc::UnmountSegmentMethod>(*channel_, req, CallOpts()).status());
      s.master_segment_id = 0;
    }
    WriteDirectoryLocked();
    return status;
  }

  // What a crash looks like from outside, for in-process tests: stops
  // heartbeating and serving (every request on the worker's segments fails
  // from now on) without telling the master. The process tests SIGKILL.
  void Abandon() {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
      wake_.SignalAll();
    }
    if (heartbeat_.joinable()) heartbeat_.join();
    if (tier_agent_ != nullptr) tier_agent_->Stop();
    if (copy_agent_ != nullptr) copy_agent_->Stop();
    MutexLock lock(&mu_);
    for (Slot& s : slots_) {
      if (s.router_id != 0) router_->UnregisterMemory(s.router_id).IgnoreError();
      s.router_id = 0;
      s.master_segment_id = 0;  // nothing to unmount later
    }
  }

  // One heartbeat now (remounting if told to). The background thread calls
  // it every interval; tests without the thread call it by hand.
  absl::Status HeartbeatOnce() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    if (stopping_) return absl::FailedPreconditionError("worker is shutting down");
    return HeartbeatLocked();
  }

  const std::string& worker_id() const { return worker_id_; }
  const std::string& host_id() const { return options_.host_id; }
  std::string router_endpoint() const { return router_->LocalEndpoint(); }
  transport::Router& router() { return *router_; }

  std::vector<MountedSegment> segments() const {
    MutexLock lock(&mu_);
    std::vector<MountedSegment> out;
    for (const Slot& s : slots_) {
      out.push_back({s.master_segment_id, s.router_id, s.memory->size(), s.memory->data()});
    }
    return out;
  }

  WorkerStats stats() const {
    MutexLock lock(&mu_);
    return stats_;
  }

  // The SSD tier's agent; null without a tier (stopped after Shutdown).
  TierAgent<C>* tier_agent() { return tier_agent_.get(); }
  // The copy tasks' agent; null with options.copy_agent false (stopped after
  // Shutdown; its stats still answer).
  CopyAgent<C>* copy_agent() { return copy_agent_.get(); }

  // Asks the master to move every replica here to other workers within
  // `deadline` (DrainWorker; bandwidth 0: the master's default, paced over the
  // deadline unless `urgent`), then asks
  // how it goes every kDrainPollInterval until the drain is no longer
  // DRAIN_RUNNING or `deadline` + kDrainGrace has passed, and returns the last
  // status (still DRAIN_RUNNING if the master never finished). The worker
  // stays mounted and serving, and its copy agent does the copying: the
  // caller calls Shutdown() after. A DrainStatus call that fails is retried
  // at the next interval. Errors: INVALID_ARGUMENT (deadline <= 0),
  // FAILED_PRECONDITION (shutting down), DrainWorker's error.
  absl::StatusOr<proto::DrainStatus> Drain(absl::Duration deadline,
                                           uint64_t bandwidth_bytes_per_sec, bool urgent = false) {
    if (deadline <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("Drain: the deadline must be > 0");
    }
    if (copy_agent_ == nullptr) {
      return absl::FailedPreconditionError("Drain: this worker runs no copy agent");
    }
    proto::DrainWorkerRequest req;
    req.set_worker_id(worker_id_);
    req.set_deadline_ms(static_cast<uint64_t>(absl::ToInt64Milliseconds(deadline)));
    req.set_bandwidth_bytes_per_sec(bandwidth_bytes_per_sec);
    req.set_urgent(urgent);
    ASSIGN_OR_RETURN(proto::DrainWorkerResponse started,
                     rpc::Call<rpc::DrainWorkerMethod>(*channel_, req, CallOpts()));
    proto::DrainStatus status = started.status();
    const absl::Time give_up = absl::Now() + deadline + kDrainGrace;
    proto::DrainStatusRequest ask;
    ask.set_worker_id(worker_id_);
    while (status.state() == proto::DRAIN_RUNNING && absl::Now() < give_up) {
      {
        MutexLock lock(&mu_);
        wake_.WaitWithTimeout(&mu_, kDrainPollInterval);
        if (stopping_) return absl::FailedPreconditionError("Drain: worker is shutting down");
      }
      auto r = rpc::Call<rpc::DrainStatusMethod>(*channel_, ask, CallOpts());
      if (r.ok()) status = r->status();
    }
    MC_DASSERT(status.state() != proto::DRAIN_RUNNING || absl::Now() >= give_up,
               "a running drain is returned only past its deadline");
    return status;
  }

 private:
  struct Slot {
    // Set once Init ran. Shared with the tier's operations in flight, so a
    // retired segment stays mapped until they end.
    std::shared_ptr<transport::SharedMemory> memory;
    transport::SegmentId router_id = 0;
    uint64_t master_segment_id = 0;  // 0: not mounted
  };

  Worker(WorkerOptions options, C* channel) : options_(std::move(options)), channel_(channel) {}

  static absl::Status Validate(const WorkerOptions& o) {
    if (o.segment_count == 0 || o.segment_count > rpc::kDirectoryEntriesMax) {
      return absl::InvalidArgumentError(absl::StrCat("WorkerOptions.segment_count must be in [1, ",
                                                     rpc::kDirectoryEntriesMax, "]"));
    }
    if (o.segment_bytes == 0) {
      return absl::InvalidArgumentError("WorkerOptions.segment_bytes must be > 0");
    }
    if (!o.serve_local && !o.serve_shm && !o.serve_tcp && !o.serve_rdma) {
      return absl::InvalidArgumentError("WorkerOptions: serve at least one transport");
    }
    if (o.rpc_timeout_ms <= 0 || o.initial_heartbeat_interval_ms <= 0) {
      return absl::InvalidArgumentError("WorkerOptions: timeouts and intervals must be > 0");
    }
    if (!o.tcp_path_hosts.empty()) {
      if (o.tcp_bind_host != "0.0.0.0" && o.tcp_bind_host != "::") {
        return absl::InvalidArgumentError(absl::StrCat(
            "WorkerOptions: tcp_path_hosts need tcp_bind_host 0.0.0.0 or :: (the listener "
            "answers on every address advertised), not ",
            o.tcp_bind_host));
      }
      transport::TcpTransport::Options t;
      t.advertise_hosts = o.tcp_path_hosts;
      for (const std::string& h : o.tcp_path_hosts) t.local_paths.push_back({h, 1});
      if (absl::Status s = transport::TcpTransport::CheckOptions(t); !s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("WorkerOptions.tcp_path_hosts: ", s.message()));
      }
    }
    if (o.rdma_paths.size() > transport_internal::kRdmaPathsMax) {
      return absl::InvalidArgumentError(absl::StrCat(
          "WorkerOptions: at most ", transport_internal::kRdmaPathsMax, " rdma_paths"));
    }
    return absl::OkStatus();
  }

  // Abstract socket names live in the network namespace, which processes in
  // different pid namespaces (containers, sandboxes) may share: the pid alone
  // does not make a name unique, so add 64 random bits.
  static std::string UniqueSocketName(std::string_view prefix) {
    std::random_device rd;
    const uint64_t r = (uint64_t{rd()} << 32) ^ rd();
    return absl::StrCat("@", AbslView(prefix), ".", ::getpid(), ".", absl::Hex(r));
  }

  static std::string HostName() {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    return host;
  }

  rpc::CallOptions CallOpts() const { return {.timeout_ns = options_.rpc_timeout_ms * 1'000'000}; }

  absl::Status MakeRouter() {
    std::vector<std::unique_ptr<transport_internal::AnyTransport>> list;
    if (options_.serve_local) {
      list.push_back(
          std::make_unique<transport_internal::AnyTransportOf<transport::LocalTransport>>(
              std::make_unique<transport::LocalTransport>()));
    }
    if (options_.serve_shm) {
      transport::ShmTransport::Options so;
      so.socket_name = UniqueSocketName("mcw");
      // A worker that checks tenants' ranges on TCP keeps tenants off shared
      // memory too: a mapping reaches the whole segment.
      so.auth = options_.auth;
      so.refuse_tenants =
          options_.auth != nullptr && options_.auth->SecretOf(auth::kClusterPrincipal) != nullptr;
      ASSIGN_OR_RETURN(auto shm, transport::ShmTransport::Create(std::move(so)));
      shm_endpoint_ = shm->LocalEndpoint();
      list.push_back(std::make_unique<transport_internal::AnyTransportOf<transport::ShmTransport>>(
          std::move(shm)));
    }
    // A worker that checks tenants' ranges on TCP keeps tenants off RDMA,
    // where no check is possible (rdma_route.h).
    // The RDMA control channel listens where TCP is reached: the first path
    // host when the TCP transport listens on every address.
    RETURN_IF_ERROR(client::AppendRdmaRoute(
        options_.serve_rdma, options_.require_rdma, options_.rdma_factory,
        options_.tcp_path_hosts.empty() ? options_.tcp_bind_host : options_.tcp_path_hosts.front(),
        &list, options_.auth,
        options_.auth != nullptr && options_.auth->SecretOf(auth::kClusterPrincipal) != nullptr,
        options_.rdma_paths));
    if (options_.serve_tcp) {
      transport::TcpTransport::Options t;
      t.bind_host = options_.tcp_bind_host;
      t.port = options_.tcp_port;
      t.advertise_hosts = options_.tcp_path_hosts;
      for (const std::string& h : options_.tcp_path_hosts) t.local_paths.push_back({h, 1});
      t.auth = options_.auth;
      if (options_.auth != nullptr && options_.auth->SecretOf(auth::kClusterPrincipal) != nullptr) {
        ASSIGN_OR_RETURN(auth::CapabilityKey key,
                         auth::CapabilityKey::FromCredentials(*options_.auth));
        t.access.key = std::make_shared<const auth::CapabilityKey>(key);
        t.access.target = [this](transport::SegmentId id) { return AccessTarget(id); };
      }
      tcp_index_ = list.size();
      ASSIGN_OR_RETURN(auto tcp, transport::TcpTransport::Create(std::move(t)));
      tcp_endpoint_ = tcp->LocalEndpoint();
      list.push_back(std::make_unique<transport_internal::AnyTransportOf<transport::TcpTransport>>(
          std::move(tcp)));
    }
    transport::RouterOptions ro;
    if (!options_.qos_link.empty()) {
      ASSIGN_OR_RETURN(
          ro, client::LinkArbiterRouterOptions(options_.qos_link, options_.qos_link_bytes_per_s,
                                               /*cls=*/1, list));
    }
    ASSIGN_OR_RETURN(router_, transport::Router::CreateFromList(ro, std::move(list)));
    return absl::OkStatus();
  }

  absl::Status Init() {
    RETURN_IF_ERROR(MakeRouter());
    ASSIGN_OR_RETURN(auto directory, transport::SharedMemory::Create(rpc::kDirectoryBytes));
    directory_.emplace(std::move(directory));
    ASSIGN_OR_RETURN(const transport::SegmentDesc dir,
                     router_->RegisterMemory(directory_->data(), directory_->size(),
                                             transport::MemoryLocation::SharedMemory()));
    directory_id_ = dir.id;
    worker_id_ = rpc::FormatWorkerId(router_->LocalEndpoint(), dir.id);
    MutexLock lock(&mu_);
    slots_.resize(options_.segment_count);
    for (size_t i = 0; i < slots_.size(); ++i) RETURN_IF_ERROR(FreshMemoryLocked(i));
    WriteDirectoryLocked();
    return MountAllLocked();
  }

  // New memfd for slot i, registered on every transport; the old memory is
  // unregistered (peers' SHM mappings keep it alive for them).
  absl::Status FreshMemoryLocked(size_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ASSIGN_OR_RETURN(
        transport::SharedMemory mem,
        transport::SharedMemory::Create(options_.segment_bytes, options_.reserve_memory
                                                                    ? transport::Backing::kReserved
                                                                    : transport::Backing::kLazy));
    ASSIGN_OR_RETURN(
        const transport::SegmentDesc d,
        router_->RegisterMemory(mem.data(), mem.size(), transport::MemoryLocation::SharedMemory()));
    Slot& s = slots_[i];
    if (s.router_id != 0) router_->UnregisterMemory(s.router_id).IgnoreError();
    s.memory = std::make_shared<transport::SharedMemory>(std::move(mem));
    s.router_id = d.id;
    s.master_segment_id = 0;
    return absl::OkStatus();
  }

  std::string SegmentName(size_t i) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (options_.segment_name.empty()) return absl::StrCat("seg-", i, "-g", generation_);
    if (i == 0) return options_.segment_name;
    return absl::StrCat(options_.segment_name, "#", i);
  }

  absl::Status MountAllLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::Status status;
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (s.master_segment_id != 0) continue;
      proto::MountSegmentRequest req;
      proto::SegmentDescriptor* d = req.mutable_segment();
      d->set_worker_id(worker_id_);
      d->set_name(SegmentName(i));
      d->set_size_bytes(s.memory->size());
      d->mutable_endpoint()->set_host_id(options_.host_id);
      if (tcp_endpoint_.starts_with("tcp://")) {
        d->mutable_endpoint()->set_tcp_address(tcp_endpoint_.substr(6));
      }
      d->mutable_endpoint()->set_shm_name(shm_endpoint_);
      // What a client opens the segment by (DescribeSegments hands it out).
      d->mutable_endpoint()->set_router_endpoint(router_->LocalEndpoint());
      d->mutable_endpoint()->set_router_segment_id(s.router_id);
      auto r = rpc::Call<rpc::MountSegmentMethod>(*channel_, req, CallOpts());
      if (!r.ok()) {
        status.Update(r.status());
        continue;
      }
      MC_ASSERT(r->segment_id() != 0, "the master assigned segment id 0");
      s.master_segment_id = r->segment_id();
      if (r->heartbeat_interval_ms() > 0) {
        stats_.heartbeat_interval_ms = static_cast<int64_t>(r->heartbeat_interval_ms());
      }
    }
    WriteDirectoryLocked();
    return status;
  }

  // The TCP transport's id of router segment `router_id`, or 0.
  uint64_t TcpIdOf(transport::SegmentId router_id) const {
    const auto sub = transport_internal::UnpackRouterId(router_id);
    return sub.has_value() && tcp_index_ < sub->size() ? (*sub)[tcp_index_] : 0;
  }

  // What a capability for TCP segment `id` must name (TcpAccessControl).
  std::optional<transport_internal::CapabilityTarget> AccessTarget(transport::SegmentId id) const {
    MutexLock lock(&access_mu_);
    if (id == tcp_directory_id_) return transport_internal::CapabilityTarget{"", 0, true};
    auto it = tcp_to_master_.find(id);
    if (it == tcp_to_master_.end()) return std::nullopt;
    return transport_internal::CapabilityTarget{access_scope_, it->second, false};
  }

  void WriteDirectoryLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    {
      // The mounted segments, as tenants' capabilities name them.
      MutexLock lock(&access_mu_);
      tcp_to_master_.clear();
      access_scope_ = worker_id_;
      tcp_directory_id_ = TcpIdOf(directory_id_);
      for (const Slot& s : slots_) {
        const uint64_t tcp = TcpIdOf(s.router_id);
        if (s.master_segment_id != 0 && tcp != 0) tcp_to_master_[tcp] = s.master_segment_id;
      }
    }
    if (!directory_.has_value()) return;  // Init failed before creating it
    rpc::Directory d;
    d.generation = ++directory_generation_;
    for (const Slot& s : slots_) {
      if (s.master_segment_id != 0) {
        d.entries.push_back({s.master_segment_id, s.router_id, s.memory->size()});
      }
    }
    rpc::EncodeDirectory(d, std::span<uint8_t, rpc::kDirectoryBytes>(
                                static_cast<uint8_t*>(directory_->data()), rpc::kDirectoryBytes));
  }

  absl::Status HeartbeatLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    proto::HeartbeatRequest req;
    req.set_worker_id(worker_id_);
    req.set_sequence(++sequence_);
    auto r = rpc::Call<rpc::HeartbeatMethod>(*channel_, req, CallOpts());
    if (!r.ok()) {
      ++stats_.heartbeats_failed;
      stats_.last_heartbeat_ok = false;
      return r.status();
    }
    ++stats_.heartbeats_ok;
    stats_.last_heartbeat_ok = true;
    if (r->heartbeat_interval_ms() > 0) {
      stats_.heartbeat_interval_ms = static_cast<int64_t>(r->heartbeat_interval_ms());
    }
    const bool unmounted = std::any_of(slots_.begin(), slots_.end(),
                                       [](const Slot& s) { return s.master_segment_id == 0; });
    if (!r->remount_required() && !unmounted) return absl::OkStatus();
    if (r->remount_required()) {
      ++stats_.remounts;
      ++generation_;
      // The master forgot every SSD copy here too. A record Reset cannot
      // remove only wastes tier space: never let it block the remount.
      if (tier_agent_ != nullptr) tier_agent_->Reset().IgnoreError();
      for (size_t i = 0; i < slots_.size(); ++i) RETURN_IF_ERROR(FreshMemoryLocked(i));
    }
    return MountAllLocked();
  }

  std::optional<SegmentMemory> Lookup(uint64_t master_segment_id) {
    MutexLock lock(&mu_);
    for (const Slot& s : slots_) {
      if (s.master_segment_id == master_segment_id && s.memory != nullptr) {
        return SegmentMemory{
            s.memory,
            std::span<std::byte>(static_cast<std::byte*>(s.memory->data()), s.memory->size())};
      }
    }
    return std::nullopt;
  }

  void HeartbeatLoop() {
    MutexLock lock(&mu_);
    for (;;) {
      const int64_t interval_ms = stats_.heartbeat_interval_ms > 0
                                      ? stats_.heartbeat_interval_ms
                                      : options_.initial_heartbeat_interval_ms;
      wake_.WaitWithTimeout(&mu_, absl::Milliseconds(interval_ms));
      if (stopping_) return;
      HeartbeatLocked().IgnoreError();  // counted in stats; retried next interval
    }
  }

  const WorkerOptions options_;
  C* const channel_;
  std::unique_ptr<transport::Router> router_;
  std::string shm_endpoint_;
  std::string tcp_endpoint_;
  std::string worker_id_;  // fixed after Init
  transport::SegmentId directory_id_ = 0;
  std::optional<transport::SharedMemory> directory_;

  size_t tcp_index_ = transport_internal::kRouterTransportsMax;  // in the router; fixed after Init
  // Tenants' access (AccessTarget): TCP segment id -> master segment id.
  mutable Mutex access_mu_;
  absl::flat_hash_map<uint64_t, uint64_t> tcp_to_master_ ABSL_GUARDED_BY(access_mu_);
  uint64_t tcp_directory_id_ ABSL_GUARDED_BY(access_mu_) = 0;
  // worker_id_, for connection threads (which may start before Init sets it).
  std::string access_scope_ ABSL_GUARDED_BY(access_mu_);

  mutable Mutex mu_;
  CondVar wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t directory_generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
  WorkerStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread heartbeat_;
  // Set in Start; stopped by Shutdown/Abandon after the heartbeat thread
  // ends; destroyed with the worker.
  std::unique_ptr<TierAgent<C>> tier_agent_;
  // Set in Start (with options.copy_agent); stopped by Shutdown/Abandon.
  std::unique_ptr<CopyAgent<C>> copy_agent_;
};

}  // namespace mooncake::worker

#endif  // MOONCAKE_STORE_WORKER_WORKER_H_
