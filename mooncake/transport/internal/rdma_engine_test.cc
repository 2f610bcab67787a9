#include "mooncake/transport/internal/rdma_engine.h"

#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/transport/internal/fake_rdma_kit.h"
#include "mooncake/transport/internal/fake_verbs.h"
#include "mooncake/transport/transport_testing.h"

namespace mooncake::transport_internal {
namespace {

using transport::BatchResult;
using transport::MemoryLocation;
using transport::OpCode;
using transport::TransferRequest;
using transport::transport_testing_internal::CheckPattern;
using transport::transport_testing_internal::FillPattern;
using FakeRdma = RdmaEngine<FakeVerbs>;

static_assert(transport::Transport<FakeRdma>);

std::shared_ptr<FakeFabric> SharedFabric() {
  static auto* fabric = new std::shared_ptr<FakeFabric>(
      std::make_shared<FakeFabric>(std::vector<std::string>{"fake_mlx5_0", "fake_mlx5_1"}));
  return *fabric;
}

struct OnePort {
  static std::shared_ptr<FakeFabric> Fabric() { return SharedFabric(); }
  static RdmaOptions Options() {
    RdmaOptions o;
    o.wr_bytes_max = 256 << 10;  // several WRs per large request
    return o;
  }
};
using FakeRdmaFactory = FakeRdmaKitFactory<OnePort>;
}  // namespace
}  // namespace mooncake::transport_internal

namespace mooncake::transport {
INSTANTIATE_TYPED_TEST_SUITE_P(FakeRdma, TransportConformanceTest,
                               transport_internal::FakeRdmaFactory);
}  // namespace mooncake::transport

namespace mooncake::transport_internal {
namespace {

absl::StatusOr<BatchResult> RunFor(FakeRdma& t, const std::vector<TransferRequest>& reqs) {
  auto id = t.Submit(reqs);
  if (!id.ok()) return id.status();
  return t.Wait(*id, absl::Now() + absl::Seconds(20));
}

// An owner and a requester on their own fabric, one segment of `length`.
struct Pair {
  std::shared_ptr<FakeFabric> fabric;
  std::unique_ptr<FakeRdma> owner, requester;
  std::vector<std::byte> memory;
  transport::SegmentDesc seg;
  transport::RemoteSegment remote;

