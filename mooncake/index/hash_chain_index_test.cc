#include "mooncake/index/hash_chain_index.h"

#include <cstdint>

#include "gtest/gtest.h"
#include "mooncake/index/prefix_index_testing.h"

namespace mooncake::index {
namespace {

using HashChainTypes = ::testing::Types<HashChainIndex<uint64_t>>;
INSTANTIATE_TYPED_TEST_SUITE_P(HashChainIndex, PrefixIndexConformance, HashChainTypes);

TEST(HashChainIndexTest, OneEntryPerBlock) {
  HashChainIndex<uint64_t> index;
  const auto a = index_testing::ChainOf({1, 2, 3});
  index.Insert(a, index_testing::ValuesOf(3, 0));
  EXPECT_EQ(index.Stats().nodes, 3u);
  EXPECT_GT(index.Stats().memory_bytes, 0u);
}

}  // namespace
}  // namespace mooncake::index
