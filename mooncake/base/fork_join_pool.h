// ForkJoinPool: persistent helper threads that join a caller's loop.
//
// ParallelFor(items, max_workers, fn) calls fn(worker, i) once for every i in
// [0, items) and returns when all calls have returned. The caller always takes
// part (worker 0); idle helpers join it (workers 1, 2, ... in the order they
// join, so worker ids of one loop are dense and below max_workers). Items are
// claimed one at a time from a shared counter, so uneven items balance. The
// caller waits only for items a helper has claimed, never for a helper to wake
// up or to leave: a helper busy with another caller's loop, or descheduled
// after joining, costs the loop nothing, as the caller claims whatever nobody
// else did. No thread is created per call (starting threads for one call costs
// ~50-100 us, as much as decoding a 256 KiB chunk).
//
// Use it for loops of a few CPU-bound items of tens of microseconds or more
// each (decoding the chunks of one record); a wake-up costs a few microseconds.
//
// Thread-safety: ParallelFor may be called from any number of threads at once;
// each helper serves one loop at a time. fn must not throw. fn must not call
// ParallelFor on the same pool with state keyed by worker id: the inner loop's
// caller is worker 0 again, so per-worker scratch of the outer loop would be
// shared. The destructor must not run concurrently with ParallelFor.
//
// Invariants: a Loop is in `open_` only while its caller is inside ParallelFor
// and fewer than its helper slots are taken. Helpers share ownership of the
// Loop (shared_ptr), so one that joins late may outlive the call; it then finds
// no item left and never touches fn, which lives in the caller's frame.
//
// The lock is mooncake::Mutex (std::mutex beneath, which ThreadSanitizer
// understands; base/mutex.h).
#ifndef MOONCAKE_BASE_FORK_JOIN_POOL_H_
#define MOONCAKE_BASE_FORK_JOIN_POOL_H_

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"

namespace mooncake {

// CPUs this process may run on (its affinity mask: a container's cpuset, a
// taskset), at least 1; hardware_concurrency() where the mask is unavailable.
inline int UsableCpuCount() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

class ForkJoinPool {
 public:
  static constexpr int kMaxHelpers = 256;

  // REQUIRES: 0 <= helpers <= kMaxHelpers. With 0 helpers every loop runs on
  // its caller alone.
  explicit ForkJoinPool(int helpers) {
    MC_ASSERT(helpers >= 0 && helpers <= kMaxHelpers, "ForkJoinPool helpers in [0, 256]");
    threads_.reserve(static_cast<size_t>(helpers));
    for (int i = 0; i < helpers; ++i) threads_.emplace_back([this] { HelperLoop(); });
  }

  ForkJoinPool(const ForkJoinPool&) = delete;
  ForkJoinPool& operator=(const ForkJoinPool&) = delete;

  ~ForkJoinPool() {
    {
      MutexLock lock(&mu_);
      MC_ASSERT(open_.empty(), "ForkJoinPool destroyed during a ParallelFor");
      stopping_ = true;
    }
    work_cv_.SignalAll();
    for (std::thread& t : threads_) t.join();
  }

  int helpers() const { return static_cast<int>(threads_.size()); }

  // Times a helper joined a loop (a loop its caller had not finished claiming).
  uint64_t joins() const { return joins_.load(std::memory_order_relaxed); }

