// Mutex: std::mutex with Clang thread-safety annotations, so that members can
// be ABSL_GUARDED_BY one and `clang -Wthread-safety` checks every access.
//
// Why not absl::Mutex: Debian's abseil is built without TSan, and absl::Mutex's
// own futex/spin code then looks like a data race to a TSan build of ours;
// std::mutex goes through pthread, which TSan understands. These wrappers add
// nothing at run time beyond std::mutex (every call is inline).
//
//   Mutex            Lock / Unlock / TryLock; AssertHeld (debug only: a
//                    std::mutex cannot tell its owner, so it asserts nothing
//                    at run time, but tells the analysis the lock is held).
//   MutexLock        scoped lock (ABSL_SCOPED_LOCKABLE), like std::lock_guard.
//   CondVar          a condition variable over Mutex (std::condition_variable on
//                    the native std::mutex): Wait(mu) / Wait(mu, pred) /
//                    WaitFor(mu, timeout, pred), Signal, SignalAll.
//
// Thread-safety: as std::mutex / std::condition_variable.
#ifndef MOONCAKE_BASE_MUTEX_H_
#define MOONCAKE_BASE_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "absl/base/thread_annotations.h"

namespace mooncake {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  [[nodiscard]] bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
  // For the analysis only (see the header comment): a function that is called with the
  // lock held but cannot say so in its signature (a callback) states it with this.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

  // The std::mutex beneath, for std:: facilities that need one (CondVar uses it). Locking
  // it directly bypasses the analysis.
  std::mutex& native() ABSL_LOCK_RETURNED(this) { return mu_; }

 private:
  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Waits release `mu` while blocked and hold it again when they return, as
// std::condition_variable does; the caller holds `mu` before and after.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // May return spuriously: call it in a loop, or use the predicate form.
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->native(), std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // still held: the caller's scope unlocks it
  }
  // Returns once pred() is true. pred runs with mu held; a lambda reading guarded members
  // says so with mu.AssertHeld() (the analysis does not follow the lock into it).
  template <typename Pred>
  void Wait(Mutex* mu, Pred pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    while (!pred()) Wait(mu);
  }
  // Returns pred() once it is true or the timeout has passed.
  template <typename Rep, typename Period, typename Pred>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout, Pred pred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->native(), std::adopt_lock);
    const bool ok = cv_.wait_for(lock, timeout, std::move(pred));
    lock.release();
    return ok;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace mooncake

#endif  // MOONCAKE_BASE_MUTEX_H_
