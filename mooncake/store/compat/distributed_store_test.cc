#include "mooncake/store/compat/distributed_store.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/store/node/store_node.h"
#include "mooncake/store/node/testing/node_testing.h"

namespace mooncake::compat {
namespace {

// A real master on a free loopback port; the stores under test contribute
// the segments.
class DistributedStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = node::StoreNode::Start(node_testing::TestNodeOptions(node::Role::kMaster));
    ASSERT_TRUE(m.ok()) << m.status();
    master_ = std::move(*m);
  }
  StoreConfig Config(uint64_t segment = 16 << 20, uint64_t buffer = 4 << 20) const {
    StoreConfig c;
    c.local_hostname = "127.0.0.1";
    c.global_segment_size = segment;
    c.local_buffer_size = buffer;
    c.master_server_addr = master_->rpc_address();
    return c;
  }
  std::unique_ptr<node::StoreNode> master_;
};

TEST(ClientOptionsFromEnvTest, NetworkCompressionAndLinkRate) {
  ::unsetenv("MOONCAKE_TRANSPORTS");
  ::unsetenv("MOONCAKE_NETWORK_COMPRESSION");
  ::unsetenv("MOONCAKE_NETWORK_LINK_BYTES_PER_S");
  auto o = MakeClientOptions();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->network_compression, client::NetworkCompression::kOff);
  ::setenv("MOONCAKE_NETWORK_COMPRESSION", "auto", 1);
  ::setenv("MOONCAKE_NETWORK_LINK_BYTES_PER_S", "125000000", 1);
  o = MakeClientOptions();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->network_compression, client::NetworkCompression::kAuto);
  EXPECT_EQ(o->network_link_bytes_per_s, 125e6);
  ::setenv("MOONCAKE_NETWORK_COMPRESSION", "always", 1);
  EXPECT_EQ(MakeClientOptions()->network_compression, client::NetworkCompression::kAlways);
  ::setenv("MOONCAKE_NETWORK_COMPRESSION", "sometimes", 1);
  EXPECT_TRUE(absl::IsInvalidArgument(MakeClientOptions().status()));
  ::setenv("MOONCAKE_NETWORK_COMPRESSION", "off", 1);
  ::setenv("MOONCAKE_NETWORK_LINK_BYTES_PER_S", "fast", 1);
  EXPECT_TRUE(absl::IsInvalidArgument(MakeClientOptions().status()));
  ::unsetenv("MOONCAKE_NETWORK_COMPRESSION");
  ::unsetenv("MOONCAKE_NETWORK_LINK_BYTES_PER_S");
}

TEST(ClientOptionsFromEnvTest, QosLinkRateAndClass) {
  ::unsetenv("MOONCAKE_TRANSPORTS");
  ::unsetenv("MOONCAKE_QOS_CLASS");
  ::unsetenv("MOONCAKE_QOS_LINK_BYTES_PER_S");
  ::setenv("MOONCAKE_QOS_LINK", "eth0", 1);
  EXPECT_TRUE(absl::IsInvalidArgument(MakeClientOptions().status())) << "a link needs its rate";
  ::setenv("MOONCAKE_QOS_LINK_BYTES_PER_S", "125000000", 1);
  auto o = MakeClientOptions();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->qos_link, "eth0");
  EXPECT_EQ(o->qos_link_bytes_per_s, 125'000'000u);
  EXPECT_EQ(o->qos_class, 1u);
  ::setenv("MOONCAKE_QOS_CLASS", "critical", 1);
  EXPECT_EQ(MakeClientOptions()->qos_class, 0u);
  ::setenv("MOONCAKE_QOS_CLASS", "urgent", 1);
  EXPECT_TRUE(absl::IsInvalidArgument(MakeClientOptions().status()));
  ::setenv("MOONCAKE_QOS_CLASS", "bulk", 1);
  ::setenv("MOONCAKE_QOS_LINK_BYTES_PER_S", "fast", 1);
  EXPECT_TRUE(absl::IsInvalidArgument(MakeClientOptions().status()));
  ::unsetenv("MOONCAKE_QOS_LINK");
  ::unsetenv("MOONCAKE_QOS_CLASS");
  ::unsetenv("MOONCAKE_QOS_LINK_BYTES_PER_S");
  o = MakeClientOptions();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->qos_link.empty());
}

