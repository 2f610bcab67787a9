#include "mooncake/compress/internal/byte_planes.h"

#include <vector>

#include "gtest/gtest.h"
#include "mooncake/compress/kv_data_testing.h"

namespace mooncake::compress_internal {
namespace {

TEST(BytePlanesTest, SplitMatchesTheDefinitionAndMergeInvertsIt) {
  compress::TestRng rng(3);
  for (size_t elem : {1, 2, 4}) {
    for (size_t n : {0, 1, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 100, 1000}) {
      std::vector<uint8_t> src(n * elem);
      for (auto& b : src) b = static_cast<uint8_t>(rng.Next());
      std::vector<uint8_t> planes(n * elem + 1);
      uint8_t* p[4];
      for (size_t j = 0; j < elem; ++j) p[j] = planes.data() + j * n;
      SplitPlanes(src.data(), n, elem, p);
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = 0; j < elem; ++j) ASSERT_EQ(p[j][i], src[i * elem + j]);
      }
      std::vector<uint8_t> back(n * elem + 1, 0xAA);
      MergePlanes(p, n, elem, back.data());
      EXPECT_TRUE(std::equal(src.begin(), src.end(), back.begin()));
      EXPECT_EQ(back[n * elem], 0xAA) << "wrote past the end";
    }
  }
}

}  // namespace
}  // namespace mooncake::compress_internal
