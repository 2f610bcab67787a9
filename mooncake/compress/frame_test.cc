#include "mooncake/compress/frame.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/compress/codec_testing.h"
#include "mooncake/compress/identity_codec.h"

namespace mooncake::compress {
namespace {

std::string Hex(std::span<const std::byte> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (std::byte b : bytes) {
    out += kDigits[static_cast<uint8_t>(b) >> 4];
    out += kDigits[static_cast<uint8_t>(b) & 15];
  }
  return out;
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CodecConformanceTest);

// The example in docs/frame_format.md: bf16 [1.0, -2.0, 0.5, 3.0] through IdentityCodec.
std::vector<std::byte> ExampleFrame() {
  const uint8_t raw[] = {0x80, 0x3F, 0x00, 0xC0, 0x00, 0x3F, 0x40, 0x40};
  IdentityCodec codec(CodecOptions{.chunk_bytes = 4096});
  return CompressToVector(codec, std::as_bytes(std::span(raw)), DType::kBFloat16);
}

TEST(FrameTest, MatchesTheDocumentedExample) {
  EXPECT_EQ(Hex(ExampleFrame()),
            "4d435a4602000100080000000000000000100000010000000800008"
            "08f0f37d54af5f895bee4d67377125f96803f00c0003f4040");
}

TEST(FrameTest, ReadFrameInfoReportsTheHeader) {
  absl::StatusOr<FrameInfo> info = ReadFrameInfo(ExampleFrame());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->codec, CodecId::kIdentity);
  EXPECT_EQ(info->dtype, DType::kBFloat16);
  EXPECT_EQ(info->raw_bytes, 8u);
  EXPECT_EQ(info->chunk_bytes, 4096u);
  EXPECT_EQ(info->chunk_count, 1u);
}

TEST(FrameTest, FrameBytesToParseNeedsTheFixedHeaderThenNamesTheTable) {
  const std::vector<std::byte> frame = ExampleFrame();
  for (size_t n = 0; n < kFrameHeaderBytes; ++n) {
    EXPECT_EQ(FrameBytesToParse(std::span(frame).first(n)), 0u) << n;
  }
  // One chunk: header, one table entry, the table checksum.
  EXPECT_EQ(FrameBytesToParse(std::span(frame).first(kFrameHeaderBytes)), 24u + 12u + 8u);
  EXPECT_EQ(FrameBytesToParse(frame), FrameOverheadBytes(1));
  // A corrupt chunk count names more than the frame holds; Parse then says so.
  std::vector<std::byte> bad = frame;
  bad[23] = std::byte{0x10};
  EXPECT_GT(FrameBytesToParse(bad), bad.size());
  EXPECT_FALSE(FrameView::Parse(bad).ok());
}

absl::Status ParseStatus(const std::vector<std::byte>& frame) {
  return FrameView::Parse(frame).status();
}

TEST(FrameTest, HeaderErrorsNameTheProblem) {
  const std::vector<std::byte> good = ExampleFrame();
  ASSERT_TRUE(ParseStatus(good).ok());
  auto with = [&](size_t at, uint8_t value) {
    std::vector<std::byte> f = good;
    f[at] = std::byte{value};
    return ParseStatus(f);
  };
  EXPECT_EQ(with(0, 'X').code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(with(0, 'X').message().find("magic"), absl::string_view::npos);
  EXPECT_NE(with(4, 3).message().find("version 3"), absl::string_view::npos);
  EXPECT_NE(with(4, 0).message().find("version 0"), absl::string_view::npos);
  EXPECT_NE(with(5, 99).message().find("unknown codec"), absl::string_view::npos);
  EXPECT_NE(with(6, 99).message().find("unknown dtype"), absl::string_view::npos);
  EXPECT_NE(with(7, 1).message().find("flags"), absl::string_view::npos);
  EXPECT_NE(with(16, 1).message().find("chunk size"), absl::string_view::npos);
  EXPECT_NE(with(20, 2).message().find("chunks cannot hold"), absl::string_view::npos);
  EXPECT_NE(with(24, 9).message().find("table checksum"), absl::string_view::npos);
  std::vector<std::byte> truncated(good.begin(), good.begin() + 20);
  EXPECT_EQ(ParseStatus(truncated).code(), absl::StatusCode::kDataLoss);
}

TEST(FrameTest, HugeChunkCountsAreRejectedBeforeAllocating) {
  std::vector<std::byte> f = ExampleFrame();
  const uint64_t raw = uint64_t{1} << 50;
  const uint32_t chunks = static_cast<uint32_t>(ChunkCount(raw, kMaxChunkBytes));
  std::memcpy(&f[8], &raw, 8);
  std::memcpy(&f[16], &kMaxChunkBytes, 4);
  std::memcpy(&f[20], &chunks, 4);
  const absl::Status s = ParseStatus(f);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("truncated"), absl::string_view::npos) << s;
}

TEST(FrameTest, RawSizeNear2To64IsNotAFrameOfZeroChunks) {
  // Regression (libFuzzer, 2026-12-05): ceil(R / C) as (R + C - 1) / C wrapped for
  // R = 2^64 - 8, so a sealed frame of 0 chunks claiming 2^64 - 8 raw bytes parsed, and a
  // range decode indexed its empty chunk table.
  const std::vector<std::byte> example = ExampleFrame();
  std::vector<std::byte> f(example.begin(), example.begin() + 8);  // magic .. flags
  f.resize(FrameOverheadBytes(0));
  const uint64_t raw = ~uint64_t{0} - 7;
  const uint32_t chunk_bytes = 0xd70000;
  const uint32_t chunks = 0;
  std::memcpy(&f[8], &raw, 8);
  std::memcpy(&f[16], &chunk_bytes, 4);
  std::memcpy(&f[20], &chunks, 4);
  SealFrameTable(f, 0);
  EXPECT_GT(ChunkCount(raw, chunk_bytes), uint64_t{1} << 40);
  const absl::Status s = ParseStatus(f);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("chunks cannot hold"), absl::string_view::npos) << s;
  IdentityCodec codec;
  std::vector<std::byte> out(32);
  EXPECT_FALSE(codec.DecompressRange(f, 21, out).ok());
  EXPECT_FALSE(codec.Decompress(f, out).ok());
}

TEST(FrameTest, CodedPayloadsMustBeSmallerThanTheirChunk) {
  // A resealed table that claims a coded payload as large as the chunk is corrupt.
  std::vector<std::byte> f = ExampleFrame();
  uint32_t word = 8;  // coded, 8 bytes
  std::memcpy(&f[24], &word, 4);
  SealFrameTable(f, 1);
  EXPECT_NE(ParseStatus(f).message().find("coded payload"), absl::string_view::npos);
}

TEST(FrameTest, EmptyInputIsAHeaderOnlyFrame) {
  IdentityCodec codec;
  const std::vector<std::byte> frame = CompressToVector(codec, {}, DType::kFloat16);
  EXPECT_EQ(frame.size(), FrameOverheadBytes(0));
  std::vector<std::byte> none;
  absl::StatusOr<size_t> n = codec.Decompress(frame, none);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
}

}  // namespace
}  // namespace mooncake::compress
