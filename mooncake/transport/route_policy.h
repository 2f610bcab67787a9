// RoutePolicy and RoutePlanner: which local NICs (and RDMA ports) a source of
// traffic uses, decided from the host's Topology (topology.h) and a small
// declarative policy. Data and decisions only: nothing here opens a device.
//
//   ASSIGN_OR_RETURN(Topology topo, DiscoverTopology("/sys"));
//   ASSIGN_OR_RETURN(RoutePolicy policy, ParseRoutePolicy(text));
//   RoutePlanner planner(std::move(topo), std::move(policy));
//   ASSIGN_OR_RETURN(RoutePlan plan, planner.Plan(RouteSource::Gpu(3), TrafficClass::kBulk));
//   for (const std::string& line : RenderPlan(plan)) std::puts(line.c_str());
//
// Policy format (docs/transport.md, "Routing policy"). One directive a line;
// '#' starts a comment; tokens are separated by blanks; an empty text is the
// default policy. Each directive but nic_exclude may appear once.
//
//   gpu_nic pcie_switch|numa|any       how a GPU ranks NICs (default pcie_switch):
//                                        pcie_switch: the NICs under its PCIe switch
//                                        (PIX/PXB) first, then its NUMA node's, then
//                                        the rest; numa: its node's first, then the
//                                        rest; any: all NICs alike (crossing sockets
//                                        is still governed by the class rule)
//   latency|bulk spread own|numa|all   which NICs a class uses (defaults: latency
//                                        own, bulk numa): own: only the best-ranked
//                                        NICs; numa: every NIC of the source's NUMA
//                                        node, best-ranked first (if the node has
//                                        none, as `own`); all: every NIC, nearest first
//   latency|bulk no_cross_socket|cross_socket
//                                      whether the class may use a NIC of another
//                                        NUMA node (defaults: latency no_cross_socket,
//                                        bulk cross_socket). With no_cross_socket and
//                                        no NIC on the source's node, Plan() fails
//                                        (FailedPrecondition): no silent fallback
//   prefer rdma|tcp [rdma|tcp]         transports in order of preference (default
//                                        rdma tcp); a transport not named is not used
//   nic_exclude NAME...                interfaces never used; NAME* is a prefix match
//
// A "socket" is a NUMA node here (sysfs gives nodes; with sub-NUMA clustering
// each cluster counts as a socket). A NIC whose node is unknown is remote on a
// multi-node host and local on a single-node one. Virtual interfaces (lo,
// docker0, veth, ifb: no backing device) are never used.
//
// Plans. Plan(source, class) lists paths, grouped by transport in preference
// order (all RDMA paths, then all TCP paths: the later group is the fallback);
// within a group, NICs by rank (same switch, same node, remote), then speed,
// then name. A NIC gives an RDMA path when an RDMA port maps to it (topology's
// netdev mapping) and the port is ACTIVE (or its state unknown); every NIC
// gives a TCP path (bind to the interface; its address is the caller's to
// look up). `weight` is the path's share of its group by link speed (RDMA
// port rate, else interface speed; an unknown speed counts as the slowest
// known one in the group, or all alike when none is known): bulk traffic
// sprays slices in these proportions; latency traffic uses the first path and
// fails over down the list.
//
// Thread-safety: RoutePlanner is immutable after construction; every const
// method may be called concurrently.
#ifndef MOONCAKE_TRANSPORT_ROUTE_POLICY_H_
#define MOONCAKE_TRANSPORT_ROUTE_POLICY_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/transport/topology.h"

