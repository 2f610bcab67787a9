// StoreNode: one store process, assembled for its role (store_node_options.h):
//
//   all     Master + MasterService + RpcServer on `listen`, and one
//           Worker<TcpChannel> joined to that server over loopback
//   master  Master + MasterService + RpcServer on `listen`
//   worker  Worker<TcpChannel> joined to `master`
//
// plus, unless http_enabled is false, an HttpServer on `http` serving
//   /metrics  Prometheus text of the node's one MetricsRegistry: the master's
//             families (mooncake_master_*), per-method RPC latency and codes
//             (mooncake_rpc_server_* on the master, mooncake_rpc_client_* for
//             the worker's calls), the worker's segments and heartbeats
//             (mooncake_worker_*) and mooncake_node_* (role, uptime, health)
//   /health   200 "ok" while serving; 503 and the reason otherwise (starting,
//             a worker segment not mounted, the worker's heartbeats failing,
//             drained, shutting down)
//   POST /drain?deadline_ms=N[&bandwidth=B]    (a node with a worker) asks the
//             master to move this worker's replicas elsewhere (Worker::Drain),
//             answers the DrainStatus as JSON (drain.h) and unmounts the
//             worker; the node keeps serving HTTP (/health 503 "drained")
//             until it is stopped (SIGTERM). Bad query: 400 and why.
//   POST /preempt?deadline_ms=N[&bandwidth=B]  the same for a cloud's spot
//             notice, with a timeline (ms since the notice) in the JSON.
//             Both run on the HTTP thread: /health and /metrics answer after
//             the drain ends (deadline_ms + worker::kDrainGrace at most).
//
//   ASSIGN_OR_RETURN(auto node, StoreNode::Start(options));
//   ... node->rpc_address(), node->http_address() ...
//   node->Shutdown();   // or the destructor
//
// Shutdown (graceful, idempotent), in this order:
//   1. /health turns 503 "shutting down" (load balancers stop sending);
//   2. the worker unmounts its segments: the master drops their replicas, so
//      new gets answer NOT_FOUND and new puts go elsewhere or fail with
//      RESOURCE_EXHAUSTED; transfers already holding locations keep working
//      because the memory stays served;
//   3. drain_ms for those transfers to finish;
//   4. the RPC server stops: running handlers finish, callers of anything
//      still queued see UNAVAILABLE (never a half-done operation: a put
//      whose PutEnd is lost is revoked by the master's put timeout);
//   5. the worker's transports stop, the ticker and the HTTP server stop.
//
// Thread-safety: Start/Shutdown/destructor from the owning thread (Shutdown
// may also come from a signal-watching thread, once); everything else from
// any thread.
#ifndef MOONCAKE_STORE_NODE_STORE_NODE_H_
#define MOONCAKE_STORE_NODE_STORE_NODE_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/alloc/kv_allocator.h"
#include "mooncake/alloc/tlsf_allocator.h"
#include "mooncake/alloc/variant_allocator.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/base/trace.h"
#include "mooncake/index/lru_policy.h"
#include "mooncake/index/s3fifo_policy.h"
#include "mooncake/index/variant_policy.h"
#include "mooncake/store/ha/ha_master.h"
#include "mooncake/store/ha/leader_resolver.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/master/master_service.h"
#include "mooncake/store/master/tenant_guard.h"
#include "mooncake/store/node/drain.h"
#include "mooncake/store/node/http_server.h"
#include "mooncake/store/node/process_stats.h"
#include "mooncake/store/node/status_line.h"
#include "mooncake/store/node/store_node_options.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/rpc/tcp_channel.h"
#include "mooncake/store/rpc/tcp_server.h"
#include "mooncake/store/worker/worker.h"
#include "mooncake/tier/ssd_tier.h"
#include "mooncake/tier/tier.h"
#include "mooncake/transport/shm_transport.h"

