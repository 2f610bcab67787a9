#include "mooncake/base/capability.h"

#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace mooncake::auth {
namespace {

constexpr std::string_view kWorker = "router://h/1|tcp://127.0.0.1:1#3";
constexpr int64_t kNow = 1'800'000'000'000;

CapabilityKey Key() { return CapabilityKey::FromSecret("0123456789abcdef0123456789abcdef"); }

std::string ReadCap(uint64_t off = 4096, uint64_t len = 8192, int64_t expiry = kNow + 1000) {
  return Key().Issue(kWorker, "tenant:alice", 7, {kCapRead, off, len, expiry});
}

TEST(Capability, IssuedOneChecksForItsRangeRightAndHolder) {
  const std::string cap = ReadCap();
  ASSERT_EQ(cap.size(), kCapabilityBytes);
  CapabilityGrant g;
  EXPECT_TRUE(Key().Check(kWorker, "tenant:alice", 7, cap, kCapRead, 4096, 8192, kNow, &g).ok());
  EXPECT_EQ(g, (CapabilityGrant{kCapRead, 4096, 8192, kNow + 1000}));
  // A sub-range (a slice of the request) is covered too.
  EXPECT_TRUE(Key().Check(kWorker, "tenant:alice", 7, cap, kCapRead, 8192, 4096, kNow).ok());
  auto r = DecodeCapabilityGrant(cap);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, g);
}

TEST(Capability, RefusesEveryOtherUse) {
  const std::string cap = ReadCap();
  const auto denied = [](const absl::Status& s, std::string_view why) {
    EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
    EXPECT_NE(std::string(s.message()).find(why), std::string::npos) << s;
  };
  denied(Key().Check(kWorker, "tenant:bob", 7, cap, kCapRead, 4096, 8192, kNow), "does not verify");
  denied(Key().Check("router://h/2|x#3", "tenant:alice", 7, cap, kCapRead, 4096, 1, kNow),
         "does not verify");
  denied(Key().Check(kWorker, "tenant:alice", 8, cap, kCapRead, 4096, 1, kNow), "does not verify");
  denied(CapabilityKey::FromSecret("another-cluster-secret-0123456789")
             .Check(kWorker, "tenant:alice", 7, cap, kCapRead, 4096, 1, kNow),
         "does not verify");
  denied(Key().Check(kWorker, "tenant:alice", 7, cap, kCapWrite, 4096, 1, kNow), "not write");
  denied(Key().Check(kWorker, "tenant:alice", 7, cap, kCapRead, 4096, 1, kNow + 1001), "expired");
  denied(Key().Check(kWorker, "tenant:alice", 7, cap, kCapRead, 4095, 2, kNow), "outside");
  denied(Key().Check(kWorker, "tenant:alice", 7, cap, kCapRead, 12287, 2, kNow), "outside");
  denied(Key().Check(kWorker, "tenant:alice", 7, cap, kCapRead, 4096, 8193, kNow), "outside");
  denied(Key().Check(kWorker, "tenant:alice", 7, cap, kCapRead, ~uint64_t{0}, 2, kNow), "outside");
  // Widening the range (or any byte) after issue breaks the MAC.
  std::string wider = cap;
  wider[17] = static_cast<char>(wider[17] + 1);
  denied(Key().Check(kWorker, "tenant:alice", 7, wider, kCapRead, 4096, 1, kNow),
         "does not verify");
  std::string later = cap;
  later[31] = 0x7f;
  denied(Key().Check(kWorker, "tenant:alice", 7, later, kCapRead, 4096, 1, kNow),
         "does not verify");
}

