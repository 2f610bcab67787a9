// Byte-plane split and merge: element i's byte j <-> plane j's byte i.
//
// The 2-byte case (bf16/fp16, the hot one) uses SSE2, which every x86-64 CPU has, so it
// is vectorized without -march flags, and AVX2 when the CPU has it (selected at run time
// with __builtin_cpu_supports, compiled with __attribute__((target("avx2")))); other
// targets and element sizes take a scalar loop the compiler may vectorize on its own.
#ifndef MOONCAKE_COMPRESS_INTERNAL_BYTE_PLANES_H_
#define MOONCAKE_COMPRESS_INTERNAL_BYTE_PLANES_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "mooncake/base/assert.h"
#include "mooncake/base/x86_intrinsics.h"

namespace mooncake::compress_internal {

#if defined(__x86_64__)
inline bool PlanesHaveAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

// 2-byte split of the first n / 32 * 32 elements; returns how many it did.
__attribute__((target("avx2"))) inline size_t Split2Avx2(const uint8_t* src, size_t n, uint8_t* lo,
                                                         uint8_t* hi) {
  const __m256i mask = _mm256_set1_epi16(0x00FF);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i + 32));
    // packus works per 128-bit lane; the permute puts the 64-bit quarters back in order.
    const __m256i l = _mm256_packus_epi16(_mm256_and_si256(a, mask), _mm256_and_si256(b, mask));
    const __m256i h = _mm256_packus_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + i), _mm256_permute4x64_epi64(l, 0xD8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + i), _mm256_permute4x64_epi64(h, 0xD8));
  }
  _mm256_zeroupper();
  return i;
}

// 2-byte merge of 32 elements: lo[0, 32) and hi[0, 32) into dst[0, 64).
__attribute__((target("avx2"), always_inline)) inline void Merge2x32Avx2(const uint8_t* lo,
                                                                         const uint8_t* hi,
                                                                         uint8_t* dst) {
  // unpack works per 128-bit lane: pre-permute so lane k holds bytes [8k.. of each half.
  const __m256i l =
      _mm256_permute4x64_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo)), 0xD8);
  const __m256i h =
      _mm256_permute4x64_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi)), 0xD8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_unpacklo_epi8(l, h));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32), _mm256_unpackhi_epi8(l, h));
}

// 2-byte merge of the first n / 32 * 32 elements; returns how many it did.
__attribute__((target("avx2"))) inline size_t Merge2Avx2(const uint8_t* lo, const uint8_t* hi,
                                                         size_t n, uint8_t* dst) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) Merge2x32Avx2(lo + i, hi + i, dst + 2 * i);
  _mm256_zeroupper();
  return i;
}
#endif

// src holds n elements of `elem` bytes; planes[j] receives n bytes.
inline void SplitPlanes(const uint8_t* src, size_t n, size_t elem, uint8_t* const* planes) {
  MC_DASSERT(elem >= 1 && elem <= 8, "element size");
  if (n == 0) return;  // empty buffers may be null
  if (elem == 1) {
    std::memcpy(planes[0], src, n);
    return;
  }
  size_t i = 0;
  if (elem == 2) {
    uint8_t* lo = planes[0];
    uint8_t* hi = planes[1];
#if defined(__x86_64__)
    if (PlanesHaveAvx2()) i = Split2Avx2(src, n, lo, hi);
#endif
#if defined(__SSE2__)
    const __m128i mask = _mm_set1_epi16(0x00FF);
    for (; i + 16 <= n; i += 16) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i + 16));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(lo + i),
                       _mm_packus_epi16(_mm_and_si128(a, mask), _mm_and_si128(b, mask)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(hi + i),
                       _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8)));
    }
#endif
    for (; i < n; ++i) {
      lo[i] = src[2 * i];
      hi[i] = src[2 * i + 1];
    }
    return;
  }
  for (; i < n; ++i) {
    for (size_t j = 0; j < elem; ++j) planes[j][i] = src[i * elem + j];
  }
}

// The inverse of SplitPlanes: planes[j] holds n bytes; dst receives n elements.
inline void MergePlanes(const uint8_t* const* planes, size_t n, size_t elem, uint8_t* dst) {
  MC_DASSERT(elem >= 1 && elem <= 8, "element size");
  if (n == 0) return;  // empty buffers may be null
  if (elem == 1) {
    std::memcpy(dst, planes[0], n);
    return;
  }
  size_t i = 0;
  if (elem == 2) {
    const uint8_t* lo = planes[0];
    const uint8_t* hi = planes[1];
#if defined(__x86_64__)
    if (PlanesHaveAvx2()) i = Merge2Avx2(lo, hi, n, dst);
#endif
#if defined(__SSE2__)
    for (; i + 16 <= n; i += 16) {
      const __m128i l = _mm_loadu_si128(reinterpret_cast<const __m128i*>(lo + i));
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi + i));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), _mm_unpacklo_epi8(l, h));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i + 16), _mm_unpackhi_epi8(l, h));
    }
#endif
    for (; i < n; ++i) {
      dst[2 * i] = lo[i];
      dst[2 * i + 1] = hi[i];
    }
    return;
  }
  for (; i < n; ++i) {
    for (size_t j = 0; j < elem; ++j) dst[i * elem + j] = planes[j][i];
  }
}

}  // namespace mooncake::compress_internal

#endif  // MOONCAKE_COMPRESS_INTERNAL_BYTE_PLANES_H_
