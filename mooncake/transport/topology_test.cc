#include "mooncake/transport/topology.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "mooncake/transport/topology_testing.h"

namespace mooncake::transport {
namespace {

class ServerTopologyTest : public ::testing::TestWithParam<LinkStyle> {};

Topology MustDiscover(const std::string& fixture, LinkStyle style, std::string_view smi = "") {
  absl::StatusOr<std::string> root = MaterializeFixture(fixture, style);
  EXPECT_TRUE(root.ok()) << root.status();
  absl::StatusOr<Topology> t = DiscoverTopology(*root, smi);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Topology{};
}

TEST_P(ServerTopologyTest, ReadsNumaNicsRdmaAndGpus) {
  const Topology t = MustDiscover("server_8gpu", GetParam());
  ASSERT_EQ(t.numa_nodes.size(), 2u);
  EXPECT_EQ(t.numa_nodes[1].id, 1);
  EXPECT_EQ(t.numa_nodes[1].cpus.size(), 64u);
  EXPECT_EQ(t.NumaOfCpu(40), 1);
  EXPECT_EQ(t.NumaOfCpu(70), 0);
  EXPECT_EQ(t.NumaOfCpu(500), -1);

  ASSERT_EQ(t.interfaces.size(), 11u);  // docker0 eno1 eth0..7 lo
  const NetInterface* eth3 = t.FindInterface("eth3");
  ASSERT_NE(eth3, nullptr);
  EXPECT_FALSE(eth3->is_virtual);
  EXPECT_EQ(eth3->speed_mbps, 200000u);
  EXPECT_EQ(eth3->numa_node, 0);
  EXPECT_EQ(eth3->pci_address, "0000:44:00.0");
  EXPECT_EQ(eth3->pci_path, (std::vector<std::string>{"pci0000:40", "0000:40:01.0", "0000:41:00.0",
                                                      "0000:42:01.0", "0000:44:00.0"}));
  EXPECT_EQ(t.FindInterface("eth5")->numa_node, 1);
  EXPECT_TRUE(t.FindInterface("lo")->is_virtual);
  EXPECT_FALSE(t.FindInterface("lo")->speed_mbps.has_value());
  EXPECT_TRUE(t.FindInterface("docker0")->is_virtual);
  EXPECT_EQ(t.FindInterface("eno1")->speed_mbps, 1000u);

  ASSERT_EQ(t.rdma_devices.size(), 8u);
  const RdmaDevice& mlx = t.rdma_devices[3];
  EXPECT_EQ(mlx.name, "mlx5_3");
  EXPECT_EQ(mlx.pci_address, "0000:44:00.0");
  EXPECT_EQ(mlx.numa_node, 0);
  ASSERT_EQ(mlx.ports.size(), 1u);
  EXPECT_EQ(mlx.ports[0].state, "ACTIVE");
  EXPECT_EQ(mlx.ports[0].link_layer, "Ethernet");
  EXPECT_EQ(mlx.ports[0].rate_mbps, 200000u);
  EXPECT_EQ(mlx.ports[0].netdev, "eth3");
  ASSERT_TRUE(t.RdmaFor("eth3").has_value());
  EXPECT_EQ(t.RdmaFor("eth3")->first->name, "mlx5_3");
  EXPECT_FALSE(t.RdmaFor("eno1").has_value());

  ASSERT_EQ(t.gpus.size(), 8u);  // the NVIDIA GPUs only, not the NICs
  EXPECT_EQ(t.gpus[3].pci_address, "0000:43:00.0");
  EXPECT_EQ(t.gpus[3].numa_node, 0);
  EXPECT_EQ(t.gpus[6].numa_node, 1);
}

TEST_P(ServerTopologyTest, GpuNicRelationFromPciChains) {
  const Topology t = MustDiscover("server_8gpu", GetParam());
  ASSERT_EQ(t.gpus.size(), 8u);
  EXPECT_EQ(t.GpuNicRelation(3, *t.FindInterface("eth3")), PciRelation::kPix);
  EXPECT_EQ(t.GpuNicRelation(3, *t.FindInterface("eth2")), PciRelation::kNode);
  EXPECT_EQ(t.GpuNicRelation(3, *t.FindInterface("eno1")), PciRelation::kNode);
  EXPECT_EQ(t.GpuNicRelation(3, *t.FindInterface("eth4")), PciRelation::kSys);
  EXPECT_EQ(t.GpuNicRelation(7, *t.FindInterface("eth7")), PciRelation::kPix);
}

INSTANTIATE_TEST_SUITE_P(BothLinkForms, ServerTopologyTest,
                         ::testing::Values(LinkStyle::kSymlink, LinkStyle::kLinkFile));

TEST(TopologyTest, NvidiaSmiMatrixOverridesSysfs) {
  absl::StatusOr<std::string> smi =
      ReadTestData("mooncake/transport/testdata/topology/server_8gpu_nvidia_smi_topo.txt");
  ASSERT_TRUE(smi.ok()) << smi.status();
  absl::StatusOr<NvidiaSmiTopo> m = ParseNvidiaSmiTopo(*smi);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->names.size(), 16u);
  EXPECT_EQ(m->relation[3][11], PciRelation::kPix);  // GPU3 - NIC3
  EXPECT_EQ(m->relation[3][12], PciRelation::kSys);
  EXPECT_EQ(m->relation[0][1], PciRelation::kNvlink);
  EXPECT_EQ(m->Find("mlx5_3"), 11u);

