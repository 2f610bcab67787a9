// The Codec concept: lossless, dtype-aware compression of KV-cache tensors.
//
// A codec turns `n` raw bytes into one self-describing frame (docs/frame_format.md) and
// back. The frame names the codec, the element type, the raw size and, per chunk, the
// stored size and an XXH3-64 checksum of the chunk's raw bytes; decoding verifies every
// checksum it touches, so corruption comes back as a Status, never as wrong bytes.
//
// Semantics
//   MaxCompressedSize(n)      an upper bound on the frame size for n raw bytes; a dst of
//                             this size never makes Compress fail. O(1).
//   Compress(src, dtype, dst) writes one frame into dst, returns its size. `dtype` says
//                             how to read the bytes; any byte count is accepted (a tail
//                             shorter than one element is stored raw). Fails only on a
//                             dst smaller than needed.
//   Decompress(frame, dst)    decodes a whole frame (exactly `frame.size()` bytes) into
//                             dst, returns the raw size. Corrupt, truncated or foreign
//                             input -> DataLoss / InvalidArgument, never UB.
//   DecompressRange(frame, offset, dst)
//                             decodes raw bytes [offset, offset + dst.size()) only,
//                             touching just the chunks that overlap them.
//   kId                       the CodecId written into frames; a codec decodes frames
//                             carrying its own id (AdaptiveCodec: its inner codec's).
//
// Thread-safety: a codec object owns reusable scratch state (zstd contexts, plane buffers),
// so one object serves one caller at a time; use one per thread. With options.threads > 1
// a single call fans chunks out over that many threads: the helpers of options.pool
// joining the caller when a pool is given, else threads started for the call.
//
// REQUIRES: src and dst do not overlap.
#ifndef MOONCAKE_COMPRESS_CODEC_H_
#define MOONCAKE_COMPRESS_CODEC_H_

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"

namespace mooncake {
class ForkJoinPool;  // mooncake/base/fork_join_pool.h
}  // namespace mooncake

namespace mooncake::compress {

// How to read a buffer's bytes. Values are written into frames: never renumber.
enum class DType : uint8_t {
  kBytes = 0,  // opaque bytes, element size 1
  kBFloat16 = 1,
  kFloat16 = 2,
  kFloat8E4M3 = 3,
  kFloat8E5M2 = 4,
  kFloat32 = 5,
};
inline constexpr uint8_t kDTypeCount = 6;

constexpr size_t ElementSize(DType dtype) {
  switch (dtype) {
    case DType::kBFloat16:
    case DType::kFloat16:
      return 2;
    case DType::kFloat32:
      return 4;
    default:
      return 1;
  }
}

constexpr std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kBytes:
      return "bytes";
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat16:
      return "fp16";
    case DType::kFloat8E4M3:
      return "fp8e4m3";
    case DType::kFloat8E5M2:
      return "fp8e5m2";
    case DType::kFloat32:
      return "fp32";
  }
  return "unknown";
}

// Which codec wrote a frame. Values are written into frames: never renumber.
enum class CodecId : uint8_t {
  kIdentity = 0,
  kZstd = 1,
  kBytePlane = 2,
};
inline constexpr uint8_t kCodecIdCount = 3;

constexpr std::string_view CodecName(CodecId id) {
  switch (id) {
    case CodecId::kIdentity:
      return "identity";
    case CodecId::kZstd:
      return "zstd";
    case CodecId::kBytePlane:
      return "byteplane";
  }
  return "unknown";
}

// Options every chunked codec takes.
inline constexpr int kMaxCodecThreads = 256;

struct CodecOptions {
  // Raw bytes per chunk (the last chunk may be shorter). The unit of parallelism, of
  // sub-range decoding and of checksumming. 64 KiB - 1 MiB is the useful range; the frame
  // allows [kMinChunkBytes, kMaxChunkBytes], a multiple of 64.
  size_t chunk_bytes = 256 << 10;
  // Threads one Compress/Decompress call may use (the caller's included), in
  // [1, kMaxCodecThreads].
  int threads = 1;
  // Where the extra threads come from when threads > 1: the idle helpers of this pool join
  // the caller (none is created per call; a call whose helpers are all busy runs on its
  // caller alone), so at most min(threads, pool->helpers() + 1) work on one call. Null:
  // each call starts threads - 1 threads of its own (~50-100 us, worth it only for calls
  // of several MiB). Not owned; it must outlive the codec.
  ForkJoinPool* pool = nullptr;
};

template <typename C>
concept Codec = requires(C& codec, const C& const_codec, std::span<const std::byte> src,
                         std::span<std::byte> dst, DType dtype, size_t n, uint64_t offset) {
  { C::kId } -> std::convertible_to<CodecId>;
  // Pure function of n and the codec's options. O(1).
  { const_codec.MaxCompressedSize(n) } -> std::same_as<size_t>;
  // Mutates the codec's scratch state: not concurrent with any other call on `codec`.
  { codec.Compress(src, dtype, dst) } -> std::same_as<absl::StatusOr<size_t>>;
  { codec.Decompress(src, dst) } -> std::same_as<absl::StatusOr<size_t>>;
  { codec.DecompressRange(src, offset, dst) } -> std::same_as<absl::StatusOr<size_t>>;
};

}  // namespace mooncake::compress

#endif  // MOONCAKE_COMPRESS_CODEC_H_
