#include "mooncake/transport/internal/rdma_work.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/transport/internal/rdma_verbs.h"

namespace mooncake::transport_internal {
namespace {

uint64_t Total(const std::vector<SendWr>& wrs) {
  uint64_t n = 0;
  for (const SendWr& w : wrs) n += w.total_bytes();
  return n;
}

// Every WR's remote range must follow the previous one and its SGEs must walk
// the local chunks in order without gaps.
void ExpectContiguous(const std::vector<SendWr>& wrs, const std::vector<LocalChunk>& chunks,
                      uint64_t remote_addr) {
  uint64_t remote = remote_addr;
  size_t chunk = 0;
  uint64_t chunk_off = 0;
  for (const SendWr& w : wrs) {
    EXPECT_EQ(w.remote_addr, remote);
    remote += w.total_bytes();
    for (uint32_t i = 0; i < w.num_sge; ++i) {
      ASSERT_LT(chunk, chunks.size());
      EXPECT_EQ(w.sge[i].addr, chunks[chunk].addr + chunk_off);
      EXPECT_EQ(w.sge[i].lkey, chunks[chunk].lkey);
      chunk_off += w.sge[i].length;
      if (chunk_off == chunks[chunk].length) {
        ++chunk;
        chunk_off = 0;
      }
    }
  }
  EXPECT_EQ(chunk, chunks.size());
}

TEST(SliceRequestTest, OneChunkCutsAtTheMessageLimit) {
  const std::vector<LocalChunk> chunks = {{0x10000, 10'000, 7}};
  std::vector<SendWr> wrs;
  EXPECT_EQ(SliceRequest(WrOpcode::kRdmaRead, chunks, 0x900000, 42, {4, 4096}, &wrs), 3u);
  ASSERT_EQ(wrs.size(), 3u);
  EXPECT_EQ(wrs[0].total_bytes(), 4096u);
  EXPECT_EQ(wrs[1].total_bytes(), 4096u);
  EXPECT_EQ(wrs[2].total_bytes(), 10'000u - 8192u);
  for (const SendWr& w : wrs) {
    EXPECT_EQ(w.rkey, 42u);
    EXPECT_EQ(w.opcode, WrOpcode::kRdmaRead);
    EXPECT_EQ(w.num_sge, 1u);
  }
  ExpectContiguous(wrs, chunks, 0x900000);
}

TEST(SliceRequestTest, ManyChunksPackIntoSgesUpToMaxSge) {
  std::vector<LocalChunk> chunks;
  for (uint32_t i = 0; i < 7; ++i) chunks.push_back({0x1000u * (i + 1) * 16, 100 + i, 10 + i});
  std::vector<SendWr> wrs;
  SliceRequest(WrOpcode::kRdmaWrite, chunks, 0x500, 9, {3, 1 << 20}, &wrs);
  ASSERT_EQ(wrs.size(), 3u);  // 3 + 3 + 1 SGEs
  EXPECT_EQ(wrs[0].num_sge, 3u);
  EXPECT_EQ(wrs[1].num_sge, 3u);
  EXPECT_EQ(wrs[2].num_sge, 1u);
  EXPECT_EQ(Total(wrs), 100u * 7 + 21);
  ExpectContiguous(wrs, chunks, 0x500);
}

TEST(SliceRequestTest, ChunkSplitsAcrossWrsAtTheByteLimit) {
  const std::vector<LocalChunk> chunks = {{0x1000, 300, 1}, {0x9000, 500, 2}, {0xF000, 50, 3}};
  std::vector<SendWr> wrs;
  SliceRequest(WrOpcode::kRdmaRead, chunks, 0, 5, {4, 256}, &wrs);
  for (const SendWr& w : wrs) EXPECT_LE(w.total_bytes(), 256u);
  EXPECT_EQ(Total(wrs), 850u);
  EXPECT_EQ(wrs.size(), 4u);  // ceil(850 / 256)
  ExpectContiguous(wrs, chunks, 0);
}

TEST(SliceRequestTest, SgeLengthStaysWithin32Bits) {
  const std::vector<LocalChunk> chunks = {{0x1000, (uint64_t{5} << 30) + 3, 1}};
  std::vector<SendWr> wrs;
  SliceRequest(WrOpcode::kRdmaRead, chunks, 0, 5, {4, uint64_t{1} << 40}, &wrs);
  ASSERT_EQ(wrs.size(), 2u);  // 4 full SGEs, then 1 GiB + 3
  for (const SendWr& w : wrs) {
    for (uint32_t i = 0; i < w.num_sge; ++i) EXPECT_LE(w.sge[i].length, kSgeBytesMax);
  }
  EXPECT_EQ(Total(wrs), (uint64_t{5} << 30) + 3);
}

TEST(SignalPolicyTest, SignalsEveryNthAndWhenForced) {
  SignalPolicy p(4);
  std::vector<bool> got;
  for (int i = 0; i < 9; ++i) got.push_back(p.Next(false));
  EXPECT_EQ(got, (std::vector<bool>{false, false, false, true, false, false, false, true, false}));
  EXPECT_TRUE(p.Next(true));    // forced resets the run
  EXPECT_FALSE(p.Next(false));  // 1 since the forced one
  SignalPolicy every(1);
  EXPECT_TRUE(every.Next(false));
  EXPECT_TRUE(every.Next(false));
}

TEST(WrTrackerTest, SignalledCompletionRetiresEverythingBeforeIt) {
  WrTracker t;
  std::vector<uint64_t> ids;
  for (uint32_t i = 0; i < 5; ++i) ids.push_back(t.Track(WrTag{1, i}));
  std::vector<std::pair<uint32_t, bool>> retired;
  auto done = [&](const WrTag& tag, const absl::Status& s) {
    retired.push_back({tag.request, s.ok()});
  };
  t.OnCompletion(ids[2], absl::OkStatus(), done);
  EXPECT_EQ(retired, (std::vector<std::pair<uint32_t, bool>>{{0, true}, {1, true}, {2, true}}));
  EXPECT_EQ(t.outstanding(), 2u);
  t.OnCompletion(ids[1], absl::OkStatus(), done);  // stale: ignored
  EXPECT_EQ(retired.size(), 3u);
  t.OnCompletion(ids[4], absl::OkStatus(), done);
  EXPECT_EQ(retired.size(), 5u);
  EXPECT_EQ(t.outstanding(), 0u);
}

TEST(WrTrackerTest, ErrorCompletionSplitsSucceededFailedAndFlushed) {
  WrTracker t;
  std::vector<uint64_t> ids;
  for (uint32_t i = 0; i < 6; ++i) ids.push_back(t.Track(WrTag{7, i}));
  std::vector<absl::StatusCode> codes(6, absl::StatusCode::kUnknown);
  auto done = [&](const WrTag& tag, const absl::Status& s) { codes[tag.request] = s.code(); };
  t.OnCompletion(ids[3], WcStatusToStatus(WcStatus::kRemAccessErr, 0), done);
  EXPECT_EQ(codes, (std::vector<absl::StatusCode>{
                       absl::StatusCode::kOk, absl::StatusCode::kOk, absl::StatusCode::kOk,
                       absl::StatusCode::kNotFound, absl::StatusCode::kUnavailable,
                       absl::StatusCode::kUnavailable}));
  EXPECT_EQ(t.outstanding(), 0u);
  // The device's flush completions that follow are ignored.
  t.OnCompletion(ids[5], WcStatusToStatus(WcStatus::kWrFlushErr, 0), done);
  EXPECT_EQ(codes[5], absl::StatusCode::kUnavailable);
}

TEST(WcStatusToStatusTest, MapsEveryClassToTheContractCodes) {
  EXPECT_TRUE(WcStatusToStatus(WcStatus::kSuccess, 0).ok());
  EXPECT_EQ(WcStatusToStatus(WcStatus::kRetryExcErr, 0).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(WcStatusToStatus(WcStatus::kRnrRetryExcErr, 0).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(WcStatusToStatus(WcStatus::kWrFlushErr, 0).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(WcStatusToStatus(WcStatus::kRemAccessErr, 0).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(WcStatusToStatus(WcStatus::kRespTimeoutErr, 0).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(WcStatusToStatus(WcStatus::kBadRespErr, 0).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(WcStatusToStatus(WcStatus::kRemInvReqErr, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WcStatusToStatus(WcStatus::kLocProtErr, 0).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(WcStatusToStatus(WcStatus::kLocLenErr, 0).code(), absl::StatusCode::kInternal);
  const absl::Status s = WcStatusToStatus(WcStatus::kRetryExcErr, 0x81);
  EXPECT_NE(s.message().find("IBV_WC_RETRY_EXC_ERR"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("0x81"), absl::string_view::npos) << s;
  EXPECT_EQ(WcStatusName(static_cast<WcStatus>(99)), "IBV_WC_<unknown>");
}

TEST(QpTransitionTest, FollowsTheRcStateMachine) {
  EXPECT_TRUE(QpTransitionAllowed(QpState::kReset, QpState::kInit));
  EXPECT_TRUE(QpTransitionAllowed(QpState::kInit, QpState::kRtr));
  EXPECT_TRUE(QpTransitionAllowed(QpState::kRtr, QpState::kRts));
  EXPECT_TRUE(QpTransitionAllowed(QpState::kRts, QpState::kErr));
  EXPECT_TRUE(QpTransitionAllowed(QpState::kErr, QpState::kReset));
  EXPECT_FALSE(QpTransitionAllowed(QpState::kReset, QpState::kRtr));
  EXPECT_FALSE(QpTransitionAllowed(QpState::kReset, QpState::kRts));
  EXPECT_FALSE(QpTransitionAllowed(QpState::kInit, QpState::kRts));
  EXPECT_FALSE(QpTransitionAllowed(QpState::kRts, QpState::kRtr));
  EXPECT_FALSE(QpTransitionAllowed(QpState::kErr, QpState::kRts));
}

}  // namespace
}  // namespace mooncake::transport_internal
