#include "mooncake/compress/byte_plane_codec.h"

#include "gtest/gtest.h"
#include "mooncake/compress/codec_testing.h"
#include "mooncake/compress/frame.h"
#include "mooncake/compress/internal/entropy.h"

namespace mooncake::compress {
namespace {

INSTANTIATE_TYPED_TEST_SUITE_P(BytePlane, CodecConformanceTest, ::testing::Types<BytePlaneCodec>);

double Ratio(BytePlaneCodec& codec, const std::vector<std::byte>& raw, DType dtype) {
  const std::vector<std::byte> frame = CompressToVector(codec, raw, dtype);
  std::vector<std::byte> back(raw.size());
  EXPECT_TRUE(codec.Decompress(frame, back).ok());
  EXPECT_TRUE(back == raw);
  return static_cast<double>(raw.size()) / frame.size();
}

double BoundRatio(const std::vector<std::byte>& raw, DType dtype) {
  return raw.size() / compress_internal::PlaneEntropyBoundBytes(raw, dtype);
}

// The ratio target, on data small enough for a unit test.
TEST(BytePlaneCodecTest, Bf16ReachesNinetyEightPercentOfTheOrder0Bound) {
  BytePlaneCodec codec(CodecOptions{.chunk_bytes = 64 << 10});
  const std::vector<std::byte> raw = SyntheticKvBytes(1 << 20, DType::kBFloat16, 21);
  const double bound = BoundRatio(raw, DType::kBFloat16);
  const double ratio = Ratio(codec, raw, DType::kBFloat16);
  EXPECT_GT(bound, 1.2);
  EXPECT_GE(ratio, 0.98 * bound) << "ratio " << ratio << " bound " << bound;
}

TEST(BytePlaneCodecTest, Fp16AndFp8CompressBelowTheirBound) {
  for (DType dtype : {DType::kFloat16, DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    BytePlaneCodec codec(CodecOptions{.chunk_bytes = 64 << 10});
    const std::vector<std::byte> raw = SyntheticKvBytes(512 << 10, dtype, 23);
    const double bound = BoundRatio(raw, dtype);
    const double ratio = Ratio(codec, raw, dtype);
    EXPECT_GT(ratio, 1.05) << DTypeName(dtype);
    EXPECT_GE(ratio, 0.95 * bound) << DTypeName(dtype) << " bound " << bound;
  }
}

TEST(BytePlaneCodecTest, ConstantPlanesCostOneByte) {
  // bf16 values whose low bytes are all zero and high bytes take two values.
  std::vector<std::byte> raw(64 << 10);
  for (size_t i = 0; i < raw.size(); i += 2)
    raw[i + 1] = (i / 2) % 3 ? std::byte{0x3F} : std::byte{0xBF};
  BytePlaneCodec codec(CodecOptions{.chunk_bytes = 64 << 10});
  const std::vector<std::byte> frame = CompressToVector(codec, raw, DType::kBFloat16);
  // Low plane: 2 bytes; high plane: 1 bit per value plus its table.
  EXPECT_LT(frame.size(), FrameOverheadBytes(1) + raw.size() / 16 + 100);
  std::vector<std::byte> back(raw.size());
  ASSERT_TRUE(codec.Decompress(frame, back).ok());
  EXPECT_TRUE(back == raw);
}

TEST(BytePlaneCodecTest, MantissaPlaneIsStoredRawAndExponentPlaneCoded) {
  const std::vector<std::byte> raw = SyntheticKvBytes(64 << 10, DType::kBFloat16, 25);
  BytePlaneCodec codec(CodecOptions{.chunk_bytes = 64 << 10});
  const std::vector<std::byte> frame = CompressToVector(codec, raw, DType::kBFloat16);
  const size_t payload = FrameOverheadBytes(1);
  EXPECT_EQ(static_cast<uint8_t>(frame[payload]), 0) << "low plane raw";
  EXPECT_EQ(static_cast<uint8_t>(frame[payload + 1 + raw.size() / 2]), 2) << "high plane Huffman";
}

TEST(BytePlaneCodecTest, RandomFloatsAreStoredRaw) {
  const std::vector<std::byte> raw = TestContent(1, 100000, DType::kBFloat16, 3);
  BytePlaneCodec codec(CodecOptions{.chunk_bytes = 16 << 10});
  const std::vector<std::byte> frame = CompressToVector(codec, raw, DType::kBFloat16);
  EXPECT_EQ(frame.size(), codec.MaxCompressedSize(raw.size()));
}

}  // namespace
}  // namespace mooncake::compress
