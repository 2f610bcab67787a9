// The CUDA transport's same-host control channel: a Unix stream socket in
// the abstract namespace, one request/reply per connection.
//
//   request  u32 magic "MCCU", u32 version 1, u64 segment_id
//   reply    u32 magic, u32 absl::StatusCode, u64 length, u64 offset,
//            i32 device, u8 kind, 64 B cudaIpcMemHandle_t, u16 text bytes,
//            text (<= 256 B)
// Both ends are on one host and built from one source, so integers travel in
// host byte order. No CUDA types here: the handle is 64 opaque bytes.
#ifndef MOONCAKE_TRANSPORT_INTERNAL_CUDA_IPC_H_
#define MOONCAKE_TRANSPORT_INTERNAL_CUDA_IPC_H_

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/transport/internal/unix_socket.h"

namespace mooncake::transport_internal::cuda_ipc {

inline constexpr uint32_t kMagic = 0x5543434D;  // "MCCU"
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kHandleBytes = 64;
inline constexpr size_t kTextBytesMax = 256;

struct Request {
  uint32_t magic = kMagic;
  uint32_t version = kVersion;
  uint64_t segment_id = 0;
};

struct Reply {
  uint32_t magic = kMagic;
  uint32_t code = 0;  // absl::StatusCode
  uint64_t length = 0;
  uint64_t offset = 0;  // of the segment within the exported allocation
  int32_t device = -1;
  uint8_t kind = 0;
  std::array<char, kHandleBytes> handle{};
  uint16_t text_bytes = 0;
  std::array<char, kTextBytesMax> text{};
};

inline absl::Status ReplyStatus(const Reply& r) {
  if (r.magic != kMagic || r.code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated) ||
      r.text_bytes > kTextBytesMax) {
    return absl::DataLossError(
        "CUDA IPC reply is malformed: peer is not a mooncake CUDA transport");
  }
  if (r.code == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(r.code),
                      absl::string_view(r.text.data(), r.text_bytes));
}

inline void SetReplyStatus(Reply* r, const absl::Status& s) {
  r->code = static_cast<uint32_t>(s.code());
  r->text_bytes = static_cast<uint16_t>(std::min(s.message().size(), kTextBytesMax));
  std::memcpy(r->text.data(), s.message().data(), r->text_bytes);
}

// `name` is an abstract socket name (no leading '@').
inline std::pair<sockaddr_un, socklen_t> AbstractAddress(std::string_view name) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof(addr.sun_path) - 1);
  std::memcpy(addr.sun_path + 1, name.data(), n);
  return {addr, static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n)};
}

inline absl::StatusOr<UniqueFd> Listen(std::string_view name) {
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s.valid()) return ErrnoToStatus(errno, "socket");
  auto [addr, len] = AbstractAddress(name);
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("bind @", AbslView(name)));
  }
  if (::listen(s.get(), 64) != 0) return ErrnoToStatus(errno, "listen");
  return s;
}

inline absl::Status WaitFor(int fd, short events, absl::Time deadline, std::string_view what) {
  for (;;) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms < 0) {
      return absl::DeadlineExceededError(absl::StrCat(AbslView(what), ": peer did not answer"));
    }
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(ms + 1, 1 << 30)));
    if (n > 0) return absl::OkStatus();
    if (n < 0 && errno != EINTR) return ErrnoToStatus(errno, what);
  }
}

inline absl::Status SendBytes(int fd, const void* p, size_t n, absl::Time deadline) {
  const char* b = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      b += w;
      n -= static_cast<size_t>(w);
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      RETURN_IF_ERROR(WaitFor(fd, POLLOUT, deadline, "CUDA IPC send"));
    } else if (w < 0 && errno != EINTR) {
      return ErrnoToStatus(errno, "CUDA IPC send");
    }
  }
  return absl::OkStatus();
}

inline absl::Status RecvBytes(int fd, void* p, size_t n, absl::Time deadline) {
  char* b = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::recv(fd, b, n, MSG_DONTWAIT);
    if (r > 0) {
      b += r;
      n -= static_cast<size_t>(r);
    } else if (r == 0) {
      return absl::UnavailableError("CUDA IPC: the owner closed the connection");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      RETURN_IF_ERROR(WaitFor(fd, POLLIN, deadline, "CUDA IPC receive"));
    } else if (errno != EINTR) {
      return ErrnoToStatus(errno, "CUDA IPC receive");
    }
  }
  return absl::OkStatus();
}

// Asks the owner listening on `name` for segment `id`.
inline absl::StatusOr<Reply> Ask(std::string_view name, uint64_t id, absl::Time deadline) {
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return ErrnoToStatus(errno, "socket");
  auto [addr, len] = AbstractAddress(name);
  if (::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("connect to CUDA owner @", AbslView(name)));
  }
  Request req;
  req.segment_id = id;
  RETURN_IF_ERROR(SendBytes(s.get(), &req, sizeof(req), deadline));
  Reply reply;
  RETURN_IF_ERROR(RecvBytes(s.get(), &reply, sizeof(reply), deadline));
  return reply;
}

}  // namespace mooncake::transport_internal::cuda_ipc

#endif  // MOONCAKE_TRANSPORT_INTERNAL_CUDA_IPC_H_
