// BytePlaneCodec: dtype-aware lossless coding of float tensors.
//
// Each chunk is split into byte planes (plane j = byte j of every element). In bf16 and
// fp16 the high plane (sign and exponent bits) is highly skewed - values of one channel
// share a few exponents - while the low plane (mantissa bits) is close to uniform. Each
// plane is coded with whichever of these is smallest:
//   raw        the plane's bytes as they are (the usual choice for mantissa planes),
//   constant   one byte, when the plane holds a single value,
//   Huffman    a static order-0 Huffman block (internal/huffman.h) with its table inline.
// A plane is Huffman-coded only if that saves at least Config::min_plane_saving of it;
// for large planes a 4 KiB sample decides first, so a near-uniform plane costs one copy.
// Order-0 coding of the planes is what the order-0 entropy bound measures; zstd's match
// finder adds time and, on float data, almost nothing else.
//
// Chunk payload: for each plane j = 0 .. elem-1 a mode byte (0 raw, 1 constant,
// 2 Huffman) and its data, then the (raw_bytes % elem) tail bytes.
#ifndef MOONCAKE_COMPRESS_BYTE_PLANE_CODEC_H_
#define MOONCAKE_COMPRESS_BYTE_PLANE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "mooncake/base/assert.h"
#include "mooncake/compress/codec.h"
#include "mooncake/compress/internal/byte_planes.h"
#include "mooncake/compress/internal/chunked_codec.h"
#include "mooncake/compress/internal/entropy.h"
#include "mooncake/compress/internal/huffman.h"

namespace mooncake::compress {
namespace byte_plane_internal {

enum class PlaneMode : uint8_t { kRaw = 0, kConstant = 1, kHuffman = 2 };
inline constexpr size_t kMaxPlanes = 4;
inline constexpr size_t kSampleBlocks = 16;
inline constexpr size_t kSampleBlockBytes = 256;

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
    const uint8_t* planes[kMaxPlanes];
    if (elem == 1) {
      planes[0] = src;
    } else {
      buffer_.resize(n * elem);
      uint8_t* split[kMaxPlanes];
      for (size_t j = 0; j < elem; ++j) planes[j] = split[j] = buffer_.data() + j * n;
      compress_internal::SplitPlanes(src, n, elem, split);
    }
    auto* dst = reinterpret_cast<uint8_t*>(out.data());
    size_t pos = 0;
    for (size_t j = 0; j < elem; ++j) {
      const size_t wrote = EncodePlane(planes[j], n, dst + pos, out.size() - pos);
      if (wrote == 0) return 0;
      pos += wrote;
    }
    const size_t tail = raw.size() - n * elem;
    if (pos + tail > out.size()) return 0;
    std::memcpy(dst + pos, src + n * elem, tail);
    return pos + tail;
  }

  absl::Status DecodeChunk(std::span<const std::byte> payload, size_t readable_after, DType dtype,
                           std::span<std::byte> raw_out) {
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
      } else if (mode == PlaneMode::kHuffman) {
        size_t used = 0;
        absl::Status s =
            huffman_decoder_.Decode(src + pos, payload.size() - pos,
                                    payload.size() - pos + readable_after, scratch, n, &used);
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
    if (elem == 1) {
      if (planes[0] != dst) std::memcpy(dst, planes[0], n);
    } else {
      compress_internal::MergePlanes(planes, n, elem, dst);
    }
    std::memcpy(dst + n * elem, src + pos, tail);
    return absl::OkStatus();
  }

 private:
  // Sampled order-0 estimate says the plane will not save min_plane_saving.
  bool LooksIncompressible(const uint8_t* plane, size_t n) const {
    if (n < 4 * kSampleBlocks * kSampleBlockBytes) return false;  // small: just count it all
    uint64_t counts[256] = {};
    const size_t step = (n - kSampleBlockBytes) / (kSampleBlocks - 1);
    for (size_t b = 0; b < kSampleBlocks; ++b) {
      const uint8_t* p = plane + b * step;
      for (size_t i = 0; i < kSampleBlockBytes; ++i) ++counts[p[i]];
    }
    const double total = kSampleBlocks * kSampleBlockBytes;
    const double bits = compress_internal::EntropyBits(counts, kSampleBlocks * kSampleBlockBytes);
    return bits / 8 > total * (1 - config_.min_plane_saving);
  }

  // Writes one plane (mode byte + data) into dst[0, room); returns bytes written, or 0 if
  // even the raw form does not fit.
  size_t EncodePlane(const uint8_t* plane, size_t n, uint8_t* dst, size_t room) {
    if (!LooksIncompressible(plane, n)) {
      const size_t huff = huffman_.Plan(plane, n);
      if (huff == 0) {  // one distinct value
        if (room < 2) return 0;
        dst[0] = static_cast<uint8_t>(PlaneMode::kConstant);
        dst[1] = plane[0];
        return 2;
      }
      if (static_cast<double>(huff) <= static_cast<double>(n) * (1 - config_.min_plane_saving) &&
          1 + huff <= room) {
        dst[0] = static_cast<uint8_t>(PlaneMode::kHuffman);
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
