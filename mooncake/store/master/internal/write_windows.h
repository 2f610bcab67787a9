// WriteWindows: until when a committed tenant object's put may still be
// written through its write capability (MasterOptions::hold_write_windows;
// docs/security.md, "Capabilities live until they expire").
//
// A tenant's write capability for a put's ranges lasts until the put's
// deadline, even after the put committed. If the object left the table before
// then and its space went to another put, the first writer could still write
// into the new object's bytes. So the master remembers, per committed tenant
// object (by version), the end of that window, and RetireLocked holds the
// object's space until it (a DeferredFree). Pending puts carry their deadline
// themselves (PendingPut::put_deadline_ns).
//
// Entries are dropped once their window has passed, in the order they were
// opened; ends are within put_timeout of each other in that order, so at
// most the puts committed in the last put_timeout (plus that spread) are kept.
//
// Thread-safety: every method may be called concurrently (one mutex; only a
// master that issues capabilities to tenants takes it, at commit and retire).
#ifndef MOONCAKE_STORE_MASTER_INTERNAL_WRITE_WINDOWS_H_
#define MOONCAKE_STORE_MASTER_INTERNAL_WRITE_WINDOWS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "mooncake/base/mutex.h"

namespace mooncake::master_internal {

class WriteWindows {
 public:
  // The put that made object `version` may be written until end_ns.
  void Open(uint64_t version, int64_t end_ns, int64_t now_ns) {
    MutexLock lock(&mu_);
    DropPastLocked(now_ns);
    if (end_ns <= now_ns) return;
    ends_[version] = end_ns;
    order_.emplace_back(end_ns, version);
  }

  // The end of `version`'s window if it is still open at now_ns, else 0; the
  // entry is forgotten either way (the object is leaving).
  int64_t Take(uint64_t version, int64_t now_ns) {
    MutexLock lock(&mu_);
    DropPastLocked(now_ns);
    auto it = ends_.find(version);
    if (it == ends_.end()) return 0;
    const int64_t end = it->second;
    ends_.erase(it);
    return end > now_ns ? end : 0;
  }

  size_t size() const {
    MutexLock lock(&mu_);
    return ends_.size();
  }

 private:
  void DropPastLocked(int64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (!order_.empty() && order_.front().first <= now_ns) {
      ends_.erase(order_.front().second);  // gone already when taken: a no-op
      order_.pop_front();
    }
  }

  mutable Mutex mu_;
  absl::flat_hash_map<uint64_t, int64_t> ends_ ABSL_GUARDED_BY(mu_);     // version -> end
  std::deque<std::pair<int64_t, uint64_t>> order_ ABSL_GUARDED_BY(mu_);  // (end, version)
};

}  // namespace mooncake::master_internal

#endif  // MOONCAKE_STORE_MASTER_INTERNAL_WRITE_WINDOWS_H_
