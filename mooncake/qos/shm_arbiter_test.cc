#include "mooncake/qos/shm_arbiter.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mooncake::qos {
namespace {

using ::testing::HasSubstr;

// A link name of its own per test (and per test process), removed on exit.
class ShmArbiterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    link_ = absl::StrCat("test.", ::getpid(), ".",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    (void)ShmArbiter::Remove(link_);
  }
  void TearDown() override { (void)ShmArbiter::Remove(link_); }

  std::unique_ptr<ShmArbiter> MustOpen(uint64_t capacity, ShmArbiterOptions o = {}) {
    auto arb = ShmArbiter::Open(link_, capacity, o);
    EXPECT_TRUE(arb.ok()) << arb.status();
    return arb.ok() ? std::move(*arb) : nullptr;
  }

  std::string link_;
};

absl::Time In(absl::Duration d) { return absl::Now() + d; }

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

TEST_F(ShmArbiterTest, BadInputsGiveClearErrors) {
  auto zero = ShmArbiter::Open(link_, 0);
  ASSERT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(zero.status().message()), HasSubstr("capacity 0"));
  EXPECT_EQ(ShmArbiter::Open("bad/name", 1000).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmArbiter::Open("", 1000).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmArbiter::Open(".hidden", 1000).status().code(), absl::StatusCode::kInvalidArgument);
  ShmArbiterOptions o;
  o.priority_classes = 0;
  EXPECT_EQ(ShmArbiter::Open(link_, 1000, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.priority_classes = ShmArbiter::kMaxClasses + 1;
  EXPECT_EQ(ShmArbiter::Open(link_, 1000, o).status().code(), absl::StatusCode::kInvalidArgument);

  o.priority_classes = 2;
  o.burst_bytes = 64 << 10;
  auto arb = MustOpen(1 << 20, o);
  ASSERT_NE(arb, nullptr);
  auto bad_cls = arb->Acquire(2, 100, In(absl::Seconds(1)));
  ASSERT_EQ(bad_cls.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_cls.status().message()), HasSubstr("class 2 out of range"));
  EXPECT_EQ(arb->TryAcquire(7, 100).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(arb->Acquire(1, 0, In(absl::Seconds(1))).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto big = arb->Acquire(0, (64 << 10) + 1, In(absl::Seconds(1)));
  ASSERT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("split larger transfers"));
  EXPECT_TRUE(arb->Acquire(1, 64 << 10, In(absl::Seconds(1))).ok());
  EXPECT_EQ(arb->SetCapacity(0).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ShmArbiterTest, ReopenMustAgreeOnClassesAndCapacity) {
  auto first = MustOpen(1000000);
  ASSERT_NE(first, nullptr);
  auto other_cap = ShmArbiter::Open(link_, 2000000);
  ASSERT_EQ(other_cap.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(other_cap.status().message()), HasSubstr("SetCapacity"));
  ShmArbiterOptions three;
  three.priority_classes = 3;
  EXPECT_EQ(ShmArbiter::Open(link_, 1000000, three).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(first->SetCapacity(2000000).ok());
  auto second = ShmArbiter::Open(link_, 2000000);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->Stats().participants, 2u);
}

TEST_F(ShmArbiterTest, RemoveOfMissingLinkIsNotFound) {
  EXPECT_EQ(ShmArbiter::Remove(link_).code(), absl::StatusCode::kNotFound);
}

TEST_F(ShmArbiterTest, CriticalNeverWaitsAndIsDebited) {
  ShmArbiterOptions o;
  o.burst_bytes = 64 << 10;
  auto arb = MustOpen(1 << 20, o);
  ASSERT_NE(arb, nullptr);
  auto bulk = arb->TryAcquire(1, 64 << 10);
  ASSERT_TRUE(bulk.ok()) << bulk.status();
  EXPECT_EQ(arb->TryAcquire(1, 64 << 10).status().code(), absl::StatusCode::kResourceExhausted);
  // The bucket is empty, yet class 0 goes at once and leaves it in debt.
  auto crit = arb->TryAcquire(0, 32 << 10);
  ASSERT_TRUE(crit.ok()) << crit.status();
  EXPECT_LT(arb->Stats().tokens, 0);
  EXPECT_EQ(arb->Stats().classes[0].inflight_bytes, 32 << 10);
  crit->Release();
  EXPECT_FALSE(crit->held());
  EXPECT_EQ(arb->Stats().classes[0].inflight_bytes, 0);
}

TEST_F(ShmArbiterTest, BulkYieldsWhileCriticalBytesAreInFlight) {
  auto arb = MustOpen(1 << 30);
  ASSERT_NE(arb, nullptr);
  auto crit = arb->Acquire(0, 64 << 10, In(absl::Seconds(1)));
  ASSERT_TRUE(crit.ok());
  auto refused = arb->TryAcquire(1, 4096);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("higher-priority"));
  EXPECT_EQ(arb->Acquire(1, 4096, In(absl::Milliseconds(20))).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(arb->Stats().classes[1].timeouts, 1u);
  // A release wakes a blocked bulk waiter at once, not at its next poll.
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    crit->Release();
  });
  const int64_t start = NowMs();
  auto bulk = arb->Acquire(1, 4096, In(absl::Seconds(2)));
  const int64_t waited = NowMs() - start;
  releaser.join();
  ASSERT_TRUE(bulk.ok()) << bulk.status();
  EXPECT_GE(waited, 20);
  EXPECT_LT(waited, 500);
}

