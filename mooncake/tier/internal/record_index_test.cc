#include "mooncake/tier/internal/record_index.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake::tier_internal {
namespace {

RecordIndex::RecordPtr MakeRecord(const std::string& key, uint64_t sequence = 1) {
  auto r = std::make_shared<SsdRecord>();
  r->key = key;
  r->header.sequence = sequence;
  return r;
}

TEST(RecordIndexTest, BeginWriteReservesTheKeyUntilEndWrite) {
  RecordIndex index;
  const std::optional<uint64_t> first = index.BeginWrite("a");
  ASSERT_TRUE(first.has_value());
  EXPECT_FALSE(index.BeginWrite("a").has_value());  // being written
  EXPECT_FALSE(index.Contains("a"));                // not visible yet
  index.EndWrite("a", MakeRecord("a", *first));
  EXPECT_TRUE(index.Contains("a"));
  EXPECT_FALSE(index.BeginWrite("a").has_value());  // stored
  EXPECT_EQ(index.size(), 1u);
}

TEST(RecordIndexTest, FailedWriteReleasesTheKey) {
  RecordIndex index;
  ASSERT_TRUE(index.BeginWrite("a").has_value());
  index.EndWrite("a", nullptr);
  EXPECT_FALSE(index.Contains("a"));
  EXPECT_TRUE(index.BeginWrite("a").has_value());
}

TEST(RecordIndexTest, SequenceNumbersIncreaseAndResumeAboveRecovery) {
  RecordIndex index;
  index.SetNextSequence(100);
  const uint64_t a = *index.BeginWrite("a");
  const uint64_t b = *index.BeginWrite("b");
  EXPECT_EQ(a, 100u);
  EXPECT_EQ(b, 101u);
}

TEST(RecordIndexTest, WritesStopAtTheLastSequenceNumber) {
  RecordIndex index;
  index.SetNextSequence(kMaxSequence);
  EXPECT_FALSE(index.SequencesExhausted());
  EXPECT_EQ(index.BeginWrite("a"), kMaxSequence);
  EXPECT_FALSE(index.BeginWrite("b").has_value());
  EXPECT_TRUE(index.SequencesExhausted());
}

TEST(RecordIndexTest, TakeRemovesAndDropRemovesOnlyTheSameRecord) {
  RecordIndex index;
  RecordIndex::RecordPtr old = MakeRecord("k", 1);
  index.Insert(old);
  EXPECT_EQ(index.Find("k"), old);
  EXPECT_EQ(index.Take("k"), old);
  EXPECT_EQ(index.Take("k"), nullptr);
  // A newer record of the key is not dropped on behalf of the old one.
  RecordIndex::RecordPtr fresh = MakeRecord("k", 2);
  index.Insert(fresh);
  EXPECT_FALSE(index.Drop(old));
  EXPECT_TRUE(index.Contains("k"));
  EXPECT_TRUE(index.Drop(fresh));
  EXPECT_FALSE(index.Contains("k"));
}

TEST(RecordIndexTest, SnapshotHoldsEveryRecordAndClearEmpties) {
  RecordIndex index;
  for (int i = 0; i < 10; ++i) index.Insert(MakeRecord("k" + std::to_string(i)));
  EXPECT_EQ(index.Snapshot().size(), 10u);
  index.Clear();
  EXPECT_EQ(index.size(), 0u);
  EXPECT_TRUE(index.Snapshot().empty());
}

TEST(RecordIndexTest, ConcurrentWritersOfOneKeyGetOneReservation) {
  RecordIndex index;
  std::atomic<int> winners{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        if (index.BeginWrite("key" + std::to_string(i))) winners.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(winners.load(), 200);
}

}  // namespace
}  // namespace mooncake::tier_internal
