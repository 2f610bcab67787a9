// Socket helpers for the RPC server and client: connect by "host:port" text,
// address parsing, an eventfd (fd owner, errno mapping, the connect and the
// listen themselves: base).
//
// Thread-safety: free functions are thread-safe; EventFd is
// thread-compatible, except EventFd::Notify, which any thread may call.
#ifndef MOONCAKE_STORE_RPC_INTERNAL_SOCKET_H_
#define MOONCAKE_STORE_RPC_INTERNAL_SOCKET_H_

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/tcp_connect.h"

namespace mooncake::rpc_internal {

inline absl::Status SetNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return ErrnoToStatus(errno, "fcntl(O_NONBLOCK)");
  }
  return absl::OkStatus();
}

inline void SetNoDelay(int fd) {
  int one = 1;
  // Best effort: a socket without TCP_NODELAY is slower, not wrong.
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// "host:port" or "[v6]:port". Errors: INVALID_ARGUMENT.
inline absl::StatusOr<HostPort> ParseHostPort(std::string_view address) {
  const std::optional<HostPortText> split = SplitHostPort(address);
  if (!split || split->port.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", AbslView(address), "\" is not host:port"));
  }
  const std::string_view host = split->host;
  uint32_t port = 0;
  if (!absl::SimpleAtoi(AbslView(split->port), &port) || port == 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", AbslView(address), "\" has no valid port (1..65535)"));
  }
  return HostPort{std::string(host), static_cast<uint16_t>(port)};
}

inline std::string SockaddrToString(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof(buf));
    return JoinHostPort(buf, ntohs(v4->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof(buf));
    return JoinHostPort(buf, ntohs(v6->sin6_port));
  }
  return "unknown";
}

// "host:port" connected within `timeout_ns` (base/tcp_connect.h: a
// non-blocking socket with TCP_NODELAY; INVALID_ARGUMENT, UNAVAILABLE,
// DEADLINE_EXCEEDED).
inline absl::StatusOr<UniqueFd> ConnectTcp(std::string_view address, int64_t timeout_ns) {
  MC_ASSERT(timeout_ns > 0, "connect needs a positive timeout");
  absl::StatusOr<HostPort> hp = ParseHostPort(address);
  if (!hp.ok()) return hp.status();
  return mooncake::ConnectTcp(*hp, absl::Now() + absl::Nanoseconds(timeout_ns));
}

// A non-blocking eventfd used to wake a poll/epoll loop.
class EventFd {
 public:
  EventFd() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    MC_ASSERT(fd_.valid(), "eventfd failed");
  }
  int fd() const { return fd_.get(); }
  void Notify() {
    const uint64_t one = 1;
    // EAGAIN only when the counter is saturated, which still wakes the loop.
    (void)!::write(fd_.get(), &one, sizeof(one));
  }
  void Drain() {
    uint64_t v = 0;
    (void)!::read(fd_.get(), &v, sizeof(v));
  }

 private:
  UniqueFd fd_;
};

}  // namespace mooncake::rpc_internal

#endif  // MOONCAKE_STORE_RPC_INTERNAL_SOCKET_H_
