// Socket helpers for the node's HTTP server: a listening TCP socket with a
// clear "port in use" error, the bound address.
//
// Thread-safety: free functions are thread-safe.
#ifndef MOONCAKE_STORE_NODE_INTERNAL_SOCKET_H_
#define MOONCAKE_STORE_NODE_INTERNAL_SOCKET_H_

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/host_port.h"

namespace mooncake::node_internal {

// A non-blocking listening socket on host:port (port 0: any free port).
// Errors: INVALID_ARGUMENT (host does not resolve or is not this host's),
// ALREADY_EXISTS (port in use, saying so), PERMISSION_DENIED, and
// ErrnoToStatus's code for any other failure.
inline absl::StatusOr<UniqueFd> ListenTcp(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_text = absl::StrCat(port);
  if (const int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve listen host \"", host, "\": ", ::gai_strerror(rc)));
  }
  UniqueFd fd(::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  const std::string where = JoinHostPort(host, port);
  if (!fd.valid()) {
    const int err = errno;
    ::freeaddrinfo(res);
    return ErrnoToStatus(err, "socket");
  }
  int one = 1;
  (void)::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const int rc = ::bind(fd.get(), res->ai_addr, res->ai_addrlen);
  const int err = errno;
  ::freeaddrinfo(res);
  if (rc != 0) {
    if (err == EADDRINUSE) {
      return absl::AlreadyExistsError(absl::StrCat(
          where, " is already in use by another process: pick another port (0 = any free one)"));
    }
    if (err == EACCES) {
      return absl::PermissionDeniedError(
          absl::StrCat("bind ", where, ": permission denied (ports below 1024 need privileges)"));
    }
    if (err == EADDRNOTAVAIL) {
      return absl::InvalidArgumentError(absl::StrCat("bind ", where, ": ", ::strerrordesc_np(err),
                                                     " (not an address of this host)"));
    }
    return ErrnoToStatus(err, absl::StrCat("bind ", where));
  }
  if (::listen(fd.get(), 64) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("listen ", where));
  }
  return fd;
}

// The port a socket is bound to.
inline absl::StatusOr<uint16_t> BoundPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return ErrnoToStatus(errno, "getsockname");
  }
  return ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                       : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

}  // namespace mooncake::node_internal

#endif  // MOONCAKE_STORE_NODE_INTERNAL_SOCKET_H_
