#include "mooncake/base/histogram.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake {
namespace {

using H = LatencyHistogram;

uint64_t NearestRank(const std::vector<uint64_t>& sorted, double q) {
  uint64_t rank = static_cast<uint64_t>(std::ceil(q * sorted.size()));
  rank = std::clamp<uint64_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

TEST(HistogramTest, EmptyReportsZeros) {
  H h;
  EXPECT_EQ(h.Count(), 0u);
  EXPECT_EQ(h.P50(), 0u);
  EXPECT_EQ(h.Min(), 0u);
  EXPECT_EQ(h.Max(), 0u);
  EXPECT_EQ(h.Mean(), 0.0);
}

TEST(HistogramTest, BucketGeometryIsContiguousAndCoversUint64) {
  EXPECT_EQ(H::BucketIndex(0), 0u);
  EXPECT_EQ(H::BucketIndex(127), 127u);
  EXPECT_EQ(H::BucketIndex(128), 128u);
  EXPECT_EQ(H::BucketIndex(UINT64_MAX), H::kBucketCount - 1);
  for (size_t i = 0; i + 1 < H::kBucketCount; ++i) {
    ASSERT_EQ(H::BucketLowerBound(i) + H::BucketWidth(i), H::BucketLowerBound(i + 1)) << i;
    ASSERT_EQ(H::BucketIndex(H::BucketLowerBound(i)), i);
    ASSERT_EQ(H::BucketIndex(H::BucketLowerBound(i + 1) - 1), i);
    // Relative bucket width bounds the error: width <= lower * 2^-6.
    if (i >= H::kExactLimit) {
      ASSERT_LE(H::BucketWidth(i) * 64, H::BucketLowerBound(i)) << i;
    }
  }
}

TEST(HistogramTest, SmallValuesAreExact) {
  H h;
  for (uint64_t v = 0; v < 100; ++v) h.Record(v);
  EXPECT_EQ(h.Count(), 100u);
  EXPECT_EQ(h.Quantile(0.5), 49u);
  EXPECT_EQ(h.Quantile(0.99), 98u);
  EXPECT_EQ(h.Quantile(1.0), 99u);
  EXPECT_EQ(h.Quantile(0.0), 0u);
  EXPECT_EQ(h.Sum(), 4950u);
  EXPECT_EQ(h.Min(), 0u);
  EXPECT_EQ(h.Max(), 99u);
}

// The documented error bound, against an exact sorted reference, over value
// distributions that span many octaves.
TEST(HistogramTest, QuantilesWithinStatedRelativeErrorOfSortedReference) {
  std::mt19937_64 rng(12345);
  std::lognormal_distribution<double> lognormal(10.0, 2.5);
  for (int trial = 0; trial < 5; ++trial) {
    H h;
    std::vector<uint64_t> values;
    const int n = 20000 + trial * 7919;
    for (int i = 0; i < n; ++i) {
      const uint64_t v = static_cast<uint64_t>(lognormal(rng));
      values.push_back(v);
      h.Record(v);
    }
    std::sort(values.begin(), values.end());
    for (double q : {0.0, 0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0}) {
      const double ref = static_cast<double>(NearestRank(values, q));
      const double got = static_cast<double>(h.Quantile(q));
      EXPECT_LE(std::fabs(got - ref), ref * H::kRelativeError) << "q=" << q << " trial=" << trial;
    }
    EXPECT_EQ(h.Min(), values.front());
    EXPECT_EQ(h.Max(), values.back());
  }
}

TEST(HistogramTest, MergeEqualsRecordingEverythingInOne) {
  H a, b, all;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 5000; ++i) {
    const uint64_t v = rng() % 10'000'000;
    (i % 3 == 0 ? a : b).Record(v);
    all.Record(v);
  }
  a.Merge(b);
  EXPECT_EQ(a.Count(), all.Count());
  EXPECT_EQ(a.Sum(), all.Sum());
  EXPECT_EQ(a.Min(), all.Min());
  EXPECT_EQ(a.Max(), all.Max());
  for (double q : {0.5, 0.9, 0.99, 0.999}) EXPECT_EQ(a.Quantile(q), all.Quantile(q));
}

TEST(HistogramTest, MergeOfEmptyChangesNothing) {
  H a, empty;
  a.Record(500);
  a.Merge(empty);
  EXPECT_EQ(a.Count(), 1u);
  EXPECT_EQ(a.Min(), 500u);
}

TEST(HistogramTest, ConcurrentRecordsAreAllCounted) {
  H h;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (uint64_t i = 0; i < 10000; ++i) h.Record(i * (t + 1));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(h.Count(), 40000u);
  EXPECT_EQ(h.Max(), 9999u * 4);
}

TEST(HistogramTest, ResetEmpties) {
  H h;
  h.RecordN(1000, 5);
  EXPECT_EQ(h.Count(), 5u);
  h.Reset();
  EXPECT_EQ(h.Count(), 0u);
  EXPECT_EQ(h.P99(), 0u);
}

TEST(HistogramTest, CumulativeCountsLeaveOutOnlyTheStraddlingBucket) {
  H h;
  for (uint64_t v = 1; v <= 200; ++v) h.Record(v);
  const std::vector<uint64_t> bounds = {0, 127, 150, 1000, UINT64_MAX};
  std::vector<uint64_t> out(bounds.size());
  h.CountsAtOrBelow(bounds, out);
  // Exact below 128; 150 shares the width-2 bucket [150, 151] with 151, so it is left out.
  EXPECT_EQ(out, (std::vector<uint64_t>{0, 127, 149, 200, 200}));
}

TEST(HistogramDeathTest, QuantileOutsideRangeAsserts) {
  H h;
  EXPECT_DEATH((void)h.Quantile(1.5), "quantile outside");
}

}  // namespace
}  // namespace mooncake
