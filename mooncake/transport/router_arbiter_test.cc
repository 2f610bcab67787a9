// The Router with a cross-process arbiter on a route (RouterOptions::arbiters,
// qos/shm_arbiter.h): slices take grants, wait while the link's budget is
// another participant's, and give the bytes back however they end.
#include <unistd.h>

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/assert.h"
#include "mooncake/qos/shm_arbiter.h"
#include "mooncake/transport/fault_injecting_transport.h"
#include "mooncake/transport/local_transport.h"
#include "mooncake/transport/router.h"
#include "mooncake/transport/tcp_transport.h"
#include "mooncake/transport/transport_testing.h"

namespace mooncake::transport {
namespace {

namespace ti = transport_testing_internal;
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TransportConformanceTest);
using qos::ShmArbiter;
using FaultyLocal = FaultInjectingTransport<LocalTransport>;

std::unique_ptr<TcpTransport> MakeTcp() {
  auto t = TcpTransport::Create(TcpTransport::Options{});
  MC_ASSERT(t.ok(), "TCP transport must start on loopback");
  return std::move(*t);
}

// A link of its own per test, removed at the end.
class Link {
 public:
  explicit Link(uint64_t capacity = 10'000'000'000, ShmArbiter::Options o = WithBurst(1 << 20))
      // Random: test processes in sandboxes of their own may share a pid and
      // still share /dev/shm.
      : name_(absl::StrCat("router_arbiter_test.", std::random_device{}(), ".", counter_++)),
        capacity_(capacity),
        options_(o) {}
  ~Link() { ShmArbiter::Remove(name_).IgnoreError(); }
  static ShmArbiter::Options WithBurst(uint64_t burst) {
    ShmArbiter::Options o;
    o.burst_bytes = burst;
    return o;
  }
  std::shared_ptr<ShmArbiter> Open() const {
    auto a = ShmArbiter::Open(name_, capacity_, options_);
    MC_ASSERT(a.ok(), "the test link must open");
    return std::shared_ptr<ShmArbiter>(std::move(*a));
  }
  const std::string& name() const { return name_; }

 private:
  static inline std::atomic<int> counter_{0};
  std::string name_;
  uint64_t capacity_;
  ShmArbiter::Options options_;
};

// An owner router (TCP) holding `length` bytes of pattern 1, and a requester
// router whose TCP route takes grants from `arbiter`.
struct Fixture {
  std::vector<std::byte> memory;  // first: freed after the routers have stopped
  std::unique_ptr<Router> owner, requester;
  SegmentDesc seg;
  RemoteSegment remote;