  // A matrix that disagrees with sysfs wins: here it puts NIC2 beside GPU3.
  std::string swapped = *smi;
  const std::string row3 =
      "GPU3\tNV18\tNV18\tNV18\t X \tNV18\tNV18\tNV18\tNV18\tNODE\tNODE\tNODE\tPIX";
  const size_t at = swapped.find(row3);
  ASSERT_NE(at, std::string::npos);
  swapped.replace(at, row3.size(),
                  "GPU3\tNV18\tNV18\tNV18\t X \tNV18\tNV18\tNV18\tNV18\tNODE\tNODE\tPIX\tNODE");
  const Topology t = MustDiscover("server_8gpu", LinkStyle::kLinkFile, swapped);
  ASSERT_TRUE(t.nvidia_smi.has_value());
  EXPECT_EQ(t.GpuNicRelation(3, *t.FindInterface("eth2")), PciRelation::kPix);
  EXPECT_EQ(t.GpuNicRelation(3, *t.FindInterface("eth3")), PciRelation::kNode);
  // eno1 has no RDMA device, so nvidia-smi cannot name it: sysfs answers.
  EXPECT_EQ(t.GpuNicRelation(3, *t.FindInterface("eno1")), PciRelation::kNode);
}

TEST(TopologyTest, NvidiaSmiParseErrorsNameLineAndToken) {
  absl::StatusOr<NvidiaSmiTopo> m =
      ParseNvidiaSmiTopo("\tGPU0\tNIC0\nGPU0\t X \tPIX\nNIC0\tPIX\tBOGUS\n");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("line 3"), absl::string_view::npos) << m.status();
  EXPECT_NE(m.status().message().find("BOGUS"), absl::string_view::npos) << m.status();
  EXPECT_FALSE(ParseNvidiaSmiTopo("no matrix here").ok());
  EXPECT_FALSE(ParseNvidiaSmiTopo("\tGPU0\tNIC0\nGPU0\t X \tPIX\n").ok());  // a row short
}

TEST(TopologyTest, NvidiaSmiLegendCycleDoesNotLoop) {
  absl::StatusOr<NvidiaSmiTopo> m = ParseNvidiaSmiTopo(
      "\tGPU0\tNIC0\nGPU0\t X \tPIX\nNIC0\tPIX\t X \nNIC Legend:\n  NIC1: NIC2\n  NIC2: NIC1\n");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(m->Find("NIC1").has_value());
  EXPECT_FALSE(m->Find("mlx5_9").has_value());
  EXPECT_EQ(m->Find("NIC0"), 1u);
}

TEST(TopologyTest, VmWithOneVirtioNic) {
  for (LinkStyle style : {LinkStyle::kSymlink, LinkStyle::kLinkFile}) {
    const Topology t = MustDiscover("vm_1nic", style);
    ASSERT_EQ(t.numa_nodes.size(), 1u);
    EXPECT_EQ(t.numa_nodes[0].cpus, (std::vector<int>{0, 1, 2, 3}));
    ASSERT_EQ(t.interfaces.size(), 2u);
    const NetInterface* ens3 = t.FindInterface("ens3");
    ASSERT_NE(ens3, nullptr);
    EXPECT_FALSE(ens3->is_virtual);
    EXPECT_FALSE(ens3->speed_mbps.has_value());  // virtio: -1
    EXPECT_EQ(ens3->numa_node, -1);
    EXPECT_EQ(t.EffectiveNuma(ens3->numa_node), 0);  // one node: nothing is remote
    EXPECT_EQ(ens3->pci_address, "0000:00:03.0");
    EXPECT_TRUE(t.FindInterface("lo")->is_virtual);
    EXPECT_TRUE(t.gpus.empty());
    EXPECT_TRUE(t.rdma_devices.empty());
  }
}

