// A small static Huffman coder for one byte plane: 4 interleaved LSB-first bit streams,
// code lengths limited to 11 bits, decoded with a 2048-entry table that yields up to two
// symbols per lookup. Built for the sign+exponent plane of bf16/fp16, where zstd's match
// finder costs time and finds nothing the order-0 coder does not.
//
// Block layout (docs/frame_format.md, "Huffman block"):
//   u8      max code length L (1..11)
//   u8[32]  bitmap of present symbols (bit s%8 of byte s/8)
//   u8[...] ceil(k/2) bytes: 4-bit code length of each present symbol, ascending symbol
//           order, low nibble first (k = present symbols, k >= 2)
//   u32[4]  byte size of each stream
//   ...     the 4 streams; stream j codes symbols [j*q, min((j+1)*q, n)), q = ceil(n/4)
// Codes are canonical (shorter first, then by symbol) and complete (Kraft sum exactly 1),
// written least-significant bit first; each stream's last byte is zero-padded.
#ifndef MOONCAKE_COMPRESS_INTERNAL_HUFFMAN_H_
#define MOONCAKE_COMPRESS_INTERNAL_HUFFMAN_H_

#include <algorithm>
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
inline constexpr int kHuffStreams = 4;
inline constexpr size_t kHuffTableSize = size_t{1} << kHuffMaxBits;
inline constexpr size_t kHuffStreamTableBytes = 4 * kHuffStreams;

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

// Segment j of n symbols split over the streams.
inline size_t SegmentBegin(size_t n, int j) {
  return std::min(n, static_cast<size_t>(j) * ((n + kHuffStreams - 1) / kHuffStreams));
}

// Computes complete, length-limited Huffman code lengths for the symbols with freq > 0.
// REQUIRES: at least two symbols have freq > 0.
inline void BuildCodeLengths(const uint64_t (&freq)[256], uint8_t (&len)[256]) {
  uint16_t sym[256];
  int k = 0;
  for (int s = 0; s < 256; ++s) {
    len[s] = 0;
    if (freq[s] != 0) sym[k++] = static_cast<uint16_t>(s);
  }
  MC_ASSERT(k >= 2, "Huffman needs two symbols");
  std::sort(sym, sym + k,
            [&](uint16_t a, uint16_t b) { return freq[a] != freq[b] ? freq[a] < freq[b] : a < b; });
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
    const uint32_t c = next[len[s]]++;
    uint32_t rev = 0;
    for (int b = 0; b < len[s]; ++b) rev |= ((c >> b) & 1u) << (len[s] - 1 - b);
    code[s] = static_cast<uint16_t>(rev);
  }
  return true;
}

