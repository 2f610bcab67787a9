// MasterService: binds a Master<A, P> to the RPC methods of master.proto on a
// rpc::ServiceRegistry, and runs its Tick() on a timer.
//
//   auto master = *Master<>::Create(options);
//   MasterService<Master<>> service(master.get(), {});
//   rpc::ServiceRegistry registry;
//   RETURN_IF_ERROR(service.Register(&registry));
//   rpc::RpcServer server(&registry, {.port = 7000});   // or InProcessChannel
//   RETURN_IF_ERROR(server.Start());
//   service.StartTicker();
//
// Execution modes: the metadata-only calls (reads, leases, PutEnd/Revoke,
// heartbeats, segment lookups) are short and never block, so by default they run inline on
// the server's I/O thread (no thread hand-off: what makes >= 100K calls/s on
// two cores possible). So does PutStart while it evicts at most
// MasterOptions::inline_put_evictions objects (the steady state of a full
// cache: a put evicts about its own size); one that must evict more moves to
// the worker pool (ExecutionMode::kInlineFirst). MountSegment and
// UnmountSegment (may walk every object), RemoveAll (walks the shards) and
// TierSync (a long poll) run on the worker pool.
//
// Thread-safety: Register before the registry serves; StartTicker/Stop from
// the owning thread. Handlers run concurrently (Master is thread-safe).
#ifndef MOONCAKE_STORE_MASTER_MASTER_SERVICE_H_
#define MOONCAKE_STORE_MASTER_MASTER_SERVICE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/service.h"

namespace mooncake::master {

struct MasterServiceOptions {
  bool inline_metadata_calls = true;  // see the header comment
  int64_t tick_interval_ms = 100;     // StartTicker's period (real time)
};

template <typename MasterT>
class MasterService {
 public:
  MasterService(MasterT* master, MasterServiceOptions options)
      : master_(master), options_(options) {
    MC_ASSERT(master_ != nullptr, "a service needs a master");
    MC_ASSERT(options_.tick_interval_ms > 0, "tick_interval_ms must be > 0");
  }
  MasterService(const MasterService&) = delete;
  MasterService& operator=(const MasterService&) = delete;
  ~MasterService() { StopTicker(); }

