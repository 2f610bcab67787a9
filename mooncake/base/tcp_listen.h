// ListenTcp: the one TCP listen. Every server socket of the store (the RPC
// server, the node's HTTP servers, the TCP transport, the RDMA control
// channel) is opened here, so a port in use reads the same whichever package
// saw it. The connect side is base/tcp_connect.h; both parse addresses there.
//
//   ASSIGN_OR_RETURN(TcpListener l, ListenTcp({"127.0.0.1", 0}));
//   // l.fd listens, l.port is the port it got (the one asked for, or a free
//   // one for port 0).
//
// Addresses: an IPv4 or IPv6 literal ("0.0.0.0", "::1", no brackets) is used
// as is. Any other host is looked up with getaddrinfo ("localhost") and the
// first address it gives is bound, when options.resolve_names is true.
//
// Result: a listening socket, close-on-exec, SO_REUSEADDR set (best effort)
// unless !options.reuse_addr, non-blocking unless !options.non_blocking.
//
// Errors (messages name "<host:port>"):
//   ALREADY_EXISTS     the port is in use ("... is already in use by another
//                      process: pick another port (0 = any free one)").
//   PERMISSION_DENIED  a port below 1024 without privileges.
//   INVALID_ARGUMENT   an empty host; a host that is not a literal
//                      (resolve_names false) or does not resolve; an address
//                      that is not this host's (EADDRNOTAVAIL).
//   others             ErrnoToStatus of a failing socket call (EMFILE: ...).
//
// Thread-safety: a pure function of its arguments and the system; calls may
// run concurrently.
#ifndef MOONCAKE_BASE_TCP_LISTEN_H_
#define MOONCAKE_BASE_TCP_LISTEN_H_

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/tcp_connect.h"

namespace mooncake {

struct ListenOptions {
  // The kernel's queue of connections not yet accepted (listen(2)).
  int backlog = 128;
  // SO_REUSEADDR: a restarted server rebinds a port its old connections
  // still hold in TIME_WAIT.
  bool reuse_addr = true;
  // false: a blocking socket, for an accept loop that blocks in accept(2).
  bool non_blocking = true;
  // false: the host must be an IPv4 or IPv6 literal; no resolver is asked.
  bool resolve_names = false;
};

struct TcpListener {
  UniqueFd fd;
  uint16_t port = 0;  // the bound port, never 0 once listening
};

namespace tcp_listen_internal {

// The port a socket is bound to (0 for a family other than IPv4 and IPv6).
inline absl::StatusOr<uint16_t> BoundPort(int fd, const std::string& where) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    const int err = errno;
    return ErrnoToStatus(err, absl::StrCat("listen on ", where, ": getsockname"));
  }
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return uint16_t{0};
}

// The bind failure as a status a user can act on.
inline absl::Status BindError(int err, const std::string& where) {
  switch (err) {
    case EADDRINUSE:
      return absl::AlreadyExistsError(absl::StrCat(
          where, " is already in use by another process: pick another port (0 = any free one)"));
    case EACCES:
      return absl::PermissionDeniedError(
          absl::StrCat("bind ", where, ": permission denied (ports below 1024 need privileges)"));
    case EADDRNOTAVAIL:
      return absl::InvalidArgumentError(absl::StrCat("bind ", where, ": ", ::strerrordesc_np(err),
                                                     " (not an address of this host)"));
    default:
      return ErrnoToStatus(err, absl::StrCat("bind ", where));
  }
}

}  // namespace tcp_listen_internal

// A socket listening on `hp` (port 0: any free port); see the top of this file.
inline absl::StatusOr<TcpListener> ListenTcp(const HostPort& hp, ListenOptions options = {}) {
  namespace ci = tcp_connect_internal;
  MC_ASSERT(options.backlog > 0, "listen needs a positive backlog");
  const std::string where = hp.ToString();
  if (hp.host.empty())
    return absl::InvalidArgumentError(absl::StrCat("listen on ", where, ": no host"));
  std::optional<ci::SocketAddress> addr = ci::NumericAddress(hp);
  if (!addr.has_value()) {
    if (!options.resolve_names) {
      return absl::InvalidArgumentError(absl::StrCat("listen on ", where, ": host \"", hp.host,
                                                     "\" is not an IPv4 or IPv6 address"));
    }
    absl::StatusOr<std::vector<ci::SocketAddress>> found =
        ci::Resolve(hp, absl::StrCat("listen on ", where));
    // A listen host that does not resolve is a configuration mistake.
    if (absl::IsUnavailable(found.status())) {
      return absl::InvalidArgumentError(found.status().message());
    }
    if (!found.ok()) return found.status();
    MC_ASSERT(!found->empty(), "Resolve gives an address or an error");
    addr = found->front();
  }
  const int flags = SOCK_STREAM | SOCK_CLOEXEC | (options.non_blocking ? SOCK_NONBLOCK : 0);
  UniqueFd fd(::socket(addr->storage.ss_family, flags, 0));
  if (!fd.valid()) {
    const int err = errno;
    return ErrnoToStatus(err, absl::StrCat("listen on ", where, ": socket"));
  }
  if (options.reuse_addr) {
    const int one = 1;
    // Best effort: without it a restart may wait out TIME_WAIT, nothing worse.
    (void)::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  }
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr->storage), addr->len) != 0) {
    return tcp_listen_internal::BindError(errno, where);
  }
  if (::listen(fd.get(), options.backlog) != 0) {
    const int err = errno;
    return ErrnoToStatus(err, absl::StrCat("listen on ", where));
  }
  absl::StatusOr<uint16_t> port = tcp_listen_internal::BoundPort(fd.get(), where);
  if (!port.ok()) return port.status();
  MC_ASSERT(*port != 0, "a listening IPv4 or IPv6 socket has a port");
  MC_DASSERT(hp.port == 0 || *port == hp.port, "bound the port asked for");
  return TcpListener{std::move(fd), *port};
}

}  // namespace mooncake

#endif  // MOONCAKE_BASE_TCP_LISTEN_H_
