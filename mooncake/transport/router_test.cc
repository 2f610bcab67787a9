#include "mooncake/transport/router.h"

#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/value_checksum.h"
#include "mooncake/transport/fault_injecting_transport.h"
#include "mooncake/transport/local_transport.h"
#include "mooncake/transport/tcp_transport.h"
#include "mooncake/transport/transport_testing.h"

namespace mooncake::transport {
namespace {

namespace ti = transport_testing_internal;
using FaultyLocal = FaultInjectingTransport<LocalTransport>;

std::unique_ptr<TcpTransport> MakeTcp() {
  auto t = TcpTransport::Create(TcpTransport::Options{});
  MC_ASSERT(t.ok(), "TCP transport must start on loopback");
  return std::move(*t);
}

struct RouterFactory {
  using Transport = Router;
  static constexpr bool kCrossProcess = true;  // across processes the TCP route serves
  static constexpr bool kUnregisterRevokes = true;
  static constexpr bool kMappingSurvivesOwner = false;
  static constexpr bool kDigestsOnLanding = true;
  static std::unique_ptr<Router> Make() {
    RouterOptions o;
    o.slice_bytes = 512 << 10;
    auto r = Router::Create(o, std::make_unique<LocalTransport>(), MakeTcp());
    MC_ASSERT(r.ok(), "router must start");
    return std::move(*r);
  }
  static absl::StatusOr<KitBuffer> Allocate(uint64_t length) {
    return AllocateHeapKitBuffer(length);
  }
};
INSTANTIATE_TYPED_TEST_SUITE_P(Router, TransportConformanceTest, RouterFactory);

absl::StatusOr<BatchResult> RunOn(Router& r, const std::vector<TransferRequest>& reqs) {
  auto id = r.Submit(reqs);
  if (!id.ok()) return id.status();
  return r.Wait(*id, absl::Now() + absl::Seconds(20));
}

// An owner router (local + TCP) holding `length` bytes of pattern 1, and a
// requester router whose local route goes through a fault injector.
struct Fixture {
  std::unique_ptr<Router> owner, requester;
  FaultyLocal* faulty = nullptr;  // owned by `requester`
  std::vector<std::byte> memory;
  SegmentDesc seg;
  RemoteSegment remote;

  Fixture(uint64_t length, RouterOptions options, InjectedFaults faults = {}) {
    owner = std::move(*Router::Create(options, std::make_unique<LocalTransport>(), MakeTcp()));
    auto f = std::make_unique<FaultyLocal>(std::make_unique<LocalTransport>(), faults);
    faulty = f.get();
    requester = std::move(*Router::Create(options, std::move(f), MakeTcp()));
    memory.resize(length);
    ti::FillPattern(memory.data(), length, 1);
    seg = *owner->RegisterMemory(memory.data(), length, MemoryLocation::HostDram());
    auto r = requester->OpenSegment(owner->LocalEndpoint(), seg.id);
    MC_ASSERT(r.ok(), "open must succeed");
    remote = *r;
  }
  std::vector<TransferRequest> Reads(std::byte* dst, size_t n, uint64_t each) const {
    std::vector<TransferRequest> reqs;
    for (size_t i = 0; i < n; ++i) {
      reqs.push_back({OpCode::kRead, dst + i * each, remote.handle, i * each, each});
    }
    return reqs;
  }
};

TEST(RouterTest, PrefersTheSameProcessRoute) {
  Fixture f(1 << 20, RouterOptions{});
  std::vector<std::byte> dst(1 << 20);
  auto r = RunOn(*f.requester, f.Reads(dst.data(), 4, 256 << 10));
  ASSERT_TRUE(r.ok() && r->ok());
  EXPECT_EQ(ti::CheckPattern(dst.data(), dst.size(), 1), -1);
  const auto stats = f.requester->route_stats();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].name, "local");
  EXPECT_EQ(stats[1].name, "tcp");
  EXPECT_EQ(stats[0].slices_ok, 4u);
  EXPECT_EQ(stats[1].slices_ok, 0u);
}

