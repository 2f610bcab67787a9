// RdmaEngine<V>: the RDMA transport, generic over the verbs interface
// (rdma_verbs.h). rdma_transport.h instantiates it with libibverbs; tests
// instantiate it with FakeVerbs. It models transport::Transport.
//
// Shape
//   - Paths: one or more local ports (RdmaOptions::paths; by default the one
//     of device_name/port/gid_index). Each device named is opened once, with
//     one protection domain; every registered segment is one memory region
//     per device (LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE); peers get (addr,
//     rkey, length, location) from the owner over the control channel, the
//     rkey of the device behind the path they asked on, and the device
//     enforces the rkey's bounds on the owner side.
//   - Control channel (rdma_control.h / rdma_wire.h): the owner listens on TCP;
//     a requester connects once per endpoint and local path, sends its QP's
//     (qpn, psn, lid, gid, mtu) and its path index; the owner takes its own
//     path `index % its path count` (rails pair up), creates a passive RC QP
//     there, drives it INIT->RTR->RTS, answers with its own; the requester
//     brings its QP up the same way. OpenSegment then asks for a segment's
//     keys on each path's channel.
//   - Data path: one-sided RDMA READ/WRITE only. A request is cut into WRs of
//     at most `wr_bytes_max` bytes and `max_sge` local pieces. The WRs of a
//     peer wait in one queue that the peer's paths share; each path's queue
//     pair takes the next WRs while it has send-queue slots and, with more
//     than one path, while its posted bytes stay within its window
//     (`path_window_bytes` times its weight over the largest weight). So a
//     faster path takes more of the WRs: they are spread by the capacity the
//     paths show, not by a fixed split. WRs are posted as chains of up to
//     `post_chain_max`; one WR in `signal_interval` is signalled (plus the
//     one that ends a run of posting), and a signalled completion retires
//     every WR before it (RC is in-order).
//   - Local buffers inside a registered segment use its lkey on the device
//     of the path that posts them; any other local range is registered on
//     the fly, on every device, for the batch and deregistered when the
//     batch's result is taken (costly: register hot buffers).
//   - Progress runs in the caller's thread: Submit posts, Poll/Wait/Cancel
//     poll the completion queues. No progress thread.
//   - An error completion breaks that path's connection; the endpoint is
//     forgotten, and the next OpenSegment to it connects every path anew.
//     The WRs the broken queue pair held that failed for the path (flushed,
//     retries exhausted, a timeout: Unavailable or DeadlineExceeded) go back
//     to the peer's queue for its other paths, at most `path_retries_max`
//     times each (path_stats() counts them); a WR the owner refused (an
//     rkey, a length) fails its request. With no path left, queued WRs fail
//     with Unavailable. Cancel fails unfinished requests with Cancelled and
//     waits for posted WRs up to the I/O timeout, then moves the QPs to ERR,
//     which flushes them (the device stops touching their buffers).
//
// Status codes follow transport.h; completion errors map through
// WcStatusToStatus (rdma_work.h).
//
// Thread-safety: every public method may be called concurrently. State is
// guarded by `mu_`; control-channel I/O runs outside it under the
// connection's `control_mu`. The owner side runs on one server thread.
#ifndef MOONCAKE_TRANSPORT_INTERNAL_RDMA_ENGINE_H_
#define MOONCAKE_TRANSPORT_INTERNAL_RDMA_ENGINE_H_

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
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
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/transport/internal/batch_table.h"
#include "mooncake/transport/internal/rdma_control.h"
#include "mooncake/transport/internal/rdma_path.h"
#include "mooncake/transport/internal/rdma_verbs.h"
#include "mooncake/transport/internal/rdma_wire.h"
#include "mooncake/transport/internal/rdma_work.h"
#include "mooncake/transport/transport.h"
#include "mooncake/transport/transport_metrics.h"