TEST(TopologyTest, CapturedHost) {
  const Topology t = MustDiscover("this_host", LinkStyle::kLinkFile);
  ASSERT_EQ(t.numa_nodes.size(), 1u);
  const NetInterface* eth0 = t.FindInterface("eth0");
  ASSERT_NE(eth0, nullptr);
  EXPECT_FALSE(eth0->is_virtual);
  EXPECT_EQ(eth0->pci_address, "0000:00:03.0");
  EXPECT_FALSE(eth0->speed_mbps.has_value());
  EXPECT_TRUE(t.FindInterface("ifb0")->is_virtual);
  const std::string text = t.ToString();
  EXPECT_NE(text.find("net eth0 speed unknown numa -1 pci 0000:00:03.0"), std::string::npos)
      << text;
}

TEST(TopologyTest, MissingRootIsNotFoundNamingThePath) {
  absl::StatusOr<Topology> t = DiscoverTopology("/nonexistent/sysfs/root");
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::IsNotFound(t.status()));
  EXPECT_NE(t.status().message().find("/nonexistent/sysfs/root"), absl::string_view::npos);
}

TEST(TopologyTest, MalformedFilesAreErrorsNamingThePath) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/bad_sysfs";
  ASSERT_TRUE(
      MaterializeSysfs("file class/net/lo/speed\nfile devices/system/node/node0/cpulist 3-1\n", dir,
                       LinkStyle::kLinkFile)
          .ok());
  absl::StatusOr<Topology> t = DiscoverTopology(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("node0/cpulist"), absl::string_view::npos) << t.status();

  const std::string dir2 = dir + "2";
  ASSERT_TRUE(MaterializeSysfs("link class/net/eth0 ../../etc\n", dir2, LinkStyle::kLinkFile).ok());
  t = DiscoverTopology(dir2);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("eth0.link"), absl::string_view::npos) << t.status();

  const std::string dir3 = dir + "3";  // no class/net at all
  std::filesystem::create_directories(dir3);
  t = DiscoverTopology(dir3);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("class/net"), absl::string_view::npos) << t.status();
}

TEST(TopologyTest, PciRelationCases) {
  const std::vector<std::string> gpu = {"pci0000:10", "0000:10:01.0", "0000:11:00.0",
                                        "0000:12:00.0", "0000:13:00.0"};
  const std::vector<std::string> deep = {"pci0000:10",   "0000:10:01.0", "0000:11:00.0",
                                         "0000:12:04.0", "0000:15:00.0", "0000:16:00.0",
                                         "0000:17:00.0"};
  const std::vector<std::string> phb = {"pci0000:10", "0000:10:02.0", "0000:18:00.0"};
  const std::vector<std::string> other = {"pci0000:90", "0000:90:01.0", "0000:91:00.0"};
  EXPECT_EQ(ComputePciRelation(gpu, 0, gpu, 0), PciRelation::kSelf);
  EXPECT_EQ(ComputePciRelation(gpu, 0, deep, 0), PciRelation::kPxb);
  EXPECT_EQ(ComputePciRelation(gpu, 0, phb, 0), PciRelation::kPhb);
  EXPECT_EQ(ComputePciRelation(gpu, 0, other, 0), PciRelation::kNode);
  EXPECT_EQ(ComputePciRelation(gpu, 0, other, 1), PciRelation::kSys);
  EXPECT_EQ(ComputePciRelation({}, 0, other, 0), PciRelation::kNode);
  EXPECT_EQ(ComputePciRelation({}, -1, other, -1), PciRelation::kSys);
}

TEST(TopologyTest, CpuListParsing) {
  using transport_internal::ParseCpuList;
  EXPECT_EQ(*ParseCpuList("0-2,5,7-8"), (std::vector<int>{0, 1, 2, 5, 7, 8}));
  EXPECT_TRUE(ParseCpuList("").ok());
  EXPECT_FALSE(ParseCpuList("3-1").ok());
  EXPECT_FALSE(ParseCpuList("a").ok());
  EXPECT_EQ(transport_internal::CpuListString({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
}

TEST(TopologyTest, LiveSysfsReadsWhereAvailable) {
  // Not a fixture: only that this host's /sys reads without error when present.
  if (!std::filesystem::is_directory("/sys/class/net")) GTEST_SKIP() << "no /sys/class/net";
  absl::StatusOr<Topology> t = DiscoverTopology();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->interfaces.empty());
}

}  // namespace
}  // namespace mooncake::transport
