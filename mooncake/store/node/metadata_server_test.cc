#include "mooncake/store/node/metadata_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mooncake/base/auth.h"
#include "mooncake/store/node/testing/http_client.h"

namespace mooncake::node {
namespace {

using node_testing::HttpRaw;

class MetadataServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = MetadataServer::Start(
        {.port = 0,
         .store = {
             .max_key_bytes = 64, .max_value_bytes = 1 << 20, .max_total_bytes = (3 << 20) + 64}});
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  absl::StatusOr<node_testing::HttpAnswer> Send(const std::string& method,
                                                const std::string& target,
                                                const std::string& body = "",
                                                const std::string& headers = "") {
    std::string req = absl::StrCat(method, " ", target, " HTTP/1.1\r\nHost: t\r\n", headers);
    if (method == "PUT") absl::StrAppend(&req, "Content-Length: ", body.size(), "\r\n");
    absl::StrAppend(&req, "\r\n", body);
    return HttpRaw(server_->port(), req);
  }
  int Status(const std::string& method, const std::string& target, const std::string& body = "") {
    auto a = Send(method, target, body);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? a->status : -1;
  }
  std::unique_ptr<MetadataServer> server_;
};

TEST_F(MetadataServerTest, PutGetDeleteWithDecodedKeys) {
  EXPECT_EQ(Status("GET", "/metadata?key=a"), 404);
  EXPECT_EQ(Status("PUT", "/metadata?key=mooncake%2Fram%2F10.0.0.1+x", "{\"segments\":1}"), 200);
  auto a = Send("GET", "/metadata?key=mooncake/ram/10.0.0.1%20x");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 200);
  EXPECT_EQ(a->body, "{\"segments\":1}");
  EXPECT_EQ(*server_->store().Get("mooncake/ram/10.0.0.1 x"), "{\"segments\":1}");
  // Replace, then the other parameters are ignored and key= found among them.
  EXPECT_EQ(Status("PUT", "/metadata?x=1&key=mooncake/ram/10.0.0.1+x", "v2"), 200);
  a = Send("GET", "/metadata?key=mooncake/ram/10.0.0.1+x&y");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->body, "v2");
  a = Send("HEAD", "/metadata?key=mooncake/ram/10.0.0.1+x");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 200);
  EXPECT_TRUE(absl::StrContains(a->head, "Content-Length: 2")) << a->head;
  EXPECT_EQ(a->body, "");
  EXPECT_EQ(Status("DELETE", "/metadata?key=mooncake/ram/10.0.0.1+x"), 200);
  EXPECT_EQ(Status("DELETE", "/metadata?key=mooncake/ram/10.0.0.1+x"), 404);
  EXPECT_EQ(Status("GET", "/metadata?key=mooncake/ram/10.0.0.1+x"), 404);
  // A binary body survives, NUL bytes included.
  const std::string bin("\0\r\n\r\n\xff", 6);
  EXPECT_EQ(Status("PUT", "/metadata?key=bin", bin), 200);
  a = Send("GET", "/metadata?key=bin");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->body, bin);
}

TEST_F(MetadataServerTest, BadRequestsAreRefusedWithTheirStatus) {
  EXPECT_EQ(Status("GET", "/metadata"), 400);          // no key parameter
  EXPECT_EQ(Status("GET", "/metadata?k=a"), 400);      // no key parameter
  EXPECT_EQ(Status("GET", "/metadata?key="), 400);     // empty key
  EXPECT_EQ(Status("GET", "/metadata?key=%zz"), 400);  // bad escape
  EXPECT_EQ(Status("PUT", "/metadata?key=" + std::string(65, 'k'), "v"), 400);
  EXPECT_EQ(Status("POST", "/metadata?key=a", ""), 405);
  auto a = HttpRaw(server_->port(), "PUT /metadata?key=a HTTP/1.1\r\n\r\nabc");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 411);
  a = HttpRaw(
      server_->port(),
      "PUT /metadata?key=a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 501);
  a = HttpRaw(server_->port(), "PUT /metadata?key=a HTTP/1.1\r\nContent-Length: 1x\r\n\r\n");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 400);
  // Over the value limit: refused from the head, before the body is read.
  a = HttpRaw(
      server_->port(),
      absl::StrCat("PUT /metadata?key=a HTTP/1.1\r\nContent-Length: ", (1 << 20) + 1, "\r\n\r\n"));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 413);
  EXPECT_TRUE(absl::IsNotFound(server_->store().Get("a").status()));
  EXPECT_EQ(Status("GET", "/other?key=a"), 404);
}