  // Calls fn(worker, i) for every i in [0, items) on at most max_workers
  // threads, the caller's included (worker 0). Returns when every call has
  // returned; the calls' effects happen-before the return. Returns how many
  // threads ran at least one item (0 when items is 0). REQUIRES:
  // max_workers >= 1.
  template <typename Fn>
  int ParallelFor(uint32_t items, int max_workers, Fn&& fn) {
    MC_ASSERT(max_workers >= 1, "max_workers must be >= 1");
    // Late helpers push `next` past `items` by at most one each; it must not wrap.
    MC_ASSERT(items <= UINT32_MAX - kMaxHelpers - 1, "too many items for one loop");
    const int helper_slots = static_cast<int>(
        std::min<int64_t>({int64_t{max_workers} - 1, int64_t{helpers()}, int64_t{items} - 1}));
    if (helper_slots <= 0) {
      for (uint32_t i = 0; i < items; ++i) fn(0, i);
      return items == 0 ? 0 : 1;
    }
    using F = std::remove_reference_t<Fn>;
    auto loop = std::make_shared<Loop>();
    loop->items = items;
    loop->fn = const_cast<void*>(static_cast<const void*>(&fn));
    loop->call = [](void* f, int worker, uint32_t i) { (*static_cast<F*>(f))(worker, i); };
    loop->helper_slots = helper_slots;
    {
      MutexLock lock(&mu_);
      open_.push_back(loop);
    }
    for (int i = 0; i < helper_slots; ++i) work_cv_.Signal();
    const bool caller_ran = RunItems(*loop, 0).ran;
    MutexLock lock(&mu_);
    const auto it = std::find(open_.begin(), open_.end(), loop);
    if (it != open_.end()) open_.erase(it);
    // acquire: pairs with the release increments, so the helpers' items
    // happen-before the return.
    done_cv_.Wait(&mu_, [&] { return loop->done.load(std::memory_order_acquire) == items; });
    MC_DASSERT(loop->next.load(std::memory_order_relaxed) >= items, "every item was claimed");
    // Relaxed: each helper's increment precedes its release of `done`.
    return loop->helpers_ran.load(std::memory_order_relaxed) + (caller_ran ? 1 : 0);
  }

 private:
  struct Loop {
    // Relaxed is enough for `next`: it only hands out distinct items.
    std::atomic<uint32_t> next{0};
    std::atomic<uint32_t> done{0};    // items whose call has returned
    std::atomic<int> helpers_ran{0};  // helpers that ran at least one item
    uint32_t items = 0;
    void* fn = nullptr;  // valid while done < items
    void (*call)(void*, int, uint32_t) = nullptr;
    int helper_slots = 0;  // helpers that may still join; guarded by mu_
    int joined = 0;        // helpers that joined so far; guarded by mu_
  };

  struct Ran {
    bool ran = false;   // ran at least one item
    bool last = false;  // ran the loop's last item to finish
  };

  // Claims and runs items until none is left.
  static Ran RunItems(Loop& loop, int worker) {
    Ran r;
    for (uint32_t i = loop.next.fetch_add(1, std::memory_order_relaxed); i < loop.items;
         i = loop.next.fetch_add(1, std::memory_order_relaxed)) {
      if (!r.ran && worker != 0) loop.helpers_ran.fetch_add(1, std::memory_order_relaxed);
      r.ran = true;
      loop.call(loop.fn, worker, i);
      // release: publishes this item's effects (and helpers_ran) to the caller's
      // acquire load.
      r.last = loop.done.fetch_add(1, std::memory_order_release) + 1 == loop.items;
    }
    return r;
  }

  void HelperLoop() {
    for (;;) {
      std::shared_ptr<Loop> loop;
      int worker = 0;
      {
        MutexLock lock(&mu_);
        work_cv_.Wait(&mu_, [&] {
          mu_.AssertHeld();  // the predicate runs under mu_
          return stopping_ || !open_.empty();
        });
        if (stopping_) return;
        loop = open_.front();
        worker = ++loop->joined;
        if (--loop->helper_slots == 0) open_.pop_front();
        MC_DASSERT(worker >= 1 && worker <= kMaxHelpers, "worker ids are dense from 1");
      }
      joins_.fetch_add(1, std::memory_order_relaxed);
      if (RunItems(*loop, worker).last) {
        // Under the lock, so the caller cannot test its predicate between the
        // last increment and this notification and then sleep through it.
        MutexLock lock(&mu_);
        done_cv_.SignalAll();
      }
    }
  }

  Mutex mu_;
  CondVar work_cv_;  // helpers wait for a loop to join
  CondVar done_cv_;  // callers wait for items helpers hold
  // Loops whose callers are inside ParallelFor with helper slots left.
  std::deque<std::shared_ptr<Loop>> open_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> joins_{0};
  std::vector<std::thread> threads_;
};

}  // namespace mooncake

#endif  // MOONCAKE_BASE_FORK_JOIN_POOL_H_
