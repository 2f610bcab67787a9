// TierRegistry: the workers' SSD tiers as the master sees them, and the work
// it hands them.
//
// A worker with a tier reports it through TierSync (capacity and use, as the
// tier counts them). From then on the master's eviction writes its objects
// back to that tier instead of dropping them (OFFLOAD), a read of an object
// that is only on the tier loads it into a DRAM range of the same worker
// (LOAD), and removing such an object deletes its record (DROP). A task is
// queued here, handed out by Take (the worker's TierSync long poll) and
// finished by Complete with the worker's result; the master's paths
// (internal/tier_path.h) own the object-level steps on both ends.
//
// Space. The registry charges each worker's tier the raw record size of every
// object being stored there (`ChargeFor`, `Reserve`); an offload is started
// only where that fits. Once stored, a copy is charged what the tier reports
// its record takes (`Stored`: compressed records leave room for more). A tier
// that refuses a record for space its charges said it had is fragmented: that
// much is then not counted on (`NoteRefused`). The
// SSD copies of each worker are kept in LRU order (`resident`): when a new
// offload does not fit, the master drops the least recently used copies.
//
// Bounds: at most `max_queued_tasks` queued per worker (Enqueue refuses more);
// `max_waiting_polls` long polls wait at once (others answer at once, so the
// RPC server's handler threads are never all parked here); a task in flight
// for longer than `task_timeout_ms` is given back by TakeTimedOut. The
// queueing itself is internal/task_queue.h's, under this registry's mutex.
//
// Thread-safety: every method may run concurrently (one mutex, a leaf in the
// master's lock order: nothing else is locked while it is held).
#ifndef MOONCAKE_STORE_MASTER_TIER_REGISTRY_H_
#define MOONCAKE_STORE_MASTER_TIER_REGISTRY_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "mooncake/alloc/allocator.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"
#include "mooncake/index/lru_policy.h"
#include "mooncake/store/master/evictor.h"
#include "mooncake/store/master/internal/task_queue.h"
#include "mooncake/store/rpc/master.pb.h"

namespace mooncake::master {

struct TierOptions {
  int64_t task_timeout_ms = 30'000;  // in flight longer: given back as failed
  int64_t max_wait_ms = 1'000;       // longest TierSync long poll
  size_t max_waiting_polls = 4;      // long polls parked at once
  size_t max_queued_tasks = 65'536;  // per worker
  // What one record costs a tier beyond its bytes (mooncake/tier SsdTier: a
  // 4 KiB header block, payload padded to 4 KiB; docs/ssd_format.md).
  uint64_t record_overhead_bytes = 4096;
  uint64_t block_bytes = 4096;  // a power of two
  // Write-back policy: an evicted object smaller than this is dropped, as without a tier,
  // instead of written back (a record costs a 4 KiB header and a device round trip, which
  // small objects may not earn back). 0: every evicted object that fits is written back.
  uint64_t offload_min_bytes = 0;
};

// One task, with what the master needs when it ends.
struct TierTaskRecord {
  store::proto::TierTask task;  // as handed to the worker (task_id set by Enqueue)
  std::string key;              // the object (its version is task.version())
  std::string worker_id;
  uint64_t tier_bytes = 0;       // OFFLOAD: bytes reserved on the tier
  uint64_t dram_bytes = 0;       // OFFLOAD: DRAM bytes it will free (counted as offloading)
  alloc::Allocation load_range;  // LOAD: the DRAM range being filled
  bool issued = false;           // handed out by Take
  int64_t issued_ns = 0;         // when
  bool queued_seen = false;      // a TakeTimedOut saw it queued,
  int64_t queued_seen_ns = 0;    // first at this time
};
static_assert(master_internal::TaskRecord<TierTaskRecord>);

struct TierWorkerView {
  std::string worker_id;
  uint64_t capacity_bytes = 0;
  uint64_t reported_used_bytes = 0;
  uint64_t reserved_bytes = 0;   // charges: copies stored (their size), being stored (raw)
  uint64_t shortfall_bytes = 0;  // capacity not counted on (NoteRefused)
  uint64_t resident = 0;         // copies in the LRU
  size_t queued = 0;
  size_t in_flight = 0;
};

class TierRegistry {
 public:
  explicit TierRegistry(TierOptions options = {})
      : options_(options), queue_(master_internal::TaskQueueOptionsOf(options)) {}

  const TierOptions& options() const { return options_; }

  // Tier bytes charged for an object of `size` bytes: its record stored raw
  // (compression only makes the record smaller).
  uint64_t ChargeFor(uint64_t size) const {
    const uint64_t b = options_.block_bytes;
    return ((size + b - 1) & ~(b - 1)) + options_.record_overhead_bytes;
  }

