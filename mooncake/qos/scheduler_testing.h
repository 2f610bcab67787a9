// Conformance kit for the Scheduler concept (scheduler.h).
//
// Every model instantiates it in one line with a factory type F:
//
//   struct MyFactory {
//     template <typename T>
//     static std::unique_ptr<MyScheduler<T>> Make(const SchedulerLimits& limits);
//   };
//   INSTANTIATE_TYPED_TEST_SUITE_P(My, SchedulerConformanceTest, MyFactory);
//
// The suite checks what every model promises: bounds (items and bytes, a
// refused item left untouched), work conservation, FIFO within a class,
// exactly-once delivery, stats that add up, and destruction of queued items.
// It says nothing about the order *between* classes; each model's own test
// checks its policy.
#ifndef MOONCAKE_QOS_SCHEDULER_TESTING_H_
#define MOONCAKE_QOS_SCHEDULER_TESTING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/qos/scheduler.h"

namespace mooncake::qos {
namespace scheduler_testing_internal {

// An item that counts live instances, to catch leaks and double destruction.
class Tracked {
 public:
  explicit Tracked(int64_t* live, ClassId cls, uint64_t seq) : live_(live), cls_(cls), seq_(seq) {
    ++*live_;
  }
  Tracked(Tracked&& other) noexcept : live_(other.live_), cls_(other.cls_), seq_(other.seq_) {
    ++*live_;
  }
  Tracked& operator=(Tracked&& other) noexcept {
    cls_ = other.cls_;
    seq_ = other.seq_;
    return *this;
  }
  ~Tracked() { --*live_; }

  ClassId cls() const { return cls_; }
  uint64_t seq() const { return seq_; }

 private:
  int64_t* live_;
  ClassId cls_;
  uint64_t seq_;
};

inline SchedulerLimits KitLimits(size_t class_count, size_t capacity_items,
                                 uint64_t capacity_bytes = kMaxCapacityBytes) {
  SchedulerLimits limits;
  limits.class_count = class_count;
  limits.capacity_items = capacity_items;
  limits.capacity_bytes = capacity_bytes;
  return limits;
}

}  // namespace scheduler_testing_internal

template <typename Factory>
class SchedulerConformanceTest : public ::testing::Test {};

TYPED_TEST_SUITE_P(SchedulerConformanceTest);

TYPED_TEST_P(SchedulerConformanceTest, ModelsTheConcept) {
  using S = typename decltype(TypeParam::template Make<int>(SchedulerLimits{}))::element_type;
  static_assert(Scheduler<S>);
  using M = typename decltype(TypeParam::template Make<std::unique_ptr<int>>(
      SchedulerLimits{}))::element_type;
  static_assert(Scheduler<M>, "a move-only item type must work");
}

TYPED_TEST_P(SchedulerConformanceTest, EmptyPopsNothing) {
  auto s = TypeParam::template Make<int>(scheduler_testing_internal::KitLimits(3, 8));
  EXPECT_EQ(s->Size(), 0u);
  EXPECT_EQ(s->ClassCount(), 3u);
  EXPECT_FALSE(s->Pop().has_value());
  EXPECT_EQ(s->Stats(2), ClassStats{});
}

TYPED_TEST_P(SchedulerConformanceTest, RefusesPastCapacityItemsAndLeavesTheItem) {
  auto s =
      TypeParam::template Make<std::unique_ptr<int>>(scheduler_testing_internal::KitLimits(2, 5));
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(s->Push(std::make_unique<int>(i), static_cast<ClassId>(i % 2), 1),
              PushResult::kAccepted);
  }
  auto extra = std::make_unique<int>(99);
  EXPECT_EQ(s->Push(std::move(extra), 0, 1), PushResult::kFull);
  ASSERT_NE(extra, nullptr) << "a refused item must not be moved from";
  EXPECT_EQ(*extra, 99);
  EXPECT_EQ(s->Size(), 5u);
  EXPECT_EQ(s->Stats(0).refused_items, 1u);
  ASSERT_TRUE(s->Pop().has_value());
  EXPECT_EQ(s->Push(std::move(extra), 0, 1), PushResult::kAccepted);
}

TYPED_TEST_P(SchedulerConformanceTest, RefusesPastCapacityBytes) {
  auto s = TypeParam::template Make<int>(scheduler_testing_internal::KitLimits(2, 100, 1000));
  EXPECT_EQ(s->Push(1, 0, 600), PushResult::kAccepted);
  EXPECT_EQ(s->Push(2, 1, 401), PushResult::kFull);
  EXPECT_EQ(s->Push(3, 1, 400), PushResult::kAccepted);
  EXPECT_EQ(s->Push(4, 0, 1), PushResult::kFull);
  EXPECT_EQ(s->Push(5, 0, 0), PushResult::kAccepted) << "a free item fits a full byte budget";
  EXPECT_EQ(s->Stats(1).refused_bytes, 401u);
  std::optional<int> first = s->Pop();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(s->Size(), 2u);
}

TYPED_TEST_P(SchedulerConformanceTest, RefusesAnItemLargerThanTheWholeBudget) {
  auto s = TypeParam::template Make<int>(scheduler_testing_internal::KitLimits(1, 4, 100));
  EXPECT_EQ(s->Push(1, 0, 101), PushResult::kFull);
  EXPECT_EQ(s->Size(), 0u);
  EXPECT_EQ(s->Push(1, 0, 100), PushResult::kAccepted);
}

