#include "mooncake/store/node/store_node.h"

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/store/client.h"
#include "mooncake/store/node/testing/http_client.h"
#include "mooncake/store/node/testing/node_testing.h"
#include "mooncake/store/rpc/tcp_channel.h"

namespace mooncake::node {
namespace {

using node_testing::HttpGet;
using node_testing::TestNodeOptions;
using StoreClient = client::Client<rpc::TcpChannel>;

struct ClientAndChannel {
  std::unique_ptr<rpc::TcpChannel> channel;
  std::unique_ptr<StoreClient> client;
};

ClientAndChannel Connect(const std::string& master, bool shm) {
  ClientAndChannel c;
  auto ch = rpc::TcpChannel::Connect(master);
  EXPECT_TRUE(ch.ok()) << ch.status();
  if (!ch.ok()) return c;
  c.channel = std::move(*ch);
  client::ClientOptions o;
  o.use_local = false;
  o.use_shm = shm;
  o.use_tcp = !shm;
  o.rpc_timeout_ms = 1'000;
  o.transfer_timeout_ms = 2'000;
  auto cl = StoreClient::Create(o, c.channel.get());
  EXPECT_TRUE(cl.ok()) << cl.status();
  if (cl.ok()) c.client = std::move(*cl);
  return c;
}

uint16_t HttpPort(const StoreNode& n) {
  const std::string a = n.http_address();
  return static_cast<uint16_t>(std::stoi(a.substr(a.rfind(':') + 1)));
}

// The value of the first series line starting with `prefix`, or -1.
double Series(const std::string& text, std::string_view prefix) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, AbslView(prefix)) && line.size() > prefix.size() &&
        line[prefix.size()] == ' ') {
      return std::stod(std::string(line.substr(prefix.size() + 1)));
    }
  }
  return -1;
}

TEST(StoreNode, AllRoleServesClientsMetricsAndHealth) {
  auto n = StoreNode::Start(TestNodeOptions(Role::kAll));
  ASSERT_TRUE(n.ok()) << n.status();
  StoreNode& node = **n;
  EXPECT_TRUE(node.Health().ok) << node.Health().reason;
  EXPECT_EQ(node.master_address(), node.rpc_address());
  ASSERT_NE(node.worker(), nullptr);
  ASSERT_NE(node.master(), nullptr);

  for (bool shm : {false, true}) {
    ClientAndChannel c = Connect(node.rpc_address(), shm);
    ASSERT_NE(c.client, nullptr);
    const std::string key = shm ? "k-shm" : "k-tcp";
    const std::string value(300'000, shm ? 's' : 't');
    ASSERT_TRUE(c.client->Put(key, value).ok());
    auto got = c.client->Get(key);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, value);
  }

  auto health = HttpGet(HttpPort(node), "/health");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");
  auto m = HttpGet(HttpPort(node), "/metrics");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->status, 200);
  EXPECT_EQ(Series(m->body, "mooncake_master_puts_total{result=\"committed\"}"), 2);
  EXPECT_EQ(Series(m->body, "mooncake_master_objects"), 2);
  EXPECT_EQ(Series(m->body, "mooncake_master_workers"), 1);
  EXPECT_EQ(Series(m->body, "mooncake_worker_segments_mounted"), 1);
  EXPECT_EQ(Series(m->body, "mooncake_worker_segment_bytes"), 16 << 20);
  EXPECT_EQ(Series(m->body, "mooncake_node_healthy"), 1);
  EXPECT_EQ(Series(m->body, "mooncake_node_info{role=\"all\",version=\"0.1.0\"}"), 1);
  // The standard process_* families: the 16 MiB segment is reserved, so resident.
  EXPECT_GE(Series(m->body, "process_resident_memory_bytes"), 16 << 20);
  EXPECT_GT(Series(m->body, "process_open_fds"), 3);
  EXPECT_GT(Series(m->body, "process_max_fds"), 0);
  EXPECT_GT(Series(m->body, "process_threads"), 1);
  EXPECT_GT(Series(m->body, "process_start_time_seconds"), 1.7e9);
  EXPECT_EQ(Series(m->body, "mooncake_rpc_server_calls_total{method=\"PutStart\"}"), 2);
  // A Prometheus histogram: both PutStarts took under 10 s, and _count says 2.
  EXPECT_EQ(
      Series(m->body, "mooncake_rpc_server_latency_seconds_bucket{method=\"PutStart\",le=\"10\"}"),
      2);
  EXPECT_EQ(Series(m->body, "mooncake_rpc_server_latency_seconds_count{method=\"PutStart\"}"), 2);
  EXPECT_GT(Series(m->body, "mooncake_rpc_server_latency_seconds_sum{method=\"PutStart\"}"), 0);
  EXPECT_EQ(Series(m->body, "mooncake_rpc_client_calls_total{method=\"MountSegment\"}"), 1);
  EXPECT_GT(Series(m->body, "mooncake_master_worker_used_bytes{worker=\"" +
                                node.worker()->worker_id() + "\"}"),
            0);

  const NodeSnapshot s = node.Snapshot();
  EXPECT_TRUE(s.has_master && s.has_worker);
  EXPECT_EQ(s.objects, 2);
  EXPECT_EQ(s.puts_committed, 2u);
  EXPECT_GE(s.gets, 2u);
  EXPECT_EQ(s.segments_mounted, 1u);
  EXPECT_GT(s.used_bytes, 0u);

  EXPECT_TRUE(node.Shutdown().ok());
  EXPECT_FALSE(node.Health().ok);
  EXPECT_EQ(node.Health().reason, "shutting down");
  EXPECT_TRUE(node.Shutdown().ok());  // idempotent
}

