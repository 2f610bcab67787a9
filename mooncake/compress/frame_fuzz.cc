// Feeds arbitrary bytes to every codec's decoder (whole frame, a sub-range, and chunk by
// chunk as if the frame were still arriving). The decoders must return a Status, never
// crash or read out of bounds (run under ASan, which also sees the not-yet-arrived bytes
// of the incremental case poisoned).
#include <sanitizer/asan_interface.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mooncake/base/fork_join_pool.h"
#include "mooncake/compress/adaptive_codec.h"
#include "mooncake/compress/byte_plane_codec.h"
#include "mooncake/compress/frame.h"
#include "mooncake/compress/identity_codec.h"
#include "mooncake/compress/kv_data_testing.h"
#include "mooncake/compress/zstd_codec.h"

namespace mooncake {
namespace {

using compress::CodecOptions;
using compress::DType;

constexpr size_t kMaxRawBytes = 1 << 20;  // the fuzzer does not allocate beyond this
// Outputs up to this size are fresh heap blocks; larger ones (which a few bytes of
// input can claim) reuse one block, since a fresh one costs an mmap and page faults.
constexpr size_t kFreshOutputBytesMax = 64 << 10;

// An output buffer of exactly `bytes`. A large one lies in a block of kMaxRawBytes
// kept for the whole run, 16-byte aligned like a fresh one, with the rest of the block
// poisoned under ASan: a store past either end is caught as in a block of its own.
class Output {
 public:
  explicit Output(size_t bytes) {
    if (bytes <= kFreshOutputBytesMax) {
      fresh_.resize(bytes);
      span_ = fresh_;
      return;
    }
    static std::byte* block = new std::byte[kMaxRawBytes];
    block_ = block;
    const size_t head = (kMaxRawBytes - bytes) & ~size_t{15};
    span_ = std::span<std::byte>(block + head, bytes);
    ASAN_POISON_MEMORY_REGION(block, head);
    ASAN_POISON_MEMORY_REGION(block + head + bytes, kMaxRawBytes - head - bytes);
  }
  ~Output() {
    if (block_ != nullptr) ASAN_UNPOISON_MEMORY_REGION(block_, kMaxRawBytes);
  }
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  std::span<std::byte> span() const { return span_; }

