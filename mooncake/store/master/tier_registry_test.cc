#include "mooncake/store/master/tier_registry.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace mooncake::master {
namespace {

namespace proto = ::mooncake::store::proto;

TierTaskRecord Task(const std::string& worker, proto::TierTaskKind kind, uint64_t version) {
  TierTaskRecord r;
  r.task.set_kind(kind);
  r.task.set_version(version);
  r.worker_id = worker;
  r.key = "k" + std::to_string(version);
  return r;
}

TEST(TierRegistryTest, ReportRegistersOnlyATierWithCapacity) {
  TierRegistry t;
  EXPECT_FALSE(t.Report("w", 0, 0));
  EXPECT_FALSE(t.HasTier("w"));
  EXPECT_FALSE(t.Report("w", 1000, 10));
  EXPECT_TRUE(t.HasTier("w"));
  EXPECT_TRUE(t.Report("w", 2000, 20));
  ASSERT_EQ(t.Snapshot().size(), 1u);
  EXPECT_EQ(t.Snapshot()[0].capacity_bytes, 2000u);
  EXPECT_EQ(t.Snapshot()[0].reported_used_bytes, 20u);
}

TEST(TierRegistryTest, ReserveStopsAtCapacity) {
  TierRegistry t;
  EXPECT_FALSE(t.Reserve("w", 1));  // no tier
  t.Report("w", 100, 0);
  EXPECT_TRUE(t.Reserve("w", 60));
  EXPECT_FALSE(t.Reserve("w", 41));
  EXPECT_TRUE(t.Reserve("w", 40));
  EXPECT_EQ(t.Unreserved("w"), 0u);
  t.Unreserve("w", 60);
  EXPECT_EQ(t.Unreserved("w"), 60u);
}

TEST(TierRegistryTest, TasksGoOutInOrderAndCompleteOnce) {
  TierRegistry t;
  t.Report("w", 100, 0);
  t.Report("v", 100, 0);
  EXPECT_FALSE(t.Enqueue(Task("nobody", proto::TIER_DROP, 1)).has_value());
  const auto a = t.Enqueue(Task("w", proto::TIER_OFFLOAD, 1));
  const auto b = t.Enqueue(Task("w", proto::TIER_LOAD, 2));
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_NE(*a, *b);
  // Not handed out yet: cannot complete.
  EXPECT_FALSE(t.Complete(*a, "w").has_value());
  auto got = t.Take("w", 1, absl::ZeroDuration(), 5);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].task_id(), *a);
  EXPECT_EQ(got[0].kind(), proto::TIER_OFFLOAD);
  EXPECT_TRUE(t.Take("v", 8, absl::ZeroDuration(), 5).empty());
  EXPECT_FALSE(t.Complete(*a, "v").has_value());  // another worker's task
  auto rec = t.Complete(*a, "w");
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->key, "k1");
  EXPECT_FALSE(t.Complete(*a, "w").has_value());  // exactly once
  EXPECT_EQ(t.tasks(), 1u);
}

TEST(TierRegistryTest, QueueIsBounded) {
  TierRegistry t(TierOptions{.max_queued_tasks = 2});
  t.Report("w", 100, 0);
  EXPECT_TRUE(t.Enqueue(Task("w", proto::TIER_DROP, 1)).has_value());
  EXPECT_TRUE(t.Enqueue(Task("w", proto::TIER_DROP, 2)).has_value());
  EXPECT_FALSE(t.Enqueue(Task("w", proto::TIER_DROP, 3)).has_value());
  EXPECT_EQ(t.Take("w", 8, absl::ZeroDuration(), 0).size(), 2u);
  EXPECT_TRUE(t.Enqueue(Task("w", proto::TIER_DROP, 3)).has_value());
}