  Pair(uint64_t length, RdmaOptions options, FakeFabricLimits limits = {}) {
    fabric = std::make_shared<FakeFabric>(std::vector<std::string>{"a", "b"}, limits);
    options.device_name = "a";
    owner = std::move(*FakeRdma::Create(FakeVerbs(fabric), options));
    options.device_name = "b";
    requester = std::move(*FakeRdma::Create(FakeVerbs(fabric), options));
    memory.resize(length);
    FillPattern(memory.data(), length, 1);
    seg = *owner->RegisterMemory(memory.data(), length, MemoryLocation::HostDram());
    auto r = requester->OpenSegment(owner->LocalEndpoint(), seg.id);
    MC_ASSERT(r.ok(), "open must succeed");
    remote = *r;
  }
  TransferRequest Req(OpCode op, void* local, uint64_t off, uint64_t len) const {
    return TransferRequest{op, local, remote.handle, off, len};
  }
};

TEST(RdmaEngineTest, NoDeviceIsAClearFailedPrecondition) {
  auto fabric = std::make_shared<FakeFabric>(std::vector<std::string>{});
  auto t = FakeRdma::Create(FakeVerbs(fabric));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(t.status().message().find("no RDMA device"), absl::string_view::npos) << t.status();
  auto named = FakeRdma::Create(FakeVerbs(SharedFabric()), RdmaOptions{.device_name = "mlx9"});
  EXPECT_EQ(named.status().code(), absl::StatusCode::kNotFound) << named.status();
}

TEST(RdmaEngineTest, RejectsOptionsThatWouldStallTheSendQueue) {
  RdmaOptions o;
  o.send_queue_depth = 8;
  o.signal_interval = 9;
  EXPECT_EQ(FakeRdma::Create(FakeVerbs(SharedFabric()), o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.signal_interval = 0;
  EXPECT_EQ(FakeRdma::Create(FakeVerbs(SharedFabric()), o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RdmaEngineTest, ClampsToDeviceLimits) {
  FakeFabricLimits limits;
  limits.max_sge = 2;
  limits.max_qp_wr = 32;
  limits.max_msg_sz = 8192;
  RdmaOptions o;
  o.max_sge = 8;
  o.send_queue_depth = 1024;
  o.signal_interval = 16;
  Pair p(4096, o, limits);
  EXPECT_EQ(p.requester->slice_limits().max_sge, 2u);
  EXPECT_EQ(p.requester->slice_limits().wr_bytes_max, 8192u);
  EXPECT_EQ(p.requester->send_queue_depth(), 32u);
}

// Many WRs through a shallow send queue: they are chained, only some are
// signalled, the queue never overflows (the fake would fail the post) and
// every byte arrives.
TEST(RdmaEngineTest, ChainsAndSignalsSelectivelyThroughAShallowQueue) {
  RdmaOptions o;
  o.send_queue_depth = 16;
  o.signal_interval = 4;
  o.post_chain_max = 8;
  o.wr_bytes_max = 4096;
  constexpr uint64_t kLen = 1 << 20;
  Pair p(kLen, o);
  std::vector<std::byte> dst(kLen);
  std::vector<TransferRequest> reqs;
  for (uint64_t off = 0; off < kLen; off += 64 << 10) {
    reqs.push_back(p.Req(OpCode::kRead, dst.data() + off, off, 64 << 10));
  }
  auto r = RunFor(*p.requester, reqs);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok()) << r->FirstError();
  EXPECT_EQ(CheckPattern(dst.data(), kLen, 1), -1);
  const FakeFabricStats s = p.fabric->stats();
  EXPECT_EQ(s.wrs_posted, kLen / 4096);
  EXPECT_EQ(s.bytes_moved, kLen);
  EXPECT_LE(s.longest_chain, 8u);
  EXPECT_GT(s.longest_chain, 1u);
  EXPECT_LT(s.post_calls, s.wrs_posted);
  // About one in four, plus forced tails; far fewer than all.
  EXPECT_GE(s.wrs_signaled, s.wrs_posted / 4);
  EXPECT_LE(s.wrs_signaled, s.wrs_posted / 2);
}

TEST(RdmaEngineTest, SignalIntervalOfOneSignalsEverything) {
  RdmaOptions o;
  o.signal_interval = 1;
  o.wr_bytes_max = 4096;
  Pair p(64 << 10, o);
  std::vector<std::byte> dst(64 << 10);
  auto r = RunFor(*p.requester, {p.Req(OpCode::kRead, dst.data(), 0, dst.size())});
  ASSERT_TRUE(r.ok() && r->ok());
  EXPECT_EQ(p.fabric->stats().wrs_signaled, p.fabric->stats().wrs_posted);
}

// A local buffer straddling two registered segments and an unregistered gap
// becomes several SGEs with the right lkeys; the on-the-fly MR is released.
TEST(RdmaEngineTest, LocalBufferAcrossRegionsUsesSeveralSges) {
  RdmaOptions o;
  o.max_sge = 4;
  constexpr uint64_t kLen = 48 << 10;
  Pair p(kLen, o);
  std::vector<std::byte> dst(kLen);
  ASSERT_TRUE(p.requester->RegisterMemory(dst.data(), 16 << 10, MemoryLocation::HostDram()).ok());
  ASSERT_TRUE(
      p.requester->RegisterMemory(dst.data() + (16 << 10), 8 << 10, MemoryLocation::HostDram())
          .ok());
  const size_t mrs_before = p.fabric->live_mrs();
  auto r = RunFor(*p.requester, {p.Req(OpCode::kRead, dst.data(), 0, kLen)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok()) << r->FirstError();
  EXPECT_EQ(CheckPattern(dst.data(), kLen, 1), -1);
  EXPECT_EQ(p.fabric->stats().most_sges, 3u);
  EXPECT_EQ(p.fabric->live_mrs(), mrs_before) << "the temporary MR must be deregistered";
  std::vector<std::byte> src(kLen);
  FillPattern(src.data(), kLen, 5);
  auto w = RunFor(*p.requester, {p.Req(OpCode::kWrite, src.data(), 0, kLen)});
  ASSERT_TRUE(w.ok() && w->ok());
  EXPECT_EQ(CheckPattern(p.memory.data(), kLen, 5), -1);
}

TEST(RdmaEngineTest, OverlappingRegistrationIsRejected) {
  Pair p(4096, RdmaOptions{});
  EXPECT_EQ(p.owner->RegisterMemory(p.memory.data() + 100, 10, MemoryLocation::HostDram())
                .status()
                .code(),
            absl::StatusCode::kAlreadyExists);
}

// An error completion midway: WRs before it succeed, it fails with the mapped
// code, the rest are flushed; the connection is then unusable until the
// segment is reopened, which builds a new queue pair that works.
TEST(RdmaEngineTest, ErrorCompletionFailsTheRestAndReopenRecovers) {
  RdmaOptions o;
  o.wr_bytes_max = 4096;
  constexpr uint64_t kLen = 6 * 4096;
  Pair p(kLen, o);
  std::vector<std::byte> dst(kLen);
  std::vector<TransferRequest> reqs;
  for (uint64_t i = 0; i < 6; ++i) {
    reqs.push_back(p.Req(OpCode::kRead, dst.data() + i * 4096, i * 4096, 4096));
  }
  p.fabric->FailNthWr(3, WcStatus::kRetryExcErr);
  auto r = RunFor(*p.requester, reqs);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->statuses[0].ok());
  EXPECT_TRUE(r->statuses[1].ok());
  EXPECT_EQ(CheckPattern(dst.data(), 2 * 4096, 1), -1);
  EXPECT_EQ(r->statuses[2].code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(r->statuses[2].message().find("RETRY_EXC"), absl::string_view::npos);
  for (int i = 3; i < 6; ++i) {
    EXPECT_EQ(r->statuses[i].code(), absl::StatusCode::kUnavailable) << r->statuses[i];
  }
  auto again = RunFor(*p.requester, {reqs[0]});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->statuses[0].code(), absl::StatusCode::kUnavailable);

  auto reopened = p.requester->OpenSegment(p.owner->LocalEndpoint(), p.seg.id);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  std::fill(dst.begin(), dst.end(), std::byte{0});
  auto fresh =
      RunFor(*p.requester, {TransferRequest{OpCode::kRead, dst.data(), reopened->handle, 0, kLen}});
  ASSERT_TRUE(fresh.ok() && fresh->ok()) << (fresh.ok() ? fresh->FirstError() : fresh.status());
  EXPECT_EQ(CheckPattern(dst.data(), kLen, 1), -1);
  ASSERT_TRUE(p.requester->CloseSegment(p.remote.handle).ok());
}

// A stalled device: Wait honours its deadline; Cancel waits the I/O timeout,
// then flushes the QP so nothing touches the buffers after it returns.
TEST(RdmaEngineTest, StalledWorkTimesOutAndCancelFlushes) {
  RdmaOptions o;
  o.io_timeout = absl::Milliseconds(100);
  Pair p(64 << 10, o);
  std::vector<std::byte> dst(64 << 10);
  p.fabric->Stall(true);
  auto id = p.requester->Submit(std::vector<TransferRequest>{
      p.Req(OpCode::kRead, dst.data(), 0, 32 << 10),
      p.Req(OpCode::kRead, dst.data() + (32 << 10), 32 << 10, 32 << 10)});
  ASSERT_TRUE(id.ok());
  const absl::Time start = absl::Now();
  EXPECT_EQ(p.requester->Wait(*id, start + absl::Milliseconds(30)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(30));
  auto progress = p.requester->Poll(*id);
  ASSERT_TRUE(progress.ok());
  EXPECT_EQ(progress->succeeded_requests + progress->failed_requests, 0u);
  auto r = p.requester->Cancel(*id);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const absl::Status& s : r->statuses) EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  p.fabric->Stall(false);
  EXPECT_EQ(p.fabric->stats().bytes_moved, 0u) << "flushed WRs must never execute";
}

TEST(RdmaEngineTest, BatchesInFlightAreBounded) {
  RdmaOptions o;
  o.batches_in_flight_max = 2;
  Pair p(4096, o);
  std::vector<std::byte> dst(16);
  const std::vector<TransferRequest> one = {p.Req(OpCode::kRead, dst.data(), 0, 16)};
  auto a = p.requester->Submit(one);
  auto b = p.requester->Submit(one);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(p.requester->Submit(one).status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(p.requester->Wait(*a, absl::Now() + absl::Seconds(5)).ok());
  ASSERT_TRUE(p.requester->Wait(*b, absl::Now() + absl::Seconds(5)).ok());
}

// Garbage on the control port closes that control connection only; the server goes on.
TEST(RdmaEngineTest, ControlServerSurvivesGarbage) {
  Pair p(4096, RdmaOptions{});
  auto hp = rdma_ctl::ParseEndpoint(p.owner->LocalEndpoint(), "rdma");
  ASSERT_TRUE(hp.ok());
  auto fd = rdma_ctl::ConnectTcp(*hp, absl::Now() + absl::Seconds(2));
  ASSERT_TRUE(fd.ok()) << fd.status();
  const std::vector<uint8_t> junk(64, 0xEE);
  ASSERT_TRUE(rdma_ctl::WriteFull(fd->get(), junk, absl::Now() + absl::Seconds(2)).ok());
  uint8_t byte;
  EXPECT_FALSE(rdma_ctl::ReadFull(fd->get(), {&byte, 1}, absl::Now() + absl::Seconds(5)).ok());
  auto other = FakeRdma::Create(FakeVerbs(p.fabric), RdmaOptions{.device_name = "b"});
  ASSERT_TRUE(other.ok());
  auto opened = (*other)->OpenSegment(p.owner->LocalEndpoint(), p.seg.id);
  EXPECT_TRUE(opened.ok()) << opened.status();
}

TEST(RdmaEngineTest, EndpointsAreValidated) {
  auto t = FakeRdmaFactory::Make();
  for (const char* bad : {"tcp://127.0.0.1:1", "rdma://127.0.0.1", "rdma://host:80",
                          "rdma://127.0.0.1:0", "rdma://127.0.0.1:99999"}) {
    EXPECT_EQ(t->OpenSegment(bad, 1).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(t->OpenSegment("rdma://127.0.0.1:1", 1).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(RdmaEngineTest, TeardownReleasesEveryVerbsObject) {
  auto fabric = std::make_shared<FakeFabric>(std::vector<std::string>{"x"});
  {
    Pair p(4096, RdmaOptions{});
    (void)p;
  }
  {
    auto a = *FakeRdma::Create(FakeVerbs(fabric));
    auto b = *FakeRdma::Create(FakeVerbs(fabric));
    std::vector<std::byte> mem(4096);
    auto seg = a->RegisterMemory(mem.data(), mem.size(), MemoryLocation::HostDram());
    ASSERT_TRUE(seg.ok());
    ASSERT_TRUE(b->OpenSegment(a->LocalEndpoint(), seg->id).ok());
    EXPECT_EQ(fabric->live_qps(), 2u);
  }
  EXPECT_EQ(fabric->live_qps(), 0u);
  EXPECT_EQ(fabric->live_mrs(), 0u);
}

}  // namespace
}  // namespace mooncake::transport_internal

namespace mooncake::transport_internal {
namespace {

// The control channel's authentication (RdmaOptions::auth; docs/security.md).
std::shared_ptr<const auth::Credentials> RdmaCreds(const char* text) {
  auto c = auth::Credentials::Parse(text, "test");
  MC_ASSERT(c.ok(), "test token file");
  return std::make_shared<const auth::Credentials>(*std::move(c));
}

constexpr char kRdmaOwnerFile[] =
    "cluster       0123456789abcdef0123456789abcdef\n"
    "tenant:alice  a11ce-a11ce-a11ce-a11ce-a11ce\n";

struct AuthPair {
  std::shared_ptr<FakeFabric> fabric =
      std::make_shared<FakeFabric>(std::vector<std::string>{"a", "b"});
  std::unique_ptr<FakeRdma> owner;
  std::vector<std::byte> memory = std::vector<std::byte>(64 << 10);
  transport::SegmentDesc seg;

  explicit AuthPair(RdmaOptions o) {
    o.device_name = "a";
    owner = std::move(*FakeRdma::Create(FakeVerbs(fabric), o));
    FillPattern(memory.data(), memory.size(), 3);
    seg = *owner->RegisterMemory(memory.data(), memory.size(), MemoryLocation::HostDram());
  }
  std::unique_ptr<FakeRdma> Requester(std::shared_ptr<const auth::Credentials> creds) {
    RdmaOptions o;
    o.device_name = "b";
    o.auth = std::move(creds);
    return std::move(*FakeRdma::Create(FakeVerbs(fabric), o));
  }
};

RdmaOptions OwnerOptions(bool refuse_tenants) {
  RdmaOptions o;
  o.auth = RdmaCreds(kRdmaOwnerFile);
  o.refuse_tenants = refuse_tenants;
  o.io_timeout = absl::Seconds(2);
  return o;
}

TEST(RdmaEngineAuthTest, MatchingSecretsConnectAndTransfer) {
  AuthPair p(OwnerOptions(false));
  for (const char* file : {"cluster 0123456789abcdef0123456789abcdef\n",
                           "tenant:alice a11ce-a11ce-a11ce-a11ce-a11ce\n"}) {
    auto requester = p.Requester(RdmaCreds(file));
    auto r = requester->OpenSegment(p.owner->LocalEndpoint(), p.seg.id);
    ASSERT_TRUE(r.ok()) << file << r.status();
    std::vector<std::byte> dst(p.memory.size());
    auto res =
        RunFor(*requester, {TransferRequest{OpCode::kRead, dst.data(), r->handle, 0, dst.size()}});
    ASSERT_TRUE(res.ok() && res->ok()) << file;
    EXPECT_TRUE(CheckPattern(dst.data(), dst.size(), 3)) << file;
  }
}

TEST(RdmaEngineAuthTest, NoTokenWrongSecretAndTenantsWhereRefusedGetNoKeys) {
  AuthPair p(OwnerOptions(/*refuse_tenants=*/true));
  // No token: refused before a queue pair or a key is handed out.
  auto anon = p.Requester(nullptr);
  auto r = anon->OpenSegment(p.owner->LocalEndpoint(), p.seg.id);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(r.status())) << r.status();
  EXPECT_NE(std::string(r.status().message()).find("authentication required"), std::string::npos)
      << r.status();
  // A wrong secret.
  auto wrong = p.Requester(RdmaCreds("cluster ffffffffffffffffffffffffffffffff\n"));
  r = wrong->OpenSegment(p.owner->LocalEndpoint(), p.seg.id);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(r.status())) << r.status();
  // A tenant where the owner checks tenants' ranges (RDMA cannot).
  auto alice = p.Requester(RdmaCreds("tenant:alice a11ce-a11ce-a11ce-a11ce-a11ce\n"));
  r = alice->OpenSegment(p.owner->LocalEndpoint(), p.seg.id);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(r.status())) << r.status();
  EXPECT_NE(std::string(r.status().message()).find("over TCP"), std::string::npos) << r.status();
  // The cluster still connects.
  auto cluster = p.Requester(RdmaCreds("cluster 0123456789abcdef0123456789abcdef\n"));
  EXPECT_TRUE(cluster->OpenSegment(p.owner->LocalEndpoint(), p.seg.id).ok());
}

TEST(RdmaEngineAuthTest, ARequesterWithATokenRefusesAnOwnerWithoutOne) {
  AuthPair p(RdmaOptions{});
  auto requester = p.Requester(RdmaCreds("cluster 0123456789abcdef0123456789abcdef\n"));
  auto r = requester->OpenSegment(p.owner->LocalEndpoint(), p.seg.id);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(r.status())) << r.status();
  EXPECT_NE(std::string(r.status().message()).find("does not require authentication"),
            std::string::npos)
      << r.status();
  // And an owner with a token refuses a requester whose secret differs, even
  // though that requester's proof of its own secret is well formed.
  AuthPair q(OwnerOptions(false));
  auto other = q.Requester(RdmaCreds("tenant:bob b0b-b0b-b0b-b0b-b0b-b0b-b0b\n"));
  EXPECT_TRUE(
      absl::IsUnauthenticated(other->OpenSegment(q.owner->LocalEndpoint(), q.seg.id).status()));
}

}  // namespace
}  // namespace mooncake::transport_internal
