#include "mooncake/tier/internal/record_codec.h"

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/compress/synthetic_kv.h"

namespace mooncake::tier_internal {
namespace {

using compress::DType;

RecordCodecOptions Options(tier::Compression c, uint32_t threads = 2) {
  return RecordCodecOptions{.compression = c,
                            .codec_chunk_bytes = 64 << 10,
                            .codec_threads = threads,
                            .usable_cpus = 2,
                            .lanes = 1};
}

TEST(RecordCodecTest, ShouldCompressFollowsTheSettingDtypeAndSize) {
  RecordCodec never(Options(tier::Compression::kNever));
  EXPECT_FALSE(never.ShouldCompress(DType::kBFloat16, 1 << 20));
  RecordCodec always(Options(tier::Compression::kAlways));
  EXPECT_TRUE(always.ShouldCompress(DType::kBFloat16, 1 << 20));
  EXPECT_FALSE(always.ShouldCompress(DType::kBytes, 1 << 20));                 // opaque bytes
  EXPECT_FALSE(always.ShouldCompress(DType::kBFloat16, 4 * kBlockBytes - 1));  // too small
  RecordCodec automatic(Options(tier::Compression::kAuto));
  EXPECT_TRUE(automatic.ShouldCompress(DType::kBFloat16, 1 << 20));  // not measured yet
}

// Compresses bf16 KV, then decodes it as a reader would: the stored bytes arrive in
// pieces, and each call decodes the chunks whose bytes are all in.
TEST(RecordCodecTest, CompressedRecordDecodesAsItsPiecesArrive) {
  RecordCodec codec(Options(tier::Compression::kAlways));
  const std::vector<std::byte> raw = compress::SyntheticKvBytes(1 << 20, DType::kBFloat16);
  std::vector<std::byte> stored;
  const std::optional<uint64_t> n = codec.Compress(raw, DType::kBFloat16, [&](uint64_t max) {
    stored.resize(max);
    return std::span<std::byte>(stored);
  });
  ASSERT_TRUE(n.has_value());
  EXPECT_LT(*n, raw.size());
  ASSERT_TRUE(codec.profile(DType::kBFloat16).has_value());
  EXPECT_GT(codec.profile(DType::kBFloat16)->ratio, 1.0);
  EXPECT_GT(codec.profile(DType::kBFloat16)->decompress_bytes_per_s, 0.0);

  RecordHeader h;
  h.raw_bytes = raw.size();
  h.stored_bytes = *n;
  h.codec = static_cast<uint8_t>(compress::CodecId::kBytePlane);
  h.dtype = DType::kBFloat16;
  compress::BytePlaneCodec decoder(codec.codec_options());
  std::vector<std::byte> out(raw.size());
  DecodeProgress p;
  uint32_t calls_that_decoded = 0;
  for (uint64_t arrived = 0; arrived < *n;) {
    arrived = std::min<uint64_t>(*n, arrived + 32 * 1024);
    const uint32_t before = p.decoded_chunks;
    codec.DecodeArrived(decoder, h, stored.data(), arrived, out, p);
    ASSERT_TRUE(p.status.ok()) << p.status;
    calls_that_decoded += p.decoded_chunks != before;
  }
  EXPECT_TRUE(p.done());
  EXPECT_GT(calls_that_decoded, 1u);  // decoding overlapped the arrival
  EXPECT_EQ(std::memcmp(out.data(), raw.data(), raw.size()), 0);
  codec.NoteDecode(DType::kBFloat16, raw.size(), p.decode_s);
  EXPECT_GT(codec.profile(DType::kBFloat16)->decompress_bytes_per_s, 0.0);
}

TEST(RecordCodecTest, IncompressiblePayloadIsLeftRaw) {
  RecordCodec codec(Options(tier::Compression::kAlways));
  std::vector<std::byte> raw(256 << 10);
  std::mt19937_64 rng(7);
  for (auto& b : raw) b = static_cast<std::byte>(rng());
  std::vector<std::byte> stored;
  EXPECT_FALSE(codec
                   .Compress(raw, DType::kBFloat16,
                             [&](uint64_t max) {
                               stored.resize(max);
                               return std::span<std::byte>(stored);
                             })
                   .has_value());
}

TEST(RecordCodecTest, DamagedFrameFailsAndStopsDecoding) {
  RecordCodec codec(Options(tier::Compression::kAlways, 1));
  const std::vector<std::byte> raw = compress::SyntheticKvBytes(256 << 10, DType::kBFloat16);
  std::vector<std::byte> stored;
  const std::optional<uint64_t> n = codec.Compress(raw, DType::kBFloat16, [&](uint64_t max) {
    stored.resize(max);
    return std::span<std::byte>(stored);
  });
  ASSERT_TRUE(n.has_value());
  RecordHeader h;
  h.raw_bytes = raw.size() + 1;  // the record disagrees with the frame
  h.stored_bytes = *n;
  h.codec = static_cast<uint8_t>(compress::CodecId::kBytePlane);
  compress::BytePlaneCodec decoder(codec.codec_options());
  std::vector<std::byte> out(raw.size() + 1);
  DecodeProgress p;
  codec.DecodeArrived(decoder, h, stored.data(), *n, out, p);
  EXPECT_EQ(p.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(p.done());
  h.codec = 7;  // a codec this build does not know
  DecodeProgress q;
  codec.DecodeArrived(decoder, h, stored.data(), *n, out, q);
  EXPECT_EQ(q.status.code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace mooncake::tier_internal
