#include "mooncake/store/client/segment_resolver.h"

#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/clock.h"
#include "mooncake/store/client/testing/fake_master.h"
#include "mooncake/store/rpc/inproc_channel.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/worker/worker.h"
#include "mooncake/transport/router.h"
#include "mooncake/transport/tcp_transport.h"

namespace mooncake::client {
namespace {

namespace proto = ::mooncake::store::proto;
using store_testing::FakeMaster;
using worker::Worker;

// A master, a worker that mounted `segments` segments with it, and a client
// side that reaches the worker over TCP only (as a remote client would).
struct Env {
  explicit Env(size_t segments = 1, size_t max_open = 16) : master({}, &clock) {
    EXPECT_TRUE(master.RegisterOn(&registry).ok());
    channel = std::make_unique<rpc::InProcessChannel>(&registry);
    worker::WorkerOptions o;
    o.segment_count = segments;
    o.segment_bytes = 1 << 20;
    o.heartbeat_thread = false;
    auto w = Worker<rpc::InProcessChannel>::Start(o, channel.get());
    EXPECT_TRUE(w.ok()) << w.status();
    node = std::move(*w);
    auto r = transport::Router::Create({}, std::make_unique<transport::TcpTransport>());
    EXPECT_TRUE(r.ok()) << r.status();
    router = std::move(*r);
    resolver = std::make_unique<SegmentResolver>(
        router.get(),
        [this](std::span<const uint64_t> ids, absl::Time deadline) {
          return DescribeSegmentsOver(*channel, ids, deadline);
        },
        max_open);
  }

  uint64_t Describes() const { return master.calls(rpc::DescribeSegmentsMethod::kId); }

  // Reads `n` bytes at offset 0 of `handle`.
  absl::StatusOr<std::string> Read(transport::SegmentHandle handle, size_t n) {
    std::string out(n, '\0');
    const transport::TransferRequest r{transport::OpCode::kRead, out.data(), handle, 0, n};
    const absl::Status s =
        RunTransfers(*router, std::span<const transport::TransferRequest>(&r, 1), Deadline())
            .front();
    if (!s.ok()) return s;
    return out;
  }

  static absl::Time Deadline() { return absl::Now() + absl::Seconds(5); }

  FakeClock clock;
  FakeMaster master;
  rpc::ServiceRegistry registry;
  std::unique_ptr<rpc::InProcessChannel> channel;
  std::unique_ptr<Worker<rpc::InProcessChannel>> node;
  std::unique_ptr<transport::Router> router;
  std::unique_ptr<SegmentResolver> resolver;
};

TEST(SegmentResolver, AsksTheMasterOnceThenKeepsTheHandle) {
  Env env;
  const worker::MountedSegment seg = env.node->segments()[0];
  std::memcpy(seg.data, "hello", 5);
  auto opened =
      env.resolver->Resolve(env.node->worker_id(), seg.master_segment_id, Env::Deadline());
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->length, uint64_t{1} << 20);
  EXPECT_EQ(env.Read(opened->handle, 5).value_or(""), "hello");
  EXPECT_EQ(env.Describes(), 1u);
  for (int i = 0; i < 3; ++i) {
    auto again =
        env.resolver->Resolve(env.node->worker_id(), seg.master_segment_id, Env::Deadline());
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->handle, opened->handle);
  }
  EXPECT_EQ(env.Describes(), 1u) << "a kept handle needs no RPC";
  EXPECT_EQ(env.resolver->describe_calls(), 1u);
  EXPECT_EQ(env.resolver->open_segments(), 1u);
}

TEST(SegmentResolver, UnknownSegmentIdIsNotFound) {
  Env env;
  for (const uint64_t id : {uint64_t{0}, uint64_t{9999}}) {
    auto r = env.resolver->Resolve(env.node->worker_id(), id, Env::Deadline());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << id << ": " << r.status();
  }
  EXPECT_EQ(env.resolver->open_segments(), 0u);
}

TEST(SegmentResolver, ReplicaOfAnotherWorkerIsRefused) {
  Env env;
  const uint64_t id = env.node->segments()[0].master_segment_id;
  auto r = env.resolver->Resolve("someone-else", id, Env::Deadline());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  // A kept handle met with another worker id is dropped and asked again.
  ASSERT_TRUE(env.resolver->Resolve(env.node->worker_id(), id, Env::Deadline()).ok());
  const uint64_t before = env.Describes();
  EXPECT_FALSE(env.resolver->Resolve("someone-else", id, Env::Deadline()).ok());
  EXPECT_EQ(env.Describes(), before + 1);
}

TEST(SegmentResolver, UnmountedSegmentFailsAndIsRemembered) {
  Env env;
  const worker::MountedSegment seg = env.node->segments()[0];
  const std::string worker_id = env.node->worker_id();
  ASSERT_TRUE(env.node->Shutdown().ok());  // unmounts every segment
  auto r = env.resolver->Resolve(worker_id, seg.master_segment_id, Env::Deadline());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_NE(r.status().message().find("unmounted"), std::string::npos) << r.status();
  const uint64_t asked = env.Describes();
  r = env.resolver->Resolve(worker_id, seg.master_segment_id, Env::Deadline());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(env.Describes(), asked) << "ids are never reused: gone stays gone without an RPC";
}