namespace mooncake::node {

struct NodeHealth {
  bool ok = false;
  std::string reason;  // "ok" when ok
};

// The master's policy: the one StoreNodeOptions::eviction_policy names,
// chosen when the node starts.
using MasterPolicy =
    index::VariantPolicy<index::LruPolicy<master::ObjectKey, master::ObjectKeyHash>,
                         index::S3FifoPolicy<master::ObjectKey, master::ObjectKeyHash>>;

inline MasterPolicy MakeMasterPolicy(EvictionPolicyKind kind) {
  switch (kind) {
    case EvictionPolicyKind::kLru:
      return MasterPolicy(index::LruPolicy<master::ObjectKey, master::ObjectKeyHash>());
    case EvictionPolicyKind::kS3Fifo:
      return MasterPolicy(index::S3FifoPolicy<master::ObjectKey, master::ObjectKeyHash>());
  }
  MC_ASSERT(false, "EvictionPolicyKind out of range (ValidateStoreNodeOptions refuses it)");
  return MasterPolicy();
}

// The segments' allocator: the one StoreNodeOptions::allocator names, chosen
// when the node starts (the master is instantiated once, over the variant).
using SegmentAllocator = alloc::VariantAllocator<alloc::TlsfAllocator, alloc::KvAllocator<>>;

// Builds each mounted segment's allocator: TLSF with the pool's default
// granule, or the KV composition of `kv_block_bytes` (empty:
// kDefaultKvBlockBytes) over that same TLSF.
inline master::SegmentPool<SegmentAllocator>::Factory MakeSegmentAllocatorFactory(
    AllocatorKind kind, std::vector<uint64_t> kv_block_bytes) {
  using TlsfTraits = master::SegmentAllocatorTraits<alloc::TlsfAllocator>;
  if (kind == AllocatorKind::kTlsf) {
    return [](uint64_t capacity_bytes) -> absl::StatusOr<SegmentAllocator> {
      ASSIGN_OR_RETURN(alloc::TlsfAllocator tlsf, TlsfTraits::Make(capacity_bytes));
      return SegmentAllocator(std::move(tlsf));
    };
  }
  MC_ASSERT(kind == AllocatorKind::kKv, "AllocatorKind out of range");
  if (kv_block_bytes.empty()) {
    absl::StatusOr<std::vector<uint64_t>> d = ParseKvBlockBytes(kDefaultKvBlockBytes);
    MC_ASSERT(d.ok(), "kDefaultKvBlockBytes parses");
    kv_block_bytes = *std::move(d);
  }
  return [blocks = std::move(kv_block_bytes)](
             uint64_t capacity_bytes) -> absl::StatusOr<SegmentAllocator> {
    ASSIGN_OR_RETURN(alloc::TlsfAllocator tlsf, TlsfTraits::Make(capacity_bytes));
    ASSIGN_OR_RETURN(alloc::KvAllocator<> kv,
                     alloc::KvAllocator<>::Create(std::move(tlsf),
                                                  alloc::SizeClassOptions{.class_bytes = blocks}));
    return SegmentAllocator(std::move(kv));
  };
}

class StoreNode {
 public:
  using MasterT = master::Master<SegmentAllocator, MasterPolicy>;
  using WorkerT = worker::Worker<rpc::TcpChannel>;

  // Validates `options`, builds the role's pieces and starts serving.
  // Errors: INVALID_ARGUMENT (options), ALREADY_EXISTS (a port in use, naming
  // the flag), UNAVAILABLE (worker: the master is unreachable), others from
  // the pieces, each prefixed with what was being started.
  static absl::StatusOr<std::unique_ptr<StoreNode>> Start(StoreNodeOptions options) {
    RETURN_IF_ERROR(ValidateStoreNodeOptions(options));
    std::unique_ptr<StoreNode> n(new StoreNode(std::move(options)));
    RETURN_IF_ERROR(n->CheckLazyPool());
    RETURN_IF_ERROR(n->LoadAuth());
    RETURN_IF_ERROR(n->RegisterNodeMetrics());
    if (n->options_.role != Role::kWorker) RETURN_IF_ERROR(n->StartMaster());
    if (n->options_.role != Role::kMaster) RETURN_IF_ERROR(n->StartWorker());
    if (n->options_.http_enabled) RETURN_IF_ERROR(n->StartHttp());
    n->serving_.store(true, std::memory_order_release);
    return n;
  }

  StoreNode(const StoreNode&) = delete;
  StoreNode& operator=(const StoreNode&) = delete;
  ~StoreNode() { Shutdown().IgnoreError(); }

  // See the header comment. Returns the worker's unmount status (OK when
  // there is no worker).
  absl::Status Shutdown() {
    if (shut_down_.exchange(true, std::memory_order_acq_rel)) return absl::OkStatus();
    // release: /health readers see it before any piece goes away.
    shutting_down_.store(true, std::memory_order_release);
    absl::Status status;
    // Parked TierSync polls answer now (the worker's tier agent stops next).
    if (master_ != nullptr) master_->StopTierWaits();
    if (worker_ != nullptr) status = worker_->Shutdown();
    if (server_ != nullptr && options_.drain_ms > 0) {
      absl::SleepFor(absl::Milliseconds(options_.drain_ms));
    }
    if (ha_ != nullptr) ha_->Stop();  // hands over to a standby first
    if (server_ != nullptr) server_->Stop();
    {
      WriterMutexLock lock(&life_mu_);  // /health and /metrics may be reading it
      worker_.reset();
      worker_channel_.reset();
    }
    if (service_ != nullptr) service_->StopTicker();
    if (http_ != nullptr) http_->Stop();
    return status;
  }

  // Asks the master to move this node's worker's replicas elsewhere and
  // waits for the drain (Worker::Drain); the worker stays mounted: Shutdown
  // (or RetireWorker) next. FAILED_PRECONDITION: no worker, shutting down,
  // or already retired.
  absl::StatusOr<store::proto::DrainStatus> DrainWorker(absl::Duration deadline,
                                                        uint64_t bandwidth_bytes_per_sec,
                                                        bool urgent = false) {
    ReaderMutexLock lock(&life_mu_);  // Shutdown resets worker_ only after the drain
    if (shutting_down_.load(std::memory_order_acquire)) {
      return absl::FailedPreconditionError("the node is shutting down");
    }
    if (worker_ == nullptr) {
      return absl::FailedPreconditionError(
          "this node runs no worker (--role=master): nothing to drain");
    }
    if (retired_.load(std::memory_order_acquire)) {
      return absl::FailedPreconditionError("the worker already left the pool (drained)");
    }
    return worker_->Drain(deadline, bandwidth_bytes_per_sec, urgent);
  }

