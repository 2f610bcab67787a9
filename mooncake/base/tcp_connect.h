// ConnectTcp: the one TCP connect with a deadline. Every client socket of the
// store (RPC channels, the TCP transport's lanes, the RDMA control channel,
// the metadata HTTP client) is opened here, so each failure has one code and
// one message whichever package saw it.
//
//   ASSIGN_OR_RETURN(UniqueFd fd,
//                    ConnectTcp({"10.0.0.2", 50051}, absl::Now() + absl::Seconds(2)));
//
// Addresses: an IPv4 or IPv6 literal ("10.0.0.2", "::1", no brackets) is used
// as is; any other host is looked up with getaddrinfo ("localhost",
// "meta.svc"), unless options.resolve_names is false. Each address the lookup
// gives is tried in its order until one connects, one does not answer before
// the deadline, or none is left.
//
// Result: a connected socket, close-on-exec, TCP_NODELAY set (best effort),
// non-blocking unless options.blocking.
//
// Errors:
//   INVALID_ARGUMENT   an empty host, port 0, or (resolve_names false) a host
//                      that is not an IPv4 or IPv6 literal.
//   UNAVAILABLE        refused, unreachable, reset (ErrnoToStatus), or a name
//                      that does not resolve (it may later: DNS catches up).
//   DEADLINE_EXCEEDED  "connect to <host:port>: no answer within <N> ms", N
//                      the time the call had; also a deadline already past
//                      when the call begins (no connect is attempted).
//   others             ErrnoToStatus of a failing socket call (EMFILE: ...).
// Messages begin "connect to [<options.peer> ]<host:port>".
//
// Bounds: no wait goes past the deadline (each is a ppoll bounded by it, and
// EINTR resumes it with the time left). A name lookup is the exception: the
// system resolver has its own timeouts (resolv.conf), so callers that must
// never overrun pass literals or set resolve_names to false.
//
// Thread-safety: a pure function of its arguments and the system; calls may
// run concurrently.
#ifndef MOONCAKE_BASE_TCP_CONNECT_H_
#define MOONCAKE_BASE_TCP_CONNECT_H_

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

#include <cstdint>
#include <cstring>
#include <optional>
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
#include "mooncake/base/assert.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/host_port.h"

namespace mooncake {

struct ConnectOptions {
  // false: the host must be an IPv4 or IPv6 literal (endpoints that carry
  // literals, where a name is the caller's mistake); no resolver is asked.
  bool resolve_names = true;
  // true: the connected socket is switched to blocking mode, for callers that
  // bound their I/O with SO_RCVTIMEO / SO_SNDTIMEO rather than poll.
  bool blocking = false;
  // Names the peer in messages: "connect to RDMA control channel 10.0.0.2:7000".
  std::string_view peer = {};
};

namespace tcp_connect_internal {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t len = 0;
};

// An IPv4 or IPv6 literal as a socket address; nullopt for anything else.
inline std::optional<SocketAddress> NumericAddress(const HostPort& hp) {
  SocketAddress a;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.storage);
  if (::inet_pton(AF_INET, hp.host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(hp.port);
    a.len = sizeof(sockaddr_in);
    return a;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
  if (::inet_pton(AF_INET6, hp.host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(hp.port);
    a.len = sizeof(sockaddr_in6);
    return a;
  }
  return std::nullopt;
}

// Every address getaddrinfo gives for host:port, in its order.
inline absl::StatusOr<std::vector<SocketAddress>> Resolve(const HostPort& hp,
                                                          std::string_view what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(hp.port);
  if (const int rc = ::getaddrinfo(hp.host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    if (rc == EAI_SYSTEM) {
      const int err = errno;
      return ErrnoToStatus(err, absl::StrCat(AbslView(what), ": resolve"));
    }
    if (rc == EAI_MEMORY) {
      return absl::ResourceExhaustedError(absl::StrCat(AbslView(what), ": resolve: out of memory"));
    }
    return absl::UnavailableError(
        absl::StrCat(AbslView(what), ": cannot resolve \"", hp.host, "\": ", ::gai_strerror(rc)));
  }
  std::vector<SocketAddress> out;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_addrlen > sizeof(sockaddr_storage)) continue;
    SocketAddress s;
    std::memcpy(&s.storage, a->ai_addr, a->ai_addrlen);
    s.len = a->ai_addrlen;
    out.push_back(s);
  }
  ::freeaddrinfo(found);
  if (out.empty()) {
    return absl::UnavailableError(
        absl::StrCat(AbslView(what), ": no address for \"", hp.host, "\""));
  }
  return out;
}

// One non-blocking connect to `addr`, waited for until `deadline`.
// `budget_ms` is what the whole call had, for the DEADLINE_EXCEEDED message.
inline absl::StatusOr<UniqueFd> ConnectOne(const SocketAddress& addr, absl::Time deadline,
                                           int64_t budget_ms, std::string_view what) {
  UniqueFd fd(::socket(addr.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    const int err = errno;
    return ErrnoToStatus(err, absl::StrCat(AbslView(what), ": socket"));
  }
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len) == 0) {
    return fd;
  }
  // EINTR: the handshake goes on asynchronously, as for EINPROGRESS.
  if (errno != EINPROGRESS && errno != EINTR) return ErrnoToStatus(errno, what);
  for (;;) {
    timespec left_ts{};
    const timespec* timeout = nullptr;  // no deadline: wait as long as it takes
    if (deadline != absl::InfiniteFuture()) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        return absl::DeadlineExceededError(
            absl::StrCat(AbslView(what), ": no answer within ", budget_ms, " ms"));
      }
      left_ts = absl::ToTimespec(left);
      timeout = &left_ts;
    }
    pollfd p{fd.get(), POLLOUT, 0};
    const int n = ::ppoll(&p, 1, timeout, nullptr);
    if (n > 0) break;
    if (n < 0 && errno != EINTR) return ErrnoToStatus(errno, what);
  }
  int err = 0;
  socklen_t err_len = sizeof(err);
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &err_len) != 0) {
    return ErrnoToStatus(errno, what);
  }
  if (err != 0) return ErrnoToStatus(err, what);
  return fd;
}

}  // namespace tcp_connect_internal

