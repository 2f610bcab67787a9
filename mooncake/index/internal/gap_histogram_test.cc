#include "mooncake/index/internal/gap_histogram.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace mooncake::index_internal {
namespace {

TEST(GapHistogramTest, BucketsAreHalfOctaves) {
  EXPECT_EQ(GapHistogram::Bucket(0), 0);
  EXPECT_EQ(GapHistogram::Bucket(1), 0);
  EXPECT_EQ(GapHistogram::Bucket(2), 2);
  EXPECT_EQ(GapHistogram::Bucket(3), 3);  // 3 >= 2 * sqrt(2)
  EXPECT_EQ(GapHistogram::Bucket(4), 4);
  EXPECT_EQ(GapHistogram::Bucket(5), 4);
  EXPECT_EQ(GapHistogram::Bucket(6), 5);
  EXPECT_EQ(GapHistogram::Bucket(~uint64_t{0}), 127);
  for (uint64_t g = 2; g < 100000; g = g * 3 / 2 + 1) {
    const int b = GapHistogram::Bucket(g);
    EXPECT_LE(GapHistogram::UpperEdge(b - 1), static_cast<double>(g) * 1.0000001) << g;
    EXPECT_GT(GapHistogram::UpperEdge(b), static_cast<double>(g)) << g;
  }
}

TEST(GapHistogramTest, QuantileWithinAHalfOctave) {
  GapHistogram h;
  for (uint64_t g = 1; g <= 1000; ++g) h.Record(g * 10);  // uniform on [10, 10000]
  const double median = h.Quantile(0.5);
  EXPECT_GE(median, 5000.0);
  EXPECT_LE(median, 5000.0 * 1.4143);
  EXPECT_LE(h.Quantile(0.1), 1000.0 * 1.4143);
  EXPECT_GE(h.Quantile(1.0), 10000.0);
}

TEST(GapHistogramTest, OldCountsFade) {
  GapHistogram h;
  for (uint64_t i = 0; i < GapHistogram::kHalveAt - 1; ++i) h.Record(100);
  EXPECT_LT(h.Quantile(0.5), 200.0);
  // The workload shifts to long gaps: after enough of them, the median follows.
  for (uint64_t i = 0; i < 2 * GapHistogram::kHalveAt; ++i) h.Record(100000);
  EXPECT_GT(h.Quantile(0.5), 50000.0);
  EXPECT_LT(h.total(), GapHistogram::kHalveAt);
}

TEST(GapHistogramDeathTest, EmptyHasNoQuantile) {
  GapHistogram h;
  EXPECT_DEATH(h.Quantile(0.5), "empty");
}

}  // namespace
}  // namespace mooncake::index_internal
