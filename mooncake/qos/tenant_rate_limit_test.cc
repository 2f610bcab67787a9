#include "mooncake/qos/tenant_rate_limit.h"

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "mooncake/base/clock.h"

namespace mooncake::qos {
namespace {

TEST(TenantRateLimitTest, ATenantOverItsRateIsRefusedAndAnotherIsNot) {
  FakeClock clock;
  TenantRateLimit limits(&clock);
  ASSERT_TRUE(limits.SetRate("slow", 1000).ok());  // burst: 1000 bytes
  EXPECT_TRUE(limits.Admit("slow", 600).ok());
  EXPECT_TRUE(limits.Admit("slow", 400).ok());
  const absl::Status refused = limits.Admit("slow", 500);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(refused.message(), "tenant 'slow' over its put rate of 1000"))
      << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "retry in 500 ms")) << refused;
  EXPECT_EQ(limits.Refused("slow"), 1u);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(limits.Admit("free", 1 << 30).ok());
  EXPECT_EQ(limits.Refused("free"), 0u);
  clock.AdvanceMs(500);
  EXPECT_TRUE(limits.Admit("slow", 500).ok());
  EXPECT_FALSE(limits.Admit("slow", 1).ok());
  EXPECT_EQ(limits.Refused("slow"), 2u);
}

TEST(TenantRateLimitTest, RefundGivesBackWhatAnAdmitTook) {
  FakeClock clock;
  TenantRateLimit limits(&clock);
  ASSERT_TRUE(limits.SetRate("a", 1000).ok());
  ASSERT_TRUE(limits.Admit("a", 1000).ok());
  EXPECT_FALSE(limits.Admit("a", 1000).ok());
  limits.Refund("a", 1000);
  EXPECT_TRUE(limits.Admit("a", 1000).ok());
  limits.Refund("unlimited", 5);  // no-op
}

TEST(TenantRateLimitTest, RateZeroRemovesTheLimitAndRatesChangeAtRunTime) {
  FakeClock clock;
  TenantRateLimit limits(&clock);
  ASSERT_TRUE(limits.SetRate("a", 100).ok());
  EXPECT_EQ(limits.Rate("a"), 100u);
  ASSERT_TRUE(limits.Admit("a", 100).ok());
  EXPECT_FALSE(limits.Admit("a", 100).ok());
  ASSERT_TRUE(limits.SetRate("a", 0).ok());
  EXPECT_EQ(limits.Rate("a"), 0u);
  EXPECT_TRUE(limits.Admit("a", 1 << 20).ok());
  ASSERT_TRUE(limits.SetRate("a", 10).ok());
  EXPECT_EQ(limits.Rate("a"), 10u);
  EXPECT_TRUE(limits.Admit("a", 10).ok());  // limited again: starts full
  EXPECT_FALSE(limits.Admit("a", 10).ok());
  EXPECT_EQ(limits.Refused("a"), 2u);
  limits.RemoveTenant("a");
  EXPECT_EQ(limits.Refused("a"), 0u);
  EXPECT_TRUE(limits.Admit("a", 1 << 20).ok());
}

TEST(TenantRateLimitTest, AnObjectAboveTheBurstIsAdmittedWhenFullThenSlowsTheNext) {
  FakeClock clock;
  TenantRateLimit limits(&clock);
  ASSERT_TRUE(limits.SetRate("a", 1000).ok());
  EXPECT_TRUE(limits.Admit("a", 3000).ok());  // full bucket: admitted, 2000 in debt
  EXPECT_FALSE(limits.Admit("a", 1).ok());
  clock.AdvanceMs(2000);
  EXPECT_FALSE(limits.Admit("a", 1).ok());
  clock.AdvanceMs(1);
  EXPECT_TRUE(limits.Admit("a", 1).ok());
}

TEST(TenantRateLimitTest, SetRateValidates) {
  TenantRateLimit limits;
  EXPECT_EQ(limits.SetRate("", 5).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(limits.SetRate("a", TenantRateLimit::kMaxRateBytesPerSec + 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(limits.SetRate("a", TenantRateLimit::kMaxRateBytesPerSec).ok());
}

// Under the clock's control the admitted bytes of many threads never exceed
// burst + rate x elapsed.
TEST(TenantRateLimitTest, ConcurrentAdmitsNeverExceedTheRate) {
  FakeClock clock;
  TenantRateLimit limits(&clock);
  ASSERT_TRUE(limits.SetRate("a", 100'000).ok());
  std::atomic<uint64_t> admitted{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        if (limits.Admit("a", 1000).ok()) admitted.fetch_add(1000, std::memory_order_relaxed);
        if (limits.Admit("b", 1000).ok()) std::this_thread::yield();
      }
    });
  }
  for (int ms = 0; ms < 200; ++ms) {
    clock.AdvanceMs(1);
    std::this_thread::yield();
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  EXPECT_LE(admitted.load(), 100'000u + 100'000u * 200 / 1000);
  EXPECT_GT(admitted.load(), 0u);
}

}  // namespace
}  // namespace mooncake::qos
