#include "mooncake/store/compat/replicate_config.h"

#include "gtest/gtest.h"

namespace mooncake::compat {
namespace {

TEST(ReplicateConfig, DefaultsAreOneUnpinnedReplica) {
  auto o = ToPutOptions({}, /*upsert=*/false);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->replica_count, 1u);
  EXPECT_EQ(o->pin, store::proto::PIN_NONE);
  EXPECT_FALSE(o->replace);
  EXPECT_FALSE(o->keep_pin);
}

TEST(ReplicateConfig, PinsAndPreserve) {
  ReplicateConfig c;
  c.soft_pin_action = SoftPinAction::kEnable;
  c.soft_pin_ttl_ms = 500;
  auto o = ToPutOptions(c, false);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->pin, store::proto::PIN_SOFT);
  EXPECT_EQ(o->pin_ttl_ms, 500u);
  c = {};
  c.with_hard_pin = true;
  EXPECT_EQ(ToPutOptions(c, false)->pin, store::proto::PIN_HARD);
  c = {};
  EXPECT_TRUE(ToPutOptions(c, /*upsert=*/true)->keep_pin);
  c.soft_pin_action = SoftPinAction::kDisable;
  EXPECT_FALSE(ToPutOptions(c, true)->keep_pin);
}

TEST(ReplicateConfig, TtlWithoutEnableAndBadReplicaCountsAreInvalid) {
  ReplicateConfig c;
  c.soft_pin_ttl_ms = 10;
  EXPECT_EQ(ToPutOptions(c, false).status().code(), absl::StatusCode::kInvalidArgument);
  c.soft_pin_action = SoftPinAction::kDisable;
  EXPECT_EQ(ToPutOptions(c, false).status().code(), absl::StatusCode::kInvalidArgument);
  c = {};
  c.replica_num = 0;
  EXPECT_FALSE(ToPutOptions(c, false).ok());
  c.replica_num = kMaxReplicas + 1;
  EXPECT_FALSE(ToPutOptions(c, false).ok());
}

TEST(ReplicateConfig, PreferredSegmentsInOrder) {
  ReplicateConfig c;
  c.preferred_segment = "a:1";
  c.preferred_segments = {"b:2", "", "c:3"};
  auto o = ToPutOptions(c, false);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->preferred_segment_names, (std::vector<std::string>{"a:1", "b:2", "c:3"}));
  EXPECT_NE(DescribeReplicateConfig(c).find("preferred_segment='a:1'"), std::string::npos);
}

TEST(ReplicateConfig, GroupIdsOneForAllOrOnePerKey) {
  ReplicateConfig c;
  auto none = GroupIdsFor(c, 3, false);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, std::vector<std::string>(3));
  c.group_ids = {"g"};
  auto one = GroupIdsFor(c, 3, false);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, std::vector<std::string>(3, "g"));
  c.group_ids = {"a", "b", "c"};
  auto each = GroupIdsFor(c, 3, false);
  ASSERT_TRUE(each.ok());
  EXPECT_EQ((*each)[1], "b");
  EXPECT_TRUE(absl::IsInvalidArgument(GroupIdsFor(c, 2, false).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(GroupIdsFor(c, 4, false).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(GroupIdsFor(c, 3, /*upsert=*/true).status()));
  c.group_ids = {std::string(rpc::kMaxGroupIdBytes + 1, 'x')};
  EXPECT_TRUE(absl::IsInvalidArgument(GroupIdsFor(c, 1, false).status()));
}

}  // namespace
}  // namespace mooncake::compat