  // A worker's report of its tier; capacity 0 says it has none (nothing is
  // registered then). Returns false if the worker had no tier before.
  bool Report(std::string_view worker_id, uint64_t capacity_bytes, uint64_t used_bytes) {
    MutexLock lock(&mu_);
    auto it = workers_.find(AbslView(worker_id));
    const bool known = it != workers_.end();
    if (capacity_bytes == 0) return known;
    if (!known) it = workers_.try_emplace(std::string(worker_id)).first;
    it->second.capacity_bytes = capacity_bytes;
    it->second.reported_used_bytes = used_bytes;
    return known;
  }

  bool HasTier(std::string_view worker_id) const {
    MutexLock lock(&mu_);
    return workers_.contains(AbslView(worker_id));
  }

  // Charges `bytes` to the worker's tier if they fit. False: no tier, or full.
  bool Reserve(std::string_view worker_id, uint64_t bytes) {
    MutexLock lock(&mu_);
    Worker* w = FindLocked(worker_id);
    if (w == nullptr || bytes > Usable(*w) - std::min(Usable(*w), w->reserved_bytes)) return false;
    w->reserved_bytes += bytes;
    return true;
  }
  void Unreserve(std::string_view worker_id, uint64_t bytes) {
    MutexLock lock(&mu_);
    if (Worker* w = FindLocked(worker_id); w != nullptr) {
      MC_DASSERT(w->reserved_bytes >= bytes, "unreserving more than was reserved");
      w->reserved_bytes -= std::min(w->reserved_bytes, bytes);
    }
  }
  // Whether `bytes` could fit on the worker's tier at all: what is neither
  // reserved nor held by stored copies (which MakeTierRoom can drop).
  bool CouldHold(std::string_view worker_id, uint64_t bytes) const {
    MutexLock lock(&mu_);
    const Worker* w = FindLocked(worker_id);
    if (w == nullptr) return false;
    const uint64_t pinned = w->reserved_bytes - std::min(w->reserved_bytes, w->resident.charged());
    return bytes <= Usable(*w) - std::min(Usable(*w), pinned);
  }

  // The tier refused, for want of space, a record of `bytes` that the charges
  // said fits: its free space is fragmented (records of different sizes left
  // holes no new record fits in). From now on that much of its capacity is not
  // counted on, so later offloads first drop old copies to make room instead
  // of failing, and dropping their objects, one by one. At most an eighth of
  // the capacity. Only a refusal the tier's own last report had room for
  // counts (a tier that was simply full, e.g. a DROP meant to make room not
  // done yet, is not fragmented). Each offload the tier then takes gives back
  // 1/32 of a record's charge, so a passing cause does not keep the capacity
  // down.
  void NoteRefused(std::string_view worker_id, uint64_t bytes) {
    MutexLock lock(&mu_);
    Worker* w = FindLocked(worker_id);
    if (w == nullptr ||
        w->capacity_bytes - std::min(w->capacity_bytes, w->reported_used_bytes) < bytes) {
      return;
    }
    w->shortfall_bytes = std::min(w->shortfall_bytes + bytes, w->capacity_bytes / 8);
  }

  // Bytes still free for reservations (0 for a worker without a tier).
  uint64_t Unreserved(std::string_view worker_id) const {
    MutexLock lock(&mu_);
    const Worker* w = FindLocked(worker_id);
    return w == nullptr ? 0 : Usable(*w) - std::min(Usable(*w), w->reserved_bytes);
  }

  // ---- The LRU of SSD copies, per worker --------------------------------------

  // A finished offload: the copy enters the LRU charged `charged` bytes, the
  // rest of its `reserved` bytes are given back, and the shortfall eases.
  void Stored(std::string_view worker_id, const std::string& key, uint64_t reserved,
              uint64_t charged) {
    MutexLock lock(&mu_);
    Worker* w = FindLocked(worker_id);
    if (w == nullptr) return;
    AdmitResidentLocked(*w, key, charged);
    MC_DASSERT(w->reserved_bytes >= reserved - charged, "unreserving more than was reserved");
    w->reserved_bytes -= std::min(w->reserved_bytes, reserved - charged);
    w->shortfall_bytes -= std::min(w->shortfall_bytes, reserved / 32);
  }

  void AdmitResident(std::string_view worker_id, const std::string& key, uint64_t bytes) {
    MutexLock lock(&mu_);
    if (Worker* w = FindLocked(worker_id); w != nullptr) AdmitResidentLocked(*w, key, bytes);
  }
  void TouchResident(std::string_view worker_id, const std::string& key) {
    MutexLock lock(&mu_);
    if (Worker* w = FindLocked(worker_id); w != nullptr && w->resident.Contains(key)) {
      w->resident.Touch(std::span<const std::string>(&key, 1));
    }
  }
  void EraseResident(std::string_view worker_id, const std::string& key) {
    MutexLock lock(&mu_);
    if (Worker* w = FindLocked(worker_id); w != nullptr) w->resident.Erase(key);
  }
  // Takes the least recently used copy on the worker out of the LRU.
  std::optional<std::string> PopOldestResident(std::string_view worker_id) {
    MutexLock lock(&mu_);
    Worker* w = FindLocked(worker_id);
    if (w == nullptr) return std::nullopt;
    auto victim = w->resident.Evict([](const std::string&) { return true; });
    if (!victim.has_value()) return std::nullopt;
    return std::move(victim->key);
  }

