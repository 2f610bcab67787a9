// GapHistogram: a log-scale histogram of reuse gaps (in a policy's clock
// units) that answers "what is a typical gap" as a quantile. Buckets are half
// powers of two, so a quantile is known within a factor of sqrt(2); counts
// are halved when they reach kHalveAt, so old traffic fades (the answer
// follows a workload that changes).
//
// Thread-safety: none; owned by one policy.
// Invariant: total_ == sum(counts_).
#ifndef MOONCAKE_INDEX_INTERNAL_GAP_HISTOGRAM_H_
#define MOONCAKE_INDEX_INTERNAL_GAP_HISTOGRAM_H_

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

#include "mooncake/base/assert.h"

namespace mooncake::index_internal {

class GapHistogram {
 public:
  static constexpr int kBuckets = 128;  // half-octaves: up to 2^64
  static constexpr uint64_t kHalveAt = uint64_t{1} << 16;

  void Record(uint64_t gap) {
    ++counts_[Bucket(gap)];
    if (++total_ >= kHalveAt) Halve();
  }

  uint64_t total() const { return total_; }

  // The upper edge of the bucket holding the q-quantile. REQUIRES: total() > 0.
  double Quantile(double q) const {
    MC_ASSERT(total_ > 0, "quantile of an empty histogram");
    MC_DASSERT(q >= 0.0 && q <= 1.0, "quantile out of [0, 1]");
    const double want = q * static_cast<double>(total_);
    uint64_t seen = 0;
    for (int b = 0; b < kBuckets; ++b) {
      seen += counts_[b];
      if (static_cast<double>(seen) >= want && seen > 0) return UpperEdge(b);
    }
    return UpperEdge(kBuckets - 1);
  }

  // Bucket b holds gaps in [2^(b/2), 2^((b+1)/2)); gaps 0 and 1 go to 0.
  static int Bucket(uint64_t gap) {
    if (gap <= 1) return 0;
    const int octave = std::bit_width(gap) - 1;  // 2^octave <= gap
    const double top = std::ldexp(1.0, octave) * std::sqrt(2.0);
    const int b = 2 * octave + (static_cast<double>(gap) >= top ? 1 : 0);
    MC_DASSERT(b >= 0 && b < kBuckets, "gap bucket out of range");
    return b;
  }

  static double UpperEdge(int b) { return std::exp2(0.5 * (b + 1)); }

 private:
  void Halve() {
    total_ = 0;
    for (uint64_t& c : counts_) {
      c /= 2;
      total_ += c;
    }
  }

  std::array<uint64_t, kBuckets> counts_{};
  uint64_t total_ = 0;
};

}  // namespace mooncake::index_internal

#endif  // MOONCAKE_INDEX_INTERNAL_GAP_HISTOGRAM_H_
