#include "mooncake/index/prefix_cache.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/index/hash_chain_index.h"
#include "mooncake/index/lru_policy.h"
#include "mooncake/index/radix_tree.h"
#include "mooncake/index/reuse_depth_policy.h"
#include "mooncake/index/s3fifo_policy.h"

namespace mooncake::index {
namespace {

std::vector<BlockKey> Chain(std::initializer_list<uint32_t> ids) {
  static const BlockKeyer keyer = *BlockKeyer::Create(KeyNamespace{"cache-test"}, 1);
  std::vector<uint32_t> v(ids);
  return keyer.Compute(v);
}

template <typename Cache>
class PrefixCacheTest : public ::testing::Test {};

template <typename Index, typename Policy>
struct Combo {
  using Cache = PrefixCache<Index, Policy>;
  static Cache Make(uint64_t capacity) {
    if constexpr (std::is_same_v<Policy, ReuseDepthPolicy<>>) {
      return Cache(capacity, 1, Index(), Policy(ReuseDepthOptions{.capacity = capacity}));
    } else {
      return Cache(capacity, 1, Index(), Policy());
    }
  }
};

using Combos = ::testing::Types<
    Combo<RadixTree<uint32_t>, LruPolicy<>>, Combo<RadixTree<uint32_t>, S3FifoPolicy<>>,
    Combo<RadixTree<uint32_t>, ReuseDepthPolicy<>>, Combo<HashChainIndex<uint32_t>, LruPolicy<>>,
    Combo<HashChainIndex<uint32_t>, S3FifoPolicy<>>,
    Combo<HashChainIndex<uint32_t>, ReuseDepthPolicy<>>>;
TYPED_TEST_SUITE(PrefixCacheTest, Combos);

TYPED_TEST(PrefixCacheTest, StaysWithinCapacityAndReturnsEvictedValues) {
  auto cache = TypeParam::Make(5);
  std::vector<Evicted<uint32_t>> evicted;
  const auto a = Chain({1, 2, 3, 4});
  const std::vector<uint32_t> va = {10, 11, 12, 13};
  EXPECT_EQ(cache.Insert(a, va, evicted), (InsertResult{0, 4}));
  EXPECT_TRUE(evicted.empty());
  const auto b = Chain({7, 8, 9});
  const std::vector<uint32_t> vb = {20, 21, 22};
  cache.Insert(b, vb, evicted);
  EXPECT_EQ(evicted.size(), 2u);
  EXPECT_EQ(cache.charged(), 5u);
  EXPECT_EQ(cache.index().size(), 5u);
  for (const auto& e : evicted) {
    EXPECT_EQ(e.charge, 1u);
    EXPECT_EQ(cache.index().Find(e.key), nullptr);
  }
  // Whatever went, each chain's cached part is a prefix: no orphans.
  for (const auto& c : {a, b}) {
    const size_t m = cache.index().MatchLength(c);
    for (size_t i = m; i < c.size(); ++i) EXPECT_EQ(cache.index().Find(c[i]), nullptr);
  }
}

TYPED_TEST(PrefixCacheTest, ChainLongerThanCapacityKeepsItsHead) {
  auto cache = TypeParam::Make(3);
  std::vector<Evicted<uint32_t>> evicted;
  const auto a = Chain({1, 2, 3, 4, 5, 6});
  cache.Insert(a, std::vector<uint32_t>(6, 0), evicted);
  EXPECT_EQ(evicted.size(), 3u);
  EXPECT_EQ(cache.LookupLength(a), 3u);
}

TYPED_TEST(PrefixCacheTest, EraseTakesTheSubtree) {
  auto cache = TypeParam::Make(100);
  std::vector<Evicted<uint32_t>> evicted;
  cache.Insert(Chain({1, 2, 3}), std::vector<uint32_t>(3, 0), evicted);
  cache.Insert(Chain({1, 5}), std::vector<uint32_t>(2, 0), evicted);
  EXPECT_EQ(cache.Erase(Chain({1})[0]).size(), 4u);
  EXPECT_EQ(cache.charged(), 0u);
  EXPECT_EQ(cache.index().size(), 0u);
}

TYPED_TEST(PrefixCacheTest, RandomWorkloadKeepsIndexAndPolicyInStep) {
  auto cache = TypeParam::Make(50);
  std::mt19937_64 rng(5);
  std::vector<Evicted<uint32_t>> evicted;
  static const BlockKeyer keyer = *BlockKeyer::Create(KeyNamespace{"cache-test"}, 1);
  for (int op = 0; op < 2000; ++op) {
    std::vector<uint32_t> ids(1 + rng() % 12);
    for (auto& id : ids) id = static_cast<uint32_t>(rng() % 3);
    const auto chain = keyer.Compute(ids);
    std::vector<uint32_t> out(chain.size());
    const size_t m = cache.Lookup(chain, out);
    evicted.clear();
    const InsertResult r = cache.Insert(chain, ids, evicted);
    ASSERT_EQ(r.matched, m);
    ASSERT_EQ(r.matched + r.inserted, chain.size());
    ASSERT_LE(cache.charged(), 50u);
    ASSERT_EQ(cache.index().size(), cache.policy().size());
  }
}

}  // namespace
}  // namespace mooncake::index
