#include "mooncake/store/node/http_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "mooncake/store/node/testing/http_client.h"

namespace mooncake::node {
namespace {

using node_testing::HttpGet;
using node_testing::HttpRaw;

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpServerOptions o = {}) {
    server_ = std::make_unique<HttpServer>(std::move(o));
    ASSERT_TRUE(
        server_
            ->Handle("/hello",
                     [](const HttpRequest& r) { return HttpResponse{.body = "hi " + r.query}; })
            .ok());
    ASSERT_TRUE(server_
                    ->Handle("/down",
                             [](const HttpRequest&) {
                               return HttpResponse{.status = 503, .body = "not yet\n"};
                             })
                    .ok());
    ASSERT_TRUE(server_->Start().ok());
    ASSERT_NE(server_->port(), 0);
  }
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, ServesHandlersWithLengthAndClose) {
  StartServer();
  auto a = HttpGet(server_->port(), "/hello?abc");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 200);
  EXPECT_EQ(a->body, "hi abc");
  EXPECT_TRUE(absl::StrContains(a->head, "Content-Length: 6"));
  EXPECT_TRUE(absl::StrContains(a->head, "Connection: close"));
  a = HttpGet(server_->port(), "/down");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 503);
  EXPECT_EQ(a->body, "not yet\n");
  EXPECT_EQ(server_->stats().requests, 2u);
}

// HEAD gets GET's status and headers (its Content-Length too) and no body,
// for probes that only look at the status.
TEST_F(HttpServerTest, HeadAnswersWithTheHeadOnly) {
  StartServer();
  auto a = HttpRaw(server_->port(), "HEAD /hello?abc HTTP/1.1\r\nHost: t\r\n\r\n");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 200);
  EXPECT_TRUE(absl::StrContains(a->head, "Content-Length: 6")) << a->head;
  EXPECT_EQ(a->body, "");
  a = HttpRaw(server_->port(), "HEAD /down HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 503);
  EXPECT_EQ(a->body, "");
  a = HttpRaw(server_->port(), "HEAD /nope HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 404);
  EXPECT_EQ(a->body, "");
  // Rejected while parsing: the status, still no body.
  a = HttpRaw(server_->port(), "HEAD /hello HTTP/1.1\r\nbad header line\r\n\r\n");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 400);
  EXPECT_EQ(a->body, "");
  a = HttpRaw(server_->port(), "HEAD /hello HTTP/1.1\r\nX: " + std::string(9000, 'x') + "\r\n\r\n");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 431);
  EXPECT_EQ(a->body, "");
  a = HttpRaw(server_->port(), "GET /hello HTTP/1.1\r\nbad header line\r\n\r\n");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 400);
  EXPECT_NE(a->body, "");  // GET's rejection says why
}

TEST_F(HttpServerTest, ErrorAnswers) {
  StartServer({.limits = {.max_head_bytes = 256, .max_headers = 4}});
  auto a = HttpGet(server_->port(), "/nope");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 404);
  EXPECT_TRUE(absl::StrContains(a->body, "/hello"));  // says what is served
  a = HttpRaw(server_->port(), "POST /hello HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 405);
  EXPECT_TRUE(absl::StrContains(a->head, "Allow: GET, HEAD"));
  a = HttpRaw(server_->port(), "hello there\r\n\r\n");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 400);
  a = HttpRaw(server_->port(), "GET /hello HTTP/1.1\r\nX: " + std::string(1000, 'x') + "\r\n\r\n");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 431);
  a = HttpRaw(server_->port(), "GET /hello HTTP/1.1\r\na:1\r\nb:1\r\nc:1\r\nd:1\r\ne:1\r\n\r\n");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 431);
  EXPECT_EQ(server_->stats().rejected, 5u);
  EXPECT_EQ(server_->stats().requests, 0u);
}