namespace mooncake::transport_internal {

// Separates the RDMA control channel's proofs from the RPC and TCP ones.
inline constexpr std::string_view kRdmaAuthProtocol = "rdma";

struct RdmaOptions {
  // The one path when `paths` is empty.
  std::string device_name;  // empty: the first device found
  uint8_t port = 1;
  int gid_index = 0;  // RoCE v2 usually wants the IPv4-mapped GID (often 3)
  // Several local ports (devices, or ports of one device), at most
  // kRdmaPathsMax: every peer is reached over each of them and its WRs are
  // spread over them (see Shape above). transport/route_binding.h makes
  // them from a RoutePlan's RDMA paths.
  std::vector<RdmaPath> paths;
  // With several paths: the bytes a path may have posted and not completed,
  // times its weight over the largest weight (at least one WR).
  uint64_t path_window_bytes = uint64_t{4} << 20;
  // How many times one WR may move to another path after its path failed.
  uint32_t path_retries_max = 2;
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 0;  // 0: any free port
  uint32_t send_queue_depth = 256;
  uint32_t signal_interval = 16;
  uint32_t post_chain_max = 32;
  uint64_t wr_bytes_max = uint64_t{1} << 20;
  uint32_t max_sge = 4;
  size_t batches_in_flight_max = 256;
  absl::Duration connect_timeout = absl::Seconds(3);
  absl::Duration io_timeout = absl::Seconds(5);
  RtsParams rts;                       // timeout / retry counts; sq_psn is filled in per QP
  MetricsRegistry* metrics = nullptr;  // null: a private registry
  // The cluster's token file (docs/security.md). Set: every control
  // connection starts with base/auth.h's handshake (AUTH_* messages): the
  // owner serves only peers that prove a principal of the file, the requester
  // proves auth->self() and refuses an owner that does not prove the same
  // secret. Null: none.
  std::shared_ptr<const auth::Credentials> auth;
  // With `auth`: refuse tenants' principals (only "cluster" may connect a
  // queue pair or learn a segment's memory key). One-sided RDMA bypasses the
  // owner's CPU, so tenants' ranges cannot be checked on this path: a store
  // whose workers check tenants' capabilities sets it, and tenants read and
  // write over TCP.
  bool refuse_tenants = false;
};

inline absl::Status ValidateRdmaOptions(const RdmaOptions& o) {
  if (o.send_queue_depth < 2 || o.signal_interval < 1 || o.post_chain_max < 1 ||
      o.wr_bytes_max == 0 || o.max_sge < 1 || o.batches_in_flight_max < 1 || o.port < 1 ||
      o.gid_index < 0 || o.io_timeout <= absl::ZeroDuration() ||
      o.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "RdmaOptions: depths, intervals, sizes, port and timeouts must be positive");
  }
  if (o.paths.size() > kRdmaPathsMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("RdmaOptions: at most ", kRdmaPathsMax, " paths, got ", o.paths.size()));
  }
  for (size_t i = 0; i < o.paths.size(); ++i) {
    const RdmaPath& p = o.paths[i];
    if (p.port < 1 || p.gid_index < 0 || !(p.weight > 0) || p.weight > 1e9) {
      return absl::InvalidArgumentError(
          absl::StrCat("RdmaOptions: path ", i, " ('", p.device_name, ":", p.port,
                       "') needs a port >= 1, a gid index >= 0 and a weight in (0, 1e9]"));
    }
  }
  if (o.paths.size() > 1 && o.path_window_bytes == 0) {
    return absl::InvalidArgumentError(
        "RdmaOptions: path_window_bytes must be positive with several paths");
  }
  if (o.signal_interval > o.send_queue_depth) {
    return absl::InvalidArgumentError(
        "RdmaOptions: signal_interval must not exceed send_queue_depth (the send queue "
        "would fill with unsignalled work requests)");
  }
  return absl::OkStatus();
}

template <RdmaVerbs V>
class RdmaEngine {
 public:
  // Opens the device, allocates the PD and starts the control server.
  // FailedPrecondition "no RDMA device" when the host has none.
  static absl::StatusOr<std::unique_ptr<RdmaEngine>> Create(V verbs, RdmaOptions options = {}) {
    RETURN_IF_ERROR(ValidateRdmaOptions(options));
    std::unique_ptr<RdmaEngine> engine(new RdmaEngine(std::move(verbs), std::move(options)));
    RETURN_IF_ERROR(engine->Init());
    return engine;
  }

  RdmaEngine(const RdmaEngine&) = delete;
  RdmaEngine& operator=(const RdmaEngine&) = delete;
  ~RdmaEngine() { Shutdown(); }

  std::string_view Name() const { return "rdma"; }
  std::string LocalEndpoint() const {
    return absl::StrCat("rdma://", options_.listen_host, ":", listen_port_);
  }
  // The device limits the engine runs with (after clamping the options).
  SliceLimits slice_limits() const { return limits_; }
  uint32_t send_queue_depth() const { return sq_depth_; }
  transport::TransportMetrics& metrics() { return metrics_; }
  // One entry per local path, in RdmaOptions::paths order.
  std::vector<RdmaPathStats> path_stats() const {
    MutexLock lock(&mu_);
    std::vector<RdmaPathStats> out;
    out.reserve(paths_.size());
    for (const Path& p : paths_) out.push_back(p.stats);
    return out;
  }

