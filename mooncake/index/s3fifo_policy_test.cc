#include "mooncake/index/s3fifo_policy.h"

#include "gtest/gtest.h"
#include "mooncake/index/eviction_policy_testing.h"

namespace mooncake::index {
namespace {

using S3FifoTypes = ::testing::Types<S3FifoPolicy<>>;
INSTANTIATE_TYPED_TEST_SUITE_P(S3Fifo, EvictionPolicyConformance, S3FifoTypes);

using index_testing::PolicyChain;

auto Always() {
  return [](const BlockKey&) { return true; };
}

TEST(S3FifoPolicyTest, OneHitWonderGoesBeforeAReadEntry) {
  S3FifoPolicy<> s3;
  const auto read = PolicyChain(0, 1);
  const auto once = PolicyChain(10, 1);
  s3.Admit(read, 0, 1);
  s3.Admit(once, 0, 1);
  s3.Touch(read);
  // `read` is older but was read again: it moves to main, `once` leaves.
  EXPECT_EQ(s3.Evict(Always())->key, once[0]);
  EXPECT_TRUE(s3.Contains(read[0]));
  EXPECT_EQ(s3.ghost_size(), 1u);
}

TEST(S3FifoPolicyTest, GhostHitIsAdmittedToMain) {
  S3FifoPolicy<> s3;
  const auto a = PolicyChain(0, 1);
  const auto b = PolicyChain(10, 1);
  const auto c = PolicyChain(20, 1);
  s3.Admit(b, 0, 1);
  s3.Touch(b);
  s3.Admit(a, 0, 1);
  EXPECT_EQ(s3.Evict(Always())->key, a[0]);  // b promoted to main, a to the ghost
  s3.Admit(a, 0, 1);                         // ghost hit: straight to main
  s3.Admit(c, 0, 1);                         // small: c
  // Small is over its 10% share, so c (never read) goes first.
  EXPECT_EQ(s3.Evict(Always())->key, c[0]);
  EXPECT_TRUE(s3.Contains(a[0]));
}

}  // namespace
}  // namespace mooncake::index
