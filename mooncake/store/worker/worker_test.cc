#include "mooncake/store/worker/worker.h"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/client/testing/fake_master.h"
#include "mooncake/store/rpc/inproc_channel.h"
#include "mooncake/store/rpc/segment_directory_format.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/rpc/tcp_channel.h"
#include "mooncake/store/rpc/tcp_server.h"
#include "mooncake/store/rpc/worker_id.h"
#include "mooncake/transport/router.h"
#include "mooncake/transport/shm_transport.h"
#include "mooncake/transport/tcp_transport.h"

namespace mooncake::worker {
namespace {

using rpc::DecodeDirectory;
using rpc::Directory;
using rpc::kDirectoryBytes;
using rpc::kDirectoryEntriesMax;
using rpc::ParseWorkerId;

using store_testing::FakeMaster;

struct Env {
  Env() : master({}, &clock) {
    EXPECT_TRUE(master.RegisterOn(&registry).ok());
    channel = std::make_unique<rpc::InProcessChannel>(&registry);
  }
  FakeClock clock;
  FakeMaster master;
  rpc::ServiceRegistry registry;
  std::unique_ptr<rpc::InProcessChannel> channel;
};

WorkerOptions Small(size_t segments = 2) {
  WorkerOptions o;
  o.segment_count = segments;
  o.segment_bytes = 1 << 20;
  o.heartbeat_thread = false;
  return o;
}

// Reads a worker's directory the way a remote client does: over TCP.
Directory ReadDirectory(const std::string& worker_id) {
  auto addr = ParseWorkerId(worker_id);
  EXPECT_TRUE(addr.ok()) << addr.status();
  auto router = transport::Router::Create({}, std::make_unique<transport::TcpTransport>());
  EXPECT_TRUE(router.ok());
  auto seg = (*router)->OpenSegment(addr->router_endpoint, addr->directory_segment_id);
  EXPECT_TRUE(seg.ok()) << seg.status();
  std::array<uint8_t, kDirectoryBytes> buf{};
  transport::TransferRequest r{transport::OpCode::kRead, buf.data(), seg->handle, 0, buf.size()};
  auto id = (*router)->Submit(std::span<const transport::TransferRequest>(&r, 1));
  EXPECT_TRUE(id.ok());
  auto res = (*router)->Wait(*id, absl::Now() + absl::Seconds(5));
  EXPECT_TRUE(res.ok() && res->ok());
  auto d = DecodeDirectory(buf);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : Directory{};
}

TEST(Worker, MountsEverySegmentAndPublishesThem) {
  Env env;
  auto w = Worker<rpc::InProcessChannel>::Start(Small(3), env.channel.get());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(env.master.calls(rpc::MountSegmentMethod::kId), 3u);
  const auto segs = (*w)->segments();
  ASSERT_EQ(segs.size(), 3u);
  const Directory d = ReadDirectory((*w)->worker_id());
  ASSERT_EQ(d.entries.size(), 3u);
  for (const MountedSegment& s : segs) {
    EXPECT_NE(s.master_segment_id, 0u);
    auto e = d.Find(s.master_segment_id);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->router_segment_id, s.router_segment_id);
    EXPECT_EQ(e->length, uint64_t{1} << 20);
  }
}

// The descriptor given at mount is enough to reach the segment: what a
// client learns from DescribeSegments opens it over TCP.
TEST(Worker, MountDescriptorNamesTheRouterSegment) {
  Env env;
  auto w = Worker<rpc::InProcessChannel>::Start(Small(1), env.channel.get());
  ASSERT_TRUE(w.ok()) << w.status();
  const MountedSegment seg = (*w)->segments()[0];
  std::memcpy(seg.data, "bytes", 5);
  proto::DescribeSegmentsRequest req;
  req.add_segment_ids(seg.master_segment_id);
  auto d = env.master.DescribeSegments(req);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->segments(0).state(), proto::SEGMENT_MOUNTED);
  const proto::SegmentEndpoint& e = d->segments(0).segment().endpoint();
  EXPECT_EQ(e.router_endpoint(), (*w)->router_endpoint());
  EXPECT_EQ(e.router_segment_id(), seg.router_segment_id);
  EXPECT_EQ(d->segments(0).segment().worker_id(), (*w)->worker_id());
  auto router = transport::Router::Create({}, std::make_unique<transport::TcpTransport>());
  ASSERT_TRUE(router.ok());
  auto opened = (*router)->OpenSegment(e.router_endpoint(), e.router_segment_id());
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::array<char, 5> buf{};
  transport::TransferRequest r{transport::OpCode::kRead, buf.data(), opened->handle, 0, 5};
  auto id = (*router)->Submit(std::span<const transport::TransferRequest>(&r, 1));
  ASSERT_TRUE(id.ok());
  auto res = (*router)->Wait(*id, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(res.ok() && res->ok());
  EXPECT_EQ(std::string(buf.data(), 5), "bytes");
}

TEST(Worker, HeartbeatsAndRemountsFreshMemoryWhenForgotten) {
  Env env;
  auto w = Worker<rpc::InProcessChannel>::Start(Small(1), env.channel.get());
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->HeartbeatOnce().ok());
  EXPECT_EQ((*w)->stats().heartbeats_ok, 1u);
  EXPECT_EQ((*w)->stats().heartbeat_interval_ms, 100) << "the master's interval is adopted";
  const MountedSegment before = (*w)->segments()[0];
  std::memcpy(before.data, "old", 3);
  env.master.ExpireWorker((*w)->worker_id());
  ASSERT_TRUE((*w)->HeartbeatOnce().ok());
  EXPECT_EQ((*w)->stats().remounts, 1u);
  const MountedSegment after = (*w)->segments()[0];
  EXPECT_NE(after.master_segment_id, before.master_segment_id);
  EXPECT_NE(after.router_segment_id, before.router_segment_id);
  EXPECT_NE(std::memcmp(after.data, "old", 3), 0) << "new mount, new memory";
  const Directory d = ReadDirectory((*w)->worker_id());
  ASSERT_EQ(d.entries.size(), 1u);
  EXPECT_EQ(d.entries[0].master_segment_id, after.master_segment_id);
}

