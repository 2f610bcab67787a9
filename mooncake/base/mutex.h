// Mutex: std::mutex with Clang thread-safety annotations, so that members can
// be ABSL_GUARDED_BY one and `clang -Wthread-safety` checks every access.
// Nothing in mooncake uses absl::Mutex.
//
// Why not absl::Mutex: Debian's abseil is built without TSan, and absl::Mutex's
// own futex/spin code then looks like a data race to a TSan build of ours;
// std::mutex / std::shared_mutex / std::condition_variable go through pthread,
// which TSan understands. Every call here is inline.
//
//   Mutex            Lock / Unlock / TryLock; AssertHeld (debug only: a
//                    std::mutex cannot tell its owner, so it asserts nothing
//                    at run time, but tells the analysis the lock is held).
//                    Await / AwaitWithTimeout / AwaitWithDeadline(Condition),
//                    with absl::Mutex's meaning: the condition is evaluated
//                    again each time any thread releases the mutex, so code
//                    that changes the awaited state needs no signal of its own.
//   MutexLock        scoped lock (ABSL_SCOPED_LOCKABLE), like std::lock_guard.
//   ReleasableMutexLock  a MutexLock that Release() may unlock early.
//   Condition        what Await waits for: a bool, a function of a pointer, a
//                    method, or a functor (absl::Condition's constructors).
//   CondVar          a condition variable over Mutex: Wait(mu) / Wait(mu,
//                    pred) / WaitFor(mu, timeout, pred), WaitWithTimeout /
//                    WaitWithDeadline (absl::CondVar's), Signal, SignalAll.
//   SharedMutex      std::shared_mutex, annotated: Lock / Unlock (exclusive),
//                    ReaderLock / ReaderUnlock (shared), with ReaderMutexLock
//                    and WriterMutexLock. No Await and no CondVar on it.
//   Notification     a one-shot event: Notify once, wait any number of times.
//
// Cost: Unlock reads one pointer when nobody awaits; otherwise it evaluates the
// awaiting threads' conditions (as absl::Mutex does) and wakes those whose
// condition holds, but only one of the threads awaiting the same condition
// (the same function and argument); its release wakes the next. A Mutex is a
// std::mutex and a pointer (48 bytes).
//
// Thread-safety: as std::mutex / std::condition_variable. A Condition is
// evaluated with the mutex held and must only read state that mutex guards.
#ifndef MOONCAKE_BASE_MUTEX_H_
#define MOONCAKE_BASE_MUTEX_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <type_traits>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace mooncake {

// A predicate Mutex::Await evaluates with the mutex held. It refers to its
// function and argument, which must outlive the wait (as absl::Condition).
class Condition {
 public:
  // True when *cond is.
  explicit Condition(const bool* cond) : arg_(cond), eval_(&EvalBool) {}
  // func(arg); a captureless lambda converts with unary +.
  template <typename T>
  Condition(bool (*func)(T*), T* arg) : arg_(arg), eval_(&EvalFunction<T>) {
    Store(func);
  }
  // (object->*method)().
  template <typename T>
  Condition(T* object, bool (std::type_identity_t<T>::*method)())
      : arg_(object), eval_(&EvalMethod<T>) {
    Store(method);
  }
  template <typename T>
  Condition(const T* object, bool (std::type_identity_t<T>::*method)() const)
      : arg_(object), eval_(&EvalConstMethod<T>) {
    Store(method);
  }
  // (*fn)() for a functor, e.g. a lambda that lives as long as the wait.
  template <typename F, typename = decltype(static_cast<bool (F::*)() const>(&F::operator()))>
  explicit Condition(const F* fn) : arg_(fn), eval_(&EvalFunctor<F>) {}

  bool Eval() const { return eval_(*this); }
  // Whether `o` is bound to the same function and argument, so it is true
  // exactly when this one is (absl::Condition::GuaranteedEqual).
  bool SameAs(const Condition& o) const {
    return eval_ == o.eval_ && arg_ == o.arg_ &&
           std::memcmp(callee_, o.callee_, sizeof(callee_)) == 0;
  }

 private:
  // Any pointer to member function of a single-inheritance class, or a function pointer.
  using Callee = bool (Condition::*)();

  template <typename C>
  void Store(C c) {
    static_assert(sizeof(C) <= sizeof(callee_), "callee too large for a Condition");
    std::memcpy(callee_, &c, sizeof(C));
  }
  template <typename C>
  C Load() const {
    C c;
    std::memcpy(&c, callee_, sizeof(C));
    return c;
  }