TEST(TierRegistryTest, LongPollWakesOnEnqueue) {
  TierRegistry t(TierOptions{.max_wait_ms = 10'000});
  t.Report("w", 100, 0);
  std::atomic<size_t> got{0};
  const absl::Time start = absl::Now();
  std::thread poller([&] { got = t.Take("w", 8, absl::Seconds(10), 0).size(); });
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(t.Enqueue(Task("w", proto::TIER_DROP, 1)).has_value());
  poller.join();
  EXPECT_EQ(got.load(), 1u);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(TierRegistryTest, LongPollIsClamped) {
  TierRegistry t(TierOptions{.max_wait_ms = 30});
  t.Report("w", 100, 0);
  const absl::Time start = absl::Now();
  EXPECT_TRUE(t.Take("w", 8, absl::Seconds(60), 0).empty());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // 30 ms, not 60 s
}

TEST(TierRegistryTest, OnlyMaxWaitingPollsWait) {
  TierRegistry t(TierOptions{.max_wait_ms = 60'000, .max_waiting_polls = 1});
  t.Report("w", 100, 0);
  t.Report("v", 100, 0);
  std::thread poller([&] { EXPECT_EQ(t.Take("w", 8, absl::Seconds(60), 0).size(), 1u); });
  while (t.waiting_polls() == 0) absl::SleepFor(absl::Milliseconds(1));
  const absl::Time start = absl::Now();
  EXPECT_TRUE(t.Take("v", 8, absl::Seconds(60), 0).empty());  // no slot: answers at once
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_TRUE(t.Enqueue(Task("w", proto::TIER_DROP, 1)).has_value());
  poller.join();
  EXPECT_EQ(t.waiting_polls(), 0u);
}

TEST(TierRegistryTest, RemoveWorkerEndsItsWaitAndReturnsItsTasks) {
  TierRegistry t(TierOptions{.max_wait_ms = 10'000});
  t.Report("w", 100, 0);
  ASSERT_TRUE(t.Enqueue(Task("w", proto::TIER_LOAD, 1)).has_value());
  ASSERT_EQ(t.Take("w", 8, absl::ZeroDuration(), 0).size(), 1u);
  ASSERT_TRUE(t.Enqueue(Task("w", proto::TIER_DROP, 2)).has_value());
  std::vector<TierTaskRecord> gone = t.RemoveWorker("w");
  EXPECT_EQ(gone.size(), 2u);
  EXPECT_FALSE(t.HasTier("w"));
  EXPECT_EQ(t.tasks(), 0u);
  // A poll of a removed worker answers at once with nothing.
  EXPECT_TRUE(t.Take("w", 8, absl::Seconds(10), 0).empty());
}

TEST(TierRegistryTest, TimedOutTasksAreGivenBackOnce) {
  TierRegistry t(TierOptions{.task_timeout_ms = 100});
  t.Report("w", 100, 0);
  const auto id = t.Enqueue(Task("w", proto::TIER_OFFLOAD, 1));
  ASSERT_TRUE(id.has_value());
  EXPECT_TRUE(t.TakeTimedOut(0).empty());  // first seen queued
  ASSERT_EQ(t.Take("w", 8, absl::ZeroDuration(), 0).size(), 1u);
  EXPECT_TRUE(t.TakeTimedOut(100'000'000).empty());
  EXPECT_EQ(t.TakeTimedOut(100'000'001).size(), 1u);
  EXPECT_FALSE(t.Complete(*id, "w").has_value());  // the late result is ignored
}

TEST(TierRegistryTest, TasksNoPollTakesTimeOutToo) {
  TierRegistry t(TierOptions{.task_timeout_ms = 100});
  t.Report("w", 100, 0);
  ASSERT_TRUE(t.Enqueue(Task("w", proto::TIER_OFFLOAD, 1)).has_value());
  EXPECT_TRUE(t.TakeTimedOut(5'000'000'000).empty());  // first seen now
  EXPECT_TRUE(t.TakeTimedOut(5'100'000'000).empty());
  auto late = t.TakeTimedOut(5'100'000'001);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_FALSE(late[0].issued);
  EXPECT_TRUE(t.Take("w", 8, absl::ZeroDuration(), 0).empty());  // gone from the queue
  EXPECT_EQ(t.Snapshot()[0].in_flight, 0u);
}

TEST(TierRegistryTest, ResidentCopiesLeaveOldestFirst) {
  TierRegistry t;
  t.Report("w", 100, 0);
  t.AdmitResident("w", "a", 1);
  t.AdmitResident("w", "b", 1);
  t.AdmitResident("w", "c", 1);
  t.TouchResident("w", "a");
  t.EraseResident("w", "c");
  EXPECT_EQ(t.PopOldestResident("w"), "b");
  EXPECT_EQ(t.PopOldestResident("w"), "a");
  EXPECT_FALSE(t.PopOldestResident("w").has_value());
  EXPECT_FALSE(t.PopOldestResident("nobody").has_value());
}

}  // namespace
}  // namespace mooncake::master
