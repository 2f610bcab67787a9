#include "mooncake/store/master/internal/task_queue.h"

#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/mutex.h"

namespace mooncake::master_internal {
namespace {

struct FakeTask {
  uint64_t id = 0;
  void set_task_id(uint64_t v) { id = v; }
};

// A record whose members have the given types; each broken model below
// changes one.
template <class Task, class Worker, class Issued, class IssuedNs, class Seen, class SeenNs>
struct RecordOf {
  Task task;
  Worker worker_id;
  Issued issued{};
  IssuedNs issued_ns{};
  Seen queued_seen{};
  SeenNs queued_seen_ns{};
};

struct Rec : RecordOf<FakeTask, std::string, bool, int64_t, bool, int64_t> {
  int payload = 0;
};
static_assert(TaskRecord<Rec>);

struct NoSetTaskId {};
static_assert(!TaskRecord<RecordOf<NoSetTaskId, std::string, bool, int64_t, bool, int64_t>>);
static_assert(!TaskRecord<RecordOf<FakeTask, int, bool, int64_t, bool, int64_t>>);
static_assert(!TaskRecord<RecordOf<FakeTask, std::string, int, int64_t, bool, int64_t>>);
static_assert(!TaskRecord<RecordOf<FakeTask, std::string, bool, int32_t, bool, int64_t>>);
static_assert(!TaskRecord<RecordOf<FakeTask, std::string, bool, int64_t, int, int64_t>>);
static_assert(!TaskRecord<RecordOf<FakeTask, std::string, bool, int64_t, bool, int32_t>>);

Rec R(std::string worker, int payload = 0) {
  Rec r;
  r.worker_id = std::move(worker);
  r.payload = payload;
  return r;
}

// A TaskQueue and the mutex that guards it, as a registry holds them.
class Guarded {
 public:
  explicit Guarded(TaskQueueOptions o) : q_(o) {}

  std::optional<uint64_t> Enqueue(Rec r) {
    MutexLock lock(&mu_);
    return q_.Enqueue(std::move(r));
  }
  // Ids taken; `issued` collects the payloads on_issue saw.
  std::vector<uint64_t> Take(const std::string& worker, size_t max, absl::Duration wait,
                             int64_t now_ns = 0, std::vector<int>* issued = nullptr) {
    MutexLock lock(&mu_);
    std::vector<uint64_t> ids;
    for (const FakeTask& t : q_.Take(
             mu_, worker, max, wait, now_ns, [&] { return open_; },
             [&](const Rec& r) {
               if (issued != nullptr) issued->push_back(r.payload);
             })) {
      ids.push_back(t.id);
    }
    return ids;
  }
  std::optional<Rec> Complete(uint64_t id, const std::string& worker) {
    MutexLock lock(&mu_);
    return q_.Complete(id, worker);
  }
  std::vector<Rec> TakeTimedOut(int64_t now_ns) {
    MutexLock lock(&mu_);
    return q_.TakeTimedOut(now_ns);
  }
  std::vector<Rec> RemoveWorker(const std::string& worker, bool close) {
    MutexLock lock(&mu_);
    if (close) open_ = false;
    return q_.RemoveWorker(worker);
  }
  void StopWaiting() {
    MutexLock lock(&mu_);
    q_.StopWaiting();
  }
  size_t Queued(const std::string& w) {
    MutexLock lock(&mu_);
    return q_.Queued(w);
  }
  size_t InFlight(const std::string& w) {
    MutexLock lock(&mu_);
    return q_.InFlight(w);
  }
  size_t tasks() {
    MutexLock lock(&mu_);
    return q_.tasks();
  }
  size_t waiting_polls() {
    MutexLock lock(&mu_);
    return q_.waiting_polls();
  }
  void WaitForParked(size_t n) {
    while (waiting_polls() != n) absl::SleepFor(absl::Milliseconds(1));
  }