  // Unmounts the worker (Worker::Shutdown) but keeps the node serving HTTP
  // and, on an all-in-one node, the master. Idempotent.
  absl::Status RetireWorker() {
    ReaderMutexLock lock(&life_mu_);
    if (worker_ == nullptr) return absl::OkStatus();
    // release: /health readers see it with the unmount.
    retired_.store(true, std::memory_order_release);
    return worker_->Shutdown();
  }

  // The worker left the pool (RetireWorker: POST /drain or /preempt).
  bool worker_retired() const { return retired_.load(std::memory_order_acquire); }

  Role role() const { return options_.role; }
  // "host:port" of the master RPC server ("" on a worker-only node).
  std::string rpc_address() const { return server_ ? server_->address() : ""; }
  // The master this node's worker joined ("" on a master-only node).
  std::string master_address() const {
    if (options_.role == Role::kWorker) {
      if (!options_.master_etcd.empty()) {
        return absl::StrCat("the leader of HA cluster '", options_.master_cluster, "' at ",
                            options_.master_etcd);
      }
      return options_.master.ToString();
    }
    return options_.role == Role::kAll ? rpc_address() : "";
  }
  std::string http_address() const { return http_ ? http_->address() : ""; }
  MetricsRegistry& metrics() { return metrics_; }
  MasterT* master() { return master_.get(); }
  // With --ha_etcd: this node's HA state (null otherwise).
  ha::HaMaster<MasterT>* ha() { return ha_.get(); }
  WorkerT* worker() { return worker_.get(); }
  const StoreNodeOptions& options() const { return options_; }

  NodeHealth Health() const {
    ReaderMutexLock lock(&life_mu_);
    // acquire: pairs with the release stores in Start and Shutdown.
    if (shutting_down_.load(std::memory_order_acquire)) return {false, "shutting down"};
    if (!serving_.load(std::memory_order_acquire)) return {false, "starting"};
    if (retired_.load(std::memory_order_acquire)) {
      return {false, "drained: the worker left the pool (POST /drain or /preempt); stop the node"};
    }
    if (worker_ != nullptr) {
      size_t mounted = 0;
      const auto segments = worker_->segments();
      for (const worker::MountedSegment& s : segments) mounted += s.master_segment_id != 0;
      if (mounted < segments.size()) {
        return {false, absl::StrCat("worker not mounted: ", mounted, " of ", segments.size(),
                                    " segments mounted with the master at ", master_address(),
                                    " (unreachable or rejecting; retried every heartbeat)")};
      }
      if (!MasterReachable(worker_->stats())) {
        return {false, absl::StrCat("worker: heartbeats to the master at ", master_address(),
                                    " are failing")};
      }
    }
    return {true, "ok"};
  }

  // Prometheus text (refreshes the gauges first).
  std::string RenderMetrics() {
    RefreshMetrics();
    return metrics_.RenderPrometheus();
  }

  NodeSnapshot Snapshot() {
    ReaderMutexLock lock(&life_mu_);
    NodeSnapshot s;
    s.time_ns = MonotonicClock::Get().NowNs();
    if (master_ != nullptr) {
      const master::MasterStats st = master_->Stats();
      s.has_master = true;
      s.objects = st.objects;
      s.used_bytes = st.used_bytes;
      s.capacity_bytes = st.capacity_bytes;
      s.workers = st.workers;
      s.puts_committed = CounterValue("mooncake_master_puts_total", {{"result", "committed"}});
      s.gets = CounterValue("mooncake_master_gets_total", {{"result", "hit"}}) +
               CounterValue("mooncake_master_gets_total", {{"result", "miss"}});
      s.evictions = CounterValue("mooncake_master_evictions_total", {});
      for (const master::SegmentView& v : master_->Segments()) ++s.worker_segments[v.worker_id];
    }
    if (WorkerT* w = worker_.get(); w != nullptr) {
      s.has_worker = true;
      s.master_address = master_address();
      for (const worker::MountedSegment& m : w->segments()) {
        ++s.segments_total;
        if (m.master_segment_id != 0) {
          ++s.segments_mounted;
          s.segment_bytes_total += m.size_bytes;
        }
      }
      const worker::WorkerStats ws = w->stats();
      s.heartbeats_ok = ws.heartbeats_ok;
      s.heartbeats_failed = ws.heartbeats_failed;
      s.remounts = ws.remounts;
      if (auto* agent = w->tier_agent(); agent != nullptr) {
        const tier::TierStats ts = agent->tier_stats();
        s.has_tier = true;
        s.tier_objects = ts.objects;
        s.tier_used_bytes = ts.used_bytes;
        s.tier_capacity_bytes = ts.capacity_bytes;
        s.tier_syncs = ts.syncs;
        s.tier_io_errors = ts.io_errors;
        s.tier_failed_syncs = agent->tier().info().failed_syncs;
        s.tier_corrupt_records = ts.corrupt_records;
      }
      if (auto* agent = w->copy_agent(); agent != nullptr) {
        const worker::CopyAgentStats cs = agent->stats();
        s.copies_done = cs.tasks_done;
        s.copies_failed = cs.tasks_failed;
        s.copied_bytes = cs.bytes_copied;
      }
    }
    return s;
  }

