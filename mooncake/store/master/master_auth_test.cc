// The master over TCP with an auth token file: every entry point refuses a
// peer without a valid token, and a tenant's token binds its connection to
// that tenant (docs/security.md).
#include <fcntl.h>
#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/capability.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/tcp_connect.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/master/master_service.h"
#include "mooncake/store/master/master_testing.h"
#include "mooncake/store/master/tenant_guard.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/frame.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/tcp_channel.h"
#include "mooncake/store/rpc/tcp_server.h"

namespace mooncake::master {
namespace {

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MasterConformance);

using testing_internal::EndReq;
using testing_internal::GetReq;
using testing_internal::MountReq;
using testing_internal::PutReq;

constexpr std::string_view kServerTokens =
    "cluster      c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1\n"
    "tenant:alice a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1\n"
    "tenant:bob   b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0\n";

std::shared_ptr<const auth::Credentials> Creds(std::string_view text) {
  auto c = auth::Credentials::Parse(text, "test");
  EXPECT_TRUE(c.ok()) << c.status();
  return std::make_shared<const auth::Credentials>(*std::move(c));
}

std::shared_ptr<const auth::CapabilityKey> Key() {
  auto k = auth::CapabilityKey::FromCredentials(*Creds(kServerTokens));
  EXPECT_TRUE(k.ok()) << k.status();
  return std::make_shared<const auth::CapabilityKey>(*k);
}

class MasterAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MasterOptions o;
    o.tenants = {{.name = "alice", .capacity_bytes = 1 << 20},
                 {.name = "bob", .capacity_bytes = 1 << 20}};
    master_ = *Master<>::Create(o);
    service_ = std::make_unique<MasterService<Master<>>>(master_.get(), MasterServiceOptions{});
    ASSERT_TRUE(service_->Register(&registry_).ok());
    ASSERT_TRUE(GuardMasterRegistry(&registry_, *Creds(kServerTokens)).ok());
    rpc::RpcServerOptions so;
    so.auth = Creds(kServerTokens);
    so.auth_timeout_ms = 300;
    server_ = std::make_unique<rpc::RpcServer>(&registry_, so);
    ASSERT_TRUE(server_->Start().ok());
  }

  absl::StatusOr<std::unique_ptr<rpc::TcpChannel>> Connect(std::string_view tokens) {
    rpc::TcpChannelOptions co;
    if (!tokens.empty()) co.auth = Creds(tokens);
    return rpc::TcpChannel::Connect(server_->address(), co);
  }
  std::unique_ptr<rpc::TcpChannel> MustConnect(std::string_view tokens) {
    auto ch = Connect(tokens);
    EXPECT_TRUE(ch.ok()) << ch.status();
    return ch.ok() ? *std::move(ch) : nullptr;
  }

  // Mounts a segment (as the cluster) and commits `key` for `tenant`.
  uint64_t PutFor(rpc::TcpChannel& ch, const std::string& key, const std::string& tenant) {
    proto::PutStartRequest put = PutReq(key, 100);
    if (!tenant.empty()) put.mutable_options()->set_tenant(tenant);
    auto started = rpc::Call<rpc::PutStartMethod>(ch, put);
    EXPECT_TRUE(started.ok()) << started.status();
    if (!started.ok()) return 0;
    auto ended = rpc::Call<rpc::PutEndMethod>(ch, EndReq(key, started->put_id()));
    EXPECT_TRUE(ended.ok()) << ended.status();
    return started->put_id();
  }

  void Mount() {
    auto cluster = MustConnect("cluster c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1\n");
    ASSERT_TRUE(rpc::Call<rpc::MountSegmentMethod>(*cluster, MountReq("w1", "seg0", 1 << 20)).ok());
  }

  std::unique_ptr<Master<>> master_;
  std::unique_ptr<MasterService<Master<>>> service_;
  rpc::ServiceRegistry registry_;
  std::unique_ptr<rpc::RpcServer> server_;
};

constexpr std::string_view kAlice = "tenant:alice a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1\n";
constexpr std::string_view kBob = "tenant:bob b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0\n";

