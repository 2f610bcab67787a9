#include "mooncake/base/tcp_listen.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/tcp_connect.h"

namespace mooncake {
namespace {

// A client can reach the listener at host:port, and accept(2) hands it over.
void ExpectAccepts(const TcpListener& l, const std::string& host) {
  auto client = ConnectTcp({host, l.port}, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(client.ok()) << client.status();
  pollfd p{l.fd.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  UniqueFd accepted(::accept4(l.fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
  EXPECT_TRUE(accepted.valid());
}

TEST(ListenTcp, PortZeroOnIpv4PicksAFreePort) {
  auto l = ListenTcp({"127.0.0.1", 0});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_NE(l->port, 0);
  EXPECT_TRUE(l->fd.valid());
  const int flags = ::fcntl(l->fd.get(), F_GETFL, 0);
  EXPECT_NE(flags & O_NONBLOCK, 0) << "non-blocking by default";
  EXPECT_NE(::fcntl(l->fd.get(), F_GETFD, 0) & FD_CLOEXEC, 0);
  ExpectAccepts(*l, "127.0.0.1");
}

TEST(ListenTcp, PortZeroOnIpv6Loopback) {
  auto l = ListenTcp({"::1", 0});
  if (!l.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << l.status();
  EXPECT_NE(l->port, 0);
  ExpectAccepts(*l, "::1");
}

TEST(ListenTcp, BlockingWhenAsked) {
  auto l = ListenTcp({"127.0.0.1", 0}, {.backlog = 4, .non_blocking = false});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(::fcntl(l->fd.get(), F_GETFL, 0) & O_NONBLOCK, 0);
}

TEST(ListenTcp, PortInUseIsAlreadyExists) {
  auto first = ListenTcp({"127.0.0.1", 0});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = ListenTcp({"127.0.0.1", first->port});
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsAlreadyExists(second.status())) << second.status();
  EXPECT_TRUE(absl::StrContains(second.status().message(), "already in use")) << second.status();
  EXPECT_TRUE(absl::StrContains(second.status().message(), absl::StrCat("127.0.0.1:", first->port)))
      << second.status();
}

TEST(ListenTcp, TheSamePortAgainOnceClosed) {
  auto first = ListenTcp({"127.0.0.1", 0});
  ASSERT_TRUE(first.ok()) << first.status();
  const uint16_t port = first->port;
  first->fd.Reset();
  auto again = ListenTcp({"127.0.0.1", port});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->port, port);
}

TEST(ListenTcp, BadAddressesAreInvalidArgument) {
  for (const char* host : {"", "300.1.1.1", "not an address", "localhost"}) {
    auto l = ListenTcp({host, 0});
    EXPECT_TRUE(absl::IsInvalidArgument(l.status())) << host << ": " << l.status();
  }
  // 192.0.2.1 (TEST-NET-1) is no address of this host.
  auto foreign = ListenTcp({"192.0.2.1", 0});
  EXPECT_TRUE(absl::IsInvalidArgument(foreign.status())) << foreign.status();
  EXPECT_TRUE(absl::StrContains(foreign.status().message(), "not an address of this host"))
      << foreign.status();
}

TEST(ListenTcp, NamesResolveWhenAsked) {
  auto l = ListenTcp({"localhost", 0}, {.resolve_names = true});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_NE(l->port, 0);
  auto bad = ListenTcp({"no-such-host.invalid", 0}, {.resolve_names = true});
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
}

}  // namespace
}  // namespace mooncake
