// Fans a loop over items out to a bounded number of threads.
#ifndef MOONCAKE_COMPRESS_INTERNAL_PARALLEL_H_
#define MOONCAKE_COMPRESS_INTERNAL_PARALLEL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "mooncake/base/assert.h"
#include "mooncake/base/fork_join_pool.h"

namespace mooncake::compress_internal {

// Calls fn(worker, item) for every item in [0, items), on min(threads, items) threads
// (the caller's is worker 0). Items are claimed dynamically, so uneven chunks balance.
// With a pool, its idle helpers join the caller (workers stay below threads); without,
// the threads are started for this call. fn must not throw. Returns when every item is
// done, with the number of threads that ran items.
template <typename Fn>
int ParallelFor(uint32_t items, int threads, Fn&& fn, ForkJoinPool* pool = nullptr) {
  MC_ASSERT(threads >= 1, "threads must be >= 1");
  if (pool != nullptr) return pool->ParallelFor(items, threads, fn);
  const uint32_t workers = std::min<uint32_t>(static_cast<uint32_t>(threads), items);
  if (workers <= 1) {
    for (uint32_t i = 0; i < items; ++i) fn(0, i);
    return static_cast<int>(workers);
  }
  // Relaxed is enough: the counter only hands out distinct indices; thread join
  // publishes the work done.
  std::atomic<uint32_t> next{0};
  auto body = [&](int worker) {
    for (uint32_t i = next.fetch_add(1, std::memory_order_relaxed); i < items;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      fn(worker, i);
    }
  };
  std::vector<std::thread> started;
  started.reserve(workers - 1);
  for (uint32_t w = 1; w < workers; ++w) started.emplace_back(body, static_cast<int>(w));
  body(0);
  for (auto& t : started) t.join();
  return static_cast<int>(workers);
}

}  // namespace mooncake::compress_internal

#endif  // MOONCAKE_COMPRESS_INTERNAL_PARALLEL_H_
