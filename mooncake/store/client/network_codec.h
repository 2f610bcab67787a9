// Compression on the client's network path (ClientOptions::network_compression,
// docs/client.md "Compression on the network path"): which values qualify,
// when compressing pays, and the stored form's encode and decode.
//
// A value qualifies when its TensorMeta says bf16, fp16 or fp8 (e4m3, e5m2),
// has a shape whose element count x element size is the value's size, and
// codec 0 (the caller did not compress it already). Such a value is stored as
// one compress frame (docs/frame_format.md) of AdaptiveCodec<BytePlaneCodec>
// with TensorMeta.codec = compress::CodecId::kBytePlane; its raw size stays
// shape x dtype, which is how a reader sizes the destination before it reads.
// The frame checks every chunk's raw bytes (XXH3) as it decodes, so a corrupt
// or foreign stored value is a DATA_LOSS Status, never wrong bytes.
//
// Thread-safety: the free functions may be called concurrently (each thread
// keeps its own codec scratch); LinkEstimator is lock-free.
#ifndef MOONCAKE_STORE_CLIENT_NETWORK_CODEC_H_
#define MOONCAKE_STORE_CLIENT_NETWORK_CODEC_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/compress/adaptive_codec.h"
#include "mooncake/compress/codec.h"
#include "mooncake/compress/frame.h"
#include "mooncake/compress/when_to_compress.h"
#include "mooncake/store/client/client_options.h"
#include "mooncake/store/rpc/master.pb.h"
#include "mooncake/store/rpc/tensor_meta.h"