 private:
  Mutex mu_;
  TaskQueue<Rec> q_ ABSL_GUARDED_BY(mu_);
  bool open_ ABSL_GUARDED_BY(mu_) = true;
};

TEST(TaskQueueTest, TakeHandsOutOldestFirstUpToMaxAndMarksThemIssued) {
  Guarded q({});
  const auto a = q.Enqueue(R("w", 1));
  const auto b = q.Enqueue(R("w", 2));
  const auto c = q.Enqueue(R("w", 3));
  ASSERT_TRUE(a && b && c);
  EXPECT_LT(*a, *b);
  EXPECT_LT(*b, *c);
  EXPECT_EQ(q.Queued("w"), 3u);
  std::vector<int> seen;
  EXPECT_EQ(q.Take("w", 2, absl::ZeroDuration(), 7, &seen), (std::vector<uint64_t>{*a, *b}));
  EXPECT_EQ(seen, (std::vector<int>{1, 2}));
  EXPECT_EQ(q.Queued("w"), 1u);
  EXPECT_EQ(q.InFlight("w"), 2u);
  EXPECT_TRUE(q.Take("other", 8, absl::ZeroDuration()).empty());
  EXPECT_TRUE(q.Take("w", 0, absl::ZeroDuration()).empty());
  std::optional<Rec> done = q.Complete(*a, "w");
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->task.id, *a);
  EXPECT_TRUE(done->issued);
  EXPECT_EQ(done->issued_ns, 7);
  EXPECT_EQ(done->payload, 1);
}

TEST(TaskQueueTest, CompletesOnlyIssuedTasksOfThatWorkerOnce) {
  Guarded q({});
  const auto a = q.Enqueue(R("w1"));
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(q.Complete(*a, "w1").has_value());  // not taken yet
  ASSERT_EQ(q.Take("w1", 8, absl::ZeroDuration()).size(), 1u);
  EXPECT_FALSE(q.Complete(*a, "w2").has_value());  // another worker's
  EXPECT_TRUE(q.Complete(*a, "w1").has_value());
  EXPECT_FALSE(q.Complete(*a, "w1").has_value());  // once
  EXPECT_FALSE(q.Complete(12345, "w1").has_value());
  EXPECT_EQ(q.InFlight("w1"), 0u);
  EXPECT_EQ(q.tasks(), 0u);
}

TEST(TaskQueueTest, RefusesBeyondTheQueueBoundPerWorker) {
  Guarded q({.max_queued_tasks = 2});
  EXPECT_TRUE(q.Enqueue(R("w")).has_value());
  EXPECT_TRUE(q.Enqueue(R("w")).has_value());
  EXPECT_FALSE(q.Enqueue(R("w")).has_value());
  EXPECT_TRUE(q.Enqueue(R("other")).has_value());
  ASSERT_EQ(q.Take("w", 1, absl::ZeroDuration()).size(), 1u);  // in flight frees a queue slot
  EXPECT_TRUE(q.Enqueue(R("w")).has_value());
  EXPECT_EQ(q.tasks(), 4u);
}

TEST(TaskQueueTest, TimesOutIssuedTasksAndUntakenOnesFromFirstSight) {
  Guarded q({.task_timeout_ms = 10});
  const auto a = q.Enqueue(R("w"));
  const auto b = q.Enqueue(R("w"));
  ASSERT_EQ(q.Take("w", 1, absl::ZeroDuration(), 0).size(), 1u);  // a issued at 0
  EXPECT_TRUE(q.TakeTimedOut(5'000'000).empty());                 // b first seen at 5 ms
  EXPECT_TRUE(q.TakeTimedOut(10'000'000).empty());                // not past the timeout
  std::vector<Rec> late = q.TakeTimedOut(11'000'000);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].task.id, *a);
  EXPECT_TRUE(late[0].issued);
  EXPECT_EQ(q.InFlight("w"), 0u);
  EXPECT_FALSE(q.Complete(*a, "w").has_value());  // given back already
  late = q.TakeTimedOut(16'000'000);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].task.id, *b);
  EXPECT_FALSE(late[0].issued);
  EXPECT_EQ(late[0].queued_seen_ns, 5'000'000);
  EXPECT_EQ(q.tasks(), 0u);
  // b's id is still in the deque until a Take skips it.
  EXPECT_EQ(q.Queued("w"), 1u);
  EXPECT_TRUE(q.Take("w", 8, absl::ZeroDuration()).empty());
  EXPECT_EQ(q.Queued("w"), 0u);
}

