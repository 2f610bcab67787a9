#include "mooncake/base/fork_join_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake {
namespace {

// Runs a loop whose items record who ran them; checks each item ran once,
// worker ids stay below max_workers and no id is used by two threads at once.
void CheckLoop(ForkJoinPool& pool, uint32_t items, int max_workers) {
  std::vector<std::atomic<int>> runs(items);
  std::vector<std::atomic<int>> busy(static_cast<size_t>(max_workers));
  std::atomic<bool> overlap{false}, bad_id{false};
  pool.ParallelFor(items, max_workers, [&](int worker, uint32_t i) {
    if (worker < 0 || worker >= max_workers) {
      bad_id = true;
      return;
    }
    if (busy[worker].fetch_add(1) != 0) overlap = true;
    runs[i].fetch_add(1);
    busy[worker].fetch_sub(1);
  });
  EXPECT_FALSE(bad_id) << "items " << items << ", max_workers " << max_workers;
  EXPECT_FALSE(overlap) << "a worker id was used by two threads at once";
  for (uint32_t i = 0; i < items; ++i) ASSERT_EQ(runs[i].load(), 1) << "item " << i;
}

TEST(ForkJoinPoolTest, EveryItemRunsOnceWithDenseWorkerIds) {
  for (int helpers : {0, 1, 3}) {
    ForkJoinPool pool(helpers);
    EXPECT_EQ(pool.helpers(), helpers);
    for (uint32_t items : {0u, 1u, 2u, 7u, 64u, 1000u}) {
      for (int max_workers : {1, 2, 4, 8}) CheckLoop(pool, items, max_workers);
    }
  }
}

TEST(ForkJoinPoolTest, NoHelpersOrOneWorkerRunsOnTheCaller) {
  for (auto [helpers, max_workers] : {std::pair{0, 4}, std::pair{2, 1}}) {
    ForkJoinPool pool(helpers);
    const std::thread::id me = std::this_thread::get_id();
    bool elsewhere = false;  // written only by the caller if the contract holds
    EXPECT_EQ(pool.ParallelFor(16, max_workers,
                               [&](int worker, uint32_t) {
                                 if (worker != 0 || std::this_thread::get_id() != me) {
                                   elsewhere = true;
                                 }
                               }),
              1);
    EXPECT_FALSE(elsewhere);
    EXPECT_EQ(pool.ParallelFor(0, max_workers, [](int, uint32_t) {}), 0);
  }
}

// Each item waits (bounded) until both the caller and a helper are in the
// loop: without a working helper the caller would be stuck in its first item
// until the deadline. (Waiting in item 0 alone would let a fast helper claim
// both items before the caller claims any.)
TEST(ForkJoinPoolTest, HelpersJoinTheCallersLoop) {
  ForkJoinPool pool(1);
  std::atomic<bool> helper_ran{false}, caller_ran{false};
  const int ran = pool.ParallelFor(2, 2, [&](int worker, uint32_t) {
    (worker != 0 ? helper_ran : caller_ran) = true;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!(helper_ran && caller_ran) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  EXPECT_TRUE(helper_ran);
  EXPECT_EQ(ran, 2);  // the caller and the helper each ran an item
  EXPECT_GE(pool.joins(), 1u);
}

// A caller whose helpers are all busy elsewhere does not wait for them.
TEST(ForkJoinPoolTest, BusyHelpersAreNotWaitedFor) {
  ForkJoinPool pool(1);
  std::mutex mu;
  std::condition_variable cv;
  bool release = false, holding = false;
  std::thread other([&] {
    // The caller's item waits for the helper to take the other one, which then
    // blocks until released.
    pool.ParallelFor(2, 2, [&](int worker, uint32_t) {
      std::unique_lock<std::mutex> lock(mu);
      if (worker == 0) {
        cv.wait_for(lock, std::chrono::seconds(20), [&] { return holding; });
        return;
      }
      holding = true;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    });
  });
  bool helper_held = false;
  {
    std::unique_lock<std::mutex> lock(mu);
    helper_held = cv.wait_for(lock, std::chrono::seconds(20), [&] { return holding; });
  }
  // The only helper is held by `other`'s loop: this loop runs on its caller.
  std::atomic<int> ran{0};
  EXPECT_EQ(pool.ParallelFor(100, 2,
                             [&](int worker, uint32_t) {
                               EXPECT_EQ(worker, 0);
                               ran.fetch_add(1);
                             }),
            1);
  EXPECT_EQ(ran.load(), 100);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  other.join();
  EXPECT_TRUE(helper_held);
}

TEST(ForkJoinPoolTest, ConcurrentCallersShareTheHelpers) {
  ForkJoinPool pool(2);
  std::vector<std::thread> callers;
  std::atomic<uint64_t> total{0};
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < 200; ++round) {
        const uint32_t items = 1 + static_cast<uint32_t>((round * 7 + c) % 13);
        std::vector<std::atomic<int>> runs(items);
        pool.ParallelFor(items, 3, [&](int worker, uint32_t i) {
          EXPECT_LT(worker, 3);
          runs[i].fetch_add(1);
        });
        for (uint32_t i = 0; i < items; ++i) ASSERT_EQ(runs[i].load(), 1);
        total.fetch_add(items);
      }
    });
  }
  for (std::thread& t : callers) t.join();
  uint64_t expected = 0;
  for (int c = 0; c < 4; ++c) {
    for (int round = 0; round < 200; ++round) expected += 1 + (round * 7 + c) % 13;
  }
  EXPECT_EQ(total.load(), expected);
}

TEST(ForkJoinPoolDeathTest, RejectsBadArguments) {
  EXPECT_DEATH(ForkJoinPool(-1), "helpers");
  ForkJoinPool pool(1);
  EXPECT_DEATH(pool.ParallelFor(4, 0, [](int, uint32_t) {}), "max_workers");
}

}  // namespace
}  // namespace mooncake
