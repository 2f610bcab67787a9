#include "mooncake/qos/token_bucket.h"

#include <atomic>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "mooncake/base/clock.h"

namespace mooncake::qos {
namespace {

TokenBucketOptions Bytes(uint64_t per_sec, uint64_t burst) {
  return TokenBucketOptions{per_sec, burst, 0, 0};
}

TEST(TokenBucketTest, StartsFullThenRefusesUntilRefilled) {
  FakeClock clock;
  TokenBucket tb(Bytes(1'000'000, 10'000), &clock);
  EXPECT_TRUE(tb.TryAcquire(6'000));
  EXPECT_TRUE(tb.TryAcquire(4'000));
  EXPECT_FALSE(tb.TryAcquire(1));
  clock.AdvanceUs(999);  // 999 bytes at 1 MB/s
  EXPECT_FALSE(tb.TryAcquire(1000));
  EXPECT_TRUE(tb.TryAcquire(999));
  EXPECT_EQ(tb.AvailableBytes(), 0);
}

TEST(TokenBucketTest, FractionalRefillIsCarriedNotLost) {
  FakeClock clock;
  TokenBucket tb(Bytes(3, 100), &clock);  // 3 bytes/s: one byte per 333.3 ms
  ASSERT_TRUE(tb.TryAcquire(100));
  for (int i = 0; i < 1000; ++i) {
    clock.AdvanceNs(1'000'000);  // 1 ms at a time: 0.003 byte per step
    (void)tb.AvailableBytes();   // each read refills; rounding must not lose the remainder
  }
  EXPECT_EQ(tb.AvailableBytes(), 3);
}

TEST(TokenBucketTest, NeverRefillsPastTheBurst) {
  FakeClock clock;
  TokenBucket tb(Bytes(1'000'000, 5'000), &clock);
  clock.AdvanceMs(1000);
  EXPECT_EQ(tb.AvailableBytes(), 5'000);
  EXPECT_TRUE(tb.TryAcquire(5'000));
  EXPECT_FALSE(tb.TryAcquire(1));
}

TEST(TokenBucketTest, LongRunRateMatchesTheConfiguredRate) {
  FakeClock clock;
  constexpr uint64_t kRate = 10'000'000, kBurst = 64 * 1024;
  TokenBucket tb(Bytes(kRate, kBurst), &clock);
  std::mt19937_64 rng(5);
  uint64_t admitted = 0;
  constexpr int64_t kRunNs = 10'000'000'000;  // 10 simulated seconds
  while (clock.NowNs() < kRunNs) {
    const uint64_t want = 1 + rng() % 16384;
    if (tb.TryAcquire(want)) {
      admitted += want;
    } else {
      clock.AdvanceNs(1 + static_cast<int64_t>(rng() % 20000));
    }
  }
  const double expected = static_cast<double>(kRate) * kRunNs / 1e9 + kBurst;
  EXPECT_LE(admitted, expected);
  EXPECT_GE(admitted, expected * 0.99);
}

TEST(TokenBucketTest, OpsLimitAppliesWithItsOwnBurst) {
  FakeClock clock;
  TokenBucket tb(TokenBucketOptions{0, 0, 100, 10}, &clock);  // 100 ops/s, burst 10
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(tb.TryAcquire(1 << 20)) << i;
  EXPECT_FALSE(tb.TryAcquire(0));
  EXPECT_EQ(tb.WaitNs(0), 10'000'000);
  clock.AdvanceNs(9'999'999);
  EXPECT_FALSE(tb.TryAcquire(0));
  clock.AdvanceNs(1);
  EXPECT_TRUE(tb.TryAcquire(0));
  EXPECT_EQ(tb.AvailableBytes(), INT64_MAX);
}

TEST(TokenBucketTest, BothLimitsMustAdmitAndNeitherIsTakenOnRefusal) {
  FakeClock clock;
  TokenBucket tb(TokenBucketOptions{1000, 1000, 1, 2}, &clock);
  EXPECT_TRUE(tb.TryAcquire(100));
  EXPECT_TRUE(tb.TryAcquire(100));
  EXPECT_FALSE(tb.TryAcquire(100));  // ops exhausted; bytes must stay at 800
  EXPECT_EQ(tb.AvailableBytes(), 800);
  EXPECT_EQ(tb.AvailableOps(), 0);
  clock.AdvanceMs(1000);  // +1 op, bytes back to the 1000 burst
  EXPECT_EQ(tb.AvailableOps(), 1);
  EXPECT_EQ(tb.AvailableBytes(), 1000);
  EXPECT_TRUE(tb.TryAcquire(1000));
  EXPECT_FALSE(tb.TryAcquire(0));
}

TEST(TokenBucketTest, WaitNsIsExactlyWhenTheAcquireSucceeds) {
  FakeClock clock;
  TokenBucket tb(Bytes(7'000, 10'000), &clock);
  ASSERT_TRUE(tb.TryAcquire(10'000));
  const int64_t wait_ns = tb.WaitNs(1'234);
  ASSERT_GT(wait_ns, 0);
  clock.AdvanceNs(wait_ns - 1);
  EXPECT_FALSE(tb.TryAcquire(1'234));
  clock.AdvanceNs(1);
  EXPECT_TRUE(tb.TryAcquire(1'234));
}

TEST(TokenBucketTest, RequestAboveTheBurstWaitsForAFullBucketAndLeavesDebt) {
  FakeClock clock;
  TokenBucket tb(Bytes(1'000, 1'000), &clock);
  ASSERT_TRUE(tb.TryAcquire(1));
  EXPECT_FALSE(tb.TryAcquire(3'000)) << "needs a full bucket";
  clock.AdvanceMs(1);
  EXPECT_TRUE(tb.TryAcquire(3'000));
  EXPECT_EQ(tb.AvailableBytes(), -2'000);
  EXPECT_EQ(tb.WaitNs(1), 2'001'000'000);  // pay off 2000 bytes of debt, then 1
}

TEST(TokenBucketTest, RefundGivesBackTokensUpToTheBurst) {
  FakeClock clock;
  TokenBucket tb(TokenBucketOptions{1000, 1000, 10, 2}, &clock);
  ASSERT_TRUE(tb.TryAcquire(700));
  ASSERT_TRUE(tb.TryAcquire(300));
  EXPECT_FALSE(tb.TryAcquire(1));
  tb.Refund(300);
  EXPECT_EQ(tb.AvailableBytes(), 300);
  EXPECT_EQ(tb.AvailableOps(), 1);
  tb.Refund(5000);  // never past the burst
  EXPECT_EQ(tb.AvailableBytes(), 1000);
  EXPECT_EQ(tb.AvailableOps(), 2);
  EXPECT_TRUE(tb.TryAcquire(1000));
}

TEST(TokenBucketTest, SetOptionsChangesLimitsAtRunTime) {
  FakeClock clock;
  TokenBucket tb(Bytes(1'000, 10'000), &clock);
  ASSERT_TRUE(tb.SetOptions(Bytes(1'000'000, 2'000)).ok());
  EXPECT_EQ(tb.AvailableBytes(), 2'000) << "tokens clamp to the new burst";
  ASSERT_TRUE(tb.TryAcquire(2'000));
  clock.AdvanceMs(1);
  EXPECT_EQ(tb.AvailableBytes(), 1'000) << "the new rate applies";
  ASSERT_TRUE(tb.SetOptions(Bytes(0, 0)).ok());
  EXPECT_TRUE(tb.TryAcquire(uint64_t{1} << 40)) << "0 means unlimited";
  EXPECT_EQ(tb.SetOptions(Bytes(10, 0)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TokenBucketTest, ValidateNamesTheBadField) {
  const absl::Status s = TokenBucket::Validate(TokenBucketOptions{0, 0, 5, 0});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("burst_ops is 0"), std::string::npos) << s;
  EXPECT_EQ(TokenBucket::Validate(Bytes(uint64_t{1} << 51, 10)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(TokenBucket::Validate(TokenBucketOptions{}).ok());
}

// Threads race for tokens while another advances the clock: the total
// admitted never exceeds burst + rate * elapsed.
TEST(TokenBucketTest, ConcurrentAcquirersNeverExceedTheRate) {
  FakeClock clock;
  constexpr uint64_t kRate = 1'000'000, kBurst = 10'000;
  TokenBucket tb(Bytes(kRate, kBurst), &clock);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      uint64_t n = 100 + 37 * t;
      while (!stop.load(std::memory_order_relaxed)) {
        if (tb.TryAcquire(n)) admitted.fetch_add(n, std::memory_order_relaxed);
      }
    });
  }
  for (int i = 0; i < 2000; ++i) {
    clock.AdvanceUs(50);
    std::this_thread::yield();
  }
  stop.store(true);
  for (auto& t : threads) t.join();
  const uint64_t limit = kBurst + kRate * static_cast<uint64_t>(clock.NowNs()) / 1'000'000'000;
  EXPECT_LE(admitted.load(), limit);
  EXPECT_GT(admitted.load(), 0u);
}

}  // namespace
}  // namespace mooncake::qos
