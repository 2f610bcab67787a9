// Stable hashing: XXH3 (64- and 128-bit) through the system libxxhash.
//
// "Stable" means the value depends only on the bytes and the seed: identical
// in every process, on every machine and across releases of xxHash >= 0.8
// (XXH3's output is frozen since 0.8.0). Use it for anything that crosses a
// process boundary (block keys, checksums in frames and on disk). Do not use
// it for in-memory hash tables keyed by attacker-chosen data with seed 0;
// absl::Hash is randomized per process for that.
//
// Thread-safety: the free functions are pure. A StableHasher128 is a value
// with no shared state; one per thread.
#ifndef MOONCAKE_BASE_HASH_H_
#define MOONCAKE_BASE_HASH_H_

#define XXH_STATIC_LINKING_ONLY  // exposes XXH3_state_t for stack allocation
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "mooncake/base/assert.h"

namespace mooncake {

// A 128-bit hash value. `low` and `high` are the halves XXH3_128bits returns.
struct Hash128 {
  uint64_t low = 0;
  uint64_t high = 0;

  friend bool operator==(const Hash128&, const Hash128&) = default;
  friend auto operator<=>(const Hash128&, const Hash128&) = default;

  // Canonical hex form: 32 lowercase digits, high half first (the byte order
  // of XXH128_canonicalFromHash and `xxhsum -H2`).
  std::string ToHex() const {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out(32, '0');
    for (int i = 0; i < 16; ++i) {
      out[15 - i] = kDigits[(high >> (4 * i)) & 0xF];
      out[31 - i] = kDigits[(low >> (4 * i)) & 0xF];
    }
    return out;
  }

  template <typename H>
  friend H AbslHashValue(H h, const Hash128& v) {
    return H::combine(std::move(h), v.low, v.high);
  }
};

inline uint64_t StableHash64(const void* data, size_t size, uint64_t seed = 0) {
  MC_DASSERT(data != nullptr || size == 0, "null data with nonzero size");
  return XXH3_64bits_withSeed(data, size, seed);
}

inline uint64_t StableHash64(std::string_view bytes, uint64_t seed = 0) {
  return StableHash64(bytes.data(), bytes.size(), seed);
}

inline Hash128 StableHash128(const void* data, size_t size, uint64_t seed = 0) {
  MC_DASSERT(data != nullptr || size == 0, "null data with nonzero size");
  const XXH128_hash_t h = XXH3_128bits_withSeed(data, size, seed);
  return Hash128{h.low64, h.high64};
}

inline Hash128 StableHash128(std::string_view bytes, uint64_t seed = 0) {
  return StableHash128(bytes.data(), bytes.size(), seed);
}

// Streaming XXH3-128: Update() any number of times, then Digest(). The result
// equals StableHash128 of the concatenated bytes with the same seed. The
// state lives inline (no allocation); Reset() reuses it.
class StableHasher128 {
 public:
  explicit StableHasher128(uint64_t seed = 0) { Reset(seed); }

  StableHasher128(const StableHasher128&) = delete;
  StableHasher128& operator=(const StableHasher128&) = delete;

  void Reset(uint64_t seed = 0) {
    const XXH_errorcode rc = XXH3_128bits_reset_withSeed(&state_, seed);
    MC_ASSERT(rc == XXH_OK, "XXH3_128bits_reset_withSeed failed");
  }

  void Update(const void* data, size_t size) {
    MC_DASSERT(data != nullptr || size == 0, "null data with nonzero size");
    const XXH_errorcode rc = XXH3_128bits_update(&state_, data, size);
    MC_DASSERT(rc == XXH_OK, "XXH3_128bits_update failed");
    (void)rc;
  }

  void Update(std::string_view bytes) { Update(bytes.data(), bytes.size()); }

  // Appends `value` as 8 little-endian bytes, whatever the host byte order.
  void UpdateU64(uint64_t value) {
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(value >> (8 * i));
    Update(le, sizeof(le));
  }

  Hash128 Digest() const {
    const XXH128_hash_t h = XXH3_128bits_digest(&state_);
    return Hash128{h.low64, h.high64};
  }

 private:
  XXH3_state_t state_;
};

}  // namespace mooncake

#endif  // MOONCAKE_BASE_HASH_H_