TEST(StoreNode, MasterAndTwoWorkerNodesShareObjects) {
  auto m = StoreNode::Start(TestNodeOptions(Role::kMaster));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->worker(), nullptr);
  auto w1 = StoreNode::Start(TestNodeOptions(Role::kWorker, (*m)->rpc_address()));
  ASSERT_TRUE(w1.ok()) << w1.status();
  auto w2 = StoreNode::Start(TestNodeOptions(Role::kWorker, (*m)->rpc_address()));
  ASSERT_TRUE(w2.ok()) << w2.status();
  EXPECT_EQ((*w1)->rpc_address(), "");
  EXPECT_EQ((*w1)->master_address(), (*m)->rpc_address());
  EXPECT_EQ((*m)->master()->Stats().workers, 2u);
  EXPECT_EQ((*m)->master()->Stats().segments, 2u);
  EXPECT_TRUE((*w1)->Health().ok);

  ClientAndChannel c = Connect((*m)->rpc_address(), /*shm=*/false);
  ASSERT_NE(c.client, nullptr);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(
        c.client->Put(absl::StrCat("two/", i), std::string(100'000, 'a' + i), {.replica_count = 2})
            .ok());
  }
  // Both workers hold every object.
  for (const auto& seg : (*m)->master()->Segments()) EXPECT_GT(seg.used_bytes, 0u) << seg.worker_id;

  // A worker leaves gracefully: its replicas go, the other's serve.
  EXPECT_TRUE((*w1)->Shutdown().ok());
  EXPECT_EQ((*m)->master()->Stats().segments, 1u);
  for (int i = 0; i < 8; ++i) {
    auto got = c.client->Get(absl::StrCat("two/", i), {.bypass_cache = true});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, std::string(100'000, 'a' + i));
  }
  auto metrics = HttpGet(HttpPort(**w2), "/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ(Series(metrics->body, "mooncake_node_info{role=\"worker\",version=\"0.1.0\"}"), 1);
  EXPECT_EQ(Series(metrics->body, "mooncake_worker_segments_mounted"), 1);
  EXPECT_EQ(Series(metrics->body, "mooncake_master_objects"), -1);  // no master here
}

TEST(StoreNode, WorkerHealthFailsWhenItsMasterGoes) {
  auto m = StoreNode::Start(TestNodeOptions(Role::kMaster));
  ASSERT_TRUE(m.ok()) << m.status();
  auto w = StoreNode::Start(TestNodeOptions(Role::kWorker, (*m)->rpc_address()));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE((*w)->Health().ok);
  EXPECT_TRUE((*m)->Shutdown().ok());
  NodeHealth h;
  for (int i = 0; i < 200 && (h = (*w)->Health()).ok; ++i) absl::SleepFor(absl::Milliseconds(25));
  EXPECT_FALSE(h.ok);
  EXPECT_TRUE(absl::StrContains(h.reason, "heartbeats")) << h.reason;
  auto health = HttpGet(HttpPort(**w), "/health");
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->status, 503);
  EXPECT_TRUE(absl::StrContains(health->body, (*m)->options().listen.host)) << health->body;
}

