// LatencyHistogram: a fixed-size, mergeable, log-linear histogram of uint64
// values (usually nanoseconds; the unit is the caller's).
//
// Layout (HdrHistogram-style with 7 significant bits):
//   values 0..127 each get their own bucket (exact);
//   every power-of-two range [2^e, 2^(e+1)), e >= 7, is cut into 64 equal
//   buckets of width 2^(e-6).
// That is 128 + 57 * 64 = 3776 buckets (30 KiB of counters) covering all of
// uint64. A quantile is reported as the midpoint of its bucket, clamped to
// the observed [min, max], so its relative error is at most 2^-7 (0.79%) of
// the true order statistic (kRelativeError), and zero below 128.
//
// Quantile definition: for q in [0, 1], the value of rank ceil(q * count)
// (at least 1) in sorted order, i.e. the "nearest rank" method.
//
// Thread-safety: Record(), Merge() and every reader may run concurrently from
// any threads. Counters are relaxed atomics, so a reader racing writers sees
// each counter at some recent value; totals are exact once writers stop.
// Complexity: Record O(1); Quantile O(buckets); Merge O(buckets).
#ifndef MOONCAKE_BASE_HISTOGRAM_H_
#define MOONCAKE_BASE_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "mooncake/base/assert.h"

namespace mooncake {

class LatencyHistogram {
 public:
  static constexpr int kSubBucketBits = 7;
  static constexpr uint64_t kExactLimit = uint64_t{1} << kSubBucketBits;  // 128
  static constexpr uint64_t kBucketsPerOctave = kExactLimit / 2;          // 64
  static constexpr size_t kBucketCount = kExactLimit + (64 - kSubBucketBits) * kBucketsPerOctave;
  static constexpr double kRelativeError = 1.0 / kExactLimit;

  LatencyHistogram() { Reset(); }

  LatencyHistogram(const LatencyHistogram&) = delete;
  LatencyHistogram& operator=(const LatencyHistogram&) = delete;

  void Record(uint64_t value) { RecordN(value, 1); }

  // Records `value` `n` times.
  void RecordN(uint64_t value, uint64_t n) {
    if (n == 0) return;
    // relaxed everywhere: each counter is independent; readers need no
    // ordering between them (documented above).
    buckets_[BucketIndex(value)].fetch_add(n, std::memory_order_relaxed);
    count_.fetch_add(n, std::memory_order_relaxed);
    sum_.fetch_add(value * n, std::memory_order_relaxed);
    UpdateMin(value);
    UpdateMax(value);
  }

  // Adds every value recorded in `other` to this histogram.
  void Merge(const LatencyHistogram& other) {
    MC_DASSERT(&other != this, "merging a histogram into itself");
    for (size_t i = 0; i < kBucketCount; ++i) {
      const uint64_t n = other.buckets_[i].load(std::memory_order_relaxed);
      if (n != 0) buckets_[i].fetch_add(n, std::memory_order_relaxed);
    }
    const uint64_t n = other.count_.load(std::memory_order_relaxed);
    if (n == 0) return;
    count_.fetch_add(n, std::memory_order_relaxed);
    sum_.fetch_add(other.sum_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    UpdateMin(other.min_.load(std::memory_order_relaxed));
    UpdateMax(other.max_.load(std::memory_order_relaxed));
  }

  // Not atomic with respect to concurrent Record() calls.
  void Reset() {
    for (auto& b : buckets_) b.store(0, std::memory_order_relaxed);
    count_.store(0, std::memory_order_relaxed);
    sum_.store(0, std::memory_order_relaxed);
    min_.store(std::numeric_limits<uint64_t>::max(), std::memory_order_relaxed);
    max_.store(0, std::memory_order_relaxed);
  }

  uint64_t Count() const { return count_.load(std::memory_order_relaxed); }
  // Wraps modulo 2^64 if the recorded values sum past it.
  uint64_t Sum() const { return sum_.load(std::memory_order_relaxed); }
  // 0 when empty.
  uint64_t Min() const { return Count() == 0 ? 0 : min_.load(std::memory_order_relaxed); }
  uint64_t Max() const { return max_.load(std::memory_order_relaxed); }
  double Mean() const {
    const uint64_t n = Count();
    return n == 0 ? 0.0 : static_cast<double>(Sum()) / static_cast<double>(n);
  }

  // The nearest-rank q-quantile (see the file comment); 0 when empty.
  // REQUIRES: 0 <= q <= 1.
  uint64_t Quantile(double q) const {
    MC_ASSERT(q >= 0.0 && q <= 1.0, "quantile outside [0, 1]");
    const uint64_t n = Count();
    if (n == 0) return 0;
    uint64_t rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(n)));
    if (rank == 0) rank = 1;
    if (rank > n) rank = n;
    uint64_t seen = 0;
    for (size_t i = 0; i < kBucketCount; ++i) {
      seen += buckets_[i].load(std::memory_order_relaxed);
      if (seen >= rank) return Clamp(BucketMidpoint(i));
    }
    return Max();  // only reachable while racing writers
  }

