// The master's bookkeeping for copies between workers (replication_path.h):
// the copy tasks, running drains, the re-replication backlog and the hot
// objects waiting for an extra replica.
//
// Locks: `plan_mu` serializes the planners (drain, repair, hot) and guards
// their state; it is taken before shard locks, never while holding one.
// `inbox_mu` is a leaf: read and membership paths drop keys into the inboxes
// under their shard locks.
#ifndef MOONCAKE_STORE_MASTER_INTERNAL_REPLICATION_STATE_H_
#define MOONCAKE_STORE_MASTER_INTERNAL_REPLICATION_STATE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/master/copy_registry.h"
#include "mooncake/store/rpc/master.pb.h"

namespace mooncake::master_internal {

// A token bucket in bytes: at most `rate` bytes/s, bursts of one second.
struct ByteBucket {
  uint64_t rate = 0;  // 0: unlimited
  double tokens = 0;
  int64_t last_ns = 0;

  void Refill(int64_t now_ns) {
    if (rate == 0) return;
    if (last_ns == 0) last_ns = now_ns;
    tokens += static_cast<double>(rate) * static_cast<double>(now_ns - last_ns) / 1e9;
    tokens = std::min(tokens, static_cast<double>(rate));
    last_ns = now_ns;
  }
  // Spending may go into debt by one object: the first copy never waits.
  bool CanSpend() const { return rate == 0 || tokens >= 0; }
  void Spend(uint64_t bytes) {
    if (rate != 0) tokens -= static_cast<double>(bytes);
  }
};

struct DrainJob {
  std::string worker_id;
  std::vector<uint64_t> segments;
  int64_t started_ns = 0;
  int64_t deadline_ns = 0;
  ByteBucket bucket;
  // Paced (ReplicationOptions::drain_pace): the bucket's rate is planned
  // again at every step, to move `bytes_left` by pace_end_ns.
  bool paced = false;
  int64_t pace_end_ns = 0;
  uint64_t bytes_left = 0;       // of the objects in `todo` (as they were listed)
  std::deque<std::string> todo;  // hottest first
  size_t in_flight = 0;
  bool rescanned = false;  // the table was walked again once the list ran out
  store::proto::DrainStatus status;
};

struct RepairItem {
  std::string key;
  int64_t lost_ns = 0;
};

struct ReplicationState {
  explicit ReplicationState(const master::ReplicationOptions& o) : options(o), copies(o) {}

  const master::ReplicationOptions options;
  master::CopyRegistry copies;
  // Segment bytes held by hot extra replicas (charged when their copy starts).
  std::atomic<uint64_t> hot_extra_bytes{0};

  Mutex plan_mu ABSL_ACQUIRED_BEFORE(inbox_mu);
  absl::flat_hash_map<std::string, DrainJob> drains ABSL_GUARDED_BY(plan_mu);
  std::deque<RepairItem> repairs ABSL_GUARDED_BY(plan_mu);  // hottest first per batch
  ByteBucket repair_bucket ABSL_GUARDED_BY(plan_mu);
  size_t repairs_in_flight ABSL_GUARDED_BY(plan_mu) = 0;
  size_t hot_in_flight ABSL_GUARDED_BY(plan_mu) = 0;
  absl::flat_hash_set<std::string> hot_keys ABSL_GUARDED_BY(plan_mu);  // with a hot extra

  Mutex inbox_mu;
  std::vector<RepairItem> repair_inbox ABSL_GUARDED_BY(inbox_mu);
  std::vector<std::string> hot_inbox ABSL_GUARDED_BY(inbox_mu);
  // Set when an inbox gains a key: the next planner run looks (relaxed: a hint).
  std::atomic<bool> inbox_dirty{false};
};

}  // namespace mooncake::master_internal

#endif  // MOONCAKE_STORE_MASTER_INTERNAL_REPLICATION_STATE_H_