// The first probe after the master goes is already unhealthy, even when a
// heartbeat succeeded since the previous probe (an old success, newer failures).
TEST(StoreNode, FirstHealthProbeAfterTheMasterGoesIsUnhealthy) {
  auto m = StoreNode::Start(TestNodeOptions(Role::kMaster));
  ASSERT_TRUE(m.ok()) << m.status();
  auto w = StoreNode::Start(TestNodeOptions(Role::kWorker, (*m)->rpc_address()));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->Health().ok);  // the previous probe
  const uint64_t ok_before = (*w)->worker()->stats().heartbeats_ok;
  for (int i = 0; i < 400 && (*w)->worker()->stats().heartbeats_ok == ok_before; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_GT((*w)->worker()->stats().heartbeats_ok, ok_before) << "a success between probes";
  EXPECT_TRUE((*m)->Shutdown().ok());
  for (int i = 0; i < 400 && (*w)->worker()->stats().heartbeats_failed == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_GT((*w)->worker()->stats().heartbeats_failed, 0u);
  const NodeHealth h = (*w)->Health();
  EXPECT_FALSE(h.ok) << "an old success must not hide the newer failure";
  EXPECT_TRUE(absl::StrContains(h.reason, "heartbeats")) << h.reason;
}

TEST(StoreNode, WorkerWithoutMasterIsUnavailableNamingIt) {
  const std::string master = absl::StrCat("127.0.0.1:", node_testing::UnusedPort());
  auto w = StoreNode::Start(TestNodeOptions(Role::kWorker, master));
  ASSERT_FALSE(w.ok());
  EXPECT_TRUE(absl::IsUnavailable(w.status())) << w.status();
  EXPECT_TRUE(absl::StrContains(w.status().message(), master)) << w.status();
}

TEST(StoreNode, PortInUseIsAClearError) {
  auto a = StoreNode::Start(TestNodeOptions(Role::kMaster));
  ASSERT_TRUE(a.ok()) << a.status();
  StoreNodeOptions o = TestNodeOptions(Role::kMaster);
  o.listen = *ParseHostPort("listen", (*a)->rpc_address(), true);
  auto b = StoreNode::Start(o);
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(absl::IsAlreadyExists(b.status())) << b.status();
  EXPECT_TRUE(absl::StrContains(b.status().message(), "--listen=" + (*a)->rpc_address()))
      << b.status();

  o = TestNodeOptions(Role::kMaster);
  o.http = *ParseHostPort("http", (*a)->http_address(), true);
  b = StoreNode::Start(o);
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(absl::IsAlreadyExists(b.status())) << b.status();
  EXPECT_TRUE(absl::StrContains(b.status().message(), "--http=")) << b.status();
  EXPECT_TRUE(absl::StrContains(b.status().message(), "already in use")) << b.status();
}

TEST(StoreNode, BadOptionsAreInvalidArgument) {
  StoreNodeOptions o = TestNodeOptions(Role::kAll);
  o.low_watermark = 0.99;
  EXPECT_TRUE(absl::IsInvalidArgument(StoreNode::Start(o).status()));
  o = TestNodeOptions(Role::kAll);
  o.tenants = {{"t", 0, 0}, {"t", 0, 0}};       // the master refuses a duplicate tenant or not:
  const auto s = StoreNode::Start(o).status();  // either way, no crash
  EXPECT_TRUE(s.ok() || absl::IsInvalidArgument(s)) << s;
}

TEST(StoreNode, RdmaOnFailsToStartWithoutRdmaAndOffNeverServesIt) {
  StoreNodeOptions o = TestNodeOptions(Role::kAll);
  o.rdma = RdmaUse::kOff;
  auto off = StoreNode::Start(o);
  ASSERT_TRUE(off.ok()) << off.status();
  off->reset();
  // This host has no RDMA device; a build without --config=rdma has no RDMA
  // transport: either way --rdma=on is refused with the reason.
  o.rdma = RdmaUse::kOn;
  const absl::Status on = StoreNode::Start(o).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(on)) << on;
  EXPECT_TRUE(absl::StrContains(on.message(), "RDMA")) << on;
  o.rdma = RdmaUse::kAuto;  // no RDMA here: the other transports serve
  EXPECT_TRUE(StoreNode::Start(o).ok());
}

