#include "mooncake/transport/route_policy.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/metrics.h"
#include "mooncake/transport/topology.h"
#include "mooncake/transport/topology_testing.h"

namespace mooncake::transport {
namespace {

Topology Fixture(const std::string& name) {
  absl::StatusOr<std::string> root = MaterializeFixture(name, LinkStyle::kLinkFile);
  EXPECT_TRUE(root.ok()) << root.status();
  absl::StatusOr<Topology> t = DiscoverTopology(*root);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Topology{};
}

RoutePlanner Planner(const std::string& fixture, std::string_view policy_text) {
  absl::StatusOr<RoutePolicy> policy = ParseRoutePolicy(policy_text);
  EXPECT_TRUE(policy.ok()) << policy.status();
  return RoutePlanner(Fixture(fixture), policy.ok() ? *policy : RoutePolicy{});
}

// "nic/transport" per path, in plan order.
std::vector<std::string> Paths(const absl::StatusOr<RoutePlan>& plan) {
  EXPECT_TRUE(plan.ok()) << plan.status();
  std::vector<std::string> out;
  if (!plan.ok()) return out;
  for (const RoutePath& p : plan->paths) {
    out.push_back(absl::StrCat(p.nic, "/", PathTransportName(p.transport)));
  }
  return out;
}

using V = std::vector<std::string>;

// ---- the policy text ------------------------------------------------------

TEST(RoutePolicyParseTest, ExampleFromTheDocsParses) {
  absl::StatusOr<RoutePolicy> p = ParseRoutePolicy(R"(
# class: latency (critical) or bulk
gpu_nic  pcie_switch            # GPU i uses the NIC on its PCIe switch, else same NUMA node
bulk     spread numa            # bulk may spread over all NICs of the source's NUMA node
latency  no_cross_socket        # latency-critical traffic never crosses a socket
prefer   rdma tcp               # transport preference order
nic_exclude docker0 lo veth*
)");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->gpu_nic, GpuNicLocality::kPcieSwitch);
  EXPECT_EQ(p->bulk.spread, SpreadScope::kNuma);
  EXPECT_FALSE(p->latency.cross_socket);
  EXPECT_EQ(p->prefer, (std::vector<PathTransport>{PathTransport::kRdma, PathTransport::kTcp}));
  EXPECT_EQ(p->nic_exclude, (V{"docker0", "lo", "veth*"}));
  EXPECT_TRUE(p->Excludes("veth1a2b"));
  EXPECT_TRUE(p->Excludes("lo"));
  EXPECT_FALSE(p->Excludes("lo0"));
  EXPECT_FALSE(p->Excludes("eth0"));
}

TEST(RoutePolicyParseTest, EmptyTextIsTheDefaultPolicy) {
  absl::StatusOr<RoutePolicy> p = ParseRoutePolicy("  # only a comment\n\n");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, RoutePolicy{});
  EXPECT_EQ(p->latency.spread, SpreadScope::kOwn);
  EXPECT_TRUE(p->bulk.cross_socket);
}

TEST(RoutePolicyParseTest, CanonicalTextRoundTrips) {
  absl::StatusOr<RoutePolicy> p = ParseRoutePolicy(
      "gpu_nic any\nlatency spread numa\nlatency cross_socket\nbulk spread all\n"
      "bulk no_cross_socket\nprefer tcp\nnic_exclude a b*\nnic_exclude c\n");
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<RoutePolicy> again = ParseRoutePolicy(p->ToString());
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << p->ToString();
  EXPECT_EQ(*again, *p);
  EXPECT_EQ(again->nic_exclude, (V{"a", "b*", "c"}));
}

void ExpectError(std::string_view text, std::string_view line, std::string_view token) {
  absl::StatusOr<RoutePolicy> p = ParseRoutePolicy(text);
  ASSERT_FALSE(p.ok()) << text;
  EXPECT_TRUE(absl::IsInvalidArgument(p.status()));
  EXPECT_NE(p.status().message().find(AbslView(line)), absl::string_view::npos) << p.status();
  EXPECT_NE(p.status().message().find(AbslView(token)), absl::string_view::npos) << p.status();
}

TEST(RoutePolicyParseTest, ErrorsNameTheLineAndToken) {
  ExpectError("\n\nroute_all fast\n", "line 3", "\"route_all\"");
  ExpectError("gpu_nic nearest", "line 1", "\"nearest\"");
  ExpectError("gpu_nic", "line 1", "missing value");
  ExpectError("gpu_nic numa numa", "line 1", "unexpected token \"numa\"");
  ExpectError("bulk spread everywhere", "line 1", "\"everywhere\"");
  ExpectError("bulk fast", "line 1", "\"fast\"");
  ExpectError("latency spread", "line 1", "missing value");
  ExpectError("prefer rdma udp", "line 1", "\"udp\"");
  ExpectError("prefer tcp tcp", "line 1", "named twice");
  ExpectError("prefer", "line 1", "missing value");
  ExpectError("nic_exclude", "line 1", "missing interface name");
  ExpectError("nic_exclude eth0 bad/name", "line 1", "\"bad/name\"");
  ExpectError("nic_exclude *", "line 1", "\"*\"");
  ExpectError("gpu_nic numa\n# x\ngpu_nic any\n", "line 3", "already set on line 1");
  ExpectError("bulk cross_socket\nbulk no_cross_socket\n", "line 2", "bulk cross_socket");
  ExpectError("latency spread own\nlatency spread all\n", "line 2", "latency spread");
  ExpectError(std::string(5000, 'x'), "line 1", "longer than 4096");
  ExpectError("gpu_nic \x01\xff", "line 1", "\\x01\\xff");
}

// ---- decisions on the 8-GPU server -------------------------------------------

TEST(RoutePlannerServerTest, Gpu3LatencyUsesOnlyItsOwnNic) {
  const RoutePlanner planner = Planner("server_8gpu", "");
  absl::StatusOr<RoutePlan> plan = planner.Plan(RouteSource::Gpu(3), TrafficClass::kLatency);
  EXPECT_EQ(Paths(plan), (V{"eth3/rdma", "eth3/tcp"}));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->paths[0].rdma_device, "mlx5_3");
  EXPECT_EQ(plan->paths[0].rdma_port, 1);
  EXPECT_EQ(plan->paths[0].rank, NicRank::kSameSwitch);
  EXPECT_DOUBLE_EQ(plan->paths[0].weight, 1.0);
}

