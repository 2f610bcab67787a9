// Router: a Transport that owns several transports, sends each peer's traffic
// over the best one that reaches it and fails over to the next.
//
//   auto router = Router::Create({}, std::make_unique<LocalTransport>(),
//                                std::move(shm), std::move(tcp));
//   ASSIGN_OR_RETURN(auto seg, (*router)->RegisterMemory(buf, len, loc));  // on every transport
//   // peer: OpenSegment(owner->LocalEndpoint(), seg.id), Submit, Wait ...
//   (*router)->SubmitWithPriority(urgent_requests, /*cls=*/0);  // overtakes bulk
//
// Choice. Transports are ranked local (same process) > cuda > shm (same host)
// > rdma > tcp (router_ids.h). The router endpoint carries the owner's host,
// pid and its transports' endpoints; OpenSegment opens the segment on every
// transport of ours that can reach the owner (local only in the same process,
// shm/cuda only on the same host, matched by endpoint scheme), best first.
// A transport that fails to open is simply not a route.
//
// Slices and priority. Requests are cut into slices of `slice_bytes`; slices
// wait in a qos::StrictPriorityScheduler (class 0 most urgent; Submit uses the
// last class, SubmitWithPriority picks one) and at most
// `slices_in_flight_max` are handed to the transports at a time, so a
// high-priority batch submitted behind a bulk one goes next, not last.
//
// Failover. A slice that fails on its route is pushed back (same class) for
// the next route, at most `retries_max` times; a sub-batch that is still in
// flight after `attempt_timeout` is cancelled and its slices fail over too.
// InvalidArgument, OutOfRange and Cancelled are not retried (they would
// fail everywhere). A request's status is its first failing slice's final
// status; the bytes of a retried slice are written again in full.
// Silent corruption (a transport that returns wrong bytes with OK) is not
// detected here: end-to-end checksums belong to the store's objects. Chunk
// digests (transport.h) go to the routes with each slice that covers whole
// chunks, and a slice that fails over has its slots reset to kNoDigest first.
//
// Cross-process QoS. RouterOptions::arbiters names a qos::ShmArbiter per
// transport (the NIC routes: tcp, rdma). A slice bound for such a route takes
// a grant of its length first, in arbiter class min(cls, arbiter classes - 1),
// without waiting (TryAcquire); a refused slice is held, in its class and in
// order, and asked for again when the dispatcher next runs (at most
// `arbiter_retry` later), while slices of other routes and of more urgent
// classes go on. Once a class is refused on a route, its less urgent classes
// on that route wait too. At most slices_in_flight_max slices of a class are
// held; the rest stay queued. The grant is released when the slice's sub-batch
// settles (done, failed, cancelled, or before a failover re-queues it). A
// batch whose slices the arbiter would not all grant at once does not take
// the direct path.
//
// Ids. A router segment id packs the ids the segment got on each transport
// with a check (router_ids.h): at most 4 transports, sub ids below 4096.
//
// Direct path. When nothing waits in the router's queue, a batch whose slices
// all take the same first route and fit the in-flight budget is handed to its
// transport by the submitting thread itself, and the thread that Waits (or
// Polls) collects it: no dispatcher hop on either side. That is exactly what
// the dispatcher would do at once with such a batch, so priority order is
// unchanged; failover, the attempt timeout and Cancel apply as on the queued
// path. For SHM and local routes the copy then runs in the caller's Submit.
//
// Otherwise progress runs on one dispatcher thread; sub-transports see one
// sub-batch per (batch, transport) per dispatch round.
//
// Thread-safety: every method may be called concurrently.
#ifndef MOONCAKE_TRANSPORT_ROUTER_H_
#define MOONCAKE_TRANSPORT_ROUTER_H_

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/base/trace.h"
#include "mooncake/base/value_checksum.h"
#include "mooncake/qos/scheduler.h"
#include "mooncake/qos/shm_arbiter.h"
#include "mooncake/qos/strict_priority_scheduler.h"
#include "mooncake/transport/internal/any_transport.h"
#include "mooncake/transport/internal/batch_table.h"
#include "mooncake/transport/internal/router_ids.h"
#include "mooncake/transport/transport.h"
#include "mooncake/transport/transport_metrics.h"

