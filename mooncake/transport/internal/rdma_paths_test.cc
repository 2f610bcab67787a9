// RdmaEngine over several local paths (RdmaOptions::paths): spreading a
// peer's WRs over them by the capacity they show, moving a failed path's WRs
// to the others, and the limits of the options.
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/transport/internal/fake_rdma_kit.h"
#include "mooncake/transport/internal/fake_verbs.h"
#include "mooncake/transport/internal/rdma_engine.h"
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

// Two paths a side: the owner on devices o0 and o1, the requester on r0 and
// r1 (port 1 each), unless `requester_paths` says otherwise.
RdmaOptions TwoPaths(const std::string& prefix) {
  RdmaOptions o;
  o.paths = {RdmaPath{prefix + "0", 1, 0, 1}, RdmaPath{prefix + "1", 1, 0, 1}};
  o.wr_bytes_max = 64 << 10;
  o.io_timeout = absl::Seconds(2);
  return o;
}

struct Fixture {
  std::shared_ptr<FakeFabric> fabric;
  std::unique_ptr<FakeRdma> owner, requester;
  std::vector<std::byte> memory;
  transport::SegmentDesc seg;
  transport::RemoteSegment remote;

  Fixture(uint64_t length, RdmaOptions owner_options, RdmaOptions requester_options,
          FakeFabricLimits limits = {}) {
    fabric = std::make_shared<FakeFabric>(std::vector<std::string>{"o0", "o1", "r0", "r1"}, limits);
    owner = std::move(*FakeRdma::Create(FakeVerbs(fabric), owner_options));
    auto r = FakeRdma::Create(FakeVerbs(fabric), requester_options);
    MC_ASSERT(r.ok(), "requester must start");
    requester = std::move(*r);
    memory.resize(length);
    FillPattern(memory.data(), length, 1);
    seg = *owner->RegisterMemory(memory.data(), length, MemoryLocation::HostDram());
    auto opened = requester->OpenSegment(owner->LocalEndpoint(), seg.id);
    MC_ASSERT(opened.ok(), "open must succeed");
    remote = *opened;
  }
  absl::StatusOr<BatchResult> Run(const std::vector<TransferRequest>& reqs,
                                  transport::SegmentHandle handle = 0) {
    std::vector<TransferRequest> with = reqs;
    for (TransferRequest& r : with) r.segment = handle != 0 ? handle : remote.handle;
    auto id = requester->Submit(with);
    if (!id.ok()) return id.status();
    return requester->Wait(*id, absl::Now() + absl::Seconds(20));
  }
  TransferRequest Req(OpCode op, void* local, uint64_t off, uint64_t len) const {
    return TransferRequest{op, local, remote.handle, off, len};
  }
};

uint64_t TotalBytes(const std::vector<RdmaPathStats>& stats) {
  return std::accumulate(stats.begin(), stats.end(), uint64_t{0},
                         [](uint64_t n, const RdmaPathStats& s) { return n + s.bytes_done; });
}

TEST(RdmaPathsTest, APeersReadsAndWritesSpreadOverBothPaths) {
  constexpr uint64_t kLen = 4 << 20;  // 64 WRs of 64 KiB
  Fixture f(kLen, TwoPaths("o"), TwoPaths("r"));
  std::vector<std::byte> dst(kLen);
  auto r = f.Run({f.Req(OpCode::kRead, dst.data(), 0, kLen)});
  ASSERT_TRUE(r.ok() && r->ok()) << (r.ok() ? r->FirstError() : r.status());
  EXPECT_EQ(CheckPattern(dst.data(), kLen, 1), -1);
  std::vector<RdmaPathStats> stats = f.requester->path_stats();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].name, "r0:1");
  EXPECT_EQ(stats[1].name, "r1:1");
  EXPECT_GT(stats[0].bytes_done, kLen / 4) << stats[1].bytes_done;
  EXPECT_GT(stats[1].bytes_done, kLen / 4) << stats[0].bytes_done;
  EXPECT_EQ(TotalBytes(stats), kLen);

  FillPattern(dst.data(), kLen, 7);
  r = f.Run({f.Req(OpCode::kWrite, dst.data(), 0, kLen)});
  ASSERT_TRUE(r.ok() && r->ok()) << (r.ok() ? r->FirstError() : r.status());
  EXPECT_EQ(CheckPattern(f.memory.data(), kLen, 7), -1);
  EXPECT_EQ(TotalBytes(f.requester->path_stats()), 2 * kLen);
  // Each requester path met its own owner path: one passive QP on each.
  EXPECT_EQ(f.fabric->live_qps(), 4u);
}