TEST(RoutePlannerServerTest, Gpu3BulkSpreadsOverSocket0OwnNicFirst) {
  const RoutePlanner planner = Planner("server_8gpu", "prefer rdma");
  absl::StatusOr<RoutePlan> plan = planner.Plan(RouteSource::Gpu(3), TrafficClass::kBulk);
  EXPECT_EQ(Paths(plan), (V{"eth3/rdma", "eth0/rdma", "eth1/rdma", "eth2/rdma"}));
  ASSERT_TRUE(plan.ok());
  for (const RoutePath& p : plan->paths) EXPECT_DOUBLE_EQ(p.weight, 0.25);
  EXPECT_EQ(plan->paths[1].rank, NicRank::kSameNuma);
}

TEST(RoutePlannerServerTest, TcpGroupFollowsAndIsWeightedBySpeed) {
  const RoutePlanner planner = Planner("server_8gpu", "nic_exclude docker0 lo");
  absl::StatusOr<RoutePlan> plan = planner.Plan(RouteSource::Gpu(3), TrafficClass::kBulk);
  EXPECT_EQ(Paths(plan), (V{"eth3/rdma", "eth0/rdma", "eth1/rdma", "eth2/rdma", "eth3/tcp",
                            "eth0/tcp", "eth1/tcp", "eth2/tcp", "eno1/tcp"}));
  ASSERT_TRUE(plan.ok());
  EXPECT_DOUBLE_EQ(plan->paths[4].weight, 200000.0 / 801000.0);
  EXPECT_DOUBLE_EQ(plan->paths[8].weight, 1000.0 / 801000.0);
}

TEST(RoutePlannerServerTest, Socket1GpuAndHostMemory) {
  const RoutePlanner planner = Planner("server_8gpu", "prefer rdma");
  EXPECT_EQ(Paths(planner.Plan(RouteSource::Gpu(6), TrafficClass::kLatency)), (V{"eth6/rdma"}));
  EXPECT_EQ(Paths(planner.Plan(RouteSource::Gpu(6), TrafficClass::kBulk)),
            (V{"eth6/rdma", "eth4/rdma", "eth5/rdma", "eth7/rdma"}));
  // Host memory has no PCIe switch: every NIC of its node is equally near.
  EXPECT_EQ(Paths(planner.Plan(RouteSource::Numa(1), TrafficClass::kLatency)),
            (V{"eth4/rdma", "eth5/rdma", "eth6/rdma", "eth7/rdma"}));
  EXPECT_EQ(Paths(planner.Plan(RouteSource::Cpu(70), TrafficClass::kBulk)),
            (V{"eth0/rdma", "eth1/rdma", "eth2/rdma", "eth3/rdma"}));
}

