// The SsdTier on-disk format (spec with a hex example: docs/ssd_format.md).
// All integers little-endian; every block is kBlockBytes.
//
// File:   block 0 = file header; blocks 1.. = records at block-aligned offsets.
// File header (64 bytes, rest of block 0 zero):
//   0  8  magic "MCSSDFIL"      8  2  version (1; 2 while flags != 0)
//   10 2  flags
//   12 4  block bytes (4096)    16 8  capacity bytes (the file's size)
//   24 8  set id (random, shared by every file of one tier)
//   32 4  file index            36 4  file count
//   40 16 boot id (flags & kFileFlagUnsynced; else 0)
//   56 8  XXH3-64 of bytes [0, 56)
// Flags: bit 0 kFileFlagUnsynced: a tier that acknowledges writes without
// syncing them (Durability::kNoSync) has the file open, or did not close it
// cleanly, during the boot named by the boot id (the kernel's
// /proc/sys/kernel/random/boot_id, 16 bytes). Other bits are 0; a reader
// refuses a file with a flag it does not know. A flagged header says version
// 2, so that readers that predate the flags (they ignored bytes 10-11 and
// 40-55) refuse it instead of trusting its records; an unflagged one says 1.
// Record = header block + payload, the payload padded with zeros to a block:
//   0  8  magic "MCSSDREC"      8  2  version (1)     10 2  header bytes (80)
//   12 4  key bytes (1..kMaxKeyBytes)
//   16 8  sequence (per tier, increasing, <= kMaxSequence; the highest wins
//         on recovery)
//   24 8  XXH3-64 of the key
//   32 8  raw bytes             40 8  stored bytes (payload length on disk)
//   48 1  codec (0xFF: payload is the raw bytes; else the CodecId of a
//         compress frame, docs/frame_format.md)
//   49 1  dtype (compress::DType)   50 2 flags (0)   52 4 reserved (0)
//   56 8  user tag
//   64 8  XXH3-64 of the payload's stored bytes
//   72 8  XXH3-64 of bytes [0, 72) followed by the key bytes
//   80 .. key bytes; zeros to the end of the block.
//
// Thread-safety: pure functions.
#ifndef MOONCAKE_TIER_INTERNAL_SSD_FORMAT_H_
#define MOONCAKE_TIER_INTERNAL_SSD_FORMAT_H_

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/hash.h"
#include "mooncake/compress/codec.h"
#include "mooncake/tier/tier.h"

namespace mooncake::tier_internal {

inline constexpr uint64_t kBlockBytes = 4096;
inline constexpr char kFileMagic[8] = {'M', 'C', 'S', 'S', 'D', 'F', 'I', 'L'};
inline constexpr char kRecordMagic[8] = {'M', 'C', 'S', 'S', 'D', 'R', 'E', 'C'};
inline constexpr uint16_t kFormatVersion = 1;
inline constexpr uint16_t kFlaggedFileVersion = 2;  // a file header with flags != 0
inline constexpr size_t kFileHeaderBytes = 64;
inline constexpr uint16_t kFileFlagUnsynced = 1;
inline constexpr uint16_t kKnownFileFlags = kFileFlagUnsynced;
using BootId = std::array<uint8_t, 16>;
inline constexpr size_t kRecordHeaderBytes = 80;
inline constexpr uint8_t kCodecRaw = 0xFF;
// The largest sequence number a valid header carries. A tier counts from 1 and never gets
// near it; the cap keeps recovery's "largest found + 1" from wrapping on a forged header.
inline constexpr uint64_t kMaxSequence = (uint64_t{1} << 63) - 1;
static_assert(kRecordHeaderBytes + tier::kMaxKeyBytes <= kBlockBytes);

constexpr uint64_t RoundUpToBlock(uint64_t n) {
  return (n + kBlockBytes - 1) / kBlockBytes * kBlockBytes;
}

// Bytes a record with `stored_bytes` of payload occupies on disk.
constexpr uint64_t RecordBytes(uint64_t stored_bytes) {
  return kBlockBytes + RoundUpToBlock(stored_bytes);
}

struct FileHeader {
  uint64_t capacity_bytes = 0;
  uint64_t set_id = 0;
  uint32_t file_index = 0;
  uint32_t file_count = 0;
  uint16_t flags = 0;
  BootId boot_id{};  // meaningful when flags & kFileFlagUnsynced

