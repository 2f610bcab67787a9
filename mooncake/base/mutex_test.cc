#include "mooncake/base/mutex.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake {
namespace {

class Counter {
 public:
  void Add() {
    MutexLock lock(&mu_);
    ++value_;
  }
  int value() {
    MutexLock lock(&mu_);
    return value_;
  }

 private:
  Mutex mu_;
  int value_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(MutexTest, MutexLockExcludesOtherThreads) {
  Counter counter;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) counter.Add();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter.value(), 40000);
}

TEST(MutexTest, TryLockFailsWhileHeldElsewhere) {
  Mutex mu;
  mu.Lock();
  bool got = true;
  std::thread([&] {
    if (mu.TryLock()) {
      mu.Unlock();
    } else {
      got = false;
    }
  }).join();
  EXPECT_FALSE(got);
  mu.Unlock();
  if (mu.TryLock()) {
    mu.AssertHeld();
    mu.Unlock();
  } else {
    ADD_FAILURE() << "TryLock of a free mutex failed";
  }
}

TEST(MutexTest, MutexLockReleasesAtScopeEnd) {
  Mutex mu;
  { MutexLock lock(&mu); }
  if (mu.TryLock()) {
    mu.Unlock();
  } else {
    ADD_FAILURE() << "MutexLock left the mutex held";
  }
}

TEST(CondVarTest, WaitReturnsOncePredicateHoldsAndKeepsTheLock) {
  Mutex mu;
  CondVar cv;
  bool ready = false;
  int seen = 0;
  std::thread waiter([&] {
    MutexLock lock(&mu);
    cv.Wait(&mu, [&] {
      mu.AssertHeld();  // pred runs under mu; the analysis cannot see that
      return ready;
    });
    seen = 1;  // still under mu: the setter below cannot have run past its lock
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  {
    MutexLock lock(&mu);
    ready = true;
    cv.SignalAll();
  }
  waiter.join();
  EXPECT_EQ(seen, 1);
  // The waiter's scope unlocked mu: it is free again.
  if (mu.TryLock()) {
    mu.Unlock();
  } else {
    ADD_FAILURE() << "the waiter left the mutex held";
  }
}

TEST(CondVarTest, WaitForTimesOutWhenNothingSignals) {
  Mutex mu;
  CondVar cv;
  MutexLock lock(&mu);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(cv.WaitFor(&mu, std::chrono::milliseconds(20), [] { return false; }));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(20));
  EXPECT_TRUE(cv.WaitFor(&mu, std::chrono::milliseconds(20), [] { return true; }));
}

TEST(CondVarTest, WaitWithTimeoutReportsTheTimeout) {
  Mutex mu;
  CondVar cv;
  MutexLock lock(&mu);
  const absl::Time t0 = absl::Now();
  EXPECT_TRUE(cv.WaitWithTimeout(&mu, absl::Milliseconds(20)));
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(20));
  EXPECT_TRUE(cv.WaitWithDeadline(&mu, absl::Now() + absl::Milliseconds(5)));
}

class Gate {
 public:
  void Open() {
    MutexLock lock(&mu_);
    open_ = true;  // no signal: Await looks again on every Unlock
  }
  bool WaitOpen(absl::Duration timeout) {
    MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(Condition(this, &Gate::IsOpen), timeout);
  }
  void WaitOpen() {
    MutexLock lock(&mu_);
    mu_.Await(Condition(this, &Gate::IsOpenMutable));
  }

 private:
  bool IsOpen() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return open_; }
  bool IsOpenMutable() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return open_; }

  Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
};

TEST(MutexAwaitTest, AwaitSeesAChangeMadeUnderTheLockWithoutASignal) {
  Gate gate;
  std::thread waiter([&] { gate.WaitOpen(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  gate.Open();
  waiter.join();
  EXPECT_TRUE(gate.WaitOpen(absl::ZeroDuration()));
}

TEST(MutexAwaitTest, AwaitWithTimeoutReturnsFalseWhenTheConditionStaysFalse) {
  Gate gate;
  const absl::Time t0 = absl::Now();
  EXPECT_FALSE(gate.WaitOpen(absl::Milliseconds(20)));
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(20));
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    gate.Open();
  });
  EXPECT_TRUE(gate.WaitOpen(absl::Seconds(30)));
  opener.join();
}

