// Decoder for the Huffman blocks of internal/huffman.h (both block formats: 4 and 8
// streams). Decoding is a chain of dependent table lookups per stream, so its speed is
// the number of independent streams times the symbols each lookup yields:
//   - one 2048-entry table indexed by the next 11 stream bits yields up to two symbols,
//     keeps the bit count in its low bits so `x >>= e` needs no extra masking, and is
//     built in place (one-symbol entries, then pairs) to keep per-block setup short;
//   - the streams are decoded interleaved in one loop (8 chains in format 2);
//   - a sentinel bit above each 57-bit window gives the bits consumed by a round from one
//     leading-zero count, with no per-step bookkeeping;
//   - BMI2 (shlx/shrx) is selected at run time.
// Tables are rebuilt only when a block's code differs from the previous block's.
#ifndef MOONCAKE_COMPRESS_INTERNAL_HUFFMAN_DECODER_H_
#define MOONCAKE_COMPRESS_INTERNAL_HUFFMAN_DECODER_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/x86_intrinsics.h"
#include "mooncake/compress/internal/huffman.h"

namespace mooncake::compress_internal {

#define MOONCAKE_HUFFDEC_INLINE inline __attribute__((always_inline))
// GCC's SLP vectorizer packs the streams' scalar updates into SSE registers and shuffles
// them back every step; the scalar chains are faster.
#define MOONCAKE_HUFFDEC_SCALAR __attribute__((optimize("no-tree-slp-vectorize")))

// Decodes Huffman blocks. Reusable (keeps the last tables and skips the rebuild when
// the next block has the same code); not thread-safe.
class HuffmanDecoder {
 public:
  // Decodes n symbols into out from the block at data[0, size), which has `streams`
  // streams (kHuffStreamsV1 or kHuffStreamsV2). Bytes [size, readable) may be loaded
  // but are not interpreted. On success *block_bytes = the block's size.
  absl::Status Decode(const uint8_t* data, size_t size, size_t readable, uint8_t* out, size_t n,
                      size_t* block_bytes, int streams = kHuffStreamsV2) {
    MC_DASSERT(readable >= size, "readable covers the block");
    MC_DASSERT(streams == kHuffStreamsV1 || streams == kHuffStreamsV2, "stream count");
    size_t pos = 0;
    if (absl::Status s = ReadTable(data, size, &pos); !s.ok()) return s;
    const size_t table_bytes = HuffStreamTableBytes(streams);
    if (size - pos < table_bytes) return Corrupt("stream sizes truncated");
    size_t start[kHuffMaxStreams + 1];
    start[0] = pos + table_bytes;
    for (int j = 0; j < streams; ++j) {
      uint32_t b;
      std::memcpy(&b, data + pos + 4 * j, 4);
      start[j + 1] = start[j] + b;
      if (start[j + 1] > size) return Corrupt("stream runs past the block");
    }
    *block_bytes = start[streams];
    if (streams == kHuffStreamsV1) {
      return DecodeStreams<kHuffStreamsV1>(data, start, readable, out, n);
    }
    return DecodeStreams<kHuffStreamsV2>(data, start, readable, out, n);
  }

 private:
  static absl::Status Corrupt(const char* what) {
    return absl::DataLossError(absl::StrCat("corrupt Huffman block: ", what));
  }