  friend bool operator==(const FileHeader&, const FileHeader&) = default;
};

struct RecordHeader {
  uint64_t sequence = 0;
  uint64_t key_hash = 0;
  uint64_t raw_bytes = 0;
  uint64_t stored_bytes = 0;
  uint8_t codec = kCodecRaw;
  compress::DType dtype = compress::DType::kBytes;
  uint64_t user_tag = 0;
  uint64_t payload_checksum = 0;

  friend bool operator==(const RecordHeader&, const RecordHeader&) = default;
};

inline void PutU16(std::byte* p, uint16_t v) { std::memcpy(p, &v, 2); }
inline void PutU32(std::byte* p, uint32_t v) { std::memcpy(p, &v, 4); }
inline void PutU64(std::byte* p, uint64_t v) { std::memcpy(p, &v, 8); }
inline uint16_t GetU16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t GetU32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t GetU64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
static_assert(std::endian::native == std::endian::little, "the format is little-endian");

inline uint64_t KeyHash(std::string_view key) { return StableHash64(key); }

// Writes the file header into block[0, kBlockBytes) (the rest zeroed).
inline void EncodeFileHeader(const FileHeader& h, std::span<std::byte> block) {
  MC_ASSERT(block.size() >= kBlockBytes, "file header needs a whole block");
  std::memset(block.data(), 0, kBlockBytes);
  std::byte* p = block.data();
  std::memcpy(p, kFileMagic, 8);
  PutU16(p + 8, h.flags != 0 ? kFlaggedFileVersion : kFormatVersion);
  PutU32(p + 12, static_cast<uint32_t>(kBlockBytes));
  PutU64(p + 16, h.capacity_bytes);
  PutU64(p + 24, h.set_id);
  PutU32(p + 32, h.file_index);
  PutU32(p + 36, h.file_count);
  PutU16(p + 10, h.flags);
  std::memcpy(p + 40, h.boot_id.data(), h.boot_id.size());
  PutU64(p + 56, StableHash64(p, 56));
}

inline absl::StatusOr<FileHeader> DecodeFileHeader(std::span<const std::byte> block) {
  if (block.size() < kFileHeaderBytes) return absl::DataLossError("file header truncated");
  const std::byte* p = block.data();
  if (std::memcmp(p, kFileMagic, 8) != 0) {
    return absl::FailedPreconditionError("not an SsdTier file (bad magic)");
  }
  if (GetU64(p + 56) != StableHash64(p, 56)) {
    return absl::DataLossError("SsdTier file header checksum mismatch");
  }
  const uint16_t version = GetU16(p + 8);
  if ((version != kFormatVersion && version != kFlaggedFileVersion) ||
      GetU32(p + 12) != kBlockBytes) {
    return absl::FailedPreconditionError(absl::StrCat("unsupported SsdTier file version ",
                                                      GetU16(p + 8), " / block ", GetU32(p + 12)));
  }
  FileHeader h;
  h.capacity_bytes = GetU64(p + 16);
  h.set_id = GetU64(p + 24);
  h.file_index = GetU32(p + 32);
  h.file_count = GetU32(p + 36);
  h.flags = GetU16(p + 10);
  if ((h.flags & ~kKnownFileFlags) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("SsdTier file has flags this build does not know: ", h.flags));
  }
  if ((h.flags != 0) != (version == kFlaggedFileVersion)) {
    return absl::DataLossError(
        absl::StrCat("SsdTier file header version ", version, " with flags ", h.flags));
  }
  std::memcpy(h.boot_id.data(), p + 40, h.boot_id.size());
  return h;
}

// The header checksum (bytes 72..80): XXH3-64 of header bytes [0, 72)
// followed by the key bytes.
inline uint64_t RecordHeaderChecksum(const std::byte* header, std::string_view key) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, header, 72);
  XXH3_64bits_update(&state, key.data(), key.size());
  return XXH3_64bits_digest(&state);
}

