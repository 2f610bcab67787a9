// OpTracker: counts the SSD tier's work in flight (operations, and the
// fdatasyncs and background-sync timers the group commit started) so that
// the destructor can wait for all of it before it stops the reapers.
//
// Thread-safety: every call may run concurrently; one lock (mu_). A leaf in
// SsdTier's lock order (ssd_tier.h).
#ifndef MOONCAKE_TIER_INTERNAL_OP_TRACKER_H_
#define MOONCAKE_TIER_INTERNAL_OP_TRACKER_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"

namespace mooncake::tier_internal {

class OpTracker {
 public:
  void Begin() {
    MutexLock lock(&mu_);
    ++in_flight_;
  }
  // REQUIRES: a Begin not yet ended.
  void End() {
    MutexLock lock(&mu_);
    MC_ASSERT(in_flight_ > 0, "OpTracker::End without Begin");
    if (--in_flight_ == 0) idle_.SignalAll();
  }
  // Returns once nothing is in flight.
  void WaitIdle() {
    MutexLock lock(&mu_);
    while (in_flight_ != 0) idle_.Wait(&mu_);
  }
  uint64_t in_flight() const {
    MutexLock lock(&mu_);
    return in_flight_;
  }

 private:
  mutable Mutex mu_;
  CondVar idle_;
  uint64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mooncake::tier_internal

#endif  // MOONCAKE_TIER_INTERNAL_OP_TRACKER_H_
