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
  // The authentication frames: a HELLO for "cluster" (2 + 7 + 32 bytes),
  // then 32-byte nonce and proofs.
  EXPECT_EQ(Hex(EncodeHeader({FrameType::kAuthHello, 0, 1, 0, 0, 41, 0})),
            "4d435431010800000100000000000000000000000000000000000000000000002900000000000000000000"
            "00559a538d");
  EXPECT_EQ(Hex(EncodeHeader({FrameType::kAuthChallenge, 0, 1, 0, 0, 32, 0})),
            "4d435431010900000100000000000000000000000000000000000000000000002000000000000000000000"
            "002832346b");
  EXPECT_EQ(Hex(EncodeHeader({FrameType::kAuthProof, 0, 2, 0, 0, 32, 0})),
            "4d435431010a00000200000000000000000000000000000000000000000000002000000000000000000000"
            "005c60f79e");
  EXPECT_EQ(Hex(EncodeHeader({FrameType::kAuthOk, 0, 2, 0, 0, 32, 0})),
            "4d435431010b00000200000000000000000000000000000000000000000000002000000000000000000000"
            "0065de3a5e");
  EXPECT_EQ(Hex(EncodeHeader({FrameType::kError, 16, 0, 0, 0, 5, 0})),
            "4d435431010710000000000000000000000000000000000000000000000000000500000000000000000000"
            "002673b936");
}

TEST(TcpWireTest, RoundTripsEveryType) {
  for (uint8_t t = 1; t <= kMaxFrameType; ++t) {
    FrameHeader h{static_cast<FrameType>(t), 0, 42, 3, 100, 10, 0};
    if (h.type == FrameType::kError) h.code = 5;
    if (h.type == FrameType::kOpen || h.type == FrameType::kWriteAck ||
        h.type == FrameType::kOpenOk) {
      h.length = 0;
    }
    if (IsAuthFrame(h.type)) {
      h = {h.type, 0, 42, 0, 0, h.type == FrameType::kAuthHello ? 100u : kAuthTokenBytes, 0};
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

TEST(TcpWireTest, RejectsMalformedAuthenticationFrames) {
  const auto decodes = [](const FrameHeader& h) {
    return DecodeHeader(EncodeHeader(h).data()).ok();
  };
  EXPECT_TRUE(decodes({FrameType::kAuthHello, 0, 1, 0, 0, kMinAuthHelloBytes, 0}));
  EXPECT_TRUE(decodes({FrameType::kAuthHello, 0, 1, 0, 0, kMaxAuthHelloBytes, 0}));
  EXPECT_FALSE(decodes({FrameType::kAuthHello, 0, 1, 0, 0, kMinAuthHelloBytes - 1, 0}));
  EXPECT_FALSE(decodes({FrameType::kAuthHello, 0, 1, 0, 0, kMaxAuthHelloBytes + 1, 0}));
  for (FrameType t : {FrameType::kAuthChallenge, FrameType::kAuthProof, FrameType::kAuthOk}) {
    EXPECT_TRUE(decodes({t, 0, 1, 0, 0, kAuthTokenBytes, 0}));
    EXPECT_FALSE(decodes({t, 0, 1, 0, 0, kAuthTokenBytes - 1, 0})) << int(t);
    EXPECT_FALSE(decodes({t, 0, 1, 0, 0, kAuthTokenBytes + 1, 0})) << int(t);
    EXPECT_FALSE(decodes({t, 0, 1, 0, 0, 0, 0})) << int(t);
  }
  for (FrameType t : {FrameType::kAuthHello, FrameType::kAuthChallenge, FrameType::kAuthProof,
                      FrameType::kAuthOk}) {
    const uint32_t n = t == FrameType::kAuthHello ? 41 : kAuthTokenBytes;
    EXPECT_FALSE(decodes({t, 0, 1, 7, 0, n, 0})) << "segment " << int(t);
    EXPECT_FALSE(decodes({t, 0, 1, 0, 8, n, 0})) << "offset " << int(t);
    EXPECT_FALSE(decodes({t, 0, 1, 0, 0, n, 1})) << "aux " << int(t);
    EXPECT_FALSE(decodes({t, 16, 1, 0, 0, n, 0})) << "code " << int(t);
    EXPECT_FALSE(IsRequest(t));
  }
  WireHeader unknown = EncodeHeader({FrameType::kAuthOk, 0, 1, 0, 0, kAuthTokenBytes, 0});
  unknown[5] = kMaxFrameType + 1;  // re-checksummed below: only the type is wrong
  const uint32_t check = static_cast<uint32_t>(StableHash64(unknown.data(), 44));
  for (int i = 0; i < 4; ++i) unknown[44 + i] = static_cast<uint8_t>(check >> (8 * i));
  EXPECT_EQ(DecodeHeader(unknown.data()).status().message(), "bad frame type 12");
}

}  // namespace
}  // namespace mooncake::transport_internal