// A value at the limit, sent in many segments, arrives whole; the total
// limit answers 507.
TEST_F(MetadataServerTest, LargeValuesAndTheTotalLimit) {
  std::string big(1 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + i / 4096);
  EXPECT_EQ(Status("PUT", "/metadata?key=big1", big), 200);
  auto a = Send("GET", "/metadata?key=big1");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->body.size(), big.size());
  EXPECT_TRUE(a->body == big);
  EXPECT_EQ(Status("PUT", "/metadata?key=big2", big), 200);
  EXPECT_EQ(Status("PUT", "/metadata?key=big3", big), 200);  // 3 MiB + 12 bytes: fits
  EXPECT_EQ(Status("PUT", "/metadata?key=big4", big), 507);
  EXPECT_EQ(Status("DELETE", "/metadata?key=big1"), 200);
  EXPECT_EQ(Status("PUT", "/metadata?key=big4", big), 200);
}

// curl sends "Expect: 100-continue" before bodies over 1 KiB and waits for
// the interim answer (up to a second) before sending the body.
TEST_F(MetadataServerTest, ExpectContinueGetsAnInterimAnswer) {
  const int fd = node_testing::ConnectLoopback(server_->port());
  ASSERT_GE(fd, 0);
  const std::string head =
      "PUT /metadata?key=c HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n";
  ASSERT_EQ(::send(fd, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
  char buf[64];
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 2000), 1) << "no interim answer";
  const ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
  ASSERT_GT(r, 0);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(r)), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_EQ(::send(fd, "hello", 5, 0), 5);
  auto a = node_testing::ReadAnswer(fd);
  ::close(fd);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 200);
  EXPECT_EQ(*server_->store().Get("c"), "hello");
}

TEST(MetadataServer, PortInUseAndBadLimitsAreErrors) {
  auto first = MetadataServer::Start({.port = 0});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = MetadataServer::Start({.port = (*first)->port()});
  EXPECT_TRUE(absl::IsAlreadyExists(second.status())) << second.status();
  auto bad = MetadataServer::Start(
      {.port = 0, .store = {.max_key_bytes = 8, .max_value_bytes = 64, .max_total_bytes = 64}});
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
}

// With a token file, every method needs "Authorization: Bearer <secret>"
// with a secret the file lists (a tenant's too); anything else is 401 and
// changes nothing.
TEST(MetadataServer, ATokenFileRefusesRequestsWithoutAListedSecret) {
  auto creds = auth::Credentials::Parse(
      "cluster 0123456789abcdef0123456789abcdef\ntenant:a aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
      "test");
  ASSERT_TRUE(creds.ok()) << creds.status();
  auto server = MetadataServer::Start(
      {.port = 0, .auth = std::make_shared<const auth::Credentials>(*std::move(creds))});
  ASSERT_TRUE(server.ok()) << server.status();
  const uint16_t port = (*server)->port();
  auto put = [&](std::string_view header) {
    return HttpRaw(port, absl::StrCat("PUT /metadata?key=k HTTP/1.1\r\n", std::string(header),
                                      "Content-Length: 1\r\n\r\nv"));
  };
  for (std::string_view bad : {"", "Authorization: Bearer \r\n",
                               "Authorization: Bearer 0123456789abcdef0123456789abcdeX\r\n",
                               "Authorization: Basic 0123456789abcdef0123456789abcdef\r\n",
                               "Authorization: 0123456789abcdef0123456789abcdef\r\n"}) {
    auto a = put(bad);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->status, 401) << bad;
    EXPECT_FALSE((*server)->store().Get("k").ok()) << bad;
  }
  auto a = put("Authorization: Bearer aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 200);
  a = HttpRaw(port, "GET /metadata?key=k HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 401);
  EXPECT_NE(a->body, "v");
  a = HttpRaw(port,
              "GET /metadata?key=k HTTP/1.1\r\nAuthorization: Bearer "
              "0123456789abcdef0123456789abcdef\r\n\r\n");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 200);
  EXPECT_EQ(a->body, "v");
  a = HttpRaw(port, "DELETE /metadata?key=k HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 401);
  EXPECT_TRUE((*server)->store().Get("k").ok());
}

}  // namespace
}  // namespace mooncake::node
