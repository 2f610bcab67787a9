#include "mooncake/base/auth.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace mooncake::auth {
namespace {

constexpr std::string_view kFile =
    "# the cluster's tokens\n"
    "cluster       0123456789abcdef0123456789abcdef\n"
    "tenant:alice  aaaaaaaaaaaaaaaaaaaaaaaa   # alice's\n"
    "\n"
    "tenant:bob\tbbbbbbbbbbbbbbbbbbbbbbbb\r\n";

TEST(Credentials, ParsesNamesSecretsAndPicksClusterAsSelf) {
  auto c = Credentials::Parse(kFile, "tokens");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->entries().size(), 3u);
  EXPECT_EQ(c->self().name, "cluster");
  ASSERT_NE(c->SecretOf("tenant:bob"), nullptr);
  EXPECT_EQ(*c->SecretOf("tenant:bob"), "bbbbbbbbbbbbbbbbbbbbbbbb");
  EXPECT_EQ(c->SecretOf("tenant:carol"), nullptr);
  Credentials copy = *c;  // self() follows the copy's own entries
  EXPECT_EQ(&copy.self(), &copy.entries()[0]);
}

TEST(Credentials, AClientFileOfOneTenantProvesThatTenant) {
  auto c = Credentials::Parse("tenant:alice aaaaaaaaaaaaaaaaaaaaaaaa\n", "f");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->self().name, "tenant:alice");
  EXPECT_EQ(PrincipalFromName(c->self().name).tenant, "alice");
  EXPECT_TRUE(PrincipalFromName("cluster").cluster());
}

TEST(Credentials, RefusesMalformedFilesWithTheLine) {
  const struct {
    std::string_view text;
    std::string_view says;
  } cases[] = {
      {"", "empty token file"},
      {"# nothing\n\n", "empty token file"},
      {"cluster\n", "f:1: expected 'NAME SECRET', got 1 fields"},
      {"cluster a b c\n", "got 4 fields"},
      {"cluster short\n", "must be 16.."},
      {"admin 0123456789abcdef0123\n", "neither 'cluster' nor 'tenant:NAME'"},
      {"tenant: 0123456789abcdef0123\n", "neither"},
      {"cluster 0123456789abcdef0123\ncluster 0123456789abcdef0123\n",
       "f:2: principal 'cluster' listed twice"},
      {"tenant:a 0123456789abcdef0123\ntenant:b 0123456789abcdef0123\n", "no 'cluster' one"},
  };
  for (const auto& c : cases) {
    auto r = Credentials::Parse(c.text, "f");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(std::string(r.status().message()).find(c.says), std::string::npos) << r.status();
  }
}

TEST(Credentials, LoadFileRefusesAFileOthersMayRead) {
  const std::string path = ::testing::TempDir() + "/auth_test_tokens";
  {
    std::ofstream out(path);
    out << kFile;
  }
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  auto r = Credentials::LoadFile(path);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(std::string(r.status().message()).find("mode 0644"), std::string::npos) << r.status();
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  auto ok = LoadCredentials(path);
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_NE(*ok, nullptr);
  EXPECT_EQ((*ok)->entries().size(), 3u);
  EXPECT_EQ(LoadCredentials("").value(), nullptr);
  EXPECT_EQ(Credentials::LoadFile(path + ".absent").status().code(), absl::StatusCode::kNotFound);
  std::remove(path.c_str());
}

// RFC 4231 test case 2: HMAC-SHA256 of "what do ya want for nothing?" under "Jefe" —
// checks that the libcrypto call is wired as HMAC-SHA256 (not the transcript).
TEST(Proof, UsesHmacSha256) {
  unsigned char out[32];
  unsigned int len = 0;
  const std::string_view msg = "what do ya want for nothing?";
  HMAC(EVP_sha256(), "Jefe", 4, reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out,
       &len);
  ASSERT_EQ(len, 32u);
  EXPECT_EQ(out[0], 0x5b);
  EXPECT_EQ(out[1], 0xdc);
  EXPECT_EQ(out[31], 0x43);
}

