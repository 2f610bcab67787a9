#include "mooncake/store/master/master_service.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/metrics.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/inproc_channel.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/rpc/tcp_channel.h"
#include "mooncake/store/rpc/tcp_server.h"

namespace mooncake::master {
namespace {

// The whole protocol a worker and a client run, over any channel: mount,
// heartbeat, put (start, end), get with a lease, prefix query, release,
// remove, and the error codes a caller must handle.
template <typename Channel>
void RunProtocol(Channel& ch, FakeClock& clock, Master<>& master) {
  proto::MountSegmentRequest mount;
  mount.mutable_segment()->set_worker_id("worker-1");
  mount.mutable_segment()->set_name("dram0");
  mount.mutable_segment()->set_size_bytes(1 << 20);
  mount.mutable_segment()->mutable_endpoint()->set_host_id("h1");
  mount.mutable_segment()->mutable_endpoint()->set_tcp_address("127.0.0.1:9000");
  auto mounted = rpc::Call<rpc::MountSegmentMethod>(ch, mount);
  ASSERT_TRUE(mounted.ok()) << mounted.status();
  EXPECT_GT(mounted->segment_id(), 0u);
  EXPECT_GT(mounted->heartbeat_interval_ms(), 0u);

  proto::HeartbeatRequest hb;
  hb.set_worker_id("worker-1");
  hb.set_sequence(1);
  auto beat = rpc::Call<rpc::HeartbeatMethod>(ch, hb);
  ASSERT_TRUE(beat.ok());
  EXPECT_FALSE(beat->remount_required());

  const Hash128 block{42, 43};
  proto::PutStartRequest put;
  put.set_key(rpc::BlockObjectKey(block));
  put.set_size_bytes(8192);
  put.set_checksum(7);
  put.mutable_tensor()->set_model("m");
  put.mutable_tensor()->set_block_tokens(16);
  auto started = rpc::Call<rpc::PutStartMethod>(ch, put);
  ASSERT_TRUE(started.ok()) << started.status();
  ASSERT_EQ(started->replicas_size(), 1);
  EXPECT_EQ(started->replicas(0).segment_id(), mounted->segment_id());
  // The same key again while in flight: ALREADY_EXISTS travels with its message.
  auto dup = rpc::Call<rpc::PutStartMethod>(ch, put);
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(dup.status().message().find("being put"), absl::string_view::npos);

  proto::PutEndRequest end;
  end.set_key(put.key());
  end.set_put_id(started->put_id());
  auto ended = rpc::Call<rpc::PutEndMethod>(ch, end);
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->object().tensor().model(), "m");

  proto::PrefixQueryRequest q;
  rpc::ToProto(block, q.add_chain());
  rpc::ToProto(Hash128{1, 1}, q.add_chain());
  q.set_with_replicas(true);
  auto found = rpc::Call<rpc::PrefixQueryMethod>(ch, q);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->matched(), 1u);
  ASSERT_EQ(found->blocks_size(), 1);
  EXPECT_EQ(found->blocks(0).object().checksum(), 7u);