namespace mooncake::transport {

enum class TrafficClass { kLatency, kBulk };
enum class PathTransport { kRdma, kTcp };
enum class GpuNicLocality { kPcieSwitch, kNuma, kAny };
enum class SpreadScope { kOwn, kNuma, kAll };

inline const char* TrafficClassName(TrafficClass c) {
  return c == TrafficClass::kLatency ? "latency" : "bulk";
}
inline const char* PathTransportName(PathTransport t) {
  return t == PathTransport::kRdma ? "rdma" : "tcp";
}

struct ClassRule {
  SpreadScope spread = SpreadScope::kOwn;
  bool cross_socket = false;
  bool operator==(const ClassRule&) const = default;
};

struct RoutePolicy {
  GpuNicLocality gpu_nic = GpuNicLocality::kPcieSwitch;
  ClassRule latency = {SpreadScope::kOwn, false};
  ClassRule bulk = {SpreadScope::kNuma, true};
  std::vector<PathTransport> prefer = {PathTransport::kRdma, PathTransport::kTcp};
  std::vector<std::string> nic_exclude;  // NAME or NAME* (prefix)

  static constexpr size_t kLineBytesMax = 4096;
  static constexpr size_t kExcludesMax = 256;
  static constexpr size_t kNameBytesMax = 64;

  bool operator==(const RoutePolicy&) const = default;

  const ClassRule& Rule(TrafficClass c) const {
    return c == TrafficClass::kLatency ? latency : bulk;
  }

  bool Excludes(std::string_view nic) const {
    for (const std::string& p : nic_exclude) {
      if (!p.empty() && p.back() == '*') {
        if (nic.substr(0, p.size() - 1) == std::string_view(p).substr(0, p.size() - 1)) return true;
      } else if (nic == p) {
        return true;
      }
    }
    return false;
  }

  // The policy in canonical form: every directive explicit; parses back equal.
  std::string ToString() const;
};

namespace transport_internal {

inline const char* LocalityName(GpuNicLocality l) {
  switch (l) {
    case GpuNicLocality::kPcieSwitch:
      return "pcie_switch";
    case GpuNicLocality::kNuma:
      return "numa";
    case GpuNicLocality::kAny:
      return "any";
  }
  return "?";
}

inline const char* ScopeName(SpreadScope s) {
  switch (s) {
    case SpreadScope::kOwn:
      return "own";
    case SpreadScope::kNuma:
      return "numa";
    case SpreadScope::kAll:
      return "all";
  }
  return "?";
}

inline bool IsInterfaceNamePattern(std::string_view s) {
  if (s.empty() || s.size() > RoutePolicy::kNameBytesMax || s == "*") return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.' || c == ':' || c == '@' ||
                    (c == '*' && i + 1 == s.size());
    if (!ok) return false;
  }
  return true;
}

// Printable form of an offending token for an error message.
inline std::string Quoted(std::string_view tok) {
  std::string out = "\"";
  for (const char c : tok.substr(0, 64)) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += c;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    }
  }
  return out + (tok.size() > 64 ? "...\"" : "\"");
}

struct PolicyParser {
  RoutePolicy policy;
  // Line on which each once-only directive was set (0: not yet).
  int gpu_nic_line = 0, prefer_line = 0;
  int spread_line[2] = {0, 0}, cross_line[2] = {0, 0};

