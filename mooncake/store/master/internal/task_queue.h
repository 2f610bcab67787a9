// TaskQueue: the per-worker queues of tasks the master hands workers through a
// long poll (copy_registry.h's copies on CopySync, tier_registry.h's tier work
// on TierSync). A task is queued for one worker (Enqueue), handed out by Take
// (that worker's long poll) and ended by Complete with the worker's result,
// by TakeTimedOut, or by RemoveWorker when the worker leaves.
//
// Bounds: at most `max_queued_tasks` queued per worker (Enqueue refuses
// more); at most `max_waiting_polls` polls parked at once (others answer at
// once, so the RPC server's handler threads are never all parked here), each
// for at most `max_wait_ms`; a task in flight, or queued untaken, for longer
// than `task_timeout_ms` is given back by TakeTimedOut. Queued tasks are timed
// from the first TakeTimedOut call that sees them (the master calls it every
// Tick), so a stuck worker's queue does not grow forever.
//
// Ids: task ids count up from 1 and are never reused. An id that leaves early
// (timed out while queued) stays in its worker's deque until Take skips it.
//
// Thread-safety: none of its own. The owner guards a TaskQueue with its one
// mutex, held across every call, and passes that mutex to Take, which parks
// on it; so the owner's other state (space, user tasks) changes atomically
// with the queue.
//
// Complexity: Enqueue, Complete O(1); Take O(tasks taken + ids skipped);
// TakeTimedOut and RemoveWorker O(tasks).
#ifndef MOONCAKE_STORE_MASTER_INTERNAL_TASK_QUEUE_H_
#define MOONCAKE_STORE_MASTER_INTERNAL_TASK_QUEUE_H_

#include <algorithm>
#include <concepts>
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
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"

namespace mooncake::master_internal {

// What the queue reads and writes in a record; the rest is the owner's.
template <class R>
concept TaskRecord = std::movable<R> && requires(R r, uint64_t id) {
  r.task.set_task_id(id);  // the message handed to the worker, copied out by Take
  requires std::copy_constructible<decltype(R::task)>;
  requires std::same_as<decltype(R::worker_id), std::string>;   // the worker that runs it
  requires std::same_as<decltype(R::issued), bool>;             // handed out by Take,
  requires std::same_as<decltype(R::issued_ns), int64_t>;       // at this time
  requires std::same_as<decltype(R::queued_seen), bool>;        // a TakeTimedOut saw it queued,
  requires std::same_as<decltype(R::queued_seen_ns), int64_t>;  // first at this time
};

struct TaskQueueOptions {
  int64_t task_timeout_ms = 30'000;  // in flight (or queued untaken) longer: timed out
  int64_t max_wait_ms = 1'000;       // longest long poll
  size_t max_waiting_polls = 16;     // long polls parked at once
  size_t max_queued_tasks = 4'096;   // per worker
};

// The queue's bounds, from an owner's options that name them alike.
template <class Options>
TaskQueueOptions TaskQueueOptionsOf(const Options& o) {
  return {.task_timeout_ms = o.task_timeout_ms,
          .max_wait_ms = o.max_wait_ms,
          .max_waiting_polls = o.max_waiting_polls,
          .max_queued_tasks = o.max_queued_tasks};
}

template <TaskRecord Record>
class TaskQueue {
 public:
  using Task = decltype(Record::task);

  explicit TaskQueue(const TaskQueueOptions& options) : options_(options) {}

  // Queues `rec` for rec.worker_id with a new id (set in rec.task), not yet
  // issued, and wakes that worker's parked poll. nullopt: that worker's queue is full.
  std::optional<uint64_t> Enqueue(Record rec) {
    Lane& lane = lanes_[rec.worker_id];
    if (lane.queue.size() >= options_.max_queued_tasks) return std::nullopt;
    const uint64_t id = next_task_id_++;
    rec.task.set_task_id(id);
    rec.issued = false;
    lane.queue.push_back(id);
    const bool added = records_.emplace(id, std::move(rec)).second;
    MC_DASSERT(added, "task ids are never reused");
    return id;
  }

