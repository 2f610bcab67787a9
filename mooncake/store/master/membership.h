// WorkerRegistry: which workers are alive and which segments each mounted.
//
// A worker exists from its first mounted segment until it unmounts the last
// one or stops heartbeating: Expire(now) removes every worker whose last
// sign of life (a mount or a heartbeat) is older than heartbeat_timeout_ms
// and returns its segments, which the master then unmounts (dropping their
// replicas). A heartbeat from an unknown worker (expired, or a master that
// restarted) gets `known = false`: the worker must mount its segments again.
// Heartbeat sequence numbers only ever move forward; a late, reordered
// heartbeat still counts as a sign of life.
//
// Thread-safety: every method may run concurrently (one mutex; membership
// changes are rare next to reads and puts).
#ifndef MOONCAKE_STORE_MASTER_MEMBERSHIP_H_
#define MOONCAKE_STORE_MASTER_MEMBERSHIP_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"

namespace mooncake::master {

struct MembershipOptions {
  int64_t heartbeat_interval_ms = 1000;  // told to workers
  int64_t heartbeat_timeout_ms = 5000;   // silence after which a worker is dropped
};

struct ExpiredWorker {
  std::string worker_id;
  std::vector<uint64_t> segment_ids;
};

class WorkerRegistry {
 public:
  explicit WorkerRegistry(MembershipOptions options = {}) : options_(options) {
    MC_ASSERT(options.heartbeat_interval_ms > 0 &&
                  options.heartbeat_timeout_ms > options.heartbeat_interval_ms,
              "heartbeat timeout must exceed the interval (both > 0)");
  }

  const MembershipOptions& options() const { return options_; }

  // Records that `worker_id` mounted `segment_id` (a sign of life).
  void AddSegment(std::string_view worker_id, uint64_t segment_id, int64_t now_ns) {
    MutexLock lock(&mu_);
    Worker& w = workers_[AbslView(worker_id)];
    w.segments.push_back(segment_id);
    w.last_seen_ns = std::max(w.last_seen_ns, now_ns);
  }

  // Removes `segment_id` from `worker_id`; the worker goes with its last
  // segment. NOT_FOUND: unknown worker, or not one of its segments.
  absl::Status RemoveSegment(std::string_view worker_id, uint64_t segment_id) {
    MutexLock lock(&mu_);
    auto it = workers_.find(AbslView(worker_id));
    if (it == workers_.end()) {
      return absl::NotFoundError(
          absl::StrCat("unknown worker '", AbslView(worker_id), "' (expired or never mounted)"));
    }
    std::vector<uint64_t>& segs = it->second.segments;
    auto s = std::find(segs.begin(), segs.end(), segment_id);
    if (s == segs.end()) {
      return absl::NotFoundError(
          absl::StrCat("worker '", AbslView(worker_id), "' has no segment ", segment_id));
    }
    segs.erase(s);
    if (segs.empty()) workers_.erase(it);
    return absl::OkStatus();
  }

  // False if the worker is unknown (it must remount).
  bool Heartbeat(std::string_view worker_id, uint64_t sequence, int64_t now_ns) {
    MutexLock lock(&mu_);
    auto it = workers_.find(AbslView(worker_id));
    if (it == workers_.end()) return false;
    it->second.last_seen_ns = std::max(it->second.last_seen_ns, now_ns);
    it->second.sequence = std::max(it->second.sequence, sequence);
    return true;
  }

  // Removes and returns the workers silent for longer than the timeout.
  std::vector<ExpiredWorker> Expire(int64_t now_ns) {
    const int64_t timeout_ns = options_.heartbeat_timeout_ms * 1'000'000;
    std::vector<ExpiredWorker> out;
    MutexLock lock(&mu_);
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (now_ns - it->second.last_seen_ns > timeout_ns) {
        out.push_back(ExpiredWorker{it->first, std::move(it->second.segments)});
        workers_.erase(it++);
      } else {
        ++it;
      }
    }
    return out;
  }

  bool Contains(std::string_view worker_id) const {
    MutexLock lock(&mu_);
    return workers_.contains(AbslView(worker_id));
  }
  std::vector<uint64_t> SegmentsOf(std::string_view worker_id) const {
    MutexLock lock(&mu_);
    auto it = workers_.find(AbslView(worker_id));
    return it == workers_.end() ? std::vector<uint64_t>{} : it->second.segments;
  }
  uint64_t LastSequence(std::string_view worker_id) const {
    MutexLock lock(&mu_);
    auto it = workers_.find(AbslView(worker_id));
    return it == workers_.end() ? 0 : it->second.sequence;
  }
  size_t size() const {
    MutexLock lock(&mu_);
    return workers_.size();
  }

 private:
  struct Worker {
    std::vector<uint64_t> segments;
    int64_t last_seen_ns = 0;
    uint64_t sequence = 0;
  };

  const MembershipOptions options_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, Worker> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_MEMBERSHIP_H_
