// Topology: the host's NUMA nodes, network interfaces, RDMA devices and GPUs,
// read from sysfs, as plain data for routing decisions (route_policy.h).
//
//   ASSIGN_OR_RETURN(Topology topo, DiscoverTopology("/sys"));
//   std::puts(topo.ToString().c_str());
//
// What is read (paths relative to the sysfs root, default "/sys"):
//   devices/system/node/nodeN/cpulist    NUMA nodes and their CPUs ("0-31,64-95")
//   class/net/IF/                        every network interface:
//     speed                                Mbit/s; unreadable (EINVAL on virtio, on a
//                                          link that is down) or -1: unknown
//     device -> PCI (or virtio) device     absent: a virtual interface (lo, docker0, ifb)
//     <device>/numa_node                   -1 or absent: unknown
//   class/infiniband/DEV/                every RDMA device:
//     device, <device>/numa_node           as for interfaces
//     ports/P/state, rate, link_layer      "4: ACTIVE", "200 Gb/sec (4X HDR)", "Ethernet"
//     ports/P/gid_attrs/ndevs/0            the netdev of a RoCE port (EINVAL on an IB
//                                          port); else the interface on the same PCI
//                                          function is taken
//   bus/pci/devices/BDF/                 GPUs: vendor 0x10de and class 0x0300xx or 0x0302xx
//     numa_node
//
// Links and fixtures. The kernel exposes class entries (class/net/eth0) and
// `device` as symlinks into devices/. The reader resolves each such link to
// its target below the root and reads the attributes there. A link may also
// be written as a plain file named like the link plus ".link" (class/net/eth0.link,
// class/net/eth0/device.link) that holds the target as a path relative to the
// sysfs root ("devices/pci0000:17/0000:17:00.0/0000:18:00.0/net/eth0"); the
// reader accepts either form, so a test fixture needs no symlinks. A symlink
// that resolves outside the root, or a .link target with "..", is an error.
//
// PCIe placement. A device's `pci_path` is the chain from its host bridge to
// itself, taken from the resolved device path: {"pci0000:17", "0000:17:00.0"
// (root port), "0000:18:00.0" (switch upstream port), "0000:19:00.0"
// (downstream port), "0000:1a:00.0" (the device)}. Two devices "share a PCIe
// switch" when their chains share a bridge below the host bridge
// (PciRelation kPix / kPxb, the names of `nvidia-smi topo -m`).
//
// nvidia-smi. ParseNvidiaSmiTopo() reads the text of `nvidia-smi topo -m`; a
// Topology that carries one (DiscoverTopology's second argument) answers
// GPU-to-RDMA-device relations from it, and from sysfs otherwise. GPU i of
// nvidia-smi is the i-th GPU in PCI address order, as `gpus` is ordered.
//
// Errors: the root missing, or a file that exists but cannot be read (other
// than `speed`), or one with malformed contents, is an error that names the
// path. Missing optional parts (no GPUs, no RDMA, no NUMA directory) are not.
//
// Thread-safety: plain values; DiscoverTopology reads the filesystem only.
#ifndef MOONCAKE_TRANSPORT_TOPOLOGY_H_
#define MOONCAKE_TRANSPORT_TOPOLOGY_H_

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/status_macros.h"