TEST(Worker, HeartbeatThreadKeepsTheWorkerAlive) {
  FakeMaster master({.heartbeat_interval_ms = 20, .heartbeat_timeout_ms = 2'000});
  rpc::ServiceRegistry registry;
  ASSERT_TRUE(master.RegisterOn(&registry).ok());
  rpc::InProcessChannel channel(&registry);
  WorkerOptions o = Small(1);
  o.heartbeat_thread = true;
  auto w = Worker<rpc::InProcessChannel>::Start(o, &channel);
  ASSERT_TRUE(w.ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while ((*w)->stats().heartbeats_ok < 3 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_GE((*w)->stats().heartbeats_ok, 3u);
  EXPECT_EQ((*w)->stats().remounts, 0u);
}

TEST(Worker, ShutdownUnmounts) {
  Env env;
  auto w = Worker<rpc::InProcessChannel>::Start(Small(2), env.channel.get());
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Shutdown().ok());
  EXPECT_EQ(env.master.calls(rpc::UnmountSegmentMethod::kId), 2u);
  EXPECT_TRUE((*w)->Shutdown().ok()) << "idempotent";
  EXPECT_EQ(env.master.calls(rpc::UnmountSegmentMethod::kId), 2u);
  EXPECT_EQ((*w)->HeartbeatOnce().code(), absl::StatusCode::kFailedPrecondition);
}

// A master that stops answering (the smoke test SIGSTOPs one) holds the
// unmount: Shutdown waits for the call's deadline and reports it, instead of
// returning early as if the segment were unmounted.
TEST(Worker, ShutdownWaitsForAnUnmountTheMasterDoesNotAnswer) {
  FakeClock clock;
  FakeMaster master({}, &clock);
  Notification answer_unmounts;
  rpc::ServiceRegistry registry;
  ASSERT_TRUE(registry
                  .Register<rpc::MountSegmentMethod>(
                      [&](const proto::MountSegmentRequest& r) { return master.MountSegment(r); })
                  .ok());
  ASSERT_TRUE(registry
                  .Register<rpc::UnmountSegmentMethod>([&](const proto::UnmountSegmentRequest& r) {
                    answer_unmounts.WaitForNotification();  // silent until the test ends
                    return master.UnmountSegment(r);
                  })
                  .ok());
  rpc::RpcServer server(&registry, {});
  ASSERT_TRUE(server.Start().ok());
  auto channel = rpc::TcpChannel::Connect(server.address());
  ASSERT_TRUE(channel.ok()) << channel.status();
  WorkerOptions o = Small(1);
  o.rpc_timeout_ms = 300;
  auto w = Worker<rpc::TcpChannel>::Start(o, channel->get());
  ASSERT_TRUE(w.ok()) << w.status();

  const absl::Time start = absl::Now();
  const absl::Status s = (*w)->Shutdown();
  const absl::Duration took = absl::Now() - start;
  answer_unmounts.Notify();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_GE(took, absl::Milliseconds(300)) << "returned before the unmount's deadline";
}

TEST(Worker, RejectsBadOptions) {
  Env env;
  for (WorkerOptions o : {Small(0), Small(kDirectoryEntriesMax + 1)}) {
    EXPECT_EQ(Worker<rpc::InProcessChannel>::Start(o, env.channel.get()).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  WorkerOptions o = Small(1);
  o.segment_bytes = 0;
  EXPECT_EQ(Worker<rpc::InProcessChannel>::Start(o, env.channel.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = Small(1);
  o.serve_local = o.serve_shm = o.serve_tcp = false;
  EXPECT_EQ(Worker<rpc::InProcessChannel>::Start(o, env.channel.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A worker on several addresses of its host (tcp_path_hosts, what
// mooncake_store --route_policy sets from a plan): it listens on all,
// advertises each, and a reader's TCP transport spreads a large read over
// them. 127.0.0.2 is this host's too (all of 127/8 is loopback).
TEST(Worker, PathHostsAreAdvertisedAndCarryReads) {
  Env env;
  WorkerOptions o = Small(1);
  o.segment_bytes = 16 << 20;
  o.tcp_bind_host = "0.0.0.0";
  o.tcp_path_hosts = {"127.0.0.1", "127.0.0.2"};
  auto w = Worker<rpc::InProcessChannel>::Start(o, env.channel.get());
  ASSERT_TRUE(w.ok()) << w.status();
  const std::string endpoint = (*w)->router_endpoint();
  EXPECT_NE(endpoint.find("tcp://127.0.0.1:"), std::string::npos) << endpoint;
  EXPECT_NE(endpoint.find(",127.0.0.2:"), std::string::npos) << endpoint;
  const MountedSegment seg = (*w)->segments()[0];
  auto* bytes = static_cast<std::byte*>(seg.data);
  for (uint64_t i = 0; i < seg.size_bytes; ++i) bytes[i] = static_cast<std::byte>(i * 13 + 1);

  transport::TcpTransport::Options to;
  to.spread_min_bytes = 1 << 20;
  auto tcp = transport::TcpTransport::Create(to);
  ASSERT_TRUE(tcp.ok()) << tcp.status();
  transport::TcpTransport* reader = tcp->get();
  auto router = transport::Router::Create({}, std::move(*tcp));
  ASSERT_TRUE(router.ok()) << router.status();
  auto opened = (*router)->OpenSegment(endpoint, seg.router_segment_id);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::vector<std::byte> buf(seg.size_bytes);
  transport::TransferRequest r{transport::OpCode::kRead, buf.data(), opened->handle, 0,
                               seg.size_bytes};
  auto id = (*router)->Submit(std::span<const transport::TransferRequest>(&r, 1));
  ASSERT_TRUE(id.ok()) << id.status();
  auto res = (*router)->Wait(*id, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(res.ok() && res->ok()) << (res.ok() ? res->FirstError() : res.status());
  EXPECT_EQ(std::memcmp(buf.data(), seg.data, seg.size_bytes), 0);
  const size_t tcp_at = endpoint.find("tcp://");
  const std::string tcp_endpoint = endpoint.substr(tcp_at, endpoint.find('|', tcp_at) - tcp_at);
  const auto paths = reader->PathStats(tcp_endpoint);
  ASSERT_EQ(paths.size(), 2u) << tcp_endpoint;
  EXPECT_GT(paths[0].bytes, 0u) << paths[0].name;
  EXPECT_GT(paths[1].bytes, 0u) << paths[1].name;
}

TEST(Worker, PathHostsNeedAListenerOnEveryAddress) {
  Env env;
  WorkerOptions o = Small(1);
  o.tcp_path_hosts = {"127.0.0.1", "127.0.0.2"};  // tcp_bind_host stays 127.0.0.1
  absl::Status s = Worker<rpc::InProcessChannel>::Start(o, env.channel.get()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("0.0.0.0"), absl::string_view::npos) << s;
  o.tcp_bind_host = "0.0.0.0";
  o.tcp_path_hosts = {"localhost"};  // not numeric
  s = Worker<rpc::InProcessChannel>::Start(o, env.channel.get()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST(Worker, ReservesItsMemoryAtStartWhenAsked) {
  Env env;
  WorkerOptions o = Small(2);
  o.reserve_memory = true;
  auto w = Worker<rpc::InProcessChannel>::Start(o, env.channel.get());
  ASSERT_TRUE(w.ok()) << w.status();
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  for (const MountedSegment& s : (*w)->segments()) {
    std::vector<unsigned char> vec(s.size_bytes / page);
    ASSERT_EQ(::mincore(s.data, s.size_bytes, vec.data()), 0);
    size_t resident = 0;
    for (unsigned char v : vec) resident += v & 1;
    EXPECT_EQ(resident, vec.size());
  }
  // More than the host has: a clear error at Start, nothing mounted.
  Env env2;
  o = Small(1);
  o.reserve_memory = true;
  o.segment_bytes = transport::shm_internal::AvailableMemoryBytes() + (uint64_t{1} << 30);
  auto big = Worker<rpc::InProcessChannel>::Start(o, env2.channel.get());
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
  EXPECT_EQ(env2.master.calls(rpc::MountSegmentMethod::kId), 0u);
}

TEST(Worker, FailsToStartWithoutAMaster) {
  rpc::ServiceRegistry empty;
  rpc::InProcessChannel channel(&empty);
  EXPECT_EQ(Worker<rpc::InProcessChannel>::Start(Small(1), &channel).status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(Worker, SegmentNameNamesTheMountedSegments) {
  Env env;
  WorkerOptions o = Small(3);
  o.segment_name = "alpha";
  auto w = Worker<rpc::InProcessChannel>::Start(o, env.channel.get());
  ASSERT_TRUE(w.ok()) << w.status();
  auto other = Worker<rpc::InProcessChannel>::Start(o, env.channel.get());
  ASSERT_TRUE(other.ok()) << other.status() << ": names may repeat across workers";
  auto plain = Worker<rpc::InProcessChannel>::Start(Small(1), env.channel.get());
  ASSERT_TRUE(plain.ok()) << plain.status();
  proto::DescribeSegmentsRequest req;
  for (const MountedSegment& s : (*w)->segments()) req.add_segment_ids(s.master_segment_id);
  req.add_segment_ids((*plain)->segments()[0].master_segment_id);
  auto d = env.master.DescribeSegments(req);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->segments_size(), 4);
  EXPECT_EQ(d->segments(0).segment().name(), "alpha");
  EXPECT_EQ(d->segments(1).segment().name(), "alpha#1");
  EXPECT_EQ(d->segments(2).segment().name(), "alpha#2");
  EXPECT_EQ(d->segments(3).segment().name(), "seg-0-g0");
}

}  // namespace
}  // namespace mooncake::worker
