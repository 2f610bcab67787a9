// CopyRegistry: the copy tasks the master hands workers (CopySync), and the
// user-visible tasks of CreateCopyTask / CreateMoveTask / QueryTask.
//
// A copy task moves one object's bytes from a complete replica to a range the
// master reserved on another worker (a kCopying replica, object_meta.h). It is
// run by the worker that holds the source: queued here per source worker,
// handed out by Take (that worker's CopySync long poll), and ended by
// Complete with the worker's result, or by TakeTimedOut. The object-level
// steps on both ends are internal/replication_path.h's.
//
// A user task (CreateCopyTask with several targets, CreateMoveTask) is one or
// more copy tasks under one id: PENDING until a worker takes one of them,
// PROCESSING, then SUCCESS when all ended well or FAILED with the first
// error. The last `task_history` finished user tasks stay queryable.
//
// Bounds: `max_queued_tasks` per worker (Enqueue refuses more);
// `max_waiting_polls` long polls parked at once; a task in flight (or queued
// untaken) for longer than `task_timeout_ms` is given back as failed.
//
// The queueing itself is internal/task_queue.h's, under this registry's mutex.
//
// Thread-safety: every method may run concurrently (one mutex, a leaf in the
// master's lock order).
#ifndef MOONCAKE_STORE_MASTER_COPY_REGISTRY_H_
#define MOONCAKE_STORE_MASTER_COPY_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/alloc/allocator.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/master/internal/task_queue.h"
#include "mooncake/store/rpc/master.pb.h"

namespace mooncake::master {

struct ReplicationOptions {
  int64_t task_timeout_ms = 30'000;  // a copy in flight (or untaken) longer fails
  int64_t max_wait_ms = 1'000;       // longest CopySync long poll
  size_t max_waiting_polls = 16;     // long polls parked at once (one per worker)
  size_t max_queued_tasks = 4'096;   // per source worker
  // Copies a source worker runs at once for drain, repair and hot replicas
  // (user tasks are queued whole; these are fed as slots free up).
  size_t max_in_flight_per_worker = 4;
  size_t task_history = 4'096;  // finished user tasks kept for QueryTask

  // Re-replication: objects that lost a replica with a worker are copied back
  // to their put's replica count, hottest first, at a rate that finishes the
  // backlog within `repair_within_ms` of the loss (and at least
  // repair_min_bandwidth bytes/s). false: lost replicas stay lost.
  bool repair = true;
  int64_t repair_within_ms = 10'000;
  uint64_t repair_min_bandwidth = uint64_t{256} << 20;

  // Drain, when the request names no bandwidth: its copies are paced to end
  // by `drain_pace` of its deadline (0.8: by four fifths of it), at the rate that
  // moves what is left by then, planned again as the drain goes (so a drain
  // that falls behind speeds up), at least drain_min_bandwidth and at most
  // drain_bandwidth bytes/s. Foreground reads keep their latency on the
  // workers' cores and links. An urgent drain (a spot notice), or drain_pace
  // 0, copies at drain_bandwidth from the start (0: unlimited).
  uint64_t drain_bandwidth = uint64_t{1} << 30;
  // 0.8 by measurement: reads' P99 during a drain was a median 1.17x the P99
  // before at 0.8, 1.25x at 0.5 (docs/elasticity.md).
  double drain_pace = 0.8;
  uint64_t drain_min_bandwidth = uint64_t{4} << 20;

  // Hot-object replicas: an object read at least `hot_reads` times within
  // `hot_window_ms` gets one more replica (up to hot_max_replicas in all) on
  // another worker, while hot extras take at most hot_max_fraction of the
  // pool's capacity; they are the first replicas dropped when use passes the
  // high watermark. hot_reads 0: off.
  uint32_t hot_reads = 0;
  int64_t hot_window_ms = 1'000;
  uint32_t hot_max_replicas = 3;
  double hot_max_fraction = 0.1;
};

// Why a copy task exists. kRelocate: a move within one segment for its
// compaction (internal/relocation_path.h); its dst_range is the new range.
enum class CopyKind : uint8_t { kUser, kDrain, kRepair, kHot, kRelocate };
inline constexpr size_t kCopyKinds = 5;

struct CopyRecord {
  store::proto::CopyTask task;  // task_id assigned by Enqueue
  std::string key;
  std::string worker_id;  // the source worker: runs the task
  uint64_t dst_segment_id = 0;
  alloc::Allocation dst_range;
  CopyKind kind = CopyKind::kUser;
  uint64_t user_task_id = 0;     // 0: not part of a user task
  uint64_t drop_segment_id = 0;  // a move: the source replica to drop once copied
  uint64_t bytes = 0;
  bool issued = false;
  int64_t issued_ns = 0;
  bool queued_seen = false;
  int64_t queued_seen_ns = 0;
};
static_assert(master_internal::TaskRecord<CopyRecord>);

class CopyRegistry {
 public:
  explicit CopyRegistry(const ReplicationOptions& options)
      : options_(options), queue_(master_internal::TaskQueueOptionsOf(options)) {}

  // ---- User tasks -------------------------------------------------------------

