// Fuzzes the routing policy parser and the planner behind it.
//
// 0. ParseNvidiaSmiTopo on the same bytes never crashes or loops.
// 1. ParseRoutePolicy never crashes; what it accepts prints in canonical form
//    (ToString) and parses back to an equal policy.
// 2. Every accepted policy plans every source of a synthetic 2-node host
//    (2 GPUs, 3 NICs, 2 RDMA ports, plus bad source ids) without crashing; a
//    plan it returns is non-empty, excludes what the policy excludes, and the
//    weights of each transport group sum to 1.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mooncake/base/assert.h"
#include "mooncake/transport/route_policy.h"
#include "mooncake/transport/topology.h"

namespace mooncake {

std::vector<std::string> FuzzSeeds() {
  return {
      "",
      "gpu_nic pcie_switch\nbulk spread numa\nlatency no_cross_socket\nprefer rdma tcp\n"
      "nic_exclude docker0 lo\n",
      "gpu_nic any # comment\nlatency cross_socket\nlatency spread all\nprefer tcp\n",
      "gpu_nic numa\nbulk spread own\nbulk no_cross_socket\nnic_exclude eth* ib0\n",
      "prefer rdma\nnic_exclude eth1\nlatency spread numa\n",
      "gpu_nic\tnuma\r\n\n#\nbulk spread all\n",
      "prefer tcp tcp\n",
      "nic_exclude *\n",
      "\tGPU0\tNIC0\tCPU Affinity\nGPU0\t X \tPIX\t0-3\nNIC0\tPIX\t X \n\nNIC Legend:\n"
      "  NIC0: mlx5_0\n  NIC1: NIC0\n",
  };
}

}  // namespace mooncake

namespace {

using namespace mooncake::transport;

const Topology& SyntheticHost() {
  static const Topology* t = [] {
    auto* topo = new Topology;
    topo->sysfs_root = "synthetic";
    topo->numa_nodes = {{0, {0, 1}}, {1, {2, 3}}};
    const std::vector<std::string> sw0 = {"pci0000:10", "0000:10:01.0", "0000:11:00.0",
                                          "0000:12:00.0"};
    topo->interfaces = {
        {"eth0", 100000, 0, "0000:13:00.0", {sw0[0], sw0[1], sw0[2], "0000:13:00.0"}, false},
        {"eth1", std::nullopt, 1, "0000:90:00.0", {"pci0000:90", "0000:90:00.0"}, false},
        {"eth2", 25000, -1, "", {}, false},
        {"lo", std::nullopt, -1, "", {}, true},
    };
    topo->rdma_devices = {
        {"mlx5_0", "0000:13:00.0", {}, 0, {{1, "ACTIVE", "Ethernet", 100000, "eth0"}}},
        {"mlx5_1", "0000:90:00.0", {}, 1, {{1, "DOWN", "Ethernet", std::nullopt, "eth1"}}},
    };
    topo->gpus = {{0, "0000:12:00.0", sw0, 0},
                  {1, "0000:91:00.0", {"pci0000:90", "0000:91:00.0"}, 1}};
    return topo;
  }();
  return *t;
}

void CheckPlan(const RoutePolicy& policy, const RoutePlan& plan) {
  MC_ASSERT(!plan.paths.empty(), "a returned plan has paths");
  double sum[2] = {0, 0};
  for (const RoutePath& p : plan.paths) {
    MC_ASSERT(!policy.Excludes(p.nic), "an excluded NIC was planned");
    MC_ASSERT(p.nic != "lo", "a virtual interface was planned");
    MC_ASSERT(p.weight > 0 && p.weight <= 1, "weight in (0, 1]");
    sum[p.transport == PathTransport::kRdma ? 0 : 1] += p.weight;
  }
  for (const double s : sum) {
    MC_ASSERT(s == 0 || std::fabs(s - 1) < 1e-9, "group weights sum to 1");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // The same bytes as `nvidia-smi topo -m` output: a square matrix or an error.
  absl::StatusOr<NvidiaSmiTopo> smi = ParseNvidiaSmiTopo(text);
  if (smi.ok()) {
    MC_ASSERT(smi->relation.size() == smi->names.size(), "square matrix");
    for (const auto& [nic, device] : smi->nic_legend) {
      const std::optional<size_t> i = smi->Find(device);
      MC_ASSERT(!i.has_value() || *i < smi->names.size(), "Find stays in the matrix");
    }
  }
  absl::StatusOr<RoutePolicy> policy = ParseRoutePolicy(text);
  if (!policy.ok()) {
    MC_ASSERT(absl::IsInvalidArgument(policy.status()), "parse errors are InvalidArgument");
    MC_ASSERT(policy.status().message().find("line ") != std::string_view::npos,
              "parse errors name the line");
    return 0;
  }
  absl::StatusOr<RoutePolicy> again = ParseRoutePolicy(policy->ToString());
  MC_ASSERT(again.ok() && *again == *policy, "canonical text parses back equal");

  const RoutePlanner planner(SyntheticHost(), *policy);
  const std::vector<RouteSource> sources = {
      RouteSource::Gpu(0),  RouteSource::Gpu(1),  RouteSource::Gpu(2), RouteSource::Numa(0),
      RouteSource::Numa(1), RouteSource::Numa(7), RouteSource::Cpu(3), RouteSource::Cpu(-1)};
  for (const RouteSource& s : sources) {
    for (const TrafficClass c : {TrafficClass::kLatency, TrafficClass::kBulk}) {
      absl::StatusOr<RoutePlan> plan = planner.Plan(s, c);
      if (plan.ok()) CheckPlan(*policy, *plan);
    }
  }
  const RoutePlans all = planner.PlanAll();
  for (const RoutePlan& p : all.plans) CheckPlan(*policy, p);
  (void)RenderPlans(all);
  return 0;
}