TEST_F(DistributedStoreTest, ProtocolRdmaNeedsAnRdmaBuildAndDevice) {
  DistributedStore s;
  StoreConfig c = Config();
  c.protocol = "rdma";
  // The default build has no RDMA transport; a --config=rdma build on this
  // host has no RDMA device. Either way setup fails and says why.
  EXPECT_NE(s.Setup(c), kOk);
  EXPECT_TRUE(absl::StrContains(s.last_error(), "RDMA")) << s.last_error();
  c.protocol = "udp";
  EXPECT_EQ(s.Setup(c), kInvalidParams);
  EXPECT_EQ(s.Setup(Config()), kOk) << s.last_error();
}

TEST_F(DistributedStoreTest, PutGetAndMooncakesCodes) {
  DistributedStore s;
  ASSERT_EQ(s.Setup(Config()), kOk) << s.last_error();
  EXPECT_EQ(s.Setup(Config()), kInvalidParams) << "a second setup without close";
  EXPECT_EQ(s.Put("k", "first", {}), kOk);
  EXPECT_EQ(s.Put("k", "second", {}), kOk) << "an existing key is kept and reported as success";
  EXPECT_EQ(*s.Get("k"), "first");
  EXPECT_EQ(s.Upsert("k", "third", {}), kOk);
  EXPECT_EQ(*s.Get("k"), "third");
  int code = 0;
  EXPECT_FALSE(s.Get("absent", &code).has_value());
  EXPECT_EQ(code, kObjectNotFound);
  EXPECT_EQ(s.Put("", "x", {}), kInvalidKey);
  EXPECT_EQ(s.Put(std::string(5000, 'k'), "x", {}), kInvalidKey);
  EXPECT_EQ(s.Put("empty", "", {}), kInvalidParams);
  EXPECT_EQ(s.IsExist("k"), 1);
  EXPECT_EQ(s.IsExist("absent"), 0);
  EXPECT_EQ(s.GetSize("k"), 5);
  EXPECT_EQ(s.Remove("absent"), kObjectNotFound);
  EXPECT_EQ(s.Remove("k"), kOk);
  EXPECT_EQ(s.IsExist("k"), 0);
  EXPECT_EQ(s.Close(), kOk);
  EXPECT_EQ(s.Close(), kOk);
  EXPECT_EQ(s.Put("k", "x", {}), kInternalError) << "closed";
}

TEST_F(DistributedStoreTest, StagingBufferBoundsPutsAndRegisteredBuffersDoNot) {
  DistributedStore s;
  ASSERT_EQ(s.Setup(Config(16 << 20, /*buffer=*/0)), kOk) << s.last_error();
  EXPECT_EQ(s.Put("k", "value", {}), kBufferOverflow);
  EXPECT_EQ(s.IsExist("k"), 0) << "a failed put leaves no object";
  std::vector<char> region(1 << 20, 'r');
  const uintptr_t base = reinterpret_cast<uintptr_t>(region.data());
  EXPECT_EQ(s.PutFrom("k", base, 100, {}), kInvalidParams) << "not registered yet";
  ASSERT_EQ(s.RegisterBuffer(base, region.size()), kOk);
  EXPECT_EQ(s.RegisterBuffer(base + 10, 10), kInvalidParams) << "overlap";
  EXPECT_EQ(s.PutFrom("k", base, 100, {}), kOk);
  std::vector<char> out(1 << 20);
  const uintptr_t dst = reinterpret_cast<uintptr_t>(out.data());
  ASSERT_EQ(s.RegisterBuffer(dst, out.size()), kOk);
  EXPECT_EQ(s.GetInto("k", dst, out.size()), 100);
  EXPECT_EQ(std::string(out.data(), 100), std::string(100, 'r'));
  EXPECT_EQ(s.GetInto("k", dst, 10), kBufferOverflow);
  EXPECT_EQ(s.GetInto("k", dst + out.size() - 5, 50), kInvalidParams) << "past the buffer";
  EXPECT_EQ(s.UnregisterBuffer(dst + 1), kInvalidParams);
  EXPECT_EQ(s.UnregisterBuffer(dst), kOk);
}