  proto::GetReplicasRequest get;
  get.set_key(put.key());
  auto got = rpc::Call<rpc::GetReplicasMethod>(ch, get);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->replicas(0).offset(), started->replicas(0).offset());

  // Where the replica lives, as the worker mounted it.
  proto::DescribeSegmentsRequest where;
  where.add_segment_ids(got->replicas(0).segment_id());
  auto described = rpc::Call<rpc::DescribeSegmentsMethod>(ch, where);
  ASSERT_TRUE(described.ok()) << described.status();
  ASSERT_EQ(described->segments_size(), 1);
  EXPECT_EQ(described->segments(0).state(), proto::SEGMENT_MOUNTED);
  EXPECT_EQ(described->segments(0).segment().endpoint().tcp_address(), "127.0.0.1:9000");

  proto::RemoveRequest rm;
  rm.set_key(put.key());
  ASSERT_TRUE(rpc::Call<rpc::RemoveMethod>(ch, rm).ok());
  EXPECT_EQ(master.Stats().used_bytes, 8192u);  // two leases hold the space
  proto::ReleaseLeasesRequest rel;
  rel.add_lease_ids(found->lease().lease_id());
  rel.add_lease_ids(got->lease().lease_id());
  auto released = rpc::Call<rpc::ReleaseLeasesMethod>(ch, rel);
  ASSERT_TRUE(released.ok());
  EXPECT_EQ(released->released(), 2u);
  EXPECT_EQ(master.Stats().used_bytes, 0u);

  proto::BatchExistsRequest be;
  be.add_keys(put.key());
  be.add_keys("");
  EXPECT_EQ(rpc::Call<rpc::BatchExistsMethod>(ch, be).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rpc::Call<rpc::GetReplicasMethod>(ch, get).status().code(),
            absl::StatusCode::kNotFound);

  // The worker goes silent: it is dropped and told to remount.
  clock.AdvanceMs(master.options().membership.heartbeat_timeout_ms + 1);
  master.Tick();
  auto late = rpc::Call<rpc::HeartbeatMethod>(ch, hb);
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(late->remount_required());
  EXPECT_EQ(rpc::Call<rpc::PutStartMethod>(ch, put).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(MasterServiceTest, ProtocolInProcess) {
  FakeClock clock(1'000'000'000);
  auto master = *Master<>::Create(MasterOptions{}, &clock);
  MasterService<Master<>> service(master.get(), {});
  rpc::ServiceRegistry registry;
  ASSERT_TRUE(service.Register(&registry).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(service.Register(&registry)));
  rpc::InProcessChannel channel(&registry);
  RunProtocol(channel, clock, *master);
}

TEST(MasterServiceTest, ProtocolOverTcp) {
  FakeClock clock(1'000'000'000);
  auto master = *Master<>::Create(MasterOptions{}, &clock);
  MasterService<Master<>> service(master.get(), {});
  rpc::ServiceRegistry registry;
  ASSERT_TRUE(service.Register(&registry).ok());
  rpc::RpcServer server(&registry, {.host = "127.0.0.1", .port = 0});
  ASSERT_TRUE(server.Start().ok());
  auto channel = rpc::TcpChannel::Connect(server.address());
  ASSERT_TRUE(channel.ok()) << channel.status();
  RunProtocol(**channel, clock, *master);
}

// Several TCP clients put and get disjoint keys concurrently through inline
// and worker-pool handlers; every committed key is then readable.
TEST(MasterServiceTest, ConcurrentClientsOverTcp) {
  auto master = *Master<>::Create(MasterOptions{});
  MasterService<Master<>> service(master.get(), {});
  rpc::ServiceRegistry registry;
  ASSERT_TRUE(service.Register(&registry).ok());
  rpc::RpcServer server(&registry, {.host = "127.0.0.1", .port = 0, .io_threads = 2});
  ASSERT_TRUE(server.Start().ok());
  service.StartTicker();
  {
    auto ch = *rpc::TcpChannel::Connect(server.address());
    proto::MountSegmentRequest mount;
    mount.mutable_segment()->set_worker_id("w");
    mount.mutable_segment()->set_name("s");
    mount.mutable_segment()->set_size_bytes(16 << 20);
    ASSERT_TRUE(rpc::Call<rpc::MountSegmentMethod>(*ch, mount).ok());
  }
  std::vector<std::thread> clients;
  std::atomic<int> failures{0};
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      auto ch = rpc::TcpChannel::Connect(server.address());
      if (!ch.ok()) {
        failures.fetch_add(1);
        return;
      }
      for (int i = 0; i < 100; ++i) {
        proto::PutStartRequest put;
        put.set_key("c" + std::to_string(c) + "-" + std::to_string(i));
        put.set_size_bytes(1024);
        auto s = rpc::Call<rpc::PutStartMethod>(**ch, put);
        proto::PutEndRequest end;
        end.set_key(put.key());
        end.set_put_id(s.ok() ? s->put_id() : 0);
        if (!s.ok() || !rpc::Call<rpc::PutEndMethod>(**ch, end).ok()) failures.fetch_add(1);
        proto::GetReplicasRequest get;
        get.set_key(put.key());
        if (!rpc::Call<rpc::GetReplicasMethod>(**ch, get).ok()) failures.fetch_add(1);
      }
    });
  }
  for (auto& t : clients) t.join();
  service.StopTicker();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(master->Stats().objects, 400);
}