  absl::StatusOr<transport::SegmentDesc> RegisterMemory(void* addr, uint64_t length,
                                                        transport::MemoryLocation location);
  absl::Status UnregisterMemory(transport::SegmentId id);
  absl::StatusOr<transport::RemoteSegment> OpenSegment(std::string_view endpoint,
                                                       transport::SegmentId id);
  absl::Status CloseSegment(transport::SegmentHandle handle);
  absl::StatusOr<transport::BatchId> Submit(std::span<const transport::TransferRequest> requests);
  absl::StatusOr<transport::BatchProgress> Poll(transport::BatchId batch);
  absl::StatusOr<transport::BatchResult> Wait(transport::BatchId batch, absl::Time deadline);
  absl::StatusOr<transport::BatchResult> Cancel(transport::BatchId batch);

 private:
  // An opened device: its protection domain and the CQ of its passive QPs.
  struct Device {
    std::string name;
    ContextHandle ctx{};
    PdHandle pd{};
    CqHandle passive_cq{};  // owner-side QPs; one-sided inbound work makes no CQEs
    DeviceAttrs attrs;
  };
  // A local port, as RdmaOptions::paths named it.
  struct Path {
    size_t device = 0;  // in devices_
    uint8_t port = 1;
    int gid_index = 0;
    double weight = 1;
    uint64_t window = 0;  // 0: no limit (one path)
    PortAttrs attrs;
    RdmaPathStats stats;  // guarded by mu_
  };
  struct LocalSegment {
    uint64_t addr = 0;
    uint64_t length = 0;
    transport::MemoryLocation location;
    std::vector<MemoryRegion> mrs;  // one per device, in devices_ order
  };
  // A piece of a request's local range and its lkey on each device.
  struct LocalPiece {
    uint64_t addr = 0;
    uint64_t length = 0;
    std::array<uint32_t, kRdmaPathsMax> lkeys{};
  };
  struct Connection;
  // The connections made together to one endpoint, one per local path, and
  // the WRs waiting for any of them.
  struct PathGroup {
    std::deque<WrTag> pending;
    std::vector<Connection*> conns;  // until each is reaped
  };
  // A requester-side RC connection to one peer endpoint over one local path.
  struct Connection {
    uint64_t id = 0;
    std::string endpoint;
    size_t path = 0;
    std::shared_ptr<PathGroup> group;
    CqHandle cq{};
    QueuePair qp;
    Mutex control_mu;
    UniqueFd control ABSL_GUARDED_BY(control_mu);
    WrTracker tracker;
    uint64_t bytes_posted = 0;  // posted, not yet retired
    SignalPolicy signal{1};
    absl::Status broken;  // OK while usable
    size_t refs = 0;      // endpoint map + open handles + batches
  };
  struct PathKey {
    Connection* conn = nullptr;
    uint32_t rkey = 0;  // the segment's rkey on the owner's device behind this path
  };
  struct OpenedSegment {
    SegmentInfo info;
    std::vector<PathKey> paths;  // each holds one ref
  };
  // A WR as sliced: its SGEs' lkeys hold indices into its request's pieces,
  // and its rkey is unset, until a path posts it (Bind).
  struct WrPlan {
    SendWr wr;
    uint32_t moves = 0;  // times it went to another path
  };
  struct RequestRoute {
    std::vector<PathKey> paths;
    std::vector<LocalPiece> pieces;
  };
  // Per batch, beside the shared records (a request's pieces are its WRs):
  struct BatchState {
    size_t wrs_outstanding = 0;  // posted, not yet retired
    size_t wrs_queued = 0;       // in a path group's queue
    std::vector<WrPlan> wrs;
    std::vector<RequestRoute> routes;  // one per request
    std::vector<MemoryRegion> temp_mrs;
    std::vector<Connection*> conns;  // each holds one ref
  };
  using Batches = BatchRecords<BatchState>;
  using Batch = Batches::Batch;
  // Done once every request is and no WR of the batch touches memory or
  // waits to.
  static bool BatchDone(const Batch& b) {
    return b.all_done() && b.extra.wrs_outstanding == 0 && b.extra.wrs_queued == 0;
  }

  // Owner side: one per accepted control connection.
  struct ControlConn {
    UniqueFd fd;
    QueuePair qp;
    bool has_qp = false;
    // With options_.auth: the handshake in progress (null before HELLO);
    // `authenticated` once the peer proved a principal we serve.
    std::unique_ptr<auth::ServerHandshake> handshake;
    bool authenticated = false;
    size_t path = 0;  // this side's path the requester's QP was paired with
  };

