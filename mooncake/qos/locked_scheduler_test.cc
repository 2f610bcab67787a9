#include "mooncake/qos/locked_scheduler.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/qos/drr_scheduler.h"
#include "mooncake/qos/fifo_scheduler.h"
#include "mooncake/qos/scheduler_testing.h"
#include "mooncake/qos/strict_priority_scheduler.h"

namespace mooncake::qos {
namespace {

static_assert(Scheduler<LockedScheduler<FifoScheduler<int>>>);
static_assert(Scheduler<LockedScheduler<StrictPriorityScheduler<int>>>);
static_assert(Scheduler<LockedScheduler<DrrScheduler<int>>>);

template <template <typename> class Model>
struct LockedFactory {
  template <typename T>
  static std::unique_ptr<LockedScheduler<Model<T>>> Make(const SchedulerLimits& limits) {
    typename Model<T>::Options options;
    options.limits = limits;
    return std::make_unique<LockedScheduler<Model<T>>>(Model<T>(options));
  }
};
using LockedFifo = LockedFactory<FifoScheduler>;
using LockedStrict = LockedFactory<StrictPriorityScheduler>;
using LockedDrr = LockedFactory<DrrScheduler>;
INSTANTIATE_TYPED_TEST_SUITE_P(LockedFifo, SchedulerConformanceTest, LockedFifo);
INSTANTIATE_TYPED_TEST_SUITE_P(LockedStrict, SchedulerConformanceTest, LockedStrict);
INSTANTIATE_TYPED_TEST_SUITE_P(LockedDrr, SchedulerConformanceTest, LockedDrr);

struct Tagged {
  uint32_t producer;
  ClassId cls;
  uint64_t seq;
};

template <typename Factory>
class LockedStressTest : public ::testing::Test {};
using Factories = ::testing::Types<LockedFifo, LockedStrict, LockedDrr>;
TYPED_TEST_SUITE(LockedStressTest, Factories);

// Several producers against one consumer through a small queue (so producers
// hit backpressure): every item arrives exactly once, and each producer's
// items of one class arrive in the order that producer pushed them.
TYPED_TEST(LockedStressTest, ManyProducersOneConsumerDeliverEverythingInOrder) {
  constexpr uint32_t kProducers = 3;
  constexpr uint64_t kPerProducer = 20000;
  constexpr size_t kClasses = 4;
  auto s = TypeParam::template Make<Tagged>(SchedulerLimits{kClasses, 16});
  std::vector<std::thread> producers;
  for (uint32_t p = 0; p < kProducers; ++p) {
    producers.emplace_back([&s, p] {
      std::vector<uint64_t> next(kClasses, 0);
      for (uint64_t i = 0; i < kPerProducer; ++i) {
        const ClassId cls = static_cast<ClassId>((i * 7 + p) % kClasses);
        Tagged item{p, cls, next[cls]};
        while (s->Push(std::move(item), cls, 100 + i % 900) == PushResult::kFull) {
          std::this_thread::yield();
        }
        ++next[cls];
      }
    });
  }
  std::vector<std::vector<uint64_t>> expect(kProducers, std::vector<uint64_t>(kClasses, 0));
  uint64_t received = 0;
  while (received < kProducers * kPerProducer) {
    std::optional<Tagged> got = s->Pop();
    if (!got) {
      std::this_thread::yield();
      continue;
    }
    ASSERT_LT(got->producer, kProducers);
    ASSERT_EQ(got->seq, expect[got->producer][got->cls]++)
        << "producer " << got->producer << " class " << got->cls;
    ++received;
  }
  for (auto& t : producers) t.join();
  EXPECT_FALSE(s->Pop().has_value());
  uint64_t popped = 0;
  for (ClassId c = 0; c < kClasses; ++c) popped += s->Stats(c).popped_items;
  EXPECT_EQ(popped, kProducers * kPerProducer);
}

TEST(LockedSchedulerTest, WithLockReachesTheModel) {
  LockedScheduler<StrictPriorityScheduler<int>> s(
      StrictPriorityScheduler<int>({SchedulerLimits{2, 8}}));
  ASSERT_EQ(s.Push(1, 1, 50), PushResult::kAccepted);
  EXPECT_EQ(s.WithLock([](auto& inner) { return inner.QueuedBytes(); }), 50u);
}

}  // namespace
}  // namespace mooncake::qos
