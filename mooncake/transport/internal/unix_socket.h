// Small POSIX helpers for the SHM and TCP models: timeouts, full reads and
// writes with deadlines, fd passing with SCM_RIGHTS. The fd owner and the
// errno mapping are base/fd.h and base/errno_status.h.
#ifndef MOONCAKE_TRANSPORT_INTERNAL_UNIX_SOCKET_H_
#define MOONCAKE_TRANSPORT_INTERNAL_UNIX_SOCKET_H_

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"

namespace mooncake::transport_internal {

// Sets SO_RCVTIMEO and SO_SNDTIMEO (0 = none).
inline void SetSocketTimeouts(int fd, absl::Duration timeout) {
  timeval tv = absl::ToTimeval(timeout);
  if (timeout <= absl::ZeroDuration()) tv = timeval{0, 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

// Waits until `fd` is ready for `events` or `deadline`; false on timeout.
inline bool PollUntil(int fd, short events, absl::Time deadline) {
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p{fd, events, 0};
    const int ms = static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1000));
    const int n = ::poll(&p, 1, ms);
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // let the caller's I/O report the error
  }
}

// Reads exactly `len` bytes from a socket with timeouts set; Unavailable on EOF.
inline absl::Status RecvAll(int fd, void* buf, size_t len, std::string_view what) {
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    const ssize_t n = ::recv(fd, p, len, MSG_WAITALL);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
    } else if (n == 0) {
      return absl::UnavailableError(absl::StrCat(AbslView(what), ": peer closed the connection"));
    } else if (errno != EINTR) {
      return ErrnoToStatus(errno, what);
    }
  }
  return absl::OkStatus();
}

inline absl::Status SendAll(int fd, const void* buf, size_t len, std::string_view what) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    const ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      return ErrnoToStatus(errno, what);
    }
  }
  return absl::OkStatus();
}

// Bytes taken off a stream and not consumed yet, in stream order (at most N).
template <size_t N>
struct StreamBuffer {
  static constexpr size_t kBytes = N;
  std::array<char, N> data;
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
  const uint8_t* at() const { return reinterpret_cast<const uint8_t*>(data.data() + begin); }
  // Moves up to n bytes into p (null: drops them); returns how many.
  size_t Take(char* p, size_t n) {
    const size_t k = std::min(n, size());
    if (p != nullptr) std::memcpy(p, data.data() + begin, k);
    begin += k;
    if (begin == end) begin = end = 0;
    return k;
  }
};

// What a receiver took past what it asked for (RecvSomeAhead): the start of
// what follows, handed out first by the next receive.
struct ReadAhead : StreamBuffer<512> {
  // Receives of more bytes than this wait for all of them in one MSG_WAITALL
  // recv and read nothing ahead (a large payload gains nothing from it).
  static constexpr size_t kMaxPayload = 128 << 10;
};

// Receives p[*got, len) from a socket with timeouts set, advancing *got:
// true once full; false once `give_up` has passed (checked after every
// receive, each of which blocks one socket tick at most), with what arrived
// kept; an error on EOF, a socket error or `deadline`.
//
// With `ahead` (else null): starts from the bytes it holds and, for receives
// of up to ReadAhead::kMaxPayload bytes, takes up to ReadAhead::kBytes bytes
// past p[len) into it in the same system call when they have already arrived
// (a pipelining peer's next frame header): a stream of small frames costs one
// receive per frame instead of two. The stream must be read only through
// `ahead` from then on.
inline absl::StatusOr<bool> RecvSomeAhead(int fd, char* p, size_t len, size_t* got,
                                          ReadAhead* ahead, absl::Time deadline, absl::Time give_up,
                                          std::string_view what) {
  if (ahead != nullptr) *got += ahead->Take(p + *got, len - *got);
  while (*got < len) {
    const size_t left = len - *got;
    ssize_t n;
    if (ahead == nullptr || left > ReadAhead::kMaxPayload) {
      n = ::recv(fd, p + *got, left, MSG_WAITALL);
    } else {
      MC_DASSERT(ahead->size() == 0, "read ahead only once the buffer is drained");
      iovec iov[2] = {{p + *got, left}, {ahead->data.data(), ahead->data.size()}};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = 2;
      n = ::recvmsg(fd, &msg, 0);
      if (n > static_cast<ssize_t>(left)) {
        ahead->begin = 0;
        ahead->end = static_cast<size_t>(n) - left;
        n = static_cast<ssize_t>(left);
      }
    }
    if (n > 0) {
      *got += static_cast<size_t>(n);
      if (*got < len && give_up != absl::InfiniteFuture() && absl::Now() >= give_up) return false;
      continue;
    }
    if (n == 0) {
      return absl::UnavailableError(absl::StrCat(AbslView(what), ": peer closed the connection"));
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return ErrnoToStatus(errno, what);
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(AbslView(what), ": peer stalled past the I/O deadline"));
    }
    if (now >= give_up) return false;
  }
  return true;
}