// Two ports of one device (a dual-port NIC) are two paths too.
TEST(RdmaPathsTest, TheTwoPortsOfOneDeviceAreTwoPaths) {
  FakeFabricLimits limits;
  limits.ports = 2;
  RdmaOptions owner, requester;
  owner.paths = {RdmaPath{"o0", 1, 0, 1}, RdmaPath{"o0", 2, 0, 1}};
  requester.paths = {RdmaPath{"r0", 1, 0, 1}, RdmaPath{"r0", 2, 0, 1}};
  requester.wr_bytes_max = 64 << 10;
  constexpr uint64_t kLen = 2 << 20;
  Fixture f(kLen, owner, requester, limits);
  std::vector<std::byte> dst(kLen);
  auto r = f.Run({f.Req(OpCode::kRead, dst.data(), 0, kLen)});
  ASSERT_TRUE(r.ok() && r->ok()) << (r.ok() ? r->FirstError() : r.status());
  EXPECT_EQ(CheckPattern(dst.data(), kLen, 1), -1);
  const std::vector<RdmaPathStats> stats = f.requester->path_stats();
  EXPECT_EQ(stats[0].name, "r0:1");
  EXPECT_EQ(stats[1].name, "r0:2");
  EXPECT_GT(stats[0].bytes_done, 0u);
  EXPECT_GT(stats[1].bytes_done, 0u);
}

// A path that completes an eighth as many WRs per poll (a slower link) takes
// a smaller share: paths take WRs as their windows drain.
TEST(RdmaPathsTest, AFasterPathCarriesMore) {
  RdmaOptions requester = TwoPaths("r");
  requester.path_window_bytes = 256 << 10;  // 4 WRs a path
  constexpr uint64_t kLen = 8 << 20;
  Fixture f(kLen, TwoPaths("o"), requester);
  f.fabric->SetPortExecutePerPoll("r1", 1, 1);  // r0 keeps 8
  std::vector<std::byte> dst(kLen);
  auto r = f.Run({f.Req(OpCode::kRead, dst.data(), 0, kLen)});
  ASSERT_TRUE(r.ok() && r->ok()) << (r.ok() ? r->FirstError() : r.status());
  EXPECT_EQ(CheckPattern(dst.data(), kLen, 1), -1);
  const std::vector<RdmaPathStats> stats = f.requester->path_stats();
  EXPECT_GT(stats[0].bytes_done, 2 * stats[1].bytes_done)
      << stats[0].bytes_done << " vs " << stats[1].bytes_done;
  EXPECT_GT(stats[1].bytes_done, 0u);
}