TEST_F(MasterAuthTest, NoTokenIsRefusedWithAClearError) {
  auto ch = MustConnect("");  // connects: TCP is not refused, calls are
  ASSERT_NE(ch, nullptr);
  auto r = rpc::Call<rpc::GetReplicasMethod>(*ch, GetReq("k"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated) << r.status();
  EXPECT_NE(std::string(r.status().message()).find("authentication required"), std::string::npos)
      << r.status();
}

TEST_F(MasterAuthTest, WrongSecretAndUnknownPrincipalAreRefusedAtConnect) {
  for (std::string_view tokens :
       {std::string_view("tenant:alice a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a2\n"),
        std::string_view("tenant:carol cccccccccccccccccccccccccccccccc\n"),
        std::string_view("cluster 0000000000000000000000000000000000\n")}) {
    auto ch = Connect(tokens);
    ASSERT_FALSE(ch.ok()) << tokens;
    EXPECT_EQ(ch.status().code(), absl::StatusCode::kUnauthenticated) << ch.status();
    EXPECT_NE(std::string(ch.status().message()).find("unknown principal or wrong secret"),
              std::string::npos)
        << ch.status();
  }
}

TEST_F(MasterAuthTest, AClientWithATokenRefusesAServerWithoutAuthentication) {
  rpc::ServiceRegistry plain_registry;
  MasterService<Master<>> plain(master_.get(), {});
  ASSERT_TRUE(plain.Register(&plain_registry).ok());
  rpc::RpcServer open_server(&plain_registry, {});
  ASSERT_TRUE(open_server.Start().ok());
  rpc::TcpChannelOptions co;
  co.auth = Creds(kAlice);
  auto ch = rpc::TcpChannel::Connect(open_server.address(), co);
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(std::string(ch.status().message()).find("does not authenticate"), std::string::npos)
      << ch.status();
}

TEST_F(MasterAuthTest, TenantsSeeOnlyTheirOwnObjects) {
  Mount();
  auto alice = MustConnect(kAlice);
  auto bob = MustConnect(kBob);
  ASSERT_NE(alice, nullptr);
  ASSERT_NE(bob, nullptr);
  // Alice's put names no tenant: her connection's tenant is filled in.
  ASSERT_NE(PutFor(*alice, "a-key", ""), 0u);
  auto mine = rpc::Call<rpc::GetReplicasMethod>(*alice, GetReq("a-key"));
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->object().tenant(), "alice");

  // Bob: read, exists, remove and list all say not found / nothing.
  EXPECT_EQ(rpc::Call<rpc::GetReplicasMethod>(*bob, GetReq("a-key")).status().code(),
            absl::StatusCode::kNotFound);
  proto::ExistsRequest ex;
  ex.set_key("a-key");
  auto exists = rpc::Call<rpc::ExistsMethod>(*bob, ex);
  ASSERT_TRUE(exists.ok()) << exists.status();
  EXPECT_FALSE(exists->exists());
  proto::RemoveRequest rm;
  rm.set_key("a-key");
  EXPECT_EQ(rpc::Call<rpc::RemoveMethod>(*bob, rm).status().code(), absl::StatusCode::kNotFound);
  proto::QueryObjectsRequest q;
  auto listed = rpc::Call<rpc::QueryObjectsMethod>(*bob, q);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->objects_size(), 0);
  // Overwrite: a put of the same key (replace) is refused.
  proto::PutStartRequest over = PutReq("a-key", 100);
  over.mutable_options()->set_replace(true);
  EXPECT_FALSE(rpc::Call<rpc::PutStartMethod>(*bob, over).ok());

  // Naming alice's tenant outright is refused.
  proto::GetReplicasRequest as_alice = GetReq("a-key");
  as_alice.set_tenant("alice");
  auto denied = rpc::Call<rpc::GetReplicasMethod>(*bob, as_alice);
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied) << denied.status();
  proto::PutStartRequest put_as = PutReq("b-key", 100);
  put_as.mutable_options()->set_tenant("alice");
  EXPECT_EQ(rpc::Call<rpc::PutStartMethod>(*bob, put_as).status().code(),
            absl::StatusCode::kPermissionDenied);
  proto::RemoveAllRequest all;
  all.set_tenant("alice");
  EXPECT_EQ(rpc::Call<rpc::RemoveAllMethod>(*bob, all).status().code(),
            absl::StatusCode::kPermissionDenied);

  // Alice's object is still there, with its bytes' checksum unchanged.
  auto still = rpc::Call<rpc::GetReplicasMethod>(*alice, GetReq("a-key"));
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_EQ(still->object().checksum(), 0x1234u);
}

