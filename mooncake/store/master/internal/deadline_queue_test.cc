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

TEST(DeadlineQueueTest, CancelledEntriesAreNeverPopped) {
  DeadlineQueue q;
  q.Push(10, 1, "a");
  q.Push(20, 2, "b");
  q.Push(30, 3, "c");
  q.Push(40, 4, "d");
  q.Cancel(2);
  q.Cancel(99);  // not in the queue: tolerated
  auto due = q.PopDue(100, 10);
  ASSERT_EQ(due.size(), 3u);
  EXPECT_EQ(due[0].id, 1u);
  EXPECT_EQ(due[1].id, 3u);
  EXPECT_EQ(due[2].id, 4u);
  EXPECT_EQ(q.size(), 0u);
}

// A burst of entries that are each cancelled soon after (puts that end)
// keeps the queue small; a burst that drains gives its capacity back.
TEST(DeadlineQueueTest, DoesNotGrowWithCancelledEntriesAndShrinksAfterABurst) {
  DeadlineQueue q;
  for (uint64_t id = 1; id <= 100'000; ++id) {
    q.Push(static_cast<int64_t>(id), id, "k");
    q.Cancel(id);
    ASSERT_LE(q.size(), 2u);
  }
  EXPECT_LE(q.capacity(), 1024u);
  for (uint64_t id = 1; id <= 100'000; ++id) q.Push(static_cast<int64_t>(id), id, "k");
  EXPECT_GE(q.capacity(), 100'000u);
  EXPECT_EQ(q.PopDue(100'000, 100'000).size(), 100'000u);
  EXPECT_LE(q.capacity(), 1024u);
}

}  // namespace
}  // namespace mooncake::master_internal