TEST(Capability, MalformedBytesAreRefusedNotTrusted) {
  const std::string cap = ReadCap();
  EXPECT_TRUE(absl::IsPermissionDenied(
      Key().Check(kWorker, "tenant:alice", 7, cap.substr(1), kCapRead, 4096, 1, kNow)));
  EXPECT_TRUE(absl::IsPermissionDenied(
      Key().Check(kWorker, "tenant:alice", 7, "", kCapRead, 4096, 1, kNow)));
  for (auto [at, value] : {std::pair<size_t, char>{0, 2}, {1, 0}, {1, 4}, {2, 1}, {7, 1}}) {
    std::string bad = cap;
    bad[at] = value;
    EXPECT_FALSE(DecodeCapabilityGrant(bad).ok()) << at;
    EXPECT_TRUE(absl::IsPermissionDenied(
        Key().Check(kWorker, "tenant:alice", 7, bad, kCapRead, 4096, 1, kNow)))
        << at;
  }
  // An empty range and one that wraps never decode.
  EXPECT_FALSE(DecodeCapabilityGrant(ReadCap(0, 0)).ok());
  EXPECT_FALSE(DecodeCapabilityGrant(ReadCap(~uint64_t{0}, 2)).ok());
}

TEST(Capability, KeyComesFromTheClusterSecretOnly) {
  auto cluster = Credentials::Parse(
      "cluster 0123456789abcdef0123456789abcdef\ntenant:a aaaaaaaaaaaaaaaaaaaa\n", "f");
  ASSERT_TRUE(cluster.ok());
  auto key = CapabilityKey::FromCredentials(*cluster);
  ASSERT_TRUE(key.ok());
  EXPECT_TRUE(key->Check(kWorker, "tenant:alice", 7, ReadCap(), kCapRead, 4096, 1, kNow).ok());
  auto tenant = Credentials::Parse("tenant:a aaaaaaaaaaaaaaaaaaaa\n", "f");
  ASSERT_TRUE(tenant.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(CapabilityKey::FromCredentials(*tenant).status()));
}

TEST(Capability, ReadWriteGrantCoversBoth) {
  const std::string cap =
      Key().Issue(kWorker, "tenant:alice", 7, {kCapRead | kCapWrite, 0, 100, kNow});
  EXPECT_TRUE(Key().Check(kWorker, "tenant:alice", 7, cap, kCapWrite, 0, 100, kNow).ok());
  EXPECT_TRUE(Key().Check(kWorker, "tenant:alice", 7, cap, kCapRead, 99, 1, kNow).ok());
}

TEST(Capability, VerifiedCapabilitiesRemembersOnlyWhatVerified) {
  VerifiedCapabilities v(std::make_shared<const CapabilityKey>(Key()), 64);
  const std::string cap = ReadCap();
  for (int i = 0; i < 3; ++i) {  // the first checks the MAC, the others the memo
    EXPECT_TRUE(v.Check(kWorker, "tenant:alice", 7, cap, kCapRead, 4096, 8192, kNow).ok());
  }
  // A remembered capability is still checked for rights, range and expiry,
  // and is not another holder's or target's.
  EXPECT_TRUE(
      absl::IsPermissionDenied(v.Check(kWorker, "tenant:alice", 7, cap, kCapWrite, 4096, 1, kNow)));
  EXPECT_TRUE(absl::IsPermissionDenied(
      v.Check(kWorker, "tenant:alice", 7, cap, kCapRead, 4096, 8193, kNow)));
  EXPECT_TRUE(absl::IsPermissionDenied(
      v.Check(kWorker, "tenant:alice", 7, cap, kCapRead, 4096, 1, kNow + 1001)));
  EXPECT_TRUE(
      absl::IsPermissionDenied(v.Check(kWorker, "tenant:bob", 7, cap, kCapRead, 4096, 1, kNow)));
  EXPECT_TRUE(
      absl::IsPermissionDenied(v.Check(kWorker, "tenant:alice", 8, cap, kCapRead, 4096, 1, kNow)));
  // A forged one is refused every time (failures are not remembered).
  std::string forged = cap;
  forged[20] = 1;
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(absl::IsPermissionDenied(
        v.Check(kWorker, "tenant:alice", 7, forged, kCapRead, 4096, 1, kNow)));
  }
  // More distinct capabilities than it holds: each still checks.
  for (uint64_t i = 0; i < 200; ++i) {
    const std::string c = ReadCap(i * 10, 10);
    EXPECT_TRUE(v.Check(kWorker, "tenant:alice", 7, c, kCapRead, i * 10, 10, kNow).ok()) << i;
  }
}

