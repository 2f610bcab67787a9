// The bookkeeping every Scheduler model shares: bounds, totals and per-class
// counters. Models call TryAdmit before queueing an item and OnPopped after
// dequeueing one, so the counters and bounds live in one place.
//
// Thread-compatible. Invariants: size_ == sum of queued_items over classes,
// queued_bytes_ == sum of queued_bytes, size_ <= capacity_items,
// queued_bytes_ <= capacity_bytes.
#ifndef MOONCAKE_QOS_INTERNAL_LEDGER_H_
#define MOONCAKE_QOS_INTERNAL_LEDGER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/qos/scheduler.h"

namespace mooncake::qos_internal {

inline absl::Status ValidateLimits(const qos::SchedulerLimits& limits) {
  if (limits.class_count < 1 || limits.class_count > qos::kMaxClasses) {
    return absl::InvalidArgumentError(absl::StrCat("class_count is ", limits.class_count,
                                                   "; it must be in [1, ", qos::kMaxClasses, "]"));
  }
  if (limits.capacity_items < 1 || limits.capacity_items > qos::kMaxCapacityItems) {
    return absl::InvalidArgumentError(absl::StrCat("capacity_items is ", limits.capacity_items,
                                                   "; it must be in [1, ", qos::kMaxCapacityItems,
                                                   "]"));
  }
  if (limits.capacity_bytes < 1 || limits.capacity_bytes > qos::kMaxCapacityBytes) {
    return absl::InvalidArgumentError(absl::StrCat("capacity_bytes is ", limits.capacity_bytes,
                                                   "; it must be in [1, ", qos::kMaxCapacityBytes,
                                                   "]"));
  }
  return absl::OkStatus();
}

class Ledger {
 public:
  // REQUIRES: ValidateLimits(limits).ok().
  explicit Ledger(const qos::SchedulerLimits& limits)
      : limits_(limits), stats_(limits.class_count) {
    MC_ASSERT(ValidateLimits(limits).ok(), "invalid SchedulerLimits; use the model's Create()");
  }

  size_t size() const { return size_; }
  uint64_t queued_bytes() const { return queued_bytes_; }
  size_t class_count() const { return stats_.size(); }
  const qos::SchedulerLimits& limits() const { return limits_; }

  const qos::ClassStats& Stats(qos::ClassId cls) const {
    MC_ASSERT(cls < stats_.size(), "class id out of range");
    return stats_[cls];
  }

  // Counts the push; true if it fits within the bounds (then it is counted as
  // queued), false if it is refused.
  [[nodiscard]] bool TryAdmit(qos::ClassId cls, uint64_t cost_bytes) {
    MC_ASSERT(cls < stats_.size(), "class id out of range");
    qos::ClassStats& s = stats_[cls];
    if (size_ == limits_.capacity_items || cost_bytes > limits_.capacity_bytes - queued_bytes_) {
      ++s.refused_items;
      s.refused_bytes += cost_bytes;
      return false;
    }
    ++size_;
    queued_bytes_ += cost_bytes;
    ++s.pushed_items;
    s.pushed_bytes += cost_bytes;
    ++s.queued_items;
    s.queued_bytes += cost_bytes;
    return true;
  }

  void OnPopped(qos::ClassId cls, uint64_t cost_bytes) {
    MC_DASSERT(cls < stats_.size(), "class id out of range");
    qos::ClassStats& s = stats_[cls];
    MC_DASSERT(s.queued_items > 0 && s.queued_bytes >= cost_bytes, "pop of an unqueued item");
    MC_DASSERT(size_ > 0 && queued_bytes_ >= cost_bytes, "ledger totals underflow");
    --size_;
    queued_bytes_ -= cost_bytes;
    ++s.popped_items;
    s.popped_bytes += cost_bytes;
    --s.queued_items;
    s.queued_bytes -= cost_bytes;
  }

 private:
  qos::SchedulerLimits limits_;
  std::vector<qos::ClassStats> stats_;
  size_t size_ = 0;
  uint64_t queued_bytes_ = 0;
};

}  // namespace mooncake::qos_internal

#endif  // MOONCAKE_QOS_INTERNAL_LEDGER_H_
