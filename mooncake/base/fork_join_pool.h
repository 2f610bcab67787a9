// ForkJoinPool: persistent helper threads that join a caller's loop.
//
// ParallelFor(items, max_workers, fn) calls fn(worker, i) once for every i in
// [0, items) and returns when all calls have returned. The caller always takes
// part (worker 0); idle helpers join it (workers 1, 2, ... in the order they
// join, so worker ids of one loop are dense and below max_workers). Items are
// claimed one at a time from a shared counter, so uneven items balance, and a
// helper that is busy with another caller's loop, or slow to wake, costs that
// loop nothing: the caller claims whatever nobody else did. No thread is created
// per call (compress_internal::ParallelFor's threads-per-call costs ~50-100 us,
// as much as decoding a 256 KiB chunk).
//
// Use it for loops of a few CPU-bound items of tens of microseconds or more
// each (decoding the chunks of one record); a wake-up costs a few microseconds.
//
// Thread-safety: ParallelFor may be called from any number of threads at once;
// each helper serves one loop at a time. fn must not throw and must not call
// ParallelFor on the same pool (a helper would wait for itself). The
// destructor must not run concurrently with ParallelFor.
//
// Invariants: a Loop is in `open_` only while its caller is inside ParallelFor
// and fewer than its `helper_slots` helpers have joined; the caller returns only
// once `inside` is 0 and the loop is out of `open_`, so no helper touches a
// finished loop's stack frame.
//
// The lock is std::mutex, not absl::Mutex: Debian's abseil is not built for
// ThreadSanitizer, which would then report false races (docs/DESIGN.md, qos).
#ifndef MOONCAKE_BASE_FORK_JOIN_POOL_H_
#define MOONCAKE_BASE_FORK_JOIN_POOL_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "mooncake/base/assert.h"

namespace mooncake {

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
      std::lock_guard<std::mutex> lock(mu_);
      MC_ASSERT(open_.empty(), "ForkJoinPool destroyed during a ParallelFor");
      stopping_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  int helpers() const { return static_cast<int>(threads_.size()); }

  // Calls fn(worker, i) for every i in [0, items) on at most max_workers
  // threads, the caller's included (worker 0). Returns when every call has
  // returned; the calls' effects happen-before the return. REQUIRES:
  // max_workers >= 1.
  template <typename Fn>
  void ParallelFor(uint32_t items, int max_workers, Fn&& fn) {
    MC_ASSERT(max_workers >= 1, "max_workers must be >= 1");
    const int helper_slots =
        std::min<int64_t>({int64_t{max_workers} - 1, int64_t{helpers()}, int64_t{items} - 1});
    if (helper_slots <= 0) {
      for (uint32_t i = 0; i < items; ++i) fn(0, i);
      return;
    }
    using F = std::remove_reference_t<Fn>;
    Loop loop;
    loop.items = items;
    loop.fn = const_cast<void*>(static_cast<const void*>(&fn));
    loop.call = [](void* f, int worker, uint32_t i) { (*static_cast<F*>(f))(worker, i); };
    loop.helper_slots = helper_slots;
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_.push_back(&loop);
    }
    for (int i = 0; i < helper_slots; ++i) work_cv_.notify_one();
    RunItems(loop, 0);
    std::unique_lock<std::mutex> lock(mu_);
    const auto it = std::find(open_.begin(), open_.end(), &loop);
    if (it != open_.end()) open_.erase(it);
    loop.closed = true;
    done_cv_.wait(lock, [&] { return loop.inside == 0; });
    MC_DASSERT(loop.next.load(std::memory_order_relaxed) >= items, "every item was claimed");
  }

 private:
  struct Loop {
    // Relaxed is enough: the counter only hands out distinct items; mu_
    // (inside's release by each helper, read by the caller) publishes the work.
    std::atomic<uint32_t> next{0};
    uint32_t items = 0;
    void* fn = nullptr;
    void (*call)(void*, int, uint32_t) = nullptr;
    int helper_slots = 0;  // helpers that may still join; guarded by mu_
    int joined = 0;        // helpers that joined so far; guarded by mu_
    int inside = 0;        // helpers still running items; guarded by mu_
    bool closed = false;   // the caller is waiting for `inside` to reach 0; guarded by mu_
  };

  static void RunItems(Loop& loop, int worker) {
    for (uint32_t i = loop.next.fetch_add(1, std::memory_order_relaxed); i < loop.items;
         i = loop.next.fetch_add(1, std::memory_order_relaxed)) {
      loop.call(loop.fn, worker, i);
    }
  }

  void HelperLoop() {
    for (;;) {
      Loop* loop = nullptr;
      int worker = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stopping_ || !open_.empty(); });
        if (stopping_) return;
        loop = open_.front();
        worker = ++loop->joined;
        ++loop->inside;
        if (--loop->helper_slots == 0) open_.pop_front();
        MC_DASSERT(worker >= 1 && worker <= kMaxHelpers, "worker ids are dense from 1");
      }
      RunItems(*loop, worker);
      std::lock_guard<std::mutex> lock(mu_);
      // The caller may return (and free *loop) once this is 0; it is notified
      // under the lock, so it cannot return before notify_one is done with it.
      if (--loop->inside == 0 && loop->closed) done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable work_cv_;              // helpers wait for a loop to join
  std::condition_variable done_cv_;              // callers wait for their helpers to leave
  std::deque<Loop*> open_ ABSL_GUARDED_BY(mu_);  // at most one per caller inside ParallelFor
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace mooncake

#endif  // MOONCAKE_BASE_FORK_JOIN_POOL_H_