  // Cumulative counts, in one pass: out[k] = observations in the buckets that lie wholly
  // at or below bounds[k], i.e. the values <= bounds[k] less at most the one bucket that
  // straddles it (values within the relative error of the bound; exact below 128).
  // REQUIRES: bounds increasing; out.size() == bounds.size().
  void CountsAtOrBelow(std::span<const uint64_t> bounds, std::span<uint64_t> out) const {
    MC_ASSERT(out.size() == bounds.size(), "one count per bound");
    size_t k = 0;
    uint64_t n = 0;
    for (size_t i = 0; i < kBucketCount && k < bounds.size(); ++i) {
      const uint64_t top = BucketLowerBound(i) + (BucketWidth(i) - 1);
      while (k < bounds.size() && top > bounds[k]) out[k++] = n;
      n += buckets_[i].load(std::memory_order_relaxed);
    }
    while (k < bounds.size()) out[k++] = n;
  }

  uint64_t P50() const { return Quantile(0.50); }
  uint64_t P90() const { return Quantile(0.90); }
  uint64_t P99() const { return Quantile(0.99); }
  uint64_t P999() const { return Quantile(0.999); }

  // Bucket geometry, exposed for tests and for exporters.
  static constexpr size_t BucketIndex(uint64_t value) {
    if (value < kExactLimit) return static_cast<size_t>(value);
    const int e = std::bit_width(value) - 1;  // floor(log2(value)) >= 7
    const int shift = e - kSubBucketBits + 1;
    const uint64_t sub = (value >> shift) - kBucketsPerOctave;  // 0..63
    return static_cast<size_t>(kExactLimit +
                               static_cast<uint64_t>(e - kSubBucketBits) * kBucketsPerOctave + sub);
  }
  static constexpr uint64_t BucketLowerBound(size_t index) {
    if (index < kExactLimit) return index;
    const uint64_t group = (index - kExactLimit) / kBucketsPerOctave;
    const uint64_t sub = (index - kExactLimit) % kBucketsPerOctave;
    const int shift = static_cast<int>(group) + 1;
    return (kBucketsPerOctave + sub) << shift;
  }
  static constexpr uint64_t BucketWidth(size_t index) {
    if (index < kExactLimit) return 1;
    return uint64_t{1} << ((index - kExactLimit) / kBucketsPerOctave + 1);
  }
  static constexpr uint64_t BucketMidpoint(size_t index) {
    return BucketLowerBound(index) + (BucketWidth(index) - 1) / 2;
  }

 private:
  uint64_t Clamp(uint64_t v) const {
    const uint64_t lo = Min();
    const uint64_t hi = Max();
    return v < lo ? lo : (v > hi ? hi : v);
  }
  void UpdateMin(uint64_t v) {
    uint64_t cur = min_.load(std::memory_order_relaxed);
    while (v < cur && !min_.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
    }
  }
  void UpdateMax(uint64_t v) {
    uint64_t cur = max_.load(std::memory_order_relaxed);
    while (v > cur && !max_.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
    }
  }

  std::array<std::atomic<uint64_t>, kBucketCount> buckets_;
  std::atomic<uint64_t> count_;
  std::atomic<uint64_t> sum_;
  std::atomic<uint64_t> min_;
  std::atomic<uint64_t> max_;
};

}  // namespace mooncake

#endif  // MOONCAKE_BASE_HISTOGRAM_H_
