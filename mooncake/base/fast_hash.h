// FastStableHash64: StableHash64 with seed 0, bit for bit, at AVX-512 or AVX2 speed where
// the CPU has it. For checksums over large values (objects in the store, frame chunks).
//
// Debian's libxxhash is built for baseline x86-64 (SSE2): ~17 GB/s per core, i.e. ~60 us
// of CPU per MiB, paid by the client on every put and every verified get. xxHash's own
// AVX2 (~57 GB/s here) and AVX-512 (~85 GB/s) kernels ship in its header; this header
// compiles them inline under __attribute__((target(...))), the way xxHash's
// xxh_x86dispatch.c does, and selects the widest the CPU has at run time (AVX-512 first,
// as that dispatcher does). Inputs of <= 240 bytes, other CPUs and other xxHash versions
// (whose internals differ) use the library. hash_test.cc checks every kernel the machine
// has against StableHash64 on every length class.
//
// Include order: hash.h first, so its inline functions bind to the library in every
// translation unit; re-including xxhash.h with XXH_INLINE_ALL then adds static copies
// under XXH_INLINE_* names (and, from here on in the translation unit, XXH3_* names
// resolve to those copies: same algorithm, same results).
#ifndef MOONCAKE_BASE_FAST_HASH_H_
#define MOONCAKE_BASE_FAST_HASH_H_

#include <cstddef>
#include <cstdint>

#include "mooncake/base/hash.h"

#if defined(__x86_64__) && XXH_VERSION_NUMBER == 801 && !defined(XXH_INLINE_ALL_31684351384)
#include "mooncake/base/x86_intrinsics.h"
#define XXH_INLINE_ALL
#define XXH_DISPATCH_AVX2 1
#define XXH_DISPATCH_AVX512 1
#define XXH_TARGET_AVX2 __attribute__((__target__("avx2")))
#define XXH_TARGET_AVX512 __attribute__((__target__("avx512f")))
// The AVX-512 kernels use aligned 64-byte accesses to the accumulators.
#define XXH_ACC_ALIGN 64
#include <xxhash.h>
#define MOONCAKE_BASE_XXH3_AVX2 1
#endif

namespace mooncake {
namespace hash_internal {

#if defined(MOONCAKE_BASE_XXH3_AVX2)
inline bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

inline bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

// XXH3-64, seed 0, for len > XXH3_MIDSIZE_MAX (the "long" path).
__attribute__((target("avx2"))) inline uint64_t Xxh3LongAvx2(const void* data, size_t len) {
  const uint64_t h = XXH3_hashLong_64b_internal(data, len, XXH3_kSecret, sizeof(XXH3_kSecret),
                                                XXH3_accumulate_512_avx2, XXH3_scrambleAcc_avx2);
  _mm256_zeroupper();  // later SSE code would otherwise pay for the dirty upper halves
  return h;
}

__attribute__((target("avx512f"))) inline uint64_t Xxh3LongAvx512(const void* data, size_t len) {
  const uint64_t h =
      XXH3_hashLong_64b_internal(data, len, XXH3_kSecret, sizeof(XXH3_kSecret),
                                 XXH3_accumulate_512_avx512, XXH3_scrambleAcc_avx512);
  _mm256_zeroupper();
  return h;
}

// Streaming: xxHash's own update loop over the AVX2 kernels (what its
// XXH3_64bits_update does with the baseline ones). The state stays
// interchangeable with the baseline update and digest.
__attribute__((target("avx2"))) inline void Xxh3UpdateAvx2(XXH3_state_t* state, const void* data,
                                                           size_t len) {
  (void)XXH3_update(state, static_cast<const xxh_u8*>(data), len, XXH3_accumulate_512_avx2,
                    XXH3_scrambleAcc_avx2);
  _mm256_zeroupper();
}

__attribute__((target("avx512f"))) inline void Xxh3UpdateAvx512(XXH3_state_t* state,
                                                                const void* data, size_t len) {
  (void)XXH3_update(state, static_cast<const xxh_u8*>(data), len, XXH3_accumulate_512_avx512,
                    XXH3_scrambleAcc_avx512);
  _mm256_zeroupper();
}
#endif

}  // namespace hash_internal

// == StableHash64(data, len) (seed 0).
inline uint64_t FastStableHash64(const void* data, size_t len) {
#if defined(MOONCAKE_BASE_XXH3_AVX2)
  if (len > XXH3_MIDSIZE_MAX) {
    if (hash_internal::HasAvx512()) return hash_internal::Xxh3LongAvx512(data, len);
    if (hash_internal::HasAvx2()) return hash_internal::Xxh3LongAvx2(data, len);
  }
#endif
  return StableHash64(data, len);
}

// FastStableHash64 in pieces: Digest() == StableHash64 of the concatenation
// of every Update so far, however the bytes were split. For checksums over
// data that arrives in parts (the SSD tier's record payloads).
class FastStableHasher64 {
 public:
  FastStableHasher64() { Reset(); }

  void Reset() { (void)XXH3_64bits_reset(&state_); }

  void Update(const void* data, size_t len) {
#if defined(MOONCAKE_BASE_XXH3_AVX2)
    if (hash_internal::HasAvx512()) {
      hash_internal::Xxh3UpdateAvx512(&state_, data, len);
      return;
    }
    if (hash_internal::HasAvx2()) {
      hash_internal::Xxh3UpdateAvx2(&state_, data, len);
      return;
    }
#endif
    (void)XXH3_64bits_update(&state_, data, len);
  }

  uint64_t Digest() const { return XXH3_64bits_digest(&state_); }

 private:
  XXH3_state_t state_;
};

// Whether FastStableHash64 uses vector kernels (AVX2 or AVX-512) on this machine.
inline bool FastStableHash64UsesAvx2() {
#if defined(MOONCAKE_BASE_XXH3_AVX2)
  return hash_internal::HasAvx2() || hash_internal::HasAvx512();
#else
  return false;
#endif
}

// The kernel FastStableHash64 uses here: "avx512", "avx2" or "baseline" (benchmarks).
inline const char* FastStableHash64Kernel() {
#if defined(MOONCAKE_BASE_XXH3_AVX2)
  if (hash_internal::HasAvx512()) return "avx512";
  if (hash_internal::HasAvx2()) return "avx2";
#endif
  return "baseline";
}

}  // namespace mooncake

#endif  // MOONCAKE_BASE_FAST_HASH_H_
