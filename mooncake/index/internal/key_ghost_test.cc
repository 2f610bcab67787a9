#include "mooncake/index/internal/key_ghost.h"

#include <cstdint>

#include "gtest/gtest.h"
#include "mooncake/index/internal/key_hash.h"

namespace mooncake::index_internal {
namespace {

using Ghost = KeyGhost<Hash128, int, BlockKeyHash>;

Hash128 Key(uint64_t i) { return Hash128{i, 0}; }

TEST(KeyGhostTest, RemembersWithinTheLimitOldestGoesFirst) {
  Ghost g;
  for (uint64_t i = 0; i < 5; ++i) g.Remember(Key(i), static_cast<int>(i) * 10, 3);
  EXPECT_EQ(g.size(), 3u);
  EXPECT_EQ(g.Find(Key(0)), nullptr);
  EXPECT_EQ(g.Find(Key(1)), nullptr);
  ASSERT_NE(g.Find(Key(4)), nullptr);
  EXPECT_EQ(*g.Find(Key(4)), 40);
  EXPECT_EQ(*g.Find(Key(2)), 20);
}

TEST(KeyGhostTest, TakeForgets) {
  Ghost g;
  g.Remember(Key(1), 7, 4);
  EXPECT_EQ(g.Take(Key(1)), 7);
  EXPECT_EQ(g.Take(Key(1)), std::nullopt);
  EXPECT_EQ(g.size(), 0u);
}

TEST(KeyGhostTest, RememberingAgainRefreshesAge) {
  Ghost g;
  g.Remember(Key(1), 1, 2);
  g.Remember(Key(2), 2, 2);
  g.Remember(Key(1), 3, 2);  // now the newest; its stale slot must not evict it
  g.Remember(Key(3), 4, 2);
  EXPECT_EQ(g.Find(Key(2)), nullptr);
  ASSERT_NE(g.Find(Key(1)), nullptr);
  EXPECT_EQ(*g.Find(Key(1)), 3);
  EXPECT_EQ(g.size(), 2u);
}

TEST(KeyGhostTest, StaysBoundedUnderChurn) {
  Ghost g;
  for (uint64_t i = 0; i < 10000; ++i) {
    g.Remember(Key(i % 37), 0, 16);
    if (i % 3 == 0) g.Take(Key((i * 7) % 37));
    ASSERT_LE(g.size(), 16u);
  }
}

}  // namespace
}  // namespace mooncake::index_internal