// An owner that claims another process: the local route must not be used
// (a "local://N" instance id means nothing across processes), TCP serves.
TEST(RouterTest, SkipsProcessLocalRoutesForOtherProcesses) {
  Fixture f(256 << 10, RouterOptions{});
  std::string ep = f.owner->LocalEndpoint();
  const std::string pid = absl::StrCat("/", ::getpid(), "|");
  const size_t at = ep.find(pid);
  ASSERT_NE(at, std::string::npos) << ep;
  ep.replace(at, pid.size(), "/1|");
  auto remote = f.requester->OpenSegment(ep, f.seg.id);
  ASSERT_TRUE(remote.ok()) << remote.status();
  std::vector<std::byte> dst(256 << 10);
  auto r = RunOn(*f.requester, {{OpCode::kRead, dst.data(), remote->handle, 0, dst.size()}});
  ASSERT_TRUE(r.ok() && r->ok());
  EXPECT_EQ(ti::CheckPattern(dst.data(), dst.size(), 1), -1);
  EXPECT_EQ(f.requester->route_stats()[0].slices_ok, 0u);
  EXPECT_GE(f.requester->route_stats()[1].slices_ok, 1u);
}

// The target: a batch whose transport fails midway completes on the
// fallback with the right bytes.
TEST(RouterTest, BatchWhoseTransportFailsMidwayCompletesOnTheFallback) {
  RouterOptions o;
  o.slice_bytes = 64 << 10;
  Fixture f(2 << 20, o);
  f.faulty->SetFaults(InjectedFaults{.fail_after_requests = 3});
  std::vector<std::byte> dst(2 << 20);
  auto r = RunOn(*f.requester, f.Reads(dst.data(), 8, 256 << 10));  // 32 slices
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok()) << r->FirstError();
  EXPECT_EQ(ti::CheckPattern(dst.data(), dst.size(), 1), -1);
  const auto stats = f.requester->route_stats();
  EXPECT_EQ(stats[0].slices_ok, 3u);
  EXPECT_EQ(stats[0].slices_failed, 29u);
  EXPECT_EQ(stats[1].slices_ok, 29u);
  EXPECT_EQ(f.requester->failovers(), 29u);

  // Writes fail over the same way, and land exactly.
  std::vector<std::byte> src(1 << 20);
  ti::FillPattern(src.data(), src.size(), 2);
  f.faulty->SetFaults(InjectedFaults{.fail_after_requests = 5});
  auto w = RunOn(*f.requester, {{OpCode::kWrite, src.data(), f.remote.handle, 4096, src.size()}});
  ASSERT_TRUE(w.ok() && w->ok()) << (w.ok() ? w->FirstError() : w.status());
  EXPECT_EQ(ti::CheckPattern(f.memory.data(), 4096, 1), -1);
  EXPECT_EQ(ti::CheckPattern(f.memory.data() + 4096, src.size(), 2), -1);
  EXPECT_EQ(ti::CheckPattern(f.memory.data() + 4096 + src.size(), 4096, 1, 4096 + src.size()), -1);
}

