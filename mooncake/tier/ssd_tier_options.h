// SsdTier's options and figures (SsdTierOptions, SsdTierInfo, Durability), and
// the validation Open applies to the options. Included by ssd_tier.h, whose
// header comment explains what each option does to the tier.
#ifndef MOONCAKE_TIER_SSD_TIER_OPTIONS_H_
#define MOONCAKE_TIER_SSD_TIER_OPTIONS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/compress/codec.h"
#include "mooncake/compress/frame.h"
#include "mooncake/tier/internal/ssd_format.h"
#include "mooncake/tier/io_faults.h"
#include "mooncake/tier/tier.h"

namespace mooncake::tier {

// What an acknowledged write survives; see the header comment.
enum class Durability : uint8_t {
  kPowerLoss,     // acknowledged after an fdatasync covering it completed
  kProcessCrash,  // acknowledged when written; fdatasync follows in the background
  kNoSync,        // acknowledged when written; never synced while open; emptied by a reboot
                  // that follows an unclean close
};

// "power_loss", "process_crash", "no_sync": for flags and logs.
inline std::string_view DurabilityName(Durability d) {
  switch (d) {
    case Durability::kPowerLoss:
      return "power_loss";
    case Durability::kProcessCrash:
      return "process_crash";
    case Durability::kNoSync:
      return "no_sync";
  }
  return "unknown";
}

inline std::optional<Durability> ParseDurability(std::string_view name) {
  for (Durability d : {Durability::kPowerLoss, Durability::kProcessCrash, Durability::kNoSync}) {
    if (name == DurabilityName(d)) return d;
  }
  return std::nullopt;
}

struct SsdTierOptions {
  // One file per path, created (preallocated) when none exists; all must
  // exist or none (unless start_empty). Regular files only.
  std::vector<std::string> paths;
  // Open an empty tier without reading the files: every path that holds an SsdTier file
  // (any state, any capacity; not held by another open tier) is replaced by a new file of
  // capacity_bytes_per_file (required), and missing ones are created. A path holding
  // anything else is refused (FailedPrecondition) and left as it is. For a cache whose
  // records are worthless after a restart (the reference store's workers): no recovery
  // scan of the old files, and a new size just works.
  bool start_empty = false;
  // Size of each file, its header block included; a multiple of 4096 and at
  // least 64 KiB. 0 when opening existing files: taken from their headers.
  uint64_t capacity_bytes_per_file = 0;
  // io_uring instances, each with a reaper thread (verify, decompress, complete).
  uint32_t lanes = 2;
  uint32_t ring_entries = 256;
  // Payloads are read and written in pieces of this size (a multiple of 4096).
  uint32_t io_chunk_bytes = 1 << 20;
  // Compressed records are read in pieces of at most this size (a multiple of 4096), so
  // the reaper decodes the frame's chunks as their pieces land while the device reads
  // the rest (decode overlaps the I/O even at queue depth 1).
  uint32_t compressed_read_piece_bytes = 256 << 10;
  // Raw bytes per frame chunk when compressing (the decode pipeline's grain).
  uint32_t codec_chunk_bytes = 256 << 10;
  // Threads that decode one compressed record's chunks (and compress one write's): the
  // lane's reaper (the writer's thread) and the idle helpers of a pool of
  // codec_threads - 1 threads that every lane shares. A codec call gets one thread per CPU
  // that no other codec call of the tier holds (all of them at queue depth 1, about one
  // while every lane decodes), and a helper busy elsewhere is not waited for. 0: the CPUs
  // this process may use (its affinity mask), at most 256. 1: no helpers. At most 256.
  uint32_t codec_threads = 0;
  // Per-lane bounce memory; larger staging falls back to the heap.
  uint64_t bounce_arena_bytes = 64ull << 20;
  bool register_files = true;
  bool register_buffers = true;
  // Where O_DIRECT is refused, use buffered I/O (logged; stats show it).
  bool allow_buffered_fallback = true;
  Compression compression = Compression::kAuto;
  // kProcessCrash acknowledges writes about one fdatasync earlier than kPowerLoss and, at
  // queue depth > 1, does not keep the device waiting for syncs; power loss can take the
  // last background_sync_ms of them. kNoSync issues no sync at all while open (a flush
  // stalls every write behind it on many disks) and suits a cache whose contents are
  // worthless after a reboot (the reference store empties its tier at start).
  Durability durability = Durability::kPowerLoss;
  // kProcessCrash: the longest an acknowledged write waits for its background fdatasync to
  // be issued (the power-loss window, less the sync's own duration). 0: as soon as the
  // previous sync completes. At most 60000.
  uint32_t background_sync_ms = 100;
  // kNoSync (and the reopen of a file a kNoSync tier left open): where the kernel's boot id
  // is read. Tests point it at a file of their own to stage a reboot.
  std::string boot_id_path = "/proc/sys/kernel/random/boot_id";
  // Device bandwidth the compression rule uses; 0 = measure at Open (a short
  // write and read probe in free space).
  double device_read_bytes_per_s = 0;
  double device_write_bytes_per_s = 0;
  // Test hook: sees every I/O completion (io_faults.h). Null in production.
  std::shared_ptr<IoFaults> faults;
};

// Figures specific to the SSD tier.
struct SsdTierInfo {
  bool direct_io = true;
  double device_read_bytes_per_s = 0;
  double device_write_bytes_per_s = 0;
  uint64_t quarantined_bytes = 0;
  uint64_t recovered_corrupt = 0;  // records skipped by recovery
  uint64_t recovered_superseded = 0;
  // Records dropped at Open because a kNoSync tier of an earlier boot left the files open
  // (a power loss or kernel crash may have reverted any block since its last sync).
  uint64_t recovered_discarded = 0;
  uint32_t codec_threads = 1;       // threads per compressed record (options resolved)
  uint64_t codec_helper_joins = 0;  // times a helper joined a record's decode or encode
  Durability durability = Durability::kPowerLoss;
  // kProcessCrash: the longest an acknowledged write waits for its background fdatasync to
  // be issued (the power-loss window, less the sync's own duration). 0: as soon as the
  // previous sync completes. At most 60000.
  uint32_t background_sync_ms = 100;
  // fdatasyncs that failed (also in TierStats::io_errors). Under kProcessCrash the writes
  // they covered were acknowledged already: they survive a process crash, but a power
  // loss may take them.
  uint64_t failed_syncs = 0;
};

namespace ssd_tier_internal {

inline absl::Status ValidateOptions(const SsdTierOptions& o) {
  using tier_internal::kBlockBytes;
  if (o.paths.empty() || o.paths.size() > 64) {
    return absl::InvalidArgumentError("SsdTierOptions.paths must name 1 to 64 files");
  }
  if (o.start_empty && o.capacity_bytes_per_file == 0) {
    return absl::InvalidArgumentError(
        "SsdTierOptions.start_empty needs capacity_bytes_per_file (the new files' size)");
  }
  if (o.lanes < 1 || o.lanes > 64) {
    return absl::InvalidArgumentError("SsdTierOptions.lanes must be in [1, 64]");
  }
  if (o.codec_threads > static_cast<uint32_t>(compress::kMaxCodecThreads)) {
    return absl::InvalidArgumentError(absl::StrCat("SsdTierOptions.codec_threads must be in [0, ",
                                                   compress::kMaxCodecThreads, "]"));
  }
  if (o.ring_entries < 8 || o.ring_entries > 4096) {
    return absl::InvalidArgumentError("SsdTierOptions.ring_entries must be in [8, 4096]");
  }
  if (o.io_chunk_bytes < kBlockBytes || o.io_chunk_bytes > (64u << 20) ||
      o.io_chunk_bytes % kBlockBytes != 0) {
    return absl::InvalidArgumentError(
        "SsdTierOptions.io_chunk_bytes must be a multiple of 4096 in [4 KiB, 64 MiB]");
  }
  if (o.compressed_read_piece_bytes < kBlockBytes || o.compressed_read_piece_bytes > (64u << 20) ||
      o.compressed_read_piece_bytes % kBlockBytes != 0) {
    return absl::InvalidArgumentError(
        "SsdTierOptions.compressed_read_piece_bytes must be a multiple of 4096 in [4 KiB, 64 MiB]");
  }
  if (absl::Status s = compress::ValidateChunkBytes(o.codec_chunk_bytes); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SsdTierOptions.codec_chunk_bytes: ", s.message()));
  }
  const uint64_t cap = o.capacity_bytes_per_file;
  if (cap != 0 && (cap % kBlockBytes != 0 || cap < 16 * kBlockBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SsdTierOptions.capacity_bytes_per_file must be 0 (existing files) or a multiple of "
        "4096 of at least 64 KiB, got ",
        cap));
  }
  if (o.device_read_bytes_per_s < 0 || o.device_write_bytes_per_s < 0) {
    return absl::InvalidArgumentError("device bandwidths must be >= 0");
  }
  if (o.durability != Durability::kPowerLoss && o.durability != Durability::kProcessCrash &&
      o.durability != Durability::kNoSync) {
    return absl::InvalidArgumentError("SsdTierOptions.durability is not a Durability");
  }
  if (o.background_sync_ms > 60000) {
    return absl::InvalidArgumentError("SsdTierOptions.background_sync_ms must be at most 60000");
  }
  return absl::OkStatus();
}

}  // namespace ssd_tier_internal

}  // namespace mooncake::tier

#endif  // MOONCAKE_TIER_SSD_TIER_OPTIONS_H_