// Every replica a tenant is told about carries a capability for exactly its
// range on its worker and segment: write from PutStart (until the put times
// out), read from reads (until the lease ends). The cluster gets none.
TEST_F(MasterAuthTest, TenantsGetRangeCapabilitiesWithTheirReplicas) {
  Mount();
  auto alice = MustConnect(kAlice);
  ASSERT_NE(alice, nullptr);
  const int64_t before = auth::NowUnixMs();
  auto started = rpc::Call<rpc::PutStartMethod>(*alice, PutReq("cap-key", 100));
  ASSERT_TRUE(started.ok()) << started.status();
  ASSERT_EQ(started->replicas_size(), 1);
  const proto::Replica& w = started->replicas(0);
  const auto check = [&](const proto::Replica& r, uint8_t right, std::string_view who) {
    return Key()->Check(r.worker_id(), who, r.segment_id(), r.capability(), right, r.offset(),
                        r.length(), auth::NowUnixMs());
  };
  EXPECT_TRUE(check(w, auth::kCapWrite, "tenant:alice").ok());
  EXPECT_TRUE(absl::IsPermissionDenied(check(w, auth::kCapRead, "tenant:alice")));
  EXPECT_TRUE(absl::IsPermissionDenied(check(w, auth::kCapWrite, "tenant:bob")));
  auto g = auth::DecodeCapabilityGrant(w.capability());
  ASSERT_TRUE(g.ok());
  // Rounded down to a second, keeping at least half the put's time.
  EXPECT_GE(g->expiry_unix_ms, before + static_cast<int64_t>(started->put_timeout_ms()) / 2);
  EXPECT_LE(g->expiry_unix_ms, auth::NowUnixMs() + static_cast<int64_t>(started->put_timeout_ms()));
  EXPECT_EQ(g->expiry_unix_ms % 1000, 0);
  ASSERT_TRUE(rpc::Call<rpc::PutEndMethod>(*alice, EndReq("cap-key", started->put_id())).ok());

  auto got = rpc::Call<rpc::GetReplicasMethod>(*alice, GetReq("cap-key"));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->replicas_size(), 1);
  EXPECT_TRUE(check(got->replicas(0), auth::kCapRead, "tenant:alice").ok());
  EXPECT_TRUE(absl::IsPermissionDenied(check(got->replicas(0), auth::kCapWrite, "tenant:alice")));
  g = auth::DecodeCapabilityGrant(got->replicas(0).capability());
  ASSERT_TRUE(g.ok());
  EXPECT_LE(g->expiry_unix_ms,
            auth::NowUnixMs() + static_cast<int64_t>(got->lease().expires_in_ms()) + 1);

  proto::BatchGetReplicasRequest batch;
  *batch.add_items() = GetReq("cap-key");
  auto many = rpc::Call<rpc::BatchGetReplicasMethod>(*alice, batch);
  ASSERT_TRUE(many.ok()) << many.status();
  ASSERT_EQ(many->items_size(), 1);
  ASSERT_EQ(many->items(0).replicas_size(), 1);
  EXPECT_TRUE(check(many->items(0).replicas(0), auth::kCapRead, "tenant:alice").ok());

  auto cluster = MustConnect("cluster c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1\n");
  proto::GetReplicasRequest as_alice = GetReq("cap-key");
  as_alice.set_tenant("alice");
  auto plain = rpc::Call<rpc::GetReplicasMethod>(*cluster, as_alice);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_EQ(plain->replicas_size(), 1);
  EXPECT_TRUE(plain->replicas(0).capability().empty());
}

