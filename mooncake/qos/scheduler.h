// The Scheduler concept: a bounded queue that decides which item goes next.
//
// A transport orders its slices with one, a store orders its background work
// with one. Items arrive tagged with a class (a small integer chosen by the
// caller: a priority level, a tenant, a traffic kind) and a cost in bytes; the
// model decides the service order between classes.
//
// Semantics every model keeps (the conformance kit, scheduler_testing.h,
// checks each one):
//   - Bounded. Push refuses (PushResult::kFull) when the queue holds
//     `capacity_items` items, or when the item's cost would lift the queued
//     bytes past `capacity_bytes`. A refused item is not moved from: the caller
//     still owns it and decides (retry later, drop, push back upstream). The
//     queue never grows past its bounds.
//   - Work conserving. Pop returns an item whenever Size() > 0, and none only
//     when the queue is empty.
//   - FIFO within a class. Items of one class leave in the order they came;
//     models differ only in how they interleave classes.
//   - Exactly once. Every accepted item is returned by exactly one Pop, or
//     destroyed with the scheduler.
//   - Stats(c) counts, per class, items and bytes pushed, refused, popped and
//     still queued; queued == pushed - popped at every quiescent point.
//
// Thread-safety: the models (FifoScheduler, StrictPriorityScheduler,
// DrrScheduler) are thread-compatible: concurrent const calls are safe, any
// mutating call needs external synchronization. LockedScheduler<S> wraps any
// model into a thread-safe Scheduler (any number of producers and consumers).
//
// REQUIRES (asserted, a programmer error): `cls < ClassCount()`.
#ifndef MOONCAKE_QOS_SCHEDULER_H_
#define MOONCAKE_QOS_SCHEDULER_H_

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace mooncake::qos {

// A traffic class: an index in [0, ClassCount()).
using ClassId = uint32_t;

// The most classes any model supports (class sets are 64-bit masks).
inline constexpr size_t kMaxClasses = 64;

enum class PushResult : uint8_t {
  kAccepted,  // the scheduler owns the item now
  kFull,      // refused by a bound; the item was not moved from
};

// Per-class counters. Items and bytes are counted separately because a class's
// share of a link is a share of bytes, not of items.
struct ClassStats {
  uint64_t pushed_items = 0;
  uint64_t pushed_bytes = 0;
  uint64_t refused_items = 0;  // Push returned kFull
  uint64_t refused_bytes = 0;
  uint64_t popped_items = 0;
  uint64_t popped_bytes = 0;
  uint64_t queued_items = 0;  // pushed - popped
  uint64_t queued_bytes = 0;

  friend bool operator==(const ClassStats&, const ClassStats&) = default;
};

// Bounds shared by every model's options.
struct SchedulerLimits {
  size_t class_count = 1;                       // in [1, kMaxClasses]
  size_t capacity_items = 1024;                 // in [1, kMaxCapacityItems]
  uint64_t capacity_bytes = uint64_t{1} << 62;  // total cost queued; in [1, kMaxCapacityBytes]
};

inline constexpr size_t kMaxCapacityItems = size_t{1} << 30;
// An item costing more than capacity_bytes is always refused, so no cost a
// model ever holds reaches 2^62 and byte arithmetic cannot overflow.
inline constexpr uint64_t kMaxCapacityBytes = uint64_t{1} << 62;

// --- The concept, one requirement per line. --------------------------------

template <typename S>
concept Scheduler = std::movable<typename S::Item> &&
    requires(S& s, const S& cs, typename S::Item&& item, ClassId cls, uint64_t cost_bytes) {
  // O(1) amortized (O(1) after the per-class buffers reached their size).
  // On kFull `item` is left untouched.
  { s.Push(std::move(item), cls, cost_bytes) } -> std::same_as<PushResult>;
  // O(1) for FIFO and DRR; O(ClassCount()) for strict priority with aging.
  { s.Pop() } -> std::same_as<std::optional<typename S::Item>>;
  // O(1). Items queued now.
  { cs.Size() } -> std::same_as<size_t>;
  // O(1). The number of classes, fixed at construction.
  { cs.ClassCount() } -> std::same_as<size_t>;
  // O(1). REQUIRES: cls < ClassCount().
  { cs.Stats(cls) } -> std::same_as<ClassStats>;
};

}  // namespace mooncake::qos

#endif  // MOONCAKE_QOS_SCHEDULER_H_
