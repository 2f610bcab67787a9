// TcpTransport's authentication handshake: mooncake/base/auth.h's four
// messages carried in AUTH_* frames (docs/tcp_wire_format.md,
// "Authentication"), run synchronously on a blocking socket whose I/O is
// bounded by socket timeouts (TuneTcpSocket), before any data frame.
//
//   requester                          owner
//   AUTH_HELLO     (principal, nonce) ->
//                                      <- AUTH_CHALLENGE (server nonce)
//   AUTH_PROOF     (client proof)     ->
//                                      <- AUTH_OK        (server proof)
//
// An owner refuses with one ERROR frame (UNAUTHENTICATED) and closes. A
// requester that holds a token refuses an owner that does not prove it holds
// the same secret, including one that has no token file at all (it answers
// AUTH_HELLO with an ERROR of another code): a client with a token never
// talks to an unauthenticated owner, so a stray or impostor owner cannot
// receive its WRITEs or feed it READ data.
//
// Thread-safety: free functions on a socket the caller owns; one caller per
// socket.
#ifndef MOONCAKE_TRANSPORT_INTERNAL_TCP_AUTH_H_
#define MOONCAKE_TRANSPORT_INTERNAL_TCP_AUTH_H_

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/transport/internal/tcp_wire.h"
#include "mooncake/transport/internal/unix_socket.h"

