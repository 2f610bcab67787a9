#include "mooncake/compress/byte_plane_codec.h"

#include <string>

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
  EXPECT_EQ(static_cast<uint8_t>(frame[payload + 1 + raw.size() / 2]), 3)
      << "high plane Huffman, 8 streams";
}

// Written by the version 1 encoder (4-stream Huffman, plane mode 2) before frame
// version 2: bf16, 200 elements, low bytes 0, high bytes 0x3f/0xbf/0x40 by (7 i) % 10.
TEST(BytePlaneCodecTest, DecodesVersion1Frames) {
  const std::string hex =
      "4d435a4601020100900100000000000000100000010000005a000000c75aeea87d1db8ef56682ece21a6b6"
      "79010002020000000000000080010000000000000000000000000000800000000000000000210209000000"
      "090000000900000009000000669a9966a69969661a669a9966a69969661a669a9966a69969661a669a9966"
      "a69969661a";
  std::vector<std::byte> frame(hex.size() / 2);
  for (size_t i = 0; i < frame.size(); ++i) {
    frame[i] = static_cast<std::byte>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  std::vector<std::byte> expected(400);
  for (size_t i = 0; i < 200; ++i) {
    const int k = (i * 7) % 10;
    expected[2 * i + 1] = std::byte(k < 6 ? 0x3f : k < 9 ? 0xbf : 0x40);
  }
  EXPECT_EQ(static_cast<uint8_t>(frame[4]), 1) << "a version 1 frame";
  EXPECT_EQ(static_cast<uint8_t>(frame[FrameOverheadBytes(1) + 2]), 2) << "4-stream Huffman";
  BytePlaneCodec codec;
  std::vector<std::byte> out(expected.size());
  absl::StatusOr<size_t> n = codec.Decompress(frame, out);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(out, expected);
}

TEST(BytePlaneCodecTest, RandomFloatsAreStoredRaw) {
  const std::vector<std::byte> raw = TestContent(1, 100000, DType::kBFloat16, 3);
  BytePlaneCodec codec(CodecOptions{.chunk_bytes = 16 << 10});
  const std::vector<std::byte> frame = CompressToVector(codec, raw, DType::kBFloat16);
  EXPECT_EQ(frame.size(), codec.MaxCompressedSize(raw.size()));
}

}  // namespace
}  // namespace mooncake::compress
