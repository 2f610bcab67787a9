#include "mooncake/base/mutex.h"

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

}  // namespace
}  // namespace mooncake
