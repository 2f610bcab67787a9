// The pieces of TcpTransport's link aggregation (docs/transport.md,
// "Aggregation"): one peer reached over several paths, each path a (local
// bind address -> peer address) pair with its own lanes.
//
//   PairPaths          which local address serves which peer address.
//   CapacityEstimator  a path's measured capacity: an EWMA of the bytes/s it
//                      completes while it has work (busy time only, so a path
//                      that was given little work is not mistaken for slow).
//   PathPicker         sprays slices over paths in proportion to weights by
//                      virtual time (each path's bytes / its weight; the
//                      smallest goes next), so a 2:1 pair gets 2:1 bytes
//                      within a batch and across batches alike.
//   RescueQueue        slices a dying lane handed back, for the transport's
//                      rescue thread to put on another path.
//   PathState          one path's counters, estimator and backoff; the
//                      SliceObserver of the path's lanes.
//
// Thread-safety: CapacityEstimator, PathPicker and PathState are internally
// locked (every method may be called concurrently); RescueQueue too.
#ifndef MOONCAKE_TRANSPORT_INTERNAL_TCP_PATHS_H_
#define MOONCAKE_TRANSPORT_INTERNAL_TCP_PATHS_H_

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/mutex.h"
#include "mooncake/transport/internal/tcp_lane.h"

namespace mooncake::transport_internal {

inline constexpr size_t kMaxPaths = 8;

// Bits two numeric addresses share from the top (0 across families or for
// non-literals).
inline int CommonPrefixBits(const std::string& a, const std::string& b) {
  std::array<uint8_t, 16> x{}, y{};
  size_t n = 0;
  if (::inet_pton(AF_INET, a.c_str(), x.data()) == 1 &&
      ::inet_pton(AF_INET, b.c_str(), y.data()) == 1) {
    n = 4;
  } else if (::inet_pton(AF_INET6, a.c_str(), x.data()) == 1 &&
             ::inet_pton(AF_INET6, b.c_str(), y.data()) == 1) {
    n = 16;
  }
  int bits = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t d = x[i] ^ y[i];
    if (d == 0) {
      bits += 8;
      continue;
    }
    for (int b = 7; b >= 0 && !(d >> b & 1); --b) ++bits;
    break;
  }
  return bits;
}

// (local index, remote index) of each path; local -1: unbound. With no local
// addresses, one unbound path per remote address; with one remote address,
// one path per local address to it; otherwise each remote address gets the
// local address sharing the longest prefix with it (its own subnet), ties
// going to the local address of the same index (modulo their count).
inline std::vector<std::pair<int, int>> PairPaths(std::span<const std::string> local,
                                                  std::span<const std::string> remote) {
  MC_ASSERT(!remote.empty(), "a peer has an address");
  std::vector<std::pair<int, int>> out;
  if (local.empty()) {
    for (size_t r = 0; r < remote.size(); ++r) out.emplace_back(-1, static_cast<int>(r));
  } else if (remote.size() == 1) {
    for (size_t l = 0; l < local.size(); ++l) out.emplace_back(static_cast<int>(l), 0);
  } else {
    for (size_t r = 0; r < remote.size(); ++r) {
      size_t best = r % local.size();
      int best_bits = CommonPrefixBits(local[best], remote[r]);
      for (size_t l = 0; l < local.size(); ++l) {
        const int bits = CommonPrefixBits(local[l], remote[r]);
        if (bits > best_bits) best = l, best_bits = bits;
      }
      out.emplace_back(static_cast<int>(best), static_cast<int>(r));
    }
  }
  if (out.size() > kMaxPaths) out.resize(kMaxPaths);
  MC_ASSERT(!out.empty() && out.size() <= kMaxPaths, "paths in [1, kMaxPaths]");
  return out;
}

