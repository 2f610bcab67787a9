// The per-chunk checksum, XXH3-64 with seed 0 (docs/frame_format.md), at AVX2 speed
// where the CPU has it.
//
// Debian's libxxhash is built for baseline x86-64 (SSE2): ~17 GB/s per core, which is
// ~18% of a 64 KiB chunk's decode time at 3 GB/s. xxHash's own AVX2 kernels (~50 GB/s)
// ship in its header; this compiles them inline under __attribute__((target("avx2"))),
// the way xxHash's xxh_x86dispatch.c does, and selects them at run time. The result is
// bit-identical to StableHash64 (checked by checksum_test.cc on every length class).
// Inputs of <= 240 bytes and other xxHash versions (whose internals differ) use the
// library.
#ifndef MOONCAKE_COMPRESS_INTERNAL_CHECKSUM_H_
#define MOONCAKE_COMPRESS_INTERNAL_CHECKSUM_H_

#include <cstddef>
#include <cstdint>

// hash.h first, so its inline functions bind to the library in every translation unit.
#include "mooncake/base/hash.h"

#if defined(__x86_64__) && XXH_VERSION_NUMBER == 801 && !defined(XXH_INLINE_ALL_31684351384)
#include <immintrin.h>
// Re-including xxhash.h with XXH_INLINE_ALL adds static copies under XXH_INLINE_* names.
#define XXH_INLINE_ALL
#define XXH_DISPATCH_AVX2 1
#define XXH_TARGET_AVX2 __attribute__((__target__("avx2")))
// The AVX2 kernels use aligned 32-byte accesses to the accumulators.
#define XXH_ACC_ALIGN 32
#include <xxhash.h>
#define MOONCAKE_COMPRESS_XXH3_AVX2 1
#endif

namespace mooncake::compress_internal {

#if defined(MOONCAKE_COMPRESS_XXH3_AVX2)
inline bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

// XXH3-64, seed 0, for len > XXH3_MIDSIZE_MAX (the "long" path).
__attribute__((target("avx2"))) inline uint64_t Xxh3LongAvx2(const void* data, size_t len) {
  const uint64_t h = XXH3_hashLong_64b_internal(data, len, XXH3_kSecret, sizeof(XXH3_kSecret),
                                                XXH3_accumulate_512_avx2, XXH3_scrambleAcc_avx2);
  _mm256_zeroupper();  // later SSE code would otherwise pay for the dirty upper halves
  return h;
}
#endif

// XXH3-64 (seed 0) of data[0, len): what the frame stores for each chunk.
inline uint64_t ChunkChecksum(const void* data, size_t len) {
#if defined(MOONCAKE_COMPRESS_XXH3_AVX2)
  if (len > XXH3_MIDSIZE_MAX && HasAvx2()) return Xxh3LongAvx2(data, len);
#endif
  return StableHash64(data, len);
}

// Whether ChunkChecksum uses the AVX2 kernels on this machine (for benchmarks and tests).
inline bool ChunkChecksumUsesAvx2() {
#if defined(MOONCAKE_COMPRESS_XXH3_AVX2)
  return HasAvx2();
#else
  return false;
#endif
}

}  // namespace mooncake::compress_internal

#endif  // MOONCAKE_COMPRESS_INTERNAL_CHECKSUM_H_