TEST(RoutePlannerServerTest, NoCrossSocketWithoutALocalNicIsAnError) {
  const RoutePlanner planner = Planner("server_8gpu", "nic_exclude eth4 eth5 eth6 eth7");
  absl::StatusOr<RoutePlan> plan = planner.Plan(RouteSource::Gpu(5), TrafficClass::kLatency);
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(plan.status()));
  EXPECT_NE(plan.status().message().find("gpu5"), absl::string_view::npos) << plan.status();
  EXPECT_NE(plan.status().message().find("latency no_cross_socket"), absl::string_view::npos)
      << plan.status();
  // Bulk may cross by default: it falls back to the other socket's NICs.
  EXPECT_EQ(Paths(planner.Plan(RouteSource::Gpu(5), TrafficClass::kBulk)),
            (V{"eth0/rdma", "eth1/rdma", "eth2/rdma", "eth3/rdma", "eth0/tcp", "eth1/tcp",
               "eth2/tcp", "eth3/tcp", "eno1/tcp"}));
  absl::StatusOr<RoutePlan> remote = planner.Plan(RouteSource::Gpu(5), TrafficClass::kBulk);
  ASSERT_TRUE(remote.ok());
  EXPECT_EQ(remote->paths[0].rank, NicRank::kRemote);

  const RoutePlanner crossing =
      Planner("server_8gpu", "nic_exclude eth4 eth5 eth6 eth7\nlatency cross_socket\nprefer rdma");
  EXPECT_EQ(Paths(crossing.Plan(RouteSource::Gpu(5), TrafficClass::kLatency)),
            (V{"eth0/rdma", "eth1/rdma", "eth2/rdma", "eth3/rdma"}));
  const RoutePlanner strict_bulk =
      Planner("server_8gpu", "nic_exclude eth4 eth5 eth6 eth7\nbulk no_cross_socket");
  EXPECT_TRUE(absl::IsFailedPrecondition(
      strict_bulk.Plan(RouteSource::Gpu(5), TrafficClass::kBulk).status()));
}

TEST(RoutePlannerServerTest, GpuNicLocalityVariants) {
  EXPECT_EQ(Paths(Planner("server_8gpu", "gpu_nic numa\nprefer rdma")
                      .Plan(RouteSource::Gpu(3), TrafficClass::kLatency)),
            (V{"eth0/rdma", "eth1/rdma", "eth2/rdma", "eth3/rdma"}));
  // any: all NICs alike, but latency still stays on its socket.
  EXPECT_EQ(Paths(Planner("server_8gpu", "gpu_nic any\nprefer rdma")
                      .Plan(RouteSource::Gpu(3), TrafficClass::kLatency)),
            (V{"eth0/rdma", "eth1/rdma", "eth2/rdma", "eth3/rdma"}));
  EXPECT_EQ(Paths(Planner("server_8gpu", "gpu_nic any\nlatency cross_socket\nprefer rdma")
                      .Plan(RouteSource::Gpu(3), TrafficClass::kLatency))
                .size(),
            8u);
  EXPECT_EQ(Paths(Planner("server_8gpu", "bulk spread all\nprefer rdma")
                      .Plan(RouteSource::Gpu(3), TrafficClass::kBulk)),
            (V{"eth3/rdma", "eth0/rdma", "eth1/rdma", "eth2/rdma", "eth4/rdma", "eth5/rdma",
               "eth6/rdma", "eth7/rdma"}));
  EXPECT_EQ(
      Paths(Planner("server_8gpu", "prefer tcp").Plan(RouteSource::Gpu(3), TrafficClass::kLatency)),
      (V{"eth3/tcp"}));
}

TEST(RoutePlannerServerTest, NvidiaSmiPlacementDrivesTheGpuNic) {
  absl::StatusOr<std::string> root = MaterializeFixture("server_8gpu", LinkStyle::kSymlink);
  ASSERT_TRUE(root.ok()) << root.status();
  absl::StatusOr<std::string> smi =
      ReadTestData("mooncake/transport/testdata/topology/server_8gpu_nvidia_smi_topo.txt");
  ASSERT_TRUE(smi.ok()) << smi.status();
  absl::StatusOr<Topology> t = DiscoverTopology(*root, *smi);
  ASSERT_TRUE(t.ok()) << t.status();
  const RoutePlanner planner(std::move(*t), *ParseRoutePolicy("prefer rdma"));
  for (int g = 0; g < 8; ++g) {
    EXPECT_EQ(Paths(planner.Plan(RouteSource::Gpu(g), TrafficClass::kLatency)),
              (V{absl::StrCat("eth", g, "/rdma")}));
  }
}