// A route that digested bytes and then failed must not leave its digests
// behind for the route that writes the bytes again: the fallback (TCP with
// 96 KiB slices under the router's 256 KiB ones) digests only each router
// slice's last chunk, the one its last TCP slice holds whole.
TEST(RouterTest, FailoverResetsChunkDigests) {
  RouterOptions o;
  o.slice_bytes = 256 << 10;
  auto owner = std::move(*Router::Create(o, std::make_unique<LocalTransport>(), MakeTcp()));
  TcpTransport::Options to;
  to.slice_bytes = 96 << 10;
  auto faulty = std::make_unique<FaultyLocal>(
      std::make_unique<LocalTransport>(),
      InjectedFaults{.fail_after_requests = 0, .poison_digests = true});
  auto requester =
      std::move(*Router::Create(o, std::move(faulty), std::move(*TcpTransport::Create(to))));
  std::vector<std::byte> memory(1 << 20);
  ti::FillPattern(memory.data(), memory.size(), 3);
  const SegmentDesc seg =
      *owner->RegisterMemory(memory.data(), memory.size(), MemoryLocation::HostDram());
  const RemoteSegment remote = *requester->OpenSegment(owner->LocalEndpoint(), seg.id);
  std::vector<std::byte> dst(memory.size());
  std::vector<uint64_t> d(DigestChunkCount(dst.size()), kNoDigest);
  TransferRequest req{OpCode::kRead, dst.data(), remote.handle, 0, dst.size(), d.data()};
  auto r = RunOn(*requester, {req});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->ok()) << r->FirstError();
  EXPECT_EQ(ti::CheckPattern(dst.data(), dst.size(), 3), -1);
  EXPECT_GE(requester->failovers(), 1u);
  size_t left = 0;
  for (uint64_t k = 0; k < d.size(); ++k) {
    if (d[k] == kNoDigest) {
      ++left;
      continue;
    }
    EXPECT_EQ(d[k], ChunkDigest(dst.data() + k * kDigestChunkBytes, kDigestChunkBytes)) << k;
  }
  EXPECT_GT(left, 0u);        // chunks straddling TCP slices
  EXPECT_LT(left, d.size());  // the others digested on landing
  EXPECT_EQ(ValueChecksumWith(dst.data(), dst.size(), d.data()),
            ValueChecksum(dst.data(), dst.size()));
}

TEST(RouterTest, RetriesAreBoundedAndTheLastErrorIsReported) {
  RouterOptions o;
  o.retries_max = 0;
  Fixture f(256 << 10, o);
  f.faulty->SetFaults(InjectedFaults{.fail_after_requests = 0});
  std::vector<std::byte> dst(256 << 10);
  auto r = RunOn(*f.requester, f.Reads(dst.data(), 2, 128 << 10));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->failed_count(), 2u);
  EXPECT_EQ(r->statuses[0].code(), absl::StatusCode::kUnavailable) << r->statuses[0];
  EXPECT_EQ(f.requester->failovers(), 0u);
}

