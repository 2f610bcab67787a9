#include "mooncake/compress/internal/merge_checksum.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake::compress_internal {
namespace {

// The fused merge + checksum must write exactly MergePlanes' bytes plus the tail and
// return ChunkChecksum of them, for every length class XXH3 distinguishes (short, mid,
// one block, block boundaries +-1, several blocks with a partial last one) and for
// destinations that are and are not 32-byte aligned (only aligned ones are streamed).
TEST(MergeChecksumTest, MatchesMergeThenChecksum) {
  std::mt19937_64 rng(7);
  for (const size_t n : {1,   2,    60,   119,  120,  121,  128,   480,   511,   512,
                         513, 1000, 1023, 1024, 1025, 4096, 32767, 32768, 32769, 100000}) {
    for (const size_t tail : {0, 1}) {
      for (const size_t misalign : {0, 1, 8, 16, 32}) {
        SCOPED_TRACE(testing::Message()
                     << "n " << n << " tail " << tail << " misalign " << misalign);
        std::vector<uint8_t> lo(n), hi(n);
        for (size_t i = 0; i < n; ++i)
          lo[i] = static_cast<uint8_t>(rng()), hi[i] = static_cast<uint8_t>(rng());
        const uint8_t tail_byte = 0xA5;
        const size_t len = 2 * n + tail;
        std::vector<uint8_t> want(len), space(len + 64, 0);
        const uint8_t* planes[2] = {lo.data(), hi.data()};
        MergePlanes(planes, n, 2, want.data());
        if (tail != 0) want[2 * n] = tail_byte;
        uint8_t* base = space.data();
        while ((reinterpret_cast<uintptr_t>(base) & 31) != 0) ++base;
        uint8_t* dst = base + misalign;
        ASSERT_LE(static_cast<size_t>(dst - space.data()) + len, space.size());
        const uint64_t h =
            MergeTwoPlanesWithChecksum(lo.data(), hi.data(), n, &tail_byte, tail, dst);
        EXPECT_EQ(h, ChunkChecksum(want.data(), len));
        EXPECT_EQ(std::vector<uint8_t>(dst, dst + len), want);
      }
    }
  }
}

}  // namespace
}  // namespace mooncake::compress_internal
