#include "mooncake/store/rpc/segment_directory_format.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace mooncake::rpc {
namespace {

std::string Hex(std::span<const uint8_t> bytes) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

TEST(SegmentDirectoryFormat, BytesFollowTheLayout) {
  Directory d;
  d.generation = 7;
  d.entries = {{1, 0x1234, 4096}};
  std::array<uint8_t, kDirectoryBytes> buf;
  EncodeDirectory(d, buf);
  const std::span<const uint8_t> b(buf);
  EXPECT_EQ(Hex(b.subspan(0, 8)), "4d43534547444952");  // "MCSEGDIR"
  EXPECT_EQ(Hex(b.subspan(8, 8)), "0700000000000000");
  EXPECT_EQ(Hex(b.subspan(16, 8)), "0100000000000000");  // count 1, reserved 0
  EXPECT_EQ(Hex(b.subspan(32, 24)),
            "0100000000000000"
            "3412000000000000"
            "0010000000000000");
  // The checksum covers [0, 56) with its own field zeroed.
  std::array<uint8_t, 56> zeroed;
  std::memcpy(zeroed.data(), buf.data(), zeroed.size());
  std::memset(zeroed.data() + 24, 0, 8);
  EXPECT_EQ(rpc_internal::LoadLe64(buf.data() + 24), StableHash64(zeroed.data(), zeroed.size()));
  for (size_t i = 56; i < kDirectoryBytes; ++i) ASSERT_EQ(buf[i], 0) << i;
}

TEST(SegmentDirectoryFormat, RoundTrips) {
  Directory d;
  d.generation = 7;
  d.entries = {{1, 0x1234, 4096}, {9, 77, 1 << 20}};
  std::array<uint8_t, kDirectoryBytes> buf;
  EncodeDirectory(d, buf);
  auto back = DecodeDirectory(buf);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->generation, 7u);
  EXPECT_EQ(back->entries, d.entries);
  EXPECT_EQ(back->Find(9)->router_segment_id, 77u);
  EXPECT_FALSE(back->Find(2).has_value());
}

TEST(SegmentDirectoryFormat, TornOrForeignCopiesAreDataLoss) {
  Directory d;
  d.entries = {{1, 2, 3}};
  std::array<uint8_t, kDirectoryBytes> buf;
  EncodeDirectory(d, buf);
  for (size_t byte : {0u, 8u, 16u, 20u, 24u, 32u, 40u, 55u}) {
    auto copy = buf;
    copy[byte] ^= 0x01;
    EXPECT_EQ(DecodeDirectory(copy).status().code(), absl::StatusCode::kDataLoss) << byte;
  }
  std::array<uint8_t, kDirectoryBytes> zero{};
  EXPECT_EQ(DecodeDirectory(zero).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeDirectory(std::span<const uint8_t>(buf.data(), 8)).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(SegmentDirectoryFormat, HoldsItsMaximum) {
  EXPECT_EQ(kDirectoryEntriesMax, 169u);
  Directory d;
  for (uint64_t i = 1; i <= kDirectoryEntriesMax; ++i) d.entries.push_back({i, i * 2, i * 3});
  std::array<uint8_t, kDirectoryBytes> buf;
  EncodeDirectory(d, buf);
  auto back = DecodeDirectory(buf);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->entries.size(), kDirectoryEntriesMax);
}

}  // namespace
}  // namespace mooncake::rpc
