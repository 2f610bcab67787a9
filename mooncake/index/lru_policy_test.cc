#include "mooncake/index/lru_policy.h"

#include <span>
#include <vector>

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

// Keys 0..n-1 admitted one by one: 0 is the least recent.
LruPolicy<> Ordered(int n, std::vector<BlockKey>* keys) {
  LruPolicy<> lru;
  for (int i = 0; i < n; ++i) {
    keys->push_back(PolicyChain(100 * i, 1)[0]);
    lru.Admit(std::span<const BlockKey>(&keys->back(), 1), 0, 1);
  }
  return lru;
}

TEST(LruPolicyTest, SkippedKeysKeepTheirPlaceRejectedOnesAreRefreshed) {
  std::vector<BlockKey> k;
  LruPolicy<> lru = Ordered(4, &k);
  // k0 is skipped (not the caller's), k1 rejected (in use): k2 goes.
  auto first = [&](const BlockKey& key) -> EvictVerdict {
    if (key == k[0]) return EvictVerdict::kSkip;
    if (key == k[1]) return EvictVerdict::kKeep;
    return EvictVerdict::kEvict;
  };
  EXPECT_EQ(lru.Evict(first)->key, k[2]);
  // k0 is still the least recent; k1 became the most recent.
  auto always = [](const BlockKey&) { return true; };
  EXPECT_EQ(lru.Evict(always)->key, k[0]);
  EXPECT_EQ(lru.Evict(always)->key, k[3]);
  EXPECT_EQ(lru.Evict(always)->key, k[1]);
  EXPECT_FALSE(lru.Evict(always).has_value());
}

TEST(LruPolicyTest, AScanSkipsABoundedNumberOfKeys) {
  std::vector<BlockKey> k;
  const int n = static_cast<int>(LruPolicy<>::kMaxSkipped) + 2;
  LruPolicy<> lru = Ordered(n, &k);
  auto only_newest = [&](const BlockKey& key) -> EvictVerdict {
    return key == k.back() ? EvictVerdict::kEvict : EvictVerdict::kSkip;
  };
  EXPECT_FALSE(lru.Evict(only_newest).has_value()) << "past the bound";
  EXPECT_EQ(lru.size(), static_cast<size_t>(n));
  auto always = [](const BlockKey&) { return true; };
  EXPECT_EQ(lru.Evict(always)->key, k[0]) << "the order is unchanged";
}

}  // namespace
}  // namespace mooncake::index
