// A small static Huffman coder for one byte plane: S interleaved LSB-first bit streams
// (S = 4 in block format 1, S = 8 in block format 2), code lengths limited to 11 bits.
// Built for the sign+exponent plane of bf16/fp16, where zstd's match finder costs time
// and finds nothing the order-0 coder does not. This header has the code construction and
// the encoder; internal/huffman_decoder.h decodes.
//
// Block layout (docs/frame_format.md, "Huffman block"):
//   u8      max code length L (1..11)
//   u8[32]  bitmap of the symbols with a code (bit s%8 of byte s/8); an encoder may give
//           codes to symbols the block does not contain (HuffmanEncoder keeps codes)
//   u8[...] ceil(k/2) bytes: 4-bit code length of each present symbol, ascending symbol
//           order, low nibble first (k = present symbols, k >= 2)
//   u32[S]  byte size of each stream
//   ...     the S streams; stream j codes symbols [j*q, min((j+1)*q, n)), q = ceil(n/S)
// Codes are canonical (shorter first, then by symbol) and complete (Kraft sum exactly 1),
// written least-significant bit first; each stream's last byte is zero-padded.
#ifndef MOONCAKE_COMPRESS_INTERNAL_HUFFMAN_H_
#define MOONCAKE_COMPRESS_INTERNAL_HUFFMAN_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"

namespace mooncake::compress_internal {

// The per-symbol helpers must inline into the interleaved loops, or every stream's state
// goes through memory; GCC's -O2 heuristics do not always do it on their own.
#define MOONCAKE_HUFF_INLINE inline __attribute__((always_inline))
// GCC's SLP vectorizer packs the four streams' scalar updates into SSE registers and
// shuffles them back every step; the scalar chains are faster.
#define MOONCAKE_HUFF_SCALAR __attribute__((optimize("no-tree-slp-vectorize")))

inline constexpr int kHuffMaxBits = 11;
inline constexpr size_t kHuffTableSize = size_t{1} << kHuffMaxBits;
// Block format 1 (plane mode 2, frame version 1) has 4 streams; format 2 (plane mode 3,
// written since frame version 2) has 8, which gives the decoder twice the independent
// table-lookup chains.
inline constexpr int kHuffStreamsV1 = 4;
inline constexpr int kHuffStreamsV2 = 8;
inline constexpr int kHuffMaxStreams = kHuffStreamsV2;

constexpr size_t HuffStreamTableBytes(int streams) { return 4 * static_cast<size_t>(streams); }

inline bool HasBmi2() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("bmi2");
  return has;
#else
  return false;
#endif
}

inline uint64_t LoadLE64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// rev[c] = the low 11 bits of c in reverse order (canonical codes are MSB-first; the
// streams are LSB-first).
inline constexpr std::array<uint16_t, kHuffTableSize> kReverse11 = [] {
  std::array<uint16_t, kHuffTableSize> rev{};
  for (uint32_t c = 0; c < kHuffTableSize; ++c) {
    uint32_t r = 0;
    for (int b = 0; b < kHuffMaxBits; ++b) r |= ((c >> b) & 1u) << (kHuffMaxBits - 1 - b);
    rev[c] = static_cast<uint16_t>(r);
  }
  return rev;
}();

// Where segment j of n symbols split over `streams` streams begins.
inline size_t SegmentBegin(size_t n, int j, int streams) {
  const size_t s = static_cast<size_t>(streams);
  return std::min(n, static_cast<size_t>(j) * ((n + s - 1) / s));
}