  static absl::Status Error(int line, std::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("route policy line ", line, ": ", AbslView(what)));
  }

  static absl::Status Once(int line, int& seen, std::string_view directive) {
    if (seen != 0) {
      return Error(line, absl::StrCat(AbslView(directive), " was already set on line ", seen));
    }
    seen = line;
    return absl::OkStatus();
  }

  using Tokens = std::vector<std::string_view>;

  // OK when `tok` holds the directive and lo..hi values.
  static absl::Status WantArgs(int n, const Tokens& tok, size_t lo, size_t hi) {
    if (tok.size() < lo + 1) return Error(n, absl::StrCat(AbslView(tok[0]), ": missing value"));
    if (tok.size() > hi + 1) {
      return Error(
          n, absl::StrCat("unexpected token ", Quoted(tok[hi + 1]), " after ", AbslView(tok[0])));
    }
    return absl::OkStatus();
  }

  absl::Status GpuNic(int n, const Tokens& tok) {
    RETURN_IF_ERROR(WantArgs(n, tok, 1, 1));
    RETURN_IF_ERROR(Once(n, gpu_nic_line, "gpu_nic"));
    if (tok[1] == "pcie_switch") {
      policy.gpu_nic = GpuNicLocality::kPcieSwitch;
    } else if (tok[1] == "numa") {
      policy.gpu_nic = GpuNicLocality::kNuma;
    } else if (tok[1] == "any") {
      policy.gpu_nic = GpuNicLocality::kAny;
    } else {
      return Error(n, absl::StrCat("gpu_nic: unknown value ", Quoted(tok[1]),
                                   " (want pcie_switch, numa or any)"));
    }
    return absl::OkStatus();
  }

  // latency|bulk spread SCOPE, latency|bulk [no_]cross_socket.
  absl::Status Class(int n, const Tokens& tok) {
    const std::string_view d = tok[0];
    const int c = d == "latency" ? 0 : 1;
    ClassRule& rule = c == 0 ? policy.latency : policy.bulk;
    RETURN_IF_ERROR(WantArgs(n, tok, 1, 2));
    if (tok[1] == "spread") {
      RETURN_IF_ERROR(WantArgs(n, tok, 2, 2));
      RETURN_IF_ERROR(Once(n, spread_line[c], absl::StrCat(AbslView(d), " spread")));
      if (tok[2] == "own") {
        rule.spread = SpreadScope::kOwn;
      } else if (tok[2] == "numa") {
        rule.spread = SpreadScope::kNuma;
      } else if (tok[2] == "all") {
        rule.spread = SpreadScope::kAll;
      } else {
        return Error(n, absl::StrCat(AbslView(d), " spread: unknown scope ", Quoted(tok[2]),
                                     " (want own, numa or all)"));
      }
      return absl::OkStatus();
    }
    if (tok[1] == "no_cross_socket" || tok[1] == "cross_socket") {
      RETURN_IF_ERROR(WantArgs(n, tok, 1, 1));
      RETURN_IF_ERROR(Once(n, cross_line[c], absl::StrCat(AbslView(d), " cross_socket")));
      rule.cross_socket = tok[1] == "cross_socket";
      return absl::OkStatus();
    }
    return Error(n, absl::StrCat(AbslView(d), ": unknown rule ", Quoted(tok[1]),
                                 " (want spread, no_cross_socket or cross_socket)"));
  }

  absl::Status Prefer(int n, const Tokens& tok) {
    RETURN_IF_ERROR(WantArgs(n, tok, 1, 2));
    RETURN_IF_ERROR(Once(n, prefer_line, "prefer"));
    policy.prefer.clear();
    for (size_t i = 1; i < tok.size(); ++i) {
      PathTransport t;
      if (tok[i] == "rdma") {
        t = PathTransport::kRdma;
      } else if (tok[i] == "tcp") {
        t = PathTransport::kTcp;
      } else {
        return Error(
            n, absl::StrCat("prefer: unknown transport ", Quoted(tok[i]), " (want rdma or tcp)"));
      }
      if (std::find(policy.prefer.begin(), policy.prefer.end(), t) != policy.prefer.end()) {
        return Error(n, absl::StrCat("prefer: ", Quoted(tok[i]), " named twice"));
      }
      policy.prefer.push_back(t);
    }
    return absl::OkStatus();
  }

  absl::Status Exclude(int n, const Tokens& tok) {
    if (tok.size() < 2) return Error(n, "nic_exclude: missing interface name");
    for (size_t i = 1; i < tok.size(); ++i) {
      if (!IsInterfaceNamePattern(tok[i])) {
        return Error(n, absl::StrCat("nic_exclude: bad interface name ", Quoted(tok[i])));
      }
      if (policy.nic_exclude.size() >= RoutePolicy::kExcludesMax) {
        return Error(n,
                     absl::StrCat("nic_exclude: more than ", RoutePolicy::kExcludesMax, " names"));
      }
      policy.nic_exclude.emplace_back(tok[i]);
    }
    return absl::OkStatus();
  }

  // One non-empty line, split into tokens.
  absl::Status Line(int n, const Tokens& tok) {
    MC_ASSERT(!tok.empty(), "blank lines are skipped before Line()");
    const std::string_view d = tok[0];
    if (d == "gpu_nic") return GpuNic(n, tok);
    if (d == "latency" || d == "bulk") return Class(n, tok);
    if (d == "prefer") return Prefer(n, tok);
    if (d == "nic_exclude") return Exclude(n, tok);
    return Error(n, absl::StrCat("unknown directive ", Quoted(d),
                                 " (want gpu_nic, latency, bulk, prefer or nic_exclude)"));
  }
};

}  // namespace transport_internal