// --shm=false: the worker serves its segments over TCP only, so local
// clients cannot map them without the transport (and its token).
TEST(StoreNode, ShmOffServesNoSharedMemoryRoute) {
  StoreNodeOptions o = TestNodeOptions(Role::kAll);
  auto on = StoreNode::Start(o);
  ASSERT_TRUE(on.ok()) << on.status();
  ASSERT_NE((*on)->worker(), nullptr);
  EXPECT_TRUE(absl::StrContains((*on)->worker()->router_endpoint(), "shm://"))
      << (*on)->worker()->router_endpoint();
  on->reset();
  o.serve_shm = false;
  auto off = StoreNode::Start(o);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(absl::StrContains((*off)->worker()->router_endpoint(), "shm://"))
      << (*off)->worker()->router_endpoint();
  EXPECT_TRUE(absl::StrContains((*off)->worker()->router_endpoint(), "tcp://"))
      << (*off)->worker()->router_endpoint();
}

// An IPv6 master prints its addresses bracketed ("[::1]:port"), which is what
// clients connect to and what makes "http://" + address a URL.
TEST(StoreNode, Ipv6AddressesAreBracketedAndConnectable) {
  StoreNodeOptions o = TestNodeOptions(Role::kMaster);
  o.listen = {"::1", 0};
  o.http = {"::1", 0};
  auto n = StoreNode::Start(o);
  if (!n.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << n.status();
  EXPECT_TRUE(absl::StartsWith((*n)->rpc_address(), "[::1]:")) << (*n)->rpc_address();
  EXPECT_TRUE(absl::StartsWith((*n)->http_address(), "[::1]:")) << (*n)->http_address();
  auto ch = rpc::TcpChannel::Connect((*n)->rpc_address());
  EXPECT_TRUE(ch.ok()) << ch.status();

  // A worker whose TCP data transport listens on IPv6 serves gets over it.
  StoreNodeOptions wo = TestNodeOptions(Role::kWorker, (*n)->rpc_address());
  wo.worker_host = "::1";
  auto w = StoreNode::Start(wo);
  ASSERT_TRUE(w.ok()) << w.status();
  ClientAndChannel c = Connect((*n)->rpc_address(), /*shm=*/false);
  ASSERT_NE(c.client, nullptr);
  const std::string value(700'000, 'v');
  ASSERT_TRUE(c.client->Put("v6", value).ok());
  auto got = c.client->Get("v6", {.bypass_cache = true});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
  bool advertised_v6 = false;
  for (const auto& seg : (*n)->master()->Segments()) {
    advertised_v6 |= absl::StrContains(seg.worker_id, "tcp://[::1]:");
  }
  EXPECT_TRUE(advertised_v6) << "no segment advertises the bracketed IPv6 TCP endpoint";
}

// --worker_port fixes the worker's TCP transport port (firewalls, port maps);
// a port in use is a start error naming it.
TEST(StoreNode, WorkerPortFixesTheTransportPort) {
  StoreNodeOptions o = TestNodeOptions(Role::kAll);
  o.worker_port = node_testing::UnusedPort();
  auto n = StoreNode::Start(o);
  ASSERT_TRUE(n.ok()) << n.status();
  const std::string endpoint = (*n)->worker()->router_endpoint();
  EXPECT_TRUE(absl::StrContains(endpoint, absl::StrCat("tcp://127.0.0.1:", o.worker_port)))
      << endpoint;
  auto again = StoreNode::Start(o);
  EXPECT_FALSE(again.ok());
  EXPECT_TRUE(absl::StrContains(again.status().message(), std::to_string(o.worker_port)))
      << again.status();
}

// Lazy segments larger than the host would fill past its memory before
// eviction starts: refused at start, naming the sizes and the flag.
TEST(StoreNode, LazySegmentsLargerThanTheHostAreRefused) {
  StoreNodeOptions o = TestNodeOptions(Role::kAll);
  o.reserve_memory = false;
  o.segments = 4;
  o.segment_bytes = uint64_t{1} << 50;  // 4 PiB
  const absl::Status s = StoreNode::Start(o).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "more than this host's memory")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "--reserve_memory=false")) << s;
  o.segments = 64;
  o.segment_bytes = ~uint64_t{0} / 8;  // the product overflows 64 bits
  EXPECT_TRUE(absl::IsFailedPrecondition(StoreNode::Start(o).status()));
  // Checked before anything starts: the answer is the size even where the
  // master's port is taken (a master started first would say ALREADY_EXISTS).
  auto taken = StoreNode::Start(TestNodeOptions(Role::kMaster));
  ASSERT_TRUE(taken.ok()) << taken.status();
  auto listen = ParseHostPort("--listen", (*taken)->rpc_address(), false);
  ASSERT_TRUE(listen.ok()) << listen.status();
  o.listen = *listen;
  o.segments = 4;
  o.segment_bytes = uint64_t{1} << 50;
  const absl::Status first = StoreNode::Start(o).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(first)) << first;
}

