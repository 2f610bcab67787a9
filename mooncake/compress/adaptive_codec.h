// AdaptiveCodec: an inner codec (BytePlaneCodec by default) behind a sampling gate.
//
// Before coding a chunk it estimates the chunk's ratio from a small sample (order-0
// entropy of each byte plane of 8 evenly spaced 512-byte blocks). Below
// Config::min_ratio the chunk is stored raw without running the inner coder, so data that
// will not compress (already compressed, encrypted, random mantissas) costs a checksum, a
// 4 KiB histogram and a memcpy. Frames are ordinary frames of the inner codec (same id),
// so the inner codec decodes them and vice versa.
#ifndef MOONCAKE_COMPRESS_ADAPTIVE_CODEC_H_
#define MOONCAKE_COMPRESS_ADAPTIVE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

#include "absl/status/status.h"
#include "mooncake/base/assert.h"
#include "mooncake/compress/byte_plane_codec.h"
#include "mooncake/compress/codec.h"
#include "mooncake/compress/internal/chunked_codec.h"
#include "mooncake/compress/internal/entropy.h"

namespace mooncake::compress {
namespace adaptive_internal {

inline constexpr size_t kSampleBlocks = 8;
inline constexpr size_t kSampleBlockBytes = 512;

// Estimated raw/coded ratio of `raw` read as `dtype`, from kSampleBlocks blocks.
inline double SampledRatio(std::span<const std::byte> raw, DType dtype) {
  const size_t elem = ElementSize(dtype);
  const size_t sample = kSampleBlocks * kSampleBlockBytes;
  if (raw.size() <= 2 * sample) {
    const double bound = compress_internal::PlaneEntropyBoundBytes(raw, dtype);
    return bound > 0 ? static_cast<double>(raw.size()) / bound : 1e9;
  }
  // Blocks start on element boundaries so planes stay aligned.
  const size_t step = (raw.size() - kSampleBlockBytes) / (kSampleBlocks - 1) / elem * elem;
  uint64_t counts[4][256];
  std::memset(counts, 0, sizeof(counts[0]) * elem);
  const auto* p = reinterpret_cast<const uint8_t*>(raw.data());
  for (size_t b = 0; b < kSampleBlocks; ++b) {
    const uint8_t* block = p + b * step;
    for (size_t i = 0; i < kSampleBlockBytes; i += elem) {
      for (size_t j = 0; j < elem; ++j) ++counts[j][block[i + j]];
    }
  }
  double bits = 0;
  for (size_t j = 0; j < elem; ++j) {
    bits += compress_internal::EntropyBits(counts[j], sample / elem);
  }
  return bits > 0 ? static_cast<double>(sample) * 8 / bits : 1e9;
}

template <compress_internal::ChunkCoder Inner>
class AdaptiveCoder {
 public:
  struct Config {
    // Chunks whose sampled ratio is below this are stored raw.
    double min_ratio = 1.05;
    typename Inner::Config inner = {};
  };
  static constexpr CodecId kId = Inner::kId;

  explicit AdaptiveCoder(const Config& config) : config_(config), inner_(config.inner) {
    MC_ASSERT(config.min_ratio >= 1.0, "min_ratio below 1 would code data that grows");
  }

  size_t EncodeChunk(std::span<const std::byte> raw, DType dtype, std::span<std::byte> out) {
    if (SampledRatio(raw, dtype) < config_.min_ratio) return 0;
    return inner_.EncodeChunk(raw, dtype, out);
  }

  absl::Status DecodeChunk(std::span<const std::byte> payload, size_t readable_after, DType dtype,
                           std::span<std::byte> raw_out) {
    return inner_.DecodeChunk(payload, readable_after, dtype, raw_out);
  }

  // Passes a checksum computed on the way through (see ChunkedCodec).
  absl::Status DecodeChunk(std::span<const std::byte> payload, size_t readable_after, DType dtype,
                           std::span<std::byte> raw_out, std::optional<uint64_t>* checksum) requires
      requires(Inner& i) {
    i.DecodeChunk(payload, readable_after, dtype, raw_out, checksum);
  }
  { return inner_.DecodeChunk(payload, readable_after, dtype, raw_out, checksum); }

 private:
  Config config_;
  Inner inner_;
};

}  // namespace adaptive_internal

template <typename InnerCodec = BytePlaneCodec>
class AdaptiveCodec : public compress_internal::ChunkedCodec<
                          adaptive_internal::AdaptiveCoder<typename InnerCodec::Coder>> {
 public:
  using Coder = adaptive_internal::AdaptiveCoder<typename InnerCodec::Coder>;
  using Config = typename Coder::Config;
  explicit AdaptiveCodec(CodecOptions options = {}, Config config = {})
      : compress_internal::ChunkedCodec<Coder>(options, config) {}
};
static_assert(Codec<AdaptiveCodec<>>);

}  // namespace mooncake::compress

#endif  // MOONCAKE_COMPRESS_ADAPTIVE_CODEC_H_
