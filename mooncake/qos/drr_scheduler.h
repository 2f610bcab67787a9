// DrrScheduler: deficit round robin (Shreedhar & Varghese, 1996) over N
// classes with per-class weights and byte costs. While classes stay
// backlogged, each gets a share of the popped *bytes* proportional to its
// weight, whatever its item sizes; a class with nothing queued gives its share
// to the others (work conserving).
//
// The round: classes with queued items sit in a circular active list. When a
// class's turn starts it earns weight * quantum_bytes of credit (its
// deficit); it is served while its head item's cost fits in the deficit, then
// the turn passes on. A class that empties leaves the list and forfeits its
// credit, so idle time cannot be banked. An item larger than a whole quantum
// is fine: whole rounds in which no class can pay are skipped arithmetically,
// so one Pop visits at most 2 * (active classes) + 1 turns.
//
// Fairness bound (from the paper): over any interval in which class c stays
// backlogged, its bytes differ from weight_c / sum(weights) of the total by at
// most one quantum plus one maximum item per class; choose quantum_bytes near
// the largest common item cost for the tightest interleaving.
//
// Thread-compatible (see scheduler.h); wrap in LockedScheduler to share it.
// Complexity: Push O(1) amortized, Pop O(active classes) worst case, O(1)
// amortized when items are no larger than a quantum.
// Invariants: class c is in the active list iff its queue is non-empty;
// deficit_[c] == 0 when c is not active.
#ifndef MOONCAKE_QOS_DRR_SCHEDULER_H_
#define MOONCAKE_QOS_DRR_SCHEDULER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/qos/internal/ledger.h"
#include "mooncake/qos/internal/ring.h"
#include "mooncake/qos/scheduler.h"

namespace mooncake::qos {

template <typename T>
class DrrScheduler {
 public:
  using Item = T;

  static constexpr uint64_t kMaxClassQuantumBytes = uint64_t{1} << 48;

  struct Options {
    SchedulerLimits limits;
    // One per class, each >= 1; empty means every class weighs 1.
    std::vector<uint32_t> weights;
    uint64_t quantum_bytes = 16 * 1024;  // credit per turn per unit of weight
  };

  static absl::Status Validate(const Options& options) {
    if (absl::Status s = qos_internal::ValidateLimits(options.limits); !s.ok()) return s;
    const size_t n = options.limits.class_count;
    if (!options.weights.empty() && options.weights.size() != n) {
      return absl::InvalidArgumentError(absl::StrCat("weights has ", options.weights.size(),
                                                     " entries for ", n,
                                                     " classes; give one per class or none"));
    }
    for (size_t c = 0; c < options.weights.size(); ++c) {
      if (options.weights[c] == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("weight of class ", c, " is 0; every weight must be >= 1"));
      }
    }
    // Credit stays below (largest cost) + (largest class quantum); costs are
    // below kMaxCapacityBytes (2^62), so quanta up to 2^48 cannot overflow.
    uint64_t max_weight = 1;
    for (uint32_t w : options.weights) max_weight = std::max<uint64_t>(max_weight, w);
    if (options.quantum_bytes < 1 || options.quantum_bytes > kMaxClassQuantumBytes / max_weight) {
      return absl::InvalidArgumentError(absl::StrCat(
          "quantum_bytes is ", options.quantum_bytes, " with a largest weight of ", max_weight,
          "; need 1 <= quantum_bytes * weight <= ", kMaxClassQuantumBytes));
    }
    return absl::OkStatus();
  }

  static absl::StatusOr<DrrScheduler> Create(const Options& options) {
    if (absl::Status s = Validate(options); !s.ok()) return s;
    return DrrScheduler(options);
  }

  // REQUIRES: Validate(options).ok() (asserted).
  explicit DrrScheduler(const Options& options)
      : ledger_(options.limits),
        quantum_(options.limits.class_count),
        deficit_(options.limits.class_count, 0),
        active_(options.limits.class_count, 0) {
    MC_ASSERT(Validate(options).ok(), "invalid DrrScheduler options; use Create()");
    queues_.reserve(options.limits.class_count);
    for (size_t c = 0; c < options.limits.class_count; ++c) {
      queues_.emplace_back(options.limits.capacity_items);
      const uint64_t weight = options.weights.empty() ? 1 : options.weights[c];
      quantum_[c] = weight * options.quantum_bytes;  // <= kMaxClassQuantumBytes
    }
  }