TEST_F(MasterAuthTest, ATenantCannotEndOrRevokeAnotherTenantsPutNorReleaseItsLeases) {
  Mount();
  auto alice = MustConnect(kAlice);
  auto bob = MustConnect(kBob);
  auto started = rpc::Call<rpc::PutStartMethod>(*alice, PutReq("pending", 100));
  ASSERT_TRUE(started.ok()) << started.status();
  // Bob knows the key and guesses the put id (they are sequential).
  EXPECT_EQ(
      rpc::Call<rpc::PutEndMethod>(*bob, EndReq("pending", started->put_id())).status().code(),
      absl::StatusCode::kNotFound);
  proto::PutRevokeRequest revoke;
  revoke.set_key("pending");
  revoke.set_put_id(started->put_id());
  EXPECT_EQ(rpc::Call<rpc::PutRevokeMethod>(*bob, revoke).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(rpc::Call<rpc::PutEndMethod>(*alice, EndReq("pending", started->put_id())).ok());

  auto read = rpc::Call<rpc::GetReplicasMethod>(*alice, GetReq("pending"));
  ASSERT_TRUE(read.ok()) << read.status();
  proto::ReleaseLeasesRequest release;
  release.add_lease_ids(read->lease().lease_id());
  auto by_bob = rpc::Call<rpc::ReleaseLeasesMethod>(*bob, release);
  ASSERT_TRUE(by_bob.ok()) << by_bob.status();
  EXPECT_EQ(by_bob->released(), 0u);
  auto by_alice = rpc::Call<rpc::ReleaseLeasesMethod>(*alice, release);
  ASSERT_TRUE(by_alice.ok()) << by_alice.status();
  EXPECT_EQ(by_alice->released(), 1u);
}

TEST_F(MasterAuthTest, ABatchsItemsCannotNameAnotherTenant) {
  Mount();
  auto alice = MustConnect(kAlice);
  auto bob = MustConnect(kBob);
  PutFor(*alice, "a-secret", "");
  // Bob's batch: the guard makes it bob's; an item naming alice is refused,
  // an item naming nobody is bob's (alice's object is not found for it).
  proto::BatchGetReplicasRequest get;
  *get.add_items() = GetReq("a-secret");
  proto::GetReplicasRequest& named = *get.add_items();
  named = GetReq("a-secret");
  named.set_tenant("alice");
  auto got = rpc::Call<rpc::BatchGetReplicasMethod>(*bob, get);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->status_size(), 2);
  EXPECT_EQ(got->status(0).code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_EQ(got->status(1).code(), static_cast<int>(absl::StatusCode::kPermissionDenied));
  // A batch naming another tenant at the top is refused whole.
  get.set_tenant("alice");
  EXPECT_EQ(rpc::Call<rpc::BatchGetReplicasMethod>(*bob, get).status().code(),
            absl::StatusCode::kPermissionDenied);
  // Bob cannot put as alice through an item, nor end alice's put.
  proto::BatchPutStartRequest put;
  proto::PutStartRequest& as_alice = *put.add_items();
  as_alice = PutReq("b-as-alice", 100);
  as_alice.mutable_options()->set_tenant("alice");
  auto started = rpc::Call<rpc::BatchPutStartMethod>(*bob, put);
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ(started->status(0).code(), static_cast<int>(absl::StatusCode::kPermissionDenied));
  auto pending = rpc::Call<rpc::PutStartMethod>(*alice, PutReq("a-pending", 100));
  ASSERT_TRUE(pending.ok()) << pending.status();
  proto::BatchPutEndRequest end;
  *end.add_items() = EndReq("a-pending", pending->put_id());
  auto ended = rpc::Call<rpc::BatchPutEndMethod>(*bob, end);
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->status(0).code(), static_cast<int>(absl::StatusCode::kNotFound));
  auto mine = rpc::Call<rpc::BatchPutEndMethod>(*alice, end);
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->status(0).code(), 0) << mine->status(0).message();
}