TEST_F(HttpServerTest, RequestSplitAcrossSends) {
  StartServer();
  const int fd = node_testing::ConnectLoopback(server_->port());
  ASSERT_GE(fd, 0);
  for (std::string_view part : {"GE", "T /hel", "lo?x HTTP/1.1\r\nHo", "st: a\r\n", "\r\n"}) {
    ASSERT_EQ(::send(fd, part.data(), part.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(part.size()));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto a = node_testing::ReadAnswer(fd);
  ::close(fd);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 200);
  EXPECT_EQ(a->body, "hi x");
}

TEST_F(HttpServerTest, SlowHeadTimesOutWith408) {
  StartServer({.idle_timeout_ms = 200});
  const int fd = node_testing::ConnectLoopback(server_->port());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::send(fd, "GET /hello", 10, MSG_NOSIGNAL), 10);
  auto a = node_testing::ReadAnswer(fd);
  ::close(fd);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 408);
}

TEST_F(HttpServerTest, OverMaxConnectionsIs503AndRecovers) {
  StartServer({.max_connections = 1, .idle_timeout_ms = 10'000, .idle_evict_ms = 60'000});
  const int idle = node_testing::ConnectLoopback(server_->port());  // holds the only slot
  ASSERT_GE(idle, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // accepted
  auto a = HttpGet(server_->port(), "/hello");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 503);
  ::close(idle);  // frees the slot
  for (int i = 0; i < 50; ++i) {
    a = HttpGet(server_->port(), "/hello");
    if (a.ok() && a->status == 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 200);
}

// Idle connections filling every slot do not keep a probe out: the one idle
// longest gives its slot up (408) once it has waited idle_evict_ms.
TEST_F(HttpServerTest, IdleConnectionsGiveTheirSlotsToNewcomers) {
  StartServer({.max_connections = 4, .idle_timeout_ms = 10'000, .idle_evict_ms = 50});
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(node_testing::ConnectLoopback(server_->port()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // accepted, idle > 50 ms
  for (int i = 0; i < 6; ++i) {
    auto a = HttpGet(server_->port(), "/hello");
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->status, 200) << "probe " << i;
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
  }
  int evicted = 0;
  for (int fd : idle) {
    char buf[256];
    const ssize_t n = ::recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    if (n > 0) {
      buf[n] = '\0';
      evicted += std::string_view(buf).starts_with("HTTP/1.1 408");
    }
    ::close(fd);
  }
  EXPECT_GE(evicted, 1) << "the idle ones were answered 408";
  EXPECT_EQ(server_->stats().requests, 6u);
}

TEST_F(HttpServerTest, PortInUseIsAClearError) {
  StartServer();
  HttpServer second({.port = server_->port()});
  const absl::Status s = second.Start();
  EXPECT_TRUE(absl::IsAlreadyExists(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "already in use")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), std::to_string(server_->port()))) << s;
}

TEST_F(HttpServerTest, HandleRules) {
  HttpServer s({});
  EXPECT_TRUE(absl::IsInvalidArgument(
      s.Handle("metrics", [](const HttpRequest&) { return HttpResponse{}; })));
  ASSERT_TRUE(s.Handle("/a", [](const HttpRequest&) { return HttpResponse{}; }).ok());
  EXPECT_TRUE(
      absl::IsAlreadyExists(s.Handle("/a", [](const HttpRequest&) { return HttpResponse{}; })));
  ASSERT_TRUE(s.Start().ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(
      s.Handle("/b", [](const HttpRequest&) { return HttpResponse{}; })));
  EXPECT_TRUE(absl::IsFailedPrecondition(s.Start()));
  s.Stop();
  s.Stop();                                    // idempotent
  EXPECT_FALSE(HttpGet(s.port(), "/a").ok());  // no longer listening
}

TEST_F(HttpServerTest, StopWithOpenConnections) {
  StartServer();
  const int fd = node_testing::ConnectLoopback(server_->port());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::send(fd, "GET /hel", 8, MSG_NOSIGNAL), 8);
  server_->Stop();  // must not wait for the half-sent request
  char c;
  EXPECT_LE(::recv(fd, &c, 1, 0), 0);  // closed
  ::close(fd);
}

// PUT and DELETE only where a path opts in; there the body arrives whole
// however it is split, within the path's limit, and a stalled body is 408.
TEST(HttpServerBodies, WritesAreOptInAndBodiesArriveWhole) {
  HttpServer s({.idle_timeout_ms = 300});
  ASSERT_TRUE(s.Handle("/ro", [](const HttpRequest& r) {
                 return HttpResponse{.body = r.method + ":" + r.body};
               }).ok());
  ASSERT_TRUE(s.Handle("/rw",
                       [](const HttpRequest& r) {
                         return HttpResponse{.body = r.method + ":" +
                                                     std::to_string(r.body.size()) + ":" +
                                                     r.body.substr(0, 8)};
                       },
                       {.writes = true, .max_body_bytes = 200'000})
                  .ok());
  ASSERT_TRUE(s.Start().ok());
  // A read-only path: PUT is 405 listing GET and HEAD; a GET's body is ignored.
  auto a = HttpRaw(s.port(), "PUT /ro HTTP/1.1\r\nContent-Length: 1\r\n\r\nx");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 405);
  EXPECT_TRUE(absl::StrContains(a->head, "Allow: GET, HEAD\r\n")) << a->head;
  a = HttpRaw(s.port(), "GET /ro HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->body, "GET:");
  // A writable path lists its methods for POST.
  a = HttpRaw(s.port(), "POST /rw HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 405);
  EXPECT_TRUE(absl::StrContains(a->head, "Allow: GET, HEAD, PUT, DELETE")) << a->head;
  a = HttpRaw(s.port(), "DELETE /rw HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->body, "DELETE:0:");
  // 150 KB in pieces, the head split too.
  const std::string body(150'000, 'b');
  const int fd = node_testing::ConnectLoopback(s.port());
  ASSERT_GE(fd, 0);
  const std::string req = "PUT /rw HTTP/1.1\r\nContent-Length: 150000\r\n\r\n" + body;
  for (size_t at = 0; at < req.size();) {
    const size_t n = std::min<size_t>(at == 0 ? 10 : 40'000, req.size() - at);
    ASSERT_EQ(::send(fd, req.data() + at, n, MSG_NOSIGNAL), static_cast<ssize_t>(n));
    at += n;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  a = node_testing::ReadAnswer(fd);
  ::close(fd);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->body, "PUT:150000:bbbbbbbb");
  // Over the limit: 413 from the head alone.
  a = HttpRaw(s.port(), "PUT /rw HTTP/1.1\r\nContent-Length: 200001\r\n\r\n");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 413);
  // A body that stops coming: 408 after idle_timeout_ms without progress.
  a = HttpRaw(s.port(), "PUT /rw HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->status, 408);
  EXPECT_EQ(s.stats().requests, 3u);  // GET /ro, DELETE and PUT /rw
}

TEST(HttpServerActions, ActionPathsTakePostOnly) {
  HttpServer s({});
  int runs = 0;
  ASSERT_TRUE(s.Handle("/act",
                       [&runs](const HttpRequest& r) {
                         ++runs;
                         return HttpResponse{.body = r.method + " " + r.query};
                       },
                       {.action = true})
                  .ok());
  ASSERT_TRUE(s.Start().ok());
  // GET and HEAD (a crawler, a prefetch) never run it.
  for (const char* req : {"GET /act HTTP/1.1\r\n\r\n", "HEAD /act HTTP/1.1\r\n\r\n",
                          "PUT /act HTTP/1.1\r\nContent-Length: 0\r\n\r\n"}) {
    auto a = HttpRaw(s.port(), req);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->status, 405) << req;
    EXPECT_TRUE(absl::StrContains(a->head, "Allow: POST\r\n")) << a->head;
  }
  EXPECT_EQ(runs, 0);
  auto a = HttpRaw(s.port(), "POST /act?x=1 HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, 200);
  EXPECT_EQ(a->body, "POST x=1");
  EXPECT_EQ(runs, 1);
}

}  // namespace
}  // namespace mooncake::node
