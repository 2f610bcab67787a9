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
// CopyAndStableHash64 copies and hashes in one pass (our own loop over XXH3's accumulate
// and scramble steps, xxHash's XXH3_mergeAccs at the end), for reads out of memory whose
// copy must be checksummed: the SHM and local transports' CopyAndDigest.
//
// Include order: hash.h first, so its inline functions bind to the library in every
// translation unit; re-including xxhash.h with XXH_INLINE_ALL then adds static copies
// under XXH_INLINE_* names (and, from here on in the translation unit, XXH3_* names
// resolve to those copies: same algorithm, same results).
#ifndef MOONCAKE_BASE_FAST_HASH_H_
#define MOONCAKE_BASE_FAST_HASH_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

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

// Copy and hash in one pass. A copy out of memory (an SHM segment, a cold
// value) leaves the core waiting on loads, and XXH3 is compute; done one after
// the other (memcpy, then hash the copy while it is in cache) they add up, but
// in one loop the hash's arithmetic runs in the shadow of the loads: each
// 64-byte stripe is loaded once, stored to dst, and accumulated from the
// register. The stripe, block and last-stripe order is XXH3's long path
// (xxhash.h, XXH3_hashLong_internal_loop): 16 stripes per 1 KiB block, the
// scramble after each full block, the last partial block, then the final
// stripe, always the input's last 64 bytes, at secret offset 192 - 64 - 7.
// That last stripe overlaps bytes already hashed; it is read back from dst, so
// the result is the hash of what dst holds even if src changes meanwhile.
// Requires len > XXH3_MIDSIZE_MAX (240) and no overlap of dst and src.
//
// The loads run kCopyPrefetchBytes ahead of themselves with a software
// prefetch (it does not fault past the end of src): 1 MiB copies from a 1 GiB
// region on two threads, digested at memcpy's own rate with it, ~7% under
// without it (docs/EVALUATION.md, "base").
inline constexpr size_t kCopyPrefetchBytes = 2048;
inline constexpr size_t kXxh3StripeBytes = 64;
inline constexpr size_t kXxh3StripesPerBlock = 16;  // (sizeof(XXH3_kSecret) - 64) / 8
inline constexpr size_t kXxh3BlockBytes = kXxh3StripeBytes * kXxh3StripesPerBlock;
static_assert(sizeof(XXH3_kSecret) == 192, "XXH3's default secret");
// Where in the secret the scramble key and the final stripe's key start.
inline constexpr size_t kXxh3ScrambleKeyOffset = sizeof(XXH3_kSecret) - kXxh3StripeBytes;
inline constexpr size_t kXxh3LastStripeKeyOffset =
    kXxh3ScrambleKeyOffset - XXH_SECRET_LASTACC_START;

// One XXH3 accumulate step over the stripe `d` (lanes in acc[i ^ 1] += d[i],
// acc[i] += lo32(d[i] ^ key[i]) * hi32(d[i] ^ key[i])).
__attribute__((target("avx512f"))) inline __m512i Xxh3Accumulate512(__m512i acc, __m512i d,
                                                                    const void* key) {
  const __m512i dk = _mm512_xor_si512(d, _mm512_loadu_si512(key));
  const __m512i product = _mm512_mul_epu32(dk, _mm512_srli_epi64(dk, 32));
  const __m512i swapped =
      _mm512_shuffle_epi32(d, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(1, 0, 3, 2)));
  return _mm512_add_epi64(product, _mm512_add_epi64(acc, swapped));
}

// XXH3's scramble: acc = (acc ^ (acc >> 47) ^ key) * PRIME32_1 (mod 2^64).
__attribute__((target("avx512f"))) inline __m512i Xxh3Scramble512(__m512i acc, const void* key) {
  const __m512i prime = _mm512_set1_epi32(static_cast<int>(XXH_PRIME32_1));
  __m512i a = _mm512_xor_si512(acc, _mm512_srli_epi64(acc, 47));
  a = _mm512_xor_si512(a, _mm512_loadu_si512(key));
  const __m512i lo = _mm512_mul_epu32(a, prime);
  const __m512i hi = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), prime);
  return _mm512_add_epi64(lo, _mm512_slli_epi64(hi, 32));
}

