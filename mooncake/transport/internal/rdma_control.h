// The RDMA transport's TCP control channel: endpoint parsing, listen,
// connect and framed message I/O, every call bounded by a deadline. In its
// own namespace: the TCP and SHM models have helpers of the same names.
//
// Sockets are non-blocking; each wait is a poll() bounded by the deadline, so
// a stalled or dead peer turns into DeadlineExceeded / Unavailable.
#ifndef MOONCAKE_TRANSPORT_INTERNAL_RDMA_CONTROL_H_
#define MOONCAKE_TRANSPORT_INTERNAL_RDMA_CONTROL_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/base/tcp_connect.h"
#include "mooncake/base/tcp_listen.h"
#include "mooncake/transport/internal/rdma_wire.h"
#include "mooncake/transport/internal/unix_socket.h"

namespace mooncake::transport_internal::rdma_ctl {

// "scheme://a.b.c.d:port" -> {host, port}. IPv4 literals only.
inline absl::StatusOr<HostPort> ParseEndpoint(std::string_view endpoint, std::string_view scheme) {
  const std::string prefix = absl::StrCat(AbslView(scheme), "://");
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("bad endpoint '", AbslView(endpoint),
                                                   "': ", AbslView(why), "; expected ", prefix,
                                                   "<ipv4>:<port>"));
  };
  if (endpoint.substr(0, prefix.size()) != prefix) return bad("wrong scheme");
  std::string_view rest = endpoint.substr(prefix.size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return bad("no host:port");
  HostPort hp;
  hp.host = std::string(rest.substr(0, colon));
  std::string_view port = rest.substr(colon + 1);
  unsigned value = 0;
  auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || p != port.data() + port.size() || value == 0 || value > 65535) {
    return bad("port is not in 1..65535");
  }
  in_addr addr{};
  if (inet_pton(AF_INET, hp.host.c_str(), &addr) != 1) return bad("host is not an IPv4 address");
  hp.port = static_cast<uint16_t>(value);
  return hp;
}

inline int PollMillis(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
}

// Waits until `fd` has `events` or the deadline passes.
inline absl::Status WaitFd(int fd, short events, absl::Time deadline, std::string_view what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, PollMillis(deadline));
    if (n > 0) return absl::OkStatus();
    if (n < 0 && errno != EINTR) return ErrnoToStatus(errno, what);
    if (n == 0 && absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(AbslView(what), ": the peer did not answer before the deadline"));
    }
  }
}

// Listens on host:port (port 0: any), non-blocking (base/tcp_listen.h);
// returns the socket and the bound port. IPv4 only, as the endpoint that
// names it (ParseEndpoint).
inline absl::StatusOr<std::pair<UniqueFd, uint16_t>> ListenTcp(const std::string& host,
                                                               uint16_t port) {
  if (in_addr probe{}; inet_pton(AF_INET, host.c_str(), &probe) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen host '", host, "' is not an IPv4 address"));
  }
  ASSIGN_OR_RETURN(TcpListener listener, mooncake::ListenTcp({host, port}, {.backlog = 64}));
  return std::make_pair(std::move(listener.fd), listener.port);
}

// The control channel to `hp` (an IPv4 literal: ParseEndpoint), a
// non-blocking socket with TCP_NODELAY (base/tcp_connect.h).
inline absl::StatusOr<UniqueFd> ConnectTcp(const HostPort& hp, absl::Time deadline) {
  return mooncake::ConnectTcp(hp, deadline,
                              {.resolve_names = false, .peer = "RDMA control channel"});
}

inline absl::Status WriteFull(int fd, std::span<const uint8_t> bytes, absl::Time deadline) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      RETURN_IF_ERROR(WaitFd(fd, POLLOUT, deadline, "RDMA control send"));
    } else if (n < 0 && errno != EINTR) {
      return ErrnoToStatus(errno, "RDMA control send");
    }
  }
  return absl::OkStatus();
}

inline absl::Status ReadFull(int fd, std::span<uint8_t> bytes, absl::Time deadline) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::recv(fd, bytes.data() + done, bytes.size() - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0) {
      return absl::UnavailableError("RDMA control channel closed by the peer");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      RETURN_IF_ERROR(WaitFd(fd, POLLIN, deadline, "RDMA control receive"));
    } else if (errno != EINTR) {
      return ErrnoToStatus(errno, "RDMA control receive");
    }
  }
  return absl::OkStatus();
}

inline absl::Status SendRdmaMessage(int fd, const RdmaMessage& m, absl::Time deadline) {
  const std::vector<uint8_t> frame = EncodeRdmaMessage(m);
  return WriteFull(fd, frame, deadline);
}

inline absl::StatusOr<RdmaMessage> RecvRdmaMessage(int fd, absl::Time deadline) {
  uint8_t header_bytes[kRdmaHeaderBytes];
  RETURN_IF_ERROR(ReadFull(fd, header_bytes, deadline));
  ASSIGN_OR_RETURN(const RdmaHeader header, DecodeRdmaHeader(header_bytes));
  std::vector<uint8_t> body(header.body_bytes);
  RETURN_IF_ERROR(ReadFull(fd, body, deadline));
  return DecodeRdmaBody(header.type, body);
}

}  // namespace mooncake::transport_internal::rdma_ctl

#endif  // MOONCAKE_TRANSPORT_INTERNAL_RDMA_CONTROL_H_
