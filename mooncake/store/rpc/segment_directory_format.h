// The segment directory: the byte layout of the small segment a worker
// publishes, through the same transports that serve its data, to map master
// segment ids to its transports' segment ids. The worker writes it; a reader
// (a client, a tool) finds it through the worker id (worker_id.h) and decodes
// it with this header.
//
// Layout, kDirectoryBytes, little-endian (x86-64 / AArch64 hosts):
//   [0, 8)    magic "MCSEGDIR"
//   [8, 16)   generation: bumps on every rewrite
//   [16, 20)  entry count n <= kDirectoryEntriesMax
//   [20, 24)  reserved, 0
//   [24, 32)  checksum: StableHash64 of [0, 32 + 24 n) with this field zeroed
//   [32, ...) n entries {master segment id, router segment id, length} (u64 each)
// The worker rewrites it in place (rarely: mount, remount, unmount); a reader
// may see a torn copy, which fails the checksum and is read again.
//
// Thread-safety: pure functions. Complexity: O(kDirectoryBytes).
#ifndef MOONCAKE_STORE_RPC_SEGMENT_DIRECTORY_FORMAT_H_
#define MOONCAKE_STORE_RPC_SEGMENT_DIRECTORY_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/hash.h"
#include "mooncake/store/rpc/frame.h"

namespace mooncake::rpc {

inline constexpr size_t kDirectoryBytes = 4096;
inline constexpr size_t kDirectoryHeaderBytes = 32;
inline constexpr size_t kDirectoryEntryBytes = 24;
inline constexpr size_t kDirectoryEntriesMax =
    (kDirectoryBytes - kDirectoryHeaderBytes) / kDirectoryEntryBytes;
inline constexpr uint64_t kDirectoryMagic = 0x524944474553434dULL;  // "MCSEGDIR"

struct DirectoryEntry {
  uint64_t master_segment_id = 0;
  uint64_t router_segment_id = 0;
  uint64_t length = 0;
  friend bool operator==(const DirectoryEntry&, const DirectoryEntry&) = default;
};

struct Directory {
  uint64_t generation = 0;
  std::vector<DirectoryEntry> entries;

  std::optional<DirectoryEntry> Find(uint64_t master_segment_id) const {
    for (const DirectoryEntry& e : entries) {
      if (e.master_segment_id == master_segment_id) return e;
    }
    return std::nullopt;
  }
};

// Serializes `d` into exactly kDirectoryBytes. REQUIRES: at most
// kDirectoryEntriesMax entries.
inline void EncodeDirectory(const Directory& d, std::span<uint8_t, kDirectoryBytes> out) {
  using rpc_internal::StoreLe64;
  MC_ASSERT(d.entries.size() <= kDirectoryEntriesMax, "directory over its entry limit");
  std::memset(out.data(), 0, out.size());
  StoreLe64(out.data(), kDirectoryMagic);
  StoreLe64(out.data() + 8, d.generation);
  StoreLe64(out.data() + 16, d.entries.size());  // count in [16,20), reserved 0 in [20,24)
  uint8_t* p = out.data() + kDirectoryHeaderBytes;
  for (const DirectoryEntry& e : d.entries) {
    StoreLe64(p, e.master_segment_id);
    StoreLe64(p + 8, e.router_segment_id);
    StoreLe64(p + 16, e.length);
    p += kDirectoryEntryBytes;
  }
  const size_t used = kDirectoryHeaderBytes + d.entries.size() * kDirectoryEntryBytes;
  StoreLe64(out.data() + 24, StableHash64(out.data(), used));
  MC_DASSERT(used <= kDirectoryBytes, "encoded past the directory");
}

// Parses a directory. DATA_LOSS for a torn or foreign copy (bad magic, count
// or checksum): the caller reads again.
inline absl::StatusOr<Directory> DecodeDirectory(std::span<const uint8_t> in) {
  using rpc_internal::LoadLe64;
  if (in.size() < kDirectoryHeaderBytes) {
    return absl::DataLossError("segment directory shorter than its header");
  }
  if (LoadLe64(in.data()) != kDirectoryMagic) {
    return absl::DataLossError("segment directory has a bad magic (not a mooncake worker?)");
  }
  const uint64_t count_word = LoadLe64(in.data() + 16);
  const uint64_t count = count_word & 0xffffffffu;
  if ((count_word >> 32) != 0 || count > kDirectoryEntriesMax ||
      kDirectoryHeaderBytes + count * kDirectoryEntryBytes > in.size()) {
    return absl::DataLossError(absl::StrCat("segment directory claims ", count, " entries"));
  }
  const size_t used = kDirectoryHeaderBytes + count * kDirectoryEntryBytes;
  std::vector<uint8_t> copy(in.begin(), in.begin() + static_cast<ptrdiff_t>(used));
  std::memset(copy.data() + 24, 0, 8);
  if (StableHash64(copy.data(), copy.size()) != LoadLe64(in.data() + 24)) {
    return absl::DataLossError("segment directory checksum mismatch (torn read)");
  }
  Directory d;
  d.generation = LoadLe64(in.data() + 8);
  d.entries.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* p = in.data() + kDirectoryHeaderBytes + i * kDirectoryEntryBytes;
    d.entries.push_back({LoadLe64(p), LoadLe64(p + 8), LoadLe64(p + 16)});
  }
  MC_DASSERT(d.entries.size() == count, "one entry per count");
  return d;
}

}  // namespace mooncake::rpc

#endif  // MOONCAKE_STORE_RPC_SEGMENT_DIRECTORY_FORMAT_H_
