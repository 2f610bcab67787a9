// Fuzzes TcpTransport's frame decoder and the owner's frame handling.
//
// 1. DecodeHeader on the first 48 bytes: never crashes; what it accepts
//    re-encodes to the same bytes (the decoder is exact).
// 2. The whole input as a byte stream from a hostile requester into a real
//    TcpServer connection (socketpair) with one registered 4 KiB segment:
//    every frame is bounds-checked, garbage closes the connection, and no
//    byte outside the segment is touched (ASan guards the neighbours).
// 3. The same stream into a server with an auth token file: the handshake's
//    parsing (first frame, AUTH_HELLO payload, AUTH_PROOF) refuses what it
//    must, and what it sends back is handshake frames and ERRORs only (a
//    proof depends on the server's fresh nonce: no input gets past it).
#include <sys/socket.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/transport/internal/tcp_server.h"
#include "mooncake/transport/internal/tcp_wire.h"

namespace mooncake {

std::vector<std::string> FuzzSeeds() {
  using transport_internal::EncodeHeader;
  using transport_internal::FrameType;
  auto frame = [](const transport_internal::FrameHeader& h, std::string payload = "") {
    auto raw = EncodeHeader(h);
    return std::string(reinterpret_cast<const char*>(raw.data()), raw.size()) + payload;
  };
  const std::string hello = auth::EncodeHello("cluster", auth::Nonce{});
  const auto n = static_cast<uint32_t>(hello.size());
  return {
      frame({FrameType::kAuthHello, 0, 1, 0, 0, n, 0}, hello),
      frame({FrameType::kAuthHello, 0, 1, 0, 0, n, 0}, hello) +
          frame({FrameType::kAuthProof, 0, 2, 0, 0, 32, 0}, std::string(32, 'p')) +
          frame({FrameType::kRead, 0, 3, 1, 0, 4096, 0}),
      frame({FrameType::kAuthHello, 0, 1, 0, 0, n, 0}, "\x02" + hello.substr(1)),
      frame({FrameType::kAuthProof, 0, 1, 0, 0, 32, 0}, std::string(32, 'p')),
      frame({FrameType::kOpen, 0, 1, 1, 0, 0, 0}),
      frame({FrameType::kRead, 0, 2, 1, 0, 4096, 0}),
      frame({FrameType::kRead, 0, 3, 1, 4000, 200, 0}),
      frame({FrameType::kWrite, 0, 4, 1, 10, 5, 0}, "hello"),
      frame({FrameType::kWrite, 0, 5, 1, 4094, 5, 0}, "hello"),
      frame({FrameType::kRead, 0, 6, 2, 0, 1, 0}) + frame({FrameType::kOpen, 0, 7, 1, 0, 0, 0}),
      frame({FrameType::kOpenOk, 0, 8, 1, 4096, 0, 0}),
      frame({FrameType::kError, 5, 9, 0, 0, 3, 0}, "bad"),
  };
}

}  // namespace mooncake

namespace {

using mooncake::transport_internal::TcpServer;

// Every frame `replies` holds is a handshake frame or an ERROR: an
// unauthenticated stream got no segment byte and no OPEN_OK.
void CheckOnlyHandshakeReplies(const std::string& replies) {
  using namespace mooncake::transport_internal;
  size_t at = 0;
  while (replies.size() - at >= kHeaderBytes) {
    absl::StatusOr<FrameHeader> h =
        DecodeHeader(reinterpret_cast<const uint8_t*>(replies.data() + at));
    MC_ASSERT(h.ok(), "the server sent a frame that does not decode");
    MC_ASSERT(h->type == FrameType::kError || h->type == FrameType::kAuthChallenge,
              "an unauthenticated stream got something other than a CHALLENGE or an ERROR");
    at += kHeaderBytes + h->length;
  }
}

// The bytes as a hostile requester's stream into one connection of `server`.
void ServeStream(TcpServer* server, const uint8_t* data, size_t size, bool check_replies) {
  using namespace mooncake::transport_internal;
  int sv[2];
  MC_ASSERT(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
  SetSocketTimeouts(sv[0], absl::Milliseconds(5));
  std::string replies;  // kept only when checked, at most 1 MiB
  const auto keep = [&](const char* p, ssize_t n) {
    if (check_replies && n > 0 && replies.size() < (1u << 20)) {
      replies.append(p, static_cast<size_t>(n));
    }
  };
  // Drain replies so the server never blocks on a full buffer for long.
  std::thread drain([fd = sv[1], data, size, &keep] {
    size_t sent = 0;
    char sink[65536];
    while (sent < size) {
      const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
      } else if (n < 0 && errno != EAGAIN) {
        break;
      } else {
        keep(sink, ::recv(fd, sink, sizeof(sink), MSG_DONTWAIT));
      }
    }
    ::shutdown(fd, SHUT_WR);
    for (;;) {
      const ssize_t n = ::recv(fd, sink, sizeof(sink), 0);
      if (n <= 0) break;
      keep(sink, n);
    }
  });
  server->ServeConnection(sv[0]);
  ::shutdown(sv[0], SHUT_RDWR);
  drain.join();
  ::close(sv[0]);
  ::close(sv[1]);
  if (check_replies) CheckOnlyHandshakeReplies(replies);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mooncake::transport_internal;
  if (size >= kHeaderBytes) {
    absl::StatusOr<FrameHeader> h = DecodeHeader(data);
    if (h.ok()) {
      const WireHeader again = EncodeHeader(*h);
      MC_ASSERT(std::memcmp(again.data(), data, kHeaderBytes) == 0, "decode/encode round trip");
    }
  }
  if (size > 256 << 10) return 0;  // bound each run's socket traffic

  static std::vector<char>* segment = new std::vector<char>(4096, 'm');
  const auto make = [](TcpServer::Auth auth) {
    auto* s = new TcpServer(absl::Milliseconds(20), 4, std::move(auth));
    const auto id = s->Add(segment->data(), segment->size(), mooncake::transport::MemoryLocation{});
    MC_ASSERT(id == 1, "first segment id");
    return s;
  };
  static TcpServer* server = make({});
  static TcpServer* authenticating = make({std::make_shared<const mooncake::auth::Credentials>(
      *mooncake::auth::Credentials::Parse("cluster 0123456789abcdef0123456789abcdef", "fuzz"))});
  ServeStream(server, data, size, /*check_replies=*/false);
  ServeStream(authenticating, data, size, /*check_replies=*/true);
  return 0;
}
