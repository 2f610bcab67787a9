// The RPC connection handshake of base/auth.h in RPC frames (docs/security.md,
// docs/rpc_frame_format.md "Authentication").
//
// Two reserved method ids carry it, each a request and its response:
//   kAuthHelloMethodId  request: HELLO   response: CHALLENGE (the server nonce)
//   kAuthProofMethodId  request: PROOF   response: OK (the server's proof)
// A server with credentials serves nothing else on a connection until PROOF
// checked; a failed step gets a connection error (request id 0, code
// UNAUTHENTICATED, why) and the connection closes. A server without
// credentials has no handler for these ids and answers UNIMPLEMENTED, which
// the client turns into UNAUTHENTICATED: a client holding a token does not
// talk to a server that cannot prove it holds the same secret.
//
// Thread-safety: AuthenticateClient runs on the connecting thread, on a
// socket nobody else uses yet.
#ifndef MOONCAKE_STORE_RPC_INTERNAL_AUTH_HANDSHAKE_H_
#define MOONCAKE_STORE_RPC_INTERNAL_AUTH_HANDSHAKE_H_

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"
#include "mooncake/store/rpc/frame.h"
#include "mooncake/store/rpc/internal/socket.h"

namespace mooncake::rpc {

inline constexpr uint16_t kAuthHelloMethodId = 0xFFF0;
inline constexpr uint16_t kAuthProofMethodId = 0xFFF1;
inline constexpr std::string_view kAuthProtocol = "rpc";
// Handshake payloads are tens of bytes; a larger one is refused.
inline constexpr uint32_t kMaxAuthPayloadBytes = 512;

inline bool IsAuthMethod(uint16_t id) {
  return id == kAuthHelloMethodId || id == kAuthProofMethodId;
}

}  // namespace mooncake::rpc

namespace mooncake::rpc_internal {

// One request/response exchange on a non-blocking socket before the
// connection's I/O thread exists, bounded by `deadline_ns` (MonotonicClock).
inline absl::StatusOr<std::string> AuthExchange(int fd, uint16_t method, std::string_view payload,
                                                int64_t deadline_ns, std::string_view address) {
  rpc::FrameHeader h;
  h.kind = rpc::FrameKind::kRequest;
  h.method_id = method;
  h.request_id = method;  // one call in flight: any nonzero id
  const std::string out = rpc::EncodeFrame(h, payload);
  const auto wait = [&](short events) -> absl::Status {
    const int64_t left_ms = (deadline_ns - MonotonicClock::Get().NowNs()) / 1'000'000;
    if (left_ms <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("authentication with ", AbslView(address), " timed out"));
    }
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1'000'000)));
    if (r < 0 && errno != EINTR) return ErrnoToStatus(errno, "poll");
    return absl::OkStatus();
  };
  size_t sent = 0;
  while (sent < out.size()) {
    const ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (absl::Status s = wait(POLLOUT); !s.ok()) return s;
      continue;
    }
    return absl::UnavailableError(absl::StrCat("authentication with ", AbslView(address),
                                               ": send failed: ", std::strerror(errno)));
  }
  // Room for a connection error's message too.
  rpc::FrameDecoder dec(
      static_cast<uint32_t>(rpc::kMaxErrorMessageBytes + rpc::kMaxAuthPayloadBytes));
  for (;;) {
    auto next = dec.Next();
    if (!next.ok()) {
      return absl::UnauthenticatedError(
          absl::StrCat("authentication with ", AbslView(address),
                       ": malformed answer: ", next.status().message()));
    }
    if (next->has_value()) {
      const rpc::Frame& f = **next;
      if (f.header.kind != rpc::FrameKind::kResponse) {
        return absl::UnauthenticatedError(
            absl::StrCat("authentication with ", AbslView(address), ": the server sent a request"));
      }
      if (f.header.code != absl::StatusCode::kOk) {
        if (f.header.code == absl::StatusCode::kUnimplemented && f.header.request_id != 0) {
          return absl::UnauthenticatedError(absl::StrCat(
              "server ", AbslView(address),
              " does not authenticate connections (no --auth_token_file there), but this "
              "client has a token: refusing to talk to a server that cannot prove the secret"));
        }
        return absl::UnauthenticatedError(absl::StrCat("authentication with ", AbslView(address),
                                                       " refused: ", AbslView(f.payload)));
      }
      return std::string(f.payload);
    }
    std::span<uint8_t> dst = dec.WritableSpan(std::max<size_t>(dec.MissingBytes(), 256));
    const ssize_t r = ::recv(fd, dst.data(), dst.size(), 0);
    if (r > 0) {
      dec.Commit(static_cast<size_t>(r));
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (absl::Status s = wait(POLLIN); !s.ok()) return s;
      continue;
    }
    return absl::UnauthenticatedError(absl::StrCat(
        "authentication with ", AbslView(address), ": the server closed the connection",
        r < 0 ? absl::StrCat(" (", std::strerror(errno), ")") : std::string()));
  }
}

// Proves `creds.self()` to the server on `fd` and checks the server's proof.
// UNAUTHENTICATED (refused, wrong secret on either side, a server without
// authentication), DEADLINE_EXCEEDED, UNAVAILABLE.
inline absl::Status AuthenticateClient(int fd, const auth::Credentials& creds, int64_t deadline_ns,
                                       std::string_view address) {
  auth::ClientHandshake hs(creds, rpc::kAuthProtocol);
  auto challenge = AuthExchange(fd, rpc::kAuthHelloMethodId, hs.Hello(), deadline_ns, address);
  if (!challenge.ok()) return challenge.status();
  auto proof = hs.Proof(*challenge);
  if (!proof.ok()) return proof.status();
  auto ok = AuthExchange(fd, rpc::kAuthProofMethodId, *proof, deadline_ns, address);
  if (!ok.ok()) return ok.status();
  if (absl::Status s = hs.Verify(*ok); !s.ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat("server ", AbslView(address), ": ", s.message()));
  }
  return absl::OkStatus();
}

// ConnectTcp, then (with `creds`) the handshake, within `timeout_ns`.
inline absl::StatusOr<UniqueFd> ConnectAndAuthenticate(std::string_view address, int64_t timeout_ns,
                                                       const auth::Credentials* creds) {
  const int64_t deadline = MonotonicClock::Get().NowNs() + timeout_ns;
  auto fd = ConnectTcp(address, timeout_ns);
  if (!fd.ok() || creds == nullptr) return fd;
  if (absl::Status s = AuthenticateClient(fd->get(), *creds, deadline, address); !s.ok()) return s;
  return fd;
}

}  // namespace mooncake::rpc_internal

#endif  // MOONCAKE_STORE_RPC_INTERNAL_AUTH_HANDSHAKE_H_