// RecvSomeAhead without reading ahead.
inline absl::StatusOr<bool> RecvSomeBy(int fd, char* p, size_t len, size_t* got,
                                       absl::Time deadline, absl::Time give_up,
                                       std::string_view what) {
  return RecvSomeAhead(fd, p, len, got, nullptr, deadline, give_up, what);
}

// Reads exactly `len` bytes before `deadline` (socket timeouts set to a short
// tick make each recv return in time to check it).
inline absl::Status RecvAllBy(int fd, void* buf, size_t len, absl::Time deadline,
                              std::string_view what) {
  size_t got = 0;
  absl::StatusOr<bool> full =
      RecvSomeBy(fd, static_cast<char*>(buf), len, &got, deadline, absl::InfiniteFuture(), what);
  return full.ok() ? absl::OkStatus() : full.status();  // never false: no give-up time
}

// One sendmsg of the first IOV_MAX of `*iovcnt` iovecs at `*iov`: advances
// both past what it sent and trims the iovec it sent part of. False: the
// socket's send timeout passed with nothing sent (the caller decides whether
// to try again).
inline absl::StatusOr<bool> SendIovSome(int fd, iovec** iov, int* iovcnt, std::string_view what) {
  msghdr msg{};
  msg.msg_iov = *iov;
  msg.msg_iovlen = static_cast<size_t>(std::min(*iovcnt, IOV_MAX));
  ssize_t n;
  do {
    n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    return ErrnoToStatus(errno, what);
  }
  while (*iovcnt > 0 && static_cast<size_t>(n) >= (*iov)->iov_len) {
    n -= static_cast<ssize_t>((*iov)->iov_len);
    ++*iov;
    --*iovcnt;
  }
  if (*iovcnt > 0) {
    (*iov)->iov_base = static_cast<char*>((*iov)->iov_base) + n;
    (*iov)->iov_len -= static_cast<size_t>(n);
  }
  return true;
}

// Writes every byte of `iov` (modified in place; any count) before `deadline`.
inline absl::Status SendIovBy(int fd, iovec* iov, int iovcnt, absl::Time deadline,
                              std::string_view what) {
  while (iovcnt > 0) {
    absl::StatusOr<bool> sent = SendIovSome(fd, &iov, &iovcnt, what);
    if (!sent.ok()) return sent.status();
    if (!*sent && absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(AbslView(what), ": peer stopped reading past the I/O deadline"));
    }
  }
  return absl::OkStatus();
}

// A sockaddr_un for "path" or, with a leading '@', an abstract name.
inline absl::StatusOr<std::pair<sockaddr_un, socklen_t>> UnixAddress(std::string_view name) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (name.empty() || name.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unix socket name \"", AbslView(name), "\" is empty or too long"));
  }
  std::memcpy(addr.sun_path, name.data(), name.size());
  if (name[0] == '@') addr.sun_path[0] = '\0';
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() +
                                               (name[0] == '@' ? 0 : 1));
  return std::make_pair(addr, len);
}

// Sends `len` bytes plus one fd (SCM_RIGHTS; fd < 0 sends none).
inline absl::Status SendWithFd(int sock, const void* buf, size_t len, int fd) {
  iovec iov{const_cast<void*>(buf), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  const ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  if (n < 0) return ErrnoToStatus(errno, "sendmsg with fd");
  if (static_cast<size_t>(n) != len) return absl::UnavailableError("short sendmsg with fd");
  return absl::OkStatus();
}

// Receives exactly `len` bytes in one message plus at most one fd (-1 if none).
inline absl::StatusOr<UniqueFd> RecvWithFd(int sock, void* buf, size_t len) {
  iovec iov{buf, len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_WAITALL | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoToStatus(errno, "recvmsg with fd");
  UniqueFd fd;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int))) {
      int received;
      std::memcpy(&received, CMSG_DATA(c), sizeof(int));
      fd = UniqueFd(received);
    }
  }
  if (n == 0) return absl::UnavailableError("peer closed the connection before replying");
  if (static_cast<size_t>(n) != len || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    return absl::DataLossError("truncated reply from the segment owner");
  }
  return fd;
}

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_UNIX_SOCKET_H_