// Bytes/s a path completes while it has slices outstanding. A sample closes
// once the busy time in it reaches `sample_ns` or its bytes `sample_bytes`
// (so a path given little work, perhaps after one slow sample, is still
// re-measured every few batches); samples fold into the EWMA with weight
// `alpha`.
class CapacityEstimator {
 public:
  explicit CapacityEstimator(const Clock* clock, int64_t sample_ns = 20'000'000, double alpha = 0.3,
                             uint64_t sample_bytes = 2 << 20)
      : clock_(clock), sample_ns_(sample_ns), alpha_(alpha), sample_bytes_min_(sample_bytes) {
    MC_ASSERT(clock != nullptr && sample_ns > 0 && alpha > 0 && alpha <= 1 && sample_bytes > 0,
              "estimator settings");
  }

  void Started(size_t slices) {
    MutexLock lock(&mu_);
    if (outstanding_ == 0) busy_since_ns_ = clock_->NowNs();
    outstanding_ += slices;
  }
  // A slice settled (`bytes` moved, 0 if it failed) or was moved off.
  void Finished(uint64_t bytes) {
    MutexLock lock(&mu_);
    MC_DASSERT(outstanding_ > 0, "a slice finished that never started");
    const int64_t now = clock_->NowNs();
    sample_bytes_ += bytes;
    const int64_t busy = sample_busy_ns_ + (now - busy_since_ns_);
    const bool full = busy >= sample_ns_ || sample_bytes_ >= sample_bytes_min_;
    if (--outstanding_ == 0 || full) {
      sample_busy_ns_ = busy;
      busy_since_ns_ = now;
    }
    if (full && sample_busy_ns_ > 0) {
      const double rate = static_cast<double>(sample_bytes_) * 1e9 / sample_busy_ns_;
      bytes_per_s_ = bytes_per_s_ == 0 ? rate : alpha_ * rate + (1 - alpha_) * bytes_per_s_;
      sample_bytes_ = 0;
      sample_busy_ns_ = 0;
    }
  }
  // 0 until the first sample closes.
  double bytes_per_s() const {
    MutexLock lock(&mu_);
    return bytes_per_s_;
  }

 private:
  const Clock* const clock_;
  const int64_t sample_ns_;
  const double alpha_;
  const uint64_t sample_bytes_min_;
  mutable Mutex mu_;
  size_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t busy_since_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sample_busy_ns_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sample_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  double bytes_per_s_ ABSL_GUARDED_BY(mu_) = 0;
};

// Weighted spraying by virtual time. A path with weight 0 is not picked; one
// that comes back (weight > 0 again) starts at the smallest virtual time of
// the others, so it does not take a burst to "catch up".
class PathPicker {
 public:
  explicit PathPicker(size_t paths) : vt_(paths, 0), usable_(paths, false) {
    MC_ASSERT(paths >= 1 && paths <= kMaxPaths, "paths in [1, kMaxPaths]");
  }

  // REQUIRES: weights.size() == paths, some weight > 0.
  size_t Pick(std::span<const double> weights, uint64_t bytes) {
    MutexLock lock(&mu_);
    MC_DASSERT(weights.size() == vt_.size(), "a weight per path");
    double floor = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < vt_.size(); ++i) {
      if (weights[i] > 0 && usable_[i]) floor = std::min(floor, vt_[i]);
    }
    size_t best = vt_.size();
    for (size_t i = 0; i < vt_.size(); ++i) {
      const bool usable = weights[i] > 0;
      if (usable && !usable_[i] && floor != std::numeric_limits<double>::infinity()) {
        vt_[i] = std::max(vt_[i], floor);
      }
      usable_[i] = usable;
      if (usable && (best == vt_.size() || vt_[i] < vt_[best])) best = i;
    }
    MC_ASSERT(best < vt_.size(), "Pick needs a path with weight > 0");
    vt_[best] += static_cast<double>(bytes) / weights[best];
    return best;
  }

 private:
  Mutex mu_;
  std::vector<double> vt_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> usable_ ABSL_GUARDED_BY(mu_);
};

// Slices handed back by dying lanes, tagged with their peer.
class RescueQueue {
 public:
  struct Item {
    const void* peer = nullptr;
    Slice slice;
  };