// Computes complete, length-limited Huffman code lengths for the symbols with freq > 0.
// REQUIRES: at least two symbols have freq > 0.
inline void BuildCodeLengths(const uint64_t (&freq)[256], uint8_t (&len)[256]) {
  // Sort (freq, symbol) as one integer key: same order as comparing the pair, without
  // the indirect loads of a comparator. Frequencies are < 2^56 (chunks are <= 64 MiB).
  uint64_t key[256];
  int k = 0;
  for (int s = 0; s < 256; ++s) {
    len[s] = 0;
    MC_DASSERT(freq[s] < (uint64_t{1} << 56), "frequency fits the key");
    if (freq[s] != 0) key[k++] = freq[s] << 8 | static_cast<uint64_t>(s);
  }
  MC_ASSERT(k >= 2, "Huffman needs two symbols");
  std::sort(key, key + k);
  uint16_t sym[256];
  for (int i = 0; i < k; ++i) sym[i] = static_cast<uint16_t>(key[i] & 0xFF);
  // Two-queue Huffman: leaves 0..k-1 ascending, internal nodes k..2k-2 made in
  // ascending weight order, so the two smallest are always at a queue head.
  uint64_t weight[511];
  uint16_t parent[511];
  for (int i = 0; i < k; ++i) weight[i] = freq[sym[i]];
  int leaf = 0, inner = k;
  for (int node = k; node < 2 * k - 1; ++node) {
    uint64_t w = 0;
    for (int pick = 0; pick < 2; ++pick) {
      const bool take_leaf = leaf < k && (inner >= node || weight[leaf] <= weight[inner]);
      const int child = take_leaf ? leaf++ : inner++;
      w += weight[child];
      parent[child] = static_cast<uint16_t>(node);
    }
    weight[node] = w;
  }
  uint8_t depth[511];
  depth[2 * k - 2] = 0;
  for (int node = 2 * k - 3; node >= 0; --node) depth[node] = depth[parent[node]] + 1;
  // Clamp to kHuffMaxBits, then restore the Kraft sum (units of 2^-kHuffMaxBits) to
  // exactly 2^kHuffMaxBits: lengthen the rarest symbols while over, then shorten the
  // rarest of the longest while under (every term is a multiple of the longest's unit,
  // so this lands exactly).
  const int64_t target = int64_t{1} << kHuffMaxBits;
  int64_t kraft = 0;
  for (int i = 0; i < k; ++i) {
    len[sym[i]] = static_cast<uint8_t>(std::min<int>(depth[i], kHuffMaxBits));
    kraft += int64_t{1} << (kHuffMaxBits - len[sym[i]]);
  }
  while (kraft > target) {
    for (int i = 0; i < k && kraft > target; ++i) {
      uint8_t& l = len[sym[i]];
      if (l < kHuffMaxBits) {
        ++l;
        kraft -= int64_t{1} << (kHuffMaxBits - l);
      }
    }
  }
  while (kraft < target) {
    int best = -1;
    for (int i = 0; i < k; ++i) {
      if (best < 0 || len[sym[i]] > len[sym[best]]) best = i;
    }
    kraft += int64_t{1} << (kHuffMaxBits - len[sym[best]]);
    --len[sym[best]];
  }
  MC_DASSERT(kraft == target, "code must be complete");
}

// Canonical codes, bit-reversed for LSB-first streams. Returns false if the lengths do
// not form a complete code of at most kHuffMaxBits bits.
inline bool CanonicalCodes(const uint8_t (&len)[256], uint16_t (&code)[256]) {
  uint32_t count[kHuffMaxBits + 1] = {};
  int64_t kraft = 0;
  for (int s = 0; s < 256; ++s) {
    if (len[s] > kHuffMaxBits) return false;
    ++count[len[s]];
    if (len[s] != 0) kraft += int64_t{1} << (kHuffMaxBits - len[s]);
  }
  if (kraft != (int64_t{1} << kHuffMaxBits)) return false;
  uint32_t next[kHuffMaxBits + 1] = {};
  count[0] = 0;
  for (int l = 1; l <= kHuffMaxBits; ++l) {
    uint32_t c = 0;
    for (int l2 = 1; l2 < l; ++l2) c = (c + count[l2]) << 1;
    next[l] = c;
  }
  for (int s = 0; s < 256; ++s) {
    if (len[s] == 0) continue;
    code[s] = static_cast<uint16_t>(kReverse11[next[len[s]]++] >> (kHuffMaxBits - len[s]));
  }
  return true;
}

// Plans and writes Huffman blocks. Reusable; not thread-safe.
class HuffmanEncoder {
 public:
  // Per-segment symbol counts for PlanCounted: counts()[j][s] = occurrences of s in
  // segment j (SegmentBegin(n, j, streams) .. SegmentBegin(n, j + 1, streams)).
  using SegmentCounts = uint32_t[kHuffMaxStreams][256];
  SegmentCounts& counts() { return counts_; }