TEST(RouterTest, StalledRouteIsAbandonedAfterTheAttemptTimeout) {
  RouterOptions o;
  o.attempt_timeout = absl::Milliseconds(50);
  Fixture f(512 << 10, o);
  f.faulty->SetFaults(InjectedFaults{.stall = absl::Seconds(30)});
  std::vector<std::byte> dst(512 << 10);
  const absl::Time start = absl::Now();
  auto r = RunOn(*f.requester, f.Reads(dst.data(), 2, 256 << 10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok()) << r->FirstError();
  EXPECT_EQ(ti::CheckPattern(dst.data(), dst.size(), 1), -1);
  // The route stalls 30 s; the router gives up on it after 50 ms.
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

// One slice in flight at a time, each held 3 ms by the injected stall: a
// high-priority batch submitted behind 64 bulk requests finishes while most
// of the bulk still waits; at bulk priority it would finish last.
TEST(RouterTest, HighPriorityBatchOvertakesBulk) {
  for (const qos::ClassId cls : {qos::ClassId{0}, qos::ClassId{1}}) {
    RouterOptions o;
    o.slice_bytes = 16 << 10;
    o.slices_in_flight_max = 1;
    Fixture f(2 << 20, o, InjectedFaults{.stall = absl::Milliseconds(3)});
    std::vector<std::byte> bulk_dst(1 << 20), urgent_dst(16 << 10);
    auto bulk = f.requester->Submit(f.Reads(bulk_dst.data(), 64, 16 << 10));
    ASSERT_TRUE(bulk.ok());
    auto urgent = f.requester->SubmitWithPriority(
        std::vector<TransferRequest>{
            {OpCode::kRead, urgent_dst.data(), f.remote.handle, 1 << 20, urgent_dst.size()}},
        cls);
    ASSERT_TRUE(urgent.ok());
    auto u = f.requester->Wait(*urgent, absl::Now() + absl::Seconds(20));
    ASSERT_TRUE(u.ok() && u->ok());
    auto progress = f.requester->Poll(*bulk);
    ASSERT_TRUE(progress.ok());
    if (cls == 0) {
      EXPECT_LT(progress->succeeded_requests, 32u) << "the urgent batch waited for the bulk";
    } else {
      EXPECT_EQ(progress->succeeded_requests, 64u) << "same class: FIFO behind the bulk";
    }
    auto b = f.requester->Wait(*bulk, absl::Now() + absl::Seconds(20));
    ASSERT_TRUE(b.ok() && b->ok());
    EXPECT_EQ(ti::CheckPattern(bulk_dst.data(), bulk_dst.size(), 1), -1);
    EXPECT_EQ(ti::CheckPattern(urgent_dst.data(), urgent_dst.size(), 1, 1 << 20), -1);
  }
}

// The direct path: with nothing queued, a batch within the in-flight budget is
// handed to its (local) transport by Submit itself, so the bytes are there
// before Wait; a batch over the budget goes through the dispatcher.
TEST(RouterTest, SmallBatchOnAnIdleRouterIsCopiedInsideSubmit) {
  RouterOptions o;
  o.slice_bytes = 64 << 10;
  o.slices_in_flight_max = 4;
  Fixture f(1 << 20, o);
  std::vector<std::byte> dst(256 << 10);
  auto id = f.requester->Submit(f.Reads(dst.data(), 1, dst.size()));  // 4 slices: fits
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(f.requester->direct_batches(), 1u);
  EXPECT_EQ(ti::CheckPattern(dst.data(), dst.size(), 1), -1) << "copied before Wait";
  auto r = f.requester->Wait(*id, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(r.ok() && r->ok());
  EXPECT_EQ(f.requester->Wait(*id, absl::Now()).status().code(), absl::StatusCode::kNotFound);

  std::vector<std::byte> big(512 << 10);
  auto q = RunOn(*f.requester, f.Reads(big.data(), 1, big.size()));  // 8 slices: queued
  ASSERT_TRUE(q.ok() && q->ok());
  EXPECT_EQ(f.requester->direct_batches(), 1u);
  EXPECT_EQ(ti::CheckPattern(big.data(), big.size(), 1), -1);
  EXPECT_EQ(f.requester->route_stats()[0].slices_ok, 12u);
}

// Poll alone drives a direct batch to completion (nobody has to Wait), and
// the result is then collected without blocking.
TEST(RouterTest, PollCollectsADirectBatch) {
  Fixture f(1 << 20, RouterOptions{}, InjectedFaults{.stall = absl::Milliseconds(20)});
  std::vector<std::byte> dst(128 << 10);
  auto id = f.requester->Submit(f.Reads(dst.data(), 2, 64 << 10));
  ASSERT_TRUE(id.ok());
  ASSERT_EQ(f.requester->direct_batches(), 1u);
  absl::StatusOr<BatchProgress> p = f.requester->Poll(*id);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->done()) << "the stalled route still holds it";
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (p.ok() && !p->done() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
    p = f.requester->Poll(*id);
  }
  ASSERT_TRUE(p.ok() && p->done());
  EXPECT_EQ(p->succeeded_requests, 2u);
  auto r = f.requester->Wait(*id, absl::InfinitePast());
  ASSERT_TRUE(r.ok() && r->ok()) << (r.ok() ? r->FirstError() : r.status());
  EXPECT_EQ(ti::CheckPattern(dst.data(), dst.size(), 1), -1);
}

// A Wait whose deadline passes leaves the direct batch in flight; a later
// Wait collects it. Cancel from another thread while one Waits settles it
// once: the canceller gets the result, the waiter NotFound.
TEST(RouterTest, DirectBatchSurvivesAnEarlyDeadlineAndACancelDuringWait) {
  RouterOptions o;
  o.attempt_timeout = absl::Seconds(1);  // the injected stall sleeps the waiter this long
  Fixture f(1 << 20, o, InjectedFaults{.stall = absl::Milliseconds(200)});
  std::vector<std::byte> dst(64 << 10);
  auto id = f.requester->Submit(f.Reads(dst.data(), 1, dst.size()));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(f.requester->Wait(*id, absl::Now() + absl::Milliseconds(5)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  auto r = f.requester->Wait(*id, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(r.ok() && r->ok());
  EXPECT_EQ(ti::CheckPattern(dst.data(), dst.size(), 1), -1);

  f.faulty->SetFaults(InjectedFaults{.stall = absl::Seconds(30)});
  auto slow = f.requester->Submit(f.Reads(dst.data(), 1, dst.size()));
  ASSERT_TRUE(slow.ok());
  absl::StatusOr<BatchResult> waited = absl::UnknownError("unset");
  std::thread waiter([&] { waited = f.requester->Wait(*slow, absl::Now() + absl::Seconds(20)); });
  absl::SleepFor(absl::Milliseconds(20));
  const absl::Time start = absl::Now();
  auto cancelled = f.requester->Cancel(*slow);
  waiter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  // The injected stall hides a copy that already happened: OK or Cancelled.
  EXPECT_TRUE(cancelled->statuses[0].ok() || absl::IsCancelled(cancelled->statuses[0]))
      << cancelled->statuses[0];
  EXPECT_EQ(waited.status().code(), absl::StatusCode::kNotFound) << waited.status();
  EXPECT_EQ(f.requester->failovers(), 0u) << "a cancelled batch is not retried";
}

TEST(RouterTest, RejectsBadConfigurationsAndEndpoints) {
  EXPECT_EQ(
      RouterFactory::Make()
          ->SubmitWithPriority(std::vector<TransferRequest>{{OpCode::kRead, nullptr, 1, 0, 1}}, 7)
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  RouterOptions zero;
  zero.slice_bytes = 0;
  EXPECT_EQ(Router::Create(zero, std::make_unique<LocalTransport>()).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto r = RouterFactory::Make();
  EXPECT_EQ(r->OpenSegment("tcp://127.0.0.1:1", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r->OpenSegment("router://h/1|local://1", 12345).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(RouterIdsTest, PackedIdsRoundTripAndArbitraryIdsAreRejected) {
  using namespace transport_internal;
  const std::array<uint64_t, kRouterTransportsMax> sub = {1, 0, 4095, 17};
  const uint64_t id = PackRouterId(sub);
  EXPECT_NE(id, 0u);
  auto back = UnpackRouterId(id);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, sub);
  int accepted = 0;
  for (uint64_t x = 1; x < 100000; ++x) accepted += UnpackRouterId(x).has_value() ? 1 : 0;
  EXPECT_EQ(accepted, 0) << "small arbitrary ids must not name a segment";
  EXPECT_FALSE(UnpackRouterId(id ^ 1).has_value());
  auto e = ParseRouterEndpoint("router://host-a/42|local://3|tcp://127.0.0.1:9");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->host, "host-a");
  EXPECT_EQ(e->pid, 42);
  EXPECT_EQ(e->endpoints, (std::vector<std::string>{"local://3", "tcp://127.0.0.1:9"}));
  EXPECT_EQ(FormatRouterEndpoint(*e), "router://host-a/42|local://3|tcp://127.0.0.1:9");
  for (const char* bad :
       {"router://h/1", "router:///1|x://y", "router://h/x|a://b", "router://h/1|a://b||c://d",
        "rdma://h/1|a://b", "router://h/1|a://1|b://2|c://3|d://4|e://5"}) {
    EXPECT_FALSE(ParseRouterEndpoint(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace mooncake::transport