  // Takes `s` (moved from) unless the queue is closed (false, `s` intact).
  bool Push(const void* peer, Slice& s) {
    MutexLock lock(&mu_);
    if (closed_) return false;
    items_.push_back({peer, std::move(s)});
    return true;
  }
  // Wakes Take (a path went down and needs probing).
  void Poke() {
    MutexLock lock(&mu_);
    poked_ = true;
  }
  // Waits until items, a poke, Close or `deadline`; returns the items.
  // `open` is false once closed.
  std::vector<Item> Take(absl::Time deadline, bool* open) {
    MutexLock lock(&mu_);
    const auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return closed_ || poked_ || !items_.empty();
    };
    mu_.AwaitWithDeadline(Condition(&ready), deadline);
    poked_ = false;
    *open = !closed_;
    std::vector<Item> out(std::make_move_iterator(items_.begin()),
                          std::make_move_iterator(items_.end()));
    items_.clear();
    return out;
  }
  // Refuses later pushes; returns what is still queued.
  std::vector<Item> Close() {
    MutexLock lock(&mu_);
    closed_ = true;
    std::vector<Item> out(std::make_move_iterator(items_.begin()),
                          std::make_move_iterator(items_.end()));
    items_.clear();
    return out;
  }

 private:
  Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool poked_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Item> items_ ABSL_GUARDED_BY(mu_);
};

// A lane death's status that another path may cure (not Cancelled: the
// batch or the transport is going away).
inline bool RetryableOnAnotherPath(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded ||
         s.code() == absl::StatusCode::kDataLoss || s.code() == absl::StatusCode::kAborted;
}

// One path of a peer: its counters, capacity, and up/down (backoff) state.
// Down: the path is skipped by new slices until `retry_at`, then the rescue
// thread reconnects its lanes; each failure in a row doubles the backoff
// (backoff_min .. backoff_max), a slice completed on it resets it.
class PathState final : public SliceObserver {
 public:
  struct Config {
    std::string name;   // "<local>-><host:port>" (metrics label, messages)
    double weight = 1;  // the starting share (a RoutePlan weight, or equal)
    uint32_t retries_max = 4;
    absl::Duration backoff_min = absl::Milliseconds(200);
    absl::Duration backoff_max = absl::Seconds(5);
  };
  struct Stats {
    std::string name;
    uint64_t bytes = 0;     // moved by slices completed OK on this path
    uint64_t slices = 0;    // slices completed OK on this path
    uint64_t retries = 0;   // slices moved off this path after a lane died
    uint64_t failures = 0;  // times the path went down
    double capacity_bytes_per_s = 0;
    bool up = true;
  };

  PathState(Config config, const Clock* clock, RescueQueue* rescue, const void* peer,
            MetricsRegistry& registry, std::string_view transport_name)
      : config_(std::move(config)), clock_(clock), rescue_(rescue), peer_(peer), capacity_(clock) {
    const MetricLabels labels = {{"transport", std::string(transport_name)},
                                 {"path", config_.name}};
    bytes_ = Must(registry.GetCounter("mooncake_transport_path_bytes_total",
                                      "Bytes of slices completed on one path of a peer.", labels));
    slices_ = Must(registry.GetCounter("mooncake_transport_path_slices_total",
                                       "Slices completed on one path of a peer.", labels));
    retries_ = Must(registry.GetCounter("mooncake_transport_path_retries_total",
                                        "Slices moved off a path whose lane died.", labels));
    failures_ = Must(registry.GetCounter("mooncake_transport_path_failures_total",
                                         "Times a path went down (backoff).", labels));
    capacity_gauge_ = Must(registry.GetGauge("mooncake_transport_path_capacity_bytes_per_second",
                                             "Measured capacity of a path (EWMA).", labels));
  }

  const std::string& name() const { return config_.name; }
  double weight() const { return config_.weight; }
  double capacity() const { return capacity_.bytes_per_s(); }
  void Started(size_t slices) { capacity_.Started(slices); }

