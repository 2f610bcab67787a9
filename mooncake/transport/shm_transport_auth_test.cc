// ShmTransport with a token file (docs/security.md): the open socket runs the
// authentication handshake before it hands out a memfd, and an owner that
// refuses tenants hands them none.
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/metrics.h"
#include "mooncake/transport/shm_transport.h"
#include "mooncake/transport/transport_testing.h"

namespace mooncake::transport {
namespace {

constexpr char kOwnerFile[] =
    "cluster       0123456789abcdef0123456789abcdef\n"
    "tenant:alice  a11ce-a11ce-a11ce-a11ce-a11ce\n";
constexpr char kClusterFile[] = "cluster       0123456789abcdef0123456789abcdef\n";
constexpr char kAliceFile[] = "tenant:alice  a11ce-a11ce-a11ce-a11ce-a11ce\n";
constexpr char kWrongClusterFile[] = "cluster       fedcba9876543210fedcba9876543210\n";

std::shared_ptr<const auth::Credentials> Creds(const char* text) {
  auto c = auth::Credentials::Parse(text, "test");
  MC_ASSERT(c.ok(), "test token file");
  return std::make_shared<const auth::Credentials>(*std::move(c));
}

std::unique_ptr<ShmTransport> Make(const char* file, bool refuse_tenants = false,
                                   MetricsRegistry* metrics = nullptr,
                                   absl::Duration io_timeout = absl::Seconds(5)) {
  ShmTransport::Options o;
  o.io_timeout = io_timeout;
  o.metrics = metrics;
  if (file != nullptr) o.auth = Creds(file);
  o.refuse_tenants = refuse_tenants;
  auto t = ShmTransport::Create(std::move(o));
  MC_ASSERT(t.ok(), "transport");
  return std::move(*t);
}

// The whole conformance kit with both sides proving the cluster's secret.
struct ShmAuthFactory {
  using Transport = ShmTransport;
  static constexpr bool kCrossProcess = true;
  static constexpr bool kUnregisterRevokes = false;
  static constexpr bool kMappingSurvivesOwner = true;
  static constexpr bool kDigestsOnLanding = true;
  static std::unique_ptr<ShmTransport> Make() { return mooncake::transport::Make(kOwnerFile); }
  static absl::StatusOr<KitBuffer> Allocate(uint64_t length) {
    absl::StatusOr<SharedMemory> m = SharedMemory::Create(length);
    if (!m.ok()) return m.status();
    auto holder = std::make_shared<SharedMemory>(std::move(*m));
    return KitBuffer{holder, static_cast<std::byte*>(holder->data())};
  }
};
INSTANTIATE_TYPED_TEST_SUITE_P(ShmAuth, TransportConformanceTest, ShmAuthFactory);

// An owner with one 4 KiB segment of 0x5a.
struct Owner {
  explicit Owner(std::unique_ptr<ShmTransport> t) : transport(std::move(t)) {
    auto m = SharedMemory::Create(4096);
    MC_ASSERT(m.ok(), "shared memory");
    memory = std::make_unique<SharedMemory>(std::move(*m));
    std::memset(memory->data(), 0x5a, 4096);
    auto seg = transport->RegisterMemory(memory->data(), 4096, MemoryLocation::HostDram());
    MC_ASSERT(seg.ok(), "register");
    id = seg->id;
  }
  std::unique_ptr<ShmTransport> transport;
  std::unique_ptr<SharedMemory> memory;
  SegmentId id = 0;
};

// Opens the owner's segment and reads its last 16 bytes.
absl::Status OpenAndRead(ShmTransport& requester, const Owner& owner) {
  absl::StatusOr<RemoteSegment> remote =
      requester.OpenSegment(owner.transport->LocalEndpoint(), owner.id);
  if (!remote.ok()) return remote.status();
  char dst[16] = {};
  const TransferRequest r{OpCode::kRead, dst, remote->handle, 4080, 16};
  absl::StatusOr<BatchId> b = requester.Submit({&r, 1});
  if (!b.ok()) return b.status();
  absl::StatusOr<BatchResult> res = requester.Wait(*b, absl::Now() + absl::Seconds(5));
  if (!res.ok()) return res.status();
  if (!res->ok()) return res->FirstError();
  if (dst[15] != 0x5a) return absl::DataLossError("wrong bytes");
  return absl::OkStatus();
}

std::string Failures(MetricsRegistry& registry) {
  const std::string text = registry.RenderPrometheus();
  const std::string key = "mooncake_transport_auth_failures_total{transport=\"shm\"} ";
  const size_t at = text.find(key);
  return at == std::string::npos
             ? "absent"
             : text.substr(at + key.size(), text.find('\n', at) - at - key.size());
}

TEST(ShmTransportAuthTest, ClusterAndTenantTokensOpenAndRead) {
  MetricsRegistry registry;
  Owner owner(Make(kOwnerFile, /*refuse_tenants=*/false, &registry));
  EXPECT_TRUE(OpenAndRead(*Make(kClusterFile), owner).ok());
  EXPECT_TRUE(OpenAndRead(*Make(kAliceFile), owner).ok());
  EXPECT_EQ(Failures(registry), "0");
}

TEST(ShmTransportAuthTest, RequesterWithoutTokenIsUnauthenticatedAndGetsNoFd) {
  MetricsRegistry registry;
  Owner owner(Make(kOwnerFile, false, &registry));
  const absl::Status s = OpenAndRead(*Make(nullptr), owner);
  EXPECT_TRUE(absl::IsUnauthenticated(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "auth token file")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), owner.transport->LocalEndpoint())) << s;
  EXPECT_EQ(Failures(registry), "1");
  // The owner still serves the next (authenticated) open.
  EXPECT_TRUE(OpenAndRead(*Make(kClusterFile), owner).ok());
}

