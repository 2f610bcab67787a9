// Fuzzes TcpTransport's frame decoder and the owner's frame handling.
//
// 1. DecodeHeader on the first 48 bytes: never crashes; what it accepts
//    re-encodes to the same bytes (the decoder is exact).
// 2. The whole input as a byte stream from a hostile requester into a real
//    TcpServer connection (socketpair) with one registered 4 KiB segment:
//    every frame is bounds-checked, garbage closes the connection, and no
//    byte outside the segment is touched (ASan guards the neighbours).
#include <sys/socket.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "mooncake/base/assert.h"
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
  return {
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
  static TcpServer* server = [] {
    auto* s = new TcpServer(absl::Milliseconds(20), 4);
    const auto id = s->Add(segment->data(), segment->size(), mooncake::transport::MemoryLocation{});
    MC_ASSERT(id == 1, "first segment id");
    return s;
  }();
  int sv[2];
  MC_ASSERT(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
  SetSocketTimeouts(sv[0], absl::Milliseconds(5));
  // Drain replies so the server never blocks on a full buffer for long.
  std::thread drain([fd = sv[1], data, size] {
    size_t sent = 0;
    while (sent < size) {
      const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
      } else if (n < 0 && errno != EAGAIN) {
        break;
      } else {
        char sink[65536];
        (void)!::recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
      }
    }
    ::shutdown(fd, SHUT_WR);
    char sink[65536];
    while (::recv(fd, sink, sizeof(sink), 0) > 0) {
    }
  });
  server->ServeConnection(sv[0]);
  ::shutdown(sv[0], SHUT_RDWR);
  drain.join();
  ::close(sv[0]);
  ::close(sv[1]);
  return 0;
}
