// Route binding: a RoutePlan's paths (route_policy.h) as the paths a
// transport spreads a peer's traffic over, so the plan's `bulk spread`
// decides which NICs carry it and its weights are the paths' starting shares
// (docs/transport.md, "Aggregation"):
//   - TcpLocalPaths: the TCP paths as the local addresses TcpTransport's lanes
//     bind to (TcpTransport::Options::local_paths);
//   - RdmaLocalPaths: the RDMA paths as the ports RdmaEngine posts on
//     (RdmaOptions::paths).
//
//   ASSIGN_OR_RETURN(RoutePlan plan, planner.Plan(RouteSource::Numa(0), TrafficClass::kBulk));
//   TcpTransport::Options o;
//   ASSIGN_OR_RETURN(o.local_paths, TcpLocalPaths(plan));  // NIC -> its IPv4 address
//   RdmaOptions r;
//   ASSIGN_OR_RETURN(r.paths, RdmaLocalPaths(plan, /*gid_index=*/3));  // NIC -> device:port
//
// For TCP a NIC maps to its first IPv4 address (getifaddrs); a NIC without
// one is skipped (it cannot carry TCP here). Each function skips the other
// transport's paths. Errors: FAILED_PRECONDITION when the plan has no path
// for the transport (the message lists the NICs tried).
//
// Thread-safety: pure functions of their arguments and the system.
#ifndef MOONCAKE_TRANSPORT_ROUTE_BINDING_H_
#define MOONCAKE_TRANSPORT_ROUTE_BINDING_H_

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mooncake/transport/internal/rdma_path.h"
#include "mooncake/transport/route_policy.h"
#include "mooncake/transport/tcp_transport.h"

namespace mooncake::transport {

// The first IPv4 address of interface `nic`, as a literal; nullopt if it has
// none (or does not exist).
inline std::optional<std::string> InterfaceIpv4(std::string_view nic) {
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return std::nullopt;
  std::optional<std::string> out;
  for (const ifaddrs* a = all; a != nullptr && !out; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || nic != a->ifa_name) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text)) != nullptr) out = text;
  }
  ::freeifaddrs(all);
  return out;
}

using NicAddressLookup = std::function<std::optional<std::string>(std::string_view nic)>;

// The plan's TCP paths, in plan order, as local bind addresses with the
// plan's weights.
inline absl::StatusOr<std::vector<TcpTransport::Options::LocalPath>> TcpLocalPaths(
    const RoutePlan& plan, const NicAddressLookup& address_of = InterfaceIpv4) {
  std::vector<TcpTransport::Options::LocalPath> out;
  std::vector<std::string> tried;
  for (const RoutePath& p : plan.paths) {
    if (p.transport != PathTransport::kTcp) continue;
    tried.push_back(p.nic);
    if (std::optional<std::string> addr = address_of(p.nic); addr.has_value()) {
      out.push_back({*addr, p.weight > 0 ? p.weight : 1.0});
    }
  }
  if (out.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the ", TrafficClassName(plan.cls), " plan of ", plan.source.Name(),
                     " has no TCP path with an IPv4 address (NICs tried: ",
                     tried.empty() ? std::string("none") : absl::StrJoin(tried, ", "), ")"));
  }
  return out;
}

// The plan's RDMA paths, in plan order (at most kRdmaPathsMax), as local
// ports with the plan's weights; `gid_index` for each (RoCE v2 usually wants
// the IPv4-mapped GID, often 3; InfiniBand 0).
inline absl::StatusOr<std::vector<::mooncake::transport_internal::RdmaPath>> RdmaLocalPaths(
    const RoutePlan& plan, int gid_index = 0) {
  std::vector<::mooncake::transport_internal::RdmaPath> out;
  for (const RoutePath& p : plan.paths) {
    if (p.transport != PathTransport::kRdma || p.rdma_device.empty()) continue;
    if (out.size() == ::mooncake::transport_internal::kRdmaPathsMax) break;
    if (p.rdma_port < 1 || p.rdma_port > 255) {
      return absl::InvalidArgumentError(absl::StrCat("the ", TrafficClassName(plan.cls),
                                                     " plan of ", plan.source.Name(), " names ",
                                                     p.rdma_device, " port ", p.rdma_port));
    }
    out.push_back(
        ::mooncake::transport_internal::RdmaPath{p.rdma_device, static_cast<uint8_t>(p.rdma_port),
                                                 gid_index, p.weight > 0 ? p.weight : 1.0});
  }
  if (out.empty()) {
    std::vector<std::string> nics;
    for (const RoutePath& p : plan.paths) nics.push_back(p.nic);
    return absl::FailedPreconditionError(
        absl::StrCat("the ", TrafficClassName(plan.cls), " plan of ", plan.source.Name(),
                     " has no RDMA path (NICs in it: ",
                     nics.empty() ? std::string("none") : absl::StrJoin(nics, ", "), ")"));
  }
  return out;
}

}  // namespace mooncake::transport

#endif  // MOONCAKE_TRANSPORT_ROUTE_BINDING_H_