// Random pushes and pops against an oracle: FIFO within each class, every item
// exactly once, work conservation, and stats equal to the oracle's counts.
TYPED_TEST_P(SchedulerConformanceTest, RandomOpsKeepFifoExactlyOnceAndStats) {
  using scheduler_testing_internal::Tracked;
  constexpr size_t kClasses = 4;
  constexpr size_t kCapacity = 37;  // not a power of two: the rings wrap oddly
  int64_t live = 0;
  {
    auto s = TypeParam::template Make<Tracked>(
        scheduler_testing_internal::KitLimits(kClasses, kCapacity, 20000));
    std::mt19937_64 rng(6);
    std::vector<uint64_t> next_seq(kClasses, 0), expect_seq(kClasses, 0);
    std::vector<ClassStats> oracle(kClasses);
    std::vector<uint64_t> cost_of_seq[kClasses];
    uint64_t queued_bytes = 0;
    size_t queued = 0;
    for (int op = 0; op < 20000; ++op) {
      // Phases that favour pushing, then popping, so the queue fills and drains.
      const bool push_phase = (op / 500) % 2 == 0;
      if (rng() % 100 < (push_phase ? 70u : 30u)) {
        const ClassId cls = static_cast<ClassId>(rng() % kClasses);
        const uint64_t cost = rng() % 1500;
        Tracked item(&live, cls, next_seq[cls]);
        const bool fits = queued < kCapacity && queued_bytes + cost <= 20000;
        const PushResult r = s->Push(std::move(item), cls, cost);
        ASSERT_EQ(r, fits ? PushResult::kAccepted : PushResult::kFull) << "op " << op;
        if (fits) {
          cost_of_seq[cls].push_back(cost);
          ++next_seq[cls];
          ++queued;
          queued_bytes += cost;
          ++oracle[cls].pushed_items;
          oracle[cls].pushed_bytes += cost;
          ++oracle[cls].queued_items;
          oracle[cls].queued_bytes += cost;
        } else {
          ++oracle[cls].refused_items;
          oracle[cls].refused_bytes += cost;
        }
      } else {
        std::optional<Tracked> got = s->Pop();
        ASSERT_EQ(got.has_value(), queued > 0) << "pop must be work conserving, op " << op;
        if (!got) continue;
        const ClassId cls = got->cls();
        ASSERT_LT(cls, kClasses);
        ASSERT_EQ(got->seq(), expect_seq[cls]) << "FIFO broken within class " << cls;
        const uint64_t cost = cost_of_seq[cls][expect_seq[cls]++];
        --queued;
        queued_bytes -= cost;
        ++oracle[cls].popped_items;
        oracle[cls].popped_bytes += cost;
        --oracle[cls].queued_items;
        oracle[cls].queued_bytes -= cost;
      }
      ASSERT_EQ(s->Size(), queued);
    }
    for (ClassId c = 0; c < kClasses; ++c) EXPECT_EQ(s->Stats(c), oracle[c]) << "class " << c;
    while (std::optional<Tracked> got = s->Pop()) {
      ASSERT_EQ(got->seq(), expect_seq[got->cls()]++);
    }
    for (ClassId c = 0; c < kClasses; ++c) {
      EXPECT_EQ(expect_seq[c], next_seq[c]) << "class " << c << " lost items";
      EXPECT_EQ(s->Stats(c).queued_items, 0u);
      EXPECT_EQ(s->Stats(c).popped_items, next_seq[c]);
    }
    EXPECT_EQ(s->Size(), 0u);
  }
  EXPECT_EQ(live, 0) << "items leaked or destroyed twice";
}

TYPED_TEST_P(SchedulerConformanceTest, DestroysQueuedItems) {
  using scheduler_testing_internal::Tracked;
  int64_t live = 0;
  {
    auto s = TypeParam::template Make<Tracked>(scheduler_testing_internal::KitLimits(3, 100));
    for (uint64_t i = 0; i < 60; ++i) {
      ASSERT_EQ(s->Push(Tracked(&live, static_cast<ClassId>(i % 3), i), i % 3, 10),
                PushResult::kAccepted);
    }
    for (int i = 0; i < 25; ++i) ASSERT_TRUE(s->Pop().has_value());
    EXPECT_EQ(live, 35);
  }
  EXPECT_EQ(live, 0);
}

TYPED_TEST_P(SchedulerConformanceTest, ClassOutOfRangeIsAProgrammerError) {
  auto s = TypeParam::template Make<int>(scheduler_testing_internal::KitLimits(2, 4));
  EXPECT_DEATH((void)s->Push(1, 2, 1), "class id out of range");
}

REGISTER_TYPED_TEST_SUITE_P(SchedulerConformanceTest, ModelsTheConcept, EmptyPopsNothing,
                            RefusesPastCapacityItemsAndLeavesTheItem, RefusesPastCapacityBytes,
                            RefusesAnItemLargerThanTheWholeBudget,
                            RandomOpsKeepFifoExactlyOnceAndStats, DestroysQueuedItems,
                            ClassOutOfRangeIsAProgrammerError);

}  // namespace mooncake::qos

#endif  // MOONCAKE_QOS_SCHEDULER_TESTING_H_
