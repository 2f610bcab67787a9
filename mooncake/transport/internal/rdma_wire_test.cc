#include "mooncake/transport/internal/rdma_wire.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake::transport_internal {
namespace {

QpInfo SampleQp() {
  QpInfo qp;
  qp.qpn = 0x123456;
  qp.psn = 0xABCDEF;
  qp.lid = 0x0102;
  qp.mtu = 5;
  qp.use_gid = true;
  for (int i = 0; i < 16; ++i) qp.gid[i] = static_cast<uint8_t>(0xA0 + i);
  return qp;
}

TEST(RdmaWireTest, ConnectRequestHasTheDocumentedLayout) {
  RdmaMessage m;
  m.type = RdmaMsgType::kConnectRequest;
  m.qp = SampleQp();
  m.path = 3;
  const std::vector<uint8_t> frame = EncodeRdmaMessage(m);
  // Test vector: header, then qpn, psn, lid, mtu, use_gid, gid, path (little-endian).
  const std::vector<uint8_t> expected = {
      0x4D, 0x43, 0x52, 0x44, 0x02, 0x00, 0x01, 0x00, 0x1D, 0x00, 0x00, 0x00,  // header
      0x56, 0x34, 0x12, 0x00, 0xEF, 0xCD, 0xAB, 0x00, 0x02, 0x01, 0x05, 0x01,  // qp
      0xA0, 0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7, 0xA8, 0xA9, 0xAA, 0xAB,  // gid
      0xAC, 0xAD, 0xAE, 0xAF, 0x03};                                           // path
  EXPECT_EQ(frame, expected);
  auto back = DecodeRdmaMessage(frame);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->type, RdmaMsgType::kConnectRequest);
  EXPECT_EQ(back->qp, m.qp);
  EXPECT_EQ(back->path, 3);
}

// A version 1 peer (one port a side, no path byte) is refused by version,
// with a message naming both, not misread.
TEST(RdmaWireTest, AVersionOnePeerIsRefusedByName) {
  RdmaMessage m;
  m.type = RdmaMsgType::kConnectRequest;
  m.qp = SampleQp();
  std::vector<uint8_t> v1 = EncodeRdmaMessage(m);
  v1[4] = 0x01;
  v1.pop_back();  // no path byte
  v1[8] = 0x1C;
  const absl::Status s = DecodeRdmaMessage(v1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("version 1, expected 2"), absl::string_view::npos) << s;
}

TEST(RdmaWireTest, RepliesRoundTripWithStatus) {
  RdmaMessage open;
  open.type = RdmaMsgType::kOpenReply;
  open.segment =
      SegmentInfo{42, 0x7f0000001000, 0xBEEF, 1 << 20, transport::MemoryLocation::Gpu(3)};
  auto back = DecodeRdmaMessage(EncodeRdmaMessage(open));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->status.ok());
  EXPECT_EQ(back->segment, open.segment);

  RdmaMessage missing;
  missing.type = RdmaMsgType::kOpenReply;
  missing.status = absl::NotFoundError("no segment 9");
  missing.segment.id = 9;
  back = DecodeRdmaMessage(EncodeRdmaMessage(missing));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->status, missing.status);

  RdmaMessage refused;
  refused.type = RdmaMsgType::kConnectReply;
  refused.status = absl::ResourceExhaustedError("");  // empty text still decodes
  refused.qp = SampleQp();
  back = DecodeRdmaMessage(EncodeRdmaMessage(refused));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(back->qp, refused.qp);
}

TEST(RdmaWireTest, RejectsMalformedFrames) {
  RdmaMessage m;
  m.type = RdmaMsgType::kOpenRequest;
  m.segment.id = 5;
  const std::vector<uint8_t> good = EncodeRdmaMessage(m);
  ASSERT_TRUE(DecodeRdmaMessage(good).ok());

  auto corrupt = [&](size_t i, uint8_t v) {
    std::vector<uint8_t> f = good;
    f[i] = v;
    return DecodeRdmaMessage(f).status().code();
  };
  EXPECT_EQ(corrupt(0, 0x00), absl::StatusCode::kDataLoss);            // magic
  EXPECT_EQ(corrupt(4, 0x03), absl::StatusCode::kFailedPrecondition);  // version
  EXPECT_EQ(corrupt(6, 0x09), absl::StatusCode::kDataLoss);            // type
  EXPECT_EQ(corrupt(8, 0x07), absl::StatusCode::kDataLoss);            // body length
  std::vector<uint8_t> zero_id = good;
  for (size_t i = 12; i < zero_id.size(); ++i) zero_id[i] = 0;
  EXPECT_EQ(DecodeRdmaMessage(zero_id).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeRdmaMessage(std::span(good).first(5)).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<uint8_t> trailing = good;
  trailing.push_back(0);
  EXPECT_EQ(DecodeRdmaMessage(trailing).status().code(), absl::StatusCode::kDataLoss);

  RdmaMessage c;
  c.type = RdmaMsgType::kConnectRequest;
  c.qp = SampleQp();
  std::vector<uint8_t> bad_mtu = EncodeRdmaMessage(c);
  bad_mtu[12 + 10] = 9;  // mtu outside 1..5
  EXPECT_EQ(DecodeRdmaMessage(bad_mtu).status().code(), absl::StatusCode::kDataLoss);
  std::vector<uint8_t> huge = EncodeRdmaMessage(c);
  huge[11] = 0x01;  // body_bytes = 16 MiB + 29
  EXPECT_EQ(DecodeRdmaHeader(std::span(huge).first(kRdmaHeaderBytes)).status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace mooncake::transport_internal
