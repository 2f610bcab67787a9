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
//
// The server and its segment live for the whole run; each input gets a new
// connection and the segment reset to its initial bytes, so no input sees
// another's state. Where the socket buffers can hold the whole input and every
// reply the server may send to it (the usual case: SO_SNDBUFFORCE), the input
// is queued first and the server runs in the fuzzer's thread; otherwise a
// requester thread, alive for the whole run, streams the input and drains the
// replies. (A thread per input cost more than serving the input.)
#include <sys/socket.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
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

// The hostile requester: one thread for the whole run. For each input it sends
// the bytes, draining replies meanwhile so the server never blocks on a full
// buffer for long, then closes its writing side and drains the rest.
class Requester {
 public:
  Requester() : thread_([this] { Loop(); }) {}

  void Start(int fd, const uint8_t* data, size_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    MC_ASSERT(fd_ < 0 && !done_, "one input at a time");
    fd_ = fd;
    data_ = data;
    size_ = size;
    cv_.notify_all();
  }

  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
    done_ = false;
  }

 private:
  void Loop() {
    for (;;) {
      int fd;
      const uint8_t* data;
      size_t size;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return fd_ >= 0; });
        fd = fd_;
        data = data_;
        size = size_;
      }
      Send(fd, data, size);
      std::lock_guard<std::mutex> lock(mu_);
      fd_ = -1;
      done_ = true;
      cv_.notify_all();
    }
  }

  void Send(int fd, const uint8_t* data, size_t size) {
    size_t sent = 0;
    while (sent < size) {
      const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
      } else if (n < 0 && errno != EAGAIN) {
        break;
      } else {
        (void)!::recv(fd, sink_.data(), sink_.size(), MSG_DONTWAIT);
      }
    }
    ::shutdown(fd, SHUT_WR);
    while (::recv(fd, sink_.data(), sink_.size(), 0) > 0) {
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  int fd_ = -1;  // the input's socket while one is in progress
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool done_ = false;
  std::vector<char> sink_ = std::vector<char>(64 << 10);
  std::thread thread_;  // last: starts once the members above exist
};

// Raises `fd`'s send buffer as far as allowed (past net.core.wmem_max where the
// process may) and returns what the kernel granted.
size_t SendBufferBytes(int fd) {
  const int want = 64 << 20;
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &want, sizeof(want)) != 0) {
    (void)::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof(want));
  }
  int got = 0;
  socklen_t len = sizeof(got);
  MC_ASSERT(::getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &got, &len) == 0, "SO_SNDBUF");
  return static_cast<size_t>(got);
}

// A bound on the send buffer the server's replies to `size` input bytes take:
// at most one reply per request header, each a header and at most a segment
// (4 KiB) or an error message, charged with the kernel's buffer overhead (under
// twice the payload; four times here).
size_t QueuedReplyBytesMax(size_t size) {
  using mooncake::transport_internal::kHeaderBytes;
  return (size / kHeaderBytes + 1) * 4 * (kHeaderBytes + 4096);
}

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

// The bytes as a hostile requester's stream into one connection of `server`;
// with `check_replies`, what the server answered is checked (where the socket
// buffers hold it all: the usual case).
void ServeStream(mooncake::transport_internal::TcpServer* server, const uint8_t* data, size_t size,
                 bool check_replies) {
  using namespace mooncake::transport_internal;
  static Requester* requester = new Requester;
  int sv[2];
  MC_ASSERT(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
  SetSocketTimeouts(sv[0], absl::Milliseconds(5));
  if (SendBufferBytes(sv[1]) >= 2 * size + (64 << 10) &&
      SendBufferBytes(sv[0]) >= QueuedReplyBytesMax(size)) {
    // Everything fits in the socket buffers: the server reads the whole stream
    // and queues every reply without a reader, in this thread.
    MC_ASSERT(::send(sv[1], data, size, MSG_NOSIGNAL) == static_cast<ssize_t>(size),
              "the input fits the socket buffer");
    ::shutdown(sv[1], SHUT_WR);
    server->ServeConnection(sv[0]);
    if (check_replies) {
      ::shutdown(sv[0], SHUT_WR);
      std::string replies;
      char sink[65536];
      for (;;) {
        const ssize_t n = ::recv(sv[1], sink, sizeof(sink), MSG_DONTWAIT);
        if (n <= 0) break;
        replies.append(sink, static_cast<size_t>(n));
      }
      CheckOnlyHandshakeReplies(replies);
    }
  } else {
    requester->Start(sv[1], data, size);
    server->ServeConnection(sv[0]);
    ::shutdown(sv[0], SHUT_RDWR);
    requester->Wait();
  }
  ::close(sv[0]);
  ::close(sv[1]);
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
  std::fill(segment->begin(), segment->end(), 'm');
  ServeStream(server, data, size, /*check_replies=*/false);
  std::fill(segment->begin(), segment->end(), 'm');
  ServeStream(authenticating, data, size, /*check_replies=*/true);
  MC_ASSERT(std::all_of(segment->begin(), segment->end(), [](char c) { return c == 'm'; }),
            "an unauthenticated stream wrote into the segment");
  return 0;
}
