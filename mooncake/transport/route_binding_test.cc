#include "mooncake/transport/route_binding.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/transport/internal/fake_verbs.h"
#include "mooncake/transport/internal/rdma_engine.h"
#include "mooncake/transport/topology.h"
#include "mooncake/transport/topology_testing.h"

namespace mooncake::transport {
namespace {

namespace rdma = ::mooncake::transport_internal;

RoutePath Path(std::string nic, PathTransport t, double weight) {
  RoutePath p;
  p.nic = std::move(nic);
  p.transport = t;
  p.weight = weight;
  return p;
}

TEST(RouteBindingTest, BulkSpreadBecomesWeightedLocalPaths) {
  RoutePlan plan;
  plan.cls = TrafficClass::kBulk;
  plan.paths = {Path("eth0", PathTransport::kRdma, 0.5), Path("eth0", PathTransport::kTcp, 0.75),
                Path("eth1", PathTransport::kTcp, 0.25), Path("eth2", PathTransport::kTcp, 0)};
  const std::map<std::string, std::string> addrs = {{"eth0", "10.0.1.1"}, {"eth1", "10.0.2.1"}};
  auto lookup = [&](std::string_view nic) -> std::optional<std::string> {
    auto it = addrs.find(std::string(nic));
    if (it == addrs.end()) return std::nullopt;
    return it->second;
  };
  auto paths = TcpLocalPaths(plan, lookup);
  ASSERT_TRUE(paths.ok()) << paths.status();
  ASSERT_EQ(paths->size(), 2u);  // RDMA skipped, eth2 has no address
  EXPECT_EQ((*paths)[0].host, "10.0.1.1");
  EXPECT_EQ((*paths)[0].weight, 0.75);
  EXPECT_EQ((*paths)[1].host, "10.0.2.1");
  EXPECT_EQ((*paths)[1].weight, 0.25);
  // They are valid transport options.
  TcpTransport::Options o;
  o.local_paths = *paths;
  EXPECT_TRUE(TcpTransport::CheckOptions(o).ok());
}

TEST(RouteBindingTest, NoAddressIsAClearError) {
  RoutePlan plan;
  plan.paths = {Path("ib0", PathTransport::kTcp, 1)};
  auto paths = TcpLocalPaths(plan, [](std::string_view) { return std::nullopt; });
  EXPECT_EQ(paths.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(paths.status().message().find("ib0"), std::string::npos);
}

TEST(RouteBindingTest, RdmaPathsBecomeEnginePorts) {
  RoutePlan plan;
  plan.cls = TrafficClass::kBulk;
  plan.paths = {Path("eth3", PathTransport::kRdma, 0.5), Path("eth3", PathTransport::kTcp, 1),
                Path("eth0", PathTransport::kRdma, 0)};
  plan.paths[0].rdma_device = "mlx5_3";
  plan.paths[0].rdma_port = 1;
  plan.paths[2].rdma_device = "mlx5_0";
  plan.paths[2].rdma_port = 2;
  auto paths = RdmaLocalPaths(plan, 3);
  ASSERT_TRUE(paths.ok()) << paths.status();
  ASSERT_EQ(paths->size(), 2u);  // the TCP path skipped
  EXPECT_EQ((*paths)[0].device_name, "mlx5_3");
  EXPECT_EQ((*paths)[0].port, 1);
  EXPECT_EQ((*paths)[0].gid_index, 3);
  EXPECT_EQ((*paths)[0].weight, 0.5);
  EXPECT_EQ((*paths)[1].device_name, "mlx5_0");
  EXPECT_EQ((*paths)[1].port, 2);
  EXPECT_EQ((*paths)[1].weight, 1.0);  // no weight in the plan: 1

  RoutePlan tcp_only;
  tcp_only.paths = {Path("eth1", PathTransport::kTcp, 1)};
  const absl::Status none = RdmaLocalPaths(tcp_only).status();
  EXPECT_EQ(none.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.message().find("eth1"), std::string::npos) << none;
}

// From the 2-socket 8-GPU server's sysfs to bytes moved: GPU 3's bulk plan
// spreads over socket 0's four RDMA NICs; an engine built from it (on a fake
// fabric with the fixture's device names) reaches a peer over all four.
TEST(RouteBindingTest, AServersBulkPlanDrivesTheRdmaEngine) {
  absl::StatusOr<std::string> root = MaterializeFixture("server_8gpu", LinkStyle::kLinkFile);
  ASSERT_TRUE(root.ok()) << root.status();
  absl::StatusOr<Topology> topo = DiscoverTopology(*root);
  ASSERT_TRUE(topo.ok()) << topo.status();
  absl::StatusOr<RoutePolicy> policy = ParseRoutePolicy("prefer rdma");
  ASSERT_TRUE(policy.ok()) << policy.status();
  const RoutePlanner planner(*std::move(topo), *std::move(policy));
  absl::StatusOr<RoutePlan> plan = planner.Plan(RouteSource::Gpu(3), TrafficClass::kBulk);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto paths = RdmaLocalPaths(*plan);
  ASSERT_TRUE(paths.ok()) << paths.status();
  ASSERT_EQ(paths->size(), 4u);
  EXPECT_EQ((*paths)[0].device_name, "mlx5_3");  // its own NIC first

  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back(absl::StrCat("mlx5_", i));
  auto fabric = std::make_shared<rdma::FakeFabric>(devices);
  using FakeRdma = rdma::RdmaEngine<rdma::FakeVerbs>;
  rdma::RdmaOptions owner_options;
  owner_options.paths = *paths;
  rdma::RdmaOptions requester_options = owner_options;
  requester_options.wr_bytes_max = 64 << 10;
  auto owner = FakeRdma::Create(rdma::FakeVerbs(fabric), owner_options);
  ASSERT_TRUE(owner.ok()) << owner.status();
  auto requester = FakeRdma::Create(rdma::FakeVerbs(fabric), requester_options);
  ASSERT_TRUE(requester.ok()) << requester.status();
  constexpr uint64_t kLen = 4 << 20;
  std::vector<std::byte> memory(kLen), dst(kLen);
  for (uint64_t i = 0; i < kLen; ++i) memory[i] = static_cast<std::byte>(i * 7 + 5);
  auto seg = (*owner)->RegisterMemory(memory.data(), kLen, MemoryLocation::HostDram());
  ASSERT_TRUE(seg.ok()) << seg.status();
  auto remote = (*requester)->OpenSegment((*owner)->LocalEndpoint(), seg->id);
  ASSERT_TRUE(remote.ok()) << remote.status();
  const std::vector<TransferRequest> reqs = {
      TransferRequest{OpCode::kRead, dst.data(), remote->handle, 0, kLen}};
  auto id = (*requester)->Submit(reqs);
  ASSERT_TRUE(id.ok()) << id.status();
  auto result = (*requester)->Wait(*id, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(result.ok() && result->ok())
      << (result.ok() ? result->FirstError() : result.status());
  EXPECT_TRUE(dst == memory);
  for (const rdma::RdmaPathStats& s : (*requester)->path_stats()) {
    EXPECT_GT(s.bytes_done, 0u) << s.name;
  }
}

TEST(RouteBindingTest, LoopbackHasItsAddress) {
  EXPECT_EQ(InterfaceIpv4("lo"), std::optional<std::string>("127.0.0.1"));
  EXPECT_EQ(InterfaceIpv4("no-such-nic"), std::nullopt);
}

}  // namespace
}  // namespace mooncake::transport