TEST(MutexAwaitTest, EveryConditionFormIsEvaluated) {
  Mutex mu;
  bool flag = false;
  int count = 0;
  MutexLock lock(&mu);
  const auto at_least_two = [&] { return count >= 2; };
  EXPECT_FALSE(mu.AwaitWithTimeout(Condition(&flag), absl::ZeroDuration()));
  EXPECT_FALSE(mu.AwaitWithTimeout(Condition(&at_least_two), absl::ZeroDuration()));
  EXPECT_FALSE(mu.AwaitWithTimeout(Condition(
                                       +[](int* c) { return *c == 2; }, &count),
                                   absl::ZeroDuration()));
  flag = true;
  count = 2;
  EXPECT_TRUE(mu.AwaitWithTimeout(Condition(&flag), absl::ZeroDuration()));
  EXPECT_TRUE(mu.AwaitWithDeadline(Condition(&at_least_two), absl::InfinitePast()));
  EXPECT_TRUE(mu.AwaitWithDeadline(Condition(
                                       +[](int* c) { return *c == 2; }, &count),
                                   absl::InfiniteFuture()));
}

// Two threads take turns through Await alone: each changes the state and then
// awaits, so the other must be woken by the release inside the first's wait.
TEST(MutexAwaitTest, ThreadsTakingTurnsThroughAwaitWakeEachOther) {
  Mutex mu;
  int turn = 0;  // guarded by mu
  constexpr int kRounds = 1000;
  auto player = [&](int me) {
    MutexLock lock(&mu);
    for (int i = 0; i < kRounds; ++i) {
      const auto mine = [&] {
        mu.AssertHeld();
        return turn % 2 == me;
      };
      mu.Await(Condition(&mine));
      ++turn;
    }
  };
  std::thread a(player, 0), b(player, 1);
  a.join();
  b.join();
  MutexLock lock(&mu);
  EXPECT_EQ(turn, 2 * kRounds);
}

TEST(MutexAwaitTest, ACondVarWaitReleasingTheLockWakesAwaiters) {
  Mutex mu;
  CondVar cv;
  bool ready = false, done = false;
  std::thread awaiter([&] {
    MutexLock lock(&mu);
    mu.Await(Condition(&ready));
    done = true;
    cv.SignalAll();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  MutexLock lock(&mu);
  ready = true;  // then wait on the CondVar, not Unlock
  cv.Wait(&mu, [&] {
    mu.AssertHeld();
    return done;
  });
  awaiter.join();
}

// Idle threads awaiting one queue with the same condition, as a worker
// pool's do: one item wakes one of them, not all (the others would only find
// the queue empty and sleep again).
struct PoolState {
  Mutex mu;
  int queued ABSL_GUARDED_BY(mu) = 0;
  int taken ABSL_GUARDED_BY(mu) = 0;
  int entered ABSL_GUARDED_BY(mu) = 0;
  bool stop ABSL_GUARDED_BY(mu) = false;
  // Per waiter thread, how often it evaluated the condition: a waiter does
  // when it is woken (and, having run, for the others at its release).
  std::atomic<int> evaluations[8] = {};
};
thread_local int pool_thread = -1;

bool PoolReady(PoolState* s) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (pool_thread >= 0) s->evaluations[pool_thread].fetch_add(1);
  return s->stop || s->queued > 0;
}

TEST(MutexAwaitTest, OneQueuedItemWakesOneOfTheThreadsAwaitingIt) {
  constexpr int kWaiters = 8;
  PoolState state;
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&state, i] {
      pool_thread = i;
      MutexLock lock(&state.mu);
      ++state.entered;
      for (;;) {
        state.mu.Await(Condition(&PoolReady, &state));
        if (state.stop) return;
        --state.queued;
        ++state.taken;
      }
    });
  }
  // Every waiter is listed once `entered` is full: each releases mu only by waiting.
  for (;;) {
    MutexLock lock(&state.mu);
    if (state.entered == kWaiters) break;
  }
  int before[kWaiters];
  for (int i = 0; i < kWaiters; ++i) before[i] = state.evaluations[i].load();
  {
    MutexLock lock(&state.mu);
    ++state.queued;
  }
  for (;;) {
    MutexLock lock(&state.mu);
    if (state.taken == 1) break;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // room for stray wake-ups
  int woken = 0;
  for (int i = 0; i < kWaiters; ++i) woken += state.evaluations[i].load() != before[i];
  // One waiter woke (a spurious wake-up of a condition variable could add one).
  EXPECT_GE(woken, 1);
  EXPECT_LE(woken, 2);
  {
    MutexLock lock(&state.mu);
    state.queued += 3 * kWaiters;  // a burst: the wake-ups chain until it is taken
  }
  for (;;) {
    MutexLock lock(&state.mu);
    if (state.taken == 1 + 3 * kWaiters) break;
  }
  {
    MutexLock lock(&state.mu);
    state.stop = true;  // every waiter returns, one waking the next
  }
  for (std::thread& t : threads) t.join();
  MutexLock lock(&state.mu);
  EXPECT_EQ(state.queued, 0);
}