namespace mooncake::transport {

// How two PCI devices reach each other, closest first (nvidia-smi's legend).
enum class PciRelation {
  kSelf,    // X: the same device
  kPix,     // one PCIe switch, one downstream port each
  kPxb,     // several PCIe bridges, no host bridge
  kPhb,     // through one PCIe host bridge (same root complex)
  kNode,    // between host bridges of one NUMA node
  kSys,     // across the socket interconnect (or unknown placement)
  kNvlink,  // NV#: GPU to GPU over NVLink (nvidia-smi only)
};

inline const char* PciRelationName(PciRelation r) {
  switch (r) {
    case PciRelation::kSelf:
      return "X";
    case PciRelation::kPix:
      return "PIX";
    case PciRelation::kPxb:
      return "PXB";
    case PciRelation::kPhb:
      return "PHB";
    case PciRelation::kNode:
      return "NODE";
    case PciRelation::kSys:
      return "SYS";
    case PciRelation::kNvlink:
      return "NV";
  }
  return "?";
}

struct NumaNode {
  int id = 0;
  std::vector<int> cpus;  // ascending
};

struct NetInterface {
  std::string name;
  std::optional<uint64_t> speed_mbps;  // nullopt: unknown
  int numa_node = -1;                  // -1: unknown
  std::string pci_address;             // "" : none (virtual, or not on PCI)
  std::vector<std::string> pci_path;   // host bridge first; see the top comment
  bool is_virtual = false;             // no backing device (lo, bridges, veth, ifb)
};

struct RdmaPort {
  int port = 1;
  std::string state;       // "ACTIVE", "DOWN", ... ("" unknown)
  std::string link_layer;  // "InfiniBand", "Ethernet" ("" unknown)
  std::optional<uint64_t> rate_mbps;
  std::string netdev;  // "" : none known
};

struct RdmaDevice {
  std::string name;  // mlx5_0
  std::string pci_address;
  std::vector<std::string> pci_path;
  int numa_node = -1;
  std::vector<RdmaPort> ports;  // by port number
};

struct Gpu {
  int index = 0;  // position in PCI address order
  std::string pci_address;
  std::vector<std::string> pci_path;
  int numa_node = -1;
};

// `nvidia-smi topo -m`: the square matrix over GPUs and NICs.
struct NvidiaSmiTopo {
  std::vector<std::string> names;  // row/column names in order: GPU0.., NIC0.. (or mlx5_0..)
  std::vector<std::vector<PciRelation>> relation;               // [row][column]
  std::vector<std::pair<std::string, std::string>> nic_legend;  // {"NIC0", "mlx5_0"}

  // Index of a row by its name or (for NICs) the device name in the legend.
  std::optional<size_t> Find(std::string_view name) const {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) return i;
    }
    for (const auto& [nic, device] : nic_legend) {
      if (device != name) continue;
      // One level only: a legend naming another legend entry must not loop.
      for (size_t i = 0; i < names.size(); ++i) {
        if (names[i] == nic) return i;
      }
    }
    return std::nullopt;
  }
};

struct Topology {
  std::string sysfs_root;
  std::vector<NumaNode> numa_nodes;      // by id
  std::vector<NetInterface> interfaces;  // by name
  std::vector<RdmaDevice> rdma_devices;  // by name
  std::vector<Gpu> gpus;                 // by PCI address
  std::optional<NvidiaSmiTopo> nvidia_smi;

  // A device's NUMA node, with "unknown" read as node 0 on a host with at most
  // one node (nothing can be remote there); -1 stays unknown otherwise.
  int EffectiveNuma(int numa_node) const {
    if (numa_node >= 0) return numa_node;
    return numa_nodes.size() <= 1 ? (numa_nodes.empty() ? 0 : numa_nodes[0].id) : -1;
  }

  // The NUMA node that holds `cpu`, or -1.
  int NumaOfCpu(int cpu) const {
    for (const NumaNode& n : numa_nodes) {
      if (std::binary_search(n.cpus.begin(), n.cpus.end(), cpu)) return n.id;
    }
    return numa_nodes.size() == 1 ? numa_nodes[0].id : -1;
  }

  const NetInterface* FindInterface(std::string_view name) const {
    for (const NetInterface& i : interfaces) {
      if (i.name == name) return &i;
    }
    return nullptr;
  }

  // The RDMA device and port whose netdev is `interface`, if any.
  std::optional<std::pair<const RdmaDevice*, const RdmaPort*>> RdmaFor(
      std::string_view interface) const {
    for (const RdmaDevice& d : rdma_devices) {
      for (const RdmaPort& p : d.ports) {
        if (p.netdev == interface) return std::make_pair(&d, &p);
      }
    }
    return std::nullopt;
  }