__attribute__((target("avx2"))) inline __m256i Xxh3Accumulate256(__m256i acc, __m256i d,
                                                                 const void* key) {
  const __m256i dk = _mm256_xor_si256(d, _mm256_loadu_si256(static_cast<const __m256i*>(key)));
  const __m256i product = _mm256_mul_epu32(dk, _mm256_srli_epi64(dk, 32));
  const __m256i swapped = _mm256_shuffle_epi32(d, _MM_SHUFFLE(1, 0, 3, 2));
  return _mm256_add_epi64(product, _mm256_add_epi64(acc, swapped));
}

__attribute__((target("avx2"))) inline __m256i Xxh3Scramble256(__m256i acc, const void* key) {
  const __m256i prime = _mm256_set1_epi32(static_cast<int>(XXH_PRIME32_1));
  __m256i a = _mm256_xor_si256(acc, _mm256_srli_epi64(acc, 47));
  a = _mm256_xor_si256(a, _mm256_loadu_si256(static_cast<const __m256i*>(key)));
  const __m256i lo = _mm256_mul_epu32(a, prime);
  const __m256i hi = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), prime);
  return _mm256_add_epi64(lo, _mm256_slli_epi64(hi, 32));
}

// The line kCopyPrefetchBytes ahead of `src`, computed as an integer: it may lie
// past the end of src (a prefetch never faults), so no pointer is formed there.
inline void Prefetch(const unsigned char* src) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(src) + kCopyPrefetchBytes),
               _MM_HINT_T0);
}

// Makes `v` opaque to the optimizer, so the stripe stored to dst and the stripe
// hashed are one load: without it the compiler may fold a second load of src
// into the arithmetic (GCC does so for loads of private memory), and a src that
// changes meanwhile would be hashed as other bytes than dst holds.
__attribute__((target("avx512f"))) inline void PinRegister(__m512i& v) {
  asm volatile("" : "+v"(v));
}

__attribute__((target("avx2"))) inline void PinRegister(__m256i& v) { asm volatile("" : "+x"(v)); }

// One stripe: prefetch ahead, load once, store to dst, accumulate from the
// register.
__attribute__((target("avx512f"))) inline __m512i CopyAccumulate512(__m512i acc, unsigned char* dst,
                                                                    const unsigned char* src,
                                                                    const unsigned char* key) {
  Prefetch(src);
  __m512i d = _mm512_loadu_si512(src);
  PinRegister(d);
  _mm512_storeu_si512(dst, d);
  return Xxh3Accumulate512(acc, d, key);
}

__attribute__((target("avx2"))) inline void CopyAccumulate256(__m256i& acc_lo, __m256i& acc_hi,
                                                              unsigned char* dst,
                                                              const unsigned char* src,
                                                              const unsigned char* key) {
  Prefetch(src);
  __m256i d0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  __m256i d1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32));
  PinRegister(d0);
  PinRegister(d1);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), d0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32), d1);
  acc_lo = Xxh3Accumulate256(acc_lo, d0, key);
  acc_hi = Xxh3Accumulate256(acc_hi, d1, key + 32);
}

// XXH3's initial accumulators (XXH3_INIT_ACC).
alignas(64) inline constexpr uint64_t kXxh3InitAcc[8] = {
    XXH_PRIME32_3, XXH_PRIME64_1, XXH_PRIME64_2, XXH_PRIME64_3,
    XXH_PRIME64_4, XXH_PRIME32_2, XXH_PRIME64_5, XXH_PRIME32_1};

