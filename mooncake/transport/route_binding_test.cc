#include "mooncake/transport/route_binding.h"

#include <map>
#include <optional>
#include <string>

#include "gtest/gtest.h"

namespace mooncake::transport {
namespace {

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

TEST(RouteBindingTest, LoopbackHasItsAddress) {
  EXPECT_EQ(InterfaceIpv4("lo"), std::optional<std::string>("127.0.0.1"));
  EXPECT_EQ(InterfaceIpv4("no-such-nic"), std::nullopt);
}

}  // namespace
}  // namespace mooncake::transport