  // Up to `max` queued tasks of the worker, marked issued at `now_ns`; each
  // record is passed to `on_issue(Record&)` before its task is copied out. If
  // there are none, parks on `mu` up to `wait` (clamped to max_wait_ms; real
  // time) for one, unless max_waiting_polls polls are parked already or
  // StopWaiting was called. `open()` says whether the worker may still be
  // given work (the owner may forget a worker while a poll is parked): false
  // before or after the wait answers with nothing.
  template <class Open, class OnIssue>
  std::vector<Task> Take(Mutex& mu, std::string_view worker_id, size_t max, absl::Duration wait,
                         int64_t now_ns, Open open, OnIssue on_issue)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::vector<Task> out;
    if (max == 0 || !open()) return out;
    if (Queued(worker_id) == 0 && wait > absl::ZeroDuration() &&
        waiting_polls_ < options_.max_waiting_polls) {
      ++waiting_polls_;
      const absl::Time until =
          absl::Now() + std::min(wait, absl::Milliseconds(options_.max_wait_ms));
      // Evaluated at every release of `mu` (Mutex::Await), so the Enqueue for
      // this worker wakes this poll and no other; the lane is looked up again
      // each time, as Enqueue or RemoveWorker may have made or erased it.
      const auto ready = [&] {
        mu.AssertHeld();
        return stopping_ || !open() || Queued(worker_id) > 0;
      };
      mu.AwaitWithDeadline(Condition(&ready), until);
      --waiting_polls_;
      if (!open()) return out;
    }
    auto lane = lanes_.find(AbslView(worker_id));
    if (lane == lanes_.end()) return out;
    std::deque<uint64_t>& queue = lane->second.queue;
    while (!queue.empty() && out.size() < max) {
      const uint64_t id = queue.front();
      queue.pop_front();
      auto it = records_.find(id);
      if (it == records_.end()) continue;  // timed out while queued
      MC_DASSERT(!it->second.issued, "a queued task is not in flight");
      it->second.issued = true;
      it->second.issued_ns = now_ns;
      ++lane->second.in_flight;
      on_issue(it->second);
      out.push_back(it->second.task);
    }
    MC_DASSERT(out.size() <= max, "Take hands out at most max tasks");
    return out;
  }

  // The record of a task the worker finished; nullopt for an unknown id
  // (timed out, or its worker removed: the record was given back then), a
  // task not taken yet, or a task of another worker.
  std::optional<Record> Complete(uint64_t task_id, std::string_view worker_id) {
    auto it = records_.find(task_id);
    if (it == records_.end() || it->second.worker_id != worker_id || !it->second.issued) {
      return std::nullopt;
    }
    Record rec = std::move(it->second);
    records_.erase(it);
    EndInFlight(worker_id);
    return rec;
  }

  // Tasks in flight for longer than task_timeout_ms, and tasks no poll took
  // for that long, taken out (issued says which).
  std::vector<Record> TakeTimedOut(int64_t now_ns) {
    const int64_t timeout_ns = options_.task_timeout_ms * 1'000'000;
    std::vector<Record> out;
    for (auto it = records_.begin(); it != records_.end();) {
      Record& r = it->second;
      if (!r.issued && !r.queued_seen) {
        r.queued_seen = true;
        r.queued_seen_ns = now_ns;
      }
      const int64_t since = r.issued ? r.issued_ns : r.queued_seen_ns;
      if (now_ns - since > timeout_ns) {
        if (r.issued) EndInFlight(r.worker_id);  // a queued id is skipped by Take
        out.push_back(std::move(r));
        records_.erase(it++);
      } else {
        ++it;
      }
    }
    return out;
  }

  // Every task of the worker, queued or in flight, taken out; its queue is
  // forgotten and parked polls wake (to see `open()` turn false).
  std::vector<Record> RemoveWorker(std::string_view worker_id) {
    std::vector<Record> out;
    for (auto it = records_.begin(); it != records_.end();) {
      if (it->second.worker_id == worker_id) {
        out.push_back(std::move(it->second));
        records_.erase(it++);
      } else {
        ++it;
      }
    }
    lanes_.erase(AbslView(worker_id));
    return out;
  }

  // Wakes every parked poll and makes later ones answer at once (shutdown).
  void StopWaiting() { stopping_ = true; }

  // Ids in the worker's queue (including ones timed out there, not yet skipped).
  size_t Queued(std::string_view worker_id) const {
    auto it = lanes_.find(AbslView(worker_id));
    return it == lanes_.end() ? 0 : it->second.queue.size();
  }
  size_t InFlight(std::string_view worker_id) const {
    auto it = lanes_.find(AbslView(worker_id));
    return it == lanes_.end() ? 0 : it->second.in_flight;
  }
  size_t tasks() const { return records_.size(); }
  size_t waiting_polls() const { return waiting_polls_; }

 private:
  struct Lane {
    std::deque<uint64_t> queue;  // task ids, oldest first
    size_t in_flight = 0;
  };

  void EndInFlight(std::string_view worker_id) {
    auto it = lanes_.find(AbslView(worker_id));
    if (it != lanes_.end() && it->second.in_flight > 0) --it->second.in_flight;
  }

  const TaskQueueOptions options_;
  absl::flat_hash_map<uint64_t, Record> records_;
  absl::flat_hash_map<std::string, Lane> lanes_;
  uint64_t next_task_id_ = 1;
  size_t waiting_polls_ = 0;
  bool stopping_ = false;
};

}  // namespace mooncake::master_internal

#endif  // MOONCAKE_STORE_MASTER_INTERNAL_TASK_QUEUE_H_