  [[nodiscard]] PushResult Push(T&& item, ClassId cls, uint64_t cost_bytes) {
    if (!ledger_.TryAdmit(cls, cost_bytes)) return PushResult::kFull;
    auto& queue = queues_[cls];
    if (queue.empty()) ActivateBack(cls);
    queue.EmplaceBack(Entry{std::move(item), cost_bytes});
    return PushResult::kAccepted;
  }

  [[nodiscard]] std::optional<T> Pop() {
    if (active_count_ == 0) return std::nullopt;
    size_t idle_turns = 0;
    for (;;) {
      const ClassId c = active_[active_head_];
      if (!turn_open_) {
        deficit_[c] += quantum_[c];
        turn_open_ = true;
      }
      auto& queue = queues_[c];
      const uint64_t cost = queue.Front().cost_bytes;
      if (cost <= deficit_[c]) {
        deficit_[c] -= cost;
        Entry e = queue.PopFront();
        if (queue.empty()) DeactivateFront(c);
        ledger_.OnPopped(c, cost);
        return std::optional<T>(std::move(e.item));
      }
      RotateFront();
      if (++idle_turns == active_count_) {
        SkipIdleRounds();
        idle_turns = 0;
      }
      MC_DASSERT(idle_turns <= active_count_, "DRR pass did not terminate");
    }
  }

  size_t Size() const { return ledger_.size(); }
  size_t ClassCount() const { return ledger_.class_count(); }
  ClassStats Stats(ClassId cls) const { return ledger_.Stats(cls); }
  uint64_t QueuedBytes() const { return ledger_.queued_bytes(); }
  // Credit per turn of class `cls`: weight * quantum_bytes.
  uint64_t QuantumBytes(ClassId cls) const { return quantum_.at(cls); }

 private:
  struct Entry {
    T item;
    uint64_t cost_bytes;
  };

  size_t Next(size_t i) const { return i + 1 == active_.size() ? 0 : i + 1; }
  size_t Tail() const {
    const size_t t = active_head_ + active_count_;
    return t >= active_.size() ? t - active_.size() : t;
  }

  void ActivateBack(ClassId cls) {
    MC_DASSERT(active_count_ < active_.size(), "class activated twice");
    MC_DASSERT(deficit_[cls] == 0, "inactive class kept credit");
    active_[Tail()] = cls;
    ++active_count_;
  }

  // The front class emptied: it leaves the round and forfeits its credit.
  void DeactivateFront(ClassId cls) {
    MC_DASSERT(active_[active_head_] == cls, "deactivating a class that is not in turn");
    deficit_[cls] = 0;
    active_head_ = Next(active_head_);
    --active_count_;
    turn_open_ = false;
  }

  // The front class could not pay for its head: its turn ends, it goes last.
  void RotateFront() {
    // Slot head + count is free unless the list is full, in which case it is
    // the head's own slot: either way the class lands last.
    active_[Tail()] = active_[active_head_];
    active_head_ = Next(active_head_);
    turn_open_ = false;
  }

  // Every active class just ended a turn unable to pay. The next k - 1 full
  // rounds would be idle too, where k is the fewest rounds after which some
  // class can pay; grant their credit at once.
  void SkipIdleRounds() {
    uint64_t rounds = std::numeric_limits<uint64_t>::max();
    for (size_t i = 0, at = active_head_; i < active_count_; ++i, at = Next(at)) {
      const ClassId c = active_[at];
      const uint64_t need = queues_[c].Front().cost_bytes - deficit_[c];
      MC_DASSERT(queues_[c].Front().cost_bytes > deficit_[c], "an idle class could pay");
      const uint64_t k = (need + quantum_[c] - 1) / quantum_[c];
      if (k < rounds) rounds = k;
    }
    MC_DASSERT(rounds >= 1, "skip computed no rounds");
    for (size_t i = 0, at = active_head_; i < active_count_; ++i, at = Next(at)) {
      deficit_[active_[at]] += (rounds - 1) * quantum_[active_[at]];
    }
  }

  qos_internal::Ledger ledger_;
  std::vector<qos_internal::Ring<Entry>> queues_;
  std::vector<uint64_t> quantum_;
  std::vector<uint64_t> deficit_;
  std::vector<ClassId> active_;  // circular: active_head_, active_count_
  size_t active_head_ = 0;
  size_t active_count_ = 0;
  bool turn_open_ = false;  // the front class already earned this turn's credit
};

static_assert(Scheduler<DrrScheduler<int>>);

}  // namespace mooncake::qos

#endif  // MOONCAKE_QOS_DRR_SCHEDULER_H_