  // Registers every method of master.proto. Errors: those of ServiceRegistry::Register.
  absl::Status Register(rpc::ServiceRegistry* registry) {
    const rpc::HandlerOptions fast{.mode = options_.inline_metadata_calls
                                               ? rpc::ExecutionMode::kInline
                                               : rpc::ExecutionMode::kWorker};
    const rpc::HandlerOptions slow{.mode = rpc::ExecutionMode::kWorker};
    MasterT* m = master_;
#define MOONCAKE_BIND_(Name, opts)                                                         \
  if (absl::Status s = registry->Register<rpc::Name##Method>(                              \
          [m](const typename rpc::Name##Method::Request& r) { return m->Name(r); }, opts); \
      !s.ok()) {                                                                           \
    return s;                                                                              \
  }
    MOONCAKE_BIND_(MountSegment, slow)
    MOONCAKE_BIND_(UnmountSegment, slow)
    MOONCAKE_BIND_(Heartbeat, fast)
    if (options_.inline_metadata_calls) {
      // On the I/O thread unless it must evict more than inline_put_evictions
      // objects; then again on the pool.
      if (absl::Status s = registry->Register<rpc::PutStartMethod>(
              [m](const rpc::PutStartMethod::Request& r, const rpc::ServerCallContext& ctx)
                  -> absl::StatusOr<rpc::PutStartMethod::Response> {
                if (!ctx.may_defer) return m->PutStart(r);
                auto done = m->TryPutStartInline(r);
                if (!done.has_value()) {
                  return rpc::DeferToWorker("PutStart must evict more than inline_put_evictions");
                }
                return *std::move(done);
              },
              {.mode = rpc::ExecutionMode::kInlineFirst});
          !s.ok()) {
        return s;
      }
    } else {
      MOONCAKE_BIND_(PutStart, slow)
    }
    MOONCAKE_BIND_(PutEnd, fast)
    MOONCAKE_BIND_(PutRevoke, fast)
    MOONCAKE_BIND_(GetReplicas, fast)
    MOONCAKE_BIND_(ReleaseLeases, fast)
    MOONCAKE_BIND_(TouchObjects, fast)
    MOONCAKE_BIND_(Remove, fast)
    MOONCAKE_BIND_(Exists, fast)
    MOONCAKE_BIND_(BatchExists, fast)
    MOONCAKE_BIND_(PrefixQuery, fast)
    MOONCAKE_BIND_(DescribeSegments, fast)
    MOONCAKE_BIND_(TierSync, slow)  // a long poll: never on an I/O thread
    MOONCAKE_BIND_(TierReport, fast)
    MOONCAKE_BIND_(RemoveAll, slow)    // walks every shard
    MOONCAKE_BIND_(CopySync, slow)     // a long poll
    MOONCAKE_BIND_(DrainWorker, slow)  // walks every shard
    MOONCAKE_BIND_(DrainStatus, fast)
    MOONCAKE_BIND_(CreateCopyTask, fast)
    MOONCAKE_BIND_(CreateMoveTask, fast)
    MOONCAKE_BIND_(QueryTask, fast)
    MOONCAKE_BIND_(Clone, fast)
    MOONCAKE_BIND_(CommitGroup, fast)
    MOONCAKE_BIND_(RemoveGroup, fast)
    MOONCAKE_BIND_(QueryObjects, slow)  // walks every shard
    MOONCAKE_BIND_(BatchGetReplicas, fast)
    MOONCAKE_BIND_(BatchPutEnd, fast)
    if (options_.inline_metadata_calls) {
      // Items as PutStart on the I/O thread while each fits the inline
      // eviction budget. When the first does not, the batch moves to the
      // pool whole (nothing done but those evictions); when a later one does
      // not, the items before it are started already, so it and the rest run
      // as plain PutStarts here.
      if (absl::Status s = registry->Register<rpc::BatchPutStartMethod>(
              [m](const rpc::BatchPutStartMethod::Request& r, const rpc::ServerCallContext& ctx)
                  -> absl::StatusOr<rpc::BatchPutStartMethod::Response> {
                if (!ctx.may_defer) return m->BatchPutStart(r);
                bool started = false, over_budget = false, defer = false;
                auto out = master_internal::ForEachItem<rpc::BatchPutStartMethod::Response>(
                    r, "BatchPutStart",
                    [&](const proto::PutStartRequest& item)
                        -> absl::StatusOr<proto::PutStartResponse> {
                      if (defer) return absl::CancelledError("deferred");  // discarded
                      if (!over_budget) {
                        auto done = m->TryPutStartInline(item);
                        if (done.has_value()) {
                          started = true;
                          return *std::move(done);
                        }
                        if (!started) {
                          defer = true;
                          return absl::CancelledError("deferred");
                        }
                        over_budget = true;
                      }
                      return m->PutStart(item);
                    });
                if (defer) {
                  return rpc::DeferToWorker(
                      "BatchPutStart's first item must evict more than inline_put_evictions");
                }
                return out;
              },
              {.mode = rpc::ExecutionMode::kInlineFirst});
          !s.ok()) {
        return s;
      }
    } else {
      MOONCAKE_BIND_(BatchPutStart, slow)
    }
#undef MOONCAKE_BIND_
    return absl::OkStatus();
  }

  // Calls master->Tick() every tick_interval_ms on a thread of its own.
  void StartTicker() {
    MC_ASSERT(!ticker_.joinable(), "ticker already running");
    {
      MutexLock lock(&mu_);
      stop_ = false;
    }
    ticker_ = std::thread([this] {
      for (;;) {
        {
          MutexLock lock(&mu_);
          mu_.AwaitWithTimeout(Condition(&stop_), absl::Milliseconds(options_.tick_interval_ms));
          if (stop_) return;
        }
        master_->Tick();
        // relaxed: a statistic.
        ticks_.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }

  // Idempotent.
  void StopTicker() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    if (ticker_.joinable()) ticker_.join();
  }

  uint64_t ticks() const { return ticks_.load(std::memory_order_relaxed); }

 private:
  MasterT* const master_;
  const MasterServiceOptions options_;
  Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> ticks_{0};
  std::thread ticker_;
};

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_MASTER_SERVICE_H_
