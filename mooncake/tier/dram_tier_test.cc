#include "mooncake/tier/dram_tier.h"

#include <memory>

#include "gtest/gtest.h"
#include "mooncake/tier/blocking.h"
#include "mooncake/tier/tier_testing.h"

namespace mooncake::tier {

template <>
struct TierTestTraits<DramTier> {
  static std::unique_ptr<DramTier> Make(uint64_t capacity_bytes) {
    return std::make_unique<DramTier>(capacity_bytes);
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(Dram, TierConformanceTest, ::testing::Types<DramTier>);

namespace {

TEST(DramTierTest, CompletesInline) {
  DramTier tier(1 << 20);
  bool called = false;
  const auto data = TestObject("k", 100);
  tier.Write("k", data, {}, [&](absl::Status s) {
    EXPECT_TRUE(s.ok());
    called = true;
  });
  EXPECT_TRUE(called);
}

TEST(DramTierTest, FullIsResourceExhausted) {
  DramTier tier(4096);
  EXPECT_TRUE(WriteBlocking(tier, "a", TestObject("a", 4000)).ok());
  absl::Status s = WriteBlocking(tier, "b", TestObject("b", 200));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(tier.stats().write_failures, 1u);
}

}  // namespace
}  // namespace mooncake::tier