  // How GPU `gpu` reaches interface `nic`: from nvidia-smi when it names both
  // (through the interface's RDMA device), else from the PCI chains and NUMA
  // nodes. REQUIRES: gpu < gpus.size().
  PciRelation GpuNicRelation(size_t gpu, const NetInterface& nic) const;

  // Multi-line summary for logs.
  std::string ToString() const;
};

// PCI relation from two pci_paths (and NUMA nodes for the host-bridge cases).
inline PciRelation ComputePciRelation(const std::vector<std::string>& a, int numa_a,
                                      const std::vector<std::string>& b, int numa_b) {
  const auto by_numa = [&] {
    return numa_a >= 0 && numa_a == numa_b ? PciRelation::kNode : PciRelation::kSys;
  };
  if (a.empty() || b.empty()) return by_numa();
  if (a == b) return PciRelation::kSelf;
  // Ancestors are every element but the last (the device itself).
  const size_t na = a.size() - 1;
  const size_t nb = b.size() - 1;
  size_t common = 0;
  while (common < na && common < nb && a[common] == b[common]) ++common;
  if (common == 0) return by_numa();          // different host bridges
  if (common == 1) return PciRelation::kPhb;  // only the host bridge
  if (na - common <= 1 && nb - common <= 1) return PciRelation::kPix;
  return PciRelation::kPxb;
}

inline PciRelation Topology::GpuNicRelation(size_t gpu, const NetInterface& nic) const {
  MC_ASSERT(gpu < gpus.size(), "GPU index out of range");
  const Gpu& g = gpus[gpu];
  if (nvidia_smi.has_value()) {
    const auto rdma = RdmaFor(nic.name);
    const std::optional<size_t> row = nvidia_smi->Find(absl::StrCat("GPU", gpu));
    const std::optional<size_t> col =
        rdma.has_value() ? nvidia_smi->Find(rdma->first->name) : std::nullopt;
    if (row.has_value() && col.has_value()) return nvidia_smi->relation[*row][*col];
  }
  return ComputePciRelation(g.pci_path, EffectiveNuma(g.numa_node), nic.pci_path,
                            EffectiveNuma(nic.numa_node));
}

namespace transport_internal {

inline bool IsPciAddress(std::string_view s) {
  // dddd:bb:dd.f, hex digits.
  if (s.size() != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == 4 || i == 7 || i == 10) continue;
    const char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) {
      return false;
    }
  }
  return true;
}

// {host bridge, bridges..., device} from a path such as
// "devices/pci0000:17/0000:17:00.0/0000:18:00.0/virtio2": everything up to
// the last PCI address (the virtio child is not a PCI function).
inline std::vector<std::string> PciPathOf(std::string_view resolved) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(AbslView(resolved), '/', absl::SkipEmpty())) {
    if (part.size() > 3 && part.substr(0, 3) == "pci" && out.empty()) {
      out.emplace_back(part);
    } else if (!out.empty() && IsPciAddress(StdView(part))) {
      out.emplace_back(part);
    }
  }
  if (out.size() == 1) out.clear();  // a host bridge alone is no device
  return out;
}

// Reads a small sysfs attribute, trailing whitespace stripped.
// NotFound when it does not exist; other errors name the path.
inline absl::StatusOr<std::string> ReadAttr(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  std::string out;
  char buf[4096];
  while (out.size() < (64u << 10)) {  // sysfs attributes are at most a page
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, absl::StrCat("read ", path));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ' || out.back() == '\t')) {
    out.pop_back();
  }
  return out;
}

