#include "mooncake/store/master/copy_registry.h"

#include <thread>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace mooncake::master {
namespace {

namespace proto = ::mooncake::store::proto;

CopyRecord Rec(std::string worker, uint64_t user = 0) {
  CopyRecord r;
  r.key = "k";
  r.worker_id = std::move(worker);
  r.user_task_id = user;
  r.bytes = 10;
  return r;
}

TEST(CopyRegistryTest, QueuesPerWorkerAndCompletesOnlyIssuedTasksOfThatWorker) {
  CopyRegistry reg({});
  const auto a = reg.Enqueue(Rec("w1"));
  const auto b = reg.Enqueue(Rec("w2"));
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(reg.Outstanding("w1"), 1u);
  EXPECT_FALSE(reg.Complete(*a, "w1").has_value());  // not taken yet
  auto got = reg.Take("w1", 8, absl::ZeroDuration(), 0);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].task_id(), *a);
  EXPECT_FALSE(reg.Complete(*a, "w2").has_value());  // another worker's
  EXPECT_TRUE(reg.Complete(*a, "w1").has_value());
  EXPECT_FALSE(reg.Complete(*a, "w1").has_value());  // once
  EXPECT_EQ(reg.Outstanding("w1"), 0u);
  EXPECT_EQ(reg.tasks(), 1u);
}

TEST(CopyRegistryTest, RefusesBeyondTheQueueBound) {
  CopyRegistry reg({.max_queued_tasks = 2});
  EXPECT_TRUE(reg.Enqueue(Rec("w")).has_value());
  EXPECT_TRUE(reg.Enqueue(Rec("w")).has_value());
  EXPECT_FALSE(reg.Enqueue(Rec("w")).has_value());
  EXPECT_TRUE(reg.Enqueue(Rec("other")).has_value());
}

TEST(CopyRegistryTest, TimesOutIssuedAndUntakenTasks) {
  CopyRegistry reg({.task_timeout_ms = 10});
  const auto a = reg.Enqueue(Rec("w"));
  const auto b = reg.Enqueue(Rec("w"));
  ASSERT_EQ(reg.Take("w", 1, absl::ZeroDuration(), 0).size(), 1u);  // a issued at 0
  EXPECT_TRUE(reg.TakeTimedOut(5'000'000).empty());                 // b first seen at 5 ms
  auto late = reg.TakeTimedOut(11'000'000);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].task.task_id(), *a);
  EXPECT_TRUE(late[0].issued);
  late = reg.TakeTimedOut(16'000'000);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].task.task_id(), *b);
  EXPECT_FALSE(late[0].issued);
  EXPECT_EQ(reg.tasks(), 0u);
}

TEST(CopyRegistryTest, LongPollWakesOnEnqueue) {
  CopyRegistry reg({.max_wait_ms = 5'000});
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(50));
    reg.Enqueue(Rec("w"));
  });
  const absl::Time start = absl::Now();
  auto got = reg.Take("w", 4, absl::Seconds(5), 0);
  t.join();
  EXPECT_EQ(got.size(), 1u);
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
}

TEST(CopyRegistryTest, UserTaskGoesPendingProcessingThenSuccessOrFirstError) {
  CopyRegistry reg({});
  const uint64_t ok = reg.NewUserTask(proto::REPLICA_COPY, "", 2);
  EXPECT_EQ(reg.Query(ok)->status(), proto::REPLICA_TASK_PENDING);
  reg.Enqueue(Rec("w", ok));
  reg.Take("w", 1, absl::ZeroDuration(), 0);
  EXPECT_EQ(reg.Query(ok)->status(), proto::REPLICA_TASK_PROCESSING);
  reg.EndUserPart(ok, absl::OkStatus());
  EXPECT_EQ(reg.Query(ok)->status(), proto::REPLICA_TASK_PROCESSING);
  reg.EndUserPart(ok, absl::OkStatus());
  EXPECT_EQ(reg.Query(ok)->status(), proto::REPLICA_TASK_SUCCESS);

  const uint64_t bad = reg.NewUserTask(proto::REPLICA_MOVE, "w", 2);
  reg.EndUserPart(bad, absl::ResourceExhaustedError("no room"));
  reg.EndUserPart(bad, absl::OkStatus());
  auto q = reg.Query(bad);
  EXPECT_EQ(q->status(), proto::REPLICA_TASK_FAILED);
  EXPECT_EQ(q->message(), "no room");
  EXPECT_EQ(q->type(), proto::REPLICA_MOVE);
  EXPECT_EQ(q->assigned_worker(), "w");
  EXPECT_FALSE(reg.Query(12345).has_value());
}

TEST(CopyRegistryTest, ForgetsTheOldestFinishedUserTasks) {
  CopyRegistry reg({.task_history = 2});
  uint64_t ids[3];
  for (uint64_t& id : ids) {
    id = reg.NewUserTask(proto::REPLICA_COPY, "", 1);
    reg.EndUserPart(id, absl::OkStatus());
  }
  EXPECT_FALSE(reg.Query(ids[0]).has_value());
  EXPECT_TRUE(reg.Query(ids[1]).has_value());
  EXPECT_TRUE(reg.Query(ids[2]).has_value());
}

TEST(CopyRegistryTest, RemoveWorkerTakesItsTasks) {
  CopyRegistry reg({});
  reg.Enqueue(Rec("w"));
  reg.Enqueue(Rec("w"));
  reg.Enqueue(Rec("x"));
  EXPECT_EQ(reg.RemoveWorker("w").size(), 2u);
  EXPECT_EQ(reg.tasks(), 1u);
  EXPECT_EQ(reg.Outstanding("w"), 0u);
}

}  // namespace
}  // namespace mooncake::master
