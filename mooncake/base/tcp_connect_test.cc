#include "mooncake/base/tcp_connect.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/host_port.h"

namespace mooncake {
namespace {

// A listening socket on `host` (a literal) and a free port; nullopt when the
// host cannot bind it (a container without IPv6).
struct Listener {
  UniqueFd fd;
  uint16_t port = 0;
};

std::optional<Listener> Listen(const std::string& host, int backlog = 16) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    len = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    len = sizeof(sockaddr_in6);
  } else {
    return std::nullopt;
  }
  Listener l;
  l.fd = UniqueFd(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!l.fd.valid()) return std::nullopt;
  if (::bind(l.fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) return std::nullopt;
  if (::listen(l.fd.get(), backlog) != 0) return std::nullopt;
  if (::getsockname(l.fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) return std::nullopt;
  l.port = ntohs(ss.ss_family == AF_INET ? v4->sin_port : v6->sin6_port);
  return l;
}

// A byte written on the connected side arrives on the accepted one.
void ExpectConnectedTo(const UniqueFd& client, const Listener& l) {
  UniqueFd server(::accept4(l.fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(server.valid());
  const char out = 'x';
  ASSERT_EQ(::send(client.get(), &out, 1, MSG_NOSIGNAL), 1);
  char in = 0;
  ASSERT_EQ(::recv(server.get(), &in, 1, 0), 1);
  EXPECT_EQ(in, 'x');
}

bool NonBlocking(int fd) { return (::fcntl(fd, F_GETFL) & O_NONBLOCK) != 0; }

bool NoDelay(int fd) {
  int v = 0;
  socklen_t len = sizeof(v);
  return ::getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &len) == 0 && v != 0;
}

// A port nothing listens on: bound, then closed.
uint16_t ClosedPort() {
  std::optional<Listener> l = Listen("127.0.0.1");
  MC_ASSERT(l.has_value(), "loopback listen");
  return l->port;
}

TEST(ConnectTcpTest, ConnectsToIpv4LoopbackNonBlockingWithNoDelay) {
  std::optional<Listener> l = Listen("127.0.0.1");
  ASSERT_TRUE(l.has_value());
  absl::StatusOr<UniqueFd> fd = ConnectTcp({"127.0.0.1", l->port}, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_TRUE(NonBlocking(fd->get()));
  EXPECT_TRUE(NoDelay(fd->get()));
  EXPECT_TRUE(::fcntl(fd->get(), F_GETFD) & FD_CLOEXEC);
  ExpectConnectedTo(*fd, *l);
}

TEST(ConnectTcpTest, ConnectsToIpv6Loopback) {
  std::optional<Listener> l = Listen("::1");
  if (!l.has_value()) GTEST_SKIP() << "this host cannot listen on ::1";
  absl::StatusOr<UniqueFd> fd =
      ConnectTcp({"::1", l->port}, absl::Now() + absl::Seconds(5), {.resolve_names = false});
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_TRUE(NonBlocking(fd->get()));
  ExpectConnectedTo(*fd, *l);
}

TEST(ConnectTcpTest, BlockingOptionLeavesABlockingSocket) {
  std::optional<Listener> l = Listen("127.0.0.1");
  ASSERT_TRUE(l.has_value());
  absl::StatusOr<UniqueFd> fd =
      ConnectTcp({"127.0.0.1", l->port}, absl::Now() + absl::Seconds(5), {.blocking = true});
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_FALSE(NonBlocking(fd->get()));
  EXPECT_TRUE(NoDelay(fd->get()));
  ExpectConnectedTo(*fd, *l);
}

TEST(ConnectTcpTest, ResolvesLocalhostAndTriesEachAddress) {
  // "localhost" may give ::1 first; nothing listens there, so this also
  // covers moving on to the next address after a refusal.
  std::optional<Listener> l = Listen("127.0.0.1");
  ASSERT_TRUE(l.has_value());
  absl::StatusOr<UniqueFd> fd = ConnectTcp({"localhost", l->port}, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(fd.ok()) << fd.status();
  ExpectConnectedTo(*fd, *l);
}

TEST(ConnectTcpTest, RefusedPortIsUnavailableAtOnce) {
  const uint16_t port = ClosedPort();
  const absl::Time start = absl::Now();
  absl::StatusOr<UniqueFd> fd =
      ConnectTcp({"127.0.0.1", port}, start + absl::Seconds(10), {.peer = "test peer"});
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kUnavailable) << fd.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_TRUE(StdView(fd.status().message())
                  .starts_with("connect to test peer " + JoinHostPort("127.0.0.1", port) + ": "))
      << fd.status();
}

TEST(ConnectTcpTest, SilentListenerIsDeadlineExceededAtTheDeadline) {
  // A listener whose accept queue is full drops new SYNs (Linux), so the
  // handshake never completes: the deterministic "no answer" peer.
  std::optional<Listener> l = Listen("127.0.0.1", /*backlog=*/0);
  ASSERT_TRUE(l.has_value());
  std::vector<UniqueFd> queued;
  absl::Status silent;
  for (int i = 0; i < 16 && silent.ok(); ++i) {
    const absl::Time start = absl::Now();
    absl::StatusOr<UniqueFd> fd =
        ConnectTcp({"127.0.0.1", l->port}, start + absl::Milliseconds(200));
    const absl::Duration took = absl::Now() - start;
    if (fd.ok()) {
      queued.push_back(std::move(*fd));
      continue;
    }
    silent = fd.status();
    EXPECT_GE(took, absl::Milliseconds(200));
    EXPECT_LT(took, absl::Milliseconds(200) + absl::Seconds(1));
  }
  ASSERT_FALSE(silent.ok()) << "16 connections fit a listen(0) queue";
  EXPECT_EQ(silent.code(), absl::StatusCode::kDeadlineExceeded) << silent;
  EXPECT_EQ(silent.message(),
            "connect to " + JoinHostPort("127.0.0.1", l->port) + ": no answer within 200 ms");
}

TEST(ConnectTcpTest, NonRoutableAddressReturnsByTheDeadline) {
  // 10.255.255.1 usually drops the SYN (DEADLINE_EXCEEDED); a sandbox may
  // refuse it (UNAVAILABLE) or even answer for it. Whatever the network
  // does, the call must not outlive its deadline.
  const absl::Time start = absl::Now();
  absl::StatusOr<UniqueFd> fd = ConnectTcp({"10.255.255.1", 9}, start + absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(300) + absl::Seconds(1));
  if (!fd.ok()) {
    EXPECT_TRUE(absl::IsDeadlineExceeded(fd.status()) || absl::IsUnavailable(fd.status()))
        << fd.status();
  }
}

TEST(ConnectTcpTest, PastDeadlineIsDeadlineExceededWithoutConnecting) {
  std::optional<Listener> l = Listen("127.0.0.1");
  ASSERT_TRUE(l.has_value());
  absl::StatusOr<UniqueFd> fd = ConnectTcp({"127.0.0.1", l->port}, absl::Now());
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kDeadlineExceeded) << fd.status();
  EXPECT_EQ(fd.status().message(),
            "connect to " + JoinHostPort("127.0.0.1", l->port) + ": no answer within 0 ms");
}

TEST(ConnectTcpTest, BadAddressIsInvalidArgument) {
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  EXPECT_EQ(ConnectTcp({"", 80}, deadline).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConnectTcp({"127.0.0.1", 0}, deadline).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (const char* host : {"localhost", "[::1]", "10.0.0.256", "1.2.3"}) {
    absl::StatusOr<UniqueFd> fd = ConnectTcp({host, 80}, deadline, {.resolve_names = false});
    EXPECT_EQ(fd.status().code(), absl::StatusCode::kInvalidArgument) << host << fd.status();
  }
  // Checked before the deadline: a bad address is reported as such.
  EXPECT_EQ(ConnectTcp({"", 80}, absl::InfinitePast()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ConnectTcpTest, NameThatDoesNotResolveIsUnavailable) {
  // ".invalid" never resolves (RFC 6761).
  absl::StatusOr<UniqueFd> fd =
      ConnectTcp({"mooncake-no-such-host.invalid", 80}, absl::Now() + absl::Seconds(5));
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kUnavailable) << fd.status();
}

}  // namespace
}  // namespace mooncake
