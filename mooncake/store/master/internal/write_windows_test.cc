#include "mooncake/store/master/internal/write_windows.h"

#include "gtest/gtest.h"

namespace mooncake::master_internal {
namespace {

TEST(WriteWindowsTest, TakeAnswersAnOpenWindowOnceAndForgetsIt) {
  WriteWindows w;
  w.Open(/*version=*/7, /*end_ns=*/1'000, /*now_ns=*/100);
  EXPECT_EQ(w.size(), 1u);
  EXPECT_EQ(w.Take(8, 200), 0) << "another version has no window";
  EXPECT_EQ(w.Take(7, 200), 1'000);
  EXPECT_EQ(w.Take(7, 200), 0) << "taken once";
  EXPECT_EQ(w.size(), 0u);
}

TEST(WriteWindowsTest, PastWindowsAreNotAnsweredAndAreDropped) {
  WriteWindows w;
  w.Open(1, 500, 100);
  w.Open(2, 900, 200);
  w.Open(3, 50, 200);  // already over: not kept
  EXPECT_EQ(w.size(), 2u);
  EXPECT_EQ(w.Take(1, 500), 0) << "a window ends at its end";
  EXPECT_EQ(w.size(), 1u);
  w.Open(4, 2'000, 1'000);  // opening drops what has passed (version 2)
  EXPECT_EQ(w.size(), 1u);
  EXPECT_EQ(w.Take(2, 1'000), 0);
  EXPECT_EQ(w.Take(4, 1'999), 2'000);
}

TEST(WriteWindowsTest, ATakenEntryLeftInTheOrderIsHarmless) {
  WriteWindows w;
  w.Open(1, 1'000, 0);
  w.Open(2, 1'100, 0);
  EXPECT_EQ(w.Take(1, 10), 1'000);  // out of the map, still first in the order
  w.Open(3, 3'000, 1'050);          // drops the stale first entry, keeps 2
  EXPECT_EQ(w.size(), 2u);
  EXPECT_EQ(w.Take(2, 1'060), 1'100);
  EXPECT_EQ(w.Take(3, 1'060), 3'000);
}

// Ends out of the order they were opened in (puts started at different
// times): a later-ending front entry holds the ones behind it in the FIFO,
// but they are never answered once past.
TEST(WriteWindowsTest, EndsOutOfOrderAreStillJudgedByTime) {
  WriteWindows w;
  w.Open(1, 5'000, 0);
  w.Open(2, 1'000, 0);
  EXPECT_EQ(w.Take(2, 2'000), 0) << "past, though still stored behind version 1";
  EXPECT_EQ(w.Take(1, 2'000), 5'000);
}

}  // namespace
}  // namespace mooncake::master_internal
