#include "mooncake/store/ha/keys.h"

#include <string>

#include "gtest/gtest.h"

namespace mooncake::ha {
namespace {

TEST(HaKeysTest, Layout) {
  absl::StatusOr<HaKeys> k = HaKeys::For("prod-1.a_b");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->prefix, "/mooncake/ha/prod-1.a_b/");
  EXPECT_EQ(k->Leader(), "/mooncake/ha/prod-1.a_b/leader");
  EXPECT_EQ(k->Oplog(42), "/mooncake/ha/prod-1.a_b/oplog/00000000000000000042");
  EXPECT_EQ(k->Oplog(UINT64_MAX), "/mooncake/ha/prod-1.a_b/oplog/18446744073709551615");
  EXPECT_EQ(k->SnapshotManifest(), "/mooncake/ha/prod-1.a_b/snapshot/manifest");
  EXPECT_EQ(k->SnapshotChunk(7, 3), "/mooncake/ha/prod-1.a_b/snapshot/00000000000000000007/000003");
  // Key order is seq order, and chunk directories sort before the manifest.
  EXPECT_LT(k->Oplog(9), k->Oplog(10));
  EXPECT_LT(k->SnapshotChunk(UINT64_MAX, 999999), k->SnapshotManifest());
}

TEST(HaKeysTest, ParsesWhatItWrites) {
  const HaKeys k = *HaKeys::For("c");
  EXPECT_EQ(k.ParseOplogSeq(k.Oplog(0)), 0u);
  EXPECT_EQ(k.ParseOplogSeq(k.Oplog(UINT64_MAX)), UINT64_MAX);
  EXPECT_EQ(k.ParseOplogSeq(k.Leader()), std::nullopt);
  EXPECT_EQ(k.ParseOplogSeq(k.OplogPrefix() + "12"), std::nullopt);
  EXPECT_EQ(k.ParseOplogSeq(k.OplogPrefix() + "0000000000000000001x"), std::nullopt);
  EXPECT_EQ(k.ParseOplogSeq(k.OplogPrefix() + "99999999999999999999"), std::nullopt);  // > 2^64
  EXPECT_EQ(k.ParseOplogSeq(HaKeys::For("d")->Oplog(1)), std::nullopt);
  EXPECT_EQ(k.ParseSnapshotChunk(5, k.SnapshotChunk(5, 12)), 12u);
  EXPECT_EQ(k.ParseSnapshotChunk(6, k.SnapshotChunk(5, 12)), std::nullopt);
}

TEST(HaKeysTest, ClusterNames) {
  EXPECT_TRUE(ValidateClusterName(std::string(64, 'a')).ok());
  for (const std::string& bad : {std::string(), std::string(65, 'a'), std::string("a/b"),
                                 std::string("a b"), std::string("é")}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ValidateClusterName(bad))) << bad;
    EXPECT_FALSE(HaKeys::For(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace mooncake::ha