// Parses the policy text (format above). Errors (InvalidArgument) name the
// 1-based line and the offending token.
inline absl::StatusOr<RoutePolicy> ParseRoutePolicy(std::string_view text) {
  transport_internal::PolicyParser parser;
  int n = 0;
  for (absl::string_view raw : absl::StrSplit(AbslView(text), '\n')) {
    ++n;
    if (raw.size() > RoutePolicy::kLineBytesMax) {
      return transport_internal::PolicyParser::Error(
          n, absl::StrCat("longer than ", RoutePolicy::kLineBytesMax, " bytes"));
    }
    const absl::string_view line = raw.substr(0, raw.find('#'));
    std::vector<std::string_view> tok;
    for (absl::string_view t :
         absl::StrSplit(line, absl::ByAnyChar(" \t\r\v\f"), absl::SkipEmpty())) {
      tok.push_back(StdView(t));
    }
    if (tok.empty()) continue;
    RETURN_IF_ERROR(parser.Line(n, tok));
  }
  return std::move(parser.policy);
}

inline std::string RoutePolicy::ToString() const {
  using transport_internal::LocalityName;
  using transport_internal::ScopeName;
  std::string out = absl::StrCat("gpu_nic ", LocalityName(gpu_nic), "\n");
  for (const TrafficClass c : {TrafficClass::kLatency, TrafficClass::kBulk}) {
    const ClassRule& r = Rule(c);
    absl::StrAppend(&out, TrafficClassName(c), " spread ", ScopeName(r.spread), "\n",
                    TrafficClassName(c), r.cross_socket ? " cross_socket\n" : " no_cross_socket\n");
  }
  out += "prefer";
  for (const PathTransport t : prefer) absl::StrAppend(&out, " ", PathTransportName(t));
  out += "\n";
  if (!nic_exclude.empty())
    absl::StrAppend(&out, "nic_exclude ", absl::StrJoin(nic_exclude, " "), "\n");
  return out;
}

// Where traffic starts: a GPU (by index in Topology::gpus), host memory of a
// NUMA node, or host memory used by a thread on a CPU (its node).
struct RouteSource {
  enum class Kind { kGpu, kNuma, kCpu };
  Kind kind = Kind::kNuma;
  int index = 0;

  static RouteSource Gpu(int i) { return {Kind::kGpu, i}; }
  static RouteSource Numa(int node) { return {Kind::kNuma, node}; }
  static RouteSource Cpu(int cpu) { return {Kind::kCpu, cpu}; }

  std::string Name() const {
    return absl::StrCat(kind == Kind::kGpu ? "gpu" : kind == Kind::kNuma ? "numa" : "cpu", index);
  }
};

// How close a path's NIC is to the source, closest first.
enum class NicRank { kSameSwitch = 0, kSameNuma = 1, kRemote = 2 };

inline const char* NicRankName(NicRank r) {
  switch (r) {
    case NicRank::kSameSwitch:
      return "same PCIe switch";
    case NicRank::kSameNuma:
      return "same NUMA node";
    case NicRank::kRemote:
      return "other NUMA node";
  }
  return "?";
}

