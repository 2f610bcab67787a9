#include "mooncake/transport/internal/tcp_wire.h"

#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace mooncake::transport_internal {
namespace {

std::string Hex(const WireHeader& h) {
  std::string out;
  char buf[3];
  for (uint8_t b : h) {
    std::snprintf(buf, sizeof(buf), "%02x", b);
    out += buf;
  }
  return out;
}

// The test vectors of docs/tcp_wire_format.md.
TEST(TcpWireTest, MatchesTheDocumentedVectors) {
  EXPECT_EQ(Hex(EncodeHeader({FrameType::kRead, 0, 1, 7, 4096, 65536, 0})),
            "4d435431010300000100000000000000070000000000000000100000000000000000010000000000000000"
            "00a1c74e8d");
  EXPECT_EQ(Hex(EncodeHeader({FrameType::kOpenOk, 0, 1, 7, 1 << 20, 0, 0})),
            "4d435431010200000100000000000000070000000000000000001000000000000000000000000000000000"
            "00ee1fe82d");
  EXPECT_EQ(Hex(EncodeHeader({FrameType::kError, 11, 9, 0, 0, 5, 0})),
            "4d43543101070b000900000000000000000000000000000000000000000000000500000000000000000000"
            "006a335f62");
}

TEST(TcpWireTest, RoundTripsEveryType) {
  for (uint8_t t = 1; t <= 7; ++t) {
    FrameHeader h{static_cast<FrameType>(t), 0, 42, 3, 100, 10, 0};
    if (h.type == FrameType::kError) h.code = 5;
    if (h.type == FrameType::kOpen || h.type == FrameType::kWriteAck ||
        h.type == FrameType::kOpenOk) {
      h.length = 0;
    }
    const WireHeader raw = EncodeHeader(h);
    auto back = DecodeHeader(raw.data());
    ASSERT_TRUE(back.ok()) << int(t) << " " << back.status();
    EXPECT_EQ(*back, h);
  }
}

TEST(TcpWireTest, RejectsEveryKindOfDamage) {
  const WireHeader good = EncodeHeader({FrameType::kRead, 0, 1, 7, 0, 4096, 0});
  ASSERT_TRUE(DecodeHeader(good.data()).ok());
  for (size_t i = 0; i < kHeaderBytes; ++i) {  // any flipped bit is caught
    WireHeader bad = good;
    bad[i] ^= 0x01;
    EXPECT_EQ(DecodeHeader(bad.data()).status().code(), absl::StatusCode::kDataLoss) << i;
  }
  EXPECT_FALSE(DecodeHeader(EncodeHeader({FrameType::kRead, 0, 1, 7, 0, 0, 0}).data()).ok());
  EXPECT_FALSE(
      DecodeHeader(EncodeHeader({FrameType::kRead, 0, 1, 7, 0, kMaxSliceBytes + 1, 0}).data())
          .ok());
  EXPECT_FALSE(DecodeHeader(EncodeHeader({FrameType::kError, 0, 1, 0, 0, 0, 0}).data()).ok());
  EXPECT_FALSE(DecodeHeader(EncodeHeader({FrameType::kReadData, 3, 1, 0, 0, 8, 0}).data()).ok());
  EXPECT_FALSE(
      DecodeHeader(EncodeHeader({FrameType::kError, 3, 1, 0, 0, kMaxErrorBytes + 1, 0}).data())
          .ok());
  EXPECT_FALSE(DecodeHeader(EncodeHeader({FrameType::kOpenOk, 0, 1, 7, 0, 0, 0}).data()).ok());
}

}  // namespace
}  // namespace mooncake::transport_internal
