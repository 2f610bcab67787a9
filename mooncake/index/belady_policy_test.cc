#include "mooncake/index/belady_policy.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/index/eviction_policy_testing.h"
#include "mooncake/index/lru_policy.h"
#include "mooncake/index/prefix_cache.h"
#include "mooncake/index/radix_tree.h"
#include "mooncake/index/trace_replay.h"

namespace mooncake::index {

// With no future every block is "never read again": the kit checks the
// mechanics (accounting, leaf-first, can_evict) on that degenerate oracle.
template <>
struct PolicyFactory<BeladyPolicy<>> {
  static BeladyPolicy<> Make() { return BeladyPolicy<>(std::make_shared<BeladyFuture<>>()); }
};

namespace {

using BeladyTypes = ::testing::Types<BeladyPolicy<>>;
INSTANTIATE_TYPED_TEST_SUITE_P(Belady, EvictionPolicyConformance, BeladyTypes);

using index_testing::PolicyChain;

template <typename Policy>
double HitRate(const std::vector<std::vector<BlockKey>>& chains, uint64_t capacity, Policy p) {
  PrefixCache<RadixTree<uint32_t>, Policy> cache(capacity, 1, RadixTree<uint32_t>(), std::move(p));
  return Replay<decltype(cache)>(chains, cache).HitRate();
}

TEST(BeladyPolicyTest, FutureListsEachRequestOnce) {
  const auto a = PolicyChain(0, 2);
  const std::vector<std::vector<BlockKey>> chains = {a, {a[0], a[0]}, a};
  const auto future = MakeBeladyFuture<>(std::span<const std::vector<BlockKey>>(chains));
  EXPECT_EQ(future->at(a[0]), (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(future->at(a[1]), (std::vector<uint32_t>{0, 2}));
}

// A, B, C cycled with room for two one-block chains: LRU misses every time
// (a loop one larger than the cache). Belady drops C each time it comes (A and
// B are read sooner; the second time C is never read again): A and B hit in
// requests 3, 4, 6, 7.
TEST(BeladyPolicyTest, EvictsTheFarthestNextUse) {
  const auto a = PolicyChain(0, 1), b = PolicyChain(10, 1), c = PolicyChain(20, 1);
  const std::vector<std::vector<BlockKey>> chains = {a, b, c, a, b, c, a, b};
  const auto future = MakeBeladyFuture<>(std::span<const std::vector<BlockKey>>(chains));
  EXPECT_EQ(HitRate(chains, 2, LruPolicy<>()), 0.0);
  EXPECT_DOUBLE_EQ(HitRate(chains, 2, BeladyPolicy<>(future)), 4.0 / 8.0);
}

TEST(BeladyPolicyTest, IsAtLeastAsGoodAsLruOnChats) {
  const auto chains = index_testing::ConversationWorkload(3, 10, 250);
  const auto future = MakeBeladyFuture<>(std::span<const std::vector<BlockKey>>(chains));
  for (uint64_t capacity : {50, 150, 400}) {
    const double lru = HitRate(chains, capacity, LruPolicy<>());
    const double opt = HitRate(chains, capacity, BeladyPolicy<>(future));
    EXPECT_GE(opt, lru) << capacity;
    EXPECT_GT(opt, 0.0) << capacity;
  }
}

TEST(BeladyPolicyDeathTest, NeedsAFuture) {
  EXPECT_DEATH(BeladyPolicy<>(nullptr), "request sequence");
}

}  // namespace
}  // namespace mooncake::index