  // Counts `data` and builds the code. Returns the exact block size, or 0 when the data
  // has fewer than two distinct symbols (code it some other way).
  size_t Plan(const uint8_t* data, size_t n, int streams = kHuffStreamsV2) {
    MC_DASSERT(streams == kHuffStreamsV1 || streams == kHuffStreamsV2, "stream count");
    std::memset(counts_, 0, sizeof(counts_));
    size_t begin[kHuffMaxStreams + 1] = {};
    for (int j = 0; j <= streams; ++j) begin[j] = SegmentBegin(n, j, streams);
    const size_t common = begin[streams] - begin[streams - 1];  // the last is the shortest
    // One table per segment: no store-to-load chains on repeated symbols.
    for (size_t i = 0; i < common; ++i) {
#pragma GCC unroll 8
      for (int j = 0; j < streams; ++j) ++counts_[j][data[begin[j] + i]];
    }
    for (int j = 0; j < streams - 1; ++j) {
      for (size_t i = begin[j] + common; i < begin[j + 1]; ++i) ++counts_[j][data[i]];
    }
    return PlanCounted(n, streams);
  }

  // Plan() for counts the caller filled in counts() (e.g. while splitting planes).
  size_t PlanCounted(size_t n, int streams) {
    MC_DASSERT(streams == kHuffStreamsV1 || streams == kHuffStreamsV2, "stream count");
    n_ = n;
    streams_ = streams;
    uint64_t freq[256];
    uint8_t symbols[256];
    int present = 0;
    for (int s = 0; s < 256; ++s) {
      uint64_t f = 0;
      for (int j = 0; j < streams; ++j) f += counts_[j][s];
      freq[s] = f;
      symbols[present] = static_cast<uint8_t>(s);
      present += f != 0;
    }
    MC_DASSERT(std::accumulate(freq, freq + 256, uint64_t{0}) == n, "counts cover the data");
    if (present < 2) return 0;
    ChooseCode(freq);
    if (!kept_) {  // a kept code keeps its codes too
      uint16_t code16[256];
      const bool ok = CanonicalCodes(len_, code16);
      MC_ASSERT(ok, "built an invalid code");
      for (int s = 0; s < 256; ++s) code_[s] = len_[s] != 0 ? code16[s] : 0;
    }
    // The header lists every symbol with a code (a kept code may cover absent ones).
    int coded = 0;
    for (int s = 0; s < 256; ++s) coded += len_[s] != 0;
    size_t bytes = 1 + 32 + (coded + 1) / 2 + HuffStreamTableBytes(streams);
    for (int j = 0; j < streams; ++j) {
      uint64_t bits = 0;
      for (int k = 0; k < present; ++k) bits += uint64_t{counts_[j][symbols[k]]} * len_[symbols[k]];
      stream_bytes_[j] = (bits + 7) / 8;
      bytes += stream_bytes_[j];
    }
    return bytes;
  }

  // Blocks planned so far that kept the previous block's code, of all planned.
  uint64_t kept_codes() const { return kept_count_; }
  uint64_t planned_codes() const { return planned_count_; }

  // Writes the block Plan() sized. REQUIRES: same data; out has Plan()'s bytes.
  void Write(const uint8_t* data, uint8_t* out) {
    const uint8_t* const out_begin = out;
    uint8_t max_len = 0;
    uint8_t bitmap[32] = {};
    for (int s = 0; s < 256; ++s) {
      max_len = std::max(max_len, len_[s]);
      if (len_[s] != 0) bitmap[s / 8] |= static_cast<uint8_t>(1u << (s % 8));
    }
    *out++ = max_len;
    std::memcpy(out, bitmap, 32);
    out += 32;
    int nibble = 0;
    for (int s = 0; s < 256; ++s) {
      if (len_[s] == 0) continue;
      if (nibble++ % 2 == 0) {
        *out = len_[s];
      } else {
        *out++ |= static_cast<uint8_t>(len_[s] << 4);
      }
    }
    if (nibble % 2 == 1) ++out;
    for (int j = 0; j < streams_; ++j) {
      const uint32_t b = static_cast<uint32_t>(stream_bytes_[j]);
      std::memcpy(out + 4 * j, &b, 4);
    }
    out += HuffStreamTableBytes(streams_);
    EncodeStreams(data, out);
    MC_DASSERT(out - out_begin > 0, "block written");
  }

