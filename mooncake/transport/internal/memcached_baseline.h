// A real memcached as a same-run baseline for transfer_bench: starts
// /usr/bin/memcached on a free loopback port (-I 16m -t 4, the settings the
// store is compared at), stores values and reads them back with a minimal
// text-protocol client that receives each value straight into the caller's
// buffer (the fastest a memcached client can be: no parsing copies, no
// library). Benchmark-only (testonly); it is not part of the transport.
#ifndef MOONCAKE_TRANSPORT_INTERNAL_MEMCACHED_BASELINE_H_
#define MOONCAKE_TRANSPORT_INTERNAL_MEMCACHED_BASELINE_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/transport/internal/unix_socket.h"

namespace mooncake::transport_internal {

inline constexpr const char* kMemcachedBinary = "/usr/bin/memcached";

// Connects to 127.0.0.1:port with TCP_NODELAY and the I/O deadline tick.
inline absl::StatusOr<Fd> ConnectMemcached(uint16_t port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus("socket", errno);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return ErrnoStatus(absl::StrCat("connect to memcached on port ", port), errno);
  }
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  SetSocketTimeouts(fd.get(), absl::Milliseconds(50));
  return fd;
}

// One connection speaking the text protocol.
class MemcachedConnection {
 public:
  static absl::StatusOr<MemcachedConnection> Connect(uint16_t port) {
    ASSIGN_OR_RETURN(Fd fd, ConnectMemcached(port));
    return MemcachedConnection(std::move(fd));
  }

  absl::Status Set(const std::string& key, const void* value, size_t length) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    std::string head = absl::StrCat("set ", key, " 0 0 ", length, "\r\n");
    char crlf[2] = {'\r', '\n'};
    iovec iov[3] = {{head.data(), head.size()}, {const_cast<void*>(value), length}, {crlf, 2}};
    RETURN_IF_ERROR(SendIovBy(fd_.get(), iov, 3, deadline, "memcached set"));
    char reply[8];
    RETURN_IF_ERROR(RecvAllBy(fd_.get(), reply, sizeof(reply), deadline, "memcached set reply"));
    if (std::memcmp(reply, "STORED\r\n", 8) != 0) {
      return absl::InternalError(absl::StrCat("memcached refused set of ", key));
    }
    return absl::OkStatus();
  }

  // Reads the value of `key` (exactly `length` bytes) into `dst`.
  absl::Status Get(const std::string& key, void* dst, size_t length) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    const std::string cmd = absl::StrCat("get ", key, "\r\n");
    iovec iov{const_cast<char*>(cmd.data()), cmd.size()};
    RETURN_IF_ERROR(SendIovBy(fd_.get(), &iov, 1, deadline, "memcached get"));
    // "VALUE <key> <flags> <bytes>\r\n" then the value, then "\r\nEND\r\n".
    char head[256];
    size_t got = 0, line = 0;
    while (line == 0) {
      if (got == sizeof(head)) return absl::DataLossError("memcached header too long");
      const ssize_t n = ::recv(fd_.get(), head + got, sizeof(head) - got, 0);
      if (n <= 0) {
        if (n < 0 && (errno == EAGAIN || errno == EINTR) && absl::Now() < deadline) continue;
        return absl::UnavailableError("memcached closed or stalled in a get");
      }
      got += static_cast<size_t>(n);
      for (size_t i = 1; i < got; ++i) {
        if (head[i - 1] == '\r' && head[i] == '\n') {
          line = i + 1;
          break;
        }
      }
    }
    uint64_t bytes = 0;
    const std::string_view text(head, line - 2);
    const size_t space = text.rfind(' ');
    if (!text.starts_with("VALUE ") || space == std::string_view::npos ||
        !absl::SimpleAtoi(AbslView(text.substr(space + 1)), &bytes) || bytes != length) {
      return absl::NotFoundError(absl::StrCat("memcached has no ", length, "-byte ", key));
    }
    // The first read never reaches past the value: the header is < 256 bytes
    // and values are far larger.
    const size_t early = got - line;
    if (early > length) return absl::DataLossError("memcached value shorter than announced");
    std::memcpy(dst, head + line, early);
    RETURN_IF_ERROR(RecvAllBy(fd_.get(), static_cast<char*>(dst) + early, length - early, deadline,
                              "memcached value"));
    char tail[7];
    RETURN_IF_ERROR(RecvAllBy(fd_.get(), tail, sizeof(tail), deadline, "memcached END"));
    if (std::memcmp(tail, "\r\nEND\r\n", 7) != 0) return absl::DataLossError("memcached END");
    return absl::OkStatus();
  }

 private:
  explicit MemcachedConnection(Fd fd) : fd_(std::move(fd)) {}
  Fd fd_;
};

// A memcached process on a free loopback port; killed on destruction.
class MemcachedProcess {
 public:
  static absl::StatusOr<std::unique_ptr<MemcachedProcess>> Start(int threads = 4) {
    if (::access(kMemcachedBinary, X_OK) != 0) {
      return absl::NotFoundError(absl::StrCat(kMemcachedBinary, " is not installed"));
    }
    ASSIGN_OR_RETURN(const uint16_t port, FreePort());
    const std::string port_s = std::to_string(port), threads_s = std::to_string(threads);
    std::vector<const char*> argv = {
        kMemcachedBinary,  "-p", port_s.c_str(), "-l", "127.0.0.1", "-U", "0", "-I", "16m", "-t",
        threads_s.c_str(), "-m", "2048"};
    if (::geteuid() == 0) {
      argv.push_back("-u");
      argv.push_back("root");
    }
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) return ErrnoStatus("fork", errno);
    if (pid == 0) {
      ::execv(kMemcachedBinary, const_cast<char* const*>(argv.data()));
      ::_exit(127);
    }
    std::unique_ptr<MemcachedProcess> p(new MemcachedProcess(pid, port));
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (!ConnectMemcached(port).ok()) {
      if (absl::Now() > deadline) return absl::UnavailableError("memcached did not start");
      absl::SleepFor(absl::Milliseconds(10));
    }
    return p;
  }
  ~MemcachedProcess() {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  MemcachedProcess(const MemcachedProcess&) = delete;
  MemcachedProcess& operator=(const MemcachedProcess&) = delete;

  uint16_t port() const { return port_; }

 private:
  MemcachedProcess(pid_t pid, uint16_t port) : pid_(pid), port_(port) {}

  static absl::StatusOr<uint16_t> FreePort() {
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return ErrnoStatus("pick a free port", errno);
    }
    return ntohs(a.sin_port);
  }

  const pid_t pid_;
  const uint16_t port_;
};

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_MEMCACHED_BASELINE_H_
