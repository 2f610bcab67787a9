// How a client finds a worker's segment from what the master tells it.
//
// The master's Replica names a segment by its master-assigned id and the
// worker's id only (master.proto). A client needs a transport endpoint and the
// segment's transport id to read it. A worker therefore publishes, through the
// same transports that serve its data, a small *directory* segment that maps
// master segment ids to transport segment ids, and names itself so that the
// directory can be found:
//
//   worker_id = <router endpoint> "#" <directory's router segment id, decimal>
//
// e.g. "router://host/123|local://0|shm://@mc.123.0|tcp://127.0.0.1:4000#76..."
// The router endpoint (mooncake/transport/router.h) carries the worker's
// host, pid and transports' endpoints, so the client's Router reaches it by
// the best route (local, SHM on the same host, else TCP). A fresh worker
// process has a fresh endpoint (pid, ports, socket names), so worker ids are
// unique per process as master.proto requires.
//
// Directory layout, kDirectoryBytes, little-endian (x86-64 / AArch64 hosts):
//   [0, 8)    magic "MCSEGDIR"
//   [8, 16)   generation: bumps on every rewrite
//   [16, 20)  entry count n <= kDirectoryEntriesMax
//   [20, 24)  reserved, 0
//   [24, 32)  checksum: StableHash64 of [0, 32 + 24 n) with this field zeroed
//   [32, ...) n entries {master segment id, router segment id, length} (u64 each)
// The worker rewrites it in place (rarely: mount, remount, unmount); a reader
// may see a torn copy, which fails the checksum and is read again.
#ifndef MOONCAKE_STORE_WORKER_SEGMENT_DIRECTORY_H_
#define MOONCAKE_STORE_WORKER_SEGMENT_DIRECTORY_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/hash.h"

namespace mooncake::worker {

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

namespace directory_internal {
inline void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}
}  // namespace directory_internal

// Serializes `d` into exactly kDirectoryBytes. REQUIRES: at most
// kDirectoryEntriesMax entries.
inline void EncodeDirectory(const Directory& d, std::span<uint8_t, kDirectoryBytes> out) {
  using directory_internal::Put64;
  MC_ASSERT(d.entries.size() <= kDirectoryEntriesMax, "directory over its entry limit");
  std::memset(out.data(), 0, out.size());
  Put64(out.data(), kDirectoryMagic);
  Put64(out.data() + 8, d.generation);
  Put64(out.data() + 16, d.entries.size());  // count in [16,20), reserved 0 in [20,24)
  uint8_t* p = out.data() + kDirectoryHeaderBytes;
  for (const DirectoryEntry& e : d.entries) {
    Put64(p, e.master_segment_id);
    Put64(p + 8, e.router_segment_id);
    Put64(p + 16, e.length);
    p += kDirectoryEntryBytes;
  }
  const size_t used = kDirectoryHeaderBytes + d.entries.size() * kDirectoryEntryBytes;
  Put64(out.data() + 24, StableHash64(out.data(), used));
  MC_DASSERT(used <= kDirectoryBytes, "encoded past the directory");
}

// Parses a directory. DATA_LOSS for a torn or foreign copy (bad magic, count
// or checksum): the caller reads again.
inline absl::StatusOr<Directory> DecodeDirectory(std::span<const uint8_t> in) {
  using directory_internal::Get64;
  if (in.size() < kDirectoryHeaderBytes) {
    return absl::DataLossError("segment directory shorter than its header");
  }
  if (Get64(in.data()) != kDirectoryMagic) {
    return absl::DataLossError("segment directory has a bad magic (not a mooncake worker?)");
  }
  const uint64_t count_word = Get64(in.data() + 16);
  const uint64_t count = count_word & 0xffffffffu;
  if ((count_word >> 32) != 0 || count > kDirectoryEntriesMax ||
      kDirectoryHeaderBytes + count * kDirectoryEntryBytes > in.size()) {
    return absl::DataLossError(absl::StrCat("segment directory claims ", count, " entries"));
  }
  const size_t used = kDirectoryHeaderBytes + count * kDirectoryEntryBytes;
  std::vector<uint8_t> copy(in.begin(), in.begin() + static_cast<ptrdiff_t>(used));
  std::memset(copy.data() + 24, 0, 8);
  if (StableHash64(copy.data(), copy.size()) != Get64(in.data() + 24)) {
    return absl::DataLossError("segment directory checksum mismatch (torn read)");
  }
  Directory d;
  d.generation = Get64(in.data() + 8);
  d.entries.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* p = in.data() + kDirectoryHeaderBytes + i * kDirectoryEntryBytes;
    d.entries.push_back({Get64(p), Get64(p + 8), Get64(p + 16)});
  }
  return d;
}

// A worker id split into its parts.
struct WorkerAddress {
  std::string router_endpoint;
  uint64_t directory_segment_id = 0;
  std::string host;  // from the router endpoint: "router://<host>/<pid>|..."
};

inline std::string FormatWorkerId(std::string_view router_endpoint, uint64_t directory_id) {
  return absl::StrCat(AbslView(router_endpoint), "#", directory_id);
}

// INVALID_ARGUMENT for an id this package did not produce.
inline absl::StatusOr<WorkerAddress> ParseWorkerId(std::string_view worker_id) {
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("worker id '", AbslView(worker_id),
                     "' is not <router endpoint>#<directory segment id> (a mooncake worker)"));
  };
  constexpr std::string_view kScheme = "router://";
  const size_t hash = worker_id.rfind('#');
  if (hash == std::string_view::npos || !worker_id.starts_with(kScheme)) return bad();
  WorkerAddress a;
  if (!absl::SimpleAtoi(AbslView(worker_id.substr(hash + 1)), &a.directory_segment_id) ||
      a.directory_segment_id == 0) {
    return bad();
  }
  a.router_endpoint = std::string(worker_id.substr(0, hash));
  const std::string_view rest = worker_id.substr(kScheme.size());
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos || slash == 0) return bad();
  a.host = std::string(rest.substr(0, slash));
  return a;
}

}  // namespace mooncake::worker

#endif  // MOONCAKE_STORE_WORKER_SEGMENT_DIRECTORY_H_