  absl::Status ReadTable(const uint8_t* data, size_t size, size_t* pos) {
    if (size < 33) return Corrupt("header truncated");
    const uint8_t max_len = data[0];
    uint8_t len[256] = {};
    uint64_t words[4];
    std::memcpy(words, data + 1, 32);
    int present = 0;
    for (uint64_t w : words) present += __builtin_popcountll(w);
    if (present < 2) return Corrupt("fewer than two symbols");
    const size_t nibble_bytes = static_cast<size_t>(present + 1) / 2;
    if (size < 33 + nibble_bytes) return Corrupt("code lengths truncated");
    int idx = 0;
    uint8_t seen_max = 0;
    bool zero = false;
    for (int w = 0; w < 4; ++w) {
      for (uint64_t bits = words[w]; bits != 0; bits &= bits - 1, ++idx) {
        const int s = 64 * w + __builtin_ctzll(bits);
        const uint8_t b = data[33 + idx / 2];
        len[s] = (idx % 2 == 0) ? (b & 15) : (b >> 4);
        zero |= len[s] == 0;
        seen_max = std::max(seen_max, len[s]);
      }
    }
    if (zero) return Corrupt("present symbol with zero length");
    if (seen_max != max_len) return Corrupt("max code length disagrees with the lengths");
    *pos = 33 + nibble_bytes;
    if (have_tables_ && std::memcmp(len, len_, sizeof(len)) == 0) return absl::OkStatus();
    if (seen_max > kHuffMaxBits) return Corrupt("code lengths do not form a complete code");
    if (!BuildTables(len, words)) return Corrupt("code lengths do not form a complete code");
    std::memcpy(len_, len, sizeof(len));
    have_tables_ = true;
    return absl::OkStatus();
  }

  // Builds table_ for the code with these lengths (all <= kHuffMaxBits); returns false,
  // leaving the table invalid, when the code is not complete.
  // Entry: bits 0..5 = bits consumed, 8..15 and 16..23 = up to two symbols, 24..27 = the
  // first symbol's length (what the one-symbol tail decoder uses), 30..31 = how many.
  bool BuildTables(const uint8_t (&len)[256], const uint64_t (&present)[4]) {
    have_tables_ = false;
    uint32_t count[kHuffMaxBits + 1] = {};
    int64_t kraft = 0;
    for (int w = 0; w < 4; ++w) {
      for (uint64_t bits = present[w]; bits != 0; bits &= bits - 1) {
        const uint8_t l = len[64 * w + __builtin_ctzll(bits)];
        ++count[l];
        kraft += int64_t{1} << (kHuffMaxBits - l);
      }
    }
    if (kraft != (int64_t{1} << kHuffMaxBits)) return false;
    uint32_t next[kHuffMaxBits + 1] = {};
    for (int l = 1, c = 0; l <= kHuffMaxBits; ++l) {
      c = (c + static_cast<int>(count[l - 1])) << 1;
      next[l] = static_cast<uint32_t>(c);
    }
    // One-symbol entries first. Canonical order is (length, symbol); symbols are visited
    // ascending, so each length's next code is handed out in order.
    for (int w = 0; w < 4; ++w) {
      for (uint64_t bits = present[w]; bits != 0; bits &= bits - 1) {
        const uint32_t s = 64 * w + __builtin_ctzll(bits);
        const uint32_t l = len[s];
        const uint32_t rev = kReverse11[next[l]++] >> (kHuffMaxBits - l);
        const uint32_t e = l | (s << 8) | (l << 24) | (1u << 30);
        for (uint32_t fill = rev; fill < kHuffTableSize; fill += 1u << l) table_[fill] = e;
      }
    }
    // Then pairs, in place: the second symbol of entry i is entry i >> l1 < i, so going
    // down from the top reads it while it is still a one-symbol entry.
    uint32_t i = kHuffTableSize;
#if defined(__x86_64__)
    if (HasAvx2Gather()) i = PairEntriesAvx2(table_);
#endif
    while (i-- > 0) table_[i] = PairEntry(table_[i], table_[i >> (table_[i] & 63)]);
    return true;
  }