 private:
  explicit StoreNode(StoreNodeOptions options)
      : options_(std::move(options)), started_ns_(MonotonicClock::Get().NowNs()) {}

  // Reachable when the most recent heartbeat got through; before the first
  // one, when none has failed yet. (Comparing counters between probes said
  // "ok" for a probe that saw an old success and newer failures.)
  static bool MasterReachable(const worker::WorkerStats& ws) {
    if (ws.heartbeats_ok + ws.heartbeats_failed == 0) return true;
    return ws.last_heartbeat_ok;
  }

  absl::Status StartMaster() {
    const master::MasterOptions mo = MasterOptionsFromNode();
    if (!options_.ha_etcd.empty()) return StartHaMaster(mo);
    auto m =
        MasterT::Create(mo, &MonotonicClock::Get(), &metrics_,
                        MakeSegmentAllocatorFactory(options_.allocator, options_.kv_block_bytes),
                        MakeMasterPolicy(options_.eviction_policy));
    if (!m.ok()) return Context("master", m.status());
    master_ = std::move(*m);
    service_ = std::make_unique<master::MasterService<MasterT>>(
        master_.get(), master::MasterServiceOptions{.tick_interval_ms = options_.tick_interval_ms});
    registry_ = std::make_unique<rpc::ServiceRegistry>(&metrics_);
    if (absl::Status s = service_->Register(registry_.get()); !s.ok()) return Context("master", s);
    RETURN_IF_ERROR(StartRpcServer(mo));
    service_->StartTicker();
    return absl::OkStatus();
  }

  // One master of an HA cluster (docs/ha.md): serves once elected.
  absl::Status StartHaMaster(master::MasterOptions mo) {
    // Copies between workers are refused with HA (docs/elasticity.md): no
    // planner starts any.
    mo.replication.repair = false;
    mo.replication.hot_reads = 0;
    mo.relocation.enabled = false;  // its moves are copies
    ha::HaMasterOptions ho;
    ho.etcd = options_.ha_etcd;
    ho.cluster = options_.ha_cluster;
    ho.lease_ttl_ms = options_.ha_lease_ttl_ms;
    ho.tick_interval_ms = options_.tick_interval_ms;
    if (mo.hold_write_windows) {
      ho.hold_window_ns = static_cast<int64_t>(mo.put_timeout_ms + 1'000) * 1'000'000;
    }
    ho.default_tenant = mo.default_tenant;
    ho.on_event = options_.on_event;
    const EvictionPolicyKind policy = options_.eviction_policy;
    const AllocatorKind allocator = options_.allocator;
    const std::vector<uint64_t> blocks = options_.kv_block_bytes;
    ha_ = std::make_unique<ha::HaMaster<MasterT>>(
        ho,
        [this, mo, policy, allocator, blocks]() {
          return MasterT::Create(mo, &MonotonicClock::Get(), &metrics_,
                                 MakeSegmentAllocatorFactory(allocator, blocks),
                                 MakeMasterPolicy(policy));
        },
        &metrics_);
    registry_ = std::make_unique<rpc::ServiceRegistry>(&metrics_);
    if (absl::Status s = ha_->Register(registry_.get()); !s.ok()) return Context("HA master", s);
    RETURN_IF_ERROR(StartRpcServer(mo));
    if (absl::Status s = ha_->Start(server_->address()); !s.ok()) {
      return Context(absl::StrCat("HA master (--ha_etcd=", options_.ha_etcd, ")"), s);
    }
    return absl::OkStatus();
  }

  absl::Status LoadAuth() {
    if (options_.auth_token_file.empty()) return absl::OkStatus();
    auto creds = auth::LoadCredentials(options_.auth_token_file);
    if (!creds.ok()) return Context("--auth_token_file", creds.status());
    if ((*creds)->SecretOf(auth::kClusterPrincipal) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth_token_file=", options_.auth_token_file,
                       ": a master's or worker's token file must list 'cluster' (it proves that "
                       "to the master, and /drain and /preempt take its secret)"));
    }
    auth_ = *std::move(creds);
    return absl::OkStatus();
  }

  // POST actions with a token file: "Authorization: Bearer <cluster secret>".
  std::optional<HttpResponse> RefuseAdmin(const HttpRequest& r) const {
    if (auth_ == nullptr) return std::nullopt;
    if (auth::BearerMatches(auth::BearerToken(r.Header("authorization")), *auth_,
                            auth::kClusterPrincipal)) {
      return std::nullopt;
    }
    return HttpResponse{.status = 401,
                        .body = absl::StrCat(r.path,
                                             " needs \"Authorization: Bearer <the cluster secret "
                                             "of --auth_token_file>\"\n")};
  }

