#include "mooncake/compress/adaptive_codec.h"

#include "gtest/gtest.h"
#include "mooncake/compress/codec_testing.h"
#include "mooncake/compress/frame.h"
#include "mooncake/compress/zstd_codec.h"

namespace mooncake::compress {
namespace {

using AdaptiveCodecs = ::testing::Types<AdaptiveCodec<>, AdaptiveCodec<ZstdCodec>>;
INSTANTIATE_TYPED_TEST_SUITE_P(Adaptive, CodecConformanceTest, AdaptiveCodecs);

int StoredChunks(const std::vector<std::byte>& frame) {
  absl::StatusOr<FrameView> view = FrameView::Parse(frame);
  EXPECT_TRUE(view.ok()) << view.status();
  int stored = 0;
  for (const ChunkRef& c : view->chunks()) stored += c.stored_raw;
  return stored;
}

TEST(AdaptiveCodecTest, StoresIncompressibleChunksAndCodesTheRest) {
  // Chunks 0-3 KV data, chunks 4-7 random bytes.
  std::vector<std::byte> raw = SyntheticKvBytes(128 << 10, DType::kBFloat16, 1);
  const std::vector<std::byte> noise = TestContent(1, 128 << 10, DType::kBFloat16, 2);
  raw.insert(raw.end(), noise.begin(), noise.end());
  AdaptiveCodec<> codec(CodecOptions{.chunk_bytes = 32 << 10});
  const std::vector<std::byte> frame = CompressToVector(codec, raw, DType::kBFloat16);
  EXPECT_EQ(StoredChunks(frame), 4);
  // Its frames are BytePlane frames.
  BytePlaneCodec plain(CodecOptions{.chunk_bytes = 32 << 10});
  std::vector<std::byte> back(raw.size());
  ASSERT_TRUE(plain.Decompress(frame, back).ok());
  EXPECT_TRUE(back == raw);
}

TEST(AdaptiveCodecTest, ThresholdAboveTheRatioStoresEverything) {
  const std::vector<std::byte> raw = SyntheticKvBytes(128 << 10, DType::kBFloat16, 1);
  AdaptiveCodec<> lenient(CodecOptions{.chunk_bytes = 32 << 10});
  AdaptiveCodec<> strict(CodecOptions{.chunk_bytes = 32 << 10}, {.min_ratio = 3.0});
  EXPECT_EQ(StoredChunks(CompressToVector(lenient, raw, DType::kBFloat16)), 0);
  EXPECT_EQ(StoredChunks(CompressToVector(strict, raw, DType::kBFloat16)), 4);
}

TEST(AdaptiveCodecTest, SampledRatioTracksTheBound) {
  const std::vector<std::byte> kv = SyntheticKvBytes(1 << 20, DType::kBFloat16, 5);
  const double bound = kv.size() / compress_internal::PlaneEntropyBoundBytes(kv, DType::kBFloat16);
  const double sampled = adaptive_internal::SampledRatio(kv, DType::kBFloat16);
  EXPECT_NEAR(sampled, bound, 0.1 * bound);
  const std::vector<std::byte> noise = TestContent(1, 1 << 20, DType::kBytes, 5);
  EXPECT_LT(adaptive_internal::SampledRatio(noise, DType::kBytes), 1.02);
}

}  // namespace
}  // namespace mooncake::compress