TEST_F(MasterAuthTest, CachedReadReportsCountOnlyTheTenantsOwnObjects) {
  Mount();
  auto alice = MustConnect(kAlice);
  auto bob = MustConnect(kBob);
  PutFor(*alice, "a-object", "");
  proto::TouchObjectsRequest touch;
  touch.add_keys("a-object");
  touch.add_reads(3);
  auto mine = rpc::Call<rpc::TouchObjectsMethod>(*alice, touch);
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->touched(), 1u);
  // Bob's report is made bob's: alice's object is not found for it.
  auto theirs = rpc::Call<rpc::TouchObjectsMethod>(*bob, touch);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  EXPECT_EQ(theirs->touched(), 0u);
  touch.set_tenant("alice");
  EXPECT_EQ(rpc::Call<rpc::TouchObjectsMethod>(*bob, touch).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(MasterAuthTest, TenantsMayNotCallWorkerOrOperatorMethods) {
  auto alice = MustConnect(kAlice);
  EXPECT_EQ(
      rpc::Call<rpc::MountSegmentMethod>(*alice, MountReq("evil", "s", 1 << 20)).status().code(),
      absl::StatusCode::kPermissionDenied);
  proto::HeartbeatRequest hb;
  hb.set_worker_id("w1");
  EXPECT_EQ(rpc::Call<rpc::HeartbeatMethod>(*alice, hb).status().code(),
            absl::StatusCode::kPermissionDenied);
  proto::DrainWorkerRequest drain;
  EXPECT_EQ(rpc::Call<rpc::DrainWorkerMethod>(*alice, drain).status().code(),
            absl::StatusCode::kPermissionDenied);
  // Describing segments (where to read from) is allowed.
  proto::DescribeSegmentsRequest d;
  d.add_segment_ids(1);
  auto described = rpc::Call<rpc::DescribeSegmentsMethod>(*alice, d);
  EXPECT_TRUE(described.ok()) << described.status();
}

TEST_F(MasterAuthTest, TheClusterTokenActsForAnyTenant) {
  Mount();
  auto cluster = MustConnect("cluster c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1\n");
  ASSERT_NE(PutFor(*cluster, "c-key", "bob"), 0u);
  auto bob = MustConnect(kBob);
  EXPECT_TRUE(rpc::Call<rpc::GetReplicasMethod>(*bob, GetReq("c-key")).ok());
}

// A peer that sends a frame before authenticating gets a connection error and
// EOF; one that sends nothing is closed after auth_timeout_ms.
TEST_F(MasterAuthTest, RawPeersGetNothingAndIdleOnesAreClosed) {
  const auto connect = [&] {
    auto fd = ConnectTcp(HostPort{"127.0.0.1", server_->port()}, absl::Now() + absl::Seconds(2));
    EXPECT_TRUE(fd.ok());
    timeval tv{5, 0};
    ::setsockopt(fd->get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    // Back to blocking reads for this test.
    const int flags = ::fcntl(fd->get(), F_GETFL);
    ::fcntl(fd->get(), F_SETFL, flags & ~O_NONBLOCK);
    return *std::move(fd);
  };
  const auto read_all = [](int fd) {
    std::string got;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  };
  {
    UniqueFd fd = connect();
    rpc::FrameHeader h;
    h.method_id = rpc::GetReplicasMethod::kId;
    h.request_id = 7;
    proto::GetReplicasRequest req = GetReq("k");
    const std::string frame = rpc::EncodeFrame(h, req.SerializeAsString());
    ASSERT_EQ(::send(fd.get(), frame.data(), frame.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(frame.size()));
    const std::string got = read_all(fd.get());
    auto f = rpc::DecodeFrame(got, rpc::kDefaultMaxPayloadBytes);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->header.request_id, 0u);  // a connection error, no answer to request 7
    EXPECT_EQ(f->header.code, absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(got.size(), rpc::kFrameHeaderBytes + f->payload.size());  // nothing else
  }
  {
    UniqueFd fd = connect();
    const auto start = std::chrono::steady_clock::now();
    const std::string got = read_all(fd.get());
    const auto waited = std::chrono::steady_clock::now() - start;
    EXPECT_GE(waited, std::chrono::milliseconds(250));
    EXPECT_LT(waited, std::chrono::seconds(4));
    auto f = rpc::DecodeFrame(got, rpc::kDefaultMaxPayloadBytes);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->header.code, absl::StatusCode::kUnauthenticated);
    EXPECT_NE(std::string(f->payload).find("did not authenticate within 300 ms"),
              std::string::npos);
  }
}

// The guard finds each request's tenant field at compile time. Checked here
// against the request's descriptor, for every master method: a tenant method
// whose request has `tenant` (or `options.tenant`) gets the caller's tenant
// when it names none and is refused for another; the others are refused.
template <typename Method>
void CheckGuardOf(const auth::Principal& alice) {
  SCOPED_TRACE(std::string(Method::kName));
  using google::protobuf::FieldDescriptor;
  typename Method::Request request;
  rpc::ServerCallContext ctx;
  ctx.method_id = Method::kId;
  ctx.principal = &alice;
  if (!TenantMayCall(Method::kId)) {
    EXPECT_EQ(GuardMasterRequest(ctx, request).code(), absl::StatusCode::kPermissionDenied);
    return;
  }
  const google::protobuf::Descriptor* d = request.GetDescriptor();
  const FieldDescriptor* top = d->FindFieldByName("tenant");
  const FieldDescriptor* opts = d->FindFieldByName("options");
  const bool in_options = top == nullptr && opts != nullptr &&
                          opts->type() == FieldDescriptor::TYPE_MESSAGE &&
                          opts->message_type()->FindFieldByName("tenant") != nullptr;
  const auto tenant_of = [&](google::protobuf::Message& m) -> std::string {
    if (top != nullptr) return m.GetReflection()->GetString(m, top);
    const google::protobuf::Message& o = m.GetReflection()->GetMessage(m, opts);
    return o.GetReflection()->GetString(o, o.GetDescriptor()->FindFieldByName("tenant"));
  };
  ASSERT_TRUE(GuardMasterRequest(ctx, request).ok());
  if (top == nullptr && !in_options) return;  // names no tenant's data
  EXPECT_EQ(tenant_of(request), "alice");
  typename Method::Request other;
  if (top != nullptr) {
    other.GetReflection()->SetString(&other, top, "bob");
  } else {
    google::protobuf::Message* o = other.GetReflection()->MutableMessage(&other, opts);
    o->GetReflection()->SetString(o, o->GetDescriptor()->FindFieldByName("tenant"), "bob");
  }
  EXPECT_EQ(GuardMasterRequest(ctx, other).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(tenant_of(other), "bob");
}

template <typename... Methods>
void CheckGuards(const auth::Principal& alice) {
  (CheckGuardOf<Methods>(alice), ...);
}

TEST(TenantGuardTest, EveryMethodsRequestActsAsTheCallersTenant) {
  auth::Principal alice;
  alice.name = "tenant:alice";
  alice.tenant = "alice";
  ASSERT_FALSE(alice.cluster());
  namespace r = rpc;
  CheckGuards<r::MountSegmentMethod, r::UnmountSegmentMethod, r::HeartbeatMethod, r::PutStartMethod,
              r::PutEndMethod, r::PutRevokeMethod, r::GetReplicasMethod, r::ReleaseLeasesMethod,
              r::RemoveMethod, r::ExistsMethod, r::BatchExistsMethod, r::PrefixQueryMethod,
              r::DescribeSegmentsMethod, r::TierSyncMethod, r::TierReportMethod, r::RemoveAllMethod,
              r::CopySyncMethod, r::DrainWorkerMethod, r::DrainStatusMethod,
              r::CreateCopyTaskMethod, r::CreateMoveTaskMethod, r::QueryTaskMethod, r::CloneMethod,
              r::CommitGroupMethod, r::RemoveGroupMethod, r::QueryObjectsMethod,
              r::BatchGetReplicasMethod, r::BatchPutStartMethod, r::BatchPutEndMethod,
              r::TouchObjectsMethod>(alice);
  // Every method id of master.proto is in the list above.
  EXPECT_EQ(store::proto::MasterMethodId_descriptor()->value_count(), 31);
  // A request of another type under a method's id is an error, not a cast.
  proto::PutStartRequest wrong;
  rpc::ServerCallContext ctx;
  ctx.method_id = rpc::GetReplicasMethod::kId;
  ctx.principal = &alice;
  EXPECT_EQ(GuardMasterRequest(ctx, wrong).code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace mooncake::master
