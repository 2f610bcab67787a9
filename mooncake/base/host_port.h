// Host and port as text: the one place that knows an IPv6 literal goes in
// brackets ("[::1]:50051"), so an address printed by one part of the store
// parses back in another and makes a URL after "http://".
//
//   JoinHostPort("10.0.0.2", 50051)  -> "10.0.0.2:50051"
//   JoinHostPort("::1", 9090)        -> "[::1]:9090"
//   SplitHostPort("[::1]:9090")      -> {host "::1", port "9090"}
//
// SplitHostPort leaves the port's text for the caller to check (its own
// range and error message). A bracketed host ends at its "]", which must be
// followed by ":"; an unbracketed one ends at the last colon, so "::1:9090"
// splits as host "::1" (callers that want brackets for IPv6 check for them).
//
// HostPort is the parsed form every package passes around (listen and
// connect addresses, endpoints); each parser keeps its own rules and error
// messages (flags, RPC addresses, RDMA endpoints) and returns this one type.
//
// Thread-safety: pure functions; HostPort is a plain value.
#ifndef MOONCAKE_BASE_HOST_PORT_H_
#define MOONCAKE_BASE_HOST_PORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mooncake {

struct HostPort {
  std::string host;   // without brackets: "10.0.0.2", "::1", "localhost"
  uint16_t port = 0;  // 0: any free port (listening addresses only)

  // "host:port", IPv6 in brackets (JoinHostPort).
  std::string ToString() const;
  friend bool operator==(const HostPort&, const HostPort&) = default;
};

// "host:port", or "[host]:port" when the host holds a colon (IPv6).
inline std::string JoinHostPort(std::string_view host, uint16_t port) {
  const bool v6 = host.find(':') != std::string_view::npos;
  std::string out;
  out.reserve(host.size() + 8);
  if (v6) out += '[';
  out += host;
  if (v6) out += ']';
  out += ':';
  out += std::to_string(port);
  return out;
}

inline std::string HostPort::ToString() const { return JoinHostPort(host, port); }

struct HostPortText {
  std::string_view host;  // without brackets
  std::string_view port;  // unchecked, possibly empty
};

// nullopt when there is no colon after the host, the host is empty, or a
// "[" has no "]:" to close it.
inline std::optional<HostPortText> SplitHostPort(std::string_view address) {
  std::string_view host;
  size_t colon;
  if (address.starts_with('[')) {
    const size_t close = address.find(']');
    if (close == std::string_view::npos || close + 1 >= address.size() ||
        address[close + 1] != ':') {
      return std::nullopt;
    }
    host = address.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = address.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    host = address.substr(0, colon);
  }
  if (host.empty()) return std::nullopt;
  return HostPortText{host, address.substr(colon + 1)};
}

}  // namespace mooncake

#endif  // MOONCAKE_BASE_HOST_PORT_H_
