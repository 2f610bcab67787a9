#include "mooncake/index/reuse_depth_policy.h"

#include "gtest/gtest.h"
#include "mooncake/index/eviction_policy_testing.h"

namespace mooncake::index {

template <>
struct PolicyFactory<ReuseDepthPolicy<>> {
  static ReuseDepthPolicy<> Make() {
    return ReuseDepthPolicy<>(ReuseDepthOptions{.capacity = kConformanceCapacity});
  }
};

namespace {

using ReuseDepthTypes = ::testing::Types<ReuseDepthPolicy<>>;
INSTANTIATE_TYPED_TEST_SUITE_P(ReuseDepth, EvictionPolicyConformance, ReuseDepthTypes);

using index_testing::PolicyChain;

auto Always() {
  return [](const BlockKey&) { return true; };
}

TEST(ReuseDepthPolicyTest, ReadBlockOutlivesNewerUnreadOne) {
  ReuseDepthPolicy<> p(ReuseDepthOptions{.capacity = 10, .reuse_bonus = 1.0, .depth_penalty = 0});
  const auto a = PolicyChain(0, 1);
  const auto b = PolicyChain(10, 1);
  p.Admit(a, 0, 1);
  p.Touch(a);  // +10 (one turnover) for the hit
  p.Admit(b, 0, 1);
  EXPECT_EQ(p.Evict(Always())->key, b[0]);
}

TEST(ReuseDepthPolicyTest, DeepBlocksExpireFirst) {
  ReuseDepthPolicy<> p(ReuseDepthOptions{.capacity = 10, .reuse_bonus = 0, .depth_penalty = 1.0});
  const auto deep = PolicyChain(0, 4);
  p.Admit(deep, 0, 1);
  const auto shallow = PolicyChain(10, 1);
  p.Admit(shallow, 0, 1);
  // deep[3] scores 4 - 30, shallow[0] scores 5: the newer shallow block stays.
  EXPECT_EQ(p.Evict(Always())->key, deep[3]);
  EXPECT_EQ(p.Evict(Always())->key, deep[2]);
  EXPECT_EQ(p.Evict(Always())->key, deep[1]);
  EXPECT_EQ(p.Evict(Always())->key, deep[0]);
  EXPECT_EQ(p.Evict(Always())->key, shallow[0]);
}

TEST(ReuseDepthPolicyTest, HitsBeyondTheCapEarnNothing) {
  ReuseDepthPolicy<> p(
      ReuseDepthOptions{.capacity = 10, .reuse_bonus = 1.0, .hit_cap = 1, .depth_penalty = 0});
  const auto a = PolicyChain(0, 1);
  const auto b = PolicyChain(10, 1);
  p.Admit(a, 0, 1);
  for (int i = 0; i < 5; ++i) p.Touch(a);  // capped at one hit: score 1 + 10
  p.Admit(b, 0, 1);
  p.Touch(b);  // score 2 + 10
  EXPECT_EQ(p.Evict(Always())->key, a[0]);
}

}  // namespace
}  // namespace mooncake::index