// Plans and writes Huffman blocks. Reusable; not thread-safe.
class HuffmanEncoder {
 public:
  // Counts `data` and builds the code. Returns the exact block size, or 0 when the data
  // has fewer than two distinct symbols (code it some other way).
  size_t Plan(const uint8_t* data, size_t n) {
    std::memset(counts_, 0, sizeof(counts_));
    n_ = n;
    size_t begin[kHuffStreams + 1];
    for (int j = 0; j <= kHuffStreams; ++j) begin[j] = SegmentBegin(n, j);
    const size_t common = begin[4] - begin[3];  // the last segment is the shortest
    for (size_t i = 0; i < common; ++i) {
      ++counts_[0][data[begin[0] + i]];
      ++counts_[1][data[begin[1] + i]];
      ++counts_[2][data[begin[2] + i]];
      ++counts_[3][data[begin[3] + i]];
    }
    for (int j = 0; j < 3; ++j) {
      for (size_t i = begin[j] + common; i < begin[j + 1]; ++i) ++counts_[j][data[i]];
    }
    uint64_t freq[256];
    int present = 0;
    for (int s = 0; s < 256; ++s) {
      freq[s] = uint64_t{counts_[0][s]} + counts_[1][s] + counts_[2][s] + counts_[3][s];
      present += freq[s] != 0;
    }
    if (present < 2) return 0;
    BuildCodeLengths(freq, len_);
    uint16_t code16[256];
    const bool ok = CanonicalCodes(len_, code16);
    MC_ASSERT(ok, "built an invalid code");
    for (int s = 0; s < 256; ++s) code_[s] = len_[s] != 0 ? code16[s] : 0;
    size_t bytes = 1 + 32 + (present + 1) / 2 + kHuffStreamTableBytes;
    for (int j = 0; j < kHuffStreams; ++j) {
      uint64_t bits = 0;
      for (int s = 0; s < 256; ++s) bits += uint64_t{counts_[j][s]} * len_[s];
      stream_bytes_[j] = (bits + 7) / 8;
      bytes += stream_bytes_[j];
    }
    return bytes;
  }

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
    for (int j = 0; j < kHuffStreams; ++j) {
      const uint32_t b = static_cast<uint32_t>(stream_bytes_[j]);
      std::memcpy(out + 4 * j, &b, 4);
    }
    out += kHuffStreamTableBytes;
    EncodeStreams(data, out);
    MC_DASSERT(out - out_begin > 0, "block written");
  }

 private:
  struct Writer {
    uint64_t bits = 0;
    uint32_t count = 0;
    uint8_t* out = nullptr;
  };

  static MOONCAKE_HUFF_INLINE void Put(Writer& w, uint64_t code, uint32_t len) {
    w.bits |= code << w.count;
    w.count += len;
  }

  // n symbols from each of a and b (n a multiple of 4).
  static MOONCAKE_HUFF_INLINE void EncodePairImpl(const uint8_t* a, const uint8_t* b, size_t n,
                                                  const uint64_t* code, const uint8_t* len,
                                                  Writer& wa_ref, Writer& wb_ref) {
    Writer wa = wa_ref, wb = wb_ref;
    // 4 symbols of <= 11 bits plus <= 7 pending bits fit the 64-bit accumulator.
    for (size_t i = 0; i < n; i += 4) {
#pragma GCC unroll 4
      for (size_t u = 0; u < 4; ++u) {
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
  static MOONCAKE_HUFF_INLINE void Flush(Writer& w) {
    std::memcpy(w.out, &w.bits, 8);
    w.out += w.count >> 3;
    w.bits >>= w.count & 56;
    w.count &= 7;
  }

  void EncodeStreams(const uint8_t* data, uint8_t* out) {
    size_t begin[kHuffStreams + 1];
    for (int j = 0; j <= kHuffStreams; ++j) begin[j] = SegmentBegin(n_, j);
    for (int j = 0; j < kHuffStreams; ++j) scratch_[j].resize(stream_bytes_[j] + 16);
    Writer w[kHuffStreams];
    for (int j = 0; j < kHuffStreams; ++j) w[j].out = scratch_[j].data();
    const size_t common = (begin[4] - begin[3]) / 4 * 4;
    // Two streams at a time: their state fits in registers, and two independent chains
    // already saturate the core's issue width.
    for (int j = 0; j < kHuffStreams; j += 2) {
      EncodePair(data + begin[j], data + begin[j + 1], common, code_, len_, w[j], w[j + 1]);
    }
    const size_t i = common;
    for (int j = 0; j < kHuffStreams; ++j) {
      for (size_t p = begin[j] + i; p < begin[j + 1]; ++p) {
        Put(w[j], code_[data[p]], len_[data[p]]);
        Flush(w[j]);
      }
      Flush(w[j]);
      const size_t written = static_cast<size_t>(w[j].out - scratch_[j].data()) + (w[j].count != 0);
      MC_ASSERT(written == stream_bytes_[j], "stream size differs from plan");
      std::memcpy(out, scratch_[j].data(), written);
      out += written;
    }
  }

  uint32_t counts_[kHuffStreams][256];
  uint8_t len_[256];
  uint64_t code_[256];
  size_t stream_bytes_[kHuffStreams] = {};
  size_t n_ = 0;
  std::vector<uint8_t> scratch_[kHuffStreams];
};

// Decodes Huffman blocks. Reusable (keeps the last tables and skips the rebuild when
// the next block has the same code); not thread-safe.
class HuffmanDecoder {
 public:
  // Decodes n symbols into out from the block at data[0, size). Bytes [size, readable)
  // may be loaded but are not interpreted. On success *block_bytes = the block's size.
  absl::Status Decode(const uint8_t* data, size_t size, size_t readable, uint8_t* out, size_t n,
                      size_t* block_bytes) {
    MC_DASSERT(readable >= size, "readable covers the block");
    size_t pos = 0;
    if (absl::Status s = ReadTable(data, size, &pos); !s.ok()) return s;
    if (size - pos < kHuffStreamTableBytes) return Corrupt("stream sizes truncated");
    size_t start[kHuffStreams + 1];
    start[0] = pos + kHuffStreamTableBytes;
    for (int j = 0; j < kHuffStreams; ++j) {
      uint32_t b;
      std::memcpy(&b, data + pos + 4 * j, 4);
      start[j + 1] = start[j] + b;
      if (start[j + 1] > size) return Corrupt("stream runs past the block");
    }
    *block_bytes = start[kHuffStreams];
    return DecodeStreams(data, start, readable, out, n);
  }

 private:
  static absl::Status Corrupt(const char* what) {
    return absl::DataLossError(absl::StrCat("corrupt Huffman block: ", what));
  }

  absl::Status ReadTable(const uint8_t* data, size_t size, size_t* pos) {
    if (size < 33) return Corrupt("header truncated");
    const uint8_t max_len = data[0];
    uint8_t len[256] = {};
    int present = 0;
    for (int s = 0; s < 256; ++s) present += (data[1 + s / 8] >> (s % 8)) & 1;
    if (present < 2) return Corrupt("fewer than two symbols");
    const size_t nibble_bytes = static_cast<size_t>(present + 1) / 2;
    if (size < 33 + nibble_bytes) return Corrupt("code lengths truncated");
    int idx = 0;
    uint8_t seen_max = 0;
    for (int s = 0; s < 256; ++s) {
      if (((data[1 + s / 8] >> (s % 8)) & 1) == 0) continue;
      const uint8_t b = data[33 + idx / 2];
      len[s] = (idx % 2 == 0) ? (b & 15) : (b >> 4);
      ++idx;
      if (len[s] == 0) return Corrupt("present symbol with zero length");
      seen_max = std::max(seen_max, len[s]);
    }
    if (seen_max != max_len) return Corrupt("max code length disagrees with the lengths");
    *pos = 33 + nibble_bytes;
    if (have_tables_ && std::memcmp(len, len_, sizeof(len)) == 0) return absl::OkStatus();
    uint16_t code[256];
    if (!CanonicalCodes(len, code)) return Corrupt("code lengths do not form a complete code");
    std::memcpy(len_, len, sizeof(len));
    BuildTables(code);
    have_tables_ = true;
    return absl::OkStatus();
  }

  void BuildTables(const uint16_t (&code)[256]) {
    for (int s = 0; s < 256; ++s) {
      if (len_[s] == 0) continue;
      for (uint32_t fill = code[s]; fill < kHuffTableSize; fill += 1u << len_[s]) {
        single_[fill] = static_cast<uint16_t>(s | (len_[s] << 8));
      }
    }
    for (uint32_t i = 0; i < kHuffTableSize; ++i) {
      const uint32_t e1 = single_[i];
      const uint32_t l1 = e1 >> 8;
      const uint32_t e2 = single_[i >> l1];
      const uint32_t l2 = e2 >> 8;
      double_[i] = (l1 + l2 <= kHuffMaxBits)
                       ? (e1 & 0xFF) | ((e2 & 0xFF) << 8) | ((l1 + l2) << 16) | (2u << 24)
                       : (e1 & 0xFF) | (l1 << 16) | (1u << 24);
    }
  }

  // One decoding step: up to two symbols from the low 11 bits of x.
  static MOONCAKE_HUFF_INLINE void Step2(const uint32_t* table, uint64_t& x, uint8_t*& out) {
    const uint32_t e = table[x & (kHuffTableSize - 1)];
    const uint16_t two = static_cast<uint16_t>(e);
    std::memcpy(out, &two, 2);
    out += e >> 24;
    x >>= (e >> 16) & 63;
  }

  // The next 57 bits of a stream at bit offset b, with a sentinel 1 above them: after
  // consuming k <= 55 bits the sentinel sits at 57 - k, so k = clz(x) - 6 with no
  // per-step bookkeeping.
  static MOONCAKE_HUFF_INLINE uint64_t Window(const uint8_t* data, size_t b) {
    constexpr uint64_t kLow57 = (uint64_t{1} << 57) - 1;
    return ((LoadLE64(data + (b >> 3)) >> (b & 7)) & kLow57) | (uint64_t{1} << 57);
  }
  static MOONCAKE_HUFF_INLINE size_t Consumed(uint64_t x) {
    return static_cast<size_t>(__builtin_clzll(x)) - 6;
  }

  // `iters` rounds of: take each stream's next 57 bits, run 5 steps (<= 55 bits, <= 10
  // symbols). The caller guarantees every load and store stays in bounds.
  static MOONCAKE_HUFF_INLINE void FastLoopImpl(const uint8_t* data, const uint32_t* table,
                                                size_t iters, size_t (&bit)[kHuffStreams],
                                                uint8_t* (&out)[kHuffStreams]) {
    size_t b0 = bit[0], b1 = bit[1], b2 = bit[2], b3 = bit[3];
    uint8_t *o0 = out[0], *o1 = out[1], *o2 = out[2], *o3 = out[3];
    for (size_t it = 0; it < iters; ++it) {
      uint64_t x0 = Window(data, b0);
      uint64_t x1 = Window(data, b1);
      uint64_t x2 = Window(data, b2);
      uint64_t x3 = Window(data, b3);
#pragma GCC unroll 5
      for (int r = 0; r < 5; ++r) {
        Step2(table, x0, o0);
        Step2(table, x1, o1);
        Step2(table, x2, o2);
        Step2(table, x3, o3);
      }
      b0 += Consumed(x0);
      b1 += Consumed(x1);
      b2 += Consumed(x2);
      b3 += Consumed(x3);
    }
    bit[0] = b0, bit[1] = b1, bit[2] = b2, bit[3] = b3;
    out[0] = o0, out[1] = o1, out[2] = o2, out[3] = o3;
  }
  MOONCAKE_HUFF_SCALAR static void FastLoopGeneric(const uint8_t* data, const uint32_t* table,
                                                   size_t iters, size_t (&bit)[kHuffStreams],
                                                   uint8_t* (&out)[kHuffStreams]) {
    FastLoopImpl(data, table, iters, bit, out);
  }
#if defined(__x86_64__)
  __attribute__((target("bmi2"))) MOONCAKE_HUFF_SCALAR static void FastLoopBmi2(
      const uint8_t* data, const uint32_t* table, size_t iters, size_t (&bit)[kHuffStreams],
      uint8_t* (&out)[kHuffStreams]) {
    FastLoopImpl(data, table, iters, bit, out);
  }
#endif

  absl::Status DecodeStreams(const uint8_t* data, const size_t (&start)[kHuffStreams + 1],
                             size_t readable, uint8_t* out, size_t n) {
    size_t bit[kHuffStreams];
    uint8_t* cur[kHuffStreams];
    uint8_t* end[kHuffStreams];
    for (int j = 0; j < kHuffStreams; ++j) {
      bit[j] = start[j] * 8;
      cur[j] = out + SegmentBegin(n, j);
      end[j] = out + SegmentBegin(n, j + 1);
    }
    const bool bmi2 = HasBmi2();
    for (;;) {
      // Rounds every stream can surely run: 10 symbols (+1 spare byte for the 2-byte
      // store) of room and an 8-byte load within `readable` at up to 55 bits per round.
      size_t iters = SIZE_MAX;
      for (int j = 0; j < kHuffStreams; ++j) {
        const size_t room = static_cast<size_t>(end[j] - cur[j]);
        const size_t last_bit = readable >= 8 ? (readable - 8) * 8 : 0;
        if (room < 11 || readable < 8 || bit[j] > last_bit) {
          iters = 0;
          break;
        }
        iters = std::min({iters, (room - 11) / 10 + 1, (last_bit - bit[j]) / 55 + 1});
      }
      if (iters == 0) break;
#if defined(__x86_64__)
      if (bmi2) {
        FastLoopBmi2(data, double_, iters, bit, cur);
        continue;
      }
#endif
      FastLoopGeneric(data, double_, iters, bit, cur);
    }
    (void)bmi2;
    for (int j = 0; j < kHuffStreams; ++j) {
      size_t b = bit[j];
      for (uint8_t* o = cur[j]; o < end[j]; ++o) {
        const size_t byte = b >> 3;
        uint64_t v = 0;
        if (byte + 8 <= readable) {
          v = LoadLE64(data + byte);
        } else if (byte < readable) {
          std::memcpy(&v, data + byte, readable - byte);
        }
        const uint32_t e = single_[(v >> (b & 7)) & (kHuffTableSize - 1)];
        *o = static_cast<uint8_t>(e);
        b += e >> 8;
      }
      if ((b - start[j] * 8 + 7) / 8 != start[j + 1] - start[j]) {
        return Corrupt("a stream's size does not match the symbols it codes");
      }
    }
    return absl::OkStatus();
  }

  uint8_t len_[256] = {};
  bool have_tables_ = false;
  uint16_t single_[kHuffTableSize];
  uint32_t double_[kHuffTableSize];
};

}  // namespace mooncake::compress_internal

#undef MOONCAKE_HUFF_INLINE
#undef MOONCAKE_HUFF_SCALAR

#endif  // MOONCAKE_COMPRESS_INTERNAL_HUFFMAN_H_