// An optional attribute: nullopt when absent.
inline absl::StatusOr<std::optional<std::string>> ReadOptionalAttr(const std::string& path) {
  absl::StatusOr<std::string> s = ReadAttr(path);
  if (absl::IsNotFound(s.status())) return std::optional<std::string>();
  if (!s.ok()) return s.status();
  return std::optional<std::string>(std::move(*s));
}

// An attribute the kernel may refuse with EINVAL (a port's `rate` while it is
// down, `gid_attrs/ndevs/0` on an InfiniBand port, which has no netdev):
// nullopt then, as when absent.
inline absl::StatusOr<std::optional<std::string>> ReadBestEffortAttr(const std::string& path) {
  absl::StatusOr<std::string> s = ReadAttr(path);
  if (absl::IsNotFound(s.status()) || absl::IsInvalidArgument(s.status())) {
    return std::optional<std::string>();
  }
  if (!s.ok()) return s.status();
  return std::optional<std::string>(std::move(*s));
}

inline absl::StatusOr<int> ReadNumaNode(const std::string& root, const std::string& dev) {
  ASSIGN_OR_RETURN(std::optional<std::string> s, ReadOptionalAttr(root + "/" + dev + "/numa_node"));
  if (!s.has_value()) return -1;
  int v = -1;
  if (!absl::SimpleAtoi(*s, &v) || v < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat(root, "/", dev, "/numa_node: not a NUMA node id: \"", *s, "\""));
  }
  return v;
}

// Resolves the sysfs link `rel` (root-relative) to a root-relative target:
// the symlink itself, else `rel`.link, else `rel` when it is a real directory
// (a class entry copied as a directory). nullopt: none of these exists.
inline absl::StatusOr<std::optional<std::string>> ResolveLink(const std::string& root,
                                                              const std::string& rel) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path full = fs::path(root) / rel;
  if (fs::is_symlink(full, ec)) {
    const fs::path target = fs::canonical(full, ec);
    if (ec)
      return absl::NotFoundError(absl::StrCat("resolve link ", full.string(), ": ", ec.message()));
    const fs::path base = fs::canonical(root, ec);
    if (ec) return absl::NotFoundError(absl::StrCat("resolve ", root, ": ", ec.message()));
    const std::string t = target.string();
    std::string b = base.string();
    if (b != "/") b += "/";
    if (t.compare(0, b.size(), b) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("link ", full.string(), " resolves outside the sysfs root: ", t));
    }
    return std::optional<std::string>(t.substr(b.size()));
  }
  ASSIGN_OR_RETURN(std::optional<std::string> text, ReadOptionalAttr(full.string() + ".link"));
  if (text.has_value()) {
    std::string t(absl::StripPrefix(*text, "/"));
    for (absl::string_view part : absl::StrSplit(t, '/')) {
      if (part == ".." || part == "." || part.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(full.string(), ".link: target \"", *text,
                                                       "\" must be a plain root-relative path"));
      }
    }
    return std::optional<std::string>(std::move(t));
  }
  if (fs::is_directory(full, ec)) return std::optional<std::string>(rel);
  return std::optional<std::string>();
}

