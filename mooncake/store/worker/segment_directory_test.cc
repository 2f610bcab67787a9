#include "mooncake/store/worker/segment_directory.h"

#include <array>
#include <cstdint>

#include "gtest/gtest.h"

namespace mooncake::worker {
namespace {

TEST(SegmentDirectory, RoundTrips) {
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

TEST(SegmentDirectory, TornOrForeignCopiesAreDataLoss) {
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

TEST(SegmentDirectory, HoldsItsMaximum) {
  Directory d;
  for (uint64_t i = 1; i <= kDirectoryEntriesMax; ++i) d.entries.push_back({i, i * 2, i * 3});
  std::array<uint8_t, kDirectoryBytes> buf;
  EncodeDirectory(d, buf);
  auto back = DecodeDirectory(buf);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->entries.size(), kDirectoryEntriesMax);
}

TEST(WorkerId, FormatsAndParses) {
  const std::string id = FormatWorkerId("router://hostA/42|shm://@x|tcp://127.0.0.1:5", 991);
  auto a = ParseWorkerId(id);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->router_endpoint, "router://hostA/42|shm://@x|tcp://127.0.0.1:5");
  EXPECT_EQ(a->directory_segment_id, 991u);
  EXPECT_EQ(a->host, "hostA");
}

TEST(WorkerId, RejectsForeignIds) {
  for (const char* bad : {"", "worker-1", "router://h/1|tcp://x", "router://h/1#", "router://h/1#0",
                          "router://h/1#x9", "router:///1#5", "tcp://h/1#5"}) {
    EXPECT_EQ(ParseWorkerId(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace mooncake::worker
