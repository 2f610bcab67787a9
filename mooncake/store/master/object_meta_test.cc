#include "mooncake/store/master/object_meta.h"

#include <string>

#include "gtest/gtest.h"

namespace mooncake::master {
namespace {

TEST(ObjectMetaTest, SizeValidation) {
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateObjectSize(0, 100)));
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateObjectSize(101, 100)));
  EXPECT_TRUE(ValidateObjectSize(100, 100).ok());
}

TEST(ObjectMetaTest, LeaseVisibilityAndDeferredDue) {
  ObjectMeta m;
  m.state = ObjectState::kCommitted;
  EXPECT_TRUE(m.Visible(5));
  m.expire_at_ns = 10;
  EXPECT_TRUE(m.Visible(9));
  EXPECT_FALSE(m.Visible(10));
  m.lease_refs = 1;
  m.lease_until_ns = 20;
  EXPECT_TRUE(m.Leased(19));
  EXPECT_FALSE(m.Leased(20));
  m.lease_refs = 0;
  EXPECT_FALSE(m.Leased(19));

  DeferredFree d{.lease_refs = 1, .lease_until_ns = 20, .hold_until_ns = 5};
  EXPECT_FALSE(d.Due(10));  // leased
  EXPECT_TRUE(d.Due(20));   // lease expired
  d.lease_refs = 0;
  EXPECT_FALSE(d.Due(4));  // held
  EXPECT_TRUE(d.Due(5));
}

TEST(ObjectMetaTest, ReadableReplicasLocalFirst) {
  ObjectMeta m;
  m.state = ObjectState::kCommitted;
  m.replicas = {Replica{1, "w1", "ha", {}, ReplicaState::kComplete},
                Replica{2, "w2", "hb", {}, ReplicaState::kAllocated},
                Replica{3, "w3", "hb", {}, ReplicaState::kComplete}};
  google::protobuf::RepeatedPtrField<store::proto::Replica> out;
  AppendReadableReplicas(m, "hb", &out);
  ASSERT_EQ(out.size(), 2);
  EXPECT_EQ(out[0].segment_id(), 3u);
  EXPECT_EQ(out[1].segment_id(), 1u);
}

TEST(ObjectMetaTest, IdsAreUniqueAndNonZero) {
  IdSource ids;
  const uint64_t a = ids.Next();
  EXPECT_NE(a, 0u);
  EXPECT_NE(ids.Next(), a);
}

TEST(ObjectMetaTest, PinLevels) {
  EXPECT_EQ(*PinFromProto(store::proto::PIN_HARD), PinLevel::kHard);
  EXPECT_TRUE(
      absl::IsInvalidArgument(PinFromProto(static_cast<store::proto::PinLevel>(9)).status()));
}

}  // namespace
}  // namespace mooncake::master