TEST(Handshake, MatchingSecretsAuthenticateBothWays) {
  auto server_creds = std::make_shared<const Credentials>(*Credentials::Parse(kFile, "s"));
  auto client_creds = *Credentials::Parse("tenant:alice aaaaaaaaaaaaaaaaaaaaaaaa\n", "c");
  ClientHandshake client(client_creds, "rpc");
  ServerHandshake server(server_creds, "rpc");
  auto challenge = server.OnHello(client.Hello());
  ASSERT_TRUE(challenge.ok()) << challenge.status();
  auto proof = client.Proof(*challenge);
  ASSERT_TRUE(proof.ok());
  Principal who;
  auto ok = server.OnProof(*proof, &who);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(who.name, "tenant:alice");
  EXPECT_EQ(who.tenant, "alice");
  EXPECT_TRUE(client.Verify(*ok).ok());
}

TEST(Handshake, WrongSecretUnknownNameReplayAndOtherProtocolAreRefused) {
  auto server_creds = std::make_shared<const Credentials>(*Credentials::Parse(kFile, "s"));
  const auto run = [&](std::string_view client_file, std::string_view client_proto,
                       std::string* replay) -> absl::Status {
    auto cc = Credentials::Parse(client_file, "c");
    if (!cc.ok()) return cc.status();
    ClientHandshake client(*cc, client_proto);
    ServerHandshake server(server_creds, "rpc");
    auto challenge = server.OnHello(client.Hello());
    if (!challenge.ok()) return challenge.status();
    auto proof = client.Proof(*challenge);
    if (!proof.ok()) return proof.status();
    Principal who;
    auto ok = server.OnProof(replay != nullptr && !replay->empty() ? *replay : *proof, &who);
    if (replay != nullptr) *replay = *proof;
    return ok.status();
  };
  EXPECT_EQ(run("tenant:alice aaaaaaaaaaaaaaaaaaaaaaab\n", "rpc", nullptr).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(run("tenant:carol cccccccccccccccccccccccc\n", "rpc", nullptr).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(run("tenant:alice aaaaaaaaaaaaaaaaaaaaaaaa\n", "tcp", nullptr).code(),
            absl::StatusCode::kUnauthenticated);
  std::string replay;
  EXPECT_TRUE(run("tenant:alice aaaaaaaaaaaaaaaaaaaaaaaa\n", "rpc", &replay).ok());
  ASSERT_FALSE(replay.empty());
  // The same proof on a new connection (fresh nonces) is refused.
  EXPECT_EQ(run("tenant:alice aaaaaaaaaaaaaaaaaaaaaaaa\n", "rpc", &replay).code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(Handshake, AServerWithoutTheSecretCannotPoseAsTheCluster) {
  auto real = *Credentials::Parse("cluster 0123456789abcdef0123456789abcdef\n", "c");
  auto fake = std::make_shared<const Credentials>(
      *Credentials::Parse("cluster ffffffffffffffffffffffffffffffff\n", "f"));
  ClientHandshake client(real, "rpc");
  ServerHandshake server(fake, "rpc");
  auto challenge = server.OnHello(client.Hello());
  ASSERT_TRUE(challenge.ok());
  auto proof = client.Proof(*challenge);
  ASSERT_TRUE(proof.ok());
  Principal who;
  EXPECT_FALSE(server.OnProof(*proof, &who).ok());
  // Even a made-up OK does not pass the client's check.
  EXPECT_EQ(client.Verify(std::string(32, '\0')).code(), absl::StatusCode::kUnauthenticated);
}

TEST(Handshake, MalformedMessagesAreErrorsNotCrashes) {
  auto creds = std::make_shared<const Credentials>(*Credentials::Parse(kFile, "s"));
  ServerHandshake server(creds, "rpc");
  for (std::string_view bad :
       {std::string_view(""), std::string_view("\x01"), std::string_view("\x02\x00", 2),
        std::string_view("\x01\x05"
                         "abc")}) {
    EXPECT_FALSE(server.OnHello(bad).ok());
  }
  Principal who;
  EXPECT_EQ(ServerHandshake(creds, "rpc").OnProof("x", &who).status().code(),
            absl::StatusCode::kUnauthenticated);
  auto cc = *Credentials::Parse(kFile, "c");
  ClientHandshake client(cc, "rpc");
  EXPECT_FALSE(client.Proof("short").ok());
}

TEST(SecretMatches, ComparesWholeSecrets) {
  EXPECT_TRUE(SecretMatches("0123456789abcdef", "0123456789abcdef"));
  EXPECT_FALSE(SecretMatches("0123456789abcdef", "0123456789abcdeF"));
  EXPECT_FALSE(SecretMatches("0123456789abcde", "0123456789abcdef"));
  EXPECT_FALSE(SecretMatches("", "0123456789abcdef"));
}

}  // namespace
}  // namespace mooncake::auth
