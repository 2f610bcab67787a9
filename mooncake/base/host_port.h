// Host and port as text: the one place that knows an IPv6 literal goes in
// brackets ("[::1]:50051"), so an address printed by one part of the store
// parses back in another and makes a URL after "http://".
//
//   JoinHostPort("10.0.0.2", 50051)  -> "10.0.0.2:50051"
//   JoinHostPort("::1", 9090)        -> "[::1]:9090"
//   SplitHostPort("[::1]:9090")      -> {host "::1", port "9090"}
//
// SplitHostPort splits at the last colon and leaves the port's text for the
// caller to check (its own range and error message); an unbracketed IPv6
// literal ("::1:9090") splits the same way.
//
// Thread-safety: pure functions.
#ifndef MOONCAKE_BASE_HOST_PORT_H_
#define MOONCAKE_BASE_HOST_PORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mooncake {

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

struct HostPortText {
  std::string_view host;  // without brackets
  std::string_view port;  // unchecked, possibly empty
};

// Splits at the last colon; nullopt when there is none or the host part is
// empty. A host of the form "[...]" loses its brackets.
inline std::optional<HostPortText> SplitHostPort(std::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string_view host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) return std::nullopt;
  return HostPortText{host, address.substr(colon + 1)};
}

}  // namespace mooncake

#endif  // MOONCAKE_BASE_HOST_PORT_H_