// A path that fails mid-batch: its WRs move to the other path and the batch
// completes with the right bytes; the broken path's queue pair is counted.
TEST(RdmaPathsTest, AFailingPathsWorkMovesToTheOther) {
  constexpr uint64_t kLen = 4 << 20;
  Fixture f(kLen, TwoPaths("o"), TwoPaths("r"));
  std::vector<std::byte> dst(kLen);
  std::vector<TransferRequest> reqs;
  for (uint64_t i = 0; i < 8; ++i) {
    reqs.push_back(f.Req(OpCode::kRead, dst.data() + i * (kLen / 8), i * (kLen / 8), kLen / 8));
  }
  f.fabric->FailNthWr(5, WcStatus::kRetryExcErr);
  auto r = f.Run(reqs);
  ASSERT_TRUE(r.ok() && r->ok()) << (r.ok() ? r->FirstError() : r.status());
  EXPECT_EQ(CheckPattern(dst.data(), kLen, 1), -1);
  const std::vector<RdmaPathStats> stats = f.requester->path_stats();
  EXPECT_EQ(stats[0].breaks + stats[1].breaks, 1u);
  EXPECT_GE(stats[0].wrs_moved + stats[1].wrs_moved, 1u);
  EXPECT_EQ(TotalBytes(stats), kLen);

  // The handle keeps its live path; a new open connects both paths again.
  std::fill(dst.begin(), dst.end(), std::byte{0});
  r = f.Run({f.Req(OpCode::kRead, dst.data(), 0, kLen)});
  ASSERT_TRUE(r.ok() && r->ok()) << (r.ok() ? r->FirstError() : r.status());
  EXPECT_EQ(CheckPattern(dst.data(), kLen, 1), -1);
  auto reopened = f.requester->OpenSegment(f.owner->LocalEndpoint(), f.seg.id);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  const std::vector<RdmaPathStats> before = f.requester->path_stats();
  r = f.Run({f.Req(OpCode::kRead, dst.data(), 0, kLen)}, reopened->handle);
  ASSERT_TRUE(r.ok() && r->ok()) << (r.ok() ? r->FirstError() : r.status());
  const std::vector<RdmaPathStats> after = f.requester->path_stats();
  EXPECT_GT(after[0].bytes_done, before[0].bytes_done);
  EXPECT_GT(after[1].bytes_done, before[1].bytes_done);
}

// A port that is down from the start: every WR it tries moves; the other
// path carries the batch. With both down the requests fail Unavailable.
TEST(RdmaPathsTest, APortDownLeavesTheOtherAndBothDownFail) {
  constexpr uint64_t kLen = 1 << 20;
  Fixture f(kLen, TwoPaths("o"), TwoPaths("r"));
  std::vector<std::byte> dst(kLen);
  f.fabric->SetPortDown("r1", 1, true);
  auto r = f.Run({f.Req(OpCode::kRead, dst.data(), 0, kLen)});
  ASSERT_TRUE(r.ok() && r->ok()) << (r.ok() ? r->FirstError() : r.status());
  EXPECT_EQ(CheckPattern(dst.data(), kLen, 1), -1);
  std::vector<RdmaPathStats> stats = f.requester->path_stats();
  EXPECT_EQ(stats[0].bytes_done, kLen);
  EXPECT_EQ(stats[1].bytes_done, 0u);
  EXPECT_EQ(stats[1].breaks, 1u);
  EXPECT_GE(stats[1].wrs_moved, 1u);

  f.fabric->SetPortDown("r0", 1, true);
  auto reopened = f.requester->OpenSegment(f.owner->LocalEndpoint(), f.seg.id);
  ASSERT_TRUE(reopened.ok()) << reopened.status();  // the control channel is TCP
  r = f.Run({f.Req(OpCode::kRead, dst.data(), 0, kLen)}, reopened->handle);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->statuses[0].code(), absl::StatusCode::kUnavailable) << r->statuses[0];
  f.fabric->SetPortDown("r0", 1, false);
  f.fabric->SetPortDown("r1", 1, false);
  reopened = f.requester->OpenSegment(f.owner->LocalEndpoint(), f.seg.id);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  r = f.Run({f.Req(OpCode::kRead, dst.data(), 0, kLen)}, reopened->handle);
  ASSERT_TRUE(r.ok() && r->ok()) << (r.ok() ? r->FirstError() : r.status());
}

