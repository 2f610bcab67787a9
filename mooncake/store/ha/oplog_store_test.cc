#include "mooncake/store/ha/oplog_store.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/store/ha/testing/etcd_process.h"

namespace mooncake::ha {
namespace {

TEST(Crc32cTest, KnownVector) {
  EXPECT_EQ(ha_internal::Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(ha_internal::Crc32c(""), 0u);
  EXPECT_EQ(ha_internal::Crc32c("6789", ha_internal::Crc32c("12345")), 0xE3069283u);
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

class OplogStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EtcdProcess>> p = EtcdProcess::Start();
    if (absl::IsFailedPrecondition(p.status())) GTEST_SKIP() << p.status();
    ASSERT_TRUE(p.ok()) << p.status();
    etcd_ = *std::move(p);
    absl::StatusOr<EtcdClient> c = EtcdClient::Create(etcd_->endpoint());
    ASSERT_TRUE(c.ok()) << c.status();
    client_.emplace(*c);
    keys_ = *HaKeys::For("c1");
    epoch_ = BecomeLeader();
  }

  // Writes the leader key as an election winner would; its epoch.
  int64_t BecomeLeader() {
    absl::StatusOr<int64_t> rev = client_->Put(keys_.Leader(), "me:1");
    EXPECT_TRUE(rev.ok()) << rev.status();
    return rev.ok() ? *rev : 0;
  }

  std::unique_ptr<EtcdProcess> etcd_;
  std::optional<EtcdClient> client_;
  HaKeys keys_;
  int64_t epoch_ = 0;
};

TEST_F(OplogStoreTest, AppendsReadBackInSeqOrder) {
  const OplogStore store(*client_, "c1");
  EXPECT_FALSE(store.LastSeq()->has_value());
  EXPECT_TRUE(store.ReadFrom(0)->empty());
  for (const uint64_t seq : {3, 1, 2, 10, 4}) {
    ASSERT_TRUE(store.Append(epoch_, seq, absl::StrCat("batch", seq)).ok()) << seq;
  }
  absl::StatusOr<std::vector<OplogStore::Batch>> all = store.ReadFrom(0);
  ASSERT_TRUE(all.ok()) << all.status();
  std::vector<uint64_t> seqs;
  for (const auto& [seq, bytes] : *all) {
    seqs.push_back(seq);
    EXPECT_EQ(bytes, absl::StrCat("batch", seq));
  }
  EXPECT_EQ(seqs, (std::vector<uint64_t>{1, 2, 3, 4, 10}));
  EXPECT_EQ(store.ReadFrom(4)->front().first, 4u);
  EXPECT_EQ(store.ReadFrom(5)->size(), 1u);
  EXPECT_TRUE(store.ReadFrom(11)->empty());
  EXPECT_EQ(store.ReadFrom(0, /*max_batches=*/2)->size(), 2u);
  // max_bytes stops after the batch that reaches it, but never returns none.
  EXPECT_EQ(store.ReadFrom(0, 256, /*max_bytes=*/1)->size(), 1u);
  EXPECT_EQ(store.ReadFrom(0, 256, /*max_bytes=*/7)->size(), 2u);
  EXPECT_EQ(**store.LastSeq(), 10u);
}

TEST_F(OplogStoreTest, ReadsAcrossPages) {
  const OplogStore store(*client_, "c1");
  for (uint64_t seq = 0; seq < 40; ++seq) ASSERT_TRUE(store.Append(epoch_, seq, "x").ok());
  absl::StatusOr<std::vector<OplogStore::Batch>> all = store.ReadFrom(0);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 40u);
  for (uint64_t i = 0; i < 40; ++i) EXPECT_EQ((*all)[i].first, i);
  EXPECT_EQ(store.ReadFrom(5, 20)->size(), 20u);
  EXPECT_EQ(store.ReadFrom(5, 20)->back().first, 24u);
}

TEST_F(OplogStoreTest, ATakenSeqIsAlreadyExists) {
  const OplogStore store(*client_, "c1");
  ASSERT_TRUE(store.Append(epoch_, 7, "first").ok());
  absl::Status s = store.Append(epoch_, 7, "second");
  EXPECT_TRUE(absl::IsAlreadyExists(s)) << s;
  EXPECT_EQ(store.ReadFrom(7)->at(0).second, "first");
}

TEST_F(OplogStoreTest, WritesAreFencedByEpoch) {
  const OplogStore store(*client_, "c1");
  absl::Status s = store.Append(epoch_ + 1, 1, "wrong epoch");
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("fenced"), absl::string_view::npos) << s;