  // A new user task of `parts` copy tasks; returns its id (never 0).
  uint64_t NewUserTask(store::proto::ReplicaTaskType type, std::string_view worker, size_t parts) {
    MutexLock lock(&mu_);
    const uint64_t id = next_user_id_++;
    store::proto::QueryTaskResponse& t = users_[id].info;
    t.set_task_id(id);
    t.set_type(type);
    t.set_status(store::proto::REPLICA_TASK_PENDING);
    t.set_created_at_ms_epoch(absl::ToUnixMillis(absl::Now()));
    t.set_last_updated_at_ms_epoch(t.created_at_ms_epoch());
    t.set_assigned_worker(std::string(worker));
    users_[id].parts_left = parts;
    return id;
  }

  // One part of user task `id` ended (or could not start: `st` says why).
  void EndUserPart(uint64_t id, const absl::Status& st) {
    if (id == 0) return;
    MutexLock lock(&mu_);
    auto it = users_.find(id);
    if (it == users_.end()) return;
    User& u = it->second;
    if (!st.ok() && u.first_error.ok()) u.first_error = st;
    if (u.parts_left > 0) --u.parts_left;
    u.info.set_last_updated_at_ms_epoch(absl::ToUnixMillis(absl::Now()));
    if (u.parts_left > 0) return;
    if (u.first_error.ok()) {
      u.info.set_status(store::proto::REPLICA_TASK_SUCCESS);
      u.info.set_message("Task completed successfully");
    } else {
      u.info.set_status(store::proto::REPLICA_TASK_FAILED);
      u.info.set_message(std::string(u.first_error.message()));
    }
    finished_.push_back(id);
    while (finished_.size() > options_.task_history) {
      users_.erase(finished_.front());
      finished_.pop_front();
    }
  }

  std::optional<store::proto::QueryTaskResponse> Query(uint64_t id) const {
    MutexLock lock(&mu_);
    auto it = users_.find(id);
    if (it == users_.end()) return std::nullopt;
    return it->second.info;
  }

  // ---- Copy tasks ---------------------------------------------------------------

  // Queues `rec` for its source worker; returns the task id, or nullopt when
  // that worker's queue is full.
  std::optional<uint64_t> Enqueue(CopyRecord rec) {
    MutexLock lock(&mu_);
    const uint64_t user_task_id = rec.user_task_id;
    std::string worker_id = user_task_id != 0 ? rec.worker_id : std::string();
    const std::optional<uint64_t> id = queue_.Enqueue(std::move(rec));
    if (id.has_value() && user_task_id != 0) {
      // The worker that copies: known once a copy of the task is queued.
      if (auto u = users_.find(user_task_id);
          u != users_.end() && u->second.info.assigned_worker().empty()) {
        u->second.info.set_assigned_worker(std::move(worker_id));
      }
    }
    return id;
  }

  // Tasks of `worker_id` queued or in flight (what the planners fill up to
  // max_in_flight_per_worker).
  size_t Outstanding(std::string_view worker_id) const {
    MutexLock lock(&mu_);
    return queue_.Queued(worker_id) + queue_.InFlight(worker_id);
  }

  // Up to `max` queued tasks of the worker, waiting up to `wait` (at most
  // max_wait_ms) for the first.
  std::vector<store::proto::CopyTask> Take(std::string_view worker_id, size_t max,
                                           absl::Duration wait, int64_t now_ns) {
    MutexLock lock(&mu_);
    return queue_.Take(
        mu_, worker_id, max, wait, now_ns, [] { return true; },
        [this](const CopyRecord& r) {
          mu_.AssertHeld();
          if (r.user_task_id != 0) MarkProcessingLocked(r.user_task_id);
        });
  }

  // The record of a task the worker finished; nullopt for an unknown id (timed
  // out or given back) or a task of another worker.
  std::optional<CopyRecord> Complete(uint64_t task_id, std::string_view worker_id) {
    MutexLock lock(&mu_);
    return queue_.Complete(task_id, worker_id);
  }

  // Tasks in flight (or queued untaken) for longer than task_timeout_ms.
  std::vector<CopyRecord> TakeTimedOut(int64_t now_ns) {
    MutexLock lock(&mu_);
    return queue_.TakeTimedOut(now_ns);
  }

  // Every task of a worker that left (queued or in flight), taken out.
  std::vector<CopyRecord> RemoveWorker(std::string_view worker_id) {
    MutexLock lock(&mu_);
    return queue_.RemoveWorker(worker_id);
  }

  size_t tasks() const {
    MutexLock lock(&mu_);
    return queue_.tasks();
  }

  // Wakes parked long polls; later ones answer at once (shutdown).
  void StopWaiting() {
    MutexLock lock(&mu_);
    queue_.StopWaiting();
  }

 private:
  struct User {
    store::proto::QueryTaskResponse info;
    size_t parts_left = 0;
    absl::Status first_error;
  };

  void MarkProcessingLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = users_.find(id);
    if (it == users_.end() || it->second.info.status() != store::proto::REPLICA_TASK_PENDING) {
      return;
    }
    it->second.info.set_status(store::proto::REPLICA_TASK_PROCESSING);
    it->second.info.set_last_updated_at_ms_epoch(absl::ToUnixMillis(absl::Now()));
  }

  const ReplicationOptions options_;
  mutable Mutex mu_;
  master_internal::TaskQueue<CopyRecord> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t next_user_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, User> users_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> finished_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_COPY_REGISTRY_H_
