// CheckFencing: the failover campaign's after-the-fact check that the oplog
// in etcd is what epoch fencing promises (oplog_store.h): every batch still
// stored (snapshots truncate the older ones) decodes as an OplogBatch whose
// seq is its key's, the seqs are contiguous from the first one present, and
// the epochs never decrease with seq: no deposed leader appended after its
// successor.
//
// Run it with no load (after Workload::Stop): a snapshot that truncates the
// oplog between two pages of the read leaves a gap, so a gap is read again
// (kFencingReadAttempts times) before it counts as one.
//
// Thread-safety: a free function with no shared state.
#ifndef MOONCAKE_TOOLS_HA_FAILOVER_FENCING_H_
#define MOONCAKE_TOOLS_HA_FAILOVER_FENCING_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/ha/etcd_client.h"
#include "mooncake/store/ha/oplog_store.h"
#include "mooncake/store/ha/records.h"

namespace mooncake::ha_failover {

inline constexpr int kFencingReadAttempts = 3;
inline constexpr size_t kFencingBatchesMax = size_t{1} << 22;  // bounds the read

struct FencingReport {
  uint64_t batches = 0;
  uint64_t first_seq = 0;  // 0 when the oplog is empty
  uint64_t last_seq = 0;
  std::set<int64_t> epochs;
};

namespace fencing_internal {

// One pass over the oplog. DATA_LOSS names the first violation; ABORTED a gap
// (which a concurrent truncation can also explain).
inline absl::StatusOr<FencingReport> ReadOnce(const ha::OplogStore& oplog) {
  FencingReport r;
  int64_t last_epoch = 0;
  for (uint64_t from = 1;;) {
    ASSIGN_OR_RETURN(std::vector<ha::OplogStore::Batch> page, oplog.ReadFrom(from));
    if (page.empty()) break;
    for (const auto& [seq, bytes] : page) {
      ha::hproto::OplogBatch batch;
      if (absl::Status s = ha::DecodeRecord(ha::RecordKind::kBatch, bytes, &batch); !s.ok()) {
        return absl::DataLossError(absl::StrCat("oplog batch ", seq, ": ", s.ToString()));
      }
      if (batch.seq() != seq) {
        return absl::DataLossError(
            absl::StrCat("oplog key seq ", seq, " holds a batch with seq ", batch.seq()));
      }
      if (r.batches > 0 && seq != r.last_seq + 1) {
        return absl::AbortedError(
            absl::StrCat("oplog gap: batch ", r.last_seq, " is followed by batch ", seq));
      }
      if (batch.epoch() < last_epoch) {
        return absl::DataLossError(absl::StrCat("fencing violated: batch ", seq, " has epoch ",
                                                batch.epoch(), " after batch ", r.last_seq,
                                                " of epoch ", last_epoch));
      }
      if (r.batches == 0) r.first_seq = seq;
      last_epoch = batch.epoch();
      r.last_seq = seq;
      r.epochs.insert(batch.epoch());
      if (++r.batches > kFencingBatchesMax) {
        return absl::OutOfRangeError(absl::StrCat("more than ", kFencingBatchesMax, " batches"));
      }
    }
    from = page.back().first + 1;
  }
  return r;
}

}  // namespace fencing_internal

inline absl::StatusOr<FencingReport> CheckFencing(const ha::EtcdClient& etcd,
                                                  const std::string& cluster) {
  const ha::OplogStore oplog(etcd, cluster);
  absl::Status last;
  for (int attempt = 0; attempt < kFencingReadAttempts; ++attempt) {
    absl::StatusOr<FencingReport> r = fencing_internal::ReadOnce(oplog);
    if (r.ok() || !absl::IsAborted(r.status())) return r;
    last = r.status();
  }
  return absl::DataLossError(
      absl::StrCat(last.message(), " (in ", kFencingReadAttempts, " reads)"));
}

}  // namespace mooncake::ha_failover

#endif  // MOONCAKE_TOOLS_HA_FAILOVER_FENCING_H_
