// ValuePool: the values the benchmark puts, and the check of what gets return.
//
// A value of `size` bytes for key `k` is the slice of one random pool that
// starts at an offset derived from StableHash64(k), so values differ per key
// without being generated per put (puts hand the pool's bytes straight to
// the client), and a get can be checked without storing anything per key:
//   - the length must be `size`;
//   - sampled: the first and last 64 bytes and two 64-byte windows at
//     positions that change per call must equal the pool's (catches a wrong
//     key, a truncated, shifted or unfilled value at ~1 us per check);
//   - full: every byte (tests; --verify=full).
// Two keys share an offset with probability 64 / kSpreadBytes (1 in 65536).
//
// The pool is random bytes (ValueData::kRandom: no system can compress it), or
// synthetic bf16 KV activations (kBf16Kv, compress/synthetic_kv.h: what a
// KV-cache store holds, and what the store's SSD tier compresses). Offsets are
// multiples of 64 bytes, so every value starts on a bf16 element.
//
// Thread-safety: immutable after construction; Verify may run concurrently.
#ifndef MOONCAKE_TOOLS_BENCH_VALUE_POOL_H_
#define MOONCAKE_TOOLS_BENCH_VALUE_POOL_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/hash.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/compress/synthetic_kv.h"

namespace mooncake::bench {

enum class VerifyMode { kSampled, kFull };
enum class ValueData { kRandom, kBf16Kv };

class ValuePool {
 public:
  static constexpr size_t kSpreadBytes = size_t{4} << 20;
  static constexpr size_t kWindowBytes = 64;

  explicit ValuePool(size_t max_value_bytes, ValueData data = ValueData::kRandom)
      : max_value_bytes_(max_value_bytes), data_(data) {
    MC_ASSERT(max_value_bytes > 0, "empty values");
    if (data == ValueData::kBf16Kv) {
      const std::vector<std::byte> kv =
          compress::SyntheticKvBytes(max_value_bytes + kSpreadBytes, compress::DType::kBFloat16);
      bytes_.resize(kv.size());
      std::memcpy(bytes_.data(), kv.data(), kv.size());
      return;
    }
    bytes_.resize(max_value_bytes + kSpreadBytes);
    uint64_t x = 0x9E3779B97F4A7C15ULL;  // xorshift64*: fast and fixed across runs
    for (size_t i = 0; i + 8 <= bytes_.size(); i += 8) {
      x ^= x >> 12;
      x ^= x << 25;
      x ^= x >> 27;
      const uint64_t v = x * 0x2545F4914F6CDD1DULL;
      std::memcpy(bytes_.data() + i, &v, 8);
    }
  }

  size_t max_value_bytes() const { return max_value_bytes_; }
  ValueData data() const { return data_; }

  // The value stored under `key`. REQUIRES: size <= max_value_bytes().
  std::string_view Value(std::string_view key, size_t size) const {
    MC_ASSERT(size <= max_value_bytes_, "value larger than the pool");
    return std::string_view(bytes_.data() + Offset(key), size);
  }

  // DATA_LOSS naming the key and what differs. `salt` picks the sampled
  // windows (pass a counter so successive checks look at different bytes).
  absl::Status Verify(std::string_view key, size_t size, std::string_view got, VerifyMode mode,
                      uint64_t salt = 0) const {
    if (got.size() != size) {
      return absl::DataLossError(
          absl::StrCat("value of ", AbslView(key), ": ", got.size(), " bytes, expected ", size));
    }
    const std::string_view want = Value(key, size);
    if (mode == VerifyMode::kFull) return Compare(key, want, got, 0, size);
    const size_t w = std::min(kWindowBytes, size);
    RETURN_IF_ERROR(Compare(key, want, got, 0, w));
    RETURN_IF_ERROR(Compare(key, want, got, size - w, w));
    for (uint64_t i = 0; i < 2; ++i) {
      const size_t at = StableHash64(&salt, sizeof(salt), i) % (size - w + 1);
      RETURN_IF_ERROR(Compare(key, want, got, at, w));
    }
    return absl::OkStatus();
  }

 private:
  static size_t Offset(std::string_view key) {
    return (StableHash64(key) % (kSpreadBytes / kWindowBytes)) * kWindowBytes;
  }

  static absl::Status Compare(std::string_view key, std::string_view want, std::string_view got,
                              size_t at, size_t n) {
    if (std::memcmp(want.data() + at, got.data() + at, n) == 0) return absl::OkStatus();
    size_t i = at;
    while (want[i] == got[i]) ++i;
    return absl::DataLossError(
        absl::StrCat("value of ", AbslView(key), " differs at byte ", i, " of ", want.size()));
  }

  size_t max_value_bytes_;
  ValueData data_;
  std::vector<char> bytes_;
};

}  // namespace mooncake::bench

#endif  // MOONCAKE_TOOLS_BENCH_VALUE_POOL_H_