// The owner refusing a key is not the path's fault: the request fails with
// NotFound, none of its WRs is moved to another path, and its WRs still
// queued are never posted. (Each path that had posted one breaks: an error
// completion ends an RC queue pair.)
TEST(RdmaPathsTest, ARefusedKeyFailsTheRequestWithoutMovingIt) {
  constexpr uint64_t kLen = 4 << 20;
  RdmaOptions requester = TwoPaths("r");
  requester.path_window_bytes = 128 << 10;  // most WRs wait in the queue
  Fixture f(kLen, TwoPaths("o"), requester);
  ASSERT_TRUE(f.owner->UnregisterMemory(f.seg.id).ok());
  std::vector<std::byte> dst(kLen);
  const uint64_t posted_before = f.fabric->stats().wrs_posted;
  auto r = f.Run({f.Req(OpCode::kRead, dst.data(), 0, kLen)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->statuses[0].code(), absl::StatusCode::kNotFound) << r->statuses[0];
  const std::vector<RdmaPathStats> stats = f.requester->path_stats();
  EXPECT_EQ(stats[0].wrs_moved + stats[1].wrs_moved, 0u);
  EXPECT_LE(stats[0].breaks + stats[1].breaks, 2u);
  // At most the two windows' WRs were posted, not the 64 of the request.
  EXPECT_LE(f.fabric->stats().wrs_posted - posted_before, 4u);
}

// A requester with two paths and an owner with one: both requester paths
// meet the owner's only path.
TEST(RdmaPathsTest, TwoPathsReachAnOwnerWithOne) {
  RdmaOptions owner;
  owner.device_name = "o0";
  constexpr uint64_t kLen = 1 << 20;
  Fixture f(kLen, owner, TwoPaths("r"));
  std::vector<std::byte> dst(kLen);
  auto r = f.Run({f.Req(OpCode::kRead, dst.data(), 0, kLen)});
  ASSERT_TRUE(r.ok() && r->ok()) << (r.ok() ? r->FirstError() : r.status());
  EXPECT_EQ(CheckPattern(dst.data(), kLen, 1), -1);
  const std::vector<RdmaPathStats> stats = f.requester->path_stats();
  EXPECT_GT(stats[0].bytes_done, 0u);
  EXPECT_GT(stats[1].bytes_done, 0u);
}

// Cancel with WRs still queued for the group: they are dropped, the batch is
// released, and the paths carry the next batch.
TEST(RdmaPathsTest, CancelDropsQueuedWork) {
  RdmaOptions requester = TwoPaths("r");
  requester.io_timeout = absl::Milliseconds(100);
  requester.path_window_bytes = 64 << 10;
  constexpr uint64_t kLen = 2 << 20;
  Fixture f(kLen, TwoPaths("o"), requester);
  std::vector<std::byte> dst(kLen);
  f.fabric->Stall(true);
  const std::vector<TransferRequest> reqs = {f.Req(OpCode::kRead, dst.data(), 0, kLen)};
  auto id = f.requester->Submit(reqs);
  ASSERT_TRUE(id.ok()) << id.status();
  auto cancelled = f.requester->Cancel(*id);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->statuses[0].code(), absl::StatusCode::kCancelled);
  f.fabric->Stall(false);
  auto reopened = f.requester->OpenSegment(f.owner->LocalEndpoint(), f.seg.id);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  auto r = f.Run({f.Req(OpCode::kRead, dst.data(), 0, kLen)}, reopened->handle);
  ASSERT_TRUE(r.ok() && r->ok()) << (r.ok() ? r->FirstError() : r.status());
  EXPECT_EQ(CheckPattern(dst.data(), kLen, 1), -1);
}