TEST_F(ShmArbiterTest, AllowanceLetsBulkRunBesideSmallCriticalTraffic) {
  ShmArbiterOptions o;
  o.allowance_bytes = 64 << 10;
  auto arb = MustOpen(1 << 30, o);
  ASSERT_NE(arb, nullptr);
  auto small = arb->TryAcquire(0, 32 << 10);
  ASSERT_TRUE(small.ok());
  EXPECT_TRUE(arb->TryAcquire(1, 4096).ok());
  auto more = arb->TryAcquire(0, 64 << 10);
  ASSERT_TRUE(more.ok());
  EXPECT_FALSE(arb->TryAcquire(1, 4096).ok());
}

TEST_F(ShmArbiterTest, BulkInflightCapBoundsBulkAcrossParticipants) {
  ShmArbiterOptions o;
  o.burst_bytes = 128 << 10;
  o.bulk_inflight_max_bytes = 64 << 10;
  auto a = MustOpen(1 << 30, o);
  auto b = MustOpen(1 << 30, o);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto first = a->TryAcquire(1, 32 << 10);
  auto second = b->TryAcquire(1, 32 << 10);
  ASSERT_TRUE(first.ok() && second.ok());
  auto third = a->TryAcquire(1, 1);
  ASSERT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(third.status().message()), HasSubstr("bulk_inflight_max_bytes"));
  EXPECT_TRUE(a->TryAcquire(0, 1000).ok()) << "the cap does not apply to class 0";
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    second->Release();
  });
  auto waited = a->Acquire(1, 32 << 10, In(absl::Seconds(2)));
  releaser.join();
  EXPECT_TRUE(waited.ok()) << waited.status();
  waited->Release();
  first->Release();
  EXPECT_EQ(a->TryAcquire(1, (64 << 10) + 1).status().code(), absl::StatusCode::kInvalidArgument);
}

// Bulk, paced by the bucket alone, gets the capacity: no more, no less.
TEST_F(ShmArbiterTest, BulkRateMatchesCapacity) {
  constexpr uint64_t kCapacity = 20 << 20;  // 20 MiB/s
  ShmArbiterOptions o;
  o.burst_bytes = 64 << 10;
  auto arb = MustOpen(kCapacity, o);
  ASSERT_NE(arb, nullptr);
  const auto start = std::chrono::steady_clock::now();
  uint64_t bytes = 0;
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(400)) {
    auto g = arb->Acquire(1, 16 << 10, In(absl::Seconds(1)));
    ASSERT_TRUE(g.ok()) << g.status();
    bytes += g->bytes();
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double expected = kCapacity * secs + (64 << 10);
  EXPECT_GT(bytes, expected * 0.85);
  EXPECT_LT(bytes, expected * 1.05);
}

