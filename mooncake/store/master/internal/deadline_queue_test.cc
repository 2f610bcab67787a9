#include "mooncake/store/master/internal/deadline_queue.h"

#include "gtest/gtest.h"

namespace mooncake::master_internal {
namespace {

TEST(DeadlineQueueTest, PopsDueEntriesEarliestFirstWithinBound) {
  DeadlineQueue q;
  q.Push(30, 3, "c");
  q.Push(10, 1, "a");
  q.Push(20, 2, "b");
  EXPECT_TRUE(q.PopDue(9, 10).empty());
  auto due = q.PopDue(25, 1);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].key, "a");
  due = q.PopDue(25, 10);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].id, 2u);
  EXPECT_EQ(q.size(), 1u);
}

}  // namespace
}  // namespace mooncake::master_internal