 private:
  std::vector<std::byte> fresh_;
  std::byte* block_ = nullptr;
  std::span<std::byte> span_;
};

template <typename C>
void DecodeWith(C& codec, std::span<const std::byte> frame) {
  absl::StatusOr<compress::FrameInfo> info = compress::ReadFrameInfo(frame);
  const size_t raw = info.ok() && info->raw_bytes <= kMaxRawBytes ? info->raw_bytes : 64;
  {
    Output out(raw);
    (void)codec.Decompress(frame, out.span());
  }
  if (raw > 2) {
    Output part(raw / 2);
    (void)codec.DecompressRange(frame, raw / 3, part.span());
  }
}

// Decodes chunk by chunk with `arrived` = the end of each chunk's payload; the bytes past
// it are poisoned under ASan, so a decoder that loads them fails the test.
template <typename C>
void DecodeIncrementally(C& codec, std::span<const std::byte> frame) {
  std::vector<std::byte> landing(frame.begin(), frame.end());
  absl::StatusOr<compress::FrameView> view = compress::FrameView::Parse(landing);
  if (!view.ok() || view->info().raw_bytes > kMaxRawBytes) return;
  Output out(view->info().raw_bytes);
  for (uint32_t i = 0; i < view->info().chunk_count; ++i) {
    const compress::ChunkRef& c = view->chunks()[i];
    const uint64_t arrived = c.payload_offset + c.payload_bytes;
    std::byte* rest = landing.data() + arrived;
    const size_t rest_bytes = landing.size() - arrived;
    ASAN_POISON_MEMORY_REGION(rest, rest_bytes);
    const absl::Status s = codec.DecompressChunks(*view, i, i + 1, arrived, out.span());
    ASAN_UNPOISON_MEMORY_REGION(rest, rest_bytes);
    if (!s.ok()) return;
  }
}

template <typename C>
std::string Seed(DType dtype, size_t bytes, int content) {
  C codec(CodecOptions{.chunk_bytes = 4096});
  std::vector<std::byte> raw = compress::SyntheticKvBytes(bytes, dtype, bytes);
  if (content == 1) {
    compress::TestRng rng(bytes);
    for (auto& b : raw) b = static_cast<std::byte>(rng.Next());
  }
  std::vector<std::byte> frame(codec.MaxCompressedSize(raw.size()));
  const size_t n = *codec.Compress(raw, dtype, frame);
  return std::string(reinterpret_cast<const char*>(frame.data()), n);
}

}  // namespace

std::vector<std::string> FuzzSeeds() {
  std::vector<std::string> seeds;
  for (DType dtype : {DType::kBFloat16, DType::kFloat16, DType::kFloat8E4M3, DType::kFloat32}) {
    seeds.push_back(Seed<compress::BytePlaneCodec>(dtype, 9001, 0));
    seeds.push_back(Seed<compress::ZstdCodec>(dtype, 5000, 0));
  }
  seeds.push_back(Seed<compress::BytePlaneCodec>(DType::kBFloat16, 300, 0));
  seeds.push_back(Seed<compress::BytePlaneCodec>(DType::kBytes, 5000, 1));
  seeds.push_back(Seed<compress::IdentityCodec>(DType::kBytes, 5000, 1));
  seeds.push_back(Seed<compress::AdaptiveCodec<>>(DType::kBFloat16, 9000, 0));
  // Regression (libFuzzer, 2026-12-05): 0 chunks claiming 2^64 - 8 raw bytes in chunks of
  // 0xd70000 passed the chunk count check (ceil wrapped to 0); a range decode then indexed
  // the empty chunk table.
  seeds.push_back(
      std::string("MCZF\x02\x02\x00\x00\xf8\xff\xff\xff\xff\xff\xff\xff"
                  "\x00\x00\xd7\x00\x00\x00\x00\x00\x00\x00\x23\x00\xfb\x82\x2c\x03",
                  32));
  return seeds;
}

}  // namespace mooncake

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Decoders are long-lived in real use: keep their reused state across inputs too.
  static auto* identity = new mooncake::compress::IdentityCodec();
  static auto* zstd = new mooncake::compress::ZstdCodec();
  static auto* planes = new mooncake::compress::BytePlaneCodec();
  // Two threads per call from a pool, as the SSD tier decodes (a thread started per
  // call would cost more than the decode).
  static auto* pool = new mooncake::ForkJoinPool(1);
  static auto* planes2 = new mooncake::compress::BytePlaneCodec(
      mooncake::compress::CodecOptions{.chunk_bytes = 4096, .threads = 2, .pool = pool});
  const std::span<const std::byte> frame(reinterpret_cast<const std::byte*>(data), size);
  mooncake::DecodeWith(*identity, frame);
  mooncake::DecodeWith(*zstd, frame);
  mooncake::DecodeWith(*planes, frame);
  mooncake::DecodeWith(*planes2, frame);
  mooncake::DecodeIncrementally(*zstd, frame);
  mooncake::DecodeIncrementally(*planes, frame);
  // Mutations of the header or table rarely survive the table checksum; reseal it so the
  // table validation and the chunk decoders also see arbitrary sizes and modes.
  // A table that was sealed already (most mutations land in the payloads) gives the
  // same bytes again: nothing new to decode.
  absl::StatusOr<mooncake::compress::FrameInfo> info = mooncake::compress::ReadFrameInfo(frame);
  if (info.ok()) {
    std::vector<std::byte> resealed(frame.begin(), frame.end());
    mooncake::compress::SealFrameTable(resealed, info->chunk_count);
    if (std::equal(resealed.begin(), resealed.end(), frame.begin())) return 0;
    mooncake::DecodeWith(*zstd, resealed);
    mooncake::DecodeWith(*planes, resealed);
    mooncake::DecodeWith(*planes2, resealed);
    mooncake::DecodeIncrementally(*planes, resealed);
  }
  return 0;
}