// Names in a directory, with ".link" stripped, sorted and unique; empty when
// the directory does not exist.
inline absl::StatusOr<std::vector<std::string>> ListEntries(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::set<std::string> names;
  if (!fs::exists(dir, ec)) return std::vector<std::string>();
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string n = it->path().filename().string();
    if (absl::EndsWith(n, ".link")) n.resize(n.size() - 5);
    names.insert(std::move(n));
  }
  if (ec) return absl::UnavailableError(absl::StrCat("list ", dir, ": ", ec.message()));
  return std::vector<std::string>(names.begin(), names.end());
}

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}. Bounded to 1<<20 CPUs.
inline absl::StatusOr<std::vector<int>> ParseCpuList(std::string_view text) {
  std::vector<int> cpus;
  for (absl::string_view range : absl::StrSplit(AbslView(text), ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> ends = absl::StrSplit(range, '-');
    int lo = 0;
    int hi = 0;
    if (!absl::SimpleAtoi(ends.first, &lo) ||
        !absl::SimpleAtoi(ends.second.empty() ? ends.first : ends.second, &hi) || lo < 0 ||
        hi < lo || hi >= (1 << 20)) {
      return absl::InvalidArgumentError(absl::StrCat("bad CPU range \"", range, "\""));
    }
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

// "200 Gb/sec (4X HDR)" -> 200000 (Mbit/s).
inline std::optional<uint64_t> ParseRdmaRate(std::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(AbslView(text), ' ', absl::SkipEmpty());
  double gbps = 0;
  if (parts.size() < 2 || parts[1] != "Gb/sec" || !absl::SimpleAtod(parts[0], &gbps) ||
      !(gbps > 0) || gbps > 1e7) {
    return std::nullopt;
  }
  return static_cast<uint64_t>(gbps * 1000 + 0.5);
}

// A CPU list rendered back into ranges.
inline std::string CpuListString(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    absl::StrAppend(&out, out.empty() ? "" : ",", cpus[i]);
    if (j > i) absl::StrAppend(&out, "-", cpus[j]);
    i = j + 1;
  }
  return out;
}

inline absl::Status ReadNumaNodes(const std::string& root, Topology& t) {
  ASSIGN_OR_RETURN(std::vector<std::string> names, ListEntries(root + "/devices/system/node"));
  for (const std::string& n : names) {
    int id = 0;
    if (!absl::StartsWith(n, "node") || !absl::SimpleAtoi(n.substr(4), &id) || id < 0) continue;
    const std::string path = absl::StrCat(root, "/devices/system/node/", n, "/cpulist");
    ASSIGN_OR_RETURN(std::string text, ReadAttr(path));
    absl::StatusOr<std::vector<int>> cpus = ParseCpuList(text);
    if (!cpus.ok())
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", cpus.status().message()));
    t.numa_nodes.push_back({id, std::move(*cpus)});
  }
  std::sort(t.numa_nodes.begin(), t.numa_nodes.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
  return absl::OkStatus();
}

// The device behind class entry `entry` (root-relative, resolved): its
// resolved path, or nullopt for a virtual one.
inline absl::StatusOr<std::optional<std::string>> DeviceOf(const std::string& root,
                                                           const std::string& entry) {
  return ResolveLink(root, entry + "/device");
}

inline absl::Status ReadInterfaces(const std::string& root, Topology& t) {
  const std::string dir = root + "/class/net";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("read ", dir, ": no such directory"));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> names, ListEntries(dir));
  for (const std::string& name : names) {
    ASSIGN_OR_RETURN(std::optional<std::string> entry, ResolveLink(root, "class/net/" + name));
    if (!entry.has_value()) continue;
    NetInterface nic;
    nic.name = name;
    // EINVAL (virtio, link down) and "-1" both mean unknown.
    absl::StatusOr<std::string> speed = ReadAttr(root + "/" + *entry + "/speed");
    int64_t mbps = -1;
    if (speed.ok() && absl::SimpleAtoi(*speed, &mbps) && mbps > 0) {
      nic.speed_mbps = static_cast<uint64_t>(mbps);
    }
    ASSIGN_OR_RETURN(std::optional<std::string> device, DeviceOf(root, *entry));
    nic.is_virtual = !device.has_value();
    if (device.has_value()) {
      ASSIGN_OR_RETURN(nic.numa_node, ReadNumaNode(root, *device));
      nic.pci_path = PciPathOf(*device);
      if (!nic.pci_path.empty()) nic.pci_address = nic.pci_path.back();
      if (nic.numa_node < 0 && !nic.pci_path.empty()) {
        // A virtio netdev's parent is the PCI function that knows its node.
        const std::string pci = device->substr(0, device->find(nic.pci_address)) + nic.pci_address;
        ASSIGN_OR_RETURN(nic.numa_node, ReadNumaNode(root, pci));
      }
    }
    t.interfaces.push_back(std::move(nic));
  }
  return absl::OkStatus();
}

inline absl::Status ReadRdmaPorts(const std::string& root, const std::string& entry,
                                  RdmaDevice& dev) {
  ASSIGN_OR_RETURN(std::vector<std::string> ports, ListEntries(root + "/" + entry + "/ports"));
  for (const std::string& p : ports) {
    RdmaPort port;
    if (!absl::SimpleAtoi(p, &port.port)) continue;
    const std::string base = absl::StrCat(root, "/", entry, "/ports/", p, "/");
    ASSIGN_OR_RETURN(std::optional<std::string> state, ReadOptionalAttr(base + "state"));
    if (state.has_value()) {
      // "4: ACTIVE"
      const size_t colon = state->find(':');
      port.state = std::string(absl::StripAsciiWhitespace(
          colon == std::string::npos ? *state : state->substr(colon + 1)));
    }
    ASSIGN_OR_RETURN(std::optional<std::string> layer, ReadOptionalAttr(base + "link_layer"));
    port.link_layer = layer.value_or("");
    ASSIGN_OR_RETURN(std::optional<std::string> rate, ReadBestEffortAttr(base + "rate"));
    if (rate.has_value()) port.rate_mbps = ParseRdmaRate(*rate);
    ASSIGN_OR_RETURN(std::optional<std::string> ndev,
                     ReadBestEffortAttr(base + "gid_attrs/ndevs/0"));
    if (ndev.has_value()) port.netdev = *ndev;  // may be empty: none
    dev.ports.push_back(std::move(port));
  }
  std::sort(dev.ports.begin(), dev.ports.end(),
            [](const RdmaPort& a, const RdmaPort& b) { return a.port < b.port; });
  return absl::OkStatus();
}

inline absl::Status ReadRdmaDevices(const std::string& root, Topology& t) {
  ASSIGN_OR_RETURN(std::vector<std::string> names, ListEntries(root + "/class/infiniband"));
  for (const std::string& name : names) {
    ASSIGN_OR_RETURN(std::optional<std::string> entry,
                     ResolveLink(root, "class/infiniband/" + name));
    if (!entry.has_value()) continue;
    RdmaDevice dev;
    dev.name = name;
    ASSIGN_OR_RETURN(std::optional<std::string> device, DeviceOf(root, *entry));
    if (device.has_value()) {
      ASSIGN_OR_RETURN(dev.numa_node, ReadNumaNode(root, *device));
      dev.pci_path = PciPathOf(*device);
      if (!dev.pci_path.empty()) dev.pci_address = dev.pci_path.back();
    }
    RETURN_IF_ERROR(ReadRdmaPorts(root, *entry, dev));
    // Ports without a gid_attrs netdev (InfiniBand, older kernels): the
    // non-virtual interface on the same PCI function.
    for (RdmaPort& port : dev.ports) {
      if (!port.netdev.empty() || dev.pci_address.empty()) continue;
      for (const NetInterface& nic : t.interfaces) {
        if (nic.pci_address == dev.pci_address) {
          port.netdev = nic.name;
          break;
        }
      }
    }
    t.rdma_devices.push_back(std::move(dev));
  }
  return absl::OkStatus();
}

inline absl::Status ReadGpus(const std::string& root, Topology& t) {
  ASSIGN_OR_RETURN(std::vector<std::string> names, ListEntries(root + "/bus/pci/devices"));
  for (const std::string& bdf : names) {
    if (!IsPciAddress(bdf)) continue;
    ASSIGN_OR_RETURN(std::optional<std::string> dev, ResolveLink(root, "bus/pci/devices/" + bdf));
    if (!dev.has_value()) continue;
    ASSIGN_OR_RETURN(std::optional<std::string> vendor,
                     ReadOptionalAttr(root + "/" + *dev + "/vendor"));
    ASSIGN_OR_RETURN(std::optional<std::string> cls,
                     ReadOptionalAttr(root + "/" + *dev + "/class"));
    if (!vendor.has_value() || !cls.has_value() || *vendor != "0x10de") continue;
    if (!absl::StartsWith(*cls, "0x0300") && !absl::StartsWith(*cls, "0x0302")) continue;
    Gpu gpu;
    gpu.pci_address = bdf;
    gpu.pci_path = PciPathOf(*dev);
    if (gpu.pci_path.empty()) gpu.pci_path = {bdf};
    ASSIGN_OR_RETURN(gpu.numa_node, ReadNumaNode(root, *dev));
    t.gpus.push_back(std::move(gpu));
  }
  std::sort(t.gpus.begin(), t.gpus.end(),
            [](const Gpu& a, const Gpu& b) { return a.pci_address < b.pci_address; });
  for (size_t i = 0; i < t.gpus.size(); ++i) t.gpus[i].index = static_cast<int>(i);
  return absl::OkStatus();
}

inline std::optional<PciRelation> ParseRelationToken(std::string_view tok) {
  if (tok == "X") return PciRelation::kSelf;
  if (tok == "PIX") return PciRelation::kPix;
  if (tok == "PXB") return PciRelation::kPxb;
  if (tok == "PHB") return PciRelation::kPhb;
  if (tok == "NODE" || tok == "SOC") return PciRelation::kNode;  // SOC: older drivers
  if (tok == "SYS") return PciRelation::kSys;
  if (tok.size() > 2 && tok.substr(0, 2) == "NV") {
    int links = 0;
    if (absl::SimpleAtoi(AbslView(tok.substr(2)), &links) && links > 0) return PciRelation::kNvlink;
  }
  return std::nullopt;
}

}  // namespace transport_internal