// Waiters for different conditions, all made true in one critical section:
// the release wakes one, and each one's release wakes the next.
TEST(MutexAwaitTest, ConditionsMadeTrueTogetherWakeEveryWaiter) {
  constexpr int kWaiters = 6;
  Mutex mu;
  bool go[kWaiters] = {};  // guarded by mu
  int entered = 0, done = 0;
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&, i] {
      MutexLock lock(&mu);
      ++entered;
      mu.Await(Condition(&go[i]));
      ++done;
    });
  }
  for (;;) {
    MutexLock lock(&mu);
    if (entered == kWaiters) break;
  }
  {
    MutexLock lock(&mu);
    for (bool& g : go) g = true;
  }
  for (std::thread& t : threads) t.join();
  MutexLock lock(&mu);
  EXPECT_EQ(done, kWaiters);
}

TEST(ReleasableMutexLockTest, ReleaseUnlocksBeforeTheScopeEnds) {
  Mutex mu;
  {
    ReleasableMutexLock lock(&mu);
    lock.Release();
    if (mu.TryLock()) {
      mu.Unlock();
    } else {
      ADD_FAILURE() << "Release left the mutex held";
    }
  }
  { ReleasableMutexLock lock(&mu); }
  if (mu.TryLock()) {
    mu.Unlock();
  } else {
    ADD_FAILURE() << "ReleasableMutexLock left the mutex held";
  }
}

TEST(SharedMutexTest, ReadersShareAndAWriterExcludesThem) {
  SharedMutex mu;
  std::atomic<int> arrived{0};
  std::atomic<int> saw_both{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      ReaderMutexLock lock(&mu);
      arrived.fetch_add(1);
      // Both readers hold the lock at once: each waits (bounded) for the other.
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (arrived.load() < 2 && std::chrono::steady_clock::now() < give_up) {
        std::this_thread::yield();
      }
      if (arrived.load() == 2) saw_both.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(saw_both.load(), 2);

  int value = 0;  // written under the writer lock, read under reader locks
  std::thread writer([&] {
    for (int i = 0; i < 1000; ++i) {
      WriterMutexLock lock(&mu);
      value = value + 1;
    }
  });
  for (int i = 0; i < 1000; ++i) {
    ReaderMutexLock lock(&mu);
    EXPECT_LE(value, 1000);
  }
  writer.join();
  WriterMutexLock lock(&mu);
  EXPECT_EQ(value, 1000);
}

TEST(NotificationTest, WaitersReturnOnceNotified) {
  Notification n;
  EXPECT_FALSE(n.HasBeenNotified());
  EXPECT_FALSE(n.WaitForNotificationWithTimeout(absl::Milliseconds(5)));
  std::thread waiter([&] { n.WaitForNotification(); });
  n.Notify();
  waiter.join();
  EXPECT_TRUE(n.HasBeenNotified());
  EXPECT_TRUE(n.WaitForNotificationWithTimeout(absl::ZeroDuration()));
}

}  // namespace
}  // namespace mooncake
