#include "mooncake/compress/kv_data_testing.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "mooncake/compress/internal/entropy.h"

namespace mooncake::compress {
namespace {

TEST(ConversionTest, KnownValues) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBFloat16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToBFloat16(1.0f + 0x1p-8f), 0x3F80);            // tie -> even
  EXPECT_EQ(FloatToBFloat16(1.0f + 0x1p-7f + 0x1p-8f), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(FloatToFloat16(1.0f), 0x3C00);
  EXPECT_EQ(FloatToFloat16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToFloat16(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToFloat16(1e9f), 0x7BFF);      // saturates
  EXPECT_EQ(FloatToFloat16(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToFloat16(0x1p-14f), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToFloat16(std::numeric_limits<float>::quiet_NaN()), 0x7E00);
  EXPECT_EQ(FloatToFloat8E4M3(1.0f), 0x38);
  EXPECT_EQ(FloatToFloat8E4M3(448.0f), 0x7E);
  EXPECT_EQ(FloatToFloat8E4M3(-1000.0f), 0xFE);
  EXPECT_EQ(FloatToFloat8E4M3(0x1p-9f), 0x01);
  EXPECT_EQ(FloatToFloat8E5M2(1.0f), 0x3C);
  EXPECT_EQ(FloatToFloat8E5M2(57344.0f), 0x7B);
  EXPECT_EQ(FloatToFloat8E5M2(0x1p-16f), 0x01);
}

TEST(SyntheticKvTest, IsDeterministicAndSeedDependent) {
  EXPECT_TRUE(SyntheticKvBytes(10000, DType::kBFloat16, 1) ==
              SyntheticKvBytes(10000, DType::kBFloat16, 1));
  EXPECT_FALSE(SyntheticKvBytes(10000, DType::kBFloat16, 1) ==
               SyntheticKvBytes(10000, DType::kBFloat16, 2));
  EXPECT_EQ(SyntheticKvBytes(12345, DType::kFloat16).size(), 12345u);
}

TEST(SyntheticKvTest, HasTheStatedStatistics) {
  SyntheticKvOptions o;
  o.tokens = 512;
  const std::vector<float> v = SyntheticKv(o);
  // Per-channel RMS spans about two decades; neighbouring tokens are correlated.
  double lo = 1e9, hi = 0, corr_num = 0, corr_den = 0;
  for (size_t c = 0; c < o.channels; ++c) {
    double sq = 0;
    for (size_t t = 0; t < o.tokens; ++t)
      sq += double{v[t * o.channels + c]} * v[t * o.channels + c];
    const double rms = std::sqrt(sq / o.tokens);
    lo = std::min(lo, rms), hi = std::max(hi, rms);
    double mean = 0;
    for (size_t t = 0; t < o.tokens; ++t) mean += v[t * o.channels + c] / o.tokens;
    for (size_t t = 1; t < o.tokens; ++t) {
      corr_num += (v[t * o.channels + c] - mean) * (v[(t - 1) * o.channels + c] - mean);
      corr_den += (v[t * o.channels + c] - mean) * (v[t * o.channels + c] - mean);
    }
  }
  EXPECT_GT(hi / lo, 100);
  EXPECT_NEAR(corr_num / corr_den, o.token_correlation, 0.05);
  // bf16 planes: the high plane is compressible, the low one is not.
  const std::vector<std::byte> bf16 = ConvertFloats(v, DType::kBFloat16);
  const double bound =
      bf16.size() / compress_internal::PlaneEntropyBoundBytes(bf16, DType::kBFloat16);
  EXPECT_GT(bound, 1.2);
  EXPECT_LT(bound, 1.8);
}

}  // namespace
}  // namespace mooncake::compress
