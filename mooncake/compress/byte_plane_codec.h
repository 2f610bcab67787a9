// BytePlaneCodec: dtype-aware lossless coding of float tensors.
//
// Each chunk is split into byte planes (plane j = byte j of every element). In bf16 and
// fp16 the high plane (sign and exponent bits) is highly skewed - values of one channel
// share a few exponents - while the low plane (mantissa bits) is close to uniform. Each
// plane is coded with whichever of these is smallest:
//   raw        the plane's bytes as they are (the usual choice for mantissa planes),
//   constant   one byte, when the plane holds a single value,
//   Huffman    a static order-0 Huffman block (internal/huffman.h) with its table inline:
//              8 streams (mode 3, written since frame version 2) or 4 (mode 2, version 1
//              frames; still decoded).
// A plane is Huffman-coded only if that saves at least Config::min_plane_saving of it;
// for large planes a 4 KiB sample decides first, so a near-uniform plane costs one copy.
// Order-0 coding of the planes is what the order-0 entropy bound measures; zstd's match
// finder adds time and, on float data, almost nothing else.
//
// Chunk payload: for each plane j = 0 .. elem-1 a mode byte (0 raw, 1 constant,
// 2 Huffman with 4 streams, 3 Huffman with 8 streams) and its data, then the
// (raw_bytes % elem) tail bytes.
#ifndef MOONCAKE_COMPRESS_BYTE_PLANE_CODEC_H_
#define MOONCAKE_COMPRESS_BYTE_PLANE_CODEC_H_

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "mooncake/base/assert.h"
#include "mooncake/compress/codec.h"
#include "mooncake/compress/internal/byte_planes.h"
#include "mooncake/compress/internal/chunked_codec.h"
#include "mooncake/compress/internal/entropy.h"
#include "mooncake/compress/internal/huffman.h"
#include "mooncake/compress/internal/huffman_decoder.h"
#include "mooncake/compress/internal/merge_checksum.h"

namespace mooncake::compress {
namespace byte_plane_internal {

enum class PlaneMode : uint8_t { kRaw = 0, kConstant = 1, kHuffman4 = 2, kHuffman8 = 3 };
inline constexpr size_t kMaxPlanes = 4;
inline constexpr size_t kSampleBlocks = 8;
inline constexpr size_t kSampleBlockBytes = 256;
inline constexpr size_t kSampleBytes = kSampleBlocks * kSampleBlockBytes;

// c * log2(c) for the sample counts, so a sampled entropy costs 256 table reads.
inline const std::array<float, kSampleBytes + 1>& CLog2CTable() {
  static const std::array<float, kSampleBytes + 1> table = [] {
    std::array<float, kSampleBytes + 1> t{};
    for (size_t c = 1; c <= kSampleBytes; ++c) {
      t[c] = static_cast<float>(static_cast<double>(c) * std::log2(static_cast<double>(c)));
    }
    return t;
  }();
  return table;
}

class BytePlaneCoder {
 public:
  struct Config {
    double min_plane_saving = 0.02;
  };
  static constexpr CodecId kId = CodecId::kBytePlane;

  explicit BytePlaneCoder(const Config& config) : config_(config) {}

  size_t EncodeChunk(std::span<const std::byte> raw, DType dtype, std::span<std::byte> out) {
    const size_t elem = ElementSize(dtype);
    const size_t n = raw.size() / elem;
    if (n == 0) return 0;
    const auto* src = reinterpret_cast<const uint8_t*>(raw.data());
    auto* dst = reinterpret_cast<uint8_t*>(out.data());
    size_t pos = 0;
    if (elem == 2 && out.size() > n && LooksIncompressible(src, n, 2)) {
      // The usual bf16/fp16 case: the low (mantissa) plane is stored raw, so split it
      // straight into the payload and only the high plane into scratch.
      buffer_.resize(n);
      dst[0] = static_cast<uint8_t>(PlaneMode::kRaw);
      uint8_t* split[2] = {dst + 1, buffer_.data()};
      compress_internal::SplitPlanes(src, n, 2, split);
      pos = 1 + n;
      const size_t wrote = EncodePlane(buffer_.data(), n, dst + pos, out.size() - pos, false);
      if (wrote == 0) return 0;
      pos += wrote;
    } else {
      const uint8_t* planes[kMaxPlanes];
      if (elem == 1) {
        planes[0] = src;
      } else {
        buffer_.resize(n * elem);
        uint8_t* split[kMaxPlanes];
        for (size_t j = 0; j < elem; ++j) planes[j] = split[j] = buffer_.data() + j * n;
        compress_internal::SplitPlanes(src, n, elem, split);
      }
      for (size_t j = 0; j < elem; ++j) {
        const size_t wrote = EncodePlane(planes[j], n, dst + pos, out.size() - pos, true);
        if (wrote == 0) return 0;
        pos += wrote;
      }
    }
    const size_t tail = raw.size() - n * elem;
    if (pos + tail > out.size()) return 0;
    std::memcpy(dst + pos, src + n * elem, tail);
    return pos + tail;
  }

  absl::Status DecodeChunk(std::span<const std::byte> payload, size_t readable_after, DType dtype,
                           std::span<std::byte> raw_out) {
    return DecodeChunk(payload, readable_after, dtype, raw_out, nullptr);
  }