// Parses `nvidia-smi topo -m` output. The header row lists the matrix
// columns (GPU0 ... NIC0 ...) before "CPU Affinity"; each matrix row starts
// with its name and holds one relation per column (X PIX PXB PHB NODE SYS
// NV#), then affinities (ignored). "NIC Legend" lines "  NIC0: mlx5_0" name
// the NICs. Errors name the 1-based line and the token. At most 1024 columns.
inline absl::StatusOr<NvidiaSmiTopo> ParseNvidiaSmiTopo(std::string_view text) {
  using transport_internal::ParseRelationToken;
  NvidiaSmiTopo topo;
  int line_no = 0;
  bool have_header = false;
  for (absl::string_view line : absl::StrSplit(AbslView(text), '\n')) {
    ++line_no;
    std::vector<absl::string_view> tok =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (tok.empty()) continue;
    if (!have_header) {
      if (tok[0] != "GPU0") continue;  // banners before the matrix
      for (absl::string_view t : tok) {
        if (t == "CPU" || t == "NUMA") break;
        if (topo.names.size() >= 1024)
          return absl::InvalidArgumentError("nvidia-smi topo: too many columns");
        topo.names.emplace_back(t);
      }
      have_header = true;
      continue;
    }
    if (tok.size() == 2 && tok[0].size() > 1 && tok[0].back() == ':' &&
        absl::StartsWith(tok[0], "NIC")) {
      topo.nic_legend.emplace_back(std::string(tok[0].substr(0, tok[0].size() - 1)),
                                   std::string(tok[1]));
      continue;
    }
    const size_t row = topo.relation.size();
    if (row >= topo.names.size() || tok[0] != topo.names[row]) continue;  // legend prose
    if (tok.size() < topo.names.size() + 1) {
      return absl::InvalidArgumentError(absl::StrCat("nvidia-smi topo line ", line_no, ": row ",
                                                     tok[0], " has ", tok.size() - 1,
                                                     " entries, want ", topo.names.size()));
    }
    std::vector<PciRelation> rel;
    for (size_t c = 0; c < topo.names.size(); ++c) {
      const std::optional<PciRelation> r = ParseRelationToken(StdView(tok[c + 1]));
      if (!r.has_value()) {
        return absl::InvalidArgumentError(absl::StrCat("nvidia-smi topo line ", line_no,
                                                       ": unknown relation \"", tok[c + 1], "\""));
      }
      rel.push_back(*r);
    }
    topo.relation.push_back(std::move(rel));
  }
  if (!have_header) return absl::InvalidArgumentError("nvidia-smi topo: no header row (GPU0 ...)");
  if (topo.relation.size() != topo.names.size()) {
    return absl::InvalidArgumentError(absl::StrCat("nvidia-smi topo: ", topo.relation.size(),
                                                   " rows for ", topo.names.size(), " columns"));
  }
  return topo;
}