TEST(Capability, IssuedCapabilitiesGivesEqualGrantsEqualBytes) {
  IssuedCapabilities issued(std::make_shared<const CapabilityKey>(Key()), 64);
  const CapabilityGrant g{kCapRead, 4096, 8192, kNow + 1000};
  const std::string a = issued.Issue(kWorker, "tenant:alice", 7, g);
  EXPECT_EQ(a, ReadCap());
  EXPECT_EQ(issued.Issue(kWorker, "tenant:alice", 7, g), a);
  EXPECT_NE(issued.Issue(kWorker, "tenant:bob", 7, g), a);
  EXPECT_NE(issued.Issue(kWorker, "tenant:alice", 8, g), a);
  CapabilityGrant later = g;
  later.expiry_unix_ms += 1000;
  EXPECT_NE(issued.Issue(kWorker, "tenant:alice", 7, later), a);
  CapabilityGrant write = g;
  write.rights = kCapWrite;
  const std::string w = issued.Issue(kWorker, "tenant:alice", 7, write);
  EXPECT_TRUE(Key().Check(kWorker, "tenant:alice", 7, w, kCapWrite, 4096, 1, kNow).ok());
  EXPECT_TRUE(absl::IsPermissionDenied(
      Key().Check(kWorker, "tenant:alice", 7, w, kCapRead, 4096, 1, kNow)));
}

TEST(Capability, IssuedCapabilitiesThreadCacheNeverCrossesIssuersOrGrants) {
  // Two issuers with different keys, in one thread: each one's bytes are its
  // own key's, however the thread's cache of recent grants is shared.
  const auto other_key = std::make_shared<const CapabilityKey>(CapabilityKey::FromSecret("other"));
  IssuedCapabilities a(std::make_shared<const CapabilityKey>(Key()));
  IssuedCapabilities b(other_key);
  const CapabilityGrant g{kCapRead, 4096, 8192, kNow + 1000};
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(a.Issue(kWorker, "tenant:alice", 7, g), ReadCap());
    EXPECT_EQ(b.Issue(kWorker, "tenant:alice", 7, g),
              other_key->Issue(kWorker, "tenant:alice", 7, g));
  }
  // Many more grants than the cache holds, issued twice in turn: every
  // answer is the key's own signature for exactly that grant and holder.
  const std::string workers[] = {std::string(kWorker), "10.0.0.2:7000:worker-2"};
  for (int round = 0; round < 2; ++round) {
    for (uint64_t i = 0; i < 300; ++i) {
      const CapabilityGrant gi{static_cast<uint8_t>(i % 2 == 0 ? kCapRead : kCapWrite), i * 4096,
                               4096 + i % 3, kNow + static_cast<int64_t>(i % 5) * 1000};
      const std::string& w = workers[i % 2];
      const std::string who = i % 3 == 0 ? "tenant:bob" : "tenant:alice";
      ASSERT_EQ(a.Issue(w, who, i % 4, gi), Key().Issue(w, who, i % 4, gi)) << round << " " << i;
    }
  }
  // Another thread gets the same bytes for the same grant.
  std::string from_thread;
  std::thread t([&] { from_thread = a.Issue(kWorker, "tenant:alice", 7, g); });
  t.join();
  EXPECT_EQ(from_thread, ReadCap());
}

TEST(Capability, QuantizedExpiryRoundsDownKeepingHalfTheTime) {
  EXPECT_EQ(QuantizedExpiry(10'400, 5'000), 15'000);  // exact 15,400
  EXPECT_EQ(QuantizedExpiry(10'999, 5'000), 15'000);  // keeps 4,001 ms
  EXPECT_EQ(QuantizedExpiry(10'000, 5'000), 15'000);
  EXPECT_EQ(QuantizedExpiry(10'900, 1'000), 11'900);  // rounding would keep 100 of 1,000 ms
  EXPECT_EQ(QuantizedExpiry(10'300, 1'000), 11'000);  // keeps 700
  for (int64_t now = 0; now < 5'000; now += 37) {
    const int64_t e = QuantizedExpiry(now, 2'000);
    EXPECT_LE(e, now + 2'000);
    EXPECT_GE(e, now + 1'000);
  }
}

}  // namespace
}  // namespace mooncake::auth
