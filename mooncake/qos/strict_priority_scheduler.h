// StrictPriorityScheduler: N classes, class 0 the most urgent. Pop serves the
// most urgent non-empty class, FIFO within it.
//
// Aging (optional, `aging_ns > 0`): so that a low class is never starved
// forever, an item that has waited w ns is promoted floor(w / aging_ns)
// classes (never above class 0). Pop serves the head with the lowest promoted
// level; ties go to the item that has waited longest, then to the lower class.
// An item of class c therefore waits at most about c * aging_ns plus the
// service of the items that were ahead of it at its final level. Without
// aging a class is served only while every more urgent class is empty.
//
// Time comes from an injected Clock (default MonotonicClock::Get()); it is
// read once per Push and once per Pop, and only when aging is on.
//
// Thread-compatible (see scheduler.h); wrap in LockedScheduler to share it.
// Complexity: Push O(1) amortized; Pop O(1) without aging (a bit scan over
// the mask of non-empty classes), O(ClassCount()) with aging.
// Invariant: bit c of nonempty_ is set iff queue c is non-empty.
#ifndef MOONCAKE_QOS_STRICT_PRIORITY_SCHEDULER_H_
#define MOONCAKE_QOS_STRICT_PRIORITY_SCHEDULER_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/qos/internal/ledger.h"
#include "mooncake/qos/internal/ring.h"
#include "mooncake/qos/scheduler.h"

namespace mooncake::qos {

template <typename T>
class StrictPriorityScheduler {
 public:
  using Item = T;

  struct Options {
    SchedulerLimits limits;
    int64_t aging_ns = 0;          // 0: no aging; else the wait that earns one class
    const Clock* clock = nullptr;  // nullptr: MonotonicClock::Get(); must outlive us
  };

  static absl::Status Validate(const Options& options) {
    if (absl::Status s = qos_internal::ValidateLimits(options.limits); !s.ok()) return s;
    if (options.aging_ns < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("aging_ns is ", options.aging_ns, "; use 0 (off) or a positive wait"));
    }
    return absl::OkStatus();
  }

  static absl::StatusOr<StrictPriorityScheduler> Create(const Options& options) {
    if (absl::Status s = Validate(options); !s.ok()) return s;
    return StrictPriorityScheduler(options);
  }

  // REQUIRES: Validate(options).ok() (asserted).
  explicit StrictPriorityScheduler(const Options& options)
      : ledger_(options.limits),
        aging_ns_(options.aging_ns),
        clock_(options.clock != nullptr ? options.clock : &MonotonicClock::Get()) {
    MC_ASSERT(aging_ns_ >= 0, "negative aging_ns; use Create()");
    queues_.reserve(options.limits.class_count);
    for (size_t c = 0; c < options.limits.class_count; ++c) {
      queues_.emplace_back(options.limits.capacity_items);
    }
  }

  [[nodiscard]] PushResult Push(T&& item, ClassId cls, uint64_t cost_bytes) {
    if (!ledger_.TryAdmit(cls, cost_bytes)) return PushResult::kFull;
    const int64_t now_ns = aging_ns_ > 0 ? clock_->NowNs() : 0;
    queues_[cls].EmplaceBack(Entry{std::move(item), cost_bytes, now_ns});
    nonempty_ |= uint64_t{1} << cls;
    return PushResult::kAccepted;
  }

  [[nodiscard]] std::optional<T> Pop() {
    if (nonempty_ == 0) return std::nullopt;
    const ClassId top = static_cast<ClassId>(std::countr_zero(nonempty_));
    const ClassId cls = aging_ns_ > 0 ? PickAged(top) : top;
    if (cls != top) ++aged_pops_;
    auto& queue = queues_[cls];
    Entry e = queue.PopFront();
    if (queue.empty()) nonempty_ &= ~(uint64_t{1} << cls);
    ledger_.OnPopped(cls, e.cost_bytes);
    MC_DASSERT((nonempty_ == 0) == (ledger_.size() == 0), "mask and ledger disagree");
    return std::optional<T>(std::move(e.item));
  }

  // The class a Pop now would serve; nullopt when empty. With aging it reads
  // the clock, so a later Pop may pick another class if time moved on.
  std::optional<ClassId> PeekClass() const {
    if (nonempty_ == 0) return std::nullopt;
    const ClassId top = static_cast<ClassId>(std::countr_zero(nonempty_));
    return aging_ns_ > 0 ? PickAged(top) : top;
  }

  size_t Size() const { return ledger_.size(); }
  size_t ClassCount() const { return ledger_.class_count(); }
  ClassStats Stats(ClassId cls) const { return ledger_.Stats(cls); }
  uint64_t QueuedBytes() const { return ledger_.queued_bytes(); }
  // Pops that served a class while a more urgent one waited (aging at work).
  uint64_t AgedPops() const { return aged_pops_; }

 private:
  struct Entry {
    T item;
    uint64_t cost_bytes;
    int64_t enqueue_ns;
  };

  // The class whose head has the lowest promoted level (see the file comment).
  ClassId PickAged(ClassId top) const {
    const int64_t now_ns = clock_->NowNs();
    ClassId best = top;
    uint64_t best_level = 0;
    int64_t best_enqueue_ns = 0;
    bool have = false;
    for (uint64_t mask = nonempty_; mask != 0; mask &= mask - 1) {
      const ClassId c = static_cast<ClassId>(std::countr_zero(mask));
      const int64_t enqueue_ns = queues_[c].Front().enqueue_ns;
      const int64_t waited_ns = now_ns > enqueue_ns ? now_ns - enqueue_ns : 0;
      const uint64_t promoted = static_cast<uint64_t>(waited_ns / aging_ns_);
      const uint64_t level = promoted >= c ? 0 : c - promoted;
      if (!have || level < best_level || (level == best_level && enqueue_ns < best_enqueue_ns)) {
        best = c;
        best_level = level;
        best_enqueue_ns = enqueue_ns;
        have = true;
      }
    }
    MC_DASSERT(best_level <= top, "aging demoted a class");
    return best;
  }

  qos_internal::Ledger ledger_;
  std::vector<qos_internal::Ring<Entry>> queues_;
  uint64_t nonempty_ = 0;
  uint64_t aged_pops_ = 0;
  int64_t aging_ns_;
  const Clock* clock_;
};

static_assert(Scheduler<StrictPriorityScheduler<int>>);

}  // namespace mooncake::qos

#endif  // MOONCAKE_QOS_STRICT_PRIORITY_SCHEDULER_H_
