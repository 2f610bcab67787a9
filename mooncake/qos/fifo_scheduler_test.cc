#include "mooncake/qos/fifo_scheduler.h"

#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "mooncake/qos/scheduler_testing.h"

namespace mooncake::qos {
namespace {

struct FifoFactory {
  template <typename T>
  static std::unique_ptr<FifoScheduler<T>> Make(const SchedulerLimits& limits) {
    return std::make_unique<FifoScheduler<T>>(typename FifoScheduler<T>::Options{limits});
  }
};
INSTANTIATE_TYPED_TEST_SUITE_P(Fifo, SchedulerConformanceTest, FifoFactory);

TEST(FifoSchedulerTest, ServesInArrivalOrderAcrossClasses) {
  FifoScheduler<int> s({SchedulerLimits{4, 16}});
  const int classes[] = {3, 0, 2, 0, 1};
  for (int i = 0; i < 5; ++i) ASSERT_EQ(s.Push(int{i}, classes[i], 10), PushResult::kAccepted);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(s.Pop(), std::optional<int>(i));
}

TEST(FifoSchedulerTest, CreateRejectsBadLimitsWithInvalidArgument) {
  EXPECT_EQ(FifoScheduler<int>::Create({SchedulerLimits{0, 16}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FifoScheduler<int>::Create({SchedulerLimits{65, 16}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FifoScheduler<int>::Create({SchedulerLimits{1, 0}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FifoScheduler<int>::Create({SchedulerLimits{1, 4, 0}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<FifoScheduler<int>> ok = FifoScheduler<int>::Create({SchedulerLimits{64, 1}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->ClassCount(), 64u);
}

TEST(FifoSchedulerTest, CreateMessageNamesTheFieldAndRange) {
  const absl::Status s = FifoScheduler<int>::Create({SchedulerLimits{0, 16}}).status();
  EXPECT_NE(s.message().find("class_count is 0"), std::string::npos) << s;
  EXPECT_NE(s.message().find("[1, 64]"), std::string::npos) << s;
}

}  // namespace
}  // namespace mooncake::qos
