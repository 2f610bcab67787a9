#include "mooncake/base/hash.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/fast_hash.h"

namespace mooncake {
namespace {

// xxHash's own sanity buffer (cli/xsum_sanity_check.c): byte i is the top byte
// of PRIME32 * PRIME64^i. The vectors below are upstream's published
// XSUM_XXH3_testdata / XSUM_XXH128_testdata rows.
constexpr uint64_t kPrime32 = 2654435761U;
constexpr uint64_t kPrime64 = 11400714785074694797ULL;

std::vector<unsigned char> SanityBuffer(size_t len) {
  std::vector<unsigned char> buf(len);
  uint64_t gen = kPrime32;
  for (auto& b : buf) {
    b = static_cast<unsigned char>(gen >> 56);
    gen *= kPrime64;
  }
  return buf;
}

struct Vector64 {
  size_t len;
  uint64_t seed;
  uint64_t expected;
};

struct Vector128 {
  size_t len;
  uint64_t seed;
  uint64_t low;
  uint64_t high;
};

constexpr Vector64 kXxh3Vectors[] = {
    {0, 0, 0x2D06800538D394C2ULL},    {0, kPrime64, 0xA8A6B918B2F0364AULL},
    {1, 0, 0xC44BDFF4074EECDBULL},    {1, kPrime64, 0x032BE332DD766EF8ULL},
    {6, 0, 0x27B56A84CD2D7325ULL},    {6, kPrime64, 0x84589C116AB59AB9ULL},
    {12, 0, 0xA713DAF0DFBB77E7ULL},   {12, kPrime64, 0xE7303E1B2336DE0EULL},
    {24, 0, 0xA3FE70BF9D3510EBULL},   {24, kPrime64, 0x850E80FC35BDD690ULL},
    {48, 0, 0x397DA259ECBA1F11ULL},   {48, kPrime64, 0xADC2CBAA44ACC616ULL},
    {80, 0, 0xBCDEFBBB2C47C90AULL},   {80, kPrime64, 0xC6DD0CB699532E73ULL},
    {195, 0, 0xCD94217EE362EC3AULL},  {195, kPrime64, 0xBA68003D370CB3D9ULL},
    {403, 0, 0xCDEB804D65C6DEA4ULL},  {403, kPrime64, 0x6259F6ECFD6443FDULL},
    {512, 0, 0x617E49599013CB6BULL},  {512, kPrime64, 0x3CE457DE14C27708ULL},
    {2048, 0, 0xDD59E2C3A5F038E0ULL}, {2048, kPrime64, 0x66F81670669ABABCULL},
    {2099, 0, 0xC6B9D9B3FC9AC765ULL}, {2099, kPrime64, 0x184F316843663974ULL},
    {2240, 0, 0x6E73A90539CF2948ULL}, {2240, kPrime64, 0x757BA8487D1B5247ULL},
    {2367, 0, 0xCB37AEB9E5D361EDULL}, {2367, kPrime64, 0xD2DB3415B942B42AULL},
};

constexpr Vector128 kXxh128Vectors[] = {
    {0, 0, 0x6001C324468D497FULL, 0x99AA06D3014798D8ULL},
    {0, kPrime32, 0x5444F7869C671AB0ULL, 0x92220AE55E14AB50ULL},
    {1, 0, 0xC44BDFF4074EECDBULL, 0xA6CD5E9392000F6AULL},
    {1, kPrime32, 0xB53D5557E7F76F8DULL, 0x89B99554BA22467CULL},
    {6, 0, 0x3E7039BDDA43CFC6ULL, 0x082AFE0B8162D12AULL},
    {12, 0, 0x061A192713F69AD9ULL, 0x6E3EFD8FC7802B18ULL},
    {24, 0, 0x1E7044D28B1B901DULL, 0x0CE966E4678D3761ULL},
    {48, 0, 0xF942219AED80F67BULL, 0xA002AC4E5478227EULL},
    {81, 0, 0x5E8BAFB9F95FB803ULL, 0x4952F58181AB0042ULL},
    {222, 0, 0xF1AEBD597CEC6B3AULL, 0x337E09641B948717ULL},
    {403, 0, 0xCDEB804D65C6DEA4ULL, 0x1B6DE21E332DD73DULL},
    {403, kPrime64, 0x6259F6ECFD6443FDULL, 0xBED311971E0BE8F2ULL},
    {512, 0, 0x617E49599013CB6BULL, 0x18D2D110DCC9BCA1ULL},
    {2048, 0, 0xDD59E2C3A5F038E0ULL, 0xF736557FD47073A5ULL},
    {2048, kPrime32, 0x230D43F30206260BULL, 0x7FB03F7E7186C3EAULL},
    {2240, 0, 0x6E73A90539CF2948ULL, 0xCCB134FBFA7CE49DULL},
    {2367, 0, 0xCB37AEB9E5D361EDULL, 0xE89C0F6FF369B427ULL},
    {2367, kPrime32, 0x6F5360AE69C2F406ULL, 0xD23AAE4B76C31ECBULL},
};

TEST(StableHashTest, Xxh3MatchesPublishedVectors) {
  const auto buf = SanityBuffer(2367);
  for (const auto& v : kXxh3Vectors) {
    EXPECT_EQ(StableHash64(buf.data(), v.len, v.seed), v.expected)
        << "len=" << v.len << " seed=" << v.seed;
  }
}

TEST(StableHashTest, Xxh128MatchesPublishedVectors) {
  const auto buf = SanityBuffer(2367);
  for (const auto& v : kXxh128Vectors) {
    const Hash128 h = StableHash128(buf.data(), v.len, v.seed);
    EXPECT_EQ(h.low, v.low) << "len=" << v.len << " seed=" << v.seed;
    EXPECT_EQ(h.high, v.high) << "len=" << v.len << " seed=" << v.seed;
  }
}

TEST(StableHashTest, EmptyInputAcceptsNull) {
  EXPECT_EQ(StableHash64(nullptr, 0), 0x2D06800538D394C2ULL);
  EXPECT_EQ(StableHash64(""), 0x2D06800538D394C2ULL);
}

TEST(StableHashTest, StreamingEqualsOneShotForEverySplit) {
  const auto buf = SanityBuffer(2367);
  for (const auto& v : kXxh128Vectors) {
    for (size_t split : {size_t{0}, v.len / 3, v.len / 2, v.len}) {
      StableHasher128 hasher(v.seed);
      hasher.Update(buf.data(), split);
      hasher.Update(buf.data() + split, v.len - split);
      EXPECT_EQ(hasher.Digest(), (Hash128{v.low, v.high})) << "len=" << v.len << " split=" << split;
    }
  }
}

TEST(StableHashTest, UpdateU64IsLittleEndian) {
  StableHasher128 a;
  a.UpdateU64(0x0807060504030201ULL);
  const unsigned char le[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(a.Digest(), StableHash128(le, 8));
}

TEST(StableHashTest, ResetStartsOver) {
  StableHasher128 h;
  h.Update("garbage");
  h.Reset(0);
  EXPECT_EQ(h.Digest(), (Hash128{0x6001C324468D497FULL, 0x99AA06D3014798D8ULL}));
}

TEST(StableHashTest, HexIsHighHalfFirst) {
  EXPECT_EQ((Hash128{0x6001C324468D497FULL, 0x99AA06D3014798D8ULL}).ToHex(),
            "99aa06d3014798d86001c324468d497f");
  EXPECT_EQ((Hash128{1, 0}).ToHex(), "00000000000000000000000000000001");
}

// FastStableHash64 is StableHash64 (seed 0) bit for bit: every length class (short,
// mid, long, stripe and block boundaries, odd tails) at several alignments.
// `n` pseudo-random bytes (xorshift64 from `seed`).
std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> buf(n);
  uint64_t x = seed;
  for (auto& b : buf) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<uint8_t>(x);
  }
  return buf;
}

TEST(FastStableHash64Test, EqualsStableHash64) {
  const std::vector<uint8_t> buf = RandomBytes((1 << 20) + 64, 88172645463325252ull);
  std::vector<size_t> lengths;
  for (size_t len = 0; len <= 1100; ++len) lengths.push_back(len);
  for (size_t len : {4095, 4096, 4097, 65535, 65536, 65537, 1 << 20}) lengths.push_back(len);
  for (size_t len : lengths) {
    for (size_t offset : {0, 1, 33}) {
      ASSERT_EQ(FastStableHash64(buf.data() + offset, len), StableHash64(buf.data() + offset, len))
          << "len " << len << " offset " << offset << " kernel " << FastStableHash64Kernel();
    }
  }
}

// Each vector kernel the machine has, called directly (FastStableHash64 uses
// only the widest), on the long path's lengths and alignments; the same for
// the streaming update with uneven pieces.
TEST(FastStableHash64Test, EveryKernelTheCpuHasEqualsStableHash64) {
#if defined(MOONCAKE_BASE_XXH3_AVX2)
  const std::vector<uint8_t> buf = RandomBytes((1 << 20) + 64, 0x243F6A8885A308D3ull);
  struct Kernel {
    const char* name;
    bool present;
    uint64_t (*one_shot)(const void*, size_t);
    void (*update)(XXH3_state_t*, const void*, size_t);
  };
  const Kernel kernels[] = {
      {"avx2", hash_internal::HasAvx2(), hash_internal::Xxh3LongAvx2,
       hash_internal::Xxh3UpdateAvx2},
      {"avx512", hash_internal::HasAvx512(), hash_internal::Xxh3LongAvx512,
       hash_internal::Xxh3UpdateAvx512},
  };
  int ran = 0;
  for (const Kernel& k : kernels) {
    if (!k.present) continue;
    ++ran;
    for (size_t len : {241, 1023, 1024, 1025, 4096, 65537, 1 << 20}) {
      for (size_t offset : {0, 1, 33}) {
        ASSERT_EQ(k.one_shot(buf.data() + offset, len), StableHash64(buf.data() + offset, len))
            << k.name << " len " << len << " offset " << offset;
      }
      XXH3_state_t state;
      (void)XXH3_64bits_reset(&state);
      for (size_t at = 0, piece = 1; at < len; at += piece, piece = piece * 3 + 7) {
        k.update(&state, buf.data() + at, std::min(piece, len - at));
      }
      ASSERT_EQ(XXH3_64bits_digest(&state), StableHash64(buf.data(), len)) << k.name << " " << len;
    }
  }
  if (ran == 0) GTEST_SKIP() << "no AVX2 or AVX-512 on this CPU";
#else
  GTEST_SKIP() << "xxHash internals not compiled in";
#endif
}

// CopyAndStableHash64 copies exactly [src, src + len) to dst, leaves the bytes
// around it alone, and returns StableHash64 of the copy: on every length class
// of XXH3's long path (a stripe, a block, a block plus one stripe, the last
// stripe at every phase) and unaligned on both sides.
TEST(CopyAndStableHash64Test, CopiesAndEqualsStableHash64) {
  const std::vector<uint8_t> src = RandomBytes((1 << 20) + 256, 0x13198A2E03707344ull);
  std::vector<size_t> lengths;
  for (size_t len = 0; len <= 1300; ++len) lengths.push_back(len);
  for (size_t len : {2047, 2048, 2049, 4095, 4096, 4097, 65535, 65536, 65537, 1 << 20}) {
    lengths.push_back(len);
  }
  constexpr size_t kGuard = 128;
  std::vector<uint8_t> dst((1 << 20) + 512);
  const auto guard_intact = [](const uint8_t* p) {
    return std::all_of(p, p + kGuard, [](uint8_t b) { return b == 0xA5; });
  };
  for (size_t len : lengths) {
    for (size_t src_off : {0, 1, 63}) {
      for (size_t dst_off : {kGuard, kGuard + 1, kGuard + 36}) {
        uint8_t* out = dst.data() + dst_off;
        std::fill(out - kGuard, out + len + kGuard, 0xA5);
        const uint64_t h = CopyAndStableHash64(out, src.data() + src_off, len);
        ASSERT_EQ(h, StableHash64(out, len)) << "len " << len << " src+" << src_off << " dst+"
                                             << dst_off << " kernel " << FastStableHash64Kernel();
        ASSERT_EQ(std::memcmp(out, src.data() + src_off, len), 0) << len;
        ASSERT_TRUE(guard_intact(out - kGuard)) << "wrote before dst, len " << len;
        ASSERT_TRUE(guard_intact(out + len)) << "wrote past dst + len, len " << len;
      }
    }
  }
}

// Exact-size heap buffers on both sides, so a sanitizer build sees any read
// past src + len or write past dst + len (apart from the prefetch, which is
// not an access).
TEST(CopyAndStableHash64Test, StaysInsideExactSizeBuffers) {
  const std::vector<uint8_t> bytes = RandomBytes(70000, 0x082EFA98EC4E6C89ull);
  for (size_t len : {241, 300, 1024, 1025, 4096, 65536, 70000}) {
    auto src = std::make_unique<uint8_t[]>(len);
    auto dst = std::make_unique<uint8_t[]>(len);
    std::memcpy(src.get(), bytes.data(), len);
    ASSERT_EQ(CopyAndStableHash64(dst.get(), src.get(), len), StableHash64(bytes.data(), len));
    ASSERT_EQ(std::memcmp(dst.get(), bytes.data(), len), 0) << len;
  }
}

// Each fused kernel the machine has, called directly (CopyAndStableHash64 uses
// only the widest).
TEST(CopyAndStableHash64Test, EveryKernelTheCpuHasCopiesAndEqualsStableHash64) {
#if defined(MOONCAKE_BASE_XXH3_AVX2)
  const std::vector<uint8_t> src = RandomBytes((1 << 20) + 64, 0xA4093822299F31D0ull);
  std::vector<uint8_t> dst((1 << 20) + 128);
  struct Kernel {
    const char* name;
    bool present;
    uint64_t (*copy_hash)(void*, const void*, size_t);
  };
  const Kernel kernels[] = {
      {"avx2", hash_internal::HasAvx2(), hash_internal::CopyXxh3LongAvx2},
      {"avx512", hash_internal::HasAvx512(), hash_internal::CopyXxh3LongAvx512},
  };
  int ran = 0;
  for (const Kernel& k : kernels) {
    if (!k.present) continue;
    ++ran;
    for (size_t len : {241, 255, 256, 1023, 1024, 1025, 1088, 1089, 4096, 65537, 1 << 20}) {
      for (size_t src_off : {0, 1, 33}) {
        for (size_t dst_off : {1, 2, 61}) {
          uint8_t* out = dst.data() + dst_off;
          std::fill(out - 1, out + len + 1, 0);
          ASSERT_EQ(k.copy_hash(out, src.data() + src_off, len),
                    StableHash64(src.data() + src_off, len))
              << k.name << " len " << len << " src+" << src_off << " dst+" << dst_off;
          ASSERT_EQ(std::memcmp(out, src.data() + src_off, len), 0) << k.name;
          ASSERT_EQ(out[-1], 0) << k.name << " wrote before dst, len " << len;
          ASSERT_EQ(out[len], 0) << k.name << " wrote past the end, len " << len;
        }
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "no AVX2 or AVX-512 on this CPU";
#else
  GTEST_SKIP() << "xxHash internals not compiled in";
#endif
}

// FastStableHasher64 gives StableHash64 of the whole however it is fed: one
// piece, byte by byte, stripe- and block-sized pieces, and random splits.
TEST(FastStableHasher64Test, EqualsStableHash64OfTheConcatenation) {
  const std::vector<uint8_t> buf = RandomBytes((3 << 20) + 17, 0x9E3779B97F4A7C15ull);
  auto feed = [&](size_t len, auto next_piece) {
    FastStableHasher64 h;
    for (size_t at = 0; at < len;) {
      const size_t n = std::min(next_piece(), len - at);
      h.Update(buf.data() + at, n);
      at += n;
    }
    return h.Digest();
  };
  for (size_t len : {size_t{0}, size_t{1}, size_t{240}, size_t{241}, size_t{1024}, size_t{1025},
                     size_t{65536}, size_t{(1 << 20) + 3}, buf.size()}) {
    const uint64_t want = StableHash64(buf.data(), len);
    EXPECT_EQ(feed(len, [&] { return len + 1; }), want) << "one piece, len " << len;
    for (size_t piece : {1, 63, 64, 1024, 4096, 256 << 10}) {
      if (piece == 1 && len > 70000) continue;  // byte by byte only for the small ones
      EXPECT_EQ(feed(len, [&] { return piece; }), want) << "pieces of " << piece << ", len " << len;
    }
    uint64_t r = len * 2654435761u + 1;
    EXPECT_EQ(feed(len,
                   [&] {
                     r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                     return static_cast<size_t>(r % 300000) + 1;
                   }),
              want)
        << "random pieces, len " << len;
  }
  FastStableHasher64 reused;
  reused.Update(buf.data(), 5000);
  reused.Reset();
  reused.Update(buf.data(), 100000);
  EXPECT_EQ(reused.Digest(), StableHash64(buf.data(), 100000));
}

}  // namespace
}  // namespace mooncake