  ASSERT_TRUE(client_->DeleteRange(keys_.Leader()).ok());
  s = store.Append(epoch_, 1, "no leader");
  EXPECT_NE(s.message().find("fenced"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("no leader"), absl::string_view::npos) << s;

  const int64_t next = BecomeLeader();
  ASSERT_GT(next, epoch_);
  s = store.Append(epoch_, 1, "deposed");
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  s = store.WriteSnapshot(epoch_, 1, "deposed snapshot");
  EXPECT_NE(s.message().find("fenced"), absl::string_view::npos) << s;
  EXPECT_FALSE(store.ReadSnapshot()->has_value());
  EXPECT_TRUE(store.ReadFrom(0)->empty());
  EXPECT_TRUE(store.Append(next, 1, "current").ok());
}

TEST_F(OplogStoreTest, TruncateBelowDeletesOnlyOlderBatches) {
  const OplogStore store(*client_, "c1");
  for (uint64_t seq = 1; seq <= 6; ++seq) ASSERT_TRUE(store.Append(epoch_, seq, "b").ok());
  ASSERT_TRUE(store.TruncateBelow(4).ok());
  absl::StatusOr<std::vector<OplogStore::Batch>> rest = store.ReadFrom(0);
  ASSERT_TRUE(rest.ok());
  ASSERT_EQ(rest->size(), 3u);
  EXPECT_EQ(rest->front().first, 4u);
  EXPECT_EQ(**store.LastSeq(), 6u);
  ASSERT_TRUE(store.TruncateBelow(100).ok());
  EXPECT_FALSE(store.LastSeq()->has_value());
}

TEST_F(OplogStoreTest, SnapshotRoundTripsInSeveralChunks) {
  const OplogStore store(*client_, "c1", {.chunk_bytes = 1000});
  EXPECT_FALSE(store.ReadSnapshot()->has_value());
  const std::string first = RandomBytes(3500, 1);
  ASSERT_TRUE(store.WriteSnapshot(epoch_, 10, first).ok());
  EXPECT_EQ(client_
                ->Range(keys_.SnapshotChunkPrefix(10),
                        EtcdClient::PrefixEnd(keys_.SnapshotChunkPrefix(10)))
                ->kvs.size(),
            4u);
  absl::StatusOr<std::optional<OplogStore::Batch>> got = store.ReadSnapshot();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->first, 10u);
  EXPECT_TRUE((*got)->second == first);

  // A newer snapshot replaces it, and the old chunks go.
  const std::string second = RandomBytes(2000, 2);
  ASSERT_TRUE(store.WriteSnapshot(epoch_, 20, second).ok());
  got = store.ReadSnapshot();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)->first, 20u);
  EXPECT_TRUE((*got)->second == second);
  EXPECT_TRUE(client_
                  ->Range(keys_.SnapshotChunkPrefix(10),
                          EtcdClient::PrefixEnd(keys_.SnapshotChunkPrefix(10)))
                  ->kvs.empty());
  EXPECT_EQ(client_->Range(keys_.SnapshotPrefix(), EtcdClient::PrefixEnd(keys_.SnapshotPrefix()))
                ->kvs.size(),
            3u);  // two chunks and the manifest

  // An empty state is a snapshot too.
  ASSERT_TRUE(store.WriteSnapshot(epoch_, 21, "").ok());
  got = store.ReadSnapshot();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)->first, 21u);
  EXPECT_EQ((*got)->second, "");
}

TEST_F(OplogStoreTest, MegabyteChunksFitEtcdsRequestLimit) {
  const OplogStore store(*client_, "c1");
  const std::string big = RandomBytes((size_t{5} << 20) / 2, 3);  // 2.5 MiB: 3 chunks
  absl::Status s = store.WriteSnapshot(epoch_, 5, big);
  ASSERT_TRUE(s.ok()) << s;
  absl::StatusOr<std::optional<OplogStore::Batch>> got = store.ReadSnapshot();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE((*got)->second == big);
}

TEST_F(OplogStoreTest, CorruptOrMissingChunksAreDataLoss) {
  const OplogStore store(*client_, "c1", {.chunk_bytes = 100});
  const std::string bytes = RandomBytes(450, 4);
  ASSERT_TRUE(store.WriteSnapshot(epoch_, 3, bytes).ok());

  std::string flipped = bytes.substr(100, 100);
  flipped[5] ^= 1;
  ASSERT_TRUE(client_->Put(keys_.SnapshotChunk(3, 1), flipped).ok());
  absl::StatusOr<std::optional<OplogStore::Batch>> got = store.ReadSnapshot();
  EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
  EXPECT_NE(got.status().message().find("crc32c"), absl::string_view::npos) << got.status();

  ASSERT_TRUE(client_->Put(keys_.SnapshotChunk(3, 1), bytes.substr(100, 100)).ok());
  ASSERT_TRUE(store.ReadSnapshot().ok());
  ASSERT_TRUE(client_->DeleteRange(keys_.SnapshotChunk(3, 2)).ok());
  got = store.ReadSnapshot();
  EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
  EXPECT_NE(got.status().message().find("chunk 2 of 5 is missing"), absl::string_view::npos)
      << got.status();

  ASSERT_TRUE(client_->DeleteRange(keys_.SnapshotChunk(3, 4)).ok());
  ASSERT_TRUE(client_->Put(keys_.SnapshotChunk(3, 2), bytes.substr(200, 100)).ok());
  got = store.ReadSnapshot();
  EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
  EXPECT_NE(got.status().message().find("missing"), absl::string_view::npos) << got.status();

  ASSERT_TRUE(client_->Put(keys_.SnapshotManifest(), "{\"next_seq\": \"x\"}").ok());
  got = store.ReadSnapshot();
  EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
  EXPECT_NE(got.status().message().find("manifest"), absl::string_view::npos) << got.status();
}

}  // namespace
}  // namespace mooncake::ha
