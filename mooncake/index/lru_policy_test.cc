#include "mooncake/index/lru_policy.h"

#include "gtest/gtest.h"
#include "mooncake/index/eviction_policy_testing.h"

namespace mooncake::index {
namespace {

using LruTypes = ::testing::Types<LruPolicy<>>;
INSTANTIATE_TYPED_TEST_SUITE_P(Lru, EvictionPolicyConformance, LruTypes);

using index_testing::PolicyChain;

TEST(LruPolicyTest, TouchedChainOutlivesOlderOne) {
  LruPolicy<> lru;
  const auto a = PolicyChain(0, 2);
  const auto b = PolicyChain(10, 2);
  lru.Admit(a, 0, 1);
  lru.Admit(b, 0, 1);
  lru.Touch(a);
  auto always = [](const BlockKey&) { return true; };
  EXPECT_EQ(lru.Evict(always)->key, b[1]);
  EXPECT_EQ(lru.Evict(always)->key, b[0]);
  EXPECT_EQ(lru.Evict(always)->key, a[1]);
}

TEST(LruPolicyTest, AdmitRefreshesThePrefix) {
  LruPolicy<> lru;
  const auto a = PolicyChain(0, 3);
  const auto b = PolicyChain(10, 1);
  lru.Admit(std::span<const BlockKey>(a).first(1), 0, 1);
  lru.Admit(b, 0, 1);
  lru.Admit(a, 1, 1);  // a[0] is the prefix of the new blocks: refreshed
  EXPECT_EQ(lru.Evict([](const BlockKey&) { return true; })->key, b[0]);
}

}  // namespace
}  // namespace mooncake::index
