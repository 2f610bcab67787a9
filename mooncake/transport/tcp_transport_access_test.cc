// Tenants' access per range on the TCP transport (Options::access,
// internal/tcp_server.h; docs/security.md "Tenant isolation on the workers").
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/capability.h"
#include "mooncake/transport/tcp_transport.h"

namespace mooncake::transport {
namespace {

constexpr char kOwnerFile[] =
    "cluster       0123456789abcdef0123456789abcdef\n"
    "tenant:alice  a11ce-a11ce-a11ce-a11ce-a11ce\n"
    "tenant:bob    b0b-b0b-b0b-b0b-b0b-b0b-b0b\n";
constexpr char kAliceFile[] = "tenant:alice  a11ce-a11ce-a11ce-a11ce-a11ce\n";
constexpr char kBobFile[] = "tenant:bob    b0b-b0b-b0b-b0b-b0b-b0b-b0b\n";
constexpr char kClusterFile[] = "cluster       0123456789abcdef0123456789abcdef\n";
constexpr char kScope[] = "worker-1";
constexpr uint64_t kMasterSegment = 41;

std::shared_ptr<const auth::Credentials> Creds(const char* text) {
  auto c = auth::Credentials::Parse(text, "test");
  MC_ASSERT(c.ok(), "test token file");
  return std::make_shared<const auth::Credentials>(*std::move(c));
}

std::shared_ptr<const auth::CapabilityKey> Key() {
  auto k = auth::CapabilityKey::FromCredentials(*Creds(kOwnerFile));
  MC_ASSERT(k.ok(), "capability key");
  return std::make_shared<const auth::CapabilityKey>(*k);
}

std::unique_ptr<TcpTransport> Make(TcpTransport::Options o) {
  auto t = TcpTransport::Create(std::move(o));
  MC_ASSERT(t.ok(), "transport");
  return std::move(*t);
}

TcpTransport::Options Opts(const char* file) {
  TcpTransport::Options o;
  o.lanes_per_peer = 1;      // one connection: its cached capability is exercised
  o.slice_bytes = 16 << 10;  // several frames per request
  o.auth = Creds(file);
  return o;
}

// An owner with a data segment (capabilities name it as kMasterSegment of
// kScope) and a directory segment every principal may read.
struct Owner {
  Owner() : data(256 << 10), directory(4096, 'd') {
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>('a' + i % 26);
    TcpTransport::Options o = Opts(kOwnerFile);
    o.access.key = Key();
    o.access.target = [this](SegmentId id) -> std::optional<transport_internal::CapabilityTarget> {
      if (id == data_id) return transport_internal::CapabilityTarget{kScope, kMasterSegment};
      if (id == directory_id) return transport_internal::CapabilityTarget{"", 0, true};
      return std::nullopt;
    };
    t = Make(std::move(o));
    data_id = t->RegisterMemory(data.data(), data.size(), MemoryLocation::HostDram())->id;
    directory_id =
        t->RegisterMemory(directory.data(), directory.size(), MemoryLocation::HostDram())->id;
  }
  std::vector<char> data;
  std::vector<char> directory;
  SegmentId data_id = 0;
  SegmentId directory_id = 0;
  std::unique_ptr<TcpTransport> t;  // after the ids and memory: its threads read them
};

std::string Cap(std::string_view principal, uint8_t rights, uint64_t offset, uint64_t length,
                int64_t expiry_unix_ms = auth::NowUnixMs() + 60'000,
                uint64_t segment = kMasterSegment) {
  return Key()->Issue(kScope, principal, segment, {rights, offset, length, expiry_unix_ms});
}

absl::Status Transfer(TcpTransport& t, OpCode op, void* local, SegmentHandle h, uint64_t offset,
                      uint64_t length, const std::string* cap) {
  TransferRequest r{op, local, h, offset, length};
  r.capability = cap != nullptr ? cap->data() : nullptr;
  auto id = t.Submit({&r, 1});
  if (!id.ok()) return id.status();
  auto res = t.Wait(*id, absl::Now() + absl::Seconds(10));
  return res.ok() ? res->statuses[0] : res.status();
}

SegmentHandle Open(TcpTransport& requester, const Owner& owner, SegmentId id) {
  auto h = requester.OpenSegment(owner.t->LocalEndpoint(), id);
  MC_ASSERT(h.ok(), "open");
  return h->handle;
}

TEST(TcpTransportAccess, TenantReadsAndWritesOnlyTheRangesItWasGranted) {
  Owner owner;
  auto alice = Make(Opts(kAliceFile));
  const SegmentHandle h = Open(*alice, owner, owner.data_id);
  std::vector<char> buf(64 << 10, '\0');

  // No capability: refused, nothing read; the connection stays usable.
  absl::Status s = Transfer(*alice, OpCode::kRead, buf.data(), h, 0, buf.size(), nullptr);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_NE(std::string(s.message()).find("needs a capability"), std::string::npos) << s;
  EXPECT_EQ(buf[0], '\0');

  // A read capability for [64 KiB, +64 KiB): that range reads (4 frames, one
  // HMAC), one byte more does not.
  const std::string read = Cap("tenant:alice", auth::kCapRead, 64 << 10, 64 << 10);
  ASSERT_TRUE(Transfer(*alice, OpCode::kRead, buf.data(), h, 64 << 10, 64 << 10, &read).ok());
  EXPECT_EQ(0, std::memcmp(buf.data(), owner.data.data() + (64 << 10), buf.size()));
  EXPECT_TRUE(absl::IsPermissionDenied(
      Transfer(*alice, OpCode::kRead, buf.data(), h, 64 << 10, (64 << 10) + 1, &read)));
  EXPECT_TRUE(absl::IsPermissionDenied(
      Transfer(*alice, OpCode::kRead, buf.data(), h, (64 << 10) - 1, 16, &read)));

  // Writing needs write rights: the refused WRITE leaves the bytes alone.
  std::vector<char> zeros(16 << 10, 'Z');
  s = Transfer(*alice, OpCode::kWrite, zeros.data(), h, 64 << 10, zeros.size(), &read);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(owner.data[64 << 10], 'a' + (64 << 10) % 26);
  const std::string write = Cap("tenant:alice", auth::kCapWrite, 128 << 10, 32 << 10);
  ASSERT_TRUE(
      Transfer(*alice, OpCode::kWrite, zeros.data(), h, 128 << 10, zeros.size(), &write).ok());
  EXPECT_EQ(owner.data[128 << 10], 'Z');

  // Expired, issued to bob, for another segment or forged: refused.
  const std::string expired =
      Cap("tenant:alice", auth::kCapRead, 0, 4096, auth::NowUnixMs() - 1000);
  s = Transfer(*alice, OpCode::kRead, buf.data(), h, 0, 4096, &expired);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_NE(std::string(s.message()).find("expired"), std::string::npos) << s;
  const std::string bobs = Cap("tenant:bob", auth::kCapRead, 0, 4096);
  EXPECT_TRUE(
      absl::IsPermissionDenied(Transfer(*alice, OpCode::kRead, buf.data(), h, 0, 4096, &bobs)));
  const std::string other_segment =
      Cap("tenant:alice", auth::kCapRead, 0, 4096, auth::NowUnixMs() + 60'000, kMasterSegment + 1);
  EXPECT_TRUE(absl::IsPermissionDenied(
      Transfer(*alice, OpCode::kRead, buf.data(), h, 0, 4096, &other_segment)));
  const std::string forged = auth::CapabilityKey::FromSecret("not-the-cluster-secret-0123456789")
                                 .Issue(kScope, "tenant:alice", kMasterSegment,
                                        {auth::kCapRead, 0, 256 << 10, auth::NowUnixMs() + 60'000});
  EXPECT_TRUE(
      absl::IsPermissionDenied(Transfer(*alice, OpCode::kRead, buf.data(), h, 0, 4096, &forged)));

  // Every refusal was counted; the granted read still works afterwards.
  EXPECT_GE(owner.t->AccessDenials(), 9u);
  ASSERT_TRUE(Transfer(*alice, OpCode::kRead, buf.data(), h, 64 << 10, 64 << 10, &read).ok());
}

TEST(TcpTransportAccess, PipelinedReadsWithAndWithoutCapabilitiesAnswerEachOnItsOwn) {
  Owner owner;
  auto alice = Make(Opts(kAliceFile));
  const SegmentHandle h = Open(*alice, owner, owner.data_id);
  const std::string good = Cap("tenant:alice", auth::kCapRead, 0, 64 << 10);
  std::vector<std::vector<char>> bufs(6, std::vector<char>(4096, '\0'));
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < bufs.size(); ++i) {
    TransferRequest r{OpCode::kRead, bufs[i].data(), h, i * 4096, 4096};
    r.capability = i % 3 == 1 ? nullptr : good.data();  // requests 1 and 4 carry none
    reqs.push_back(r);
  }
  auto id = alice->Submit(reqs);
  ASSERT_TRUE(id.ok());
  auto res = alice->Wait(*id, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(res.ok());
  for (size_t i = 0; i < bufs.size(); ++i) {
    if (i % 3 == 1) {
      EXPECT_TRUE(absl::IsPermissionDenied(res->statuses[i])) << i << res->statuses[i];
    } else {
      ASSERT_TRUE(res->statuses[i].ok()) << i << res->statuses[i];
      EXPECT_EQ(0, std::memcmp(bufs[i].data(), owner.data.data() + i * 4096, 4096)) << i;
    }
  }
}

// More capabilities than a connection remembers (sets of a few, chosen by a
// MAC byte), read in turn twice: each still reads its own range and, found
// again or verified again after it was evicted, no other.
TEST(TcpTransportAccess, ManyCapabilitiesInTurnEachCoversOnlyItsOwnRange) {
  Owner owner;
  auto alice = Make(Opts(kAliceFile));
  const SegmentHandle h = Open(*alice, owner, owner.data_id);
  constexpr size_t kRanges = 400;  // more than the connection's 256
  constexpr uint64_t kLen = 512;
  std::vector<std::string> caps;
  for (size_t i = 0; i < kRanges; ++i) {
    caps.push_back(Cap("tenant:alice", auth::kCapRead, i * kLen, kLen));
  }
  std::vector<char> buf(kLen);
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < kRanges; ++i) {
      ASSERT_TRUE(Transfer(*alice, OpCode::kRead, buf.data(), h, i * kLen, kLen, &caps[i]).ok())
          << round << " " << i;
      ASSERT_EQ(0, std::memcmp(buf.data(), owner.data.data() + i * kLen, kLen)) << i;
      // Just used (so remembered): still not good for the next range.
      const uint64_t next = ((i + 1) % kRanges) * kLen;
      ASSERT_TRUE(absl::IsPermissionDenied(
          Transfer(*alice, OpCode::kRead, buf.data(), h, next, kLen, &caps[i])))
          << round << " " << i;
    }
  }
  EXPECT_EQ(owner.t->AccessDenials(), 2 * kRanges);
}

TEST(TcpTransportAccess, ClusterNeedsNoCapabilityAndDirectoryIsReadableByAll) {
  Owner owner;
  auto cluster = Make(Opts(kClusterFile));
  std::vector<char> buf(owner.data.size());
  const SegmentHandle h = Open(*cluster, owner, owner.data_id);
  ASSERT_TRUE(Transfer(*cluster, OpCode::kRead, buf.data(), h, 0, buf.size(), nullptr).ok());
  EXPECT_TRUE(buf == owner.data);

  auto bob = Make(Opts(kBobFile));
  const SegmentHandle dir = Open(*bob, owner, owner.directory_id);
  std::vector<char> d(owner.directory.size());
  ASSERT_TRUE(Transfer(*bob, OpCode::kRead, d.data(), dir, 0, d.size(), nullptr).ok());
  EXPECT_TRUE(d == owner.directory);
  EXPECT_TRUE(
      absl::IsPermissionDenied(Transfer(*bob, OpCode::kWrite, d.data(), dir, 0, 16, nullptr)));
  EXPECT_EQ(owner.directory[0], 'd');
}

TEST(TcpTransportAccess, WithoutAKeyTenantsReachEveryByteAsBefore) {
  std::vector<char> mem(4096, 'q');
  TcpTransport::Options o = Opts(kOwnerFile);
  auto owner = Make(std::move(o));
  const SegmentId id =
      owner->RegisterMemory(mem.data(), mem.size(), MemoryLocation::HostDram())->id;
  auto alice = Make(Opts(kAliceFile));
  auto h = alice->OpenSegment(owner->LocalEndpoint(), id);
  ASSERT_TRUE(h.ok());
  std::vector<char> buf(mem.size());
  ASSERT_TRUE(Transfer(*alice, OpCode::kRead, buf.data(), h->handle, 0, buf.size(), nullptr).ok());
  EXPECT_TRUE(buf == mem);
  EXPECT_EQ(owner->AccessDenials(), 0u);
}

}  // namespace
}  // namespace mooncake::transport
