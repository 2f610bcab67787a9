#include "mooncake/tier/internal/ssd_format.h"

#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake::tier_internal {
namespace {

std::string Hex(const std::vector<std::byte>& b, size_t n) {
  std::string out;
  char buf[4];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof(buf), "%02x", static_cast<unsigned>(b[i]));
    out += buf;
  }
  return out;
}

// The example of docs/ssd_format.md: key "k1", payload "hello", sequence 7, tag 42.
TEST(SsdFormatTest, RecordHeaderMatchesTheDocumentedExample) {
  std::vector<std::byte> block(kBlockBytes);
  RecordHeader h{7,         KeyHash("k1"),           5,  5,
                 kCodecRaw, compress::DType::kBytes, 42, StableHash64("hello", 5)};
  EncodeRecordHeader(h, "k1", block);
  EXPECT_EQ(Hex(block, 82),
            "4d435353445245430100500002000000"
            "0700000000000000c5362ab786bfaf81"
            "05000000000000000500000000000000"
            "ff000000000000002a00000000000000"
            "fddc625c55e855955a4afb2ede05fd87"
            "6b31");
  auto back = DecodeRecordHeader(block);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->header, h);
  EXPECT_EQ(back->key, "k1");
}

TEST(SsdFormatTest, FileHeaderMatchesTheDocumentedExample) {
  std::vector<std::byte> block(kBlockBytes);
  FileHeader f{1 << 20, 0x1122334455667788ull, 0, 1};
  EncodeFileHeader(f, block);
  EXPECT_EQ(Hex(block, 64),
            "4d4353534446494c0100000000100000"
            "00001000000000008877665544332211"
            "00000000010000000000000000000000"
            "0000000000000000b0b12ec2d72e8a97");
  auto back = DecodeFileHeader(block);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, f);
}

// The second file header example of docs/ssd_format.md: left open by a kNoSync tier.
TEST(SsdFormatTest, UnsyncedFileHeaderMatchesTheDocumentedExample) {
  std::vector<std::byte> block(kBlockBytes);
  FileHeader f{1 << 20, 0x1122334455667788ull, 0, 1, kFileFlagUnsynced};
  for (size_t i = 0; i < f.boot_id.size(); ++i) f.boot_id[i] = static_cast<uint8_t>(0xa0 + i);
  EncodeFileHeader(f, block);
  EXPECT_EQ(Hex(block, 64),
            "4d4353534446494c0200010000100000"
            "00001000000000008877665544332211"
            "0000000001000000a0a1a2a3a4a5a6a7"
            "a8a9aaabacadaeaf7d2d7400f95e45a7");
  auto back = DecodeFileHeader(block);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, f);
}

TEST(SsdFormatTest, AFileFlagThisBuildDoesNotKnowIsRefused) {
  std::vector<std::byte> block(kBlockBytes);
  FileHeader f{1 << 20, 7, 0, 1, static_cast<uint16_t>(kFileFlagUnsynced | 0x8000)};
  EncodeFileHeader(f, block);  // with a valid checksum
  auto back = DecodeFileHeader(block);
  EXPECT_EQ(back.status().code(), absl::StatusCode::kFailedPrecondition) << back.status();
}

// A flagged header says version 2 (older readers refuse it), an unflagged one 1.
TEST(SsdFormatTest, TheVersionSaysWhetherTheHeaderHasFlags) {
  std::vector<std::byte> block(kBlockBytes);
  FileHeader f{1 << 20, 7, 0, 1, kFileFlagUnsynced};
  EncodeFileHeader(f, block);
  EXPECT_EQ(static_cast<int>(block[8]), 2);
  f.flags = 0;
  EncodeFileHeader(f, block);
  EXPECT_EQ(static_cast<int>(block[8]), 1);
  // Version and flags that disagree (checksum recomputed): refused.
  for (const auto& [version, flags] :
       {std::pair<uint16_t, uint16_t>{1, kFileFlagUnsynced}, std::pair<uint16_t, uint16_t>{2, 0}}) {
    EncodeFileHeader(f, block);
    PutU16(block.data() + 8, version);
    PutU16(block.data() + 10, flags);
    PutU64(block.data() + 56, StableHash64(block.data(), 56));
    EXPECT_EQ(DecodeFileHeader(block).status().code(), absl::StatusCode::kDataLoss)
        << version << " " << flags;
  }
}

TEST(SsdFormatTest, EveryFlippedHeaderByteIsRejected) {
  std::vector<std::byte> block(kBlockBytes);
  RecordHeader h{9, KeyHash("key"), 100, 100, kCodecRaw, compress::DType::kBFloat16, 1, 5};
  EncodeRecordHeader(h, "key", block);
  for (size_t i = 0; i < kRecordHeaderBytes + 3; ++i) {
    std::vector<std::byte> bad = block;
    bad[i] ^= std::byte{0x10};
    EXPECT_FALSE(DecodeRecordHeader(bad).has_value()) << "byte " << i;
  }
  std::vector<std::byte> zeros(kBlockBytes);
  EXPECT_FALSE(DecodeRecordHeader(zeros).has_value());
  EXPECT_FALSE(DecodeRecordHeader(std::span<const std::byte>(block.data(), 100)).has_value());
}

TEST(SsdFormatTest, ASequencePastTheMaximumIsNotAHeader) {
  // Regression (libFuzzer, 2026-12-05): a resealed header numbered 2^64 - 1 made
  // recovery's next sequence wrap to 0 and SsdTier::Open abort.
  std::vector<std::byte> block(kBlockBytes);
  RecordHeader h{kMaxSequence, KeyHash("key"), 100, 100, kCodecRaw, compress::DType::kBytes, 1, 5};
  EncodeRecordHeader(h, "key", block);
  EXPECT_TRUE(DecodeRecordHeader(block).has_value());
  for (uint64_t sequence : {kMaxSequence + 1, ~uint64_t{0}}) {
    h.sequence = sequence;
    EncodeRecordHeader(h, "key", block);
    EXPECT_FALSE(DecodeRecordHeader(block).has_value()) << sequence;
  }
}

TEST(SsdFormatTest, RecordBytesRoundsThePayloadUpToBlocks) {
  EXPECT_EQ(RecordBytes(1), 2 * kBlockBytes);
  EXPECT_EQ(RecordBytes(4096), 2 * kBlockBytes);
  EXPECT_EQ(RecordBytes(4097), 3 * kBlockBytes);
}

}  // namespace
}  // namespace mooncake::tier_internal