// Hot objects, each read once, then a scan of one-shot objects twice the
// DRAM: the least recently used go under LRU, the one-shot ones under S3-FIFO.
// Returns how many hot objects are left.
int HotObjectsLeftAfterScan(EvictionPolicyKind eviction) {
  StoreNodeOptions o = TestNodeOptions(Role::kAll);
  o.segment_bytes = uint64_t{4} << 20;
  o.eviction_policy = eviction;
  auto n = StoreNode::Start(o);
  EXPECT_TRUE(n.ok()) << n.status();
  if (!n.ok()) return -1;
  auto ch = rpc::TcpChannel::Connect((*n)->rpc_address());
  EXPECT_TRUE(ch.ok()) << ch.status();
  if (!ch.ok()) return -1;
  client::ClientOptions co;
  co.use_local = false;
  co.use_shm = false;
  co.cache_enabled = false;  // no lease outlives its read: every object may go
  auto c = StoreClient::Create(co, ch->get());
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return -1;
  const std::string value(64 << 10, 'v');
  constexpr int kHot = 8;
  for (int i = 0; i < kHot; ++i) EXPECT_TRUE((*c)->Put(absl::StrCat("hot/", i), value).ok());
  for (int i = 0; i < kHot; ++i) EXPECT_TRUE((*c)->Get(absl::StrCat("hot/", i)).ok());
  for (int i = 0; i < 128; ++i) EXPECT_TRUE((*c)->Put(absl::StrCat("scan/", i), value).ok());
  int left = 0;
  for (int i = 0; i < kHot; ++i) {
    const absl::StatusOr<bool> present = (*c)->Exists(absl::StrCat("hot/", i));
    EXPECT_TRUE(present.ok()) << present.status();
    if (!present.ok()) return -1;
    left += *present;
  }
  return left;
}

TEST(StoreNode, EvictionOptionChoosesTheMastersPolicy) {
  EXPECT_EQ(HotObjectsLeftAfterScan(EvictionPolicyKind::kLru), 0);
  EXPECT_EQ(HotObjectsLeftAfterScan(EvictionPolicyKind::kS3Fifo), 8);
  StoreNodeOptions o = TestNodeOptions(Role::kMaster);
  o.eviction_policy = static_cast<EvictionPolicyKind>(7);
  EXPECT_TRUE(absl::IsInvalidArgument(StoreNode::Start(o).status()));
  EXPECT_EQ(ParseEvictionPolicy("s3fifo"), EvictionPolicyKind::kS3Fifo);
  EXPECT_EQ(ParseEvictionPolicy("lru"), EvictionPolicyKind::kLru);
  EXPECT_EQ(ParseEvictionPolicy("LRU"), std::nullopt);
}