// PutStart runs on the I/O thread while it evicts little; one that must evict
// more than inline_put_evictions objects moves to the pool and still succeeds.
TEST(MasterServiceTest, PutStartThatMustEvictMuchMovesToThePool) {
  FakeClock clock(1'000'000'000);
  MasterOptions o;
  o.inline_put_evictions = 1;
  auto master = *Master<>::Create(o, &clock);
  MasterService<Master<>> service(master.get(), {});
  MetricsRegistry metrics;
  rpc::ServiceRegistry registry(&metrics);
  ASSERT_TRUE(service.Register(&registry).ok());
  rpc::RpcServer server(&registry, {.host = "127.0.0.1", .port = 0});
  ASSERT_TRUE(server.Start().ok());
  auto ch = *rpc::TcpChannel::Connect(server.address());
  proto::MountSegmentRequest mount;
  mount.mutable_segment()->set_worker_id("w");
  mount.mutable_segment()->set_name("s");
  mount.mutable_segment()->set_size_bytes(8 * 4096);
  ASSERT_TRUE(rpc::Call<rpc::MountSegmentMethod>(*ch, mount).ok());
  auto put = [&](const std::string& key, uint64_t size) -> absl::Status {
    proto::PutStartRequest start;
    start.set_key(key);
    start.set_size_bytes(size);
    auto s = rpc::Call<rpc::PutStartMethod>(*ch, start);
    if (!s.ok()) return s.status();
    proto::PutEndRequest end;
    end.set_key(key);
    end.set_put_id(s->put_id());
    return rpc::Call<rpc::PutEndMethod>(*ch, end).status();
  };
  auto deferred = [&] {
    const std::string m = metrics.RenderPrometheus();
    const std::string name = "\nmooncake_rpc_server_deferred_total ";
    const size_t at = m.find(name);
    return at == std::string::npos ? -1 : std::stoi(m.substr(at + name.size()));
  };
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(put("k" + std::to_string(i), 4096).ok());
  EXPECT_EQ(deferred(), 0);
  ASSERT_TRUE(put("one", 4096).ok());  // evicts one object: inline
  EXPECT_EQ(deferred(), 0);
  const absl::Status big = put("four", 4 * 4096);  // four: on the pool
  ASSERT_TRUE(big.ok()) << big;
  EXPECT_EQ(deferred(), 1);
  proto::ExistsRequest e;
  e.set_key("four");
  EXPECT_TRUE(master->Exists(e)->exists());
  // The inline try's eviction stays done; the charge is counted once.
  const uint64_t objects = master->Stats().objects;
  EXPECT_LE(objects, 5u);
  EXPECT_EQ(master->TenantUsage("")->used_bytes, (objects - 1) * 4096 + 4 * 4096);
}

TEST(MasterServiceTest, TickerTicks) {
  FakeClock clock;
  auto master = *Master<>::Create(MasterOptions{}, &clock);
  MasterService<Master<>> service(master.get(), {.tick_interval_ms = 1});
  service.StartTicker();
  while (service.ticks() < 3) std::this_thread::yield();
  service.StopTicker();
  service.StopTicker();
  EXPECT_GE(service.ticks(), 3u);
}

}  // namespace
}  // namespace mooncake::master