  RdmaEngine(V verbs, RdmaOptions options)
      : verbs_(std::move(verbs)),
        options_(std::move(options)),
        metrics_(options_.metrics, "rdma"),
        auth_failures_(options_.auth != nullptr
                           ? transport::AuthFailuresCounter(metrics_.registry(), "rdma")
                           : nullptr),
        rng_(std::random_device{}()),
        batches_(options_.batches_in_flight_max, &metrics_) {}

  absl::Status Init();
  absl::Status OpenPath(const RdmaPath& want, const std::vector<std::string>& present);
  void Shutdown();
  uint32_t NextPsn() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return rng_() & 0xFFFFFF; }
  std::string PathName(size_t path) const;
  QpInfo LocalQpInfo(size_t path, uint32_t qpn, uint32_t psn) const;
  absl::Status BringUp(size_t path, QpHandle qp, const QpInfo& peer, uint32_t own_psn);

  absl::StatusOr<std::vector<Connection*>> GetOrConnect(const std::string& endpoint);
  absl::StatusOr<std::unique_ptr<Connection>> Connect(const std::string& endpoint, size_t path);
  void DestroyConnectionResources(Connection& c);
  void Release(Connection* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Reap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Break(Connection* c, const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A connection of `g` other than `except` that is usable.
  static bool HasLivePath(const PathGroup& g, const Connection* except = nullptr);

  absl::Status PrepareRequest(const transport::TransferRequest& r, uint64_t batch_id,
                              uint32_t index, Batch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::vector<LocalPiece>> CoverLocal(uint64_t addr, uint64_t length, Batch& batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Bind(const Batch& b, const WrTag& tag, const Connection& c, SendWr* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Retire(Connection* c, const WrTag& tag, const absl::Status& s, bool was_posted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Pump(Connection* c, size_t max_wrs) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PumpGroup(PathGroup& g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PumpGroup once for each group of `conns`.
  void PumpGroups(std::span<Connection* const> conns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Progress() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  transport::BatchResult TakeResult(transport::BatchId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void ServeLoop();
  absl::Status AuthenticateControl(int fd, absl::Time deadline);
  absl::Status HandleHandshake(ControlConn& s, RdmaMessage& m, absl::Time deadline);
  absl::Status HandleMessage(ControlConn& s);
  void DropControlConn(ControlConn& s);

  V verbs_;
  const RdmaOptions options_;
  transport::TransportMetrics metrics_;
  Counter* const auth_failures_;  // in metrics_'s registry; null without options_.auth
  // Set by Init, then read-only (but paths_' stats: mu_).
  std::vector<Device> devices_;
  std::vector<Path> paths_;
  SliceLimits limits_;
  uint32_t sq_depth_ = 0;
  uint64_t max_mr_size_ = 0;

  UniqueFd listen_fd_;
  uint16_t listen_port_ = 0;
  UniqueFd wake_read_, wake_write_;
  std::thread server_;
  std::atomic<bool> stopping_{false};
  std::vector<std::unique_ptr<ControlConn>> control_conns_;  // server thread only

  mutable Mutex mu_;
  std::mt19937 rng_ ABSL_GUARDED_BY(mu_);
  transport::SegmentId next_segment_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_conn_ ABSL_GUARDED_BY(mu_) = 1;
  transport::SegmentHandle next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<transport::SegmentId, LocalSegment> segments_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, transport::SegmentId> segments_by_addr_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::unique_ptr<Connection>> conns_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> zombies_ ABSL_GUARDED_BY(mu_);            // released, not yet erased
  std::vector<Connection*> groups_to_pump_ ABSL_GUARDED_BY(mu_);  // Progress's scratch
  std::vector<PathGroup*> pump_scratch_ ABSL_GUARDED_BY(mu_);     // PumpGroups
  // Each holds one ref on every connection it lists.
  absl::flat_hash_map<std::string, std::vector<Connection*>> by_endpoint_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<transport::SegmentHandle, OpenedSegment> handles_ ABSL_GUARDED_BY(mu_);
  Batches batches_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::transport_internal

// Member definitions, split to keep each header readable.
#include "mooncake/transport/internal/rdma_engine_data.h"  // IWYU pragma: export
#include "mooncake/transport/internal/rdma_engine_impl.h"  // IWYU pragma: export

#endif  // MOONCAKE_TRANSPORT_INTERNAL_RDMA_ENGINE_H_
