#include "mooncake/tier/internal/op_tracker.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace mooncake::tier_internal {
namespace {

TEST(OpTrackerTest, WaitIdleReturnsAtOnceWhenNothingIsInFlight) {
  OpTracker ops;
  ops.WaitIdle();
  EXPECT_EQ(ops.in_flight(), 0u);
}

TEST(OpTrackerTest, WaitIdleWaitsForTheLastEnd) {
  OpTracker ops;
  ops.Begin();
  ops.Begin();
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    ops.WaitIdle();
    returned.store(true);
  });
  ops.End();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(returned.load());  // one still in flight
  EXPECT_EQ(ops.in_flight(), 1u);
  ops.End();
  waiter.join();
  EXPECT_TRUE(returned.load());
}

TEST(OpTrackerTest, CountsAcrossThreads) {
  OpTracker ops;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        ops.Begin();
        ops.End();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ops.in_flight(), 0u);
}

TEST(OpTrackerDeathTest, EndWithoutBeginDies) {
  OpTracker ops;
  EXPECT_DEATH(ops.End(), "without Begin");
}

}  // namespace
}  // namespace mooncake::tier_internal