  // The entry for e1's symbol followed by e2's when both fit the table's index bits.
  static MOONCAKE_HUFFDEC_INLINE uint32_t PairEntry(uint32_t e1, uint32_t e2) {
    const uint32_t l1 = e1 & 63, l2 = e2 & 63;
    const uint32_t two = (e1 + l2 + (1u << 30)) | ((e2 & 0xFF00) << 8);
    // Branch-free select: whether the pair fits is data-dependent, a branch mispredicts.
    const uint32_t fits = ((kHuffMaxBits - l1 - l2) >> 31) - 1;  // all ones iff it fits
    return e1 ^ ((two ^ e1) & fits);
  }

#if defined(__x86_64__)
  static bool HasAvx2Gather() {
    static const bool has = __builtin_cpu_supports("avx2");
    return has;
  }
  // PairEntry for entries [8, kHuffTableSize), 8 at a time, top down: the entries a
  // batch [b, b+8) reads are at most (b+7)/2 < b, still one-symbol entries. Returns
  // how many low entries are left to the scalar loop.
  __attribute__((target("avx2"))) static uint32_t PairEntriesAvx2(uint32_t* table) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m63 = _mm256_set1_epi32(63);
    const __m256i limit = _mm256_set1_epi32(kHuffMaxBits + 1);
    const __m256i count = _mm256_set1_epi32(1 << 30);
    const __m256i m_sym = _mm256_set1_epi32(0xFF00);
    for (uint32_t b = kHuffTableSize - 8; b >= 8; b -= 8) {
      auto* p = reinterpret_cast<__m256i*>(table + b);
      const __m256i e1 = _mm256_loadu_si256(p);
      const __m256i l1 = _mm256_and_si256(e1, m63);
      const __m256i idx = _mm256_srlv_epi32(_mm256_add_epi32(_mm256_set1_epi32(b), lane), l1);
      const __m256i e2 = _mm256_i32gather_epi32(reinterpret_cast<const int*>(table), idx, 4);
      const __m256i l2 = _mm256_and_si256(e2, m63);
      const __m256i two = _mm256_or_si256(_mm256_add_epi32(_mm256_add_epi32(e1, l2), count),
                                          _mm256_slli_epi32(_mm256_and_si256(e2, m_sym), 8));
      const __m256i fits = _mm256_cmpgt_epi32(limit, _mm256_add_epi32(l1, l2));
      _mm256_storeu_si256(p, _mm256_blendv_epi8(e1, two, fits));
    }
    _mm256_zeroupper();
    return 8;
  }
#endif

  // One decoding step: up to two symbols from the low 11 bits of x.
  static MOONCAKE_HUFFDEC_INLINE void Step(const uint32_t* table, uint64_t& x, uint8_t*& out) {
    const uint32_t e = table[x & (kHuffTableSize - 1)];
    const uint16_t two = static_cast<uint16_t>(e >> 8);
    std::memcpy(out, &two, 2);
    out += e >> 30;
    x >>= e & 63;  // one shrx: the count's low 6 bits are the bits consumed
  }

  // The next 57 bits of a stream at bit offset b, with a sentinel 1 above them: after
  // consuming k <= 55 bits the sentinel sits at 57 - k, so k = clz(x) - 6.
  static MOONCAKE_HUFFDEC_INLINE uint64_t Window(const uint8_t* data, size_t b) {
    constexpr uint64_t kLow57 = (uint64_t{1} << 57) - 1;
    return ((LoadLE64(data + (b >> 3)) >> (b & 7)) & kLow57) | (uint64_t{1} << 57);
  }
  static MOONCAKE_HUFFDEC_INLINE size_t Consumed(uint64_t x) {
    return static_cast<size_t>(__builtin_clzll(x)) - 6;
  }

  // `iters` rounds of: take each stream's next 57 bits, run 5 steps (<= 55 bits, <= 10
  // symbols). The caller guarantees every load and store stays in bounds.
  template <int S>
  static MOONCAKE_HUFFDEC_INLINE void FastLoopImpl(const uint8_t* data, const uint32_t* table,
                                                   size_t iters, size_t* bit, uint8_t** out) {
    uint8_t* o[S];
    size_t b[S];
#pragma GCC unroll 8
    for (int j = 0; j < S; ++j) o[j] = out[j], b[j] = bit[j];
    for (size_t it = 0; it < iters; ++it) {
      uint64_t x[S];
#pragma GCC unroll 8
      for (int j = 0; j < S; ++j) x[j] = Window(data, b[j]);
#pragma GCC unroll 5
      for (int r = 0; r < 5; ++r) {
#pragma GCC unroll 8
        for (int j = 0; j < S; ++j) Step(table, x[j], o[j]);
      }
#pragma GCC unroll 8
      for (int j = 0; j < S; ++j) b[j] += Consumed(x[j]);
    }
#pragma GCC unroll 8
    for (int j = 0; j < S; ++j) out[j] = o[j], bit[j] = b[j];
  }
  template <int S>
  MOONCAKE_HUFFDEC_SCALAR static void FastLoopGeneric(const uint8_t* data, const uint32_t* table,
                                                      size_t iters, size_t* bit, uint8_t** out) {
    FastLoopImpl<S>(data, table, iters, bit, out);
  }
#if defined(__x86_64__)
  template <int S>
  __attribute__((target("bmi2"))) MOONCAKE_HUFFDEC_SCALAR static void FastLoopBmi2(
      const uint8_t* data, const uint32_t* table, size_t iters, size_t* bit, uint8_t** out) {
    FastLoopImpl<S>(data, table, iters, bit, out);
  }
#endif