  Fixture(uint64_t length, std::shared_ptr<ShmArbiter> arbiter, RouterOptions o = Options()) {
    owner = std::move(*Router::Create(RouterOptions{}, MakeTcp()));
    o.arbiters.push_back(RouteArbiter{"tcp", std::move(arbiter)});
    auto r = Router::Create(o, MakeTcp());
    MC_ASSERT(r.ok(), "requester must start");
    requester = std::move(*r);
    memory.resize(length);
    ti::FillPattern(memory.data(), length, 1);
    seg = *owner->RegisterMemory(memory.data(), length, MemoryLocation::HostDram());
    auto opened = requester->OpenSegment(owner->LocalEndpoint(), seg.id);
    MC_ASSERT(opened.ok(), "open must succeed");
    remote = *opened;
  }
  static RouterOptions Options() {
    RouterOptions o;
    o.slice_bytes = 256 << 10;
    return o;
  }
  std::vector<TransferRequest> Read(std::byte* dst, uint64_t offset, uint64_t length) const {
    return {{OpCode::kRead, dst, remote.handle, offset, length}};
  }
  uint64_t Held() const { return requester->route_stats()[0].slices_held; }
};

int64_t InFlight(const ShmArbiter& a) {
  int64_t n = 0;
  for (const auto& c : a.Stats().classes) n += c.inflight_bytes;
  return n;
}

TEST(RouterArbiterTest, RejectsArbitersItCannotHonour) {
  Link link;
  auto arb = link.Open();
  const auto make = [](RouterOptions o) { return Router::Create(o, MakeTcp()).status(); };
  RouterOptions o = Fixture::Options();
  o.arbiters = {RouteArbiter{"tcp", nullptr}};
  EXPECT_EQ(make(o).code(), absl::StatusCode::kInvalidArgument);
  o.arbiters = {RouteArbiter{"rdma", arb}};
  EXPECT_NE(make(o).message().find("which the router lacks"), std::string::npos) << make(o);
  o.arbiters = {RouteArbiter{"tcp", arb}, RouteArbiter{"tcp", arb}};
  EXPECT_NE(make(o).message().find("two arbiters"), std::string::npos) << make(o);
  o.arbiters = {RouteArbiter{"tcp", arb}};
  o.slice_bytes = 2 << 20;  // above the 1 MiB burst
  EXPECT_NE(make(o).message().find("exceeds the largest grant"), std::string::npos) << make(o);
  o.slice_bytes = 256 << 10;
  o.arbiter_retry = absl::ZeroDuration();
  EXPECT_EQ(make(o).code(), absl::StatusCode::kInvalidArgument);

  // A bulk window below the slice size is refused for bulk classes only.
  Link windowed(10'000'000'000, [] {
    ShmArbiter::Options w = Link::WithBurst(1 << 20);
    w.bulk_inflight_max_bytes = 128 << 10;
    return w;
  }());
  o = Fixture::Options();
  o.arbiters = {RouteArbiter{"tcp", windowed.Open()}};
  EXPECT_NE(make(o).message().find("of class 1"), std::string::npos) << make(o);
  o.slice_bytes = 128 << 10;
  EXPECT_TRUE(make(o).ok()) << make(o);
  // A router of class 0 only never asks for bulk grants.
  o.slice_bytes = 256 << 10;
  o.priority_classes = 1;
  EXPECT_TRUE(make(o).ok()) << make(o);
}

TEST(RouterArbiterTest, EverySliceTakesAGrantInItsClassAndGivesItBack) {
  Link link;
  auto arb = link.Open();
  Fixture f(2 << 20, arb);
  std::vector<std::byte> dst(2 << 20);
  auto id = f.requester->Submit(f.Read(dst.data(), 0, dst.size()));  // bulk: 8 slices
  ASSERT_TRUE(id.ok());
  auto r = f.requester->Wait(*id, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(r.ok() && r->ok());
  EXPECT_EQ(ti::CheckPattern(dst.data(), dst.size(), 1), -1);
  std::vector<std::byte> small(64 << 10);
  id = f.requester->SubmitWithPriority(f.Read(small.data(), 0, small.size()), 0);
  ASSERT_TRUE(id.ok());
  r = f.requester->Wait(*id, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(r.ok() && r->ok());
  const auto stats = arb->Stats();
  EXPECT_EQ(stats.classes[1].granted_requests, 8u);
  EXPECT_EQ(stats.classes[1].granted_bytes, 2u << 20);
  EXPECT_EQ(stats.classes[0].granted_requests, 1u);
  EXPECT_EQ(stats.classes[0].granted_bytes, 64u << 10);
  EXPECT_EQ(InFlight(*arb), 0);
}

// Router classes beyond the arbiter's map to its last class.
TEST(RouterArbiterTest, ExtraRouterClassesShareTheArbitersLastClass) {
  Link link;
  RouterOptions o = Fixture::Options();
  o.priority_classes = 4;
  auto arb = link.Open();
  Fixture f(256 << 10, arb, o);
  std::vector<std::byte> dst(256 << 10);
  for (qos::ClassId c : {qos::ClassId{2}, qos::ClassId{3}}) {
    auto id = f.requester->SubmitWithPriority(f.Read(dst.data(), 0, dst.size()), c);
    ASSERT_TRUE(id.ok());
    auto r = f.requester->Wait(*id, absl::Now() + absl::Seconds(20));
    ASSERT_TRUE(r.ok() && r->ok());
  }
  EXPECT_EQ(arb->Stats().classes[1].granted_requests, 2u);
}

// Another participant's critical bytes in flight: bulk slices are held (not
// failed, not sent), a critical batch still goes at once, and the bulk goes
// when the other participant releases.
TEST(RouterArbiterTest, BulkWaitsForAnotherParticipantsCriticalBytes) {
  Link link;
  auto arb = link.Open();
  auto other = link.Open();  // as another engine on the host would
  Fixture f(4 << 20, arb);
  auto critical = other->Acquire(0, 64 << 10, absl::InfiniteFuture());
  ASSERT_TRUE(critical.ok());

  std::vector<std::byte> bulk_dst(2 << 20);
  auto bulk = f.requester->Submit(f.Read(bulk_dst.data(), 0, bulk_dst.size()));
  ASSERT_TRUE(bulk.ok());
  absl::SleepFor(absl::Milliseconds(30));
  auto p = f.requester->Poll(*bulk);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->succeeded_requests + p->failed_requests, 0u) << "bulk went past critical bytes";
  EXPECT_GE(f.Held(), 1u);
  EXPECT_EQ(arb->Stats().classes[1].granted_requests, 0u);

  std::vector<std::byte> urgent_dst(64 << 10);
  auto urgent =
      f.requester->SubmitWithPriority(f.Read(urgent_dst.data(), 3 << 20, urgent_dst.size()), 0);
  ASSERT_TRUE(urgent.ok());
  auto u = f.requester->Wait(*urgent, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(u.ok() && u->ok()) << (u.ok() ? u->FirstError() : u.status());
  EXPECT_EQ(ti::CheckPattern(urgent_dst.data(), urgent_dst.size(), 1, 3 << 20), -1);
  EXPECT_FALSE(f.requester->Poll(*bulk)->done());

  critical->Release();
  auto b = f.requester->Wait(*bulk, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(b.ok() && b->ok()) << (b.ok() ? b->FirstError() : b.status());
  EXPECT_EQ(ti::CheckPattern(bulk_dst.data(), bulk_dst.size(), 1), -1);
  EXPECT_EQ(arb->Stats().classes[1].granted_bytes, 2u << 20);
  EXPECT_EQ(InFlight(*arb), 0);
}

// Held bulk slices fill their class's share (slices_in_flight_max) and the
// rest of the bulk stays queued; a critical batch still goes past all of it.
TEST(RouterArbiterTest, AFullHoldOfBulkNeverHoldsUpACriticalBatch) {
  Link link;
  auto arb = link.Open();
  auto other = link.Open();
  RouterOptions o = Fixture::Options();
  o.slice_bytes = 64 << 10;
  o.slices_in_flight_max = 4;
  Fixture f(4 << 20, arb, o);
  auto critical = other->Acquire(0, 64 << 10, absl::InfiniteFuture());
  ASSERT_TRUE(critical.ok());
  std::vector<std::byte> bulk_dst(2 << 20);  // 32 slices: 4 held, 28 queued
  auto bulk = f.requester->Submit(f.Read(bulk_dst.data(), 0, bulk_dst.size()));
  ASSERT_TRUE(bulk.ok());
  absl::SleepFor(absl::Milliseconds(10));
  std::vector<std::byte> urgent_dst(64 << 10);
  auto urgent =
      f.requester->SubmitWithPriority(f.Read(urgent_dst.data(), 3 << 20, urgent_dst.size()), 0);
  ASSERT_TRUE(urgent.ok());
  auto u = f.requester->Wait(*urgent, absl::Now() + absl::Seconds(2));
  ASSERT_TRUE(u.ok() && u->ok()) << (u.ok() ? u->FirstError() : u.status());
  EXPECT_FALSE(f.requester->Poll(*bulk)->done());
  critical->Release();
  auto b = f.requester->Wait(*bulk, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(b.ok() && b->ok());
  EXPECT_EQ(ti::CheckPattern(bulk_dst.data(), bulk_dst.size(), 1), -1);
  EXPECT_EQ(InFlight(*arb), 0);
}

// Tokens rather than priority: a link of 16 MiB/s with a 256 KiB bucket
// paces 2 MiB of bulk to about (2 MiB - 256 KiB) / 16 MiB/s = 109 ms.
TEST(RouterArbiterTest, BulkIsPacedAtTheLinksCapacity) {
  Link link(16 << 20, Link::WithBurst(256 << 10));
  auto arb = link.Open();
  Fixture f(2 << 20, arb);
  std::vector<std::byte> dst(2 << 20);
  const absl::Time start = absl::Now();
  auto id = f.requester->Submit(f.Read(dst.data(), 0, dst.size()));
  ASSERT_TRUE(id.ok());
  auto r = f.requester->Wait(*id, absl::Now() + absl::Seconds(20));
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(r.ok() && r->ok());
  EXPECT_EQ(ti::CheckPattern(dst.data(), dst.size(), 1), -1);
  EXPECT_GE(took, absl::Milliseconds(90)) << "faster than the link's budget allows";
  EXPECT_GE(f.Held(), 1u);
}

TEST(RouterArbiterTest, CancelDropsHeldSlicesUnsent) {
  Link link;
  auto arb = link.Open();
  auto other = link.Open();
  Fixture f(2 << 20, arb);
  auto critical = other->Acquire(0, 64 << 10, absl::InfiniteFuture());
  ASSERT_TRUE(critical.ok());
  std::vector<std::byte> dst(2 << 20, std::byte{0});
  auto id = f.requester->Submit(f.Read(dst.data(), 0, dst.size()));
  ASSERT_TRUE(id.ok());
  absl::SleepFor(absl::Milliseconds(10));
  auto r = f.requester->Cancel(*id);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(absl::IsCancelled(r->FirstError())) << r->FirstError();
  critical->Release();
  absl::SleepFor(absl::Milliseconds(20));  // the dispatcher's next look at the held slices
  for (std::byte b : dst) ASSERT_EQ(b, std::byte{0}) << "a cancelled held slice was sent";
  EXPECT_EQ(arb->Stats().classes[1].granted_requests, 0u);
  EXPECT_EQ(InFlight(*arb), 0);
  // The router goes on serving.
  auto again = f.requester->Submit(f.Read(dst.data(), 0, dst.size()));
  ASSERT_TRUE(again.ok());
  auto a = f.requester->Wait(*again, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(a.ok() && a->ok());
  EXPECT_EQ(ti::CheckPattern(dst.data(), dst.size(), 1), -1);
}

// The direct path takes all of a batch's grants or none: refused, the batch
// goes through the dispatcher and waits there.
TEST(RouterArbiterTest, ADirectBatchTheArbiterRefusesIsQueued) {
  Link link;
  auto arb = link.Open();
  auto other = link.Open();
  Fixture f(1 << 20, arb);
  std::vector<std::byte> dst(256 << 10);
  auto id = f.requester->Submit(f.Read(dst.data(), 0, dst.size()));
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(f.requester->Wait(*id, absl::Now() + absl::Seconds(20))->ok());
  EXPECT_EQ(f.requester->direct_batches(), 1u);
  EXPECT_EQ(arb->Stats().classes[1].granted_requests, 1u);

  auto critical = other->Acquire(0, 64 << 10, absl::InfiniteFuture());
  ASSERT_TRUE(critical.ok());
  id = f.requester->Submit(f.Read(dst.data(), 256 << 10, dst.size()));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(f.requester->direct_batches(), 1u);
  auto early = f.requester->Wait(*id, absl::Now() + absl::Milliseconds(20));
  EXPECT_TRUE(absl::IsDeadlineExceeded(early.status())) << early.status();
  critical->Release();
  auto r = f.requester->Wait(*id, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(r.ok() && r->ok());
  EXPECT_EQ(ti::CheckPattern(dst.data(), dst.size(), 1, 256 << 10), -1);
  EXPECT_EQ(InFlight(*arb), 0);
}

// A slice that fails on an arbitrated route gives its grant back before it
// fails over to the next route.
TEST(RouterArbiterTest, FailoverReturnsTheFailedRoutesGrant) {
  Link link;
  auto arb = link.Open();
  RouterOptions o = Fixture::Options();
  o.arbiters.push_back(RouteArbiter{"local", arb});
  std::vector<std::byte> memory(1 << 20);  // first: freed after the routers have stopped
  ti::FillPattern(memory.data(), memory.size(), 1);
  // The owner has a TCP route for the fallback; the requester's local route
  // fails every request.
  auto owner =
      std::move(*Router::Create(RouterOptions{}, std::make_unique<LocalTransport>(), MakeTcp()));
  auto faulty = std::make_unique<FaultyLocal>(std::make_unique<LocalTransport>(),
                                              InjectedFaults{.fail_after_requests = 0});
  auto requester = Router::Create(o, std::move(faulty), MakeTcp());
  ASSERT_TRUE(requester.ok()) << requester.status();
  auto seg = owner->RegisterMemory(memory.data(), memory.size(), MemoryLocation::HostDram());
  ASSERT_TRUE(seg.ok());
  auto remote = (*requester)->OpenSegment(owner->LocalEndpoint(), seg->id);
  ASSERT_TRUE(remote.ok()) << remote.status();
  std::vector<std::byte> dst(1 << 20);
  auto id = (*requester)
                ->Submit(std::vector<TransferRequest>{
                    {OpCode::kRead, dst.data(), remote->handle, 0, dst.size()}});
  ASSERT_TRUE(id.ok());
  auto r = (*requester)->Wait(*id, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(r.ok() && r->ok()) << (r.ok() ? r->FirstError() : r.status());
  EXPECT_EQ(ti::CheckPattern(dst.data(), dst.size(), 1), -1);
  EXPECT_EQ(arb->Stats().classes[1].granted_requests, 4u);  // each slice's first try
  EXPECT_GE((*requester)->failovers(), 4u);
  EXPECT_EQ(InFlight(*arb), 0);
}

}  // namespace
}  // namespace mooncake::transport
