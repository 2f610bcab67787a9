#include "mooncake/qos/drr_scheduler.h"

#include <cmath>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "mooncake/qos/scheduler_testing.h"

namespace mooncake::qos {
namespace {

// Unequal weights and a quantum far below the kit's item costs, so the kit
// also drives the idle-round skip.
struct DrrFactory {
  template <typename T>
  static std::unique_ptr<DrrScheduler<T>> Make(const SchedulerLimits& limits) {
    typename DrrScheduler<T>::Options options{limits, {}, /*quantum_bytes=*/64};
    for (size_t c = 0; c < limits.class_count; ++c) {
      options.weights.push_back(static_cast<uint32_t>(c + 1));
    }
    return std::make_unique<DrrScheduler<T>>(options);
  }
};
INSTANTIATE_TYPED_TEST_SUITE_P(Drr, SchedulerConformanceTest, DrrFactory);

struct Item {
  ClassId cls;
  uint64_t cost;
};

// Keeps every class backlogged and returns each class's share of popped bytes
// at every checkpoint.
std::vector<std::vector<double>> BacklogShares(
    const std::vector<uint32_t>& weights, uint64_t quantum_bytes,
    const std::vector<std::pair<uint64_t, uint64_t>>& cost_ranges, int pops, int checkpoint_every) {
  const size_t n = weights.size();
  DrrScheduler<Item> s({SchedulerLimits{n, 64 * n}, weights, quantum_bytes});
  std::mt19937_64 rng(3);
  auto cost_of = [&](ClassId c) {
    const auto [lo, hi] = cost_ranges[c];
    return lo + rng() % (hi - lo + 1);
  };
  auto push = [&](ClassId c) {
    const uint64_t cost = cost_of(c);
    EXPECT_EQ(s.Push(Item{c, cost}, c, cost), PushResult::kAccepted);
  };
  for (ClassId c = 0; c < n; ++c) {
    for (int i = 0; i < 32; ++i) push(c);
  }
  std::vector<uint64_t> bytes(n, 0);
  std::vector<std::vector<double>> shares;
  for (int i = 1; i <= pops; ++i) {
    std::optional<Item> got = s.Pop();
    EXPECT_TRUE(got.has_value());
    bytes[got->cls] += got->cost;
    push(got->cls);
    if (i % checkpoint_every == 0) {
      uint64_t total = 0;
      for (uint64_t b : bytes) total += b;
      std::vector<double> share(n);
      for (size_t c = 0; c < n; ++c) share[c] = static_cast<double>(bytes[c]) / total;
      shares.push_back(share);
    }
  }
  for (ClassId c = 0; c < n; ++c) EXPECT_EQ(s.Stats(c).popped_bytes, bytes[c]);
  return shares;
}

void ExpectSharesNearWeights(const std::vector<uint32_t>& weights,
                             const std::vector<std::vector<double>>& shares, double tolerance) {
  double weight_sum = 0;
  for (uint32_t w : weights) weight_sum += w;
  for (size_t k = 0; k < shares.size(); ++k) {
    for (size_t c = 0; c < weights.size(); ++c) {
      const double want = weights[c] / weight_sum;
      EXPECT_NEAR(shares[k][c], want, tolerance * want) << "class " << c << " at checkpoint " << k;
    }
  }
}

TEST(DrrSchedulerTest, ByteSharesStayWithinFivePercentOfWeights) {
  const std::vector<uint32_t> weights = {1, 2, 5, 3};
  // Very different item sizes per class: shares are of bytes, not of items.
  const std::vector<std::pair<uint64_t, uint64_t>> costs = {
      {64, 256}, {4096, 65536}, {1, 3000}, {16384, 16384}};
  ExpectSharesNearWeights(weights, BacklogShares(weights, 16384, costs, 200000, 20000), 0.05);
}

TEST(DrrSchedulerTest, ItemsFarLargerThanAQuantumStillGetTheirShare) {
  const std::vector<uint32_t> weights = {1, 3};
  const std::vector<std::pair<uint64_t, uint64_t>> costs = {{2000, 4000}, {10, 50}};
  ExpectSharesNearWeights(weights, BacklogShares(weights, 16, costs, 400000, 50000), 0.05);
}

TEST(DrrSchedulerTest, AnIdleClassGivesItsShareAway) {
  DrrScheduler<Item> s({SchedulerLimits{2, 64}, {9, 1}, 1000});
  for (int i = 0; i < 10; ++i) ASSERT_EQ(s.Push(Item{1, 1000}, 1, 1000), PushResult::kAccepted);
  for (int i = 0; i < 10; ++i) {
    std::optional<Item> got = s.Pop();
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->cls, 1u);
  }
  EXPECT_FALSE(s.Pop().has_value());
}

TEST(DrrSchedulerTest, AClassThatEmptiesCannotBankCredit) {
  // Class 0 visits with tiny items, leaves, and returns with big ones: it must
  // not spend credit earned before it left.
  DrrScheduler<Item> s({SchedulerLimits{2, 64}, {1, 1}, 1000});
  ASSERT_EQ(s.Push(Item{0, 1}, 0, 1), PushResult::kAccepted);
  ASSERT_EQ(s.Push(Item{1, 1000}, 1, 1000), PushResult::kAccepted);
  ASSERT_EQ(s.Push(Item{1, 1000}, 1, 1000), PushResult::kAccepted);
  EXPECT_EQ(s.Pop()->cls, 0u);  // leaves with 999 unspent
  ASSERT_EQ(s.Push(Item{0, 1000}, 0, 1000), PushResult::kAccepted);
  ASSERT_EQ(s.Push(Item{0, 1000}, 0, 1000), PushResult::kAccepted);
  // Order of turns now: class 1, then class 0 with a fresh 1000 of credit.
  EXPECT_EQ(s.Pop()->cls, 1u);
  EXPECT_EQ(s.Pop()->cls, 0u);
  EXPECT_EQ(s.Pop()->cls, 1u);
  EXPECT_EQ(s.Pop()->cls, 0u);
}

// The textbook DRR loop, one quantum per visit and no round skipping: the
// model must pop exactly the same sequence.
class ReferenceDrr {
 public:
  ReferenceDrr(std::vector<uint64_t> quantum)
      : quantum_(quantum), queues_(quantum.size()), deficit_(quantum.size(), 0) {}
  void Push(Item item) {
    if (queues_[item.cls].empty()) active_.push_back(item.cls);
    queues_[item.cls].push_back(item);
  }
  std::optional<Item> Pop() {
    while (!active_.empty()) {
      const ClassId c = active_.front();
      if (!turn_open_) {
        deficit_[c] += quantum_[c];
        turn_open_ = true;
      }
      if (queues_[c].front().cost <= deficit_[c]) {
        Item item = queues_[c].front();
        queues_[c].pop_front();
        deficit_[c] -= item.cost;
        if (queues_[c].empty()) {
          deficit_[c] = 0;
          active_.pop_front();
          turn_open_ = false;
        }
        return item;
      }
      active_.pop_front();
      active_.push_back(c);
      turn_open_ = false;
    }
    return std::nullopt;
  }