TEST(RoutePlannerServerTest, BadSourcesAreInvalidArgument) {
  const RoutePlanner planner = Planner("server_8gpu", "");
  EXPECT_TRUE(
      absl::IsInvalidArgument(planner.Plan(RouteSource::Gpu(8), TrafficClass::kLatency).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(planner.Plan(RouteSource::Gpu(-1), TrafficClass::kLatency).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(planner.Plan(RouteSource::Numa(2), TrafficClass::kLatency).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      planner.Plan(RouteSource::Cpu(128), TrafficClass::kLatency).status()));
}

TEST(RoutePlannerServerTest, RdmaOnlyWithoutRdmaNicsIsAnError) {
  const RoutePlanner planner = Planner("server_8gpu", "prefer rdma\nnic_exclude eth*");
  absl::StatusOr<RoutePlan> plan = planner.Plan(RouteSource::Gpu(0), TrafficClass::kLatency);
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(plan.status()));
  EXPECT_NE(plan.status().message().find("eno1"), absl::string_view::npos) << plan.status();
  EXPECT_NE(plan.status().message().find("prefer rdma"), absl::string_view::npos) << plan.status();
}

TEST(RoutePlannerServerTest, PlanAllRenderAndExport) {
  const RoutePlanner planner = Planner("server_8gpu", "");
  const RoutePlans all = planner.PlanAll();
  EXPECT_EQ(all.plans.size(), 20u);  // (8 GPUs + 2 nodes) x 2 classes
  EXPECT_TRUE(all.errors.empty());
  const std::vector<std::string> lines = RenderPlans(all);
  EXPECT_NE(std::find(lines.begin(), lines.end(),
                      "route gpu3 latency: 1. eth3 rdma mlx5_3:1 200000 Mb/s weight 1.000 "
                      "(same PCIe switch)"),
            lines.end());
  EXPECT_NE(std::find(lines.begin(), lines.end(),
                      "route gpu3 bulk: 9. eno1 tcp 1000 Mb/s weight 0.001 (same NUMA node)"),
            lines.end());

  MetricsRegistry registry;
  ASSERT_TRUE(ExportRoutePlans(all.plans, registry).ok());
  const std::string text = registry.RenderPrometheus();
  EXPECT_NE(
      text.find(
          "mooncake_route_paths{class=\"bulk\",nic=\"eth3\",source=\"gpu3\",transport=\"rdma\"} "
          "0.25\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE mooncake_route_paths gauge"), std::string::npos);

  const RoutePlanner broken = Planner("server_8gpu", "nic_exclude eth4 eth5 eth6 eth7");
  const RoutePlans some = broken.PlanAll();
  EXPECT_EQ(some.errors.size(), 5u);  // latency of GPUs 4-7 and of node 1
  EXPECT_EQ(RenderPlans(some).back().rfind("route error: numa1 latency: ", 0), 0u);
}

// ---- the single-NIC VM and this host --------------------------------------

TEST(RoutePlannerVmTest, EverythingUsesTheOneNic) {
  const RoutePlanner planner = Planner("vm_1nic", "");
  for (const TrafficClass c : {TrafficClass::kLatency, TrafficClass::kBulk}) {
    for (const RouteSource s : {RouteSource::Numa(0), RouteSource::Cpu(3)}) {
      absl::StatusOr<RoutePlan> plan = planner.Plan(s, c);
      EXPECT_EQ(Paths(plan), (V{"ens3/tcp"}));  // no RDMA: the TCP path only
      ASSERT_TRUE(plan.ok());
      EXPECT_DOUBLE_EQ(plan->paths[0].weight, 1.0);
      EXPECT_FALSE(plan->paths[0].speed_mbps.has_value());
      EXPECT_EQ(plan->paths[0].rank, NicRank::kSameNuma);  // one node: nothing is remote
    }
  }
  EXPECT_TRUE(
      absl::IsInvalidArgument(planner.Plan(RouteSource::Gpu(0), TrafficClass::kBulk).status()));
  const RoutePlans all = planner.PlanAll();
  EXPECT_EQ(all.plans.size(), 2u);
  EXPECT_TRUE(all.errors.empty());
  EXPECT_EQ(RenderPlan(all.plans[0]),
            (V{"route numa0 latency: 1. ens3 tcp speed unknown weight 1.000 (same NUMA node)"}));

  const RoutePlanner none = Planner("vm_1nic", "nic_exclude ens*");
  absl::StatusOr<RoutePlan> plan = none.Plan(RouteSource::Numa(0), TrafficClass::kBulk);
  EXPECT_TRUE(absl::IsFailedPrecondition(plan.status()));
  EXPECT_NE(plan.status().message().find("no usable network interface"), absl::string_view::npos);
}

TEST(RoutePlannerThisHostTest, CapturedHostUsesEth0) {
  const RoutePlanner planner = Planner("this_host", "");
  const RoutePlans all = planner.PlanAll();
  ASSERT_EQ(all.plans.size(), 2u);
  EXPECT_TRUE(all.errors.empty());
  for (const RoutePlan& p : all.plans) {
    ASSERT_EQ(p.paths.size(), 1u);
    EXPECT_EQ(p.paths[0].nic, "eth0");  // ifb0, ifb1 and lo are virtual
    EXPECT_EQ(p.paths[0].transport, PathTransport::kTcp);
  }
}

}  // namespace
}  // namespace mooncake::transport