namespace mooncake::client {

// The codec the client writes (and the only one it reads): byte planes +
// Huffman, chunks that would not shrink stored raw.
using NetworkCodec = compress::AdaptiveCodec<compress::BytePlaneCodec>;
inline constexpr uint32_t kNetworkCodecId = static_cast<uint32_t>(NetworkCodec::kId);

// Values below this are never compressed: the frame's fixed cost and a
// codec call outweigh what a few KiB could save.
inline constexpr uint64_t kMinCompressedValueBytes = 4096;

// The float TensorMeta dtypes the client compresses, with their compress
// dtype.
struct NetworkDTypePair {
  store::proto::DType proto;
  compress::DType dtype;
};
inline constexpr NetworkDTypePair kNetworkDTypes[] = {
    {store::proto::DTYPE_BF16, compress::DType::kBFloat16},
    {store::proto::DTYPE_FP16, compress::DType::kFloat16},
    {store::proto::DTYPE_FP8_E4M3, compress::DType::kFloat8E4M3},
    {store::proto::DTYPE_FP8_E5M2, compress::DType::kFloat8E5M2},
};

// The compress dtype of a float TensorMeta dtype the client compresses.
inline std::optional<compress::DType> NetworkDType(store::proto::DType d) {
  for (const NetworkDTypePair& p : kNetworkDTypes) {
    if (p.proto == d) return p.dtype;
  }
  return std::nullopt;
}

// shape x element size of a float TensorMeta (nullopt: not a dtype the
// client compresses, no shape, or an overflow).
inline std::optional<uint64_t> RawTensorBytes(const store::proto::TensorMeta& t) {
  if (!NetworkDType(t.dtype()).has_value()) return std::nullopt;
  return rpc::TensorBytes(t);
}

// What one core of the first 2-vCPU VM measured per dtype (docs/compress.md,
// "Measured"; raw bytes/s, the slower ends of the ranges). fp8 is one plane
// coded whole, ~1 GB/s both ways.
inline compress::CodecProfile NetworkCodecProfile(compress::DType d) {
  switch (d) {
    case compress::DType::kBFloat16:
      return {.ratio = 1.40, .compress_bytes_per_s = 1.8e9, .decompress_bytes_per_s = 3.5e9};
    case compress::DType::kFloat16:
      return {.ratio = 1.11, .compress_bytes_per_s = 1.8e9, .decompress_bytes_per_s = 3.5e9};
    case compress::DType::kFloat8E5M2:
      return {.ratio = 1.25, .compress_bytes_per_s = 1.0e9, .decompress_bytes_per_s = 1.0e9};
    default:
      return {.ratio = 1.09, .compress_bytes_per_s = 1.0e9, .decompress_bytes_per_s = 1.0e9};
  }
}

// Whether a put of `value_bytes` described by `tensor` is compressed under
// `mode` over a link of `link_bytes_per_s` (0: unknown, kAuto then says no).
// Sequential stages: the client compresses the whole value, then writes it;
// a reader reads it whole, then decodes.
inline std::optional<compress::DType> ShouldCompress(NetworkCompression mode, uint64_t value_bytes,
                                                     const store::proto::TensorMeta* tensor,
                                                     double link_bytes_per_s) {
  if (mode == NetworkCompression::kOff || tensor == nullptr || tensor->codec() != 0) {
    return std::nullopt;
  }
  if (value_bytes < kMinCompressedValueBytes) return std::nullopt;
  if (RawTensorBytes(*tensor) != std::optional<uint64_t>(value_bytes)) return std::nullopt;
  const compress::DType d = *NetworkDType(tensor->dtype());
  if (mode == NetworkCompression::kAlways) return d;
  if (!(link_bytes_per_s > 0)) return std::nullopt;
  const compress::TransferDecision decision = compress::DecideCompression(
      value_bytes, link_bytes_per_s, NetworkCodecProfile(d), compress::Overlap::kSequential);
  if (!decision.compress) return std::nullopt;
  return d;
}

// The stored form of `value`: one frame, or nullopt when it would not be
// smaller than the value (then the value is stored raw).
inline std::optional<std::string> CompressValue(std::string_view value, compress::DType dtype) {
  thread_local NetworkCodec codec;
  std::string frame(codec.MaxCompressedSize(value.size()), '\0');
  const absl::StatusOr<size_t> n =
      codec.Compress(std::as_bytes(std::span<const char>(value.data(), value.size())), dtype,
                     std::as_writable_bytes(std::span<char>(frame.data(), frame.size())));
  MC_ASSERT(n.ok(), "Compress into MaxCompressedSize bytes cannot fail");
  if (*n >= value.size()) return std::nullopt;
  frame.resize(*n);
  return frame;
}

// Decodes a stored value written with TensorMeta.codec = `codec` into
// dst[0, raw_bytes). FAILED_PRECONDITION: a codec this client does not know;
// DATA_LOSS: a frame that is corrupt, of another codec or dtype, or whose raw
// size is not `raw_bytes`. REQUIRES: dst.size() >= raw_bytes.
inline absl::Status DecompressValue(std::span<const std::byte> stored, uint32_t codec,
                                    store::proto::DType dtype, uint64_t raw_bytes,
                                    std::span<std::byte> dst) {
  MC_ASSERT(dst.size() >= raw_bytes, "DecompressValue: the caller sizes dst");
  if (codec != kNetworkCodecId) {
    return absl::FailedPreconditionError(
        absl::StrCat("stored with codec ", codec,
                     ", which this client cannot decode (written by a newer one?)"));
  }
  const absl::StatusOr<compress::FrameInfo> info = compress::ReadFrameInfo(stored);
  if (!info.ok()) {
    return absl::DataLossError(
        absl::StrCat("compressed value is not a valid frame: ", info.status().message()));
  }
  const std::optional<compress::DType> want = NetworkDType(dtype);
  if (info->codec != NetworkCodec::kId || !want.has_value() || info->dtype != *want ||
      info->raw_bytes != raw_bytes) {
    return absl::DataLossError(absl::StrCat(
        "compressed value's frame says codec ", static_cast<int>(info->codec), ", dtype ",
        AbslView(compress::DTypeName(info->dtype)), ", ", info->raw_bytes,
        " raw bytes; its TensorMeta says ", codec, ", ",
        AbslView(want.has_value() ? compress::DTypeName(*want) : "a dtype not compressed"), ", ",
        raw_bytes));
  }
  thread_local NetworkCodec decoder;
  const absl::StatusOr<size_t> n = decoder.Decompress(stored, dst.first(raw_bytes));
  if (!n.ok()) {
    return absl::DataLossError(
        absl::StrCat("compressed value failed to decode: ", n.status().message()));
  }
  if (*n != raw_bytes) {
    return absl::DataLossError(
        absl::StrCat("compressed value decoded to ", *n, " bytes, not ", raw_bytes));
  }
  return absl::OkStatus();
}

// The client's recent transfer throughput: a moving average (weight 1/4) of
// bytes / seconds over transfer batches of at least kMinSampleBytes (smaller
// ones measure latency, not bandwidth).
class LinkEstimator {
 public:
  static constexpr uint64_t kMinSampleBytes = 256 << 10;

  void Observe(uint64_t bytes, double seconds) {
    if (bytes < kMinSampleBytes || !(seconds > 0)) return;
    const double sample = static_cast<double>(bytes) / seconds;
    uint64_t old = bytes_per_s_.load(std::memory_order_relaxed);
    uint64_t next = 0;
    do {
      const double prev = static_cast<double>(old);
      next = static_cast<uint64_t>(old == 0 ? sample : prev + (sample - prev) / 4);
      // relaxed: an estimate; a lost update costs one sample.
    } while (!bytes_per_s_.compare_exchange_weak(old, next, std::memory_order_relaxed));
  }
  uint64_t bytes_per_s() const { return bytes_per_s_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> bytes_per_s_{0};
};

}  // namespace mooncake::client

#endif  // MOONCAKE_STORE_CLIENT_NETWORK_CODEC_H_