 private:
  std::vector<uint64_t> quantum_;
  std::vector<std::deque<Item>> queues_;
  std::vector<uint64_t> deficit_;
  std::deque<ClassId> active_;
  bool turn_open_ = false;
};

TEST(DrrSchedulerTest, PopsTheSameSequenceAsTextbookDrr) {
  const std::vector<uint32_t> weights = {3, 1, 2, 1, 5};
  constexpr uint64_t kQuantum = 100;
  DrrScheduler<Item> s({SchedulerLimits{weights.size(), 40}, weights, kQuantum});
  std::vector<uint64_t> quantum;
  for (uint32_t w : weights) quantum.push_back(w * kQuantum);
  ReferenceDrr ref(quantum);
  std::mt19937_64 rng(4);
  for (int op = 0; op < 100000; ++op) {
    if (rng() % 100 < 50) {
      const ClassId cls = static_cast<ClassId>(rng() % weights.size());
      // Mostly small items, some up to 30 quanta: rounds get skipped.
      const uint64_t cost = rng() % 10 == 0 ? rng() % 3000 : rng() % 150;
      if (s.Push(Item{cls, cost}, cls, cost) == PushResult::kAccepted) ref.Push(Item{cls, cost});
      continue;
    }
    std::optional<Item> got = s.Pop();
    std::optional<Item> want = ref.Pop();
    ASSERT_EQ(got.has_value(), want.has_value()) << "op " << op;
    if (!got) continue;
    ASSERT_EQ(got->cls, want->cls) << "op " << op;
    ASSERT_EQ(got->cost, want->cost) << "op " << op;
  }
}

TEST(DrrSchedulerTest, CreateRejectsBadWeightsAndQuantum) {
  using D = DrrScheduler<int>;
  EXPECT_EQ(D::Create({SchedulerLimits{3, 8}, {1, 2}, 100}).status().code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status zero = D::Create({SchedulerLimits{2, 8}, {1, 0}, 100}).status();
  EXPECT_EQ(zero.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(zero.message().find("weight of class 1 is 0"), std::string::npos) << zero;
  EXPECT_EQ(D::Create({SchedulerLimits{2, 8}, {}, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(D::Create({SchedulerLimits{2, 8}, {1, 1u << 20}, uint64_t{1} << 30}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<D> ok = D::Create({SchedulerLimits{2, 8}, {1, 7}, 100});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->QuantumBytes(1), 700u);
}

}  // namespace
}  // namespace mooncake::qos