struct RoutePath {
  std::string nic;
  PathTransport transport = PathTransport::kTcp;
  std::string rdma_device;  // RDMA only
  int rdma_port = 0;        // RDMA only
  std::optional<uint64_t> speed_mbps;
  NicRank rank = NicRank::kRemote;
  double weight = 0;  // share of its transport group, by speed
};

struct RoutePlan {
  RouteSource source;
  TrafficClass cls = TrafficClass::kLatency;
  std::vector<RoutePath> paths;  // never empty in a plan Plan() returns
};

// Every plan for every GPU and NUMA node, and why the others failed.
struct RoutePlans {
  std::vector<RoutePlan> plans;
  std::vector<std::string> errors;  // "gpu3 latency: <message>"
};

class RoutePlanner {
 public:
  RoutePlanner(Topology topology, RoutePolicy policy)
      : topology_(std::move(topology)), policy_(std::move(policy)) {}

  const Topology& topology() const { return topology_; }
  const RoutePolicy& policy() const { return policy_; }

  // InvalidArgument: no such GPU / NUMA node / CPU. FailedPrecondition: the
  // policy leaves no usable path (message says which rule).
  absl::StatusOr<RoutePlan> Plan(RouteSource source, TrafficClass cls) const;

  // Plan() for every GPU and NUMA node (node 0 on a host without NUMA
  // information), latency then bulk.
  RoutePlans PlanAll() const;

 private:
  struct Candidate {
    const NetInterface* nic;
    NicRank rank;  // for ordering (gpu_nic may flatten it)
    bool remote;   // on another NUMA node, or unknown on a multi-node host
  };

  absl::StatusOr<int> SourceNuma(RouteSource source) const;
  std::vector<Candidate> Candidates(RouteSource source, int numa) const;
  void AddPaths(PathTransport t, const std::vector<Candidate>& chosen, RoutePlan& plan) const;

  Topology topology_;
  RoutePolicy policy_;
};

inline absl::StatusOr<int> RoutePlanner::SourceNuma(RouteSource source) const {
  const Topology& t = topology_;
  switch (source.kind) {
    case RouteSource::Kind::kGpu:
      if (source.index < 0 || static_cast<size_t>(source.index) >= t.gpus.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("no ", source.Name(), ": the host has ", t.gpus.size(), " GPU(s)"));
      }
      return t.EffectiveNuma(t.gpus[source.index].numa_node);
    case RouteSource::Kind::kNuma:
      for (const NumaNode& n : t.numa_nodes) {
        if (n.id == source.index) return n.id;
      }
      if (t.numa_nodes.empty() && source.index == 0) return 0;
      return absl::InvalidArgumentError(absl::StrCat("no NUMA node ", source.index));
    case RouteSource::Kind::kCpu: {
      const int node = source.index >= 0 ? t.NumaOfCpu(source.index) : -1;
      if (node < 0) {
        if (t.numa_nodes.empty() && source.index >= 0) return 0;
        return absl::InvalidArgumentError(
            absl::StrCat("CPU ", source.index, " is on no NUMA node"));
      }
      return node;
    }
  }
  return absl::InternalError("unknown source kind");
}

inline std::vector<RoutePlanner::Candidate> RoutePlanner::Candidates(RouteSource source,
                                                                     int numa) const {
  std::vector<Candidate> out;
  for (const NetInterface& nic : topology_.interfaces) {
    if (nic.is_virtual || policy_.Excludes(nic.name)) continue;
    const int nic_numa = topology_.EffectiveNuma(nic.numa_node);
    const bool remote = numa < 0 || nic_numa != numa;
    NicRank rank = remote ? NicRank::kRemote : NicRank::kSameNuma;
    if (source.kind == RouteSource::Kind::kGpu) {
      if (policy_.gpu_nic == GpuNicLocality::kAny) {
        rank = NicRank::kSameNuma;
      } else if (policy_.gpu_nic == GpuNicLocality::kPcieSwitch) {
        const PciRelation r = topology_.GpuNicRelation(static_cast<size_t>(source.index), nic);
        if (r == PciRelation::kPix || r == PciRelation::kPxb || r == PciRelation::kSelf) {
          rank = NicRank::kSameSwitch;
        }
      }
    }
    out.push_back({&nic, rank, remote});
  }
  return out;
}

