// Clocks that tests can replace.
//
// Code that measures time or enforces deadlines takes a `Clock&` (or a
// `Clock*` defaulting to MonotonicClock::Get()) instead of calling
// std::chrono directly, so a test can drive time with a FakeClock and stay
// deterministic.
//
// Thread-safety: every Clock method may be called from any thread.
// FakeClock's setters too (the time is one atomic).
#ifndef MOONCAKE_BASE_CLOCK_H_
#define MOONCAKE_BASE_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

#include "mooncake/base/assert.h"

namespace mooncake {

class Clock {
 public:
  virtual ~Clock() = default;

  // Nanoseconds since an arbitrary, fixed epoch. Never decreases.
  virtual int64_t NowNs() const = 0;

  int64_t NowUs() const { return NowNs() / 1000; }
  int64_t NowMs() const { return NowNs() / 1000000; }
};

// std::chrono::steady_clock (CLOCK_MONOTONIC on Linux).
class MonotonicClock final : public Clock {
 public:
  int64_t NowNs() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // The process-wide instance; lives forever.
  static MonotonicClock& Get() {
    static MonotonicClock clock;
    return clock;
  }
};

// A clock that moves only when told to.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_ns = 0) : now_ns_(start_ns) {}

  int64_t NowNs() const override {
    // relaxed: the value itself is the only state; no other memory is
    // published through it.
    return now_ns_.load(std::memory_order_relaxed);
  }

  void AdvanceNs(int64_t delta_ns) {
    MC_ASSERT(delta_ns >= 0, "a monotonic clock cannot go back");
    now_ns_.fetch_add(delta_ns, std::memory_order_relaxed);
  }
  void AdvanceUs(int64_t delta_us) { AdvanceNs(delta_us * 1000); }
  void AdvanceMs(int64_t delta_ms) { AdvanceNs(delta_ms * 1000000); }

  void SetNs(int64_t now_ns) {
    MC_ASSERT(now_ns >= NowNs(), "a monotonic clock cannot go back");
    now_ns_.store(now_ns, std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t> now_ns_;
};

}  // namespace mooncake

#endif  // MOONCAKE_BASE_CLOCK_H_
