// Tenant isolation on the workers, end to end (docs/security.md): a store
// with an auth token file gives a tenant's client range capabilities with its
// replicas, the client library sends them, and the worker's TCP transport
// serves a tenant nothing else: a tenant that speaks the transport wire itself
// cannot read or overwrite another tenant's bytes by segment and offset.
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/capability.h"
#include "mooncake/store/client.h"
#include "mooncake/store/node/store_node.h"
#include "mooncake/store/node/testing/node_testing.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/tcp_channel.h"
#include "mooncake/transport/internal/router_ids.h"
#include "mooncake/transport/shm_transport.h"
#include "mooncake/transport/tcp_transport.h"

namespace mooncake::node {
namespace {

namespace proto = ::mooncake::store::proto;
using StoreClient = client::Client<rpc::TcpChannel>;

constexpr char kCluster[] = "cluster c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1\n";
constexpr char kAlice[] = "tenant:alice a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1\n";
constexpr char kBob[] = "tenant:bob b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0\n";

std::shared_ptr<const auth::Credentials> Creds(const std::string& text) {
  auto c = auth::Credentials::Parse(text, "test");
  EXPECT_TRUE(c.ok()) << c.status();
  return std::make_shared<const auth::Credentials>(*std::move(c));
}

std::string TokenFile() {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/tenant_isolation.tokens";
  std::ofstream(path) << kCluster << kAlice << kBob;
  ::chmod(path.c_str(), 0600);
  return path;
}

struct Tenant {
  std::unique_ptr<rpc::TcpChannel> channel;
  std::unique_ptr<StoreClient> client;
};

Tenant Connect(const std::string& master, const char* tokens, bool shm = false) {
  Tenant t;
  rpc::TcpChannelOptions co;
  co.auth = Creds(tokens);
  auto ch = rpc::TcpChannel::Connect(master, co);
  EXPECT_TRUE(ch.ok()) << ch.status();
  if (!ch.ok()) return t;
  t.channel = std::move(*ch);
  client::ClientOptions o;
  o.use_local = false;
  o.use_shm = shm;  // off: the TCP transport, the path that checks tenants
  o.use_tcp = true;
  o.auth = Creds(tokens);
  o.rpc_timeout_ms = 2'000;
  o.transfer_timeout_ms = 2'000;
  auto cl = StoreClient::Create(o, t.channel.get());
  EXPECT_TRUE(cl.ok()) << cl.status();
  if (cl.ok()) t.client = std::move(*cl);
  return t;
}

// What a tenant that bypasses the client library needs to address a
// replica's bytes on the wire: the worker's endpoint and segment id on one
// transport ("tcp://" or "shm://").
struct WireTarget {
  std::string endpoint;
  transport::SegmentId tcp_segment = 0;
};

WireTarget TargetOf(rpc::TcpChannel& ch, uint64_t master_segment,
                    std::string_view scheme = "tcp://") {
  proto::DescribeSegmentsRequest req;
  req.add_segment_ids(master_segment);
  auto r = rpc::Call<rpc::DescribeSegmentsMethod>(ch, req);
  EXPECT_TRUE(r.ok()) << r.status();
  WireTarget t;
  if (!r.ok() || r->segments_size() != 1) return t;
  const proto::SegmentEndpoint& e = r->segments(0).segment().endpoint();
  std::vector<std::string> parts = absl::StrSplit(e.router_endpoint(), '|');
  const auto ids = transport_internal::UnpackRouterId(e.router_segment_id());
  EXPECT_TRUE(ids.has_value());
  for (size_t i = 1; i < parts.size() && ids.has_value(); ++i) {
    if (parts[i].starts_with(scheme)) {
      t.endpoint = parts[i];
      t.tcp_segment = (*ids)[i - 1];
    }
  }
  EXPECT_NE(t.tcp_segment, 0u) << e.router_endpoint();
  return t;
}

proto::Replica ReplicaOf(rpc::TcpChannel& ch, const std::string& key) {
  proto::GetReplicasRequest req;
  req.set_key(key);
  auto r = rpc::Call<rpc::GetReplicasMethod>(ch, req);
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r.ok() && r->replicas_size() == 1);
  return r.ok() && r->replicas_size() == 1 ? r->replicas(0) : proto::Replica();
}

absl::Status Wire(transport::TcpTransport& t, transport::OpCode op, void* buf,
                  transport::SegmentHandle h, uint64_t offset, uint64_t length,
                  const std::string* cap) {
  transport::TransferRequest r{op, buf, h, offset, length};
  r.capability = cap != nullptr ? cap->data() : nullptr;
  auto id = t.Submit({&r, 1});
  if (!id.ok()) return id.status();
  auto res = t.Wait(*id, absl::Now() + absl::Seconds(10));
  return res.ok() ? res->statuses[0] : res.status();
}

TEST(StoreTenantIsolation, ATenantReachesOnlyTheRangesTheMasterGaveIt) {
  StoreNodeOptions o = node_testing::TestNodeOptions(Role::kAll);
  o.auth_token_file = TokenFile();
  o.serve_shm = false;
  o.tenants = {{.name = "alice", .capacity_bytes = 4 << 20},
               {.name = "bob", .capacity_bytes = 4 << 20}};
  auto n = StoreNode::Start(o);
  ASSERT_TRUE(n.ok()) << n.status();
  const std::string master = (*n)->rpc_address();

  // Through the client library: puts and gets work, capabilities flowing.
  Tenant alice = Connect(master, kAlice);
  Tenant bob = Connect(master, kBob);
  ASSERT_NE(alice.client, nullptr);
  ASSERT_NE(bob.client, nullptr);
  const std::string alice_value(100'000, 'a');
  const std::string bob_value(100'000, 'b');
  ASSERT_TRUE(alice.client->Put("alice/doc", alice_value).ok());
  ASSERT_TRUE(bob.client->Put("bob/doc", bob_value).ok());
  auto got = alice.client->Get("alice/doc");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, alice_value);

  // What the master tells each connection: a tenant's replicas carry a read
  // capability; the cluster's carry none.
  auto cluster = rpc::TcpChannel::Connect(master, {.auth = Creds(kCluster)});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  proto::GetReplicasRequest bob_req;
  bob_req.set_key("bob/doc");
  bob_req.set_tenant("bob");
  auto bob_reps = rpc::Call<rpc::GetReplicasMethod>(**cluster, bob_req);
  ASSERT_TRUE(bob_reps.ok() && bob_reps->replicas_size() == 1) << bob_reps.status();
  const proto::Replica bobs = bob_reps->replicas(0);
  EXPECT_TRUE(bobs.capability().empty());
  const proto::Replica alices = ReplicaOf(*alice.channel, "alice/doc");
  ASSERT_EQ(alices.capability().size(), auth::kCapabilityBytes);
  auto grant = auth::DecodeCapabilityGrant(alices.capability());
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_EQ(grant->rights, auth::kCapRead);
  EXPECT_EQ(grant->offset, alices.offset());
  EXPECT_EQ(grant->length, alices.length());

  // Alice on the wire, with her own token.
  transport::TcpTransport::Options to;
  to.auth = Creds(kAlice);
  auto wire = transport::TcpTransport::Create(to);
  ASSERT_TRUE(wire.ok()) << wire.status();
  const WireTarget target = TargetOf(*alice.channel, bobs.segment_id());
  auto h = (*wire)->OpenSegment(target.endpoint, target.tcp_segment);
  ASSERT_TRUE(h.ok()) << h.status();
  std::vector<char> buf(bob_value.size(), '\0');
  // Her own range with her capability: served.
  ASSERT_TRUE(Wire(**wire, transport::OpCode::kRead, buf.data(), h->handle, alices.offset(),
                   alices.length(), &alices.capability())
                  .ok());
  EXPECT_EQ(std::string(buf.begin(), buf.end()), alice_value);
  // Bob's range: without a capability, or with hers, refused and nothing read.
  std::fill(buf.begin(), buf.end(), '\0');
  absl::Status s = Wire(**wire, transport::OpCode::kRead, buf.data(), h->handle, bobs.offset(),
                        bobs.length(), nullptr);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  s = Wire(**wire, transport::OpCode::kRead, buf.data(), h->handle, bobs.offset(), bobs.length(),
           &alices.capability());
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(buf[0], '\0');
  // Nor can she overwrite it: bob still reads his bytes.
  const std::string junk(bobs.length(), 'X');
  s = Wire(**wire, transport::OpCode::kWrite, const_cast<char*>(junk.data()), h->handle,
           bobs.offset(), bobs.length(), &alices.capability());
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  got = bob.client->Get("bob/doc");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, bob_value);

  // A put's write capability covers its own new range only.
  ASSERT_TRUE(alice.client->Put("alice/second", std::string(4096, 'c')).ok());
  got = alice.client->Get("alice/second");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::string(4096, 'c'));