// The master forgets the worker; the worker remounts fresh memory under new
// ids. The old handle stops working (its memory is unregistered), the old id
// reads as unmounted, the new id resolves to the new memory.
TEST(SegmentResolver, WorkerRemountMovesToTheNewSegment) {
  Env env;
  const worker::MountedSegment old_seg = env.node->segments()[0];
  std::memcpy(old_seg.data, "old!!", 5);
  const std::string worker_id = env.node->worker_id();
  auto old_open = env.resolver->Resolve(worker_id, old_seg.master_segment_id, Env::Deadline());
  ASSERT_TRUE(old_open.ok()) << old_open.status();

  env.master.ExpireWorker(worker_id);
  ASSERT_TRUE(env.node->HeartbeatOnce().ok());
  ASSERT_EQ(env.node->stats().remounts, 1u);
  const worker::MountedSegment new_seg = env.node->segments()[0];
  ASSERT_NE(new_seg.master_segment_id, old_seg.master_segment_id);
  std::memcpy(new_seg.data, "new!!", 5);

  EXPECT_FALSE(env.Read(old_open->handle, 5).ok()) << "old memory is no longer served";
  env.resolver->Forget(old_seg.master_segment_id);  // what a client does after a failure
  auto stale = env.resolver->Resolve(worker_id, old_seg.master_segment_id, Env::Deadline());
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kUnavailable) << stale.status();

  auto fresh = env.resolver->Resolve(worker_id, new_seg.master_segment_id, Env::Deadline());
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(env.Read(fresh->handle, 5).value_or(""), "new!!");
}

TEST(SegmentResolver, PrefetchDescribesABatchInOneRpc) {
  Env env(3);
  std::vector<uint64_t> ids;
  for (const worker::MountedSegment& s : env.node->segments()) ids.push_back(s.master_segment_id);
  ids.push_back(ids[0]);  // duplicates are asked once
  ids.push_back(4242);    // unknown: left for Resolve to report
  ASSERT_TRUE(env.resolver->Prefetch(ids, Env::Deadline()).ok());
  EXPECT_EQ(env.Describes(), 1u);
  EXPECT_EQ(env.resolver->open_segments(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(env.resolver->Resolve(env.node->worker_id(), ids[i], Env::Deadline()).ok());
  }
  EXPECT_EQ(env.Describes(), 1u);
  ASSERT_TRUE(env.resolver->Prefetch(ids, Env::Deadline()).ok());
  EXPECT_EQ(env.Describes(), 2u) << "only the unknown id is asked again";
}

TEST(SegmentResolver, OpenHandlesAreBounded) {
  Env env(3, /*max_open=*/2);
  for (const worker::MountedSegment& s : env.node->segments()) {
    ASSERT_TRUE(
        env.resolver->Resolve(env.node->worker_id(), s.master_segment_id, Env::Deadline()).ok());
    EXPECT_LE(env.resolver->open_segments(), 2u);
  }
  EXPECT_EQ(env.resolver->open_segments(), 2u);
}

TEST(SegmentResolver, MasterFailureIsReturnedAndNothingIsKept) {
  transport::RouterOptions ro;
  auto router = transport::Router::Create(ro, std::make_unique<transport::TcpTransport>());
  ASSERT_TRUE(router.ok());
  int asked = 0;
  SegmentResolver resolver(router->get(), [&](std::span<const uint64_t>, absl::Time) {
    ++asked;
    return absl::StatusOr<std::vector<proto::SegmentInfo>>(absl::UnavailableError("master down"));
  });
  for (int i = 0; i < 2; ++i) {
    auto r = resolver.Resolve("w", 7, Env::Deadline());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(r.status().message().find("master down"), std::string::npos) << r.status();
  }
  EXPECT_EQ(asked, 2) << "a failed lookup is not cached";
  EXPECT_EQ(resolver.open_segments(), 0u);
}

TEST(SegmentResolver, DescriptorWithoutRouterEndpointIsRefused) {
  auto router = transport::Router::Create({}, std::make_unique<transport::TcpTransport>());
  ASSERT_TRUE(router.ok());
  SegmentResolver resolver(router->get(), [](std::span<const uint64_t> ids, absl::Time) {
    std::vector<proto::SegmentInfo> out(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      out[i].set_segment_id(ids[i]);
      out[i].set_state(proto::SEGMENT_MOUNTED);
      out[i].mutable_segment()->set_worker_id("w");
    }
    return absl::StatusOr<std::vector<proto::SegmentInfo>>(std::move(out));
  });
  auto r = resolver.Resolve("w", 3, Env::Deadline());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
}

}  // namespace
}  // namespace mooncake::client