namespace mooncake::transport {

// Cross-process QoS on a route: every slice the router sends over the named
// transport first takes a grant of its bytes from `arbiter`
// (qos/shm_arbiter.h), shared with the other processes on the host that send
// over the same link.
struct RouteArbiter {
  std::string transport;  // a transport's Name(): "tcp", "rdma", ...
  std::shared_ptr<qos::ShmArbiter> arbiter;
};

struct RouterOptions {
  size_t priority_classes = 2;  // class 0 most urgent; Submit uses the last
  uint64_t slice_bytes = 1 << 20;
  size_t slices_in_flight_max = 32;
  size_t queued_slices_max = 1 << 16;
  size_t batches_in_flight_max = 1024;
  uint32_t retries_max = 2;  // extra attempts per slice, each on the next route
  absl::Duration attempt_timeout = absl::Seconds(5);
  bool direct_path = true;             // false: every batch goes through the dispatcher
  MetricsRegistry* metrics = nullptr;  // null: a private registry
  // At most one per transport; slice_bytes must fit each arbiter's grants.
  std::vector<RouteArbiter> arbiters;
  // How soon the dispatcher asks an arbiter again for slices it refused.
  absl::Duration arbiter_retry = absl::Microseconds(100);
};

class Router {
 public:
  // Per sub-transport counters (in the router's rank order).
  struct RouteStats {
    std::string name;
    uint64_t slices_ok = 0;
    uint64_t slices_failed = 0;
    uint64_t slices_held = 0;  // refused a grant by the route's arbiter at first, then waited
  };

  template <Transport... Ts>
  static absl::StatusOr<std::unique_ptr<Router>> Create(RouterOptions options,
                                                        std::unique_ptr<Ts>... transports) {
    std::vector<std::unique_ptr<transport_internal::AnyTransport>> list;
    (list.push_back(
         std::make_unique<transport_internal::AnyTransportOf<Ts>>(std::move(transports))),
     ...);
    return CreateFromList(options, std::move(list));
  }

  static absl::StatusOr<std::unique_ptr<Router>> CreateFromList(
      RouterOptions options, std::vector<std::unique_ptr<transport_internal::AnyTransport>> list);

  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;
  ~Router();

  std::string_view Name() const { return "router"; }
  std::string LocalEndpoint() const { return endpoint_; }
  TransportMetrics& metrics() { return metrics_; }
  std::vector<RouteStats> route_stats() const;
  uint64_t failovers() const;
  // Batches that took the direct path (submitted by the caller's thread).
  uint64_t direct_batches() const;

  absl::StatusOr<SegmentDesc> RegisterMemory(void* addr, uint64_t length, MemoryLocation location);
  absl::Status UnregisterMemory(SegmentId id);
  absl::StatusOr<RemoteSegment> OpenSegment(std::string_view endpoint, SegmentId id);
  absl::Status CloseSegment(SegmentHandle handle);
  absl::StatusOr<BatchId> Submit(std::span<const TransferRequest> requests) {
    return SubmitWithPriority(requests, static_cast<qos::ClassId>(options_.priority_classes - 1));
  }
  // `cls` < priority_classes; 0 is served first.
  absl::StatusOr<BatchId> SubmitWithPriority(std::span<const TransferRequest> requests,
                                             qos::ClassId cls);
  absl::StatusOr<BatchProgress> Poll(BatchId batch);
  absl::StatusOr<BatchResult> Wait(BatchId batch, absl::Time deadline);
  absl::StatusOr<BatchResult> Cancel(BatchId batch);

 private:
  struct Route {
    size_t transport = 0;
    SegmentHandle handle = 0;
  };
  struct Opened {
    uint64_t length = 0;
    MemoryLocation location;
    std::vector<Route> routes;  // best first
    size_t slices_alive = 0;    // slices queued or in flight on this handle
    bool closed = false;
  };
  struct Slice {
    BatchId batch = 0;
    uint32_t request = 0;
    OpCode op = OpCode::kRead;
    uint8_t* local = nullptr;
    SegmentHandle handle = 0;
    uint64_t offset = 0;
    uint64_t length = 0;
    uint32_t route = 0;  // index into Opened::routes
    uint32_t tries = 0;
    uint64_t* digests = nullptr;       // this slice's chunk digest slots, if any
    const char* capability = nullptr;  // the request's (TransferRequest::capability)
    uint32_t index = 0;                // in its batch, for traces
    int64_t queued_ns = 0;             // trace::NowNs() when it was queued; 0: not traced
    qos::ShmArbiter::Grant grant;      // its bytes on the route's arbiter, if it has one
  };
  // Per batch, beside the shared records (a request's pieces are its slices).
  struct BatchState {
    qos::ClassId cls = 0;
    size_t subs_in_flight = 0;
    // The direct path's Submit to the transport is running (mu_ released):
    // Cancel waits for it, else the transport would start after Cancel returned.
    bool direct_submitting = false;
    uint64_t bytes = 0;     // of its valid requests
    int64_t submit_ns = 0;  // trace::NowNs() at Submit; 0: not traced
  };
  using Batches = transport_internal::BatchRecords<BatchState>;
  using Batch = Batches::Batch;
  // Done once every request is and no sub-batch of it is in a transport.
  static bool BatchDone(const Batch& b) { return b.all_done() && b.extra.subs_in_flight == 0; }
  // A batch of one slice (a single small get or put) needs no heap block.
  using Slices = absl::InlinedVector<Slice, 1>;
  using DirectRequests = absl::InlinedVector<TransferRequest, 1>;
  struct SubBatch {
    size_t transport = 0;
    BatchId id = 0;
    BatchId batch = 0;
    Slices slices;
    absl::Time started;
    int64_t started_ns = 0;  // trace::NowNs() then; 0: not traced
  };
  // A sub-batch its submitting thread handed to the transport (direct path);
  // one waiting thread at a time collects it.
  struct DirectSub {
    SubBatch sub;
    bool collecting = false;
  };
  using Queue = qos::StrictPriorityScheduler<Slice>;