// --allocator picks the segments' allocator: with kv, an object of a block
// size lands in a slab slot, any other size beside it, and both read back.
TEST(StoreNode, AllocatorOptionChoosesTheSegmentsAllocator) {
  for (const AllocatorKind kind : {AllocatorKind::kTlsf, AllocatorKind::kKv}) {
    StoreNodeOptions o = TestNodeOptions(Role::kAll);
    o.segment_bytes = uint64_t{16} << 20;
    o.allocator = kind;
    if (kind == AllocatorKind::kKv) o.kv_block_bytes = {64 << 10, 256 << 10};
    auto n = StoreNode::Start(o);
    ASSERT_TRUE(n.ok()) << n.status();
    ClientAndChannel c = Connect((*n)->rpc_address(), /*shm=*/false);
    ASSERT_NE(c.client, nullptr);
    const std::string block(64 << 10, 'b');
    const std::string odd((64 << 10) + 1, 'o');
    ASSERT_TRUE(c.client->Put("block", block).ok());
    ASSERT_TRUE(c.client->Put("odd", odd).ok());
    auto got = c.client->Get("block", {.bypass_cache = true});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, block);
    got = c.client->Get("odd", {.bypass_cache = true});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, odd);

    const std::vector<master::SegmentView> segs = (*n)->master()->Segments();
    ASSERT_EQ(segs.size(), 1u);
    size_t model = 9;
    size_t slab_pages = 0;
    ASSERT_TRUE((*n)->master()->ReadSegmentAllocator(segs[0].id, [&](const SegmentAllocator& a) {
      model = a.index();
      if (const auto* kv = a.get_if<alloc::KvAllocator<>>()) slab_pages = kv->slab().page_count();
    }));
    EXPECT_EQ(model, kind == AllocatorKind::kTlsf ? 0u : 1u);
    if (kind == AllocatorKind::kKv) {
      EXPECT_EQ(slab_pages, 1u) << "the 64 KiB object took a slab page";
    }
    EXPECT_EQ((*n)->master()->SegmentAllocatorStats(segs[0].id)->live_allocations, 2u);
  }
}

// --tenant's rate reaches the master: a tenant past its put rate is refused
// with a retry hint, another is not, and /metrics counts the refusals.
TEST(StoreNode, TenantRateLimitsPutsThroughTheNode) {
  StoreNodeOptions o = TestNodeOptions(Role::kAll);
  o.segment_bytes = uint64_t{16} << 20;
  o.tenants = {{.name = "slow", .capacity_bytes = 1 << 30, .rate_bytes_per_sec = 256 << 10},
               {.name = "fast", .capacity_bytes = 1 << 30}};
  auto n = StoreNode::Start(o);
  ASSERT_TRUE(n.ok()) << n.status();
  ClientAndChannel c = Connect((*n)->rpc_address(), /*shm=*/false);
  ASSERT_NE(c.client, nullptr);
  const std::string value(200 << 10, 'v');
  client::PutOptions slow;
  slow.tenant = "slow";
  client::PutOptions fast;
  fast.tenant = "fast";
  ASSERT_TRUE(c.client->Put("s1", value, slow).ok());
  const absl::Status refused = c.client->Put("s2", value, slow);
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "over its put rate")) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "retry in")) << refused;
  for (int i = 0; i < 8; ++i) {
    EXPECT_TRUE(c.client->Put(absl::StrCat("f", i), value, fast).ok()) << i;
  }
  auto metrics = HttpGet(HttpPort(**n), "/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_GE(Series(metrics->body, "mooncake_master_tenant_rate_limited_total{tenant=\"slow\"}"), 1);
  EXPECT_EQ(Series(metrics->body, "mooncake_master_tenant_rate_limited_total{tenant=\"fast\"}"), 0);
}