// Reads the topology under `sysfs_root`; `nvidia_smi_topo` is the text of
// `nvidia-smi topo -m` when the caller captured it ("" : none).
inline absl::StatusOr<Topology> DiscoverTopology(std::string_view sysfs_root = "/sys",
                                                 std::string_view nvidia_smi_topo = "") {
  Topology t;
  t.sysfs_root = std::string(sysfs_root);
  std::error_code ec;
  if (!std::filesystem::is_directory(t.sysfs_root, ec)) {
    return absl::NotFoundError(absl::StrCat("sysfs root ", t.sysfs_root, " is not a directory"));
  }
  RETURN_IF_ERROR(transport_internal::ReadNumaNodes(t.sysfs_root, t));
  RETURN_IF_ERROR(transport_internal::ReadInterfaces(t.sysfs_root, t));
  RETURN_IF_ERROR(transport_internal::ReadRdmaDevices(t.sysfs_root, t));
  RETURN_IF_ERROR(transport_internal::ReadGpus(t.sysfs_root, t));
  if (!nvidia_smi_topo.empty()) {
    ASSIGN_OR_RETURN(t.nvidia_smi, ParseNvidiaSmiTopo(nvidia_smi_topo));
  }
  return t;
}

inline std::string Topology::ToString() const {
  std::string out = absl::StrCat("topology of ", sysfs_root, ": ", numa_nodes.size(),
                                 " NUMA node(s), ", interfaces.size(), " interface(s), ",
                                 rdma_devices.size(), " RDMA device(s), ", gpus.size(), " GPU(s)",
                                 nvidia_smi.has_value() ? ", nvidia-smi matrix" : "", "\n");
  for (const NumaNode& n : numa_nodes) {
    absl::StrAppend(&out, "  numa", n.id, " cpus ", transport_internal::CpuListString(n.cpus),
                    "\n");
  }
  for (const NetInterface& i : interfaces) {
    absl::StrAppend(&out, "  net ", i.name, i.is_virtual ? " virtual" : "", " speed ",
                    i.speed_mbps.has_value() ? absl::StrCat(*i.speed_mbps, "Mb/s") : "unknown",
                    " numa ", i.numa_node, i.pci_address.empty() ? "" : " pci ", i.pci_address,
                    "\n");
  }
  for (const RdmaDevice& d : rdma_devices) {
    absl::StrAppend(&out, "  rdma ", d.name, " numa ", d.numa_node, " pci ", d.pci_address);
    for (const RdmaPort& p : d.ports) {
      absl::StrAppend(&out, " port", p.port, "=", p.state.empty() ? "?" : p.state, "/",
                      p.netdev.empty() ? "-" : p.netdev);
    }
    out += "\n";
  }
  for (const Gpu& g : gpus) {
    absl::StrAppend(&out, "  gpu", g.index, " pci ", g.pci_address, " numa ", g.numa_node, " path ",
                    absl::StrJoin(g.pci_path, "/"), "\n");
  }
  return out;
}

}  // namespace mooncake::transport

#endif  // MOONCAKE_TRANSPORT_TOPOLOGY_H_