  // Not analyzed: the caller (Mutex::Await*) holds the mutex the function may require,
  // which the analysis cannot follow through the pointer.
  static bool EvalBool(const Condition& c) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return *static_cast<const bool*>(c.arg_);
  }
  template <typename T>
  static bool EvalFunction(const Condition& c) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return c.Load<bool (*)(T*)>()(static_cast<T*>(const_cast<void*>(c.arg_)));
  }
  template <typename T>
  static bool EvalMethod(const Condition& c) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return (static_cast<T*>(const_cast<void*>(c.arg_))->*c.Load<bool (T::*)()>())();
  }
  template <typename T>
  static bool EvalConstMethod(const Condition& c) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return (static_cast<const T*>(c.arg_)->*c.Load<bool (T::*)() const>())();
  }
  template <typename F>
  static bool EvalFunctor(const Condition& c) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return (*static_cast<const F*>(c.arg_))();
  }

  const void* arg_;
  bool (*eval_)(const Condition&);
  alignas(Callee) char callee_[sizeof(Callee)] = {};
};

namespace base_internal {

// A timeout as a steady_clock deadline; false when it is too far off to
// matter (absl::InfiniteDuration, or more than a year): wait without one.
inline bool SteadyDeadline(absl::Duration timeout, std::chrono::steady_clock::time_point* out) {
  if (timeout > absl::Hours(24 * 365)) return false;
  *out = std::chrono::steady_clock::now() +
         absl::ToChronoNanoseconds(std::max(timeout, absl::ZeroDuration()));
  return true;
}

}  // namespace base_internal

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    WakeReady();
    mu_.unlock();
  }
  [[nodiscard]] bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
  // For the analysis only (see the header comment): a function that is called with the
  // lock held but cannot say so in its signature (a callback) states it with this.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

  // Returns once cond is true, with the lock held again; releases it while
  // waiting. cond is evaluated first and then, by the releasing thread, at
  // every release of this mutex (Unlock, or another thread's Await or CondVar
  // wait); the waiter wakes only once it has seen cond true.
  void Await(const Condition& cond) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    if (cond.Eval()) return;
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    Waiter w(&cond);
    Enqueue(&w);
    while (!cond.Eval()) {
      w.woken = false;
      WakeReady();  // woken for nothing: pass the wake-up on before sleeping
      w.cv.wait(lock);
    }
    Remove(&w);
    lock.release();  // still held: the caller's scope unlocks it
  }
  // As Await, for at most `timeout`; returns cond's value at return.
  bool AwaitWithTimeout(const Condition& cond, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    if (cond.Eval()) return true;
    std::chrono::steady_clock::time_point until;
    if (!base_internal::SteadyDeadline(timeout, &until)) {
      Await(cond);
      return true;
    }
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    Waiter w(&cond);
    Enqueue(&w);
    bool ok = false;
    while (!(ok = cond.Eval())) {
      w.woken = false;
      WakeReady();
      if (w.cv.wait_until(lock, until) == std::cv_status::timeout) {
        ok = cond.Eval();
        break;
      }
    }
    Remove(&w);
    lock.release();
    return ok;
  }
  bool AwaitWithDeadline(const Condition& cond, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    if (deadline == absl::InfiniteFuture()) {
      Await(cond);
      return true;
    }
    return AwaitWithTimeout(cond, deadline - absl::Now());
  }

 private:
  friend class CondVar;

  // A thread in Await*, on its own stack; listed while it waits.
  struct Waiter {
    explicit Waiter(const Condition* c) : cond(c) {}
    const Condition* const cond;
    std::condition_variable cv;
    bool woken = false;  // signalled since it last looked at cond
    bool ready = false;  // cond, as WakeReady last evaluated it
    Waiter* next = nullptr;
  };

  // Wakes the listed waiters whose conditions now hold, one per group of
  // waiters on the same condition (Condition::SameAs), and none in a group
  // where one woken earlier still sees it hold: that one will run and release
  // mu_ again, and its release wakes the next (absl::Mutex's "designated
  // waker"). Waking all of a group, e.g. a pool's idle threads awaiting one
  // queue, would wake them all for one queued task, and all but one would
  // sleep again. Called with mu_ held before every release, so a waiter cannot
  // miss a change; the notify is under the lock, so the waiter (and its
  // Waiter) cannot be gone yet. O(waiters x groups woken).
  void WakeReady() {
    if (waiters_ == nullptr) return;
    // The groups already being served: woken waiters whose condition holds.
    absl::InlinedVector<const Condition*, 8> served;
    for (Waiter* w = waiters_; w != nullptr; w = w->next) {
      w->ready = w->cond->Eval();
      if (w->ready && w->woken) served.push_back(w->cond);
    }
    for (Waiter* w = waiters_; w != nullptr; w = w->next) {
      if (!w->ready || w->woken) continue;
      if (std::any_of(served.begin(), served.end(),
                      [&](const Condition* c) { return c->SameAs(*w->cond); })) {
        continue;
      }
      served.push_back(w->cond);
      w->woken = true;
      w->cv.notify_one();
    }
  }
  // The caller is about to release mu_ in its wait: it may have changed what
  // the others wait for.
  void Enqueue(Waiter* w) {
    WakeReady();
    w->next = waiters_;
    waiters_ = w;
  }
  void Remove(Waiter* w) {
    Waiter** p = &waiters_;
    while (*p != w) p = &(*p)->next;
    *p = w->next;
  }

  std::mutex mu_;
  Waiter* waiters_ = nullptr;  // threads in Await*; guarded by mu_
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

