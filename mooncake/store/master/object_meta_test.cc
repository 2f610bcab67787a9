#include "mooncake/store/master/object_meta.h"

#include <string>

#include "gtest/gtest.h"
#include "mooncake/base/inline_string.h"

namespace mooncake::master {
namespace {

// Formats are kept in a byte; one this build does not know (a newer
// writer's) passes through for readers to verify or refuse.
TEST(ObjectMetaTest, ChecksumFormatsFitAByte) {
  EXPECT_TRUE(ValidateChecksumFormat(store::proto::CHECKSUM_XXH3_WHOLE).ok());
  EXPECT_TRUE(ValidateChecksumFormat(store::proto::CHECKSUM_XXH3_CHUNKED).ok());
  EXPECT_TRUE(ValidateChecksumFormat(7).ok());
  EXPECT_TRUE(ValidateChecksumFormat(kMaxChecksumFormat).ok());
  const absl::Status s = ValidateChecksumFormat(256);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("unknown checksum_format 256"), std::string::npos) << s;
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateChecksumFormat(-1)));
}

TEST(ObjectMetaTest, SizeValidation) {
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateObjectSize(0, 100)));
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateObjectSize(101, 100)));
  EXPECT_TRUE(ValidateObjectSize(100, 100).ok());
}

// The rarely set fields live in a side record that a plain object does not
// have: the master holds one ObjectMeta per object (docs/master_scale.md).
TEST(ObjectMetaTest, RareFieldsLiveInASideRecordOnlyWhenSet) {
  // The table's node, key and ObjectMeta, fits a 176-byte malloc chunk
  // (168 + glibc's 8-byte header); one byte more would take a 192-byte one.
  EXPECT_LE(sizeof(ObjectMeta), 144u);
  EXPECT_LE(sizeof(Replica), 48u);
  EXPECT_LE(sizeof(InlineString) + sizeof(ObjectMeta), 168u);
  ObjectMeta m;
  EXPECT_FALSE(m.extras.has());
  EXPECT_EQ(m.expire_at_ns(), 0);
  EXPECT_EQ(m.pin_until_ns(), 0);
  EXPECT_EQ(m.tensor(), nullptr);
  EXPECT_EQ(m.group(), nullptr);
  EXPECT_EQ(m.ssd_bytes(), 0u);
  m.ForgetSsdCopy();  // nothing to forget: no side record made
  EXPECT_FALSE(m.extras.has());

  m.pin = PinLevel::kSoft;
  m.extras.mut().pin_until_ns = 100;
  m.extras.mut().ssd_bytes = 4096;
  m.ssd = SsdState::kStored;
  EXPECT_EQ(m.EffectivePin(99), PinLevel::kSoft);
  EXPECT_EQ(m.EffectivePin(100), PinLevel::kNone);

  ObjectMeta copy = m;  // deep: the copy has its own side record
  copy.extras.mut().pin_until_ns = 200;
  EXPECT_EQ(m.pin_until_ns(), 100);
  EXPECT_EQ(copy.ssd_bytes(), 4096u);

  m.ForgetSsdCopy();
  EXPECT_EQ(m.ssd, SsdState::kNone);
  EXPECT_EQ(m.ssd_bytes(), 0u);
  EXPECT_EQ(copy.ssd_bytes(), 4096u);
}

TEST(ObjectMetaTest, LeaseVisibilityAndDeferredDue) {
  ObjectMeta m;
  m.state = ObjectState::kCommitted;
  EXPECT_TRUE(m.Visible(5));
  EXPECT_FALSE(m.extras.has());
  m.extras.mut().expire_at_ns = 10;
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

namespace mooncake::master {
namespace {

TEST(ValidateTensorMetaTest, ChecksShapeDtypeLayersAndTp) {
  store::proto::TensorMeta t;
  EXPECT_TRUE(ValidateTensorMeta(t, 100).ok());  // nothing given: nothing to check
  t.set_dtype(store::proto::DTYPE_BF16);
  EXPECT_TRUE(ValidateTensorMeta(t, 100).ok());  // a dtype alone
  t.add_shape(2);
  t.add_shape(16);
  t.add_shape(8);
  EXPECT_TRUE(ValidateTensorMeta(t, 2 * 16 * 8 * 2).ok());
  absl::Status s = ValidateTensorMeta(t, 1000);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("2x16x8 x 2 bytes = 512 bytes, but the object is 1000"),
            std::string::npos)
      << s;
  t.set_codec(1);  // stored compressed: the size is not the shape's
  EXPECT_TRUE(ValidateTensorMeta(t, 1000).ok());
  t.set_codec(0);
  t.set_dtype(store::proto::DTYPE_UNSPECIFIED);
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateTensorMeta(t, 512)));  // shape without dtype
  t.set_dtype(static_cast<store::proto::DType>(99));
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateTensorMeta(t, 512)));
  t.set_dtype(store::proto::DTYPE_FP32);
  t.clear_shape();
  t.add_shape(UINT64_MAX / 2);
  t.add_shape(4);
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateTensorMeta(t, 512)));  // overflow
  t.clear_shape();
  t.set_layer_begin(4);
  t.set_layer_end(2);
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateTensorMeta(t, 512)));
  t.set_layer_end(8);
  EXPECT_TRUE(ValidateTensorMeta(t, 512).ok());
  t.set_tp_size(2);
  t.set_tp_rank(2);
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateTensorMeta(t, 512)));
  t.set_tp_rank(1);
  EXPECT_TRUE(ValidateTensorMeta(t, 512).ok());
  t.set_tp_size(0);
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateTensorMeta(t, 512)));  // a rank without a size
}

}  // namespace
}  // namespace mooncake::master
