// HaMaster against a real etcd: election, serving, failover with the same
// objects, standbys refusing calls, snapshots, a cold restart and bad input.
#include "mooncake/store/ha/ha_master.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/metrics.h"
#include "mooncake/store/ha/leader_resolver.h"
#include "mooncake/store/ha/testing/etcd_process.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/tcp_channel.h"
#include "mooncake/store/rpc/tcp_server.h"

namespace mooncake::ha {
namespace {

namespace sp = ::mooncake::store::proto;
using M = master::Master<>;

struct Node {
  MetricsRegistry metrics;
  std::unique_ptr<rpc::ServiceRegistry> registry;
  std::unique_ptr<HaMaster<M>> ha;
  std::unique_ptr<rpc::RpcServer> server;

  void Shutdown() {
    if (ha != nullptr) ha->Stop();
    if (server != nullptr) server->Stop();
  }
};

class HaMasterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto e = EtcdProcess::Start();
    if (!e.ok()) GTEST_SKIP() << e.status();
    etcd_ = std::move(*e);
  }
  void TearDown() override {
    for (auto& n : nodes_) n->Shutdown();
    nodes_.clear();
  }

  HaMasterOptions Options() {
    HaMasterOptions o;
    o.etcd = etcd_->endpoint();
    o.cluster = "test";
    o.lease_ttl_ms = 1000;
    o.poll_ms = 20;
    return o;
  }

  static master::MasterOptions DefaultMasterOptions() {
    master::MasterOptions mo;
    mo.put_timeout_ms = 30'000;
    return mo;
  }

  absl::StatusOr<Node*> StartNode(HaMasterOptions o,
                                  master::MasterOptions mo = DefaultMasterOptions()) {
    auto n = std::make_unique<Node>();
    Node* raw = n.get();
    raw->ha = std::make_unique<HaMaster<M>>(
        o,
        [raw, mo]() -> absl::StatusOr<std::unique_ptr<M>> {
          return M::Create(mo, &MonotonicClock::Get(), &raw->metrics);
        },
        &raw->metrics);
    raw->registry = std::make_unique<rpc::ServiceRegistry>(&raw->metrics);
    RETURN_IF_ERROR(raw->ha->Register(raw->registry.get()));
    raw->server =
        std::make_unique<rpc::RpcServer>(raw->registry.get(), rpc::RpcServerOptions{.port = 0});
    RETURN_IF_ERROR(raw->server->Start());
    RETURN_IF_ERROR(raw->ha->Start(raw->server->address()));
    nodes_.push_back(std::move(n));
    return raw;
  }