namespace mooncake::transport_internal {

// Separates the transport's proofs from the RPC layer's (auth.h transcript).
inline constexpr std::string_view kAuthProtocol = "tcp";
// The same frames on ShmTransport's open socket (its own proofs).
inline constexpr std::string_view kShmAuthProtocol = "shm";
// What an owner with a token file answers to a first frame that is not
// AUTH_HELLO.
inline constexpr std::string_view kAuthRequiredMessage =
    "authentication required: this transport has an auth token file (give the requester's "
    "TcpTransport a token from it: Options::auth)";

static_assert(kMaxAuthHelloBytes >= 2 + auth::kMaxPrincipalBytes + auth::kNonceBytes,
              "AUTH_HELLO bound below auth.h's largest HELLO");
static_assert(kMinAuthHelloBytes == 2 + 1 + auth::kNonceBytes, "AUTH_HELLO lower bound");
static_assert(kAuthTokenBytes == auth::kNonceBytes && kAuthTokenBytes == auth::kProofBytes,
              "AUTH_CHALLENGE / AUTH_PROOF / AUTH_OK payload size");

// One frame with its payload (read for ERROR and AUTH_* frames only, all
// bounded small by DecodeHeader; other payloads stay on the socket).
struct SmallFrame {
  FrameHeader h;
  std::string payload;
};

inline absl::Status SendFrame(int fd, const FrameHeader& h, std::string_view payload,
                              absl::Time deadline, std::string_view what) {
  MC_DASSERT(h.length == payload.size(), "frame length and payload disagree");
  const WireHeader raw = EncodeHeader(h);
  iovec iov[2] = {{const_cast<uint8_t*>(raw.data()), raw.size()},
                  {const_cast<char*>(payload.data()), payload.size()}};
  return SendIovBy(fd, iov, payload.empty() ? 1 : 2, deadline, what);
}

// One ERROR frame carrying `error` (its message cut to kMaxErrorBytes).
inline absl::Status SendErrorFrame(int fd, uint64_t tag, const absl::Status& error,
                                   absl::Time deadline) {
  MC_DASSERT(!error.ok(), "an ERROR frame carries an error");
  const std::string_view msg(error.message().data(),
                             std::min<size_t>(error.message().size(), kMaxErrorBytes));
  return SendFrame(fd,
                   {FrameType::kError, static_cast<uint16_t>(error.code()), tag, 0, 0,
                    static_cast<uint32_t>(msg.size()), 0},
                   msg, deadline, "ERROR");
}

// Receives one header (DATA_LOSS if it does not decode) and, for an ERROR or
// AUTH_* frame, its payload, all before `deadline`.
inline absl::StatusOr<SmallFrame> RecvSmallFrame(int fd, absl::Time deadline,
                                                 std::string_view what) {
  WireHeader raw;
  RETURN_IF_ERROR(RecvAllBy(fd, raw.data(), raw.size(), deadline, what));
  ASSIGN_OR_RETURN(FrameHeader h, DecodeHeader(raw.data()));
  SmallFrame f{h, {}};
  if (h.type == FrameType::kError || IsAuthFrame(h.type)) {
    MC_ASSERT(h.length <= kMaxErrorBytes, "DecodeHeader bounds small payloads");
    f.payload.assign(h.length, '\0');
    RETURN_IF_ERROR(RecvAllBy(fd, f.payload.data(), f.payload.size(), deadline, what));
  }
  return f;
}

namespace auth_detail {

// The owner's answer to the requester's AUTH_HELLO (`first`) or AUTH_PROOF:
// `expected` with `tag`, or the refusal in words a user can act on.
inline absl::StatusOr<SmallFrame> RecvOwnerReply(int fd, absl::Time deadline, FrameType expected,
                                                 uint64_t tag, bool first, std::string_view owner) {
  ASSIGN_OR_RETURN(SmallFrame f,
                   RecvSmallFrame(fd, deadline, first ? "AUTH_CHALLENGE" : "AUTH_OK"));
  if (f.h.type == FrameType::kError) {
    const auto code = static_cast<absl::StatusCode>(f.h.code);
    if (code == absl::StatusCode::kUnauthenticated) {
      return absl::UnauthenticatedError(
          absl::StrCat("owner ", AbslView(owner), " refused authentication: ", f.payload));
    }
    if (first) {
      // An owner without a token file (or one older than authentication)
      // does not speak AUTH_HELLO at all.
      return absl::UnauthenticatedError(absl::StrCat(
          "owner ", AbslView(owner),
          " does not require authentication (it answered AUTH_HELLO with ",
          absl::StatusCodeToString(code), ": ", f.payload,
          "); refusing it: a transport with an auth token talks only to owners that prove they "
          "hold the same secret (give the owner the cluster's auth token file)"));
    }
    return absl::Status(
        code, absl::StrCat("owner ", AbslView(owner), " during authentication: ", f.payload));
  }
  if (f.h.type != expected || f.h.tag != tag) {
    return absl::DataLossError(
        absl::StrCat("owner ", AbslView(owner), " sent an unexpected frame during authentication"));
  }
  return f;
}

}  // namespace auth_detail

// The requester's side, right after connecting and before any other frame:
// the whole handshake before `deadline`. Null `creds`: nothing to do (no
// bytes, no round trip). UNAUTHENTICATED when the owner refuses our proof,
// its own proof is wrong, or it does not require authentication; the I/O
// codes (UNAVAILABLE, DEADLINE_EXCEEDED, DATA_LOSS) otherwise. `protocol`
// names the transport in the proofs (auth.h's transcript).
inline absl::Status AuthenticateToOwner(int fd, const auth::Credentials* creds, absl::Time deadline,
                                        std::string_view owner,
                                        std::string_view protocol = kAuthProtocol) {
  if (creds == nullptr) return absl::OkStatus();
  auth::ClientHandshake hs(*creds, protocol);
  const std::string hello = hs.Hello();
  MC_ASSERT(hello.size() >= kMinAuthHelloBytes && hello.size() <= kMaxAuthHelloBytes,
            "HELLO size within the frame bounds");
  constexpr uint64_t kHelloTag = 1, kProofTag = 2;
  RETURN_IF_ERROR(SendFrame(
      fd, {FrameType::kAuthHello, 0, kHelloTag, 0, 0, static_cast<uint32_t>(hello.size()), 0},
      hello, deadline, "AUTH_HELLO"));
  ASSIGN_OR_RETURN(SmallFrame challenge,
                   auth_detail::RecvOwnerReply(fd, deadline, FrameType::kAuthChallenge, kHelloTag,
                                               /*first=*/true, owner));
  ASSIGN_OR_RETURN(std::string proof, hs.Proof(challenge.payload));
  RETURN_IF_ERROR(SendFrame(
      fd, {FrameType::kAuthProof, 0, kProofTag, 0, 0, static_cast<uint32_t>(proof.size()), 0},
      proof, deadline, "AUTH_PROOF"));
  ASSIGN_OR_RETURN(SmallFrame ok, auth_detail::RecvOwnerReply(fd, deadline, FrameType::kAuthOk,
                                                              kProofTag, /*first=*/false, owner));
  if (absl::Status v = hs.Verify(ok.payload); !v.ok()) {
    return absl::UnauthenticatedError(absl::StrCat("owner ", AbslView(owner), ": ", v.message()));
  }
  return absl::OkStatus();
}

// The owner's side, on a fresh connection: its first frames must be
// AUTH_HELLO, then AUTH_PROOF, all before `deadline`. Returns the principal
// the peer proved. On failure the peer has been sent one ERROR frame where
// the stream still allows one (UNAUTHENTICATED for a wrong first frame, a bad
// HELLO or a wrong proof) and the caller closes the connection; UNAVAILABLE
// means the peer closed it, DEADLINE_EXCEEDED that it stalled. Nothing but
// handshake frames is sent.
inline absl::StatusOr<auth::Principal> AuthenticatePeer(
    int fd, const std::shared_ptr<const auth::Credentials>& creds, absl::Time deadline,
    std::string_view protocol = kAuthProtocol) {
  MC_ASSERT(creds != nullptr, "AuthenticatePeer without credentials");
  auth::ServerHandshake hs(creds, protocol);
  const auto refuse = [&](uint64_t tag, const absl::Status& why) -> absl::Status {
    MC_DASSERT(!why.ok(), "a refusal has a reason");
    (void)SendErrorFrame(fd, tag, why, deadline);
    return why;
  };
  // A frame that does not decode gets ERROR(DATA_LOSS) with tag 0, as in
  // the serving loop; a peer that closes or stalls gets nothing.
  const auto recv = [&](std::string_view what) -> absl::StatusOr<SmallFrame> {
    absl::StatusOr<SmallFrame> f = RecvSmallFrame(fd, deadline, what);
    if (!f.ok() && absl::IsDataLoss(f.status())) return refuse(0, f.status());
    return f;
  };
  ASSIGN_OR_RETURN(SmallFrame hello, recv("AUTH_HELLO"));
  if (hello.h.type != FrameType::kAuthHello) {
    return refuse(hello.h.tag, absl::UnauthenticatedError(AbslView(kAuthRequiredMessage)));
  }
  absl::StatusOr<std::string> challenge = hs.OnHello(hello.payload);
  if (!challenge.ok()) return refuse(hello.h.tag, challenge.status());
  RETURN_IF_ERROR(SendFrame(fd,
                            {FrameType::kAuthChallenge, 0, hello.h.tag, 0, 0,
                             static_cast<uint32_t>(challenge->size()), 0},
                            *challenge, deadline, "AUTH_CHALLENGE"));
  ASSIGN_OR_RETURN(SmallFrame proof, recv("AUTH_PROOF"));
  if (proof.h.type != FrameType::kAuthProof) {
    return refuse(proof.h.tag, absl::UnauthenticatedError(AbslView(kAuthRequiredMessage)));
  }
  auth::Principal who;
  absl::StatusOr<std::string> ok = hs.OnProof(proof.payload, &who);
  if (!ok.ok()) return refuse(proof.h.tag, ok.status());
  RETURN_IF_ERROR(SendFrame(
      fd, {FrameType::kAuthOk, 0, proof.h.tag, 0, 0, static_cast<uint32_t>(ok->size()), 0}, *ok,
      deadline, "AUTH_OK"));
  MC_DASSERT(!who.name.empty(), "an accepted proof names its principal");
  return who;
}

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_TCP_AUTH_H_