inline void RoutePlanner::AddPaths(PathTransport t, const std::vector<Candidate>& chosen,
                                   RoutePlan& plan) const {
  const size_t first = plan.paths.size();
  for (const Candidate& c : chosen) {
    RoutePath p;
    p.nic = c.nic->name;
    p.transport = t;
    p.rank = c.rank;
    p.speed_mbps = c.nic->speed_mbps;
    if (t == PathTransport::kRdma) {
      const auto rdma = topology_.RdmaFor(c.nic->name);
      if (!rdma.has_value()) continue;
      const RdmaPort& port = *rdma->second;
      if (!port.state.empty() && port.state != "ACTIVE") continue;
      p.rdma_device = rdma->first->name;
      p.rdma_port = port.port;
      if (port.rate_mbps.has_value()) p.speed_mbps = port.rate_mbps;
    }
    plan.paths.push_back(std::move(p));
  }
  // Weights by speed within this transport's group.
  std::optional<uint64_t> slowest;
  for (size_t i = first; i < plan.paths.size(); ++i) {
    const auto& s = plan.paths[i].speed_mbps;
    if (s.has_value() && (!slowest.has_value() || *s < *slowest)) slowest = s;
  }
  double total = 0;
  for (size_t i = first; i < plan.paths.size(); ++i) {
    total += static_cast<double>(plan.paths[i].speed_mbps.value_or(slowest.value_or(1)));
  }
  MC_DASSERT(total > 0 || first == plan.paths.size(), "a group with paths has a positive total");
  for (size_t i = first; i < plan.paths.size(); ++i) {
    plan.paths[i].weight =
        static_cast<double>(plan.paths[i].speed_mbps.value_or(slowest.value_or(1))) / total;
  }
}

inline absl::StatusOr<RoutePlan> RoutePlanner::Plan(RouteSource source, TrafficClass cls) const {
  ASSIGN_OR_RETURN(const int numa, SourceNuma(source));
  const ClassRule& rule = policy_.Rule(cls);
  const std::string who = absl::StrCat(TrafficClassName(cls), " traffic from ", source.Name(),
                                       " (NUMA node ", numa, ")");
  std::vector<Candidate> all = Candidates(source, numa);
  if (all.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, ": no usable network interface (all are virtual or in nic_exclude)"));
  }
  std::vector<Candidate> usable;
  for (const Candidate& c : all) {
    if (rule.cross_socket || !c.remote) usable.push_back(c);
  }
  if (usable.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, ": no usable NIC on its NUMA node, and the policy says ",
                     TrafficClassName(cls), " no_cross_socket"));
  }
  std::sort(usable.begin(), usable.end(), [](const Candidate& a, const Candidate& b) {
    if (a.rank != b.rank) return a.rank < b.rank;
    const uint64_t sa = a.nic->speed_mbps.value_or(0);
    const uint64_t sb = b.nic->speed_mbps.value_or(0);
    if (sa != sb) return sa > sb;
    return a.nic->name < b.nic->name;
  });
  const bool any_local =
      std::any_of(usable.begin(), usable.end(), [](const Candidate& c) { return !c.remote; });
  std::vector<Candidate> chosen;
  for (const Candidate& c : usable) {
    const bool best = c.rank == usable.front().rank;
    bool keep = best;  // own
    if (rule.spread == SpreadScope::kAll) keep = true;
    if (rule.spread == SpreadScope::kNuma) keep = any_local ? !c.remote : best;
    if (keep) chosen.push_back(c);
  }
  MC_ASSERT(!chosen.empty(), "the best-ranked candidate is always chosen");
  RoutePlan plan{source, cls, {}};
  for (const PathTransport t : policy_.prefer) AddPaths(t, chosen, plan);
  if (plan.paths.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        who, ": none of its NICs (", chosen.front().nic->name, chosen.size() > 1 ? ", ..." : "",
        ") offers a preferred transport (prefer ",
        absl::StrJoin(
            policy_.prefer, " ",
            [](std::string* out, PathTransport t) { absl::StrAppend(out, PathTransportName(t)); }),
        ")"));
  }
  return plan;
}

