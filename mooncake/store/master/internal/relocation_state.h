// The master's bookkeeping for compacting fragmented segments by relocation
// (relocation_path.h): the compactions running, one per segment at most, and
// the segments puts found fragmented.
//
// Lock: `mu` is a leaf; nothing else is called while it is held.
#ifndef MOONCAKE_STORE_MASTER_INTERNAL_RELOCATION_STATE_H_
#define MOONCAKE_STORE_MASTER_INTERNAL_RELOCATION_STATE_H_

#include <cstddef>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "mooncake/alloc/allocator.h"
#include "mooncake/base/mutex.h"

namespace mooncake::master_internal {

// One segment's compaction: its moves (copy tasks) and the placeholder that
// holds the request's extent, old offsets included, until every move ended
// and every reader of an old offset is past its lease.
struct CompactionJob {
  uint64_t segment_id = 0;
  alloc::Allocation placeholder;
  size_t moves_left = 0;
  bool failed = false;        // a move failed or timed out
  int64_t hold_until_ns = 0;  // latest lease end of a reader of an old offset
  int64_t started_ns = 0;
};

struct RelocationState {
  Mutex mu;
  absl::flat_hash_map<uint64_t, CompactionJob> jobs ABSL_GUARDED_BY(mu);  // by segment
  // Segments a put found fragmented -> the largest size asked since.
  absl::flat_hash_map<uint64_t, uint64_t> requests ABSL_GUARDED_BY(mu);
  // Segment -> when a compaction of it was last tried (min_interval_ms).
  absl::flat_hash_map<uint64_t, int64_t> last_try_ns ABSL_GUARDED_BY(mu);
};

}  // namespace mooncake::master_internal

#endif  // MOONCAKE_STORE_MASTER_INTERNAL_RELOCATION_STATE_H_
