#include "mooncake/base/clock.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake {
namespace {

TEST(ClockTest, MonotonicClockNeverGoesBack) {
  Clock& clock = MonotonicClock::Get();
  int64_t prev = clock.NowNs();
  for (int i = 0; i < 10000; ++i) {
    const int64_t now = clock.NowNs();
    ASSERT_GE(now, prev);
    prev = now;
  }
}

TEST(ClockTest, MonotonicClockAdvancesWithRealTime) {
  Clock& clock = MonotonicClock::Get();
  const int64_t start = clock.NowNs();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_GE(clock.NowNs() - start, 5'000'000);
}

TEST(ClockTest, FakeClockMovesOnlyWhenTold) {
  FakeClock clock(1000);
  EXPECT_EQ(clock.NowNs(), 1000);
  clock.AdvanceUs(2);
  EXPECT_EQ(clock.NowNs(), 3000);
  clock.AdvanceMs(1);
  EXPECT_EQ(clock.NowNs(), 1'003'000);
  EXPECT_EQ(clock.NowUs(), 1003);
  EXPECT_EQ(clock.NowMs(), 1);
  clock.SetNs(5'000'000'000);
  EXPECT_EQ(clock.NowMs(), 5000);
}

TEST(ClockTest, FakeClockIsSafeAcrossThreads) {
  FakeClock clock;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) clock.AdvanceNs(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(clock.NowNs(), 4000);
}

TEST(ClockDeathTest, FakeClockRefusesToGoBack) {
  FakeClock clock(100);
  EXPECT_DEATH(clock.SetNs(50), "cannot go back");
  EXPECT_DEATH(clock.AdvanceNs(-1), "cannot go back");
}

}  // namespace
}  // namespace mooncake