inline RoutePlans RoutePlanner::PlanAll() const {
  std::vector<RouteSource> sources;
  for (const Gpu& g : topology_.gpus) sources.push_back(RouteSource::Gpu(g.index));
  for (const NumaNode& n : topology_.numa_nodes) sources.push_back(RouteSource::Numa(n.id));
  if (topology_.numa_nodes.empty()) sources.push_back(RouteSource::Numa(0));
  RoutePlans out;
  for (const RouteSource& s : sources) {
    for (const TrafficClass c : {TrafficClass::kLatency, TrafficClass::kBulk}) {
      absl::StatusOr<RoutePlan> p = Plan(s, c);
      if (p.ok()) {
        out.plans.push_back(std::move(*p));
      } else {
        out.errors.push_back(
            absl::StrCat(s.Name(), " ", TrafficClassName(c), ": ", p.status().message()));
      }
    }
  }
  return out;
}

// One line per path, for logs at start:
//   "route gpu3 bulk: 1. eth3 rdma mlx5_3:1 200000 Mb/s weight 0.25 (same PCIe switch)"
inline std::vector<std::string> RenderPlan(const RoutePlan& plan) {
  std::vector<std::string> lines;
  for (size_t i = 0; i < plan.paths.size(); ++i) {
    const RoutePath& p = plan.paths[i];
    char weight[32];
    std::snprintf(weight, sizeof(weight), "%.3f", p.weight);
    lines.push_back(absl::StrCat(
        "route ", plan.source.Name(), " ", TrafficClassName(plan.cls), ": ", i + 1, ". ", p.nic,
        " ", PathTransportName(p.transport),
        p.transport == PathTransport::kRdma ? absl::StrCat(" ", p.rdma_device, ":", p.rdma_port)
                                            : "",
        " ", p.speed_mbps.has_value() ? absl::StrCat(*p.speed_mbps, " Mb/s") : "speed unknown",
        " weight ", weight, " (", NicRankName(p.rank), ")"));
  }
  return lines;
}

inline std::vector<std::string> RenderPlans(const RoutePlans& plans) {
  std::vector<std::string> lines;
  for (const RoutePlan& p : plans.plans) {
    for (std::string& l : RenderPlan(p)) lines.push_back(std::move(l));
  }
  for (const std::string& e : plans.errors) lines.push_back(absl::StrCat("route error: ", e));
  return lines;
}

// Exports the plans as the gauge
//   mooncake_route_paths{source, class, nic, transport} = weight
// (one series per path; a path's weight is its share of its transport group).
// Series of an earlier export that a new one lacks are not removed.
inline absl::Status ExportRoutePlans(std::span<const RoutePlan> plans, MetricsRegistry& registry) {
  for (const RoutePlan& plan : plans) {
    for (const RoutePath& p : plan.paths) {
      ASSIGN_OR_RETURN(
          Gauge * g,
          registry.GetGauge("mooncake_route_paths",
                            "Planned local paths per traffic source and class; the value is the "
                            "path's share of its transport group (by link speed).",
                            {{"source", plan.source.Name()},
                             {"class", std::string(TrafficClassName(plan.cls))},
                             {"nic", p.nic},
                             {"transport", std::string(PathTransportName(p.transport))}}));
      g->Set(p.weight);
    }
  }
  return absl::OkStatus();
}

}  // namespace mooncake::transport

#endif  // MOONCAKE_TRANSPORT_ROUTE_POLICY_H_
