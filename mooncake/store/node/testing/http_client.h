// A blocking HTTP/1.x client for the node's tests: sends raw bytes, reads the
// answer to EOF. Test-only (a timeout of seconds, no reuse).
#ifndef MOONCAKE_STORE_NODE_TESTING_HTTP_CLIENT_H_
#define MOONCAKE_STORE_NODE_TESTING_HTTP_CLIENT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace mooncake::node_testing {

struct HttpAnswer {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;
};

// A connected socket to 127.0.0.1:port, or -1.
inline int ConnectLoopback(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads `fd` to EOF (at most timeout_ms between bytes) and parses the answer.
inline absl::StatusOr<HttpAnswer> ReadAnswer(int fd, int timeout_ms = 5000) {
  std::string data;
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return absl::DeadlineExceededError("no answer in time");
    const ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
    if (r < 0) return absl::UnavailableError("recv failed");
    if (r == 0) break;
    data.append(buf, static_cast<size_t>(r));
  }
  const size_t end = data.find("\r\n\r\n");
  if (end == std::string::npos || !data.starts_with("HTTP/1.1 ")) {
    return absl::DataLossError(absl::StrCat("not an HTTP answer: ", data.substr(0, 80)));
  }
  HttpAnswer a;
  a.head = data.substr(0, end);
  a.body = data.substr(end + 4);
  a.status = std::atoi(data.c_str() + 9);
  return a;
}

// Sends `raw` on a fresh connection and reads the answer.
inline absl::StatusOr<HttpAnswer> HttpRaw(uint16_t port, std::string_view raw) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("connect to port ", port));
  size_t sent = 0;
  while (sent < raw.size()) {
    const ssize_t w = ::send(fd, raw.data() + sent, raw.size() - sent, MSG_NOSIGNAL);
    if (w <= 0) break;  // the server may answer (431) and stop reading early
    sent += static_cast<size_t>(w);
  }
  auto a = ReadAnswer(fd);
  ::close(fd);
  return a;
}

inline absl::StatusOr<HttpAnswer> HttpGet(uint16_t port, std::string_view path) {
  return HttpRaw(port, "GET " + std::string(path) + " HTTP/1.1\r\nHost: test\r\n\r\n");
}

}  // namespace mooncake::node_testing

#endif  // MOONCAKE_STORE_NODE_TESTING_HTTP_CLIENT_H_
