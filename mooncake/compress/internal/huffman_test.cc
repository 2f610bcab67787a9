#include "mooncake/compress/internal/huffman.h"

#include <cstdio>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/compress/internal/huffman_decoder.h"
#include "mooncake/compress/kv_data_testing.h"

namespace mooncake::compress_internal {
namespace {

std::vector<uint8_t> Decode(HuffmanDecoder& dec, const std::vector<uint8_t>& block, size_t n,
                            absl::Status* status, int streams = kHuffStreamsV2) {
  std::vector<uint8_t> out(n);
  size_t used = 0;
  *status = dec.Decode(block.data(), block.size(), block.size(), out.data(), n, &used, streams);
  if (status->ok() && used != block.size()) *status = absl::DataLossError("size");
  return out;
}

std::vector<uint8_t> Encode(HuffmanEncoder& enc, const std::vector<uint8_t>& data,
                            int streams = kHuffStreamsV2) {
  const size_t size = enc.Plan(data.data(), data.size(), streams);
  std::vector<uint8_t> block(size);
  if (size != 0) enc.Write(data.data(), block.data());
  return block;
}

TEST(HuffmanTest, RoundTripsSkewedAndUniformDataOfManySizes) {
  HuffmanEncoder enc;
  HuffmanDecoder dec;
  compress::TestRng rng(1);
  for (size_t n : {2, 3, 4, 5, 9, 11, 12, 13, 40, 41, 100, 1000, 4097, 65536, 65541}) {
    for (int skew = 0; skew < 8; ++skew) {
      const int streams = skew % 2 == 0 ? kHuffStreamsV2 : kHuffStreamsV1;
      std::vector<uint8_t> data(n);
      for (auto& b : data) {
        const uint64_t r = rng.Next();
        b = skew < 2 ? static_cast<uint8_t>(r) : static_cast<uint8_t>((r % 64) >> skew);
      }
      data[0] = 0, data[1] = 1;  // at least two symbols
      const std::vector<uint8_t> block = Encode(enc, data, streams);
      ASSERT_FALSE(block.empty());
      absl::Status s;
      EXPECT_EQ(Decode(dec, block, n, &s, streams), data)
          << "n " << n << " skew " << skew << " streams " << streams;
      ASSERT_TRUE(s.ok()) << s;
    }
  }
}

TEST(HuffmanTest, FibonacciFrequenciesAreLengthLimited) {
  uint64_t freq[256] = {};
  uint64_t a = 1, b = 1;
  for (int s = 0; s < 30; ++s) {
    freq[s] = a;
    const uint64_t c = a + b;
    a = b, b = c;
  }
  uint8_t len[256];
  BuildCodeLengths(freq, len);
  uint16_t code[256];
  EXPECT_TRUE(CanonicalCodes(len, code));
  for (int s = 0; s < 30; ++s) EXPECT_LE(len[s], kHuffMaxBits);
  EXPECT_EQ(len[29], 1);  // the dominant symbol keeps a 1-bit code
}

TEST(HuffmanTest, SingleSymbolIsNotCoded) {
  HuffmanEncoder enc;
  std::vector<uint8_t> data(100, 7);
  EXPECT_EQ(enc.Plan(data.data(), data.size()), 0u);
}

TEST(HuffmanTest, RejectsIncompleteCodesAndBadStreamSizes) {
  HuffmanEncoder enc;
  HuffmanDecoder dec;
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i % 5);
  const std::vector<uint8_t> block = Encode(enc, data);
  absl::Status s;
  std::vector<uint8_t> bad = block;
  bad[33] = static_cast<uint8_t>((bad[33] & 0xF0) | 0x0B);  // lengthen a code: incomplete
  Decode(dec, bad, data.size(), &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  bad = block;
  const size_t sizes_at = 33 + 3;  // 5 symbols -> 3 nibble bytes, then 8 stream sizes
  bad[sizes_at] += 1;              // stream 0 one byte longer: the others shift
  Decode(dec, bad, data.size(), &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  bad = block;
  bad.resize(bad.size() - 1);
  Decode(dec, bad, data.size(), &s);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
}

TEST(HuffmanTest, BlockFormatsAreNotInterchangeable) {
  HuffmanEncoder enc;
  HuffmanDecoder dec;
  std::vector<uint8_t> data(3000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>((i * i) % 7);
  absl::Status s;
  Decode(dec, Encode(enc, data, kHuffStreamsV2), data.size(), &s, kHuffStreamsV1);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  Decode(dec, Encode(enc, data, kHuffStreamsV1), data.size(), &s, kHuffStreamsV2);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
}

// Streams are written in place, back to back: a stream's last stores must not reach
// into the next stream (regression: the bulk loop's 8-byte stores near a stream's end).
TEST(HuffmanTest, ShortStreamsNextToLongOnesRoundTrip) {
  HuffmanEncoder enc;
  HuffmanDecoder dec;
  for (size_t n : {520, 600, 1024, 5000}) {
    std::vector<uint8_t> data(n);
    // First segments nearly all the 1-bit symbol, later ones the rare long codes.
    for (size_t i = 0; i < n; ++i) data[i] = i < n / 2 ? (i % 97 == 0 ? 1 : 0) : i % 40;
    absl::Status s;
    EXPECT_EQ(Decode(dec, Encode(enc, data), n, &s), data) << n;
    EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(HuffmanTest, TablesAreReusedOnlyForTheSameCode) {
  HuffmanEncoder enc;
  HuffmanDecoder dec;
  std::vector<uint8_t> a(5000), b(5000);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<uint8_t>(i % 3);
    b[i] = static_cast<uint8_t>((i * 7) % 11);
  }
  for (const auto* d : {&a, &b, &a, &a}) {
    absl::Status s;
    EXPECT_EQ(Decode(dec, Encode(enc, *d), d->size(), &s), *d);
    EXPECT_TRUE(s.ok());
  }
}

// Consecutive 64 KiB chunks of synthetic bf16 KV: the high-byte planes mostly keep the
// previous chunk's code (so the decoder skips its table build), every block stays within
// the slack of its own optimal code, and every block decodes exactly, whether or not the
// decoder saw the previous block.
TEST(HuffmanTest, ConsecutiveBlocksKeepTheirCodeWithinTheSlack) {
  const std::vector<std::byte> raw =
      compress::SyntheticKvBytes(4 << 20, compress::DType::kBFloat16);
  constexpr size_t kChunk = 64 << 10;
  HuffmanEncoder enc, fresh_enc;
  HuffmanDecoder dec;
  uint64_t kept_bits = 0, fresh_bits = 0;
  for (size_t off = 0; off + kChunk <= raw.size(); off += kChunk) {
    std::vector<uint8_t> high(kChunk / 2);
    for (size_t i = 0; i < high.size(); ++i) high[i] = static_cast<uint8_t>(raw[off + 2 * i + 1]);
    const std::vector<uint8_t> block = Encode(enc, high);
    HuffmanEncoder once;  // no previous block: the block's own optimal code
    const std::vector<uint8_t> optimal = Encode(once, high);
    kept_bits += block.size();
    fresh_bits += optimal.size();
    EXPECT_LE(block.size(), optimal.size() + optimal.size() * 4 / 1000 + 160);
    absl::Status st;
    EXPECT_EQ(Decode(dec, block, high.size(), &st), high);
    ASSERT_TRUE(st.ok()) << st;
    HuffmanDecoder cold;
    EXPECT_EQ(Decode(cold, block, high.size(), &st), high);
    ASSERT_TRUE(st.ok()) << st;
  }
  std::printf("kept %llu of %llu codes; %llu vs %llu bytes\n",
              static_cast<unsigned long long>(enc.kept_codes()),
              static_cast<unsigned long long>(enc.planned_codes()),
              static_cast<unsigned long long>(kept_bits),
              static_cast<unsigned long long>(fresh_bits));
  EXPECT_GE(enc.kept_codes() * 2, enc.planned_codes());
}

}  // namespace
}  // namespace mooncake::compress_internal