  absl::Status StartRpcServer(const master::MasterOptions& mo) {
    rpc::RpcServerOptions so;
    so.auth = auth_;
    if (auth_ != nullptr) RETURN_IF_ERROR(master::GuardMasterRegistry(registry_.get(), *auth_));
    so.host = options_.listen.host;
    so.port = options_.listen.port;
    so.io_threads = options_.rpc_io_threads;
    // TierSync and CopySync long polls park handler threads: give them their own.
    so.worker_threads =
        options_.rpc_worker_threads + mo.tier.max_waiting_polls + mo.replication.max_waiting_polls;
    server_ = std::make_unique<rpc::RpcServer>(registry_.get(), so);
    if (absl::Status s = server_->Start(); !s.ok()) {
      return Context(absl::StrCat("--listen=", options_.listen.ToString()), s);
    }
    return absl::OkStatus();
  }

  master::MasterOptions MasterOptionsFromNode() const {
    master::MasterOptions mo;
    mo.max_object_bytes = options_.max_object_bytes;
    mo.default_replica_count = options_.replicas;
    mo.max_replica_count = std::max<uint32_t>(8, options_.replicas);
    mo.high_watermark = options_.high_watermark;
    mo.low_watermark = options_.low_watermark;
    mo.default_lease_ms = options_.default_lease_ms;
    mo.max_lease_ms = std::max(mo.max_lease_ms, options_.default_lease_ms);
    mo.tenants = options_.tenants;
    mo.tier.offload_min_bytes = options_.ssd_offload_min_bytes;
    mo.membership.heartbeat_interval_ms = options_.heartbeat_interval_ms;
    mo.membership.heartbeat_timeout_ms = options_.heartbeat_timeout_ms;
    mo.replication.repair = options_.repair_within_ms > 0;
    if (mo.replication.repair) mo.replication.repair_within_ms = options_.repair_within_ms;
    mo.replication.hot_reads = options_.hot_reads;
    mo.replication.hot_window_ms = options_.hot_window_ms;
    mo.replication.hot_max_replicas = options_.hot_max_replicas;
    mo.replication.hot_max_fraction = options_.hot_max_fraction;
    mo.replication.drain_pace = options_.drain_pace;
    mo.relocation.enabled = options_.relocation;
    mo.hold_write_windows = !options_.auth_token_file.empty();  // tenants' write capabilities
    return mo;
  }