TEST(ShmTransportAuthTest, WrongSecretIsUnauthenticated) {
  MetricsRegistry registry;
  Owner owner(Make(kOwnerFile, false, &registry));
  const absl::Status s = OpenAndRead(*Make(kWrongClusterFile), owner);
  EXPECT_TRUE(absl::IsUnauthenticated(s)) << s;
  EXPECT_EQ(Failures(registry), "1");
}

TEST(ShmTransportAuthTest, RequesterWithTokenRefusesAnOwnerWithout) {
  Owner owner(Make(nullptr));
  const absl::Status s = OpenAndRead(*Make(kClusterFile), owner);
  EXPECT_TRUE(absl::IsUnauthenticated(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "does not require authentication")) << s;
  // The owner still serves requesters without tokens.
  EXPECT_TRUE(OpenAndRead(*Make(nullptr), owner).ok());
}

TEST(ShmTransportAuthTest, OwnerThatRefusesTenantsServesOnlyTheCluster) {
  MetricsRegistry registry;
  Owner owner(Make(kOwnerFile, /*refuse_tenants=*/true, &registry));
  const absl::Status s = OpenAndRead(*Make(kAliceFile), owner);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "tenants may not map")) << s;
  EXPECT_TRUE(OpenAndRead(*Make(kClusterFile), owner).ok());
  // A tenant that authenticated is not an authentication failure.
  EXPECT_EQ(Failures(registry), "0");
}

// A raw peer on the owner's socket.
UniqueFd ConnectRaw(const ShmTransport& owner) {
  const std::string name = owner.LocalEndpoint().substr(6);  // "@..."
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data() + 1, name.size() - 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  MC_ASSERT(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a), len) == 0, "connect");
  return fd;
}

TEST(ShmTransportAuthTest, GarbageAndSilentPeersDoNotStopTheOwner) {
  MetricsRegistry registry;
  Owner owner(Make(kOwnerFile, false, &registry, absl::Milliseconds(300)));
  {
    UniqueFd garbage = ConnectRaw(*owner.transport);
    const std::string junk(64, '\x7f');
    ASSERT_EQ(::send(garbage.get(), junk.data(), junk.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(junk.size()));
    // The owner answers with one ERROR frame (or nothing) and closes: no fd.
    char buf[256];
    ssize_t n;
    size_t total = 0;
    while ((n = ::recv(garbage.get(), buf, sizeof(buf), 0)) > 0) total += static_cast<size_t>(n);
    EXPECT_LT(total, sizeof(buf));
  }
  UniqueFd silent = ConnectRaw(*owner.transport);  // says nothing: dropped after io_timeout
  EXPECT_TRUE(OpenAndRead(*Make(kClusterFile), owner).ok());
  EXPECT_NE(Failures(registry), "0");
}

}  // namespace
}  // namespace mooncake::transport
