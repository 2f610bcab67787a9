#include "mooncake/store/rpc/frame.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/hash.h"

namespace mooncake::rpc {
namespace {

FrameHeader Request(uint16_t method, uint64_t id, uint32_t timeout_us = 0) {
  FrameHeader h;
  h.kind = FrameKind::kRequest;
  h.method_id = method;
  h.request_id = id;
  h.timeout_us = timeout_us;
  return h;
}

std::string Hex(std::string_view s) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

// Re-seals a header after a test edits bytes 0..27, so the edit reaches the
// check under test instead of failing the header checksum.
void Reseal(std::string* frame) {
  const uint32_t sum = FrameChecksum(frame->data(), 28);
  for (int i = 0; i < 4; ++i) (*frame)[28 + i] = static_cast<char>(sum >> (8 * i));
}

TEST(FrameTest, RequestRoundTrip) {
  const std::string bytes = EncodeFrame(Request(7, 42, 1500), "hello");
  ASSERT_EQ(bytes.size(), kFrameHeaderBytes + 5);
  auto frame = DecodeFrame(bytes);
  ASSERT_TRUE(frame.ok()) << frame.status();
  EXPECT_EQ(frame->header.kind, FrameKind::kRequest);
  EXPECT_EQ(frame->header.method_id, 7);
  EXPECT_EQ(frame->header.request_id, 42u);
  EXPECT_EQ(frame->header.timeout_us, 1500u);
  EXPECT_EQ(frame->header.code, absl::StatusCode::kOk);
  EXPECT_EQ(frame->payload, "hello");
}

TEST(FrameTest, ResponseCarriesStatusCode) {
  FrameHeader h;
  h.kind = FrameKind::kResponse;
  h.method_id = 3;
  h.request_id = 9;
  h.code = absl::StatusCode::kNotFound;
  const std::string bytes = EncodeFrame(h, "no such key");
  auto frame = DecodeFrame(bytes);
  ASSERT_TRUE(frame.ok()) << frame.status();
  EXPECT_EQ(frame->header.kind, FrameKind::kResponse);
  EXPECT_EQ(frame->header.code, absl::StatusCode::kNotFound);
  EXPECT_EQ(frame->header.timeout_us, 0u);
  EXPECT_EQ(frame->payload, "no such key");
}

// The test vector of docs/rpc_frame_format.md: if this changes, the wire
// format changed.
TEST(FrameTest, DocumentedTestVector) {
  const std::string bytes = EncodeFrame(Request(7, 1, 5000), "abc");
  EXPECT_EQ(Hex(bytes.substr(0, 24)), "4d4352500100070001000000000000008813000003000000");
  const uint32_t payload_sum = static_cast<uint32_t>(StableHash64("abc"));
  EXPECT_EQ(rpc_internal::LoadLe32(reinterpret_cast<const uint8_t*>(bytes.data()) + 24),
            payload_sum);
  EXPECT_EQ(rpc_internal::LoadLe32(reinterpret_cast<const uint8_t*>(bytes.data()) + 28),
            static_cast<uint32_t>(StableHash64(bytes.data(), 28)));
  EXPECT_EQ(Hex(bytes), "4d4352500100070001000000000000008813000003000000" +
                            Hex(bytes.substr(24, 8)) + "616263");
  std::printf("test vector: %s\n", Hex(bytes).c_str());
}

TEST(FrameTest, EmptyPayload) {
  const std::string bytes = EncodeFrame(Request(1, 1), "");
  auto frame = DecodeFrame(bytes);
  ASSERT_TRUE(frame.ok()) << frame.status();
  EXPECT_TRUE(frame->payload.empty());
}

TEST(FrameTest, BadMagicIsInvalidArgument) {
  std::string bytes = EncodeFrame(Request(1, 1), "x");
  bytes[0] = 'X';
  auto frame = DecodeFrame(bytes);
  EXPECT_EQ(frame.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(frame.status().message().find("magic"), std::string_view::npos);
}

TEST(FrameTest, HeaderBitFlipIsDataLoss) {
  const std::string good = EncodeFrame(Request(5, 77, 10), "payload");
  // Every single-bit flip in bytes 4..31 is caught (magic flips are caught
  // as bad magic).
  for (size_t byte = 4; byte < kFrameHeaderBytes; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = good;
      bad[byte] ^= static_cast<char>(1 << bit);
      auto frame = DecodeFrame(bad);
      ASSERT_FALSE(frame.ok()) << "byte " << byte << " bit " << bit;
      EXPECT_EQ(frame.status().code(), absl::StatusCode::kDataLoss) << frame.status();
    }
  }
}

TEST(FrameTest, PayloadBitFlipIsDataLoss) {
  std::string bytes = EncodeFrame(Request(5, 77), "payload");
  bytes[kFrameHeaderBytes + 3] ^= 0x10;
  auto frame = DecodeFrame(bytes);
  EXPECT_EQ(frame.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(frame.status().message().find("payload checksum"), std::string_view::npos);
}

TEST(FrameTest, UnknownVersionIsUnimplemented) {
  std::string bytes = EncodeFrame(Request(1, 1), "");
  bytes[4] = 2;
  Reseal(&bytes);
  EXPECT_EQ(DecodeFrame(bytes).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(FrameTest, ReservedFlagsAreInvalid) {
  std::string bytes = EncodeFrame(Request(1, 1), "");
  bytes[5] = 0x02;
  Reseal(&bytes);
  EXPECT_EQ(DecodeFrame(bytes).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FrameTest, ZeroMethodOrRequestIdIsInvalid) {
  EXPECT_EQ(DecodeFrame(EncodeFrame(Request(0, 1), "")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeFrame(EncodeFrame(Request(1, 0), "")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FrameTest, UnknownStatusCodeIsInvalid) {
  FrameHeader h;
  h.kind = FrameKind::kResponse;
  h.method_id = 1;
  h.request_id = 1;
  std::string bytes = EncodeFrame(h, "");
  bytes[16] = 17;
  Reseal(&bytes);
  EXPECT_EQ(DecodeFrame(bytes).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FrameTest, OversizedPayloadIsResourceExhausted) {
  const std::string bytes = EncodeFrame(Request(1, 1), std::string(1025, 'x'));
  EXPECT_TRUE(DecodeFrame(bytes, 1025).ok());
  auto frame = DecodeFrame(bytes, 1024);
  EXPECT_EQ(frame.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(frame.status().message().find("1025"), std::string_view::npos);
}

TEST(FrameTest, TruncatedIsOutOfRange) {
  const std::string bytes = EncodeFrame(Request(1, 1), "abcdef");
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_EQ(DecodeFrame(std::string_view(bytes).substr(0, n)).status().code(),
              absl::StatusCode::kOutOfRange)
        << n;
  }
  EXPECT_EQ(DecodeFrame(bytes + "z").status().code(), absl::StatusCode::kOutOfRange);
}

TEST(FrameDecoderTest, ByteAtATimeYieldsEveryFrame) {
  std::string stream;
  for (uint64_t i = 1; i <= 50; ++i) {
    AppendFrame(Request(static_cast<uint16_t>(i), i), std::string(i * 7, static_cast<char>(i)),
                &stream);
  }
  FrameDecoder dec(1 << 20);
  uint64_t seen = 0;
  for (char c : stream) {
    dec.Append(std::string_view(&c, 1));
    for (;;) {
      auto next = dec.Next();
      ASSERT_TRUE(next.ok()) << next.status();
      if (!next->has_value()) break;
      ++seen;
      EXPECT_EQ((*next)->header.request_id, seen);
      EXPECT_EQ((*next)->payload, std::string(seen * 7, static_cast<char>(seen)));
    }
  }
  EXPECT_EQ(seen, 50u);
  EXPECT_EQ(dec.BufferedBytes(), 0u);
}

TEST(FrameDecoderTest, RandomChunksAndManyFramesPerRead) {
  std::mt19937_64 rng(3);
  std::string stream;
  std::vector<std::string> payloads;
  for (uint64_t i = 1; i <= 300; ++i) {
    payloads.push_back(std::string(rng() % 3000, static_cast<char>(rng())));
    AppendFrame(Request(1, i), payloads.back(), &stream);
  }
  FrameDecoder dec(1 << 20);
  size_t at = 0;
  size_t seen = 0;
  while (at < stream.size()) {
    const size_t n = std::min<size_t>(1 + rng() % 20000, stream.size() - at);
    auto span = dec.WritableSpan(n);
    std::memcpy(span.data(), stream.data() + at, n);
    dec.Commit(n);
    at += n;
    for (;;) {
      auto next = dec.Next();
      ASSERT_TRUE(next.ok()) << next.status();
      if (!next->has_value()) break;
      ASSERT_LT(seen, payloads.size());
      EXPECT_EQ((*next)->payload, payloads[seen]);
      ++seen;
    }
  }
  EXPECT_EQ(seen, payloads.size());
}

TEST(FrameDecoderTest, ErrorIsSticky) {
  FrameDecoder dec;
  dec.Append(std::string(kFrameHeaderBytes, 'G'));
  auto first = dec.Next();
  EXPECT_EQ(first.status().code(), absl::StatusCode::kInvalidArgument);
  dec.Append(EncodeFrame(Request(1, 1), "fine"));
  EXPECT_EQ(dec.Next().status(), first.status());
}

TEST(FrameDecoderTest, OversizedHeaderFailsBeforeThePayloadArrives) {
  FrameDecoder dec(100);
  const std::string bytes = EncodeFrame(Request(1, 1), std::string(101, 'x'));
  dec.Append(std::string_view(bytes).substr(0, kFrameHeaderBytes));
  EXPECT_EQ(dec.Next().status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(FrameDecoderTest, MissingBytesIsClampedByTheLimit) {
  FrameDecoder dec(100);
  std::string bytes = EncodeFrame(Request(1, 1), "");
  bytes[20] = bytes[21] = bytes[22] = bytes[23] = '\xff';  // 4 GiB, unsealed
  dec.Append(bytes);
  EXPECT_LE(dec.MissingBytes(), 100u);
}

TEST(FrameDecoderTest, BufferStaysBounded) {
  FrameDecoder dec(4096);
  std::string frame = EncodeFrame(Request(1, 1), std::string(4096, 'p'));
  for (int i = 0; i < 1000; ++i) {
    auto span = dec.WritableSpan(std::max<size_t>(64 << 10, dec.MissingBytes()));
    std::memcpy(span.data(), frame.data(), frame.size());
    dec.Commit(frame.size());
    auto next = dec.Next();
    ASSERT_TRUE(next.ok() && next->has_value());
  }
  EXPECT_LE(dec.CapacityBytes(), size_t{128} << 10);
}

}  // namespace
}  // namespace mooncake::rpc