  // Before anything starts (a master would otherwise come up and go down).
  absl::Status CheckLazyPool() const {
    if (options_.role == Role::kMaster || options_.reserve_memory) return absl::OkStatus();
    // Lazy pages come on first write: a pool larger than the host fills past
    // its memory before the master's eviction (which counts segment bytes)
    // starts, and ends in the OOM killer or SIGBUS. Refuse what can never fit.
    const uint64_t pool =
        options_.segment_bytes > std::numeric_limits<uint64_t>::max() / options_.segments
            ? std::numeric_limits<uint64_t>::max()
            : options_.segment_bytes * options_.segments;
    const uint64_t host = transport::shm_internal::PhysicalMemoryBytes();
    if (host != 0 && pool > host) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--segments x --segment_bytes = ", HumanBytes(pool), " is more than this host's memory (",
          HumanBytes(host),
          ", cgroup memory.max included); with --reserve_memory=false the segments would fill "
          "past memory before eviction starts. Use smaller segments"));
    }
    return absl::OkStatus();
  }

  absl::Status StartWorker() {
    const std::string master = master_address();
    rpc::TcpChannelOptions co;
    co.metrics = &metrics_;
    co.auth = auth_;
    if (!options_.master_etcd.empty()) {
      auto resolve = ha::LeaderResolver(options_.master_etcd, options_.master_cluster);
      if (!resolve.ok()) return Context("worker: --master", resolve.status());
      co.resolve = *std::move(resolve);
      co.connect_timeout_ns = std::max<int64_t>(co.connect_timeout_ns, 10'000'000'000);
    }
    auto channel = rpc::TcpChannel::Connect(master, co);
    if (!channel.ok()) {
      return Context(absl::StrCat("worker: joining the master at ", master), channel.status());
    }
    worker_channel_ = std::move(*channel);
    worker::WorkerOptions wo;
    wo.segment_count = options_.segments;
    wo.segment_bytes = options_.segment_bytes;
    wo.reserve_memory = options_.reserve_memory;
    wo.serve_rdma =
        options_.rdma == RdmaUse::kOn || (options_.rdma == RdmaUse::kAuto && client::kRdmaBuilt);
    wo.require_rdma = options_.rdma == RdmaUse::kOn;
    wo.serve_shm = options_.serve_shm;
    wo.host_id = options_.host_id;
    wo.tcp_bind_host = options_.worker_host;
    wo.tcp_port = options_.worker_port;
    if (!options_.worker_path_hosts.empty()) {
      wo.tcp_bind_host = options_.worker_host.find(':') != std::string::npos ? "::" : "0.0.0.0";
      wo.tcp_path_hosts = options_.worker_path_hosts;
    }
    wo.rdma_paths = options_.rdma_paths;
    wo.auth = auth_;
    wo.qos_link = options_.qos_link;
    wo.qos_link_bytes_per_s = options_.qos_link_bytes_per_s;
    if (!options_.ssd_path.empty()) {
      worker::TierAgentOptions t;
      t.tier.paths = {options_.ssd_path};
      t.tier.capacity_bytes_per_file = options_.ssd_bytes;
      t.tier.compression = options_.ssd_compression;
      wo.tier = std::move(t);
    }
    auto w = WorkerT::Start(wo, worker_channel_.get());
    if (!w.ok()) return Context(absl::StrCat("worker (master ", master, ")"), w.status());
    worker_ = std::move(*w);
    return absl::OkStatus();
  }

  absl::Status StartHttp() {
    http_ = std::make_unique<HttpServer>(
        HttpServerOptions{.host = options_.http.host, .port = options_.http.port});
    RETURN_IF_ERROR(http_->Handle("/metrics", [this](const HttpRequest&) {
      return HttpResponse{.body = RenderMetrics(),
                          .content_type = "text/plain; version=0.0.4; charset=utf-8"};
    }));
    RETURN_IF_ERROR(http_->Handle("/health", [this](const HttpRequest&) {
      const NodeHealth h = Health();
      return HttpResponse{.status = h.ok ? 200 : 503, .body = h.reason + "\n"};
    }));
    for (const bool preempt : {false, true}) {
      RETURN_IF_ERROR(http_->Handle(preempt ? "/preempt" : "/drain",
                                    [this, preempt](const HttpRequest& r) {
                                      if (auto refused = RefuseAdmin(r)) return *refused;
                                      return HandleDrain(r, preempt);
                                    },
                                    {.action = true}));
    }
    RETURN_IF_ERROR(http_->Handle("/trace",
                                  [this](const HttpRequest& r) {
                                    if (auto refused = RefuseAdmin(r)) return *refused;
                                    return HandleTrace(r);
                                  },
                                  {.action = true}));
    if (absl::Status s = http_->Start(); !s.ok()) {
      return Context(absl::StrCat("--http=", options_.http.ToString()), s);
    }
    return absl::OkStatus();
  }

  // POST /trace?seconds=N (1..60, default 5): turns the transport's span
  // recording on (it stays on) and answers the spans of the last N seconds as
  // Chrome trace JSON (ui.perfetto.dev, chrome://tracing; docs/transport.md,
  // "Tracing"). The first call turns it on and returns little: call again
  // after N seconds. POST /trace?off turns it off. Handlers run on the
  // server's one poll thread, so this never sleeps.
  static HttpResponse HandleTrace(const HttpRequest& req) {
    const auto seconds = QueryParameter(req.query, "seconds");
    const auto off = QueryParameter(req.query, "off");
    if (!seconds.ok() || !off.ok()) return {.status = 400, .body = "malformed query\n"};
    if (off->has_value()) {
      trace::Enable(false);
      return {.body = "tracing off\n"};
    }
    int64_t n = 5;
    if (seconds->has_value() && (!absl::SimpleAtoi(**seconds, &n) || n < 1 || n > 60)) {
      return {.status = 400, .body = "seconds must be in [1, 60]\n"};
    }
    trace::Enable(true);
    std::ostringstream json;
    trace::DumpChromeJson(json, absl::Seconds(n));
    return {.body = json.str(), .content_type = "application/json"};
  }

  // POST /drain and /preempt (see the header comment).
  HttpResponse HandleDrain(const HttpRequest& r, bool preempt) {
    const absl::Time notice = absl::Now();
    absl::StatusOr<DrainParams> p = ParseDrainQuery(r.query);
    if (!p.ok()) return {.status = 400, .body = absl::StrCat(p.status().message(), "\n")};
    const auto since_ms = [notice] { return absl::ToInt64Milliseconds(absl::Now() - notice); };
    Event(absl::StrCat(preempt ? "preemption notice" : "drain asked", ": deadline ", p->deadline_ms,
                       " ms"));
    PreemptTimeline t;
    t.drain_start_ms = since_ms();
    absl::StatusOr<store::proto::DrainStatus> s =
        DrainWorker(absl::Milliseconds(p->deadline_ms), p->bandwidth_bytes_per_sec, preempt);
    if (!s.ok()) {
      const int code = absl::IsFailedPrecondition(s.status()) ? 409
                       : absl::IsUnimplemented(s.status())    ? 501
                       : absl::IsUnavailable(s.status()) || absl::IsDeadlineExceeded(s.status())
                           ? 503
                           : 500;
      return {.status = code, .body = absl::StrCat("drain: ", s.status().ToString(), "\n")};
    }
    t.drain_done_ms = since_ms();
    t.bytes_moved = s->bytes_moved();
    Event(DrainSummaryLine(*s));
    const absl::Status unmount = RetireWorker();
    if (!unmount.ok()) Event(absl::StrCat("after the drain, unmount: ", unmount.ToString()));
    t.done_ms = since_ms();
    if (preempt) {
      Event(absl::StrCat("preemption timeline (ms since the notice): drain start ",
                         t.drain_start_ms, ", drain done ", t.drain_done_ms, ", unmounted ",
                         t.done_ms, "; ", t.bytes_moved, " bytes moved"));
    }
    return {.body = preempt ? PreemptJson(*s, t, unmount.ok()) : DrainStatusJson(*s, unmount.ok()),
            .content_type = "application/json"};
  }

  void Event(const std::string& line) const {
    if (options_.on_event) options_.on_event(line);
  }

  absl::Status RegisterNodeMetrics() {
    ASSIGN_OR_RETURN(Gauge * info,
                     metrics_.GetGauge("mooncake_node_info", "The node's role and version (1).",
                                       {{"role", std::string(RoleName(options_.role))},
                                        {"version", std::string(kStoreVersion)}}));
    info->Set(1);
    ASSIGN_OR_RETURN(uptime_, metrics_.GetGauge("mooncake_node_uptime_seconds",
                                                "Seconds since the node started."));
    ASSIGN_OR_RETURN(healthy_, metrics_.GetGauge("mooncake_node_healthy",
                                                 "1 while /health answers 200, else 0."));
    // The standard process_* families (Prometheus client conventions).
    ASSIGN_OR_RETURN(p_resident_, metrics_.GetGauge("process_resident_memory_bytes",
                                                    "Resident memory size in bytes."));
    ASSIGN_OR_RETURN(p_virtual_, metrics_.GetGauge("process_virtual_memory_bytes",
                                                   "Virtual memory size in bytes."));
    ASSIGN_OR_RETURN(p_fds_, metrics_.GetGauge("process_open_fds", "Open file descriptors."));
    ASSIGN_OR_RETURN(p_max_fds_,
                     metrics_.GetGauge("process_max_fds", "Limit of open file descriptors."));
    ASSIGN_OR_RETURN(p_threads_, metrics_.GetGauge("process_threads", "OS threads."));
    ASSIGN_OR_RETURN(Gauge * start,
                     metrics_.GetGauge("process_start_time_seconds",
                                       "Start time of the process since the Unix epoch."));
    start->Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()) -
               static_cast<double>(MonotonicClock::Get().NowNs() - started_ns_) / 1e9);
    if (options_.role == Role::kMaster) return absl::OkStatus();
    ASSIGN_OR_RETURN(w_mounted_, metrics_.GetGauge("mooncake_worker_segments_mounted",
                                                   "This worker's segments mounted."));
    ASSIGN_OR_RETURN(w_bytes_, metrics_.GetGauge("mooncake_worker_segment_bytes",
                                                 "Bytes of this worker's mounted segments."));
    ASSIGN_OR_RETURN(
        w_hb_ok_, metrics_.GetCounter("mooncake_worker_heartbeats_total",
                                      "Heartbeats to the master by outcome.", {{"result", "ok"}}));
    ASSIGN_OR_RETURN(w_hb_failed_, metrics_.GetCounter("mooncake_worker_heartbeats_total",
                                                       "Heartbeats to the master by outcome.",
                                                       {{"result", "failed"}}));
    ASSIGN_OR_RETURN(w_remounts_, metrics_.GetCounter("mooncake_worker_remounts_total",
                                                      "Times the master asked for a remount."));
    ASSIGN_OR_RETURN(w_tier_objects_, metrics_.GetGauge("mooncake_worker_tier_objects",
                                                        "Records on this worker's SSD tier."));
    ASSIGN_OR_RETURN(w_tier_used_,
                     metrics_.GetGauge("mooncake_worker_tier_used_bytes",
                                       "Bytes this worker's SSD tier spends (compressed)."));
    ASSIGN_OR_RETURN(w_tier_capacity_,
                     metrics_.GetGauge("mooncake_worker_tier_capacity_bytes",
                                       "This worker's SSD tier capacity (0: none)."));
    ASSIGN_OR_RETURN(w_tier_syncs_,
                     metrics_.GetCounter("mooncake_worker_tier_syncs_total",
                                         "fdatasyncs the worker's SSD tier issued (0 under its "
                                         "default durability, kNoSync)."));
    ASSIGN_OR_RETURN(w_tier_io_errors_,
                     metrics_.GetCounter("mooncake_worker_tier_io_errors_total",
                                         "SSD tier I/O operations that failed, syncs included."));
    ASSIGN_OR_RETURN(w_tier_failed_syncs_,
                     metrics_.GetCounter("mooncake_worker_tier_failed_syncs_total",
                                         "SSD tier fdatasyncs that failed: the writes they "
                                         "covered may not survive a power loss."));
    ASSIGN_OR_RETURN(w_tier_corrupt_,
                     metrics_.GetCounter("mooncake_worker_tier_corrupt_records_total",
                                         "SSD tier records that failed a checksum (dropped, "
                                         "never served)."));
    ASSIGN_OR_RETURN(w_copies_ok_,
                     metrics_.GetCounter("mooncake_worker_copies_total",
                                         "Copy tasks this worker ran for the master "
                                         "(drain, re-replication, hot replicas, copy/move tasks).",
                                         {{"result", "ok"}}));
    ASSIGN_OR_RETURN(w_copies_failed_,
                     metrics_.GetCounter("mooncake_worker_copies_total",
                                         "Copy tasks this worker ran for the master "
                                         "(drain, re-replication, hot replicas, copy/move tasks).",
                                         {{"result", "failed"}}));
    ASSIGN_OR_RETURN(w_copied_bytes_,
                     metrics_.GetCounter("mooncake_worker_copied_bytes_total",
                                         "Bytes this worker copied to other workers."));
    return absl::OkStatus();
  }

  void RefreshMetrics() {
    uptime_->Set(static_cast<double>(MonotonicClock::Get().NowNs() - started_ns_) / 1e9);
    healthy_->Set(Health().ok ? 1 : 0);
    const ProcessStats p = ReadProcessStats();
    p_resident_->Set(static_cast<double>(p.resident_bytes));
    p_virtual_->Set(static_cast<double>(p.virtual_bytes));
    p_fds_->Set(static_cast<double>(p.open_fds));
    p_max_fds_->Set(static_cast<double>(p.max_fds));
    p_threads_->Set(static_cast<double>(p.threads));
    if (master_ != nullptr) master_->RefreshMetrics();
    const NodeSnapshot s = Snapshot();
    if (!s.has_worker) return;
    w_mounted_->Set(static_cast<double>(s.segments_mounted));
    w_bytes_->Set(static_cast<double>(s.segment_bytes_total));
    w_tier_objects_->Set(static_cast<double>(s.tier_objects));
    w_tier_used_->Set(static_cast<double>(s.tier_used_bytes));
    w_tier_capacity_->Set(static_cast<double>(s.tier_capacity_bytes));
    // The worker's stats are totals; the counters move by the difference
    // (under the mutex: two scrapes at once must not both add it).
    MutexLock lock(&refresh_mu_);
    w_hb_ok_->Increment(s.heartbeats_ok - std::min(s.heartbeats_ok, w_hb_ok_->Value()));
    w_hb_failed_->Increment(s.heartbeats_failed -
                            std::min(s.heartbeats_failed, w_hb_failed_->Value()));
    w_remounts_->Increment(s.remounts - std::min(s.remounts, w_remounts_->Value()));
    for (auto [counter, total] :
         {std::pair{w_tier_syncs_, s.tier_syncs}, std::pair{w_tier_io_errors_, s.tier_io_errors},
          std::pair{w_tier_failed_syncs_, s.tier_failed_syncs},
          std::pair{w_tier_corrupt_, s.tier_corrupt_records},
          std::pair{w_copies_ok_, s.copies_done}, std::pair{w_copies_failed_, s.copies_failed},
          std::pair{w_copied_bytes_, s.copied_bytes}}) {
      counter->Increment(total - std::min(total, counter->Value()));
    }
  }

  uint64_t CounterValue(std::string_view name, const MetricLabels& labels) {
    auto c = metrics_.GetCounter(name, "", labels);
    return c.ok() ? (*c)->Value() : 0;
  }

  static absl::Status Context(std::string_view what, const absl::Status& s) {
    const bool in_use = absl::IsAlreadyExists(s) && !absl::StrContains(s.message(), "pick");
    return absl::Status(s.code(), absl::StrCat(AbslView(what), ": ", s.message(),
                                               in_use ? " (the port is already in use by another "
                                                        "process: pick another, or port 0 for "
                                                        "any free one)"
                                                      : ""));
  }

  const StoreNodeOptions options_;
  const int64_t started_ns_;
  MetricsRegistry metrics_;  // declared first among the pieces: they hold its series
  std::unique_ptr<MasterT> master_;
  std::unique_ptr<master::MasterService<MasterT>> service_;
  std::unique_ptr<ha::HaMaster<MasterT>> ha_;  // with --ha_etcd, instead of master_/service_
  std::unique_ptr<rpc::ServiceRegistry> registry_;
  std::unique_ptr<rpc::RpcServer> server_;
  std::unique_ptr<rpc::TcpChannel> worker_channel_;
  std::unique_ptr<WorkerT> worker_;
  std::unique_ptr<HttpServer> http_;
  std::shared_ptr<const auth::Credentials> auth_;  // --auth_token_file; null: none
  std::atomic<bool> serving_{false};
  std::atomic<bool> shutting_down_{false};
  std::atomic<bool> shut_down_{false};
  std::atomic<bool> retired_{false};  // the worker left the pool (RetireWorker)
  // Readers of worker_ (Health, Snapshot) hold it shared; Shutdown resets
  // worker_ holding it exclusively.
  mutable SharedMutex life_mu_;
  Mutex refresh_mu_;  // serializes the counter catch-up in RefreshMetrics
  // Series of metrics_, set once in RegisterNodeMetrics.
  Gauge* uptime_ = nullptr;
  Gauge *p_resident_ = nullptr, *p_virtual_ = nullptr, *p_fds_ = nullptr, *p_max_fds_ = nullptr,
        *p_threads_ = nullptr;
  Gauge* healthy_ = nullptr;
  Gauge* w_mounted_ = nullptr;
  Gauge* w_bytes_ = nullptr;
  Counter* w_hb_ok_ = nullptr;
  Counter* w_hb_failed_ = nullptr;
  Counter* w_remounts_ = nullptr;
  Gauge* w_tier_objects_ = nullptr;
  Gauge* w_tier_used_ = nullptr;
  Gauge* w_tier_capacity_ = nullptr;
  Counter* w_tier_syncs_ = nullptr;
  Counter* w_tier_io_errors_ = nullptr;
  Counter* w_tier_failed_syncs_ = nullptr;
  Counter* w_tier_corrupt_ = nullptr;
  Counter* w_copies_ok_ = nullptr;
  Counter* w_copies_failed_ = nullptr;
  Counter* w_copied_bytes_ = nullptr;
};

}  // namespace mooncake::node

#endif  // MOONCAKE_STORE_NODE_STORE_NODE_H_