TEST_F(DistributedStoreTest, BatchesRangesAndRemoval) {
  DistributedStore s;
  ASSERT_EQ(s.Setup(Config()), kOk) << s.last_error();
  const std::vector<std::string_view> keys = {"a1", "a2", "b1"};
  const std::vector<std::string_view> values = {"alpha-one", "alpha-two", "beta-one"};
  EXPECT_EQ(s.PutBatch(keys, values, {}), kOk);
  EXPECT_EQ(s.PutBatch(keys, std::span(values).first(2), {}), kInvalidParams);
  EXPECT_EQ(s.BatchIsExist(std::vector<std::string_view>{"a1", "zz", ""}),
            (std::vector<int>{1, 0, kInvalidKey}));
  std::vector<char> buf(64, 0);
  const uintptr_t base = reinterpret_cast<uintptr_t>(buf.data());
  ASSERT_EQ(s.RegisterBuffer(base, buf.size()), kOk);
  std::vector<BufferRanges> ranges(1);
  ranges[0].buffer = base;
  ranges[0].keys = {{"a1", {0, 10}, {0, 6}, {5, 3}}, {"b1", {60}, {0}, {8}}};
  auto r = s.GetIntoRanges(ranges);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0][0], (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(r[0][1], (std::vector<int64_t>{kInvalidParams})) << "past the registered buffer";
  EXPECT_EQ(std::string(buf.data(), 5), "alpha");
  EXPECT_EQ(std::string(buf.data() + 10, 3), "one");
  EXPECT_EQ(s.RemoveByRegex("a.*"), 2);
  EXPECT_EQ(s.RemoveByRegex("("), kInvalidParams);
  EXPECT_EQ(s.RemoveAll(), 1);
}

TEST_F(DistributedStoreTest, ReplicasLandOnTwoClientsSegments) {
  DistributedStore a, b;
  ASSERT_EQ(a.Setup(Config()), kOk) << a.last_error();
  ASSERT_EQ(b.Setup(Config()), kOk) << b.last_error();
  EXPECT_NE(a.GetHostname(), b.GetHostname());
  ReplicateConfig two;
  two.replica_num = 2;
  ASSERT_EQ(a.Put("k", std::string(10000, 'v'), two), kOk);
  EXPECT_EQ(b.Close(), kOk);
  EXPECT_EQ(*a.Get("k"), std::string(10000, 'v')) << "the other replica survives";
  ReplicateConfig three;
  three.replica_num = 3;
  EXPECT_EQ(a.Put("k3", "x", three), kNoAvailableHandle) << "only one segment is left";
}

TEST(DistributedStore, MasterDownIsRpcFail) {
  DistributedStore s;
  StoreConfig c;
  c.master_server_addr = "127.0.0.1:1";
  EXPECT_EQ(s.Setup(c), kRpcFail);
  EXPECT_FALSE(s.last_error().empty());
  c.protocol = "rdma";  // refused as such only by a build without RDMA
  EXPECT_EQ(s.Setup(c), client::kRdmaBuilt ? kRpcFail : kInvalidParams);
}

TEST_F(DistributedStoreTest, ReplicaTasksCheckArgumentsWithMooncakesCodes) {
  DistributedStore s;
  const std::vector<std::string> targets = {"seg"};
  EXPECT_EQ(s.CreateCopyTask("k", targets).second, kInternalError) << "before setup";
  ASSERT_EQ(s.Setup(Config()), kOk) << s.last_error();
  EXPECT_EQ(s.CreateCopyTask("", targets), std::make_pair(TaskUuid{0, 0}, kInvalidKey));
  EXPECT_EQ(s.CreateCopyTask("k", {}).second, kInvalidParams);
  EXPECT_EQ(s.CreateCopyTask("k", {"a", ""}).second, kInvalidParams);
  EXPECT_EQ(s.CreateMoveTask("k", "", "b").second, kInvalidParams);
  EXPECT_EQ(s.QueryTask(TaskUuid{1, 5}).second, kInvalidParams) << "not an id made here";
  EXPECT_EQ(s.QueryTask(TaskUuid{0, 0}).second, kInvalidParams) << "a failed create's id";
  // A valid call reaches the master: a task id, or the master's refusal.
  const auto [id, code] = s.CreateCopyTask("absent", targets);
  EXPECT_NE(code, kOk) << "no such object";
  EXPECT_EQ(id, (TaskUuid{0, 0}));
  EXPECT_EQ(s.Close(), kOk);
}

}  // namespace
}  // namespace mooncake::compat
