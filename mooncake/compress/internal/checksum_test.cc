#include "mooncake/compress/internal/checksum.h"

#include <vector>

#include "gtest/gtest.h"
#include "mooncake/compress/kv_data_testing.h"

namespace mooncake::compress_internal {
namespace {

// The frame format fixes the checksum as XXH3-64 (seed 0): the AVX2 kernels must agree
// with the library bit for bit on every length class (short, mid, long, stripe and block
// boundaries, odd tails) and alignment.
TEST(ChunkChecksumTest, EqualsTheLibraryXxh3) {
  std::vector<uint8_t> buf((1 << 20) + 64);
  compress::TestRng rng(5);
  for (auto& b : buf) b = static_cast<uint8_t>(rng.Next());
  std::vector<size_t> lengths;
  for (size_t len = 0; len <= 2100; ++len) lengths.push_back(len);
  for (size_t len : {4095, 4096, 4097, 65535, 65536, 65537, 1 << 20}) lengths.push_back(len);
  for (size_t len : lengths) {
    for (size_t offset : {0, 1, 7, 33}) {
      ASSERT_EQ(ChunkChecksum(buf.data() + offset, len), StableHash64(buf.data() + offset, len))
          << "len " << len << " offset " << offset << " avx2 " << ChunkChecksumUsesAvx2();
    }
  }
}

TEST(ChunkChecksumTest, DetectsASingleFlippedBit) {
  std::vector<uint8_t> buf(70000, 0x5A);
  const uint64_t before = ChunkChecksum(buf.data(), buf.size());
  buf[69999] ^= 1;
  EXPECT_NE(ChunkChecksum(buf.data(), buf.size()), before);
}

}  // namespace
}  // namespace mooncake::compress_internal