TEST(TaskQueueTest, ParkedPollWakesOnEnqueue) {
  Guarded q({.max_wait_ms = 60'000});
  std::thread t([&] {
    q.WaitForParked(1);
    q.Enqueue(R("w"));
  });
  const absl::Time start = absl::Now();
  EXPECT_EQ(q.Take("w", 8, absl::Seconds(60)).size(), 1u);
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  t.join();
  EXPECT_EQ(q.waiting_polls(), 0u);
}

TEST(TaskQueueTest, WaitIsClampedToMaxWait) {
  Guarded q({.max_wait_ms = 20});
  const absl::Time start = absl::Now();
  EXPECT_TRUE(q.Take("w", 8, absl::Seconds(60)).empty());
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(20));
  EXPECT_LT(took, absl::Seconds(30));
}

TEST(TaskQueueTest, PollsBeyondMaxWaitingPollsAnswerAtOnce) {
  Guarded q({.max_wait_ms = 60'000, .max_waiting_polls = 1});
  std::thread parked([&] { EXPECT_EQ(q.Take("a", 8, absl::Seconds(60)).size(), 1u); });
  q.WaitForParked(1);
  const absl::Time start = absl::Now();
  EXPECT_TRUE(q.Take("b", 8, absl::Seconds(60)).empty());  // over the bound: no wait
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(q.waiting_polls(), 1u);
  q.Enqueue(R("a"));
  parked.join();
  EXPECT_EQ(q.waiting_polls(), 0u);
}

TEST(TaskQueueTest, RemoveWorkerGivesBackItsTasksAndWakesItsPoll) {
  Guarded q({.max_wait_ms = 60'000});
  ASSERT_TRUE(q.Enqueue(R("gone", 1)).has_value());
  ASSERT_TRUE(q.Enqueue(R("gone", 2)).has_value());
  ASSERT_TRUE(q.Enqueue(R("stays", 3)).has_value());
  ASSERT_EQ(q.Take("gone", 1, absl::ZeroDuration()).size(), 1u);
  std::vector<Rec> out = q.RemoveWorker("gone", /*close=*/false);
  EXPECT_EQ(out.size(), 2u);  // in flight and queued
  EXPECT_EQ(q.Queued("gone"), 0u);
  EXPECT_EQ(q.InFlight("gone"), 0u);
  EXPECT_EQ(q.tasks(), 1u);

  // A poll parked for a worker the owner closes answers with nothing.
  std::thread parked([&] { EXPECT_TRUE(q.Take("gone", 8, absl::Seconds(60)).empty()); });
  q.WaitForParked(1);
  const absl::Time start = absl::Now();
  q.RemoveWorker("gone", /*close=*/true);
  parked.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  // Closed: even queued work is not handed out.
  EXPECT_TRUE(q.Take("stays", 8, absl::ZeroDuration()).empty());
  EXPECT_EQ(q.Queued("stays"), 1u);
}

TEST(TaskQueueTest, StopWaitingWakesParkedPollsAndLaterOnesAnswerAtOnce) {
  Guarded q({.max_wait_ms = 60'000});
  std::thread parked([&] { EXPECT_TRUE(q.Take("w", 8, absl::Seconds(60)).empty()); });
  q.WaitForParked(1);
  const absl::Time start = absl::Now();
  q.StopWaiting();
  parked.join();
  EXPECT_TRUE(q.Take("w", 8, absl::Seconds(60)).empty());
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  ASSERT_TRUE(q.Enqueue(R("w")).has_value());  // queued work is still handed out
  EXPECT_EQ(q.Take("w", 8, absl::Seconds(60)).size(), 1u);
}

}  // namespace
}  // namespace mooncake::master_internal