// Writes a record header block (header, key, zero padding) into block.
// REQUIRES: block.size() >= kBlockBytes, 0 < key.size() <= kMaxKeyBytes.
inline void EncodeRecordHeader(const RecordHeader& h, std::string_view key,
                               std::span<std::byte> block) {
  MC_ASSERT(block.size() >= kBlockBytes, "record header needs a whole block");
  MC_ASSERT(!key.empty() && key.size() <= tier::kMaxKeyBytes, "key size out of range");
  std::memset(block.data(), 0, kBlockBytes);
  std::byte* p = block.data();
  std::memcpy(p, kRecordMagic, 8);
  PutU16(p + 8, kFormatVersion);
  PutU16(p + 10, static_cast<uint16_t>(kRecordHeaderBytes));
  PutU32(p + 12, static_cast<uint32_t>(key.size()));
  PutU64(p + 16, h.sequence);
  PutU64(p + 24, h.key_hash);
  PutU64(p + 32, h.raw_bytes);
  PutU64(p + 40, h.stored_bytes);
  p[48] = std::byte{h.codec};
  p[49] = static_cast<std::byte>(h.dtype);
  PutU64(p + 56, h.user_tag);
  PutU64(p + 64, h.payload_checksum);
  std::memcpy(p + kRecordHeaderBytes, key.data(), key.size());
  PutU64(p + 72, RecordHeaderChecksum(p, key));
}

struct DecodedRecord {
  RecordHeader header;
  std::string_view key;  // points into the block
};

// Parses a header block; nullopt when it is not a valid record header (zeros,
// a torn or foreign block, a bad checksum, impossible sizes). Never reads past
// block.
inline std::optional<DecodedRecord> DecodeRecordHeader(std::span<const std::byte> block) {
  if (block.size() < kBlockBytes) return std::nullopt;
  const std::byte* p = block.data();
  if (std::memcmp(p, kRecordMagic, 8) != 0) return std::nullopt;
  if (GetU16(p + 8) != kFormatVersion || GetU16(p + 10) != kRecordHeaderBytes) return std::nullopt;
  const uint32_t key_bytes = GetU32(p + 12);
  if (key_bytes == 0 || key_bytes > tier::kMaxKeyBytes) return std::nullopt;
  const std::string_view key(reinterpret_cast<const char*>(p + kRecordHeaderBytes), key_bytes);
  if (RecordHeaderChecksum(p, key) != GetU64(p + 72)) return std::nullopt;
  DecodedRecord r;
  RecordHeader& h = r.header;
  h.sequence = GetU64(p + 16);
  if (h.sequence > kMaxSequence) return std::nullopt;
  h.key_hash = GetU64(p + 24);
  h.raw_bytes = GetU64(p + 32);
  h.stored_bytes = GetU64(p + 40);
  h.codec = static_cast<uint8_t>(p[48]);
  const uint8_t dtype = static_cast<uint8_t>(p[49]);
  h.user_tag = GetU64(p + 56);
  h.payload_checksum = GetU64(p + 64);
  r.key = key;
  if (dtype >= compress::kDTypeCount) return std::nullopt;
  h.dtype = static_cast<compress::DType>(dtype);
  if (h.codec != kCodecRaw && h.codec >= compress::kCodecIdCount) return std::nullopt;
  if (h.raw_bytes == 0 || h.stored_bytes == 0 || h.stored_bytes > (uint64_t{1} << 48)) {
    return std::nullopt;
  }
  if (h.codec == kCodecRaw && h.stored_bytes != h.raw_bytes) return std::nullopt;
  if (h.key_hash != KeyHash(r.key)) return std::nullopt;
  if (GetU16(p + 50) != 0 || GetU32(p + 52) != 0) return std::nullopt;
  return r;
}

}  // namespace mooncake::tier_internal

#endif  // MOONCAKE_TIER_INTERNAL_SSD_FORMAT_H_
