// The self-describing frame every codec writes (spec with a hex example:
// docs/frame_format.md). All integers little-endian.
//
//   offset  size  field
//   0       4     magic "MCZF"
//   4       1     version (2; version 1 frames are still read)
//   5       1     codec id (CodecId)
//   6       1     dtype (DType)
//   7       1     flags (0; nonzero is rejected)
//   8       8     raw size in bytes
//   16      4     chunk size: raw bytes per chunk, every chunk but the last
//   20      4     chunk count = ceil(raw size / chunk size)
//   24      12*n  chunk table, one entry per chunk:
//                   u32 stored size | kStoredRawBit (payload is the raw bytes)
//                   u64 XXH3-64 (seed 0) of the chunk's raw bytes
//   24+12n  8     XXH3-64 (seed 0) of bytes [0, 24 + 12n): guards header and table
//   32+12n  ...   chunk payloads, back to back, in chunk order
//
// ParseFrame validates everything that does not need decoding (sizes, limits, the table
// checksum, that payloads add up to exactly the frame size); chunk decoders then only
// need to stay inside their payload.
#ifndef MOONCAKE_COMPRESS_FRAME_H_
#define MOONCAKE_COMPRESS_FRAME_H_

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/hash.h"
#include "mooncake/compress/codec.h"

namespace mooncake::compress {

inline constexpr uint8_t kFrameMagic[4] = {'M', 'C', 'Z', 'F'};
// Version 2 (this writer): BytePlane Huffman planes have 8 streams (plane mode 3).
// Version 1 frames (4-stream mode 2) are still read; the layout here is the same.
inline constexpr uint8_t kFrameVersion = 2;
inline constexpr uint8_t kOldestFrameVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 24;
inline constexpr size_t kChunkEntryBytes = 12;
inline constexpr size_t kTableChecksumBytes = 8;
inline constexpr uint32_t kStoredRawBit = 0x80000000u;
inline constexpr size_t kMinChunkBytes = 4 << 10;
inline constexpr size_t kMaxChunkBytes = 64 << 20;

// Frame overhead for `chunks` chunks (header, table, table checksum).
constexpr size_t FrameOverheadBytes(uint64_t chunks) {
  return kFrameHeaderBytes + kChunkEntryBytes * chunks + kTableChecksumBytes;
}

// ceil(raw_bytes / chunk_bytes) without raw_bytes + chunk_bytes - 1, which wraps for a
// raw size near 2^64 (a corrupt header's) and would let it pass as a frame of 0 chunks.
constexpr uint64_t ChunkCount(uint64_t raw_bytes, size_t chunk_bytes) {
  return raw_bytes / chunk_bytes + (raw_bytes % chunk_bytes != 0 ? 1 : 0);
}

inline absl::Status ValidateChunkBytes(size_t chunk_bytes) {
  if (chunk_bytes < kMinChunkBytes || chunk_bytes > kMaxChunkBytes || chunk_bytes % 64 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("chunk size ", chunk_bytes,
                                                   " must be a multiple of 64 in [", kMinChunkBytes,
                                                   ", ", kMaxChunkBytes, "]"));
  }
  return absl::OkStatus();
}

// What a frame's header says.
struct FrameInfo {
  CodecId codec = CodecId::kIdentity;
  DType dtype = DType::kBytes;
  uint64_t raw_bytes = 0;
  uint32_t chunk_bytes = 0;
  uint32_t chunk_count = 0;
};

// A parsed chunk: where its payload lies in the frame and where its bytes go.
struct ChunkRef {
  uint64_t raw_offset = 0;
  uint32_t raw_bytes = 0;
  uint64_t payload_offset = 0;  // from the frame's first byte
  uint32_t payload_bytes = 0;
  bool stored_raw = false;
  uint64_t checksum = 0;
};

namespace frame_internal {

inline uint32_t LoadU32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;  // x86-64 and aarch64 are little-endian; the spec is LE
}
inline uint64_t LoadU64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline void StoreU32(std::byte* p, uint32_t v) { std::memcpy(p, &v, 4); }
inline void StoreU64(std::byte* p, uint64_t v) { std::memcpy(p, &v, 8); }

static_assert(std::endian::native == std::endian::little, "frames are little-endian");

}  // namespace frame_internal