 private:
  // A stream's bulk loop stops this many symbols before the stream's end: they hold at
  // least 64 bits, so the bulk loop's 8-byte stores never pass the stream's last byte
  // and the streams can be written in place, back to back.
  static constexpr size_t kTailSymbols = 64;

  struct Writer {
    uint64_t bits = 0;
    uint32_t count = 0;
    uint8_t* out = nullptr;
  };

  static MOONCAKE_HUFF_INLINE void Put(Writer& w, uint64_t code, uint32_t len) {
    w.bits |= code << w.count;
    w.count += len;
  }

  // Symbols put between flushes: 5 codes of <= 11 bits on top of <= 7 pending bits
  // end at bit 62 of the 64-bit accumulator.
  static constexpr size_t kPutsPerFlush = 5;
  static_assert(7 + kPutsPerFlush * kHuffMaxBits <= 64);

  // n symbols from each of a and b (n a multiple of kPutsPerFlush).
  static MOONCAKE_HUFF_INLINE void EncodePairImpl(const uint8_t* a, const uint8_t* b, size_t n,
                                                  const uint64_t* code, const uint8_t* len,
                                                  Writer& wa_ref, Writer& wb_ref) {
    Writer wa = wa_ref, wb = wb_ref;
    for (size_t i = 0; i < n; i += kPutsPerFlush) {
#pragma GCC unroll 5
      for (size_t u = 0; u < kPutsPerFlush; ++u) {
        Put(wa, code[a[i + u]], len[a[i + u]]);
        Put(wb, code[b[i + u]], len[b[i + u]]);
      }
      Flush(wa);
      Flush(wb);
    }
    wa_ref = wa, wb_ref = wb;
  }
  MOONCAKE_HUFF_SCALAR static void EncodePairGeneric(const uint8_t* a, const uint8_t* b, size_t n,
                                                     const uint64_t* code, const uint8_t* len,
                                                     Writer& wa, Writer& wb) {
    EncodePairImpl(a, b, n, code, len, wa, wb);
  }
#if defined(__x86_64__)
  // BMI2's shlx/shrx take the shift count in any register, not just cl.
  __attribute__((target("bmi2"))) MOONCAKE_HUFF_SCALAR static void EncodePairBmi2(
      const uint8_t* a, const uint8_t* b, size_t n, const uint64_t* code, const uint8_t* len,
      Writer& wa, Writer& wb) {
    EncodePairImpl(a, b, n, code, len, wa, wb);
  }
#endif
  static void EncodePair(const uint8_t* a, const uint8_t* b, size_t n, const uint64_t* code,
                         const uint8_t* len, Writer& wa, Writer& wb) {
#if defined(__x86_64__)
    if (HasBmi2()) return EncodePairBmi2(a, b, n, code, len, wa, wb);
#endif
    EncodePairGeneric(a, b, n, code, len, wa, wb);
  }
  // Stores 8 bytes at w.out, of which the complete ones count.
  static MOONCAKE_HUFF_INLINE void Flush(Writer& w) {
    std::memcpy(w.out, &w.bits, 8);
    w.out += w.count >> 3;
    w.bits >>= w.count & 56;
    w.count &= 7;
  }
  // Stores only the complete bytes (the stream's tail, near its neighbour's first byte).
  static void FlushExact(Writer& w) {
    for (; w.count >= 8; w.count -= 8, w.bits >>= 8) *w.out++ = static_cast<uint8_t>(w.bits);
  }

