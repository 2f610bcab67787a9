#include "mooncake/tier/internal/group_commit.h"

#include <vector>

#include "gtest/gtest.h"

namespace mooncake::tier_internal {
namespace {

using Commit = GroupCommit<int>;

TEST(GroupCommitTest, FirstWaiterStartsASyncAndLaterOnesJoinTheNext) {
  Commit c(/*files=*/1, /*background_sync_ms=*/100);
  EXPECT_EQ(c.Wait(0, 1), SyncStep::kSync);
  EXPECT_EQ(c.Wait(0, 2), SyncStep::kNone);  // a sync is in flight
  EXPECT_EQ(c.Wait(0, 3), SyncStep::kNone);
  SyncStep next = SyncStep::kNone;
  // The first sync covers only what waited before it was issued.
  EXPECT_EQ(c.OnSync(0, next), std::vector<int>({1}));
  EXPECT_EQ(next, SyncStep::kSync);
  EXPECT_EQ(c.pending(), 2u);
  EXPECT_EQ(c.OnSync(0, next), std::vector<int>({2, 3}));
  EXPECT_EQ(next, SyncStep::kNone);
  EXPECT_EQ(c.pending(), 0u);
}

TEST(GroupCommitTest, FilesAreIndependent) {
  Commit c(2, 100);
  EXPECT_EQ(c.Wait(0, 1), SyncStep::kSync);
  EXPECT_EQ(c.Wait(1, 2), SyncStep::kSync);
  SyncStep next;
  EXPECT_EQ(c.OnSync(1, next), std::vector<int>({2}));
  EXPECT_EQ(c.OnSync(0, next), std::vector<int>({1}));
}

TEST(GroupCommitTest, DirtyFileGetsATimerThenASync) {
  Commit c(1, 100);
  EXPECT_EQ(c.MarkDirty(0), SyncStep::kArmTimer);
  EXPECT_EQ(c.MarkDirty(0), SyncStep::kNone);  // the timer is armed already
  EXPECT_EQ(c.OnTimer(0), SyncStep::kSync);
  SyncStep next;
  EXPECT_TRUE(c.OnSync(0, next).empty());
  EXPECT_EQ(next, SyncStep::kNone);  // the sync cleaned the file
}

TEST(GroupCommitTest, WriteAcknowledgedDuringASyncGetsTheNextOne) {
  Commit c(1, 100);
  EXPECT_EQ(c.Wait(0, 1), SyncStep::kSync);
  EXPECT_EQ(c.MarkDirty(0), SyncStep::kNone);  // not covered by the sync in flight
  SyncStep next;
  c.OnSync(0, next);
  EXPECT_EQ(next, SyncStep::kArmTimer);
}

TEST(GroupCommitTest, ZeroIntervalSyncsAtOnce) {
  Commit c(1, 0);
  EXPECT_EQ(c.MarkDirty(0), SyncStep::kSync);
  EXPECT_EQ(c.MarkDirty(0), SyncStep::kNone);  // in flight
  SyncStep next;
  c.OnSync(0, next);
  EXPECT_EQ(next, SyncStep::kSync);  // dirty again since it was issued
}

TEST(GroupCommitTest, HurryNamesArmedTimersAndArmsNoMore) {
  Commit c(3, 60000);
  EXPECT_EQ(c.MarkDirty(1), SyncStep::kArmTimer);
  EXPECT_EQ(c.Hurry(), std::vector<uint32_t>({1}));
  EXPECT_EQ(c.MarkDirty(2), SyncStep::kSync);  // no timer after Hurry
  EXPECT_EQ(c.OnTimer(1), SyncStep::kSync);    // the cancelled timer's sync
}

TEST(GroupCommitTest, TimerOfACleanFileStartsNothing) {
  Commit c(1, 100);
  EXPECT_EQ(c.MarkDirty(0), SyncStep::kArmTimer);
  EXPECT_EQ(c.Wait(0, 7), SyncStep::kSync);  // this sync cleans the file too
  EXPECT_EQ(c.OnTimer(0), SyncStep::kNone);
}

TEST(GroupCommitDeathTest, OnSyncWithoutSyncDies) {
  Commit c(1, 100);
  SyncStep next;
  EXPECT_DEATH(c.OnSync(0, next), "without a sync");
}

}  // namespace
}  // namespace mooncake::tier_internal
