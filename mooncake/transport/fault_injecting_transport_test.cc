#include "mooncake/transport/fault_injecting_transport.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/value_checksum.h"
#include "mooncake/transport/local_transport.h"
#include "mooncake/transport/tcp_transport.h"
#include "mooncake/transport/transport_testing.h"

namespace mooncake::transport {
namespace {

using FaultyLocal = FaultInjectingTransport<LocalTransport>;
static_assert(Transport<FaultyLocal>);
static_assert(Transport<FaultInjectingTransport<TcpTransport>>);

// With no faults set, the wrapper is a conforming transport.
struct FaultyLocalFactory {
  using Transport = FaultyLocal;
  static constexpr bool kCrossProcess = false;
  static constexpr bool kUnregisterRevokes = true;
  static constexpr bool kMappingSurvivesOwner = false;
  static constexpr bool kDigestsOnLanding = true;
  static std::unique_ptr<FaultyLocal> Make() {
    return std::make_unique<FaultyLocal>(std::make_unique<LocalTransport>());
  }
  static absl::StatusOr<KitBuffer> Allocate(uint64_t length) {
    return AllocateHeapKitBuffer(length);
  }
};
INSTANTIATE_TYPED_TEST_SUITE_P(FaultyLocal, TransportConformanceTest, FaultyLocalFactory);

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    t_ = FaultyLocalFactory::Make();
    mem_.assign(64 << 10, std::byte{0x11});
    auto seg = t_->RegisterMemory(mem_.data(), mem_.size(), MemoryLocation::HostDram());
    ASSERT_TRUE(seg.ok());
    auto remote = t_->OpenSegment(t_->LocalEndpoint(), seg->id);
    ASSERT_TRUE(remote.ok());
    handle_ = remote->handle;
  }
  std::vector<TransferRequest> Reads(std::vector<std::byte>& dst, int n) {
    std::vector<TransferRequest> reqs;
    for (int i = 0; i < n; ++i) {
      reqs.push_back({OpCode::kRead, dst.data() + i * 1024, handle_, uint64_t(i) * 1024, 1024});
    }
    return reqs;
  }
  std::unique_ptr<FaultyLocal> t_;
  std::vector<std::byte> mem_;
  SegmentHandle handle_ = 0;
};

TEST_F(FaultTest, FailsEveryRequestAfterTheNth) {
  InjectedFaults f;
  f.fail_after_requests = 5;
  f.failure = absl::UnavailableError("link down");
  t_->SetFaults(f);
  std::vector<std::byte> dst(8 << 10);
  auto r = transport_testing_internal::RunBatch(*t_, Reads(dst, 8));
  ASSERT_TRUE(r.ok());
  for (int i = 0; i < 8; ++i) {
    if (i < 5) {
      EXPECT_TRUE(r->statuses[i].ok()) << i;
      EXPECT_EQ(dst[i * 1024], std::byte{0x11});
    } else {
      EXPECT_EQ(r->statuses[i].code(), absl::StatusCode::kUnavailable) << i;
      EXPECT_EQ(dst[i * 1024], std::byte{0}) << "a failed request must not reach the transport";
    }
  }
  // Later batches fail entirely.
  auto again = transport_testing_internal::RunBatch(*t_, Reads(dst, 2));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->failed_count(), 2u);
  EXPECT_EQ(t_->requests_seen(), 10);
}

TEST_F(FaultTest, CorruptsSuccessfulReadsButReportsOk) {
  InjectedFaults f;
  f.corrupt_reads = true;
  t_->SetFaults(f);
  std::vector<std::byte> dst(2048);
  auto r = transport_testing_internal::RunBatch(*t_, Reads(dst, 2));
  ASSERT_TRUE(r.ok() && r->ok());
  EXPECT_EQ(dst[0], std::byte{0xEE});
  EXPECT_EQ(dst[1], std::byte{0x11});
  EXPECT_EQ(dst[1024], std::byte{0xEE});
}

// A corrupt read with chunk digests: the digest the inner transport took is
// of the flipped bytes, so a checksum check from the slots still fails.
TEST_F(FaultTest, CorruptReadsAreVisibleThroughChunkDigests) {
  std::vector<std::byte> dst(mem_.size());
  std::vector<uint64_t> d(DigestChunkCount(dst.size()), kNoDigest);
  TransferRequest r{OpCode::kRead, dst.data(), handle_, 0, dst.size(), d.data()};
  auto clean = transport_testing_internal::RunBatch(*t_, {r});
  ASSERT_TRUE(clean.ok() && clean->ok());
  const uint64_t good = ValueChecksumWith(dst.data(), dst.size(), d.data());
  EXPECT_EQ(good, ValueChecksum(mem_.data(), mem_.size()));
  InjectedFaults f;
  f.corrupt_reads = true;
  t_->SetFaults(f);
  d.assign(d.size(), kNoDigest);
  auto bad = transport_testing_internal::RunBatch(*t_, {r});
  ASSERT_TRUE(bad.ok() && bad->ok());
  ASSERT_NE(d[0], kNoDigest) << "the local transport digests on landing";
  EXPECT_NE(ValueChecksumWith(dst.data(), dst.size(), d.data()), good);
  EXPECT_EQ(ValueChecksumWith(dst.data(), dst.size(), d.data()),
            ValueChecksum(dst.data(), dst.size()));
}

TEST_F(FaultTest, StallsUntilTheDelayThenCompletes) {
  InjectedFaults f;
  f.stall = absl::Milliseconds(300);
  t_->SetFaults(f);
  std::vector<std::byte> dst(1024);
  auto id = t_->Submit(Reads(dst, 1));
  ASSERT_TRUE(id.ok());
  auto p = t_->Poll(*id);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->done());
  EXPECT_EQ(t_->Wait(*id, absl::Now() + absl::Milliseconds(10)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  auto r = t_->Wait(*id, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(r.ok() && r->ok());
  EXPECT_EQ(dst[0], std::byte{0x11});
}

// Regression: a batch with no stall (ready_at left at the epoch) made the
// non-blocking collect Wait(id, InfinitePast()) report DeadlineExceeded
// forever, though the contract says it returns a finished batch's result.
TEST_F(FaultTest, NonBlockingCollectReturnsAFinishedBatch) {
  std::vector<std::byte> dst(1024);
  auto id = t_->Submit(Reads(dst, 1));
  ASSERT_TRUE(id.ok());
  auto done = t_->Wait(*id, absl::InfinitePast());
  for (int i = 0; i < 1000 && !done.ok(); ++i) {
    ASSERT_EQ(done.status().code(), absl::StatusCode::kDeadlineExceeded);
    absl::SleepFor(absl::Milliseconds(1));
    done = t_->Wait(*id, absl::InfinitePast());
  }
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(done->ok());
  EXPECT_EQ(dst[0], std::byte{0x11});
}

TEST_F(FaultTest, CancelOfAStalledBatchReturnsAResult) {
  InjectedFaults f;
  f.stall = absl::Hours(1);
  t_->SetFaults(f);
  std::vector<std::byte> dst(1024);
  auto id = t_->Submit(Reads(dst, 1));
  ASSERT_TRUE(id.ok());
  auto r = t_->Cancel(*id);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->statuses.size(), 1u);
  EXPECT_EQ(t_->Poll(*id).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace mooncake::transport
