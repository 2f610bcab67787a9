// DeadlineQueue: a thread-safe min-heap of (deadline, id, key) that hands back
// the entries whose deadline has passed. The master files pending puts
// (revoked at their deadline) and TTL'd objects (removed at expiry) here, so
// Tick() costs O(expired log n), not a scan of every object.
//
// Entries are hints: the owner re-checks the object (same key, same put id or
// version) before acting, so an entry whose object already went is skipped,
// never an error. An owner that settles an object early (a put that ended)
// cancels its entry, so the queue holds about as many entries as objects
// still waiting for their deadline, not every object filed in the last
// deadline's span.
//
// Cancel is lazy: the id is remembered and its entry skipped when popped;
// once cancelled ids reach half the entries, the heap is rebuilt without them
// (O(1) amortized per Cancel). The vector shrinks when under a quarter full.
//
// Memory: O(entries + cancelled ids), cancelled ids <= entries / 2 + 1.
#ifndef MOONCAKE_STORE_MASTER_INTERNAL_DEADLINE_QUEUE_H_
#define MOONCAKE_STORE_MASTER_INTERNAL_DEADLINE_QUEUE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "mooncake/base/mutex.h"

namespace mooncake::master_internal {

struct DeadlineEntry {
  int64_t deadline_ns = 0;
  uint64_t id = 0;  // put id or version
  std::string key;

  friend bool operator>(const DeadlineEntry& a, const DeadlineEntry& b) {
    return a.deadline_ns > b.deadline_ns || (a.deadline_ns == b.deadline_ns && a.id > b.id);
  }
};

class DeadlineQueue {
 public:
  void Push(int64_t deadline_ns, uint64_t id, std::string key) {
    MutexLock lock(&mu_);
    heap_.push_back(DeadlineEntry{deadline_ns, id, std::move(key)});
    std::push_heap(heap_.begin(), heap_.end(), std::greater<DeadlineEntry>());
  }

  // The entry of `id` will not be popped. An id not in the queue (popped
  // already, or never pushed) is tolerated: it is forgotten at the next
  // rebuild. REQUIRES: the queue's ids are unique (put ids).
  void Cancel(uint64_t id) {
    MutexLock lock(&mu_);
    cancelled_.insert(id);
    if (2 * cancelled_.size() > heap_.size()) RebuildLocked();
  }

  // Removes and returns up to `max` entries with deadline_ns <= now_ns,
  // earliest first (cancelled entries are dropped, not returned).
  std::vector<DeadlineEntry> PopDue(int64_t now_ns, size_t max) {
    std::vector<DeadlineEntry> due;
    MutexLock lock(&mu_);
    while (!heap_.empty() && heap_.front().deadline_ns <= now_ns && due.size() < max) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<DeadlineEntry>());
      DeadlineEntry e = std::move(heap_.back());
      heap_.pop_back();
      if (!cancelled_.empty() && cancelled_.erase(e.id) > 0) continue;
      due.push_back(std::move(e));
    }
    ShrinkLocked();
    return due;
  }

  // Entries held, cancelled ones included until they are dropped.
  size_t size() const {
    MutexLock lock(&mu_);
    return heap_.size();
  }
  size_t capacity() const {
    MutexLock lock(&mu_);
    return heap_.capacity();
  }

 private:
  void RebuildLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::erase_if(heap_, [&](const DeadlineEntry& e) { return cancelled_.contains(e.id); });
    std::make_heap(heap_.begin(), heap_.end(), std::greater<DeadlineEntry>());
    cancelled_.clear();  // keeps a small table, frees a large one
    ShrinkLocked();
  }

  // A burst's capacity is given back once the queue drains below a quarter.
  void ShrinkLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    constexpr size_t kKeepCapacity = 1024;
    if (heap_.capacity() > kKeepCapacity && 4 * heap_.size() < heap_.capacity()) {
      std::vector<DeadlineEntry> smaller;
      smaller.reserve(std::max(kKeepCapacity, 2 * heap_.size()));
      std::move(heap_.begin(), heap_.end(), std::back_inserter(smaller));
      heap_.swap(smaller);
    }
  }

  mutable Mutex mu_;
  // A min-heap by (deadline_ns, id) under std::greater.
  std::vector<DeadlineEntry> heap_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> cancelled_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::master_internal

#endif  // MOONCAKE_STORE_MASTER_INTERNAL_DEADLINE_QUEUE_H_
