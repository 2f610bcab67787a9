#include "mooncake/store/compat/tensor_meta.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake::compat {
namespace {

namespace proto = store::proto;

TEST(TensorMeta, EveryTorchNameMapsBothWays) {
  for (const DTypeName& d : kTensorDTypes) {
    ASSERT_TRUE(DTypeByTorchName(d.torch_name).has_value()) << d.torch_name;
    EXPECT_EQ(DTypeByTorchName(d.torch_name)->dtype, d.dtype);
    ASSERT_TRUE(DTypeByProto(d.dtype).has_value());
    EXPECT_EQ(DTypeByProto(d.dtype)->torch_name, d.torch_name);
  }
  EXPECT_FALSE(DTypeByTorchName("float64").has_value());
  EXPECT_FALSE(DTypeByTorchName("int32").has_value());
  EXPECT_FALSE(DTypeByProto(proto::DTYPE_UNSPECIFIED).has_value());
}

TEST(TensorMeta, MakeChecksShapeAgainstBytes) {
  const std::vector<int64_t> shape = {2, 3, 4};
  auto m = MakeTensorMeta("bfloat16", shape, 2 * 3 * 4 * 2);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->dtype(), proto::DTYPE_BF16);
  ASSERT_EQ(m->shape_size(), 3);
  EXPECT_EQ(m->shape(2), 4u);
  EXPECT_TRUE(absl::IsInvalidArgument(MakeTensorMeta("bfloat16", shape, 47).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(MakeTensorMeta("float64", shape, 192).status()));
  const std::vector<int64_t> negative = {-1, 4};
  EXPECT_TRUE(absl::IsInvalidArgument(MakeTensorMeta("uint8", negative, 4).status()));
  const std::vector<int64_t> scalar;  // a 0-d tensor: one element
  EXPECT_TRUE(MakeTensorMeta("float32", scalar, 4).ok());
  const std::vector<int64_t> nine(9, 1);
  EXPECT_TRUE(absl::IsInvalidArgument(MakeTensorMeta("int8", nine, 1).status()));
}

TEST(TensorMeta, OverflowingShapeIsAMismatchNotAWrap) {
  // 2^32 x 2^32 elements x 1 byte wraps to 0 in 64 bits.
  const std::vector<int64_t> shape = {int64_t{1} << 32, int64_t{1} << 32};
  EXPECT_TRUE(absl::IsInvalidArgument(MakeTensorMeta("uint8", shape, 0).status()));
  proto::TensorMeta m;
  m.set_dtype(proto::DTYPE_UINT8);
  m.add_shape(uint64_t{1} << 32);
  m.add_shape(uint64_t{1} << 32);
  EXPECT_FALSE(CheckStoredTensor(m, 0).ok());
}

TEST(TensorMeta, CheckStoredTensorRefusesWhatAReaderCannotRebuild) {
  proto::TensorMeta m;
  m.set_dtype(proto::DTYPE_FP16);
  m.add_shape(8);
  auto d = CheckStoredTensor(m, 16);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->torch_name, "float16");
  EXPECT_FALSE(CheckStoredTensor(m, 15).ok());
  m.set_codec(1);
  EXPECT_FALSE(CheckStoredTensor(m, 16).ok());
  m.set_codec(0);
  m.set_dtype(proto::DTYPE_UNSPECIFIED);
  EXPECT_FALSE(CheckStoredTensor(m, 16).ok());
}

TEST(TensorMeta, TpShardKeysFollowMooncake) {
  EXPECT_EQ(TpShardKey("layer.0.k", 0), "layer.0.k_tp_0");
  EXPECT_EQ(TpShardKey("x", 13), "x_tp_13");
}

}  // namespace
}  // namespace mooncake::compat