  // A write capability outlives its put: removed at once, alice's object
  // keeps its range out of other puts until her capability has expired
  // (MasterOptions::hold_write_windows), so her late writes with it cannot
  // reach bob's next object.
  proto::PutStartRequest ps;
  ps.set_key("alice/late");
  ps.set_size_bytes(100'000);
  auto started = rpc::Call<rpc::PutStartMethod>(*alice.channel, ps);
  ASSERT_TRUE(started.ok() && started->replicas_size() == 1) << started.status();
  const proto::Replica late = started->replicas(0);
  auto write_grant = auth::DecodeCapabilityGrant(late.capability());
  ASSERT_TRUE(write_grant.ok()) << write_grant.status();
  EXPECT_EQ(write_grant->rights, auth::kCapWrite);
  proto::PutEndRequest pe;
  pe.set_key("alice/late");
  pe.set_put_id(started->put_id());
  ASSERT_TRUE(rpc::Call<rpc::PutEndMethod>(*alice.channel, pe).ok());
  ASSERT_TRUE(alice.client->Remove("alice/late").ok());
  const std::string bob_next(100'000, 'n');
  ASSERT_TRUE(bob.client->Put("bob/next", bob_next).ok());
  const proto::Replica next = ReplicaOf(*bob.channel, "bob/next");
  if (next.segment_id() == late.segment_id()) {
    EXPECT_TRUE(next.offset() >= late.offset() + late.length() ||
                late.offset() >= next.offset() + next.length())
        << "bob's object got bytes alice may still write: [" << next.offset() << ", +"
        << next.length() << ") against [" << late.offset() << ", +" << late.length() << ")";
  }
  const std::string late_junk(late.length(), 'L');
  (void)Wire(**wire, transport::OpCode::kWrite, const_cast<char*>(late_junk.data()), h->handle,
             late.offset(), late.length(), &late.capability());
  got = bob.client->Get("bob/next");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, bob_next);
}

// Shared memory cannot check a range (a mapping reaches the whole segment):
// a worker with a token file maps its segments for "cluster" only, refuses
// tenants and unauthenticated peers, and a tenant's client with SHM on reads
// and writes over TCP instead, with capabilities.
TEST(StoreTenantIsolation, SharedMemoryServesTheClusterOnlyAndTenantsFallBackToTcp) {
  StoreNodeOptions o = node_testing::TestNodeOptions(Role::kAll);
  o.auth_token_file = TokenFile();
  o.serve_shm = true;
  o.tenants = {{.name = "alice", .capacity_bytes = 4 << 20}};
  auto n = StoreNode::Start(o);
  ASSERT_TRUE(n.ok()) << n.status();
  Tenant alice = Connect((*n)->rpc_address(), kAlice, /*shm=*/true);
  ASSERT_NE(alice.client, nullptr);
  const std::string value(100'000, 'a');
  ASSERT_TRUE(alice.client->Put("alice/doc", value).ok());
  auto got = alice.client->Get("alice/doc");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);

  const proto::Replica rep = ReplicaOf(*alice.channel, "alice/doc");
  const WireTarget shm = TargetOf(*alice.channel, rep.segment_id(), "shm://");
  ASSERT_FALSE(shm.endpoint.empty());
  const auto open = [&](const char* tokens) {
    transport::ShmTransport::Options so;
    if (tokens != nullptr) so.auth = Creds(tokens);
    auto t = transport::ShmTransport::Create(so);
    EXPECT_TRUE(t.ok()) << t.status();
    return (*t)->OpenSegment(shm.endpoint, shm.tcp_segment).status();
  };
  absl::Status s = open(kAlice);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  s = open(nullptr);
  EXPECT_TRUE(absl::IsUnauthenticated(s)) << s;
  s = open("tenant:eve e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0\n");  // not in the worker's file
  EXPECT_TRUE(absl::IsUnauthenticated(s)) << s;
  s = open(kCluster);
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace mooncake::node
