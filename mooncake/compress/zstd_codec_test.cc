#include "mooncake/compress/zstd_codec.h"

#include "gtest/gtest.h"
#include "mooncake/compress/codec_testing.h"
#include "mooncake/compress/frame.h"

namespace mooncake::compress {
namespace {

INSTANTIATE_TYPED_TEST_SUITE_P(Zstd, CodecConformanceTest, ::testing::Types<ZstdCodec>);

TEST(ZstdCodecTest, CompressesRepetitiveDataAndHigherLevelsAreNoLarger) {
  std::vector<std::byte> raw(100000);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<std::byte>("mooncake"[i % 8]);
  ZstdCodec fast(1), strong(9);
  const size_t a = CompressToVector(fast, raw, DType::kBytes).size();
  const size_t b = CompressToVector(strong, raw, DType::kBytes).size();
  EXPECT_LT(a, raw.size() / 20);
  EXPECT_LE(b, a);
}

TEST(ZstdCodecTest, ContextsAreReusedAcrossCalls) {
  ZstdCodec codec(3, CodecOptions{.chunk_bytes = 4096});
  const std::vector<std::byte> raw = SyntheticKvBytes(30000, DType::kBFloat16);
  const std::vector<std::byte> first = CompressToVector(codec, raw, DType::kBFloat16);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(CompressToVector(codec, raw, DType::kBFloat16) == first);
}

}  // namespace
}  // namespace mooncake::compress
