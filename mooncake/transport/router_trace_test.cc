// The transport's trace spans (docs/transport.md, "Tracing"): a Router over
// TCP records submit, queue, attempt, completion and the TCP lane's send,
// wire and receive spans for each batch and slice; a failover records retry
// spans; nothing is recorded while tracing is off.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/trace.h"
#include "mooncake/transport/fault_injecting_transport.h"
#include "mooncake/transport/local_transport.h"
#include "mooncake/transport/router.h"
#include "mooncake/transport/tcp_transport.h"

namespace mooncake::transport {
namespace {

using FaultyLocal = FaultInjectingTransport<LocalTransport>;

std::unique_ptr<TcpTransport> MakeTcp() {
  auto t = TcpTransport::Create(TcpTransport::Options{});
  MC_ASSERT(t.ok(), "TCP transport must start on loopback");
  return std::move(*t);
}

// The spans called `name` that started at or after `since_ns` (other tests'
// spans stay in the rings of live threads).
std::vector<trace::Span> Spans(const trace::Snapshot& snap, std::string_view name,
                               int64_t since_ns) {
  std::vector<trace::Span> out;
  for (const trace::Span& s : snap.spans) {
    if (name == s.name && s.start_ns >= since_ns) out.push_back(s);
  }
  return out;
}

class RouterTraceTest : public ::testing::Test {
 protected:
  void TearDown() override { trace::Enable(false); }

  // A READ of `length` bytes from an owner Router(TCP) through `requester`.
  static BatchId Read(Router& owner, Router& requester, uint64_t length) {
    std::vector<std::byte> memory(length, std::byte{7}), dst(length);
    auto seg = owner.RegisterMemory(memory.data(), memory.size(), MemoryLocation::HostDram());
    EXPECT_TRUE(seg.ok());
    auto remote = requester.OpenSegment(owner.LocalEndpoint(), seg->id);
    EXPECT_TRUE(remote.ok()) << remote.status();
    const TransferRequest req{OpCode::kRead, dst.data(), remote->handle, 0, length};
    auto id = requester.Submit({&req, 1});
    EXPECT_TRUE(id.ok());
    auto r = requester.Wait(*id, absl::Now() + absl::Seconds(20));
    EXPECT_TRUE(r.ok() && r->ok());
    EXPECT_EQ(dst, memory);
    return *id;
  }
};

TEST_F(RouterTraceTest, QueuedBatchRecordsEveryStage) {
  RouterOptions o;
  o.slice_bytes = 1 << 20;
  o.direct_path = false;  // through the dispatcher's queue
  auto owner = std::move(*Router::Create(o, MakeTcp()));
  auto requester = std::move(*Router::Create(o, MakeTcp()));
  const int64_t t0 = trace::NowNs();
  trace::Enable(true);
  const BatchId id = Read(*owner, *requester, 3 << 20);
  trace::Enable(false);
  const trace::Snapshot snap = trace::Collect();

  const auto submit = Spans(snap, "router.submit", t0);
  ASSERT_EQ(submit.size(), 1u);
  EXPECT_EQ(submit[0].batch, id);
  EXPECT_EQ(submit[0].bytes, 3u << 20);
  const auto complete = Spans(snap, "router.complete", t0);
  ASSERT_EQ(complete.size(), 1u);
  EXPECT_EQ(complete[0].batch, id);
  EXPECT_EQ(complete[0].bytes, 3u << 20);
  for (std::string_view name : {"router.queue", "router.attempt"}) {
    const auto spans = Spans(snap, name, t0);
    ASSERT_EQ(spans.size(), 3u) << name;
    uint32_t slices = 0;
    for (const trace::Span& s : spans) {
      EXPECT_EQ(s.batch, id);
      EXPECT_EQ(s.bytes, 1u << 20);
      EXPECT_GE(s.start_ns, complete[0].start_ns);
      EXPECT_LE(s.end_ns, complete[0].end_ns);
      slices |= 1u << s.slice;
    }
    EXPECT_EQ(slices, 0b111u) << name << ": slices 0, 1 and 2";
  }
  EXPECT_TRUE(Spans(snap, "router.retry", t0).empty());
  // The TCP lane cuts slices of its own: at least one per router slice.
  EXPECT_GE(Spans(snap, "tcp.send", t0).size(), 1u);
  uint64_t wire_bytes = 0;
  for (const trace::Span& s : Spans(snap, "tcp.wire", t0)) wire_bytes += s.bytes;
  EXPECT_EQ(wire_bytes, 3u << 20);
  EXPECT_EQ(Spans(snap, "tcp.recv", t0).size(), Spans(snap, "tcp.wire", t0).size());
}

TEST_F(RouterTraceTest, FailoverRecordsRetrySpans) {
  RouterOptions o;
  o.slice_bytes = 256 << 10;
  auto owner = std::move(*Router::Create(o, std::make_unique<LocalTransport>(), MakeTcp()));
  auto faulty = std::make_unique<FaultyLocal>(std::make_unique<LocalTransport>(),
                                              InjectedFaults{.fail_after_requests = 0});
  auto requester = std::move(*Router::Create(o, std::move(faulty), MakeTcp()));
  const int64_t t0 = trace::NowNs();
  trace::Enable(true);
  const BatchId id = Read(*owner, *requester, 1 << 20);
  trace::Enable(false);
  ASSERT_EQ(requester->failovers(), 4u);
  const trace::Snapshot snap = trace::Collect();
  const auto retry = Spans(snap, "router.retry", t0);
  ASSERT_EQ(retry.size(), 4u);
  for (const trace::Span& s : retry) {
    EXPECT_EQ(s.batch, id);
    EXPECT_EQ(s.bytes, 256u << 10);
  }
  // The failed attempt on the local route and the good one over TCP.
  EXPECT_EQ(Spans(snap, "router.attempt", t0).size(), 8u);
}

TEST_F(RouterTraceTest, OffRecordsNothing) {
  auto owner = std::move(*Router::Create({}, MakeTcp()));
  auto requester = std::move(*Router::Create({}, MakeTcp()));
  const int64_t t0 = trace::NowNs();
  Read(*owner, *requester, 1 << 20);
  const trace::Snapshot snap = trace::Collect();
  for (const trace::Span& s : snap.spans) EXPECT_LT(s.start_ns, t0) << s.name;
}

}  // namespace
}  // namespace mooncake::transport