  void EncodeStreams(const uint8_t* data, uint8_t* out) {
    const int streams = streams_;
    size_t begin[kHuffMaxStreams + 1] = {};
    for (int j = 0; j <= streams; ++j) begin[j] = SegmentBegin(n_, j, streams);
    Writer w[kHuffMaxStreams];
    uint8_t* stream_begin[kHuffMaxStreams];
    for (int j = 0; j < streams; ++j) {
      stream_begin[j] = w[j].out = out;
      out += stream_bytes_[j];
    }
    const size_t shortest = begin[streams] - begin[streams - 1];
    const size_t bulk =
        shortest > kTailSymbols ? (shortest - kTailSymbols) / kPutsPerFlush * kPutsPerFlush : 0;
    // Two streams at a time: their state fits in registers, and two independent chains
    // already saturate the core's issue width.
    for (int j = 0; j < streams; j += 2) {
      EncodePair(data + begin[j], data + begin[j + 1], bulk, code_, len_, w[j], w[j + 1]);
    }
    for (int j = 0; j < streams; ++j) {
      for (size_t p = begin[j] + bulk; p < begin[j + 1]; ++p) {
        Put(w[j], code_[data[p]], len_[data[p]]);
        FlushExact(w[j]);
      }
      if (w[j].count != 0) *w[j].out++ = static_cast<uint8_t>(w[j].bits);
      MC_ASSERT(static_cast<size_t>(w[j].out - stream_begin[j]) == stream_bytes_[j],
                "stream size differs from plan");
    }
  }

  SegmentCounts counts_;
  // Code reuse. A decoder rebuilds its tables only when a block's code lengths differ
  // from the previous block's (HuffmanDecoder), and on 64 KiB chunks that rebuild is
  // ~8% of decode time. So a block keeps the previous block's code when it covers every
  // symbol present and costs at most kKeepSlackPerMille more bits than the block's own
  // optimal code. When it does not cover them, a code built from the block's counts plus
  // a count of 1 for each symbol the previous code had (so sporadic rare symbols keep a
  // code and the next block can keep it in turn) is used if it is within the same slack
  // (tried only when at most kMaxMissingForWiderCode symbols lack a code).
  // Otherwise the block's own optimal code; so every block is within the slack of optimal.
  static constexpr uint64_t kKeepSlackPerMille = 3;
  static constexpr int kMaxMissingForWiderCode = 3;

  static uint64_t CodedBits(const uint64_t (&freq)[256], const uint8_t (&len)[256]) {
    uint64_t bits = 0;
    for (int s = 0; s < 256; ++s) bits += freq[s] * len[s];
    return bits;
  }

  // Sets len_ (see kKeepSlackPerMille); REQUIRES: at least two symbols present.
  void ChooseCode(const uint64_t (&freq)[256]) {
    ++planned_count_;
    kept_ = false;
    uint8_t fresh[256];
    BuildCodeLengths(freq, fresh);
    const uint64_t fresh_bits = CodedBits(freq, fresh);
    const uint64_t limit = fresh_bits + fresh_bits * kKeepSlackPerMille / 1000;
    if (have_previous_) {
      int missing = 0;  // symbols present here that the previous code lacks
      for (int s = 0; s < 256; ++s) missing += freq[s] != 0 && len_[s] == 0;
      if (missing == 0 && CodedBits(freq, len_) <= limit) {
        kept_ = true;
        ++kept_count_;
        return;  // len_ still holds the previous block's code
      }
      // A covering code that costs too much, or many new symbols: the statistics moved,
      // and a wider code would not be kept either (and costs a second code build).
      if (missing == 0 || missing > kMaxMissingForWiderCode) {
        std::memcpy(len_, fresh, sizeof(len_));
        return;
      }
      uint64_t smoothed[256];
      for (int s = 0; s < 256; ++s) smoothed[s] = freq[s] != 0 ? freq[s] : (len_[s] != 0 ? 1 : 0);
      uint8_t wide[256];
      BuildCodeLengths(smoothed, wide);
      if (CodedBits(freq, wide) <= limit) {
        std::memcpy(len_, wide, sizeof(len_));
        return;
      }
    }
    std::memcpy(len_, fresh, sizeof(len_));
    have_previous_ = true;
  }

  uint8_t len_[256] = {};
  bool have_previous_ = false;
  bool kept_ = false;
  uint64_t kept_count_ = 0;
  uint64_t planned_count_ = 0;
  uint64_t code_[256];
  size_t stream_bytes_[kHuffMaxStreams] = {};
  size_t n_ = 0;
  int streams_ = kHuffStreamsV2;
};

}  // namespace mooncake::compress_internal

#undef MOONCAKE_HUFF_INLINE
#undef MOONCAKE_HUFF_SCALAR

#endif  // MOONCAKE_COMPRESS_INTERNAL_HUFFMAN_H_
