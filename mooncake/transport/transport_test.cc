#include "mooncake/transport/transport.h"

#include <optional>

#include "gtest/gtest.h"

namespace mooncake::transport {
namespace {

// A minimal type with every requirement; each Broken* drops or breaks one.
#define MC_TRANSPORT_MEMBERS_()                                                 \
  std::string_view Name() const { return "x"; }                                 \
  std::string LocalEndpoint() const { return ""; }                              \
  absl::StatusOr<SegmentDesc> RegisterMemory(void*, uint64_t, MemoryLocation) { \
    return SegmentDesc{};                                                       \
  }                                                                             \
  absl::Status UnregisterMemory(SegmentId) { return absl::OkStatus(); }         \
  absl::StatusOr<RemoteSegment> OpenSegment(std::string_view, SegmentId) {      \
    return RemoteSegment{};                                                     \
  }                                                                             \
  absl::Status CloseSegment(SegmentHandle) { return absl::OkStatus(); }         \
  absl::StatusOr<BatchProgress> Poll(BatchId) { return BatchProgress{}; }       \
  absl::StatusOr<BatchResult> Cancel(BatchId) { return BatchResult{}; }

struct Complete {
  MC_TRANSPORT_MEMBERS_()
  absl::StatusOr<BatchId> Submit(std::span<const TransferRequest>) { return 1; }
  absl::StatusOr<BatchResult> Wait(BatchId, absl::Time) { return BatchResult{}; }
};
static_assert(Transport<Complete>);

struct BrokenNoSubmit {
  MC_TRANSPORT_MEMBERS_()
  absl::StatusOr<BatchResult> Wait(BatchId, absl::Time) { return BatchResult{}; }
};
static_assert(!Transport<BrokenNoSubmit>);

struct BrokenNoWait {
  MC_TRANSPORT_MEMBERS_()
  absl::StatusOr<BatchId> Submit(std::span<const TransferRequest>) { return 1; }
};
static_assert(!Transport<BrokenNoWait>);

// Wait without a deadline could hang forever: rejected.
struct BrokenWaitWithoutDeadline {
  MC_TRANSPORT_MEMBERS_()
  absl::StatusOr<BatchId> Submit(std::span<const TransferRequest>) { return 1; }
  absl::StatusOr<BatchResult> Wait(BatchId) { return BatchResult{}; }
};
static_assert(!Transport<BrokenWaitWithoutDeadline>);

// A Submit that reports no batch-level Status is rejected.
struct BrokenSubmitReturnsId {
  MC_TRANSPORT_MEMBERS_()
  BatchId Submit(std::span<const TransferRequest>) { return 1; }
  absl::StatusOr<BatchResult> Wait(BatchId, absl::Time) { return BatchResult{}; }
};
static_assert(!Transport<BrokenSubmitReturnsId>);

// Poll that blocks for a whole result instead of reporting progress.
struct BrokenPollType {
  std::string_view Name() const { return "x"; }
  std::string LocalEndpoint() const { return ""; }
  absl::StatusOr<SegmentDesc> RegisterMemory(void*, uint64_t, MemoryLocation) {
    return SegmentDesc{};
  }
  absl::Status UnregisterMemory(SegmentId) { return absl::OkStatus(); }
  absl::StatusOr<RemoteSegment> OpenSegment(std::string_view, SegmentId) { return RemoteSegment{}; }
  absl::Status CloseSegment(SegmentHandle) { return absl::OkStatus(); }
  std::optional<BatchResult> Poll(BatchId) { return std::nullopt; }
  absl::StatusOr<BatchResult> Cancel(BatchId) { return BatchResult{}; }
  absl::StatusOr<BatchId> Submit(std::span<const TransferRequest>) { return 1; }
  absl::StatusOr<BatchResult> Wait(BatchId, absl::Time) { return BatchResult{}; }
};
static_assert(!Transport<BrokenPollType>);

// Registration without a location cannot describe GPU memory.
struct BrokenRegisterNoLocation {
  std::string_view Name() const { return "x"; }
  std::string LocalEndpoint() const { return ""; }
  absl::StatusOr<SegmentDesc> RegisterMemory(void*, uint64_t) { return SegmentDesc{}; }
  absl::Status UnregisterMemory(SegmentId) { return absl::OkStatus(); }
  absl::StatusOr<RemoteSegment> OpenSegment(std::string_view, SegmentId) { return RemoteSegment{}; }
  absl::Status CloseSegment(SegmentHandle) { return absl::OkStatus(); }
  absl::StatusOr<BatchProgress> Poll(BatchId) { return BatchProgress{}; }
  absl::StatusOr<BatchResult> Cancel(BatchId) { return BatchResult{}; }
  absl::StatusOr<BatchId> Submit(std::span<const TransferRequest>) { return 1; }
  absl::StatusOr<BatchResult> Wait(BatchId, absl::Time) { return BatchResult{}; }
};
static_assert(!Transport<BrokenRegisterNoLocation>);

// A piece of a request gets the request's digest slots only when its chunks
// are the request's chunks.
TEST(SubrangeDigestsTest, OnlyChunkAlignedPiecesOfReads) {
  uint64_t slots[8];
  constexpr uint64_t C = kDigestChunkBytes;
  const TransferRequest r{OpCode::kRead, nullptr, 1, 0, 5 * C + 7, slots};
  EXPECT_EQ(SubrangeDigests(r, 0, 2 * C), slots);
  EXPECT_EQ(SubrangeDigests(r, 2 * C, 3 * C + 7), slots + 2);  // ends at the request's end
  EXPECT_EQ(SubrangeDigests(r, 2 * C, C + 1), nullptr);        // ends inside a chunk
  EXPECT_EQ(SubrangeDigests(r, C / 2, C), nullptr);            // starts inside one
  TransferRequest w = r;
  w.op = OpCode::kWrite;
  EXPECT_EQ(SubrangeDigests(w, 0, C), nullptr);
  TransferRequest none = r;
  none.chunk_digests = nullptr;
  EXPECT_EQ(SubrangeDigests(none, 0, C), nullptr);
}

TEST(BatchResultTest, SummarizesPerRequestStatuses) {
  BatchResult r;
  r.statuses = {absl::OkStatus(), absl::OutOfRangeError("past end"), absl::CancelledError("c")};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.failed_count(), 2u);
  EXPECT_EQ(r.FirstError().code(), absl::StatusCode::kOutOfRange);
  BatchResult good;
  good.statuses = {absl::OkStatus()};
  EXPECT_TRUE(good.ok());
  EXPECT_TRUE(good.FirstError().ok());
}

TEST(BatchProgressTest, DoneWhenEveryRequestSettled) {
  BatchProgress p{3, 1, 1};
  EXPECT_FALSE(p.done());
  p.failed_requests = 2;
  EXPECT_TRUE(p.done());
}

TEST(MemoryLocationTest, NamedConstructors) {
  EXPECT_EQ(MemoryLocation::Gpu(2).kind, MemoryKind::kGpu);
  EXPECT_EQ(MemoryLocation::Gpu(2).device, 2);
  EXPECT_NE(MemoryLocation::Gpu(1), MemoryLocation::Gpu(2));
  EXPECT_EQ(MemoryLocation::HostDram().device, -1);
}

}  // namespace
}  // namespace mooncake::transport
