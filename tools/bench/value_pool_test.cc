#include "tools/bench/value_pool.h"

#include <zstd.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake::bench {
namespace {

// Compressed size / size at zstd level 1.
double CompressedFraction(std::string_view v) {
  std::string out(ZSTD_compressBound(v.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), v.data(), v.size(), 1);
  EXPECT_FALSE(ZSTD_isError(n));
  return static_cast<double>(n) / static_cast<double>(v.size());
}

TEST(ValuePoolTest, ValuesAreDeterministicAndDifferPerKey) {
  ValuePool a(1 << 20), b(1 << 20);
  EXPECT_EQ(a.Value("k1", 1000), b.Value("k1", 1000));  // same across instances (and runs)
  EXPECT_NE(a.Value("k1", 1000), a.Value("k2", 1000));
  EXPECT_EQ(a.Value("k1", 1 << 20).size(), size_t{1} << 20);
}

TEST(ValuePoolTest, CorrectValuePassesBothModes) {
  ValuePool p(1 << 20);
  const std::string v(p.Value("k", 300000));
  for (uint64_t salt = 0; salt < 50; ++salt) {
    EXPECT_TRUE(p.Verify("k", 300000, v, VerifyMode::kSampled, salt).ok());
  }
  EXPECT_TRUE(p.Verify("k", 300000, v, VerifyMode::kFull).ok());
}

TEST(ValuePoolTest, WrongLengthIsDataLoss) {
  ValuePool p(4096);
  const std::string v(p.Value("k", 4096));
  const absl::Status s = p.Verify("k", 4095, v, VerifyMode::kSampled);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("4096 bytes, expected 4095"), std::string::npos) << s;
  EXPECT_TRUE(absl::IsDataLoss(p.Verify("k", 4096, "", VerifyMode::kSampled)));
}

TEST(ValuePoolTest, AnotherKeysValueIsCaughtBySampling) {
  ValuePool p(1 << 20);
  const std::string other(p.Value("other", 65536));
  EXPECT_TRUE(absl::IsDataLoss(p.Verify("k", 65536, other, VerifyMode::kSampled)));
}

TEST(ValuePoolTest, UnfilledValueIsCaughtBySampling) {
  ValuePool p(1 << 20);
  const std::string zeros(65536, '\0');  // right length, never written
  EXPECT_TRUE(absl::IsDataLoss(p.Verify("k", 65536, zeros, VerifyMode::kSampled)));
}

TEST(ValuePoolTest, OneFlippedByteIsCaughtByFullAndNamed) {
  ValuePool p(1 << 20);
  std::string v(p.Value("k", 100000));
  v[77777] ^= 0x40;
  const absl::Status s = p.Verify("k", 100000, v, VerifyMode::kFull);
  EXPECT_TRUE(absl::IsDataLoss(s));
  EXPECT_NE(s.message().find("byte 77777"), std::string::npos) << s;
  // The head and tail windows are always sampled.
  std::string w(p.Value("k", 100000));
  w[99999] ^= 1;
  EXPECT_TRUE(absl::IsDataLoss(p.Verify("k", 100000, w, VerifyMode::kSampled)));
}

// kBf16Kv values are slices of synthetic bf16 KV: they start on an element,
// differ per key, verify like random ones, and compress (the point of them).
TEST(ValuePoolTest, Bf16KvValuesAreKvSlicesThatCompress) {
  ValuePool p(1 << 20, ValueData::kBf16Kv);
  EXPECT_EQ(p.data(), ValueData::kBf16Kv);
  const std::string_view a = p.Value("a", 1 << 20), b = p.Value("b", 1 << 20);
  EXPECT_NE(a, b);
  EXPECT_TRUE(p.Verify("a", 1 << 20, a, VerifyMode::kFull).ok());
  EXPECT_TRUE(absl::IsDataLoss(p.Verify("a", 1 << 20, b, VerifyMode::kSampled)));
  // The value is a slice of the KV buffer at a 64-byte (so element) offset.
  const std::vector<std::byte> kv =
      compress::SyntheticKvBytes((1 << 20) + ValuePool::kSpreadBytes, compress::DType::kBFloat16);
  const auto* base = reinterpret_cast<const char*>(kv.data());
  const std::string_view all(base, kv.size());
  const size_t at = all.find(a.substr(0, 4096));
  ASSERT_NE(at, std::string_view::npos);
  EXPECT_EQ(at % 64, 0u);
  EXPECT_EQ(all.substr(at, a.size()), a);
  // Random values never compress; KV values do (zstd level 1 as a yardstick).
  ValuePool r(1 << 20);
  EXPECT_LT(CompressedFraction(a), 0.95);
  EXPECT_GT(CompressedFraction(r.Value("a", 1 << 20)), 0.99);
}

TEST(ValuePoolDeathTest, ValueLargerThanThePoolAsserts) {
  ValuePool p(100);
  EXPECT_DEATH((void)p.Value("k", 101), "larger than the pool");
}

}  // namespace
}  // namespace mooncake::bench