TEST(RdmaPathsTest, PathListsParse) {
  auto paths = ParseRdmaPaths("mlx5_0:1, mlx5_1:2:3,rxe0");
  ASSERT_TRUE(paths.ok()) << paths.status();
  ASSERT_EQ(paths->size(), 3u);
  EXPECT_EQ((*paths)[0].device_name, "mlx5_0");
  EXPECT_EQ((*paths)[1].port, 2);
  EXPECT_EQ((*paths)[1].gid_index, 3);
  EXPECT_EQ((*paths)[2].device_name, "rxe0");
  EXPECT_EQ((*paths)[2].port, 1);
  EXPECT_EQ((*paths)[2].gid_index, 0);
  for (const char* bad : {"", ",", "mlx5_0:0", "mlx5_0:256", "mlx5_0:x", "mlx5_0:1:-1", ":1",
                          "mlx5_0:1:2:3", "a,b,c,d,e,f,g,h,i"}) {
    const absl::Status s = ParseRdmaPaths(bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseRdmaPaths("mlx5_0:1,mlx5_1:x").status().message().find("mlx5_1:x"),
            absl::string_view::npos);
}

TEST(RdmaPathsTest, OptionsAreChecked) {
  auto fabric = std::make_shared<FakeFabric>(std::vector<std::string>{"d0", "d1"});
  auto make = [&](RdmaOptions o) { return FakeRdma::Create(FakeVerbs(fabric), o).status(); };
  RdmaOptions twice;
  twice.paths = {RdmaPath{"d0", 1, 0, 1}, RdmaPath{"d0", 1, 0, 1}};
  EXPECT_EQ(make(twice).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(make(twice).message().find("d0:1"), absl::string_view::npos) << make(twice);
  RdmaOptions many;
  for (int i = 0; i < 9; ++i) many.paths.push_back(RdmaPath{"d0", 1, 0, 1});
  EXPECT_EQ(make(many).code(), absl::StatusCode::kInvalidArgument);
  RdmaOptions weightless;
  weightless.paths = {RdmaPath{"d0", 1, 0, 0}};
  EXPECT_EQ(make(weightless).code(), absl::StatusCode::kInvalidArgument);
  RdmaOptions no_port;
  no_port.paths = {RdmaPath{"d0", 0, 0, 1}};
  EXPECT_EQ(make(no_port).code(), absl::StatusCode::kInvalidArgument);
  RdmaOptions no_window = TwoPaths("d");
  no_window.path_window_bytes = 0;
  EXPECT_EQ(make(no_window).code(), absl::StatusCode::kInvalidArgument);
  RdmaOptions unknown;
  unknown.paths = {RdmaPath{"d0", 1, 0, 1}, RdmaPath{"mlx9", 1, 0, 1}};
  EXPECT_EQ(make(unknown).code(), absl::StatusCode::kNotFound);
  RdmaOptions second_port;  // the fake's devices have one port
  second_port.paths = {RdmaPath{"d0", 2, 0, 1}};
  const absl::Status s = make(second_port);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("d0:2"), absl::string_view::npos) << s;
  EXPECT_EQ(fabric->live_qps(), 0u);
  EXPECT_EQ(fabric->live_mrs(), 0u);
  EXPECT_TRUE(make(TwoPaths("d")).ok());
}

}  // namespace
}  // namespace mooncake::transport_internal

// The conformance kit over two paths a side.
namespace mooncake::transport_internal {
namespace {

std::shared_ptr<FakeFabric> TwoPathFabric() {
  static auto* fabric = new std::shared_ptr<FakeFabric>(
      std::make_shared<FakeFabric>(std::vector<std::string>{"p0", "p1"}));
  return *fabric;
}

struct TwoPorts {
  static std::shared_ptr<FakeFabric> Fabric() { return TwoPathFabric(); }
  static RdmaOptions Options() {
    RdmaOptions o = TwoPaths("p");
    o.path_window_bytes = 128 << 10;
    o.io_timeout = absl::Seconds(5);
    return o;
  }
};
using TwoPathFakeRdmaFactory = FakeRdmaKitFactory<TwoPorts>;

}  // namespace
}  // namespace mooncake::transport_internal

namespace mooncake::transport {
INSTANTIATE_TYPED_TEST_SUITE_P(TwoPathFakeRdma, TransportConformanceTest,
                               transport_internal::TwoPathFakeRdmaFactory);
}  // namespace mooncake::transport
