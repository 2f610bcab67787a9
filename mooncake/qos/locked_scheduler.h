// LockedScheduler<S>: any Scheduler made thread-safe by one std::mutex around it.
//
// Thread-safe: Push, Pop, Size and Stats may run concurrently from any number
// of producer and consumer threads (MPMC). Each call is linearizable, so the
// wrapped model's guarantees hold in the order the lock was taken: per-class
// FIFO holds for items pushed by one thread; items of one class pushed by two
// threads leave in the order their Push calls took the lock.
//
// Why one lock and not a lock-free structure: every model's Pop reads state
// across classes (a mask, a DRR round), so a per-class lock would still need
// a global step. The critical sections are tens of nanoseconds, far below the
// microseconds a slice spends on the wire; scheduler_benchmark.cc measures the
// contended rate (BM_LockedMpsc) next to the single-thread one.
#ifndef MOONCAKE_QOS_LOCKED_SCHEDULER_H_
#define MOONCAKE_QOS_LOCKED_SCHEDULER_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "mooncake/qos/scheduler.h"

namespace mooncake::qos {

template <Scheduler S>
class LockedScheduler {
 public:
  using Item = typename S::Item;
  using Inner = S;

  explicit LockedScheduler(S inner) : inner_(std::move(inner)) {}

  LockedScheduler(const LockedScheduler&) = delete;
  LockedScheduler& operator=(const LockedScheduler&) = delete;

  [[nodiscard]] PushResult Push(Item&& item, ClassId cls, uint64_t cost_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.Push(std::move(item), cls, cost_bytes);
  }

  [[nodiscard]] std::optional<Item> Pop() {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.Pop();
  }

  size_t Size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.Size();
  }
  // Fixed at construction, so it needs no lock.
  size_t ClassCount() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return inner_.ClassCount(); }
  ClassStats Stats(ClassId cls) const {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.Stats(cls);
  }

  // Runs fn(inner) under the lock: for model-specific reads (AgedPops,
  // QueuedBytes) or several calls that must be atomic together.
  template <typename Fn>
  decltype(auto) WithLock(Fn&& fn) {
    std::lock_guard<std::mutex> lock(mu_);
    return std::forward<Fn>(fn)(inner_);
  }

 private:
  // std::mutex rather than absl::Mutex: Debian's abseil is not built with
  // ThreadSanitizer, so TSAN cannot see absl::Mutex's happens-before edges and
  // reports every guarded access as a race; pthread-based std::mutex is
  // intercepted. (Annotations below are kept as documentation.)
  mutable std::mutex mu_;
  S inner_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::qos

#endif  // MOONCAKE_QOS_LOCKED_SCHEDULER_H_