TEST_F(ShmArbiterTest, HigherClassWaiterGoesFirst) {
  constexpr uint64_t kCapacity = 1 << 20;  // 1 MiB/s: 32 KiB refill in ~31 ms
  ShmArbiterOptions o;
  o.priority_classes = 3;
  o.burst_bytes = 64 << 10;
  auto arb = MustOpen(kCapacity, o);
  ASSERT_NE(arb, nullptr);
  ASSERT_TRUE(arb->TryAcquire(2, 64 << 10).ok());  // drain the bucket
  std::vector<int> order;
  std::atomic<int> done{0};
  std::mutex mu;
  auto waiter = [&](size_t cls) {
    auto g = arb->Acquire(cls, 32 << 10, In(absl::Seconds(2)));
    ASSERT_TRUE(g.ok()) << g.status();
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(static_cast<int>(cls));
    ++done;
  };
  std::thread low(waiter, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::thread high(waiter, 1);
  low.join();
  high.join();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], 1);
  EXPECT_EQ(order[1], 2);
}

TEST_F(ShmArbiterTest, SameClassThreadsShareFairly) {
  ShmArbiterOptions o;
  o.burst_bytes = 32 << 10;
  auto arb = MustOpen(8 << 20, o);
  ASSERT_NE(arb, nullptr);
  std::atomic<bool> stop{false};
  uint64_t grants[3] = {0, 0, 0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      while (!stop.load()) {
        auto g = arb->Acquire(1, 8 << 10, In(absl::Seconds(1)));
        ASSERT_TRUE(g.ok()) << g.status();
        ++grants[i];
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  stop = true;
  for (auto& t : threads) t.join();
  const uint64_t total = grants[0] + grants[1] + grants[2];
  ASSERT_GT(total, 100u);
  // Same-class waiters race for tokens (not FIFO): on a loaded 2-core
  // machine one of three threads got as little as 3% of the grants. What
  // holds is that every waiter gets through.
  for (uint64_t g : grants) EXPECT_GT(g, 0u) << "a thread was starved";
}

TEST_F(ShmArbiterTest, GrantMovesAndReleasesOnce) {
  auto arb = MustOpen(1 << 30);
  ASSERT_NE(arb, nullptr);
  auto g = arb->TryAcquire(0, 1000);
  ASSERT_TRUE(g.ok());
  ShmArbiter::Grant moved = std::move(*g);
  EXPECT_FALSE(g->held());
  EXPECT_TRUE(moved.held());
  EXPECT_EQ(arb->Stats().classes[0].inflight_bytes, 1000);
  ShmArbiter::Grant other;
  other = std::move(moved);
  other.Release();
  other.Release();
  EXPECT_EQ(arb->Stats().classes[0].inflight_bytes, 0);
  EXPECT_EQ(arb->Stats().classes[0].granted_requests, 1u);
}

TEST(ProcessLivenessTest, StartTimeGuardsAgainstPidReuse) {
  const auto self = qos_internal::ReadProcessStat(::getpid());
  ASSERT_TRUE(self.has_value());
  EXPECT_TRUE(qos_internal::ProcessAlive(::getpid(), self->start_ticks));
  EXPECT_FALSE(qos_internal::ProcessAlive(::getpid(), self->start_ticks + 1));
  EXPECT_FALSE(qos_internal::ProcessAlive(0, 0));
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_FALSE(qos_internal::ProcessAlive(child, 0));
}

// Forks a participant that runs `body` with its own arbiter on the link.
template <typename F>
pid_t ForkParticipant(const std::string& link, uint64_t capacity, ShmArbiterOptions o, F body) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  auto arb = ShmArbiter::Open(link, capacity, o);
  if (!arb.ok()) ::_exit(10);
  body(**arb);
  ::_exit(0);  // no destructors: a crash-like exit unless body released
}

int WaitExit(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST_F(ShmArbiterTest, BulkInOneProcessYieldsToCriticalInAnother) {
  auto arb = MustOpen(1 << 30);
  ASSERT_NE(arb, nullptr);
  int to_parent[2], to_child[2];
  ASSERT_EQ(::pipe(to_parent), 0);
  ASSERT_EQ(::pipe(to_child), 0);
  const pid_t child = ForkParticipant(link_, 1 << 30, {}, [&](ShmArbiter& a) {
    auto g = a.Acquire(0, 64 << 10, In(absl::Seconds(1)));
    if (!g.ok()) ::_exit(11);
    char c = 'g';
    if (::write(to_parent[1], &c, 1) != 1) ::_exit(12);
    if (::read(to_child[0], &c, 1) != 1) ::_exit(13);
    g->Release();
  });
  ASSERT_GT(child, 0);
  char c;
  ASSERT_EQ(::read(to_parent[0], &c, 1), 1);
  EXPECT_EQ(arb->Stats().classes[0].inflight_bytes, 64 << 10);
  EXPECT_EQ(arb->TryAcquire(1, 4096).status().code(), absl::StatusCode::kResourceExhausted);
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(::write(to_child[1], "r", 1), 1);
  });
  auto bulk = arb->Acquire(1, 4096, In(absl::Seconds(2)));
  release.join();
  EXPECT_TRUE(bulk.ok()) << bulk.status();
  EXPECT_EQ(WaitExit(child), 0);
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) ::close(fd);
}

