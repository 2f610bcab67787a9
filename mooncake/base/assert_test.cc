#include "mooncake/base/assert.h"

#include "gtest/gtest.h"

namespace mooncake {
namespace {

TEST(AssertTest, PassingAssertionsDoNothing) {
  int evaluated = 0;
  MC_ASSERT(++evaluated == 1, "always");
  EXPECT_EQ(evaluated, 1);
  MC_DASSERT(true, "debug");
  MC_EASSERT(true, "expensive");
}

TEST(AssertTest, LevelsAreOrdered) {
  EXPECT_TRUE(AssertEnabled(AssertLevel::kAlways));
  EXPECT_EQ(AssertEnabled(AssertLevel::kDebug), kAssertLevel >= 1);
  EXPECT_EQ(AssertEnabled(AssertLevel::kExpensive), kAssertLevel >= 2);
}

TEST(AssertTest, DisabledLevelsDoNotEvaluateTheCondition) {
  int evaluated = 0;
  MC_EASSERT(++evaluated > 0, "expensive");
  EXPECT_EQ(evaluated, kAssertLevel >= 2 ? 1 : 0);
  MC_DASSERT(++evaluated > 0, "debug");
  EXPECT_EQ(evaluated, (kAssertLevel >= 2 ? 1 : 0) + (kAssertLevel >= 1 ? 1 : 0));
}

TEST(AssertDeathTest, AlwaysAssertionAbortsWithMessage) {
  EXPECT_DEATH(MC_ASSERT(1 + 1 == 3, "arithmetic is broken"),
               "assertion failed: 1 \\+ 1 == 3 \\(arithmetic is broken\\)");
}

TEST(AssertDeathTest, DebugAssertionAbortsWhenEnabled) {
  if (!AssertEnabled(AssertLevel::kDebug)) GTEST_SKIP() << "built with NDEBUG";
  EXPECT_DEATH(MC_DASSERT(false, "debug check"), "debug check");
}

}  // namespace
}  // namespace mooncake
