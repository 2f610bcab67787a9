// ConnectTcpFrom: a TCP connect whose local end is bound to one address
// first, so the connection leaves through the interface that owns it (one
// path of a multi-path peer, internal/tcp_paths.h). The rest is
// mooncake::ConnectTcp's contract (base/tcp_connect.h): literals only, a
// deadline on the handshake, a blocking socket on success, the same codes
// (UNAVAILABLE refused/unreachable, DEADLINE_EXCEEDED no answer), plus
// INVALID_ARGUMENT for a local address that is not a literal of the peer's
// family and the bind(2) error (EADDRNOTAVAIL: no interface has it).
//
// Why here and not a ConnectOptions field in base/tcp_connect.h: that is
// where it belongs; it stays here until base's owner takes it (one caller).
//
// Thread-safety: a pure function of its arguments and the system.
#ifndef MOONCAKE_TRANSPORT_INTERNAL_TCP_BIND_H_
#define MOONCAKE_TRANSPORT_INTERNAL_TCP_BIND_H_

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/tcp_connect.h"

namespace mooncake::transport_internal {

inline absl::StatusOr<UniqueFd> ConnectTcpFrom(const std::string& local_host,
                                               const std::string& host, uint16_t port,
                                               absl::Time deadline) {
  namespace ti = tcp_connect_internal;
  const std::string what =
      absl::StrCat("connect from ", local_host, " to ", HostPort{host, port}.ToString());
  const std::optional<ti::SocketAddress> peer = ti::NumericAddress(HostPort{host, port});
  std::optional<ti::SocketAddress> local = ti::NumericAddress(HostPort{local_host, 0});
  if (!peer || !local || local->storage.ss_family != peer->storage.ss_family) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": both ends must be IP literals of one family"));
  }
  UniqueFd fd(::socket(peer->storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoToStatus(errno, absl::StrCat(what, ": socket"));
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&local->storage), local->len) != 0) {
    return ErrnoToStatus(errno, absl::StrCat(what, ": bind"));
  }
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&peer->storage), peer->len) != 0) {
    if (errno != EINPROGRESS && errno != EINTR) return ErrnoToStatus(errno, what);
    for (;;) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        return absl::DeadlineExceededError(absl::StrCat(what, ": no answer before the deadline"));
      }
      const timespec ts = absl::ToTimespec(left);
      pollfd p{fd.get(), POLLOUT, 0};
      const int n = ::ppoll(&p, 1, &ts, nullptr);
      if (n > 0) break;
      if (n < 0 && errno != EINTR) return ErrnoToStatus(errno, what);
    }
    int err = 0;
    socklen_t err_len = sizeof(err);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &err_len) != 0) err = errno;
    if (err != 0) return ErrnoToStatus(err, what);
  }
  const int one = 1;
  (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // best effort
  const int flags = ::fcntl(fd.get(), F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) < 0) {
    return ErrnoToStatus(errno, absl::StrCat(what, ": fcntl"));
  }
  return fd;
}

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_TCP_BIND_H_
