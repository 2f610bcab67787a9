// SsdRecovery: what an SSD tier's files hold when it opens them. Scans every
// file once (FileScanner: records whose header or payload checksum fails are
// counted as corrupt and skipped), keeps the newest valid record of each key
// (the highest sequence number) and zeroes the header block of every older
// one, then syncs, so that a later removal of the winner cannot bring an
// older record back. Files a kNoSync tier left open in an earlier boot (a
// power loss or kernel crash may have reverted any block since their last
// sync) have every record discarded (zeroed) instead.
//
// Thread-safety: none needed: Run is a function of the files, called by
// SsdTier::Open before anything else uses them. It takes no lock.
#ifndef MOONCAKE_TIER_INTERNAL_SSD_RECOVERY_H_
#define MOONCAKE_TIER_INTERNAL_SSD_RECOVERY_H_

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/tier/internal/ssd_file.h"
#include "mooncake/tier/internal/ssd_file_set.h"
#include "mooncake/tier/internal/ssd_format.h"

namespace mooncake::tier_internal {

struct RecoveredFiles {
  // Per file, the records to serve, in address order.
  std::vector<std::vector<ScannedRecord>> by_file;
  uint64_t max_sequence = 0;  // over every valid record, losers included
  uint64_t corrupt = 0;       // records whose checksums failed
  uint64_t superseded = 0;    // older records of a key, zeroed
  uint64_t discarded = 0;     // records of files left open by an earlier boot's kNoSync tier
};

class SsdRecovery {
 public:
  // `boot_id`: this boot's (nullopt when unknown: then every flagged file is discarded).
  static absl::StatusOr<RecoveredFiles> Run(const SsdFileSet& files,
                                            const std::optional<BootId>& boot_id) {
    bool discard = false;
    for (uint32_t i = 0; i < files.size(); ++i) {
      const FileHeader& h = files.header(i);
      if ((h.flags & kFileFlagUnsynced) == 0) continue;
      discard = discard || !boot_id || h.boot_id != *boot_id;
    }
    RecoveredFiles out;
    out.by_file.resize(files.size());
    std::vector<ScannedRecord> all;
    // New files hold no record (a fresh inode, preallocated): no need to read them.
    for (uint32_t i = 0; i < files.size() && !files.created(); ++i) {
      FileScanner scanner(files.fd(i), files.header(i).capacity_bytes);
      RETURN_IF_ERROR(scanner.Scan(i, all, out.corrupt));
    }
    std::vector<size_t> winners, losers;
    PickWinners(all, discard, winners, losers, out.max_sequence);
    RETURN_IF_ERROR(ZeroHeaders(files, all, losers));
    (discard ? out.discarded : out.superseded) = losers.size();
    for (size_t i : winners) out.by_file[all[i].file].push_back(std::move(all[i]));
    for (std::vector<ScannedRecord>& v : out.by_file) {
      std::sort(v.begin(), v.end(),
                [](const ScannedRecord& a, const ScannedRecord& b) { return a.offset < b.offset; });
    }
    return out;
  }

 private:
  // The newest valid record of each key wins. Discarded records all lose (their sequence
  // numbers still count: new ones go above them).
  static void PickWinners(const std::vector<ScannedRecord>& all, bool discard,
                          std::vector<size_t>& winners, std::vector<size_t>& losers,
                          uint64_t& max_sequence) {
    absl::flat_hash_map<std::string_view, size_t> best;
    for (size_t i = 0; i < all.size(); ++i) {
      max_sequence = std::max(max_sequence, all[i].header.sequence);
      if (discard) {
        losers.push_back(i);
        continue;
      }
      auto [it, fresh] = best.try_emplace(all[i].key, i);
      if (fresh) continue;
      size_t& winner = it->second;
      if (all[winner].header.sequence < all[i].header.sequence) {
        losers.push_back(winner);
        winner = i;
      } else {
        losers.push_back(i);
      }
    }
    for (const auto& [key, i] : best) winners.push_back(i);
  }

  // Zeroes the losers' header blocks and syncs every file it wrote.
  static absl::Status ZeroHeaders(const SsdFileSet& files, const std::vector<ScannedRecord>& all,
                                  const std::vector<size_t>& losers) {
    AlignedBytes zero = AllocateAligned(kBlockBytes, kBlockBytes);
    std::vector<bool> dirty(files.size(), false);
    for (size_t i : losers) {
      RETURN_IF_ERROR(PwriteFull(files.fd(all[i].file), zero.get(), kBlockBytes, all[i].offset));
      dirty[all[i].file] = true;
    }
    for (uint32_t f = 0; f < files.size(); ++f) {
      if (dirty[f] && ::fdatasync(files.fd(f)) != 0) {
        return ErrnoToStatus(errno, "fdatasync after recovery");
      }
    }
    return absl::OkStatus();
  }
};

}  // namespace mooncake::tier_internal

#endif  // MOONCAKE_TIER_INTERNAL_SSD_RECOVERY_H_