TEST_F(ShmArbiterTest, ProcessesShareOneBucket) {
  constexpr uint64_t kCapacity = 16 << 20;
  ShmArbiterOptions o;
  o.burst_bytes = 64 << 10;
  auto arb = MustOpen(kCapacity, o);
  ASSERT_NE(arb, nullptr);
  std::vector<pid_t> kids;
  for (int i = 0; i < 2; ++i) {
    kids.push_back(ForkParticipant(link_, kCapacity, o, [](ShmArbiter& a) {
      const int64_t end = NowMs() + 400;
      while (NowMs() < end) {
        if (!a.Acquire(1, 16 << 10, In(absl::Seconds(1))).ok()) ::_exit(11);
      }
    }));
  }
  const int64_t start = NowMs();
  for (pid_t k : kids) EXPECT_EQ(WaitExit(k), 0);
  const double secs = (NowMs() - start) / 1000.0;
  const double granted = static_cast<double>(arb->Stats().classes[1].granted_bytes);
  EXPECT_LT(granted, kCapacity * secs * 1.1 + (64 << 10));
  EXPECT_GT(granted, kCapacity * 0.4 * 0.8);
}

TEST_F(ShmArbiterTest, KilledHolderIsReclaimedWithinBound) {
  ShmArbiterOptions o;
  o.stale_after = absl::Milliseconds(20);
  o.sweep_interval = absl::Milliseconds(10);
  auto arb = MustOpen(1 << 30, o);
  ASSERT_NE(arb, nullptr);
  int to_parent[2];
  ASSERT_EQ(::pipe(to_parent), 0);
  const pid_t child = ForkParticipant(link_, 1 << 30, o, [&](ShmArbiter& a) {
    auto g = a.Acquire(0, 64 << 10, In(absl::Seconds(1)));
    if (!g.ok()) ::_exit(11);
    if (::write(to_parent[1], "g", 1) != 1) ::_exit(12);
    for (;;) ::pause();
  });
  ASSERT_GT(child, 0);
  char c;
  ASSERT_EQ(::read(to_parent[0], &c, 1), 1);
  EXPECT_FALSE(arb->TryAcquire(1, 4096).ok());
  // Killed while holding the grant and not yet reaped (a zombie).
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  const int64_t start = NowMs();
  auto bulk = arb->Acquire(1, 4096, In(absl::Seconds(2)));
  const int64_t waited = NowMs() - start;
  ASSERT_TRUE(bulk.ok()) << bulk.status();
  EXPECT_LT(waited, 200) << "bound: stale_after + sweep_interval + scan";
  const ShmArbiterStats st = arb->Stats();
  EXPECT_EQ(st.reclaimed_slots, 1u);
  EXPECT_EQ(st.reclaimed_bytes, 64u << 10);
  EXPECT_EQ(st.classes[0].inflight_bytes, 0);
  EXPECT_EQ(st.participants, 1u);
  EXPECT_EQ(WaitExit(child), 128 + SIGKILL);
  ::close(to_parent[0]);
  ::close(to_parent[1]);
}

TEST_F(ShmArbiterTest, SlotsOfDeadProcessesAreFreedOnOpen) {
  ShmArbiterOptions o;
  o.stale_after = absl::Milliseconds(1);
  auto arb = MustOpen(1 << 30, o);
  ASSERT_NE(arb, nullptr);
  // More dead participants than there are slots, each exiting without
  // unregistering.
  for (size_t i = 0; i < ShmArbiter::kMaxParticipants + 6; ++i) {
    const pid_t child = ForkParticipant(link_, 1 << 30, o, [](ShmArbiter&) {});
    ASSERT_EQ(WaitExit(child), 0) << "participant " << i << " could not open";
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_LE(arb->Stats().participants, 2u);
}

}  // namespace
}  // namespace mooncake::qos
