// How the Router names things across processes.
//
// Router segment id: the ids the segment got from each sub-transport, packed
// with a check so that an arbitrary number is rejected instead of naming some
// other segment:
//   bits  0..47  four 12-bit fields; field i is the id in the owner's
//                transport i (0: not registered there)
//   bits 48..63  check = 16-bit mix of bits 0..47
// So a Router holds at most kRouterTransportsMax transports and each
// sub-transport id must be below 4096 (the registration is skipped there
// otherwise).
//
// Router endpoint: "router://<host>/<pid>|<endpoint 0>|<endpoint 1>|..." in
// the owner's transport order. Host and pid let the requester skip
// transports that only work inside one process ("local") or one host ("shm",
// "cuda") when the owner is elsewhere.
#ifndef MOONCAKE_TRANSPORT_INTERNAL_ROUTER_IDS_H_
#define MOONCAKE_TRANSPORT_INTERNAL_ROUTER_IDS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"

namespace mooncake::transport_internal {

inline constexpr size_t kRouterTransportsMax = 4;
inline constexpr uint64_t kRouterSubIdMax = (1u << 12) - 1;

inline uint16_t RouterIdCheck(uint64_t payload) {
  uint64_t x = payload * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return static_cast<uint16_t>(x | 1);  // never 0, so a packed id is never 0
}

// REQUIRES: each id <= kRouterSubIdMax, at most kRouterTransportsMax.
inline uint64_t PackRouterId(const std::array<uint64_t, kRouterTransportsMax>& sub) {
  uint64_t payload = 0;
  for (size_t i = 0; i < kRouterTransportsMax; ++i)
    payload |= (sub[i] & kRouterSubIdMax) << (12 * i);
  return payload | (uint64_t{RouterIdCheck(payload)} << 48);
}

inline std::optional<std::array<uint64_t, kRouterTransportsMax>> UnpackRouterId(uint64_t id) {
  const uint64_t payload = id & ((uint64_t{1} << 48) - 1);
  if (payload == 0 || (id >> 48) != RouterIdCheck(payload)) return std::nullopt;
  std::array<uint64_t, kRouterTransportsMax> sub{};
  for (size_t i = 0; i < kRouterTransportsMax; ++i)
    sub[i] = (payload >> (12 * i)) & kRouterSubIdMax;
  return sub;
}

struct RouterEndpoint {
  std::string host;
  int64_t pid = 0;
  std::vector<std::string> endpoints;  // the owner's transports, in its order
};

inline std::string FormatRouterEndpoint(const RouterEndpoint& e) {
  std::string out = absl::StrCat("router://", e.host, "/", e.pid);
  for (const std::string& s : e.endpoints) absl::StrAppend(&out, "|", s);
  return out;
}

inline absl::StatusOr<RouterEndpoint> ParseRouterEndpoint(std::string_view s) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad router endpoint '", AbslView(s), "'; expected router://<host>/<pid>|<endpoint>|..."));
  };
  constexpr std::string_view kScheme = "router://";
  if (s.substr(0, kScheme.size()) != kScheme) return bad();
  std::vector<std::string_view> parts;
  std::string_view rest = s.substr(kScheme.size());
  for (size_t bar; (bar = rest.find('|')) != std::string_view::npos; rest.remove_prefix(bar + 1)) {
    parts.push_back(rest.substr(0, bar));
  }
  parts.push_back(rest);
  if (parts.size() < 2 || parts.size() > kRouterTransportsMax + 1) return bad();
  const size_t slash = parts[0].rfind('/');
  if (slash == std::string_view::npos || slash == 0) return bad();
  RouterEndpoint e;
  e.host = std::string(parts[0].substr(0, slash));
  const std::string_view pid = parts[0].substr(slash + 1);
  if (pid.empty() || pid.size() > 18) return bad();
  for (char c : pid) {
    if (c < '0' || c > '9') return bad();
    e.pid = e.pid * 10 + (c - '0');
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i].empty()) return bad();
    e.endpoints.emplace_back(parts[i]);
  }
  return e;
}

// "tcp://1.2.3.4:5" -> "tcp".
inline std::string_view EndpointScheme(std::string_view endpoint) {
  const size_t p = endpoint.find("://");
  return p == std::string_view::npos ? std::string_view() : endpoint.substr(0, p);
}

// Preference when several transports reach a peer: lower is better.
inline int TransportRank(std::string_view name) {
  if (name == "local") return 0;
  if (name == "cuda") return 1;
  if (name == "shm") return 2;
  if (name == "rdma") return 3;
  if (name == "tcp") return 4;
  return 5;
}

// Whether a transport named `name` can reach an owner at (host, pid).
inline bool TransportCanReach(std::string_view name, bool same_host, bool same_process) {
  if (name == "local") return same_process;
  if (name == "shm" || name == "cuda") return same_host;
  return true;
}

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_ROUTER_IDS_H_
