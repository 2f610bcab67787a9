#include "mooncake/qos/strict_priority_scheduler.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "mooncake/base/clock.h"
#include "mooncake/qos/scheduler_testing.h"

namespace mooncake::qos {
namespace {

struct StrictPriorityFactory {
  template <typename T>
  static std::unique_ptr<StrictPriorityScheduler<T>> Make(const SchedulerLimits& limits) {
    return std::make_unique<StrictPriorityScheduler<T>>(
        typename StrictPriorityScheduler<T>::Options{limits});
  }
};
INSTANTIATE_TYPED_TEST_SUITE_P(StrictPriority, SchedulerConformanceTest, StrictPriorityFactory);

// Aging on, with a clock that moves 1 us per read: promotions happen during
// the kit's runs, and the per-class guarantees must still hold.
class TickingClock final : public Clock {
 public:
  int64_t NowNs() const override { return now_ns_.fetch_add(1000) + 1000; }

 private:
  mutable std::atomic<int64_t> now_ns_{0};
};

struct AgingFactory {
  template <typename T>
  static std::unique_ptr<StrictPriorityScheduler<T>> Make(const SchedulerLimits& limits) {
    static TickingClock clock;
    return std::make_unique<StrictPriorityScheduler<T>>(
        typename StrictPriorityScheduler<T>::Options{limits, /*aging_ns=*/20000, &clock});
  }
};
INSTANTIATE_TYPED_TEST_SUITE_P(StrictPriorityAging, SchedulerConformanceTest, AgingFactory);

struct Item {
  ClassId cls;
  int64_t enqueue_ns;
};

TEST(StrictPriorityTest, NeverServesALowerClassWhileAHigherOneWaits) {
  constexpr size_t kClasses = 5;
  StrictPriorityScheduler<Item> s({SchedulerLimits{kClasses, 64}});
  std::vector<size_t> queued(kClasses, 0);
  std::mt19937_64 rng(1);
  uint64_t pops = 0;
  for (int op = 0; op < 50000; ++op) {
    if (rng() % 2 == 0) {
      const ClassId cls = static_cast<ClassId>(rng() % kClasses);
      if (s.Push(Item{cls, 0}, cls, 100) == PushResult::kAccepted) ++queued[cls];
      continue;
    }
    const std::optional<ClassId> peeked = s.PeekClass();
    std::optional<Item> got = s.Pop();
    ASSERT_EQ(peeked.has_value(), got.has_value());
    if (got) {
      ASSERT_EQ(*peeked, got->cls) << "PeekClass disagrees with Pop, op " << op;
    }
    size_t top = kClasses;
    for (size_t c = 0; c < kClasses; ++c) {
      if (queued[c] > 0) {
        top = c;
        break;
      }
    }
    ASSERT_EQ(got.has_value(), top < kClasses);
    if (!got) continue;
    ASSERT_EQ(got->cls, top) << "served class " << got->cls << " while class " << top
                             << " waited, op " << op;
    --queued[top];
    ++pops;
  }
  EXPECT_GT(pops, 10000u);
  EXPECT_EQ(s.AgedPops(), 0u);
}

// With aging, every pop must be the head the documented rule picks: lowest
// promoted level, then longest wait, then lowest class. The oracle below
// recomputes the rule from its own copy of the queues.
TEST(StrictPriorityTest, AgingServesExactlyTheDocumentedHead) {
  constexpr size_t kClasses = 4;
  constexpr int64_t kAgingNs = 1000;
  FakeClock clock;
  StrictPriorityScheduler<Item> s({SchedulerLimits{kClasses, 48}, kAgingNs, &clock});
  std::vector<std::deque<int64_t>> oracle(kClasses);
  std::mt19937_64 rng(2);
  uint64_t aged = 0;
  for (int op = 0; op < 50000; ++op) {
    clock.AdvanceNs(static_cast<int64_t>(rng() % 400));
    if (rng() % 100 < 52) {
      const ClassId cls = static_cast<ClassId>(rng() % kClasses);
      if (s.Push(Item{cls, clock.NowNs()}, cls, 1) == PushResult::kAccepted) {
        oracle[cls].push_back(clock.NowNs());
      }
      continue;
    }
    // The fake clock stands still between the two calls, so they agree.
    const std::optional<ClassId> peeked = s.PeekClass();
    std::optional<Item> got = s.Pop();
    ASSERT_EQ(peeked.has_value(), got.has_value());
    if (got) {
      ASSERT_EQ(*peeked, got->cls) << "PeekClass disagrees with Pop, op " << op;
    }
    int best = -1;
    int64_t best_level = 0;
    int first_nonempty = -1;
    for (size_t c = 0; c < kClasses; ++c) {
      if (oracle[c].empty()) continue;
      if (first_nonempty < 0) first_nonempty = static_cast<int>(c);
      const int64_t level = std::max<int64_t>(
          0, static_cast<int64_t>(c) - (clock.NowNs() - oracle[c].front()) / kAgingNs);
      if (best < 0 || level < best_level ||
          (level == best_level && oracle[c].front() < oracle[best].front())) {
        best = static_cast<int>(c);
        best_level = level;
      }
    }
    ASSERT_EQ(got.has_value(), best >= 0);
    if (!got) continue;
    ASSERT_EQ(static_cast<int>(got->cls), best) << "op " << op;
    ASSERT_EQ(got->enqueue_ns, oracle[best].front());
    if (best != first_nonempty) {
      ++aged;
      // Served past a more urgent class only because it aged at least as far.
      ASSERT_LE(best_level, first_nonempty);
    }
    oracle[best].pop_front();
  }
  EXPECT_GT(aged, 100u) << "the workload never exercised aging";
  EXPECT_EQ(s.AgedPops(), aged);
}

// A class-3 item behind a never-ending class-0 stream: starved forever
// without aging, served within about 3 aging periods with it.
int64_t WaitOfLowItemUnderHighLoad(int64_t aging_ns, int max_pops) {
  FakeClock clock;
  StrictPriorityScheduler<Item> s({SchedulerLimits{4, 64}, aging_ns, &clock});
  const int64_t start_ns = clock.NowNs();
  EXPECT_EQ(s.Push(Item{3, start_ns}, 3, 1), PushResult::kAccepted);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(s.Push(Item{0, 0}, 0, 1), PushResult::kAccepted);
  for (int i = 0; i < max_pops; ++i) {
    clock.AdvanceUs(100);
    std::optional<Item> got = s.Pop();
    EXPECT_TRUE(got.has_value());
    if (got->cls == 3) return clock.NowNs() - start_ns;
    EXPECT_EQ(s.Push(Item{0, 0}, 0, 1), PushResult::kAccepted);
  }
  return -1;
}

TEST(StrictPriorityTest, WithoutAgingALowClassStarvesUnderHighLoad) {
  EXPECT_EQ(WaitOfLowItemUnderHighLoad(/*aging_ns=*/0, 1000), -1);
}

TEST(StrictPriorityTest, AgingBoundsTheWaitOfALowClass) {
  const int64_t waited_ns = WaitOfLowItemUnderHighLoad(/*aging_ns=*/1'000'000, 1000);
  ASSERT_GT(waited_ns, 0) << "never served";
  // Promoted to level 0 after 3 ms; then it is the oldest head and goes next.
  EXPECT_GE(waited_ns, 3'000'000);
  EXPECT_LE(waited_ns, 3'100'000);
}

TEST(StrictPriorityTest, CreateRejectsNegativeAging) {
  auto s = StrictPriorityScheduler<int>::Create({SchedulerLimits{2, 8}, -1});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("aging_ns is -1"), std::string::npos) << s.status();
}

}  // namespace
}  // namespace mooncake::qos
