#include "mooncake/compress/identity_codec.h"

#include "gtest/gtest.h"
#include "mooncake/compress/codec_testing.h"
#include "mooncake/compress/frame.h"

namespace mooncake::compress {
namespace {

INSTANTIATE_TYPED_TEST_SUITE_P(Identity, CodecConformanceTest, ::testing::Types<IdentityCodec>);

TEST(IdentityCodecTest, StoresEveryChunkRawAfterTheTable) {
  IdentityCodec codec(CodecOptions{.chunk_bytes = 4096});
  const std::vector<std::byte> raw = SyntheticKvBytes(10000, DType::kBFloat16);
  const std::vector<std::byte> frame = CompressToVector(codec, raw, DType::kBFloat16);
  ASSERT_EQ(frame.size(), FrameOverheadBytes(3) + raw.size());
  EXPECT_TRUE(std::equal(raw.begin(), raw.end(), frame.begin() + FrameOverheadBytes(3)));
  absl::StatusOr<FrameView> view = FrameView::Parse(frame);
  ASSERT_TRUE(view.ok());
  for (const ChunkRef& c : view->chunks()) EXPECT_TRUE(c.stored_raw);
}

}  // namespace
}  // namespace mooncake::compress
