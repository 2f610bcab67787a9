#include "mooncake/qos/scheduler.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "gtest/gtest.h"

namespace mooncake::qos {
namespace {

// A minimal type with every requirement, and one broken type per requirement.
struct Good {
  using Item = int;
  PushResult Push(int&&, ClassId, uint64_t) { return PushResult::kAccepted; }
  std::optional<int> Pop() { return std::nullopt; }
  size_t Size() const { return 0; }
  size_t ClassCount() const { return 1; }
  ClassStats Stats(ClassId) const { return {}; }
};
static_assert(Scheduler<Good>);

struct NoItem {
  PushResult Push(int&&, ClassId, uint64_t) { return PushResult::kAccepted; }
  std::optional<int> Pop() { return std::nullopt; }
  size_t Size() const { return 0; }
  size_t ClassCount() const { return 1; }
  ClassStats Stats(ClassId) const { return {}; }
};
static_assert(!Scheduler<NoItem>);

struct ImmovableItemType {
  struct Pinned {
    Pinned(Pinned&&) = delete;
  };
  using Item = Pinned;
  PushResult Push(Pinned&&, ClassId, uint64_t) { return PushResult::kAccepted; }
  std::optional<Pinned> Pop() { return std::nullopt; }
  size_t Size() const { return 0; }
  size_t ClassCount() const { return 1; }
  ClassStats Stats(ClassId) const { return {}; }
};
static_assert(!Scheduler<ImmovableItemType>);

struct PushReturnsBool {  // backpressure must be the named result
  using Item = int;
  bool Push(int&&, ClassId, uint64_t) { return true; }
  std::optional<int> Pop() { return std::nullopt; }
  size_t Size() const { return 0; }
  size_t ClassCount() const { return 1; }
  ClassStats Stats(ClassId) const { return {}; }
};
static_assert(!Scheduler<PushReturnsBool>);

struct PushWithoutCost {
  using Item = int;
  PushResult Push(int&&, ClassId) { return PushResult::kAccepted; }
  std::optional<int> Pop() { return std::nullopt; }
  size_t Size() const { return 0; }
  size_t ClassCount() const { return 1; }
  ClassStats Stats(ClassId) const { return {}; }
};
static_assert(!Scheduler<PushWithoutCost>);

struct PopReturnsItem {  // "none" must be expressible
  using Item = int;
  PushResult Push(int&&, ClassId, uint64_t) { return PushResult::kAccepted; }
  int Pop() { return 0; }
  size_t Size() const { return 0; }
  size_t ClassCount() const { return 1; }
  ClassStats Stats(ClassId) const { return {}; }
};
static_assert(!Scheduler<PopReturnsItem>);

struct MutableSize {  // Size must be callable on a const scheduler
  using Item = int;
  PushResult Push(int&&, ClassId, uint64_t) { return PushResult::kAccepted; }
  std::optional<int> Pop() { return std::nullopt; }
  size_t Size() { return 0; }
  size_t ClassCount() const { return 1; }
  ClassStats Stats(ClassId) const { return {}; }
};
static_assert(!Scheduler<MutableSize>);

struct NoClassCount {
  using Item = int;
  PushResult Push(int&&, ClassId, uint64_t) { return PushResult::kAccepted; }
  std::optional<int> Pop() { return std::nullopt; }
  size_t Size() const { return 0; }
  ClassStats Stats(ClassId) const { return {}; }
};
static_assert(!Scheduler<NoClassCount>);

struct NoStats {
  using Item = int;
  PushResult Push(int&&, ClassId, uint64_t) { return PushResult::kAccepted; }
  std::optional<int> Pop() { return std::nullopt; }
  size_t Size() const { return 0; }
  size_t ClassCount() const { return 1; }
};
static_assert(!Scheduler<NoStats>);

TEST(SchedulerConceptTest, StatsCompareFieldByField) {
  ClassStats a, b;
  EXPECT_EQ(a, b);
  b.refused_bytes = 1;
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace mooncake::qos
