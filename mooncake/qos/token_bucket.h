// TokenBucket: a rate limiter on bytes per second and operations per second,
// each with its own burst.
//
// Each limited dimension holds up to `burst` tokens and refills at `rate`
// tokens per second of the injected Clock (default MonotonicClock::Get()).
// TryAcquire(bytes) takes `bytes` byte tokens and one op token together, or
// nothing. Refill is exact integer arithmetic (a fractional remainder is
// carried in units of 1e-9 token), so the long-run admitted rate never drifts
// from the configured one.
//
// A request larger than the byte burst can never be covered by saved tokens;
// rather than refusing it forever, it is admitted when the bucket is full and
// leaves the bucket in debt (negative tokens) that later refills pay off. The
// average rate still holds.
//
// A rate of 0 means "not limited" for that dimension. Limits can change at
// run time (SetOptions): tokens earned so far are kept, clamped to the new
// burst; a dimension that becomes limited starts full.
//
// Thread-safe: every method may be called concurrently (one internal mutex;
// each call is O(1)).
#ifndef MOONCAKE_QOS_TOKEN_BUCKET_H_
#define MOONCAKE_QOS_TOKEN_BUCKET_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"

namespace mooncake::qos {

struct TokenBucketOptions {
  uint64_t bytes_per_sec = 0;  // 0: bytes not limited
  uint64_t burst_bytes = 0;    // in [1, kMaxBurst] when bytes_per_sec > 0
  uint64_t ops_per_sec = 0;    // 0: operations not limited
  uint64_t burst_ops = 0;      // in [1, kMaxBurst] when ops_per_sec > 0
};

class TokenBucket {
 public:
  static constexpr uint64_t kMaxBurst = uint64_t{1} << 62;
  static constexpr uint64_t kMaxRatePerSec = uint64_t{1} << 50;  // 1 PB/s

  static absl::Status Validate(const TokenBucketOptions& options) {
    if (absl::Status s = ValidateDimension("bytes", options.bytes_per_sec, options.burst_bytes);
        !s.ok()) {
      return s;
    }
    return ValidateDimension("ops", options.ops_per_sec, options.burst_ops);
  }

  // REQUIRES: Validate(options).ok() (asserted); `clock` outlives the bucket.
  explicit TokenBucket(const TokenBucketOptions& options, const Clock* clock = nullptr)
      : clock_(clock != nullptr ? clock : &MonotonicClock::Get()) {
    MC_ASSERT(Validate(options).ok(), "invalid TokenBucketOptions; call Validate() first");
    std::lock_guard<std::mutex> lock(mu_);
    last_ns_ = clock_->NowNs();
    bytes_.Configure(options.bytes_per_sec, options.burst_bytes);
    ops_.Configure(options.ops_per_sec, options.burst_ops);
  }

  TokenBucket(const TokenBucket&) = delete;
  TokenBucket& operator=(const TokenBucket&) = delete;

  // Takes `bytes` byte tokens and one op token if both are available (see the
  // file comment for requests above the burst); otherwise takes nothing.
  [[nodiscard]] bool TryAcquire(uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    RefillLocked();
    if (!bytes_.CanTake(bytes) || !ops_.CanTake(1)) return false;
    bytes_.Take(bytes);
    ops_.Take(1);
    return true;
  }

  // Gives back what a successful TryAcquire(bytes) took, for work that then
  // did not happen (a request refused further on). Tokens never pass the
  // burst, so a refund after the bucket refilled is partly lost.
  void Refund(uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    RefillLocked();
    bytes_.Give(bytes);
    ops_.Give(1);
  }

  // Nanoseconds until TryAcquire(bytes) would succeed if nobody else takes
  // tokens meanwhile; 0 if it would succeed now.
  int64_t WaitNs(uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    RefillLocked();
    return std::max(bytes_.WaitNs(bytes), ops_.WaitNs(1));
  }

