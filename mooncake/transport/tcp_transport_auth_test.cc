#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/tcp_listen.h"
#include "mooncake/transport/tcp_transport.h"

namespace mooncake::transport {
namespace {

// The server counts a refusal after it has sent it: the requester may read
// the counter first. Waits up to 5 s for it to reach `want`.
uint64_t AuthFailuresReaching(const TcpTransport& t, uint64_t want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (t.AuthFailures() < want && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return t.AuthFailures();
}

using transport_internal::EncodeHeader;
using transport_internal::FrameType;
using transport_internal::RecvSmallFrame;
using transport_internal::SendFrame;
using transport_internal::SmallFrame;

constexpr char kClusterFile[] =
    "cluster       0123456789abcdef0123456789abcdef\n"
    "tenant:alice  a11ce-a11ce-a11ce-a11ce-a11ce\n";
constexpr char kTenantFile[] = "tenant:alice  a11ce-a11ce-a11ce-a11ce-a11ce\n";
constexpr char kOtherClusterFile[] = "cluster  fedcba9876543210fedcba9876543210\n";

std::shared_ptr<const auth::Credentials> Creds(const char* text) {
  auto c = auth::Credentials::Parse(text, "test");
  MC_ASSERT(c.ok(), "test token file");
  return std::make_shared<const auth::Credentials>(*std::move(c));
}

TcpTransport::Options Opts(std::shared_ptr<const auth::Credentials> creds,
                           absl::Duration io_timeout = absl::Seconds(2)) {
  TcpTransport::Options o;
  o.lanes_per_peer = 2;
  o.slice_bytes = 64 << 10;  // several frames per request
  o.io_timeout = io_timeout;
  o.auth = std::move(creds);
  return o;
}

std::unique_ptr<TcpTransport> Make(TcpTransport::Options o) {
  auto t = TcpTransport::Create(std::move(o));
  MC_ASSERT(t.ok(), "transport");
  return std::move(*t);
}

char Pattern(uint64_t i) { return static_cast<char>('a' + (i * 7 + i / 251) % 26); }

// An owner with one registered 1 MiB segment of Pattern bytes.
struct Owner {
  explicit Owner(TcpTransport::Options o) : mem(1 << 20), t(Make(std::move(o))) {
    for (size_t i = 0; i < mem.size(); ++i) mem[i] = Pattern(i);
    auto d = t->RegisterMemory(mem.data(), mem.size(), MemoryLocation::HostDram());
    MC_ASSERT(d.ok(), "register");
    seg = d->id;
  }
  uint16_t Port() const {
    const std::string ep = t->LocalEndpoint();
    return static_cast<uint16_t>(std::stoi(ep.substr(ep.rfind(':') + 1)));
  }
  std::vector<char> mem;  // declared first, freed last: the owner's threads stop before it goes
  std::unique_ptr<TcpTransport> t;
  SegmentId seg = 0;
};

absl::Status Transfer(TcpTransport& t, OpCode op, void* local, SegmentHandle h, uint64_t offset,
                      uint64_t length) {
  const TransferRequest r{op, local, h, offset, length};
  auto id = t.Submit({&r, 1});
  if (!id.ok()) return id.status();
  auto res = t.Wait(*id, absl::Now() + absl::Seconds(10));
  return res.ok() ? res->statuses[0] : res.status();
}

// Reads the owner's whole segment and checks every byte.
void ExpectReadsBack(TcpTransport& requester, const Owner& owner, SegmentHandle h) {
  std::vector<char> dst(owner.mem.size(), '\0');
  ASSERT_TRUE(Transfer(requester, OpCode::kRead, dst.data(), h, 0, dst.size()).ok());
  EXPECT_TRUE(dst == owner.mem);
}

std::vector<std::string> NonEmpty(std::vector<std::string> v) {
  v.erase(std::remove(v.begin(), v.end(), std::string()), v.end());
  return v;
}

TEST(TcpTransportAuthTest, MatchingClusterSecretReadsAndWrites) {
  MetricsRegistry registry;
  TcpTransport::Options oo = Opts(Creds(kClusterFile));
  oo.metrics = &registry;
  Owner owner(oo);
  auto requester = Make(Opts(Creds(kClusterFile)));
  auto remote = requester->OpenSegment(owner.t->LocalEndpoint(), owner.seg);
  ASSERT_TRUE(remote.ok()) << remote.status();
  ExpectReadsBack(*requester, owner, remote->handle);
  std::vector<char> src(256 << 10, 'W');
  ASSERT_TRUE(
      Transfer(*requester, OpCode::kWrite, src.data(), remote->handle, 4096, src.size()).ok());
  EXPECT_TRUE(std::all_of(owner.mem.begin() + 4096, owner.mem.begin() + 4096 + src.size(),
                          [](char c) { return c == 'W'; }));
  EXPECT_EQ(owner.mem[4095], Pattern(4095));
  EXPECT_EQ(owner.mem[4096 + src.size()], Pattern(4096 + src.size()));
  // Both lanes are served, each as "cluster".
  const std::vector<std::string> who = NonEmpty(owner.t->ServedPrincipals());
  EXPECT_EQ(who, std::vector<std::string>(2, "cluster"));
  EXPECT_EQ(owner.t->AuthFailures(), 0u);
  EXPECT_TRUE(absl::StrContains(registry.RenderPrometheus(),
                                "mooncake_transport_auth_failures_total{transport=\"tcp\"} 0"))
      << registry.RenderPrometheus();
}

TEST(TcpTransportAuthTest, TenantTokenIsAccepted) {
  Owner owner(Opts(Creds(kClusterFile)));
  auto requester = Make(Opts(Creds(kTenantFile)));
  auto remote = requester->OpenSegment(owner.t->LocalEndpoint(), owner.seg);
  ASSERT_TRUE(remote.ok()) << remote.status();
  ExpectReadsBack(*requester, owner, remote->handle);
  EXPECT_EQ(NonEmpty(owner.t->ServedPrincipals()), std::vector<std::string>(2, "tenant:alice"));
}

TEST(TcpTransportAuthTest, WrongSecretIsUnauthenticated) {
  MetricsRegistry registry;
  TcpTransport::Options oo = Opts(Creds(kClusterFile));
  oo.metrics = &registry;
  Owner owner(oo);
  auto requester = Make(Opts(Creds(kOtherClusterFile)));
  auto remote = requester->OpenSegment(owner.t->LocalEndpoint(), owner.seg);
  ASSERT_EQ(remote.status().code(), absl::StatusCode::kUnauthenticated) << remote.status();
  EXPECT_TRUE(absl::StrContains(remote.status().message(), "refused authentication"))
      << remote.status();
  EXPECT_EQ(AuthFailuresReaching(*owner.t, 1u), 1u);
  EXPECT_TRUE(absl::StrContains(registry.RenderPrometheus(),
                                "mooncake_transport_auth_failures_total{transport=\"tcp\"} 1"));
  EXPECT_EQ(requester->metrics().Bytes(OpCode::kRead), 0u);
}

TEST(TcpTransportAuthTest, RequesterWithoutTokenIsRefused) {
  Owner owner(Opts(Creds(kClusterFile)));
  auto requester = Make(Opts(nullptr));
  auto remote = requester->OpenSegment(owner.t->LocalEndpoint(), owner.seg);
  ASSERT_EQ(remote.status().code(), absl::StatusCode::kUnauthenticated) << remote.status();
  EXPECT_TRUE(absl::StrContains(remote.status().message(), "authentication required"))
      << remote.status();
  EXPECT_EQ(AuthFailuresReaching(*owner.t, 1u), 1u);
}

TEST(TcpTransportAuthTest, RequesterWithTokenRefusesAnOwnerWithout) {
  Owner owner(Opts(nullptr));
  auto requester = Make(Opts(Creds(kClusterFile)));
  auto remote = requester->OpenSegment(owner.t->LocalEndpoint(), owner.seg);
  ASSERT_EQ(remote.status().code(), absl::StatusCode::kUnauthenticated) << remote.status();
  EXPECT_TRUE(absl::StrContains(remote.status().message(), "does not require authentication"))
      << remote.status();
}

// A connected raw socket to `port` with a receive timeout.
UniqueFd RawConnect(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  MC_ASSERT(fd.valid(), "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  MC_ASSERT(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "connect");
  transport_internal::SetSocketTimeouts(fd.get(), absl::Seconds(20));
  return fd;
}

// Everything the peer sends until it closes (or the 20 s receive timeout).
std::string ReadToClose(int fd, bool* closed) {
  std::string all;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      all.append(buf, static_cast<size_t>(n));
      continue;
    }
    *closed = n == 0 || errno == ECONNRESET;
    return all;
  }
}

TEST(TcpTransportAuthTest, DataFrameFirstGetsOneUnauthenticatedErrorThenClose) {
  Owner owner(Opts(Creds(kClusterFile)));
  {
    UniqueFd fd = RawConnect(owner.Port());
    const auto read = EncodeHeader({FrameType::kRead, 0, 5, owner.seg, 0, 4096, 0});
    ASSERT_EQ(::send(fd.get(), read.data(), read.size(), MSG_NOSIGNAL), 48);
    bool closed = false;
    const std::string got = ReadToClose(fd.get(), &closed);
    EXPECT_TRUE(closed);
    ASSERT_GE(got.size(), transport_internal::kHeaderBytes);
    auto h = transport_internal::DecodeHeader(reinterpret_cast<const uint8_t*>(got.data()));
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->type, FrameType::kError);
    EXPECT_EQ(h->code, static_cast<uint16_t>(absl::StatusCode::kUnauthenticated));
    EXPECT_EQ(h->tag, 5u);
    // One ERROR frame and nothing else: no segment byte.
    EXPECT_EQ(got.size(), transport_internal::kHeaderBytes + h->length);
    EXPECT_EQ(got.substr(transport_internal::kHeaderBytes),
              std::string(transport_internal::kAuthRequiredMessage));
  }
  {  // A WRITE first changes nothing.
    UniqueFd fd = RawConnect(owner.Port());
    const std::string payload(4096, 'X');
    ASSERT_TRUE(SendFrame(fd.get(), {FrameType::kWrite, 0, 6, owner.seg, 0, 4096, 0}, payload,
                          absl::Now() + absl::Seconds(5), "WRITE")
                    .ok());
    bool closed = false;
    const std::string got = ReadToClose(fd.get(), &closed);
    EXPECT_TRUE(closed);
    EXPECT_EQ(got.size(),
              transport_internal::kHeaderBytes + transport_internal::kAuthRequiredMessage.size());
    EXPECT_EQ(owner.mem[0], Pattern(0));
    EXPECT_EQ(owner.mem[4095], Pattern(4095));
  }
  EXPECT_EQ(AuthFailuresReaching(*owner.t, 2u), 2u);
}

TEST(TcpTransportAuthTest, SilentConnectionIsClosedAfterTheHandshakeTimeout) {
  Owner owner(Opts(Creds(kClusterFile), absl::Milliseconds(300)));
  UniqueFd fd = RawConnect(owner.Port());
  bool closed = false;
  const std::string got = ReadToClose(fd.get(), &closed);  // sends nothing, waits
  EXPECT_TRUE(closed) << "still open after the 20 s receive timeout";
  EXPECT_EQ(got, "");
  EXPECT_EQ(AuthFailuresReaching(*owner.t, 1u), 1u);
  EXPECT_EQ(NonEmpty(owner.t->ServedPrincipals()).size(), 0u);
}

// An owner that answers the handshake without knowing the secret: it
// accepts any proof and sends a made-up one back.
TEST(TcpTransportAuthTest, OwnerWhoseProofIsWrongIsRefused) {
  UniqueFd listen;
  uint16_t port = 0;
  {
    auto l = ListenTcp({"127.0.0.1", 0}, {.non_blocking = false});
    ASSERT_TRUE(l.ok());
    listen = std::move(l->fd);
    port = l->port;
  }
  std::thread impostor([&] {
    UniqueFd fd(::accept4(listen.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd.valid()) return;
    transport_internal::SetSocketTimeouts(fd.get(), absl::Milliseconds(50));
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    auto hello = RecvSmallFrame(fd.get(), deadline, "hello");
    if (!hello.ok()) return;
    const std::string nonce(32, 'n'), proof(32, 'p');
    (void)SendFrame(fd.get(), {FrameType::kAuthChallenge, 0, hello->h.tag, 0, 0, 32, 0}, nonce,
                    deadline, "challenge");
    auto client_proof = RecvSmallFrame(fd.get(), deadline, "proof");
    if (!client_proof.ok()) return;
    (void)SendFrame(fd.get(), {FrameType::kAuthOk, 0, client_proof->h.tag, 0, 0, 32, 0}, proof,
                    deadline, "ok");
    char c;
    (void)::recv(fd.get(), &c, 1, 0);  // until the requester closes
  });
  auto requester = Make(Opts(Creds(kClusterFile)));
  auto remote = requester->OpenSegment(absl::StrCat("tcp://127.0.0.1:", port), 1);
  EXPECT_EQ(remote.status().code(), absl::StatusCode::kUnauthenticated) << remote.status();
  EXPECT_TRUE(absl::StrContains(remote.status().message(), "proof is wrong")) << remote.status();
  impostor.join();
}

TEST(TcpTransportAuthTest, ReconnectAfterOwnerRestartAuthenticatesAgain) {
  auto owner = std::make_unique<Owner>(Opts(Creds(kClusterFile)));
  const uint16_t port = owner->Port();
  const std::string ep = owner->t->LocalEndpoint();
  auto requester = Make(Opts(Creds(kClusterFile)));
  auto remote = requester->OpenSegment(ep, owner->seg);
  ASSERT_TRUE(remote.ok()) << remote.status();
  ExpectReadsBack(*requester, *owner, remote->handle);

  // The same port, the same secret: lanes reconnect and authenticate again
  // (the first transfer may meet a lane that has not noticed the close).
  const auto restart = [&](const char* file) {
    owner.reset();
    TcpTransport::Options o = Opts(Creds(file));
    o.port = port;
    owner = std::make_unique<Owner>(o);
  };
  restart(kClusterFile);
  std::vector<char> dst(owner->mem.size(), '\0');
  absl::Status s;
  for (int attempt = 0; attempt < 5; ++attempt) {
    s = Transfer(*requester, OpCode::kRead, dst.data(), remote->handle, 0, dst.size());
    if (s.ok()) break;
    EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  }
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(dst == owner->mem);
  EXPECT_EQ(NonEmpty(owner->t->ServedPrincipals()).size(), 2u);

  // Another secret now: the lanes' handshakes fail, no byte arrives.
  restart(kOtherClusterFile);
  std::fill(dst.begin(), dst.end(), '\0');
  for (int attempt = 0; attempt < 5; ++attempt) {
    s = Transfer(*requester, OpCode::kRead, dst.data(), remote->handle, 0, dst.size());
    if (absl::IsUnauthenticated(s)) break;
    EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "refused authentication")) << s;
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](char c) { return c == '\0'; }));
  EXPECT_GE(AuthFailuresReaching(*owner->t, 1), 1u);
}

}  // namespace
}  // namespace mooncake::transport