// Writes the header (table left to WriteChunkEntry, checksum to SealFrameTable).
inline void WriteFrameHeader(const FrameInfo& info, std::span<std::byte> dst) {
  using namespace frame_internal;  // NOLINT: local helpers
  MC_ASSERT(dst.size() >= FrameOverheadBytes(info.chunk_count), "dst too small for header");
  MC_DASSERT(info.chunk_count == ChunkCount(info.raw_bytes, info.chunk_bytes), "chunk count");
  std::memcpy(dst.data(), kFrameMagic, 4);
  dst[4] = std::byte{kFrameVersion};
  dst[5] = static_cast<std::byte>(info.codec);
  dst[6] = static_cast<std::byte>(info.dtype);
  dst[7] = std::byte{0};
  StoreU64(dst.data() + 8, info.raw_bytes);
  StoreU32(dst.data() + 16, info.chunk_bytes);
  StoreU32(dst.data() + 20, info.chunk_count);
}

inline void WriteChunkEntry(std::span<std::byte> frame, uint32_t index, uint32_t payload_bytes,
                            bool stored_raw, uint64_t checksum) {
  MC_DASSERT(payload_bytes < kStoredRawBit, "payload too large");
  std::byte* entry = frame.data() + kFrameHeaderBytes + size_t{index} * kChunkEntryBytes;
  frame_internal::StoreU32(entry, payload_bytes | (stored_raw ? kStoredRawBit : 0));
  frame_internal::StoreU64(entry + 4, checksum);
}

inline void SealFrameTable(std::span<std::byte> frame, uint32_t chunk_count) {
  const size_t covered = kFrameHeaderBytes + kChunkEntryBytes * size_t{chunk_count};
  MC_ASSERT(frame.size() >= covered + kTableChecksumBytes, "frame too small to seal");
  frame_internal::StoreU64(frame.data() + covered, StableHash64(frame.data(), covered));
}

// A validated view of a frame. Cheap to build (one pass over the table).
class FrameView {
 public:
  const FrameInfo& info() const { return info_; }
  std::span<const std::byte> frame() const { return frame_; }
  const std::vector<ChunkRef>& chunks() const { return chunks_; }
  std::span<const std::byte> Payload(const ChunkRef& c) const {
    return frame_.subspan(c.payload_offset, c.payload_bytes);
  }

  // Parses and validates `frame`; the view borrows it.
  static absl::StatusOr<FrameView> Parse(std::span<const std::byte> frame);

 private:
  absl::Status ParseTable();

  std::span<const std::byte> frame_;
  FrameInfo info_;
  std::vector<ChunkRef> chunks_;
};

// Reads only the header (plus its bounds), e.g. to size the destination buffer.
inline absl::StatusOr<FrameInfo> ReadFrameInfo(std::span<const std::byte> frame) {
  using namespace frame_internal;  // NOLINT: local helpers
  if (frame.size() < FrameOverheadBytes(0)) {
    return absl::DataLossError(absl::StrCat(
        "frame truncated: ", frame.size(), " bytes, a frame has at least ", FrameOverheadBytes(0)));
  }
  if (std::memcmp(frame.data(), kFrameMagic, 4) != 0) {
    return absl::InvalidArgumentError("not a mooncake compress frame (magic is not \"MCZF\")");
  }
  const uint8_t version = static_cast<uint8_t>(frame[4]);
  if (version < kOldestFrameVersion || version > kFrameVersion) {
    return absl::InvalidArgumentError(absl::StrCat("frame version ", version,
                                                   " is not supported (this build reads ",
                                                   kOldestFrameVersion, "..", kFrameVersion, ")"));
  }
  FrameInfo info;
  const uint8_t codec = static_cast<uint8_t>(frame[5]);
  const uint8_t dtype = static_cast<uint8_t>(frame[6]);
  if (codec >= kCodecIdCount) {
    return absl::InvalidArgumentError(absl::StrCat("frame names unknown codec id ", codec));
  }
  if (dtype >= kDTypeCount) {
    return absl::InvalidArgumentError(absl::StrCat("frame names unknown dtype ", dtype));
  }
  if (frame[7] != std::byte{0}) {
    return absl::InvalidArgumentError("frame has unknown flags set");
  }
  info.codec = static_cast<CodecId>(codec);
  info.dtype = static_cast<DType>(dtype);
  info.raw_bytes = LoadU64(frame.data() + 8);
  info.chunk_bytes = LoadU32(frame.data() + 16);
  info.chunk_count = LoadU32(frame.data() + 20);
  if (absl::Status s = ValidateChunkBytes(info.chunk_bytes); !s.ok()) {
    return absl::DataLossError(absl::StrCat("corrupt frame header: ", s.message()));
  }
  if (info.chunk_count != ChunkCount(info.raw_bytes, info.chunk_bytes)) {
    return absl::DataLossError(absl::StrCat("corrupt frame header: ", info.chunk_count,
                                            " chunks cannot hold ", info.raw_bytes,
                                            " bytes in chunks of ", info.chunk_bytes));
  }
  if (FrameOverheadBytes(info.chunk_count) > frame.size()) {
    return absl::DataLossError(absl::StrCat("frame truncated: its chunk table needs ",
                                            FrameOverheadBytes(info.chunk_count), " bytes, got ",
                                            frame.size()));
  }
  return info;
}

