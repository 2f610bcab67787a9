#include "mooncake/store/master/membership.h"

#include "gtest/gtest.h"

namespace mooncake::master {
namespace {

constexpr int64_t kMs = 1'000'000;

TEST(MembershipTest, HeartbeatsKeepWorkersAlive) {
  WorkerRegistry reg({.heartbeat_interval_ms = 100, .heartbeat_timeout_ms = 300});
  reg.AddSegment("w1", 1, 0);
  reg.AddSegment("w1", 2, 0);
  reg.AddSegment("w2", 3, 0);
  EXPECT_TRUE(reg.Heartbeat("w2", 5, 250 * kMs));
  EXPECT_TRUE(reg.Heartbeat("w2", 4, 260 * kMs));  // reordered: still alive
  EXPECT_EQ(reg.LastSequence("w2"), 5u);
  EXPECT_FALSE(reg.Heartbeat("nobody", 1, 0));
  auto gone = reg.Expire(301 * kMs);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].worker_id, "w1");
  EXPECT_EQ(gone[0].segment_ids, (std::vector<uint64_t>{1, 2}));
  EXPECT_FALSE(reg.Contains("w1"));
  EXPECT_FALSE(reg.Heartbeat("w1", 9, 302 * kMs));  // must remount
  EXPECT_TRUE(reg.Expire(500 * kMs).empty());
  EXPECT_EQ(reg.Expire(561 * kMs).size(), 1u);
}

TEST(MembershipTest, RemovingTheLastSegmentRemovesTheWorker) {
  WorkerRegistry reg;
  reg.AddSegment("w", 1, 0);
  reg.AddSegment("w", 2, 0);
  EXPECT_TRUE(absl::IsNotFound(reg.RemoveSegment("w", 3)));
  EXPECT_TRUE(absl::IsNotFound(reg.RemoveSegment("x", 1)));
  ASSERT_TRUE(reg.RemoveSegment("w", 1).ok());
  EXPECT_TRUE(reg.Contains("w"));
  ASSERT_TRUE(reg.RemoveSegment("w", 2).ok());
  EXPECT_FALSE(reg.Contains("w"));
  EXPECT_EQ(reg.size(), 0u);
}

}  // namespace
}  // namespace mooncake::master
