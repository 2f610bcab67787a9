#include "tools/bench/value_pool.h"

#include <string>

#include "gtest/gtest.h"

namespace mooncake::bench {
namespace {

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

TEST(ValuePoolDeathTest, ValueLargerThanThePoolAsserts) {
  ValuePool p(100);
  EXPECT_DEATH((void)p.Value("k", 101), "larger than the pool");
}

}  // namespace
}  // namespace mooncake::bench
