// FifoScheduler: one queue in arrival order, whatever the class. The baseline
// the class-aware models are measured against; it still keeps per-class stats.
//
// Thread-compatible (see scheduler.h); wrap in LockedScheduler to share it.
// Complexity: Push and Pop O(1) (amortized while the buffer first grows).
// Memory: grows by doubling to capacity_items entries and keeps them.
#ifndef MOONCAKE_QOS_FIFO_SCHEDULER_H_
#define MOONCAKE_QOS_FIFO_SCHEDULER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mooncake/base/assert.h"
#include "mooncake/qos/internal/ledger.h"
#include "mooncake/qos/internal/ring.h"
#include "mooncake/qos/scheduler.h"

namespace mooncake::qos {

template <typename T>
class FifoScheduler {
 public:
  using Item = T;

  struct Options {
    SchedulerLimits limits;
  };

  static absl::Status Validate(const Options& options) {
    return qos_internal::ValidateLimits(options.limits);
  }

  static absl::StatusOr<FifoScheduler> Create(const Options& options) {
    if (absl::Status s = Validate(options); !s.ok()) return s;
    return FifoScheduler(options);
  }

  // REQUIRES: Validate(options).ok() (asserted).
  explicit FifoScheduler(const Options& options)
      : ledger_(options.limits), queue_(options.limits.capacity_items) {}

  [[nodiscard]] PushResult Push(T&& item, ClassId cls, uint64_t cost_bytes) {
    if (!ledger_.TryAdmit(cls, cost_bytes)) return PushResult::kFull;
    queue_.EmplaceBack(Entry{std::move(item), cost_bytes, cls});
    MC_DASSERT(queue_.size() == ledger_.size(), "queue and ledger disagree");
    return PushResult::kAccepted;
  }

  [[nodiscard]] std::optional<T> Pop() {
    if (queue_.empty()) return std::nullopt;
    Entry e = queue_.PopFront();
    ledger_.OnPopped(e.cls, e.cost_bytes);
    return std::optional<T>(std::move(e.item));
  }

  size_t Size() const { return ledger_.size(); }
  size_t ClassCount() const { return ledger_.class_count(); }
  ClassStats Stats(ClassId cls) const { return ledger_.Stats(cls); }
  uint64_t QueuedBytes() const { return ledger_.queued_bytes(); }

 private:
  struct Entry {
    T item;
    uint64_t cost_bytes;
    ClassId cls;
  };

  qos_internal::Ledger ledger_;
  qos_internal::Ring<Entry> queue_;
};

static_assert(Scheduler<FifoScheduler<int>>);

}  // namespace mooncake::qos

#endif  // MOONCAKE_QOS_FIFO_SCHEDULER_H_