// A TCP connection to `hp` made before `deadline`; see the top of this file.
inline absl::StatusOr<UniqueFd> ConnectTcp(const HostPort& hp, absl::Time deadline,
                                           ConnectOptions options = {}) {
  namespace ti = tcp_connect_internal;
  const absl::Time start = absl::Now();
  const std::string what =
      options.peer.empty()
          ? absl::StrCat("connect to ", hp.ToString())
          : absl::StrCat("connect to ", AbslView(options.peer), " ", hp.ToString());
  if (hp.host.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no host"));
  if (hp.port == 0) return absl::InvalidArgumentError(absl::StrCat(what, ": port 0"));

  std::vector<ti::SocketAddress> addrs;
  if (std::optional<ti::SocketAddress> literal = ti::NumericAddress(hp); literal.has_value()) {
    addrs.push_back(*literal);
  } else if (!options.resolve_names) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": host \"", hp.host, "\" is not an IPv4 or IPv6 address"));
  }
  // Rounded up: a caller's "2 s from now" reads 2000 ms, not 1999.
  const int64_t budget_ms =
      deadline == absl::InfiniteFuture()
          ? INT64_MAX
          : absl::ToInt64Milliseconds(absl::Ceil(deadline - start, absl::Milliseconds(1)));
  if (deadline <= start) {
    return absl::DeadlineExceededError(absl::StrCat(what, ": no answer within 0 ms"));
  }
  if (addrs.empty()) {
    absl::StatusOr<std::vector<ti::SocketAddress>> found = ti::Resolve(hp, what);
    if (!found.ok()) return found.status();
    addrs = std::move(*found);
  }
  MC_ASSERT(!addrs.empty(), "an address to connect to");

  absl::Status last;
  for (const ti::SocketAddress& addr : addrs) {
    absl::StatusOr<UniqueFd> fd = ti::ConnectOne(addr, deadline, budget_ms, what);
    if (fd.ok()) {
      const int one = 1;
      // Best effort: a socket without TCP_NODELAY is slower, not wrong.
      (void)::setsockopt(fd->get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      if (options.blocking) {
        const int flags = ::fcntl(fd->get(), F_GETFL, 0);
        if (flags < 0 || ::fcntl(fd->get(), F_SETFL, flags & ~O_NONBLOCK) < 0) {
          const int err = errno;
          return ErrnoToStatus(err, absl::StrCat(what, ": fcntl(~O_NONBLOCK)"));
        }
      }
      MC_DASSERT(fd->valid(), "a connected socket");
      return fd;
    }
    last = fd.status();
    // The deadline is shared: an address that did not answer leaves no time.
    if (absl::IsDeadlineExceeded(last)) break;
  }
  MC_ASSERT(!last.ok(), "every address failed with a reason");
  return last;
}

}  // namespace mooncake

#endif  // MOONCAKE_BASE_TCP_CONNECT_H_