// How many leading bytes of a frame FrameView::Parse reads (header, chunk table and its
// checksum), given the first `prefix` bytes that have arrived: 0 while fewer than the
// fixed header have (ask again with more), else the exact count (which may exceed what a
// corrupt frame holds; Parse then reports it).
inline uint64_t FrameBytesToParse(std::span<const std::byte> prefix) {
  if (prefix.size() < kFrameHeaderBytes) return 0;
  return FrameOverheadBytes(frame_internal::LoadU32(prefix.data() + 20));
}

inline absl::StatusOr<FrameView> FrameView::Parse(std::span<const std::byte> frame) {
  FrameView view;
  absl::StatusOr<FrameInfo> info = ReadFrameInfo(frame);
  if (!info.ok()) return info.status();
  view.frame_ = frame;
  view.info_ = *info;
  if (absl::Status s = view.ParseTable(); !s.ok()) return s;
  return view;
}

inline absl::Status FrameView::ParseTable() {
  using namespace frame_internal;  // NOLINT: local helpers
  const size_t covered = kFrameHeaderBytes + kChunkEntryBytes * size_t{info_.chunk_count};
  if (StableHash64(frame_.data(), covered) != LoadU64(frame_.data() + covered)) {
    return absl::DataLossError("frame header or chunk table is corrupt (table checksum mismatch)");
  }
  chunks_.resize(info_.chunk_count);
  uint64_t payload_offset = FrameOverheadBytes(info_.chunk_count);
  for (uint32_t i = 0; i < info_.chunk_count; ++i) {
    const std::byte* entry = frame_.data() + kFrameHeaderBytes + size_t{i} * kChunkEntryBytes;
    const uint32_t word = LoadU32(entry);
    ChunkRef& c = chunks_[i];
    c.raw_offset = uint64_t{i} * info_.chunk_bytes;
    c.raw_bytes = static_cast<uint32_t>(
        std::min<uint64_t>(info_.chunk_bytes, info_.raw_bytes - c.raw_offset));
    c.stored_raw = (word & kStoredRawBit) != 0;
    c.payload_bytes = word & ~kStoredRawBit;
    c.payload_offset = payload_offset;
    c.checksum = LoadU64(entry + 4);
    if (c.stored_raw ? c.payload_bytes != c.raw_bytes : c.payload_bytes >= c.raw_bytes) {
      return absl::DataLossError(absl::StrCat("corrupt chunk table: chunk ", i, " of ", c.raw_bytes,
                                              " raw bytes has a ", c.payload_bytes, "-byte ",
                                              c.stored_raw ? "stored" : "coded", " payload"));
    }
    payload_offset += c.payload_bytes;
    if (payload_offset > frame_.size()) {
      return absl::DataLossError(absl::StrCat("frame truncated: chunk ", i, " ends at byte ",
                                              payload_offset, " of a ", frame_.size(),
                                              "-byte frame"));
    }
  }
  if (payload_offset != frame_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("frame is ", payload_offset,
                                                   " bytes but the buffer holds ", frame_.size(),
                                                   " (trailing bytes; pass exactly one frame)"));
  }
  return absl::OkStatus();
}

}  // namespace mooncake::compress

#endif  // MOONCAKE_COMPRESS_FRAME_H_