  // Changes the limits at run time (see the file comment).
  absl::Status SetOptions(const TokenBucketOptions& options) {
    if (absl::Status s = Validate(options); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    RefillLocked();
    bytes_.Configure(options.bytes_per_sec, options.burst_bytes);
    ops_.Configure(options.ops_per_sec, options.burst_ops);
    return absl::OkStatus();
  }

  // Tokens now (negative while in debt); INT64_MAX for an unlimited dimension.
  int64_t AvailableBytes() {
    std::lock_guard<std::mutex> lock(mu_);
    RefillLocked();
    return bytes_.Available();
  }
  int64_t AvailableOps() {
    std::lock_guard<std::mutex> lock(mu_);
    RefillLocked();
    return ops_.Available();
  }

 private:
  static constexpr uint64_t kNsPerSec = 1'000'000'000;

  static absl::Status ValidateDimension(const char* what, uint64_t rate, uint64_t burst) {
    if (rate > kMaxRatePerSec) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, "_per_sec is ", rate, "; the most is ", kMaxRatePerSec));
    }
    if (rate > 0 && (burst < 1 || burst > kMaxBurst)) {
      return absl::InvalidArgumentError(absl::StrCat("burst_", what, " is ", burst, " with ", what,
                                                     "_per_sec ", rate, "; it must be in [1, ",
                                                     kMaxBurst, "]"));
    }
    return absl::OkStatus();
  }

  // One limited quantity. Invariants when limited: tokens <= burst;
  // remainder < kNsPerSec; remainder == 0 while full.
  struct Dimension {
    uint64_t rate = 0;  // 0: unlimited
    uint64_t burst = 0;
    int64_t tokens = 0;
    uint64_t remainder = 0;  // fractional tokens, in 1e-9 token

    void Configure(uint64_t new_rate, uint64_t new_burst) {
      if (new_rate == 0) {
        *this = Dimension{};
        return;
      }
      const bool was_unlimited = rate == 0;
      rate = new_rate;
      burst = new_burst;
      if (was_unlimited || tokens >= static_cast<int64_t>(burst)) {
        tokens = static_cast<int64_t>(burst);
        remainder = 0;
      }
    }

    void Refill(uint64_t elapsed_ns) {
      if (rate == 0 || tokens >= static_cast<int64_t>(burst)) return;
      // elapsed < 2^63 and rate <= 2^50: the product fits in 128 bits.
      const unsigned __int128 scaled =
          static_cast<unsigned __int128>(elapsed_ns) * rate + remainder;
      const unsigned __int128 earned = scaled / kNsPerSec;
      const uint64_t room = static_cast<uint64_t>(static_cast<int64_t>(burst) - tokens);
      if (earned >= room) {
        tokens = static_cast<int64_t>(burst);
        remainder = 0;
      } else {
        tokens += static_cast<int64_t>(earned);
        remainder = static_cast<uint64_t>(scaled % kNsPerSec);
      }
      MC_DASSERT(tokens <= static_cast<int64_t>(burst), "refill past the burst");
    }

    // Above-burst requests need a full bucket (and then leave debt).
    uint64_t Needed(uint64_t n) const { return std::min(n, burst); }
    bool CanTake(uint64_t n) const {
      return rate == 0 || tokens >= static_cast<int64_t>(Needed(n));
    }
    void Take(uint64_t n) {
      if (rate == 0) return;
      MC_DASSERT(CanTake(n), "taking tokens that are not there");
      // Debt is capped at kMaxBurst so tokens stay >= burst - 2^62 > INT64_MIN.
      tokens -= static_cast<int64_t>(std::min(n, kMaxBurst));
    }
    void Give(uint64_t n) {
      if (rate == 0) return;
      const int64_t room = static_cast<int64_t>(burst) - tokens;  // >= 0
      if (n >= static_cast<uint64_t>(room)) {
        tokens = static_cast<int64_t>(burst);
        remainder = 0;
      } else {
        tokens += static_cast<int64_t>(n);
      }
    }
    int64_t WaitNs(uint64_t n) const {
      if (CanTake(n)) return 0;
      const unsigned __int128 missing =
          static_cast<unsigned __int128>(static_cast<int64_t>(Needed(n)) - tokens) * kNsPerSec -
          remainder;
      const unsigned __int128 wait = (missing + rate - 1) / rate;
      return wait > std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max()
                                                        : static_cast<int64_t>(wait);
    }
    int64_t Available() const { return rate == 0 ? std::numeric_limits<int64_t>::max() : tokens; }
  };

  void RefillLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int64_t now_ns = clock_->NowNs();
    if (now_ns <= last_ns_) return;
    const uint64_t elapsed_ns = static_cast<uint64_t>(now_ns - last_ns_);
    last_ns_ = now_ns;
    bytes_.Refill(elapsed_ns);
    ops_.Refill(elapsed_ns);
  }

  const Clock* const clock_;
  // std::mutex, not absl::Mutex: see locked_scheduler.h.
  std::mutex mu_;
  int64_t last_ns_ ABSL_GUARDED_BY(mu_) = 0;
  Dimension bytes_ ABSL_GUARDED_BY(mu_);
  Dimension ops_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::qos

#endif  // MOONCAKE_QOS_TOKEN_BUCKET_H_