  Router(RouterOptions options, std::vector<std::unique_ptr<transport_internal::AnyTransport>> list,
         Queue queue);

  absl::StatusOr<BatchId> Admit(std::span<const TransferRequest> requests, qos::ClassId cls,
                                SubBatch* direct, DirectRequests* direct_requests)
      ABSL_LOCKS_EXCLUDED(mu_);
  bool DirectFitsLocked(std::span<const TransferRequest> requests, size_t slices,
                        size_t* transport) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SubmitDirect(SubBatch sb, std::span<const TransferRequest> requests)
      ABSL_LOCKS_EXCLUDED(mu_);
  bool WaitDirectLocked(BatchId id, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PollDirectLocked(BatchId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SettleDirectLocked(BatchId id, const absl::StatusOr<BatchResult>& r, bool timed_out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Loop();
  void Collect() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Dispatch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Settle(SubBatch sb, const absl::StatusOr<BatchResult>& r, bool timed_out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnSliceResult(Slice s, absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishSlice(Batch& b, const Slice& s, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseSlice(const Slice& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseRoutes(Opened& o) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The transport a slice's current route uses.
  size_t TransportOf(const Slice& s) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return handles_.at(s.handle).routes[s.route].transport;
  }
  // Takes the slice's grant from transport t's arbiter (true when there is
  // none, the slice holds its grant already, or it was granted). False: refused for now
  // (RESOURCE_EXHAUSTED) or failed, with `*error` set for a failure that waiting cannot mend.
  bool TakeGrant(size_t t, qos::ClassId cls, Slice& s, absl::Status* error) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckRequest(const TransferRequest& r) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RouterOptions options_;
  std::vector<std::unique_ptr<transport_internal::AnyTransport>> transports_;  // best first
  std::string host_;
  std::string endpoint_;
  TransportMetrics metrics_;

  mutable Mutex mu_;
  CondVar cv_;       // a batch finished or changed hands (waiters)
  CondVar work_cv_;  // work queued, shutdown (the dispatcher)
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Queue queue_ ABSL_GUARDED_BY(mu_);
  std::vector<SubBatch> in_flight_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<BatchId, DirectSub> direct_ ABSL_GUARDED_BY(mu_);
  size_t slices_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  SegmentHandle next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<SegmentId, std::array<uint64_t, transport_internal::kRouterTransportsMax>> segments_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<SegmentHandle, Opened> handles_ ABSL_GUARDED_BY(mu_);
  Batches batches_ ABSL_GUARDED_BY(mu_);
  std::vector<RouteStats> stats_ ABSL_GUARDED_BY(mu_);
  uint64_t failovers_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t direct_batches_ ABSL_GUARDED_BY(mu_) = 0;
  // Per transport (rank order): its arbiter (owned by options_), or null.
  std::vector<qos::ShmArbiter*> arbiter_of_;
  // held_[transport][class]: slices refused a grant, in the order they were
  // popped; they go before anything of their class still queued.
  std::vector<std::vector<std::deque<Slice>>> held_ ABSL_GUARDED_BY(mu_);
  size_t held_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread dispatcher_;  // last: starts after everything above exists
};

static_assert(Transport<Router>);

}  // namespace mooncake::transport

// Member definitions, split to keep each header readable.
#include "mooncake/transport/internal/router_impl.h"  // IWYU pragma: export

#endif  // MOONCAKE_TRANSPORT_ROUTER_H_
