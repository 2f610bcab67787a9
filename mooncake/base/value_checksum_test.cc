#include "mooncake/base/value_checksum.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/hash.h"

namespace mooncake {
namespace {

std::vector<unsigned char> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

// The definition in value_checksum.h, written out with the library hash.
uint64_t Reference(const std::vector<unsigned char>& v) {
  std::vector<unsigned char> cat;
  const auto le64 = [&cat](uint64_t x) {
    for (int i = 0; i < 8; ++i) cat.push_back(static_cast<unsigned char>(x >> (8 * i)));
  };
  for (size_t from = 0; from < v.size(); from += 64 << 10) {
    const size_t n = std::min<size_t>(64 << 10, v.size() - from);
    le64(StableHash64(v.data() + from, n));
  }
  le64(v.size());
  return StableHash64(cat.data(), cat.size());
}

const size_t kSizes[] = {0,
                         1,
                         240,
                         241,
                         65535,
                         65536,
                         65537,
                         3 * 65536,
                         1 << 20,
                         (1 << 20) + 17,
                         (4 << 20) + 1,
                         (5 << 20) - 3};

TEST(ValueChecksumTest, MatchesTheDefinition) {
  for (size_t n : kSizes) {
    const auto v = RandomBytes(n, static_cast<uint32_t>(n));
    EXPECT_EQ(ValueChecksum(v.data(), n), Reference(v)) << n;
    EXPECT_EQ(DigestChunkCount(n), (n + 65535) / 65536) << n;
  }
}

TEST(ValueChecksumTest, GoldenValue) {
  // Pinned: the checksum is a stored format (docs/client.md, "Checksums").
  std::vector<unsigned char> v(200000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<unsigned char>(i * 131 + 7);
  EXPECT_EQ(ValueChecksum(v.data(), v.size()), Reference(v));
  EXPECT_EQ(ValueChecksum(v.data(), v.size()), 0xc033728a639daeabULL);
}

TEST(ValueChecksumTest, SizeAndEveryChunkCount) {
  const auto v = RandomBytes(3 * 65536, 1);
  // Same chunk digests, different length: different checksums.
  EXPECT_NE(ValueChecksum(v.data(), 65536), ValueChecksum(v.data(), 65535));
  auto w = v;
  w[2 * 65536 + 5] ^= 1;  // one bit in the last chunk
  EXPECT_NE(ValueChecksum(v.data(), v.size()), ValueChecksum(w.data(), w.size()));
  w = v;
  w[0] ^= 0x80;
  EXPECT_NE(ValueChecksum(v.data(), v.size()), ValueChecksum(w.data(), w.size()));
}

// Pieces cut on chunk boundaries, digested in any order (as transport slices
// land), leave the slots of exactly the pieces digested, each the chunk's
// StableHash64; the rest is computed by ValueChecksumWith.
TEST(ValueChecksumTest, ChunkAlignedPiecesInAnyOrderGiveTheSameChecksum) {
  std::mt19937 rng(7);
  for (size_t n : kSizes) {
    const auto v = RandomBytes(n, static_cast<uint32_t>(n) + 3);
    const uint64_t chunks = DigestChunkCount(n);
    std::vector<uint64_t> cuts = {0, chunks};  // in chunks
    for (int i = 0; i < 6 && chunks > 0; ++i) cuts.push_back(rng() % chunks);
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::vector<uint64_t> d(chunks, kNoDigest);
    std::vector<bool> digested(chunks, false);
    for (size_t i = cuts.size() - 1; i > 0; --i) {  // last piece first, every other piece
      if (i % 2 == 0) continue;
      const uint64_t from = cuts[i - 1] * kDigestChunkBytes;
      const uint64_t to = std::min<uint64_t>(n, cuts[i] * kDigestChunkBytes);
      DigestChunks(v.data() + from, to - from, d.data() + cuts[i - 1]);
      for (uint64_t k = cuts[i - 1]; k < cuts[i]; ++k) digested[k] = true;
    }
    for (uint64_t k = 0; k < chunks; ++k) {
      const uint64_t from = k * kDigestChunkBytes, to = std::min<uint64_t>(n, from + 65536);
      EXPECT_EQ(d[k], digested[k] ? StableHash64(v.data() + from, to - from) : kNoDigest)
          << n << " chunk " << k;
    }
    EXPECT_EQ(ValueChecksumWith(v.data(), n, d.data()), Reference(v)) << n;
  }
}

TEST(ValueChecksumTest, DigestChunksFillsEverySlot) {
  const auto v = RandomBytes((2 << 20) + 100, 9);
  std::vector<uint64_t> d(DigestChunkCount(v.size()), kNoDigest);
  DigestChunks(v.data(), v.size(), d.data());
  for (uint64_t x : d) EXPECT_NE(x, kNoDigest);
  EXPECT_EQ(CombineChunkDigests(d.data(), v.size()), ValueChecksum(v.data(), v.size()));
}

TEST(ValueChecksumTest, CopyAndDigest) {
  for (size_t n : kSizes) {
    const auto v = RandomBytes(n, static_cast<uint32_t>(n) + 5);
    std::vector<unsigned char> out(n);
    std::vector<uint64_t> d(DigestChunkCount(n), kNoDigest);
    CopyAndDigest(out.data(), v.data(), n, d.data());
    EXPECT_EQ(out, v);
    for (uint64_t x : d) EXPECT_NE(x, kNoDigest);
    EXPECT_EQ(CombineChunkDigests(d.data(), n), Reference(v)) << n;
  }
}

TEST(ValueChecksumTest, AWrongSlotChangesTheChecksum) {
  const auto v = RandomBytes(4 << 20, 11);
  std::vector<uint64_t> d(DigestChunkCount(v.size()), kNoDigest);
  DigestChunks(v.data(), v.size(), d.data());
  d[17] ^= 1;  // a transport that hashed other bytes than the caller holds
  EXPECT_NE(ValueChecksumWith(v.data(), v.size(), d.data()), Reference(v));
}

TEST(ValueChecksumTest, ChecksumMatchesEachFormat) {
  const auto v = RandomBytes(200'001, 21);
  const uint64_t whole = StableHash64(v.data(), v.size());
  const uint64_t chunked = Reference(v);
  EXPECT_TRUE(ChecksumMatches(kChecksumWholeXxh3, v.data(), v.size(), nullptr, whole));
  EXPECT_FALSE(ChecksumMatches(kChecksumWholeXxh3, v.data(), v.size(), nullptr, chunked));
  EXPECT_TRUE(ChecksumMatches(kChecksumChunked, v.data(), v.size(), nullptr, chunked));
  EXPECT_FALSE(ChecksumMatches(kChecksumChunked, v.data(), v.size(), nullptr, whole));
  EXPECT_FALSE(KnownChecksumFormat(2));
  EXPECT_FALSE(ChecksumMatches(2, v.data(), v.size(), nullptr, chunked));
  EXPECT_FALSE(ChecksumMatches(2, v.data(), v.size(), nullptr, whole));
}

}  // namespace
}  // namespace mooncake