// A MutexLock whose Release() unlocks before the scope ends (then the
// destructor does nothing).
class ABSL_SCOPED_LOCKABLE ReleasableMutexLock {
 public:
  explicit ReleasableMutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~ReleasableMutexLock() ABSL_UNLOCK_FUNCTION() {
    if (mu_ != nullptr) mu_->Unlock();
  }
  // REQUIRES: not released yet.
  void Release() ABSL_UNLOCK_FUNCTION() {
    mu_->Unlock();
    mu_ = nullptr;
  }
  ReleasableMutexLock(const ReleasableMutexLock&) = delete;
  ReleasableMutexLock& operator=(const ReleasableMutexLock&) = delete;

 private:
  Mutex* mu_;
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
    mu->WakeReady();  // the wait releases mu without Unlock
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
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
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (!pred()) {
      if (WaitUntil(mu, until)) return pred();
    }
    return true;
  }
  // absl::CondVar's: wait for a signal or the timeout (deadline); true when
  // it timed out. May return spuriously.
  bool WaitWithTimeout(Mutex* mu, absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::chrono::steady_clock::time_point until;
    if (!base_internal::SteadyDeadline(timeout, &until)) {
      Wait(mu);
      return false;
    }
    return WaitUntil(mu, until);
  }
  bool WaitWithDeadline(Mutex* mu, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (deadline == absl::InfiniteFuture()) {
      Wait(mu);
      return false;
    }
    return WaitWithTimeout(mu, deadline - absl::Now());
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  bool WaitUntil(Mutex* mu, std::chrono::steady_clock::time_point until)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    mu->WakeReady();
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool timed_out = cv_.wait_until(lock, until) == std::cv_status::timeout;
    lock.release();
    return timed_out;
  }

  std::condition_variable cv_;
};

// Reader-writer lock. Writers (Lock) exclude everyone; readers (ReaderLock)
// exclude writers only.
class ABSL_LOCKABLE SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { mu_.lock_shared(); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }
  // For the analysis only, as Mutex::AssertHeld.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}
  void AssertReaderHeld() const ABSL_ASSERT_SHARED_LOCK() {}

 private:
  std::shared_mutex mu_;
};

class ABSL_SCOPED_LOCKABLE ReaderMutexLock {
 public:
  explicit ReaderMutexLock(SharedMutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->ReaderLock();
  }
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  SharedMutex* const mu_;
};

class ABSL_SCOPED_LOCKABLE WriterMutexLock {
 public:
  explicit WriterMutexLock(SharedMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~WriterMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  WriterMutexLock(const WriterMutexLock&) = delete;
  WriterMutexLock& operator=(const WriterMutexLock&) = delete;

 private:
  SharedMutex* const mu_;
};

// One-shot event (absl::Notification's interface). Notify at most once.
class Notification {
 public:
  Notification() = default;
  Notification(const Notification&) = delete;
  Notification& operator=(const Notification&) = delete;

  void Notify() {
    MutexLock lock(&mu_);
    notified_ = true;
  }
  bool HasBeenNotified() {
    MutexLock lock(&mu_);
    return notified_;
  }
  void WaitForNotification() {
    MutexLock lock(&mu_);
    mu_.Await(Condition(&notified_));
  }
  // True when notified within the timeout.
  bool WaitForNotificationWithTimeout(absl::Duration timeout) {
    MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(Condition(&notified_), timeout);
  }

 private:
  Mutex mu_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mooncake

#endif  // MOONCAKE_BASE_MUTEX_H_