__attribute__((target("avx512f"))) inline uint64_t CopyXxh3LongAvx512(void* dst_v,
                                                                      const void* src_v,
                                                                      size_t len) {
  auto* dst = static_cast<unsigned char*>(dst_v);
  const auto* src = static_cast<const unsigned char*>(src_v);
  const auto* secret = reinterpret_cast<const unsigned char*>(XXH3_kSecret);
  __m512i acc = _mm512_load_si512(kXxh3InitAcc);
  const size_t blocks = (len - 1) / kXxh3BlockBytes;
  size_t off = 0;
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t s = 0; s < kXxh3StripesPerBlock; ++s, off += kXxh3StripeBytes) {
      acc = CopyAccumulate512(acc, dst + off, src + off, secret + 8 * s);
    }
    acc = Xxh3Scramble512(acc, secret + kXxh3ScrambleKeyOffset);
  }
  const size_t stripes = ((len - 1) - kXxh3BlockBytes * blocks) / kXxh3StripeBytes;
  for (size_t s = 0; s < stripes; ++s, off += kXxh3StripeBytes) {
    acc = CopyAccumulate512(acc, dst + off, src + off, secret + 8 * s);
  }
  std::memcpy(dst + off, src + off, len - off);  // 1-64 bytes
  acc = Xxh3Accumulate512(acc, _mm512_loadu_si512(dst + len - kXxh3StripeBytes),
                          secret + kXxh3LastStripeKeyOffset);
  alignas(64) uint64_t out[8];
  _mm512_store_si512(out, acc);
  _mm256_zeroupper();
  return XXH3_mergeAccs(out, secret + XXH_SECRET_MERGEACCS_START,
                        static_cast<uint64_t>(len) * XXH_PRIME64_1);
}

__attribute__((target("avx2"))) inline uint64_t CopyXxh3LongAvx2(void* dst_v, const void* src_v,
                                                                 size_t len) {
  auto* dst = static_cast<unsigned char*>(dst_v);
  const auto* src = static_cast<const unsigned char*>(src_v);
  const auto* secret = reinterpret_cast<const unsigned char*>(XXH3_kSecret);
  __m256i acc_lo = _mm256_load_si256(reinterpret_cast<const __m256i*>(kXxh3InitAcc));
  __m256i acc_hi = _mm256_load_si256(reinterpret_cast<const __m256i*>(kXxh3InitAcc + 4));
  const size_t blocks = (len - 1) / kXxh3BlockBytes;
  size_t off = 0;
  const unsigned char* scramble_key = secret + kXxh3ScrambleKeyOffset;
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t s = 0; s < kXxh3StripesPerBlock; ++s, off += kXxh3StripeBytes) {
      CopyAccumulate256(acc_lo, acc_hi, dst + off, src + off, secret + 8 * s);
    }
    acc_lo = Xxh3Scramble256(acc_lo, scramble_key);
    acc_hi = Xxh3Scramble256(acc_hi, scramble_key + 32);
  }
  const size_t stripes = ((len - 1) - kXxh3BlockBytes * blocks) / kXxh3StripeBytes;
  for (size_t s = 0; s < stripes; ++s, off += kXxh3StripeBytes) {
    CopyAccumulate256(acc_lo, acc_hi, dst + off, src + off, secret + 8 * s);
  }
  std::memcpy(dst + off, src + off, len - off);  // 1-64 bytes
  const unsigned char* last = dst + len - kXxh3StripeBytes;
  const unsigned char* last_key = secret + kXxh3LastStripeKeyOffset;
  acc_lo = Xxh3Accumulate256(acc_lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(last)),
                             last_key);
  acc_hi = Xxh3Accumulate256(
      acc_hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(last + 32)), last_key + 32);
  alignas(32) uint64_t out[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), acc_lo);
  _mm256_store_si256(reinterpret_cast<__m256i*>(out + 4), acc_hi);
  _mm256_zeroupper();
  return XXH3_mergeAccs(out, secret + XXH_SECRET_MERGEACCS_START,
                        static_cast<uint64_t>(len) * XXH_PRIME64_1);
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

// std::memcpy(dst, src, len), then FastStableHash64(dst, len): the hash of the
// bytes dst now holds. With AVX-512 or AVX2 and len > 240 in one pass over the
// bytes (hash_internal::CopyXxh3Long*), otherwise the two calls. dst and src
// must not overlap.
inline uint64_t CopyAndStableHash64(void* dst, const void* src, size_t len) {
#if defined(MOONCAKE_BASE_XXH3_AVX2)
  if (len > XXH3_MIDSIZE_MAX) {
    if (hash_internal::HasAvx512()) return hash_internal::CopyXxh3LongAvx512(dst, src, len);
    if (hash_internal::HasAvx2()) return hash_internal::CopyXxh3LongAvx2(dst, src, len);
  }
#endif
  if (len > 0) std::memcpy(dst, src, len);
  return FastStableHash64(dst, len);
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
