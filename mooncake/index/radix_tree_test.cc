#include "mooncake/index/radix_tree.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/index/prefix_index_testing.h"

namespace mooncake::index {
namespace {

using RadixTypes = ::testing::Types<RadixTree<uint64_t>>;
INSTANTIATE_TYPED_TEST_SUITE_P(RadixTree, PrefixIndexConformance, RadixTypes);

using index_testing::ChainOf;
using index_testing::ValuesOf;

TEST(RadixTreeTest, LongChainIsOneRun) {
  std::vector<uint32_t> ids(1000);
  for (uint32_t i = 0; i < ids.size(); ++i) ids[i] = i;
  const auto chain = ChainOf(ids);
  RadixTree<uint64_t> tree;
  tree.Insert(chain, ValuesOf(chain.size(), 0));
  EXPECT_EQ(tree.Stats().nodes, 1u);
  // Extending the leaf grows the same run instead of adding one.
  ids.push_back(5000);
  tree.Insert(ChainOf(ids), ValuesOf(ids.size(), 0));
  EXPECT_EQ(tree.Stats().nodes, 1u);
  EXPECT_EQ(tree.size(), 1001u);
}

TEST(RadixTreeTest, BranchInTheMiddleAddsOneRunWithoutSplitting) {
  const auto a = ChainOf({1, 2, 3, 4, 5, 6});
  const auto b = ChainOf({1, 2, 3, 9, 9});
  RadixTree<uint64_t> tree;
  tree.Insert(a, ValuesOf(6, 0));
  tree.Insert(b, ValuesOf(5, 100));
  EXPECT_EQ(tree.Stats().nodes, 2u);
  std::vector<uint64_t> out(6);
  EXPECT_EQ(tree.Match(a, out), 6u);
  EXPECT_EQ(out, ValuesOf(6, 0));
  EXPECT_EQ(tree.Match(b, out), 5u);
  EXPECT_EQ(out[2], 2u);
  EXPECT_EQ(out[3], 103u);
  // Evicting a's tail down to the branch point keeps b reachable.
  for (int i = 5; i >= 3; --i) ASSERT_TRUE(tree.EraseLeaf(a[i]).has_value());
  EXPECT_FALSE(tree.IsLeaf(a[2])) << "b still hangs off a[2]";
  EXPECT_EQ(tree.MatchLength(b), 5u);
  // New blocks after a[2] start a new run: a[2] has a branch.
  tree.Insert(a, ValuesOf(6, 50));
  EXPECT_EQ(tree.MatchLength(a), 6u);
  EXPECT_EQ(tree.Stats().nodes, 3u);
}

TEST(RadixTreeTest, FreedRunsAreReused) {
  RadixTree<uint64_t> tree;
  for (uint32_t round = 0; round < 50; ++round) {
    const auto c = ChainOf({round, 1, 2});
    tree.Insert(c, ValuesOf(3, 0));
    EXPECT_EQ(tree.EraseSubtree(c[0], [](const BlockKey&, uint64_t&&) {}), 3u);
  }
  EXPECT_EQ(tree.size(), 0u);
  EXPECT_EQ(tree.Stats().nodes, 0u);
}

}  // namespace
}  // namespace mooncake::index