// --replicas and the watermarks reach the master: a put that names no replica
// count gets the node's default, and filling past the high watermark evicts
// down towards the low one.
TEST(StoreNode, DefaultReplicasAndWatermarksReachTheMaster) {
  StoreNodeOptions mo = TestNodeOptions(Role::kMaster);
  mo.replicas = 2;
  mo.high_watermark = 0.5;
  mo.low_watermark = 0.25;
  auto m = StoreNode::Start(mo);
  ASSERT_TRUE(m.ok()) << m.status();
  auto w1 = StoreNode::Start(TestNodeOptions(Role::kWorker, (*m)->rpc_address()));
  ASSERT_TRUE(w1.ok()) << w1.status();
  auto w2 = StoreNode::Start(TestNodeOptions(Role::kWorker, (*m)->rpc_address()));
  ASSERT_TRUE(w2.ok()) << w2.status();
  ClientAndChannel c = Connect((*m)->rpc_address(), /*shm=*/false);
  ASSERT_NE(c.client, nullptr);

  // One object, no replica count: a copy on each worker.
  ASSERT_TRUE(c.client->Put("first", std::string(1 << 20, 'f')).ok());
  for (const auto& seg : (*m)->master()->Segments()) {
    EXPECT_GE(seg.used_bytes, uint64_t{1} << 20) << seg.worker_id;
  }

  // 32 MiB of segments; 24 objects of 1 MiB x 2 replicas ask for 48 MiB.
  for (int i = 0; i < 24; ++i) {
    const absl::Status put = c.client->Put(absl::StrCat("fill/", i), std::string(1 << 20, 'a' + i));
    ASSERT_TRUE(put.ok()) << i << ": " << put;
  }
  // The master's ticker evicts down from the high watermark; on a loaded
  // machine give it up to 5 s of ticks.
  master::MasterStats st = (*m)->master()->Stats();
  for (const absl::Time give_up = absl::Now() + absl::Seconds(5);
       st.used_bytes > st.capacity_bytes / 2 + (uint64_t{2} << 20) && absl::Now() < give_up;
       st = (*m)->master()->Stats()) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(st.capacity_bytes, uint64_t{32} << 20);
  // Never above the high watermark by more than the put that crossed it.
  EXPECT_LE(st.used_bytes, st.capacity_bytes / 2 + (uint64_t{2} << 20)) << st.used_bytes;
  EXPECT_LT(st.objects, 13) << "no eviction: 25 objects would need 50 MiB";
  auto metrics = HttpGet(HttpPort(**m), "/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_GE(Series(metrics->body, "mooncake_master_evictions_total"), 12);
  // The newest object is still there, with its two copies readable.
  auto got = c.client->Get("fill/23", {.bypass_cache = true});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::string(1 << 20, 'a' + 23));
}

// The default read lease (mooncake_master --default_kv_lease_ttl) reaches the
// master: a get naming no lease gets it, and a lease longer than the
// master's usual 60 s cap is not clamped below it.
TEST(StoreNode, DefaultLeaseReachesTheMaster) {
  for (const int64_t lease_ms : {int64_t{1'234}, int64_t{90'000}}) {
    StoreNodeOptions o = TestNodeOptions(Role::kAll);
    o.default_lease_ms = lease_ms;
    auto n = StoreNode::Start(o);
    ASSERT_TRUE(n.ok()) << n.status();
    ClientAndChannel c = Connect((*n)->rpc_address(), /*shm=*/false);
    ASSERT_NE(c.client, nullptr);
    ASSERT_TRUE(c.client->Put("leased", "value").ok());
    store::proto::GetReplicasRequest req;
    req.set_key("leased");
    auto got = (*n)->master()->GetReplicas(req);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_NE(got->lease().lease_id(), 0u);
    EXPECT_EQ(got->lease().expires_in_ms(), static_cast<uint64_t>(lease_ms));
  }
  StoreNodeOptions o = TestNodeOptions(Role::kMaster);
  for (const int64_t bad : {int64_t{0}, int64_t{-1}, kMaxDefaultLeaseMs + 1}) {
    o.default_lease_ms = bad;
    EXPECT_TRUE(absl::IsInvalidArgument(StoreNode::Start(o).status())) << bad;
  }
}

TEST(StoreNode, HttpOffMeansNoAddress) {
  StoreNodeOptions o = TestNodeOptions(Role::kMaster);
  o.http_enabled = false;
  auto n = StoreNode::Start(o);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ((*n)->http_address(), "");
  EXPECT_TRUE(absl::StrContains((*n)->RenderMetrics(), "mooncake_master_objects"));
}

