// DeadlineQueue: a thread-safe min-heap of (deadline, id, key) that hands back
// the entries whose deadline has passed. The master files pending puts
// (revoked at their deadline) and TTL'd objects (removed at expiry) here, so
// Tick() costs O(expired log n), not a scan of every object.
//
// Entries are hints: the owner re-checks the object (same key, same put id or
// version) before acting, so an entry whose object already went is skipped,
// never an error. Bounded by the number of live puts and TTL'd objects.
#ifndef MOONCAKE_STORE_MASTER_INTERNAL_DEADLINE_QUEUE_H_
#define MOONCAKE_STORE_MASTER_INTERNAL_DEADLINE_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <queue>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

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
    absl::MutexLock lock(&mu_);
    heap_.push(DeadlineEntry{deadline_ns, id, std::move(key)});
  }

  // Removes and returns up to `max` entries with deadline_ns <= now_ns,
  // earliest first.
  std::vector<DeadlineEntry> PopDue(int64_t now_ns, size_t max) {
    std::vector<DeadlineEntry> due;
    absl::MutexLock lock(&mu_);
    while (!heap_.empty() && heap_.top().deadline_ns <= now_ns && due.size() < max) {
      due.push_back(heap_.top());
      heap_.pop();
    }
    return due;
  }

  size_t size() const {
    absl::MutexLock lock(&mu_);
    return heap_.size();
  }

 private:
  mutable absl::Mutex mu_;
  std::priority_queue<DeadlineEntry, std::vector<DeadlineEntry>, std::greater<DeadlineEntry>> heap_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::master_internal

#endif  // MOONCAKE_STORE_MASTER_INTERNAL_DEADLINE_QUEUE_H_
