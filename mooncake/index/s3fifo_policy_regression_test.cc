// S3FifoPolicy regressions found by replaying generated traces.
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/index/eviction_policy_testing.h"
#include "mooncake/index/s3fifo_policy.h"

namespace mooncake::index {

// Only the chain helpers are used here; the kit runs in s3fifo_policy_test.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(EvictionPolicyConformance);

namespace {

using index_testing::PolicyChain;
using index_testing::PolicyKey;

// Main held only a chain's prefix (promoted, every block with a child) while
// the chain's only leaves sat in small, under small's share of the charge:
// Evict rotated main until its budget ran out and returned nullopt, and
// PrefixCache aborted ("over capacity with no evictable block") on an
// agent-loop trace.
TEST(S3FifoPolicyRegressionTest, EvictsFromSmallWhenMainHoldsOnlyPrefixes) {
  S3FifoPolicy<> p;
  const std::vector<BlockKey> c = PolicyChain(0, 20);
  p.Admit(c, 0, 1);
  p.Touch(std::span<const BlockKey>(c).first(19));
  auto victim = p.Evict([&](const BlockKey& k) { return k == c[19]; });
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(victim->key, c[19]);
  // Promotes c[0..18] to main, then evicts c[18], the leaf.
  victim = p.Evict([&](const BlockKey& k) { return k == c[18]; });
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(victim->key, c[18]);
  // Two new blocks after c[17]: small holds 2 of 20 charge units (not over
  // its 10%), and every main entry now has a child.
  std::vector<BlockKey> d(c.begin(), c.begin() + 18);
  d.push_back(PolicyKey(100));
  d.push_back(PolicyKey(101));
  p.Admit(d, 18, 1);
  victim = p.Evict([&](const BlockKey& k) { return k == d.back(); });
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(victim->key, d.back());
  EXPECT_EQ(p.size(), 19u);
}

}  // namespace
}  // namespace mooncake::index