  // Rounds every stream can surely run: 10 symbols (+1 spare byte for the 2-byte store)
  // of room and an 8-byte load within `readable` at up to 55 bits per round.
  template <int S>
  static size_t SafeRounds(const size_t* bit, uint8_t* const* cur, uint8_t* const* end,
                           size_t readable) {
    if (readable < 8) return 0;
    const size_t last_bit = (readable - 8) * 8;
    size_t iters = SIZE_MAX;
    for (int j = 0; j < S; ++j) {
      const size_t room = static_cast<size_t>(end[j] - cur[j]);
      if (room < 11 || bit[j] > last_bit) return 0;
      iters = std::min({iters, (room - 11) / 10 + 1, (last_bit - bit[j]) / 55 + 1});
    }
    return iters;
  }

  template <int S>
  absl::Status DecodeStreams(const uint8_t* data, const size_t* start, size_t readable,
                             uint8_t* out, size_t n) {
    size_t bit[S];
    uint8_t* cur[S];
    uint8_t* end[S];
    for (int j = 0; j < S; ++j) {
      bit[j] = start[j] * 8;
      cur[j] = out + SegmentBegin(n, j, S);
      end[j] = out + SegmentBegin(n, j + 1, S);
    }
    const bool bmi2 = HasBmi2();
    for (size_t iters; (iters = SafeRounds<S>(bit, cur, end, readable)) != 0;) {
#if defined(__x86_64__)
      if (bmi2) {
        FastLoopBmi2<S>(data, table_, iters, bit, cur);
        continue;
      }
#endif
      FastLoopGeneric<S>(data, table_, iters, bit, cur);
    }
    // Streams progress at different rates when the segments' statistics differ (real
    // tensors do), so the interleaved loop stops when the fastest stream nears its end;
    // finish each stream's bulk with a one-stream loop before the checked tail.
    for (int j = 0; j < S; ++j) {
      for (size_t iters; (iters = SafeRounds<1>(bit + j, cur + j, end + j, readable)) != 0;) {
#if defined(__x86_64__)
        if (bmi2) {
          FastLoopBmi2<1>(data, table_, iters, bit + j, cur + j);
          continue;
        }
#endif
        FastLoopGeneric<1>(data, table_, iters, bit + j, cur + j);
      }
    }
    (void)bmi2;
    for (int j = 0; j < S; ++j) {
      size_t b = bit[j];
      for (uint8_t* o = cur[j]; o < end[j]; ++o) {
        const size_t byte = b >> 3;
        uint64_t v = 0;
        if (byte + 8 <= readable) {
          v = LoadLE64(data + byte);
        } else if (byte < readable) {
          std::memcpy(&v, data + byte, readable - byte);
        }
        const uint32_t e = table_[(v >> (b & 7)) & (kHuffTableSize - 1)];
        *o = static_cast<uint8_t>(e >> 8);
        b += (e >> 24) & 15;
      }
      if ((b - start[j] * 8 + 7) / 8 != start[j + 1] - start[j]) {
        return Corrupt("a stream's size does not match the symbols it codes");
      }
    }
    return absl::OkStatus();
  }

  uint8_t len_[256] = {};
  bool have_tables_ = false;
  uint32_t table_[kHuffTableSize];
};

}  // namespace mooncake::compress_internal

#undef MOONCAKE_HUFFDEC_INLINE
#undef MOONCAKE_HUFFDEC_SCALAR

#endif  // MOONCAKE_COMPRESS_INTERNAL_HUFFMAN_DECODER_H_
