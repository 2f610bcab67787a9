#include "mooncake/compress/when_to_compress.h"

#include "gtest/gtest.h"

namespace mooncake::compress {
namespace {

constexpr double kGB = 1e9;
const CodecProfile kCodec{
    .ratio = 1.4, .compress_bytes_per_s = 2 * kGB, .decompress_bytes_per_s = 4 * kGB};

TEST(WhenToCompressTest, CompressesOverASlowLink) {
  const TransferDecision d = DecideCompression(64 << 20, 1 * kGB, kCodec);
  EXPECT_TRUE(d.compress);
  EXPECT_NEAR(d.raw_seconds, (64 << 20) / kGB, 1e-9);
  EXPECT_LT(d.compressed_seconds, d.raw_seconds * 0.8);
}

TEST(WhenToCompressTest, SkipsWhenTheCodecIsSlowerThanTheLink) {
  // 4.2 GB/s loopback TCP: compression at 2 GB/s is the bottleneck.
  const TransferDecision d = DecideCompression(64 << 20, 4.2 * kGB, kCodec);
  EXPECT_FALSE(d.compress);
  EXPECT_GT(d.compressed_seconds, d.raw_seconds);
}

TEST(WhenToCompressTest, SkipsWhenTheRatioBuysNothing) {
  CodecProfile flat = kCodec;
  flat.ratio = 1.02;
  EXPECT_FALSE(DecideCompression(64 << 20, 0.5 * kGB, flat).compress);
  EXPECT_FALSE(DecideCompression(0, 0.5 * kGB, kCodec).compress);
}

TEST(WhenToCompressTest, SequentialPaysEveryStage) {
  const uint64_t n = 64 << 20;
  const TransferDecision seq = DecideCompression(n, 1 * kGB, kCodec, Overlap::kSequential);
  EXPECT_NEAR(seq.compressed_seconds, n / (2 * kGB) + n / (1.4 * kGB) + n / (4 * kGB), 1e-9);
  const TransferDecision pipe = DecideCompression(n, 1 * kGB, kCodec, Overlap::kPipelined);
  EXPECT_LT(pipe.compressed_seconds, seq.compressed_seconds);
  // Break-even at about 1.5 GB/s sequential vs 2 GB/s pipelined for this codec.
  EXPECT_FALSE(DecideCompression(n, 1.6 * kGB, kCodec, Overlap::kSequential).compress);
  EXPECT_TRUE(DecideCompression(n, 1.6 * kGB, kCodec, Overlap::kPipelined).compress);
}

TEST(WhenToCompressTest, SmallTransfersPayTheFullLatency) {
  const TransferDecision d = DecideCompression(4096, 1 * kGB, kCodec);
  EXPECT_NEAR(d.compressed_seconds, 4096 * (1 / (2 * kGB) + 1 / (1.4 * kGB) + 1 / (4 * kGB)),
              1e-12);
}

TEST(WhenToCompressDeathTest, RejectsNonPositiveBandwidth) {
  EXPECT_DEATH(DecideCompression(1, 0, kCodec), "bandwidth");
}

}  // namespace
}  // namespace mooncake::compress
