// Merging two byte planes and computing the chunk checksum in one pass.
//
// A bf16/fp16 chunk's decode ends with a merge of its two planes into the output and an
// XXH3 pass over that output. For a 64 KiB chunk the second pass re-reads the output
// from L2; here the merge writes one 1 KiB XXH3 block at a time and the block's 16
// stripes are accumulated while they are still in L1. The result is bit-identical to
// ChunkChecksum of the merged bytes (xxHash 0.8.1's long-input loop, reproduced block by
// block with its own kernels; checked by merge_checksum_test.cc on every length class).
#ifndef MOONCAKE_COMPRESS_INTERNAL_MERGE_CHECKSUM_H_
#define MOONCAKE_COMPRESS_INTERNAL_MERGE_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mooncake/base/assert.h"
#include "mooncake/compress/internal/byte_planes.h"
#include "mooncake/compress/internal/checksum.h"

namespace mooncake::compress_internal {

#if defined(MOONCAKE_COMPRESS_XXH3_AVX2)
// REQUIRES: 2 * n + tail_bytes > XXH3_MIDSIZE_MAX, tail_bytes <= 1, HasAvx2().
__attribute__((target("avx2"))) inline uint64_t Merge2ChecksumAvx2(const uint8_t* lo,
                                                                   const uint8_t* hi, size_t n,
                                                                   const uint8_t* tail,
                                                                   size_t tail_bytes,
                                                                   uint8_t* dst) {
  constexpr size_t kStripe = XXH_STRIPE_LEN;  // 64
  constexpr size_t kStripesPerBlock = (sizeof(XXH3_kSecret) - kStripe) / XXH_SECRET_CONSUME_RATE;
  constexpr size_t kBlock = kStripe * kStripesPerBlock;  // 1024
  const size_t len = 2 * n + tail_bytes;
  const size_t blocks = (len - 1) / kBlock;  // whole blocks, all inside the 2n merged bytes
  const uint8_t* secret = XXH3_kSecret;
  XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 acc[XXH_ACC_NB] = XXH3_INIT_ACC;
  // Blocks are merged into an L1 scratch, hashed there, and streamed to dst with
  // non-temporal stores when dst is 16-byte aligned (no read-for-ownership of the output;
  // malloc's large blocks are 16 bytes past a page boundary).
  const bool stream = (reinterpret_cast<uintptr_t>(dst) & 15) == 0;
  XXH_ALIGN(64) uint8_t scratch[kBlock];
  for (size_t b = 0; b < blocks; ++b) {
    const uint8_t* l = lo + b * (kBlock / 2);
    const uint8_t* h = hi + b * (kBlock / 2);
    uint8_t* d = stream ? scratch : dst + b * kBlock;
    for (size_t i = 0; i < kBlock / 2; i += 32) Merge2x32Avx2(l + i, h + i, d + 2 * i);
    XXH3_accumulate(acc, d, secret, kStripesPerBlock, XXH3_accumulate_512_avx2);
    XXH3_scrambleAcc_avx2(acc, secret + sizeof(XXH3_kSecret) - kStripe);
    if (stream) {
      for (size_t i = 0; i < kBlock; i += 16) {
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + b * kBlock + i),
                         _mm_load_si128(reinterpret_cast<const __m128i*>(scratch + i)));
      }
    }
  }
  if (stream) _mm_sfence();
  const size_t done = blocks * (kBlock / 2);
  const uint8_t* rest[2] = {lo + done, hi + done};
  MergePlanes(rest, n - done, 2, dst + 2 * done);
  if (tail_bytes != 0) std::memcpy(dst + 2 * n, tail, tail_bytes);
  const size_t stripes = ((len - 1) - kBlock * blocks) / kStripe;
  XXH3_accumulate(acc, dst + blocks * kBlock, secret, stripes, XXH3_accumulate_512_avx2);
  XXH3_accumulate_512_avx2(acc, dst + len - kStripe,
                           secret + sizeof(XXH3_kSecret) - kStripe - XXH_SECRET_LASTACC_START);
  const uint64_t h = XXH3_mergeAccs(acc, secret + XXH_SECRET_MERGEACCS_START,
                                    static_cast<xxh_u64>(len) * XXH_PRIME64_1);
  _mm256_zeroupper();
  return h;
}
#endif

// Writes the n two-byte elements of planes lo and hi, then tail[0, tail_bytes), to dst
// and returns ChunkChecksum(dst, 2 * n + tail_bytes).
inline uint64_t MergeTwoPlanesWithChecksum(const uint8_t* lo, const uint8_t* hi, size_t n,
                                           const uint8_t* tail, size_t tail_bytes, uint8_t* dst) {
  MC_DASSERT(tail_bytes <= 1, "a two-byte element leaves at most one byte over");
  const size_t len = 2 * n + tail_bytes;
#if defined(MOONCAKE_COMPRESS_XXH3_AVX2)
  if (len > XXH3_MIDSIZE_MAX && HasAvx2() && PlanesHaveAvx2()) {
    return Merge2ChecksumAvx2(lo, hi, n, tail, tail_bytes, dst);
  }
#endif
  const uint8_t* planes[2] = {lo, hi};
  MergePlanes(planes, n, 2, dst);
  if (tail_bytes != 0) std::memcpy(dst + 2 * n, tail, tail_bytes);
  return ChunkChecksum(dst, len);
}

}  // namespace mooncake::compress_internal

#endif  // MOONCAKE_COMPRESS_INTERNAL_MERGE_CHECKSUM_H_