  bool up() const {
    MutexLock lock(&mu_);
    return !down_;
  }
  // Down and its backoff is over: time to reconnect.
  bool ProbeDue() const {
    MutexLock lock(&mu_);
    return down_ && clock_->NowNs() >= retry_at_ns_;
  }
  // When a down path is next due (InfiniteFuture when up).
  absl::Time ProbeAt() const {
    MutexLock lock(&mu_);
    if (!down_) return absl::InfiniteFuture();
    return absl::Now() + absl::Nanoseconds(std::max<int64_t>(0, retry_at_ns_ - clock_->NowNs()));
  }
  absl::Status last_error() const {
    MutexLock lock(&mu_);
    return last_error_;
  }

  // The path failed (`why`): down for the current backoff, which doubles.
  // Returns whether it was up (a new failure) and pokes the rescue thread.
  bool MarkDown(const absl::Status& why) {
    {
      MutexLock lock(&mu_);
      last_error_ = why;
      if (down_) return false;
      down_ = true;
      retry_at_ns_ = clock_->NowNs() + absl::ToInt64Nanoseconds(backoff_);
      backoff_ = std::min(backoff_ * 2, config_.backoff_max);
    }
    failures_->Increment();
    rescue_->Poke();
    return true;
  }
  // A probe failed: down again for the (doubled) backoff.
  void ProbeFailed(const absl::Status& why) {
    MutexLock lock(&mu_);
    last_error_ = why;
    retry_at_ns_ = clock_->NowNs() + absl::ToInt64Nanoseconds(backoff_);
    backoff_ = std::min(backoff_ * 2, config_.backoff_max);
  }
  void MarkUp() {
    MutexLock lock(&mu_);
    down_ = false;
  }

  Stats stats() const {
    Stats s;
    s.name = config_.name;
    s.bytes = bytes_->Value();
    s.slices = slices_->Value();
    s.retries = retries_->Value();
    s.failures = failures_->Value();
    s.capacity_bytes_per_s = capacity();
    s.up = up();
    return s;
  }

  // SliceObserver.
  void Settled(const Slice& s, const absl::Status& status) override {
    capacity_.Finished(status.ok() ? s.length : 0);
    if (!status.ok()) return;
    bytes_->Increment(s.length);
    slices_->Increment();
    capacity_gauge_->Set(capacity_.bytes_per_s());
    MutexLock lock(&mu_);
    backoff_ = config_.backoff_min;
  }
  bool Rescue(Slice& s, const absl::Status& why) override {
    if (!RetryableOnAnotherPath(why) || s.batch->cancelled() || s.attempts >= config_.retries_max) {
      return false;
    }
    MarkDown(why);
    ++s.attempts;
    if (!rescue_->Push(peer_, s)) {
      --s.attempts;
      return false;
    }
    capacity_.Finished(0);
    retries_->Increment();
    return true;
  }

 private:
  template <typename T>
  static T* Must(absl::StatusOr<T*> s) {
    MC_ASSERT(s.ok(), "path metric registration failed (name clash in the registry)");
    return *s;
  }

  const Config config_;
  const Clock* const clock_;
  RescueQueue* const rescue_;
  const void* const peer_;
  CapacityEstimator capacity_;
  Counter* bytes_ = nullptr;
  Counter* slices_ = nullptr;
  Counter* retries_ = nullptr;
  Counter* failures_ = nullptr;
  Gauge* capacity_gauge_ = nullptr;
  mutable Mutex mu_;
  bool down_ ABSL_GUARDED_BY(mu_) = false;
  int64_t retry_at_ns_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration backoff_ ABSL_GUARDED_BY(mu_) = config_.backoff_min;
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
};

// Each path's spraying weight now: 0 for a down path; the measured capacity
// once every up path has one, else the configured weight.
inline std::vector<double> SprayWeights(std::span<PathState* const> paths) {
  std::vector<double> w(paths.size(), 0);
  bool measured = true;
  for (size_t i = 0; i < paths.size(); ++i) {
    if (paths[i]->up() && paths[i]->capacity() <= 0) measured = false;
  }
  for (size_t i = 0; i < paths.size(); ++i) {
    if (!paths[i]->up()) continue;
    w[i] = measured ? paths[i]->capacity() : paths[i]->weight();
  }
  return w;
}

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_TCP_PATHS_H_