  // ---- Tasks ----------------------------------------------------------------

  // Queues `rec` for its worker and wakes its long poll. Returns the task id,
  // or nullopt if the worker has no tier or its queue is full.
  std::optional<uint64_t> Enqueue(TierTaskRecord rec) {
    MutexLock lock(&mu_);
    if (FindLocked(rec.worker_id) == nullptr) return std::nullopt;
    return queue_.Enqueue(std::move(rec));
  }

  // Up to `max` queued tasks of the worker, marked in flight at `now_ns`. If
  // there are none, waits up to `wait` (clamped to max_wait_ms; real time)
  // for one, unless max_waiting_polls polls already wait. Nothing for a
  // worker without a tier (or whose tier is forgotten while it waits).
  std::vector<store::proto::TierTask> Take(std::string_view worker_id, size_t max,
                                           absl::Duration wait, int64_t now_ns) {
    MutexLock lock(&mu_);
    return queue_.Take(
        mu_, worker_id, max, wait, now_ns,
        [this, worker_id] {
          mu_.AssertHeld();
          return FindLocked(worker_id) != nullptr;
        },
        [](const TierTaskRecord&) {});
  }

  // The record of a task the worker finished; nullopt for an unknown id (timed
  // out or the worker was removed: its record was given back then) or a task
  // of another worker.
  std::optional<TierTaskRecord> Complete(uint64_t task_id, std::string_view worker_id) {
    MutexLock lock(&mu_);
    return queue_.Complete(task_id, worker_id);
  }

  // Tasks in flight for longer than task_timeout_ms, and tasks no poll took
  // for that long (a worker whose agent is stuck), taken out. Queued tasks
  // are timed from the first call that sees them (calls come every Tick).
  std::vector<TierTaskRecord> TakeTimedOut(int64_t now_ns) {
    MutexLock lock(&mu_);
    return queue_.TakeTimedOut(now_ns);
  }

  // Forgets the worker's tier; returns its queued and in-flight tasks.
  std::vector<TierTaskRecord> RemoveWorker(std::string_view worker_id) {
    MutexLock lock(&mu_);
    if (!workers_.contains(AbslView(worker_id))) return {};
    workers_.erase(AbslView(worker_id));
    return queue_.RemoveWorker(worker_id);
  }

  // Wakes every long poll and makes later ones answer at once (shutdown).
  void StopWaiting() {
    MutexLock lock(&mu_);
    queue_.StopWaiting();
  }

  std::vector<TierWorkerView> Snapshot() const {
    MutexLock lock(&mu_);
    std::vector<TierWorkerView> out;
    for (const auto& [id, w] : workers_) {
      out.push_back({id, w.capacity_bytes, w.reported_used_bytes, w.reserved_bytes,
                     w.shortfall_bytes, w.resident.size(), queue_.Queued(id), queue_.InFlight(id)});
    }
    return out;
  }
  size_t tasks() const {
    MutexLock lock(&mu_);
    return queue_.tasks();
  }
  size_t waiting_polls() const {
    MutexLock lock(&mu_);
    return queue_.waiting_polls();
  }

 private:
  struct Worker {
    uint64_t capacity_bytes = 0;
    uint64_t reported_used_bytes = 0;
    uint64_t reserved_bytes = 0;
    uint64_t shortfall_bytes = 0;
    index::LruPolicy<std::string, ObjectKeyHash> resident;
  };

  static void AdmitResidentLocked(Worker& w, const std::string& key, uint64_t bytes) {
    std::span<const std::string> one(&key, 1);
    if (w.resident.Contains(key)) {
      w.resident.Touch(one);
    } else {
      w.resident.Admit(one, 0, bytes);
    }
  }

  // Capacity the charges may use.
  static uint64_t Usable(const Worker& w) {
    return w.capacity_bytes - std::min(w.capacity_bytes, w.shortfall_bytes);
  }

  Worker* FindLocked(std::string_view worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = workers_.find(AbslView(worker_id));
    return it == workers_.end() ? nullptr : &it->second;
  }
  const Worker* FindLocked(std::string_view worker_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = workers_.find(AbslView(worker_id));
    return it == workers_.end() ? nullptr : &it->second;
  }

  const TierOptions options_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, Worker> workers_ ABSL_GUARDED_BY(mu_);
  master_internal::TaskQueue<TierTaskRecord> queue_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_TIER_REGISTRY_H_