// Operations running while the node shuts down finish or fail with a clean
// status; none returns wrong bytes, none crashes, Shutdown returns.
TEST(StoreNode, ShutdownWithInFlightOperations) {
  auto n = StoreNode::Start(TestNodeOptions(Role::kAll));
  ASSERT_TRUE(n.ok()) << n.status();
  const std::string master = (*n)->rpc_address();
  std::atomic<bool> stop{false};
  std::atomic<int> ok_ops{0}, clean_errors{0}, bad{0};
  std::mutex bad_mu;
  std::string first_bad;
  auto note_bad = [&](const std::string& what) {
    bad.fetch_add(1);
    std::lock_guard<std::mutex> l(bad_mu);
    if (first_bad.empty()) first_bad = what;
  };
  auto clean = [](const absl::Status& s) {
    return absl::IsUnavailable(s) || absl::IsNotFound(s) || absl::IsDeadlineExceeded(s) ||
           absl::IsResourceExhausted(s) || absl::IsCancelled(s) || absl::IsAborted(s) ||
           absl::IsFailedPrecondition(s);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      ClientAndChannel c = Connect(master, /*shm=*/t == 2);
      if (c.client == nullptr) return note_bad("connect");
      for (int i = 0; !stop.load(); ++i) {
        const std::string key = absl::StrCat("inflight/", t, "/", i);
        const std::string value(64 * 1024 + i, static_cast<char>('a' + (i + t) % 26));
        absl::Status s = c.client->Put(key, value);
        if (s.ok()) {
          ok_ops.fetch_add(1);
          auto got = c.client->Get(key);
          if (got.ok() && *got != value) note_bad("get returned other bytes");
          if (!got.ok() && !clean(got.status())) note_bad(got.status().ToString());
          if (got.ok()) ok_ops.fetch_add(1);
          c.client->Remove(key).IgnoreError();
        } else if (clean(s)) {
          clean_errors.fetch_add(1);
        } else {
          note_bad(s.ToString());
        }
      }
    });
  }
  while (ok_ops.load() < 30) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE((*n)->Shutdown().ok());
  EXPECT_EQ((*n)->Health().reason, "shutting down");
  // Clients keep trying against the stopped node for a moment: clean errors.
  const int before = clean_errors.load();
  while (clean_errors.load() < before + 10) absl::SleepFor(absl::Milliseconds(5));
  stop.store(true);
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0) << first_bad;
  EXPECT_GE(ok_ops.load(), 30);
}

TEST(StoreNode, DrainRoutesTakePostAndCheckTheirQuery) {
  auto n = StoreNode::Start(TestNodeOptions(Role::kAll));
  ASSERT_TRUE(n.ok()) << n.status();
  const uint16_t port = HttpPort(**n);
  auto post = [port](const std::string& target) {
    return node_testing::HttpRaw(port, "POST " + target + " HTTP/1.1\r\nHost: t\r\n\r\n");
  };
  auto a = HttpGet(port, "/drain?deadline_ms=100");  // a GET never drains
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 405);
  for (const char* bad : {"/drain", "/drain?deadline_ms=abc", "/preempt?deadline_ms=0",
                          "/drain?deadline_ms=100&bandwidth=lots", "/drain?deadlin_ms=5"}) {
    a = post(bad);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->status, 400) << bad;
    EXPECT_FALSE(a->body.empty()) << bad;
  }
  a = post("/drain?deadline_ms=abc");
  EXPECT_TRUE(absl::StrContains(a->body, "deadline_ms='abc': want an integer")) << a->body;
  EXPECT_TRUE((*n)->Health().ok) << "a refused drain leaves the worker in the pool";

  // Drained (a master with replica moves) or refused by a master without them.
  a = post("/drain?deadline_ms=200");
  ASSERT_TRUE(a.ok()) << a.status();
  if (a->status == 200) {
    EXPECT_TRUE(absl::StrContains(a->body, "\"unmounted\":true")) << a->body;
    auto h = HttpGet(port, "/health");
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h->status, 503);
    EXPECT_TRUE(absl::StrContains(h->body, "drained")) << h->body;
    a = post("/drain?deadline_ms=200");
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->status, 409) << a->body;  // already left the pool
  } else {
    EXPECT_EQ(a->status, 501) << a->body;
    EXPECT_TRUE((*n)->Health().ok);
  }
}

TEST(StoreNode, DrainOnAMasterOnlyNodeIsAConflict) {
  auto m = StoreNode::Start(TestNodeOptions(Role::kMaster));
  ASSERT_TRUE(m.ok()) << m.status();
  auto a = node_testing::HttpRaw(HttpPort(**m), "POST /preempt?deadline_ms=100 HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 409);
  EXPECT_TRUE(absl::StrContains(a->body, "no worker")) << a->body;
}

}  // namespace
}  // namespace mooncake::node