  // The same; for two-byte dtypes it also sets *checksum to ChunkChecksum(raw_out),
  // computed while merging the planes (internal/merge_checksum.h). Otherwise, or when
  // checksum is null, *checksum is left alone.
  absl::Status DecodeChunk(std::span<const std::byte> payload, size_t readable_after, DType dtype,
                           std::span<std::byte> raw_out, std::optional<uint64_t>* checksum) {
    const size_t elem = ElementSize(dtype);
    const size_t n = raw_out.size() / elem;
    if (n == 0) return absl::DataLossError("a chunk smaller than one element is never coded");
    const auto* src = reinterpret_cast<const uint8_t*>(payload.data());
    auto* dst = reinterpret_cast<uint8_t*>(raw_out.data());
    buffer_.resize(n * elem);
    const uint8_t* planes[kMaxPlanes];
    size_t pos = 0;
    for (size_t j = 0; j < elem; ++j) {
      uint8_t* scratch = elem == 1 ? dst : buffer_.data() + j * n;
      if (pos >= payload.size()) return absl::DataLossError("plane mode byte missing");
      const auto mode = static_cast<PlaneMode>(src[pos++]);
      if (mode == PlaneMode::kRaw) {
        if (payload.size() - pos < n) return absl::DataLossError("raw plane truncated");
        planes[j] = src + pos;
        pos += n;
      } else if (mode == PlaneMode::kConstant) {
        if (pos >= payload.size()) return absl::DataLossError("constant plane truncated");
        std::memset(scratch, src[pos++], n);
        planes[j] = scratch;
      } else if (mode == PlaneMode::kHuffman4 || mode == PlaneMode::kHuffman8) {
        const int streams = mode == PlaneMode::kHuffman8 ? compress_internal::kHuffStreamsV2
                                                         : compress_internal::kHuffStreamsV1;
        size_t used = 0;
        absl::Status s = huffman_decoder_.Decode(src + pos, payload.size() - pos,
                                                 payload.size() - pos + readable_after, scratch, n,
                                                 &used, streams);
        if (!s.ok()) return s;
        planes[j] = scratch;
        pos += used;
      } else {
        return absl::DataLossError("unknown plane mode");
      }
    }
    const size_t tail = raw_out.size() - n * elem;
    if (payload.size() - pos != tail) {
      return absl::DataLossError("chunk payload size does not match its planes");
    }
    if (elem == 2 && checksum != nullptr) {
      *checksum = compress_internal::MergeTwoPlanesWithChecksum(planes[0], planes[1], n, src + pos,
                                                                tail, dst);
      return absl::OkStatus();
    }
    if (elem == 1) {
      if (planes[0] != dst) std::memcpy(dst, planes[0], n);
    } else {
      compress_internal::MergePlanes(planes, n, elem, dst);
    }
    std::memcpy(dst + n * elem, src + pos, tail);
    return absl::OkStatus();
  }

 private:
  // Sampled order-0 estimate says plane `plane` of n elements of `stride` bytes at src
  // will not save min_plane_saving.
  bool LooksIncompressible(const uint8_t* src, size_t n, size_t stride, size_t plane = 0) const {
    if (n < 4 * kSampleBytes) return false;  // small: just count it all
    // Four tables: consecutive equal bytes do not wait on each other's increments.
    uint16_t counts[4][256] = {};
    const size_t step = (n - kSampleBlockBytes) / (kSampleBlocks - 1);
    for (size_t b = 0; b < kSampleBlocks; ++b) {
      const uint8_t* p = src + b * step * stride + plane;
      for (size_t i = 0; i < kSampleBlockBytes; i += 4) {
        ++counts[0][p[i * stride]];
        ++counts[1][p[(i + 1) * stride]];
        ++counts[2][p[(i + 2) * stride]];
        ++counts[3][p[(i + 3) * stride]];
      }
    }
    const auto& clog2c = CLog2CTable();
    float sum = 0;
    for (int s = 0; s < 256; ++s) {
      sum += clog2c[counts[0][s] + counts[1][s] + counts[2][s] + counts[3][s]];
    }
    // Entropy in bits = total log2 total - sum c log2 c.
    const double bits = static_cast<double>(clog2c[kSampleBytes]) - sum;
    return bits / 8 > kSampleBytes * (1 - config_.min_plane_saving);
  }

  // Writes one plane (mode byte + data) into dst[0, room); returns bytes written, or 0 if
  // even the raw form does not fit. `sample`: first check a sample for incompressibility.
  size_t EncodePlane(const uint8_t* plane, size_t n, uint8_t* dst, size_t room, bool sample) {
    if (!sample || !LooksIncompressible(plane, n, 1)) {
      const size_t huff = huffman_.Plan(plane, n, compress_internal::kHuffStreamsV2);
      if (huff == 0) {  // one distinct value
        if (room < 2) return 0;
        dst[0] = static_cast<uint8_t>(PlaneMode::kConstant);
        dst[1] = plane[0];
        return 2;
      }
      if (static_cast<double>(huff) <= static_cast<double>(n) * (1 - config_.min_plane_saving) &&
          1 + huff <= room) {
        dst[0] = static_cast<uint8_t>(PlaneMode::kHuffman8);
        huffman_.Write(plane, dst + 1);
        return 1 + huff;
      }
    }
    if (1 + n > room) return 0;
    dst[0] = static_cast<uint8_t>(PlaneMode::kRaw);
    std::memcpy(dst + 1, plane, n);
    return 1 + n;
  }

  Config config_;
  std::vector<uint8_t> buffer_;
  compress_internal::HuffmanEncoder huffman_;
  compress_internal::HuffmanDecoder huffman_decoder_;
};

}  // namespace byte_plane_internal

class BytePlaneCodec : public compress_internal::ChunkedCodec<byte_plane_internal::BytePlaneCoder> {
 public:
  using Coder = byte_plane_internal::BytePlaneCoder;
  explicit BytePlaneCodec(CodecOptions options = {}, Coder::Config config = {})
      : compress_internal::ChunkedCodec<Coder>(options, config) {}
};
static_assert(Codec<BytePlaneCodec>);

}  // namespace mooncake::compress

#endif  // MOONCAKE_COMPRESS_BYTE_PLANE_CODEC_H_