  // The node that leads within `within`, or null.
  Node* WaitLeader(absl::Duration within = absl::Seconds(10)) {
    const absl::Time until = absl::Now() + within;
    while (absl::Now() < until) {
      for (auto& n : nodes_) {
        if (n->ha->IsLeader()) return n.get();
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return nullptr;
  }

  std::unique_ptr<rpc::TcpChannel> Client() {
    rpc::TcpChannelOptions o;
    o.resolve = *LeaderResolver(etcd_->endpoint(), "test");
    o.failover_retry_ns = 20'000'000;
    o.default_timeout_ns = 15'000'000'000;
    auto c = rpc::TcpChannel::Connect("", o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  static void MountAndPut(rpc::TcpChannel& c, int n, std::vector<sp::GetReplicasResponse>* got) {
    sp::MountSegmentRequest mr;
    mr.mutable_segment()->set_worker_id("w1");
    mr.mutable_segment()->set_name("seg");
    mr.mutable_segment()->set_size_bytes(1 << 24);
    mr.mutable_segment()->mutable_endpoint()->set_host_id("h");
    ASSERT_TRUE(rpc::Call<rpc::MountSegmentMethod>(c, mr).ok());
    for (int i = 0; i < n; ++i) {
      sp::PutStartRequest ps;
      ps.set_key("k" + std::to_string(i));
      ps.set_size_bytes(4096 + static_cast<uint64_t>(i));
      auto s = rpc::Call<rpc::PutStartMethod>(c, ps);
      ASSERT_TRUE(s.ok()) << s.status();
      sp::PutEndRequest pe;
      pe.set_key(ps.key());
      pe.set_put_id(s->put_id());
      ASSERT_TRUE(rpc::Call<rpc::PutEndMethod>(c, pe).ok());
      sp::GetReplicasRequest g;
      g.set_key(ps.key());
      auto r = rpc::Call<rpc::GetReplicasMethod>(c, g);
      ASSERT_TRUE(r.ok());
      got->push_back(*r);
    }
  }

  static void ExpectSame(rpc::TcpChannel& c, const std::vector<sp::GetReplicasResponse>& want) {
    for (size_t i = 0; i < want.size(); ++i) {
      sp::GetReplicasRequest g;
      g.set_key("k" + std::to_string(i));
      auto r = rpc::Call<rpc::GetReplicasMethod>(c, g);
      ASSERT_TRUE(r.ok()) << g.key() << ": " << r.status();
      ASSERT_EQ(r->replicas_size(), want[i].replicas_size());
      EXPECT_EQ(r->replicas(0).offset(), want[i].replicas(0).offset());
      EXPECT_EQ(r->replicas(0).segment_id(), want[i].replicas(0).segment_id());
      EXPECT_EQ(r->object().version(), want[i].object().version());
    }
  }

  std::unique_ptr<EtcdProcess> etcd_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

TEST_F(HaMasterTest, OneLeaderServesAndAStandbyTakesOverWithTheSameObjects) {
  ASSERT_TRUE(StartNode(Options()).ok());
  ASSERT_TRUE(StartNode(Options()).ok());
  Node* leader = WaitLeader();
  ASSERT_NE(leader, nullptr);
  int leaders = 0;
  for (auto& n : nodes_) leaders += n->ha->IsLeader() ? 1 : 0;
  EXPECT_EQ(leaders, 1);
  Node* standby = nodes_[0].get() == leader ? nodes_[1].get() : nodes_[0].get();

  // A standby refuses, naming the leader.
  {
    auto direct = *rpc::TcpChannel::Connect(standby->server->address());
    sp::ExistsRequest er;
    er.set_key("x");
    auto r = rpc::Call<rpc::ExistsMethod>(*direct, er);
    ASSERT_TRUE(absl::IsUnavailable(r.status())) << r.status();
    EXPECT_NE(r.status().message().find("not the leader"), std::string::npos);
  }

  auto c = Client();
  ASSERT_NE(c, nullptr);
  std::vector<sp::GetReplicasResponse> want;
  MountAndPut(*c, 30, &want);
  const int64_t epoch = leader->ha->status().epoch;

  leader->Shutdown();  // resigns: the standby wins within its poll
  Node* next = WaitLeader();
  ASSERT_EQ(next, standby);
  EXPECT_GT(next->ha->status().epoch, epoch);
  ExpectSame(*c, want);
  // And it takes new puts.
  sp::PutStartRequest ps;
  ps.set_key("after");
  ps.set_size_bytes(1000);
  auto s = rpc::Call<rpc::PutStartMethod>(*c, ps);
  ASSERT_TRUE(s.ok()) << s.status();
}

// With hold_write_windows (a store with a token file), a tenant's write
// capability outlives its put, so the leader holds the range of a tenant's
// object removed within the put timeout. A standby that takes over holds it
// too: another tenant's put after the failover never gets those bytes.
TEST_F(HaMasterTest, RangesHeldForLiveWriteCapabilitiesStayHeldAcrossAFailover) {
  master::MasterOptions mo = DefaultMasterOptions();
  mo.hold_write_windows = true;
  mo.tenants = {{.name = "alice", .capacity_bytes = 1 << 20},
                {.name = "bob", .capacity_bytes = 1 << 20}};
  HaMasterOptions o = Options();
  o.hold_window_ns = (mo.put_timeout_ms + 1'000) * 1'000'000;
  ASSERT_TRUE(StartNode(o, mo).ok());
  ASSERT_TRUE(StartNode(o, mo).ok());
  Node* leader = WaitLeader();
  ASSERT_NE(leader, nullptr);
  auto c = Client();
  ASSERT_NE(c, nullptr);
  sp::MountSegmentRequest mr;
  mr.mutable_segment()->set_worker_id("w1");
  mr.mutable_segment()->set_name("seg");
  mr.mutable_segment()->set_size_bytes(256 << 10);
  mr.mutable_segment()->mutable_endpoint()->set_host_id("h");
  ASSERT_TRUE(rpc::Call<rpc::MountSegmentMethod>(*c, mr).ok());
  // Alice puts and removes at once: her capability lives on.
  sp::PutStartRequest ps;
  ps.set_key("alice/doc");
  ps.set_size_bytes(64 << 10);
  ps.mutable_options()->set_tenant("alice");
  auto started = rpc::Call<rpc::PutStartMethod>(*c, ps);
  ASSERT_TRUE(started.ok() && started->replicas_size() == 1) << started.status();
  const uint64_t held_offset = started->replicas(0).offset();
  const uint64_t held_end = held_offset + started->replicas(0).length();
  sp::PutEndRequest pe;
  pe.set_key("alice/doc");
  pe.set_put_id(started->put_id());
  pe.set_tenant("alice");
  ASSERT_TRUE(rpc::Call<rpc::PutEndMethod>(*c, pe).ok());
  sp::RemoveRequest rr;
  rr.set_key("alice/doc");
  rr.set_tenant("alice");
  ASSERT_TRUE(rpc::Call<rpc::RemoveMethod>(*c, rr).ok());

  Node* standby = nodes_[0].get() == leader ? nodes_[1].get() : nodes_[0].get();
  leader->Shutdown();
  ASSERT_EQ(WaitLeader(), standby);
  // Bob fills what the new leader gives him: never alice's range.
  int placed = 0;
  for (int i = 0; i < 16; ++i) {
    sp::PutStartRequest b;
    b.set_key("bob/" + std::to_string(i));
    b.set_size_bytes(16 << 10);
    b.mutable_options()->set_tenant("bob");
    auto s = rpc::Call<rpc::PutStartMethod>(*c, b);
    if (!s.ok()) break;
    ASSERT_EQ(s->replicas_size(), 1);
    const uint64_t off = s->replicas(0).offset();
    EXPECT_TRUE(off + s->replicas(0).length() <= held_offset || off >= held_end)
        << "bob's put got [" << off << ", +" << s->replicas(0).length() << ") of alice's held ["
        << held_offset << ", " << held_end << ")";
    ++placed;
  }
  // The segment's other 192 KiB were his.
  EXPECT_EQ(placed, 12);
}

TEST_F(HaMasterTest, BatchedPutsAreDurableAcrossAFailover) {
  ASSERT_TRUE(StartNode(Options()).ok());
  ASSERT_TRUE(StartNode(Options()).ok());
  Node* leader = WaitLeader();
  ASSERT_NE(leader, nullptr);
  auto c = Client();
  ASSERT_NE(c, nullptr);
  std::vector<sp::GetReplicasResponse> want;
  MountAndPut(*c, 1, &want);  // mounts the segment; k0
  sp::BatchPutStartRequest start;
  for (int i = 1; i < 20; ++i) {
    sp::PutStartRequest& ps = *start.add_items();
    ps.set_key("k" + std::to_string(i));
    ps.set_size_bytes(4096 + static_cast<uint64_t>(i));
  }
  auto started = rpc::Call<rpc::BatchPutStartMethod>(*c, start);
  ASSERT_TRUE(started.ok()) << started.status();
  sp::BatchPutEndRequest end;
  for (int i = 0; i < start.items_size(); ++i) {
    ASSERT_EQ(started->status(i).code(), 0) << started->status(i).message();
    sp::PutEndRequest& pe = *end.add_items();
    pe.set_key(start.items(i).key());
    pe.set_put_id(started->items(i).put_id());
  }
  auto ended = rpc::Call<rpc::BatchPutEndMethod>(*c, end);
  ASSERT_TRUE(ended.ok()) << ended.status();
  sp::BatchGetReplicasRequest get;
  for (int i = 0; i < end.items_size(); ++i) {
    ASSERT_EQ(ended->status(i).code(), 0) << ended->status(i).message();
    get.add_items()->set_key(end.items(i).key());
  }
  auto got = rpc::Call<rpc::BatchGetReplicasMethod>(*c, get);
  ASSERT_TRUE(got.ok()) << got.status();
  for (int i = 0; i < got->items_size(); ++i) {
    ASSERT_EQ(got->status(i).code(), 0) << got->status(i).message();
    want.push_back(got->items(i));
  }
  // Acknowledged means stored: the next leader has every batched object.
  leader->Shutdown();
  ASSERT_NE(WaitLeader(), nullptr);
  ExpectSame(*c, want);
}

TEST_F(HaMasterTest, ColdRestartFromSnapshotAndOplogTail) {
  HaMasterOptions o = Options();
  o.snapshot_every_batches = 5;
  o.snapshot_min_interval = absl::ZeroDuration();
  ASSERT_TRUE(StartNode(o).ok());
  ASSERT_NE(WaitLeader(), nullptr);
  auto c = Client();
  std::vector<sp::GetReplicasResponse> want;
  MountAndPut(*c, 40, &want);
  // Let the leader write a snapshot (its role loop checks every poll).
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (nodes_[0]->ha->status().snapshots_written == 0 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_GE(nodes_[0]->ha->status().snapshots_written, 1u);
  nodes_[0]->Shutdown();

  ASSERT_TRUE(StartNode(o).ok());
  Node* back = WaitLeader();
  ASSERT_EQ(back, nodes_[1].get());
  EXPECT_GE(back->ha->status().snapshots_loaded, 1u);
  ExpectSame(*c, want);
}

TEST_F(HaMasterTest, ANewLeaderDiscardsBatchesAfterAHoleItsPredecessorLeft) {
  // A predecessor (epoch of a leader key made here) stored batch 2 and died
  // before batch 1 landed: batch 2 was never acknowledged.
  auto etcd = *EtcdClient::Create(etcd_->endpoint());
  OplogStore store(etcd, "test");
  ASSERT_TRUE(etcd.Put("/mooncake/ha/test/leader", "gone:1").ok());
  auto lk = etcd.Range("/mooncake/ha/test/leader");
  ASSERT_TRUE(lk.ok());
  hproto::OplogBatch orphan;
  orphan.set_seq(2);
  orphan.set_epoch(lk->kvs[0].create_revision);
  orphan.add_mutations()->set_object_erased("x");
  ASSERT_TRUE(
      store.Append(lk->kvs[0].create_revision, 2, EncodeRecord(RecordKind::kBatch, orphan)).ok());
  ASSERT_TRUE(etcd.DeleteRange("/mooncake/ha/test/leader").ok());

  ASSERT_TRUE(StartNode(Options()).ok());
  ASSERT_NE(WaitLeader(), nullptr);
  auto c = Client();
  std::vector<sp::GetReplicasResponse> want;
  MountAndPut(*c, 5, &want);  // batches 1.. are this leader's
  auto first = store.ReadFrom(1);
  ASSERT_TRUE(first.ok());
  ASSERT_FALSE(first->empty());
  EXPECT_EQ(first->front().first, 1u);
  for (const auto& [seq, bytes] : *first) {
    hproto::OplogBatch b;
    ASSERT_TRUE(DecodeRecord(RecordKind::kBatch, bytes, &b).ok());
    EXPECT_NE(b.epoch(), orphan.epoch()) << "batch " << seq << " is the orphan";
  }
}

TEST_F(HaMasterTest, BadInputIsRefusedClearly) {
  HaMasterOptions o = Options();
  o.cluster = "bad name!";
  EXPECT_TRUE(absl::IsInvalidArgument(StartNode(o).status()));

  o = Options();
  o.etcd = "http://127.0.0.1:1";  // nothing listens there
  auto s = StartNode(o).status();
  EXPECT_TRUE(absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) << s;

  // A corrupt snapshot is detected and never applied.
  o = Options();
  auto etcd = *EtcdClient::Create(etcd_->endpoint());
  OplogStore store(etcd, "test");
  ASSERT_TRUE(etcd.Put("/mooncake/ha/test/leader", "x").ok());  // lets an epoch write
  auto leader = etcd.Range("/mooncake/ha/test/leader");
  ASSERT_TRUE(leader.ok());
  ASSERT_TRUE(store.WriteSnapshot(leader->kvs[0].create_revision, 3, "garbage").ok());
  ASSERT_TRUE(etcd.DeleteRange("/mooncake/ha/test/leader").ok());
  s = StartNode(o).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
}

}  // namespace
}  // namespace mooncake::ha
