#include "mooncake/transport/compat/metadata_client.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "mooncake/base/assert.h"
#include "mooncake/store/node/metadata_server.h"
#include "mooncake/transport/compat/http_client.h"

namespace mooncake::transport::compat {
namespace {

TEST(HttpUrlTest, ParsesHostPortAndPath) {
  absl::StatusOr<HttpUrl> u = ParseHttpUrl("http://127.0.0.1:8080/metadata");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->path, "/metadata");
  u = ParseHttpUrl("http://[::1]:9/x?a=b");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->path, "/x?a=b");
  u = ParseHttpUrl("http://example");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->path, "/");
  EXPECT_FALSE(ParseHttpUrl("https://h:1/").ok());
  EXPECT_FALSE(ParseHttpUrl("http://h:0/").ok());
  EXPECT_FALSE(ParseHttpUrl("http://h:70000/").ok());
  EXPECT_FALSE(ParseHttpUrl("http://:80/").ok());
}

TEST(HttpUrlTest, EncodesReservedCharacters) {
  EXPECT_EQ(UrlEncode("mooncake/rpc_meta/127.0.0.1:5"), "mooncake%2Frpc_meta%2F127.0.0.1%3A5");
  EXPECT_EQ(UrlEncode("a b&c~"), "a%20b%26c~");
}

TEST(DechunkTest, DecodesCompleteBodiesOnly) {
  using compat_internal::Dechunk;
  auto r = Dechunk("5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n");
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ(**r, "hello world");
  r = Dechunk("5\r\nhel");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  EXPECT_FALSE(Dechunk("zz\r\n").ok());
}

TEST(RpcMetaTest, RoundTripsMooncakesLayout) {
  EXPECT_EQ(RpcMetaKey("10.0.0.2:123"), "mooncake/rpc_meta/10.0.0.2:123");
  absl::StatusOr<RpcMeta> m = DecodeRpcMeta(EncodeRpcMeta({"10.0.0.2", 15123}));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->ip_or_host_name, "10.0.0.2");
  EXPECT_EQ(m->rpc_port, 15123);
  m = DecodeRpcMeta(R"({"ip_or_host_name": "node01", "rpc_port": 12345})");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->ip_or_host_name, "node01");
  EXPECT_FALSE(DecodeRpcMeta("not json").ok());
  EXPECT_FALSE(DecodeRpcMeta(R"({"ip_or_host_name": "a"})").ok());
  EXPECT_FALSE(DecodeRpcMeta(R"({"ip_or_host_name": "a", "rpc_port": 0})").ok());
}

TEST(MetadataClientTest, ParsesMooncakesConnectionStrings) {
  auto c = MetadataClient::Parse("P2PHANDSHAKE");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kind(), MetadataClient::Kind::kP2PHandshake);
  c = MetadataClient::Parse("http://127.0.0.1:8080/metadata");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kind(), MetadataClient::Kind::kHttp);
  c = MetadataClient::Parse("etcd://127.0.0.1:2379");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kind(), MetadataClient::Kind::kEtcd);
  c = MetadataClient::Parse("127.0.0.1:2379");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kind(), MetadataClient::Kind::kEtcd);
  EXPECT_FALSE(MetadataClient::Parse("redis://127.0.0.1:6379").ok());
  EXPECT_FALSE(MetadataClient::Parse("").ok());
}

TEST(MetadataClientTest, PutGetDeleteAgainstTheHttpMetadataServer) {
  auto server = node::MetadataServer::Start({.port = 0});
  ASSERT_TRUE(server.ok()) << server.status();
  auto c = MetadataClient::Parse(absl::StrCat("http://", (*server)->address(), "/metadata"));
  ASSERT_TRUE(c.ok());
  const std::string key = RpcMetaKey("127.0.0.1:12345");
  auto absent = c->Get(key);
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_FALSE(absent->has_value());
  ASSERT_TRUE(c->Put(key, R"({"v": 1})").ok());
  // The key arrives decoded: the server stores exactly Mooncake's key.
  auto stored = (*server)->store().Get(key);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(*stored, R"({"v": 1})");
  auto got = c->Get(key);
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, R"({"v": 1})");
  ASSERT_TRUE(c->Delete(key).ok());
  EXPECT_FALSE((*server)->store().Get(key).ok());
  EXPECT_TRUE(c->Delete(key).ok()) << "deleting an absent key is not an error";
}

TEST(HttpCallTest, RefusedPortIsUnavailable) {
  auto server = node::MetadataServer::Start({.port = 0});
  ASSERT_TRUE(server.ok());
  const uint16_t port = (*server)->port();
  (*server)->Stop();
  server->reset();
  auto r = HttpCall("GET", "127.0.0.1", port, "/metadata?key=a", "");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
}

TEST(HttpCallTest, SilentServerTimesOut) {
  // A listener that never accepts: the connect succeeds (backlog) and no
  // answer ever comes.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const absl::Time start = absl::Now();
  auto r = HttpCall("GET", "127.0.0.1", ntohs(a.sin_port), "/", "",
                    {.timeout = absl::Milliseconds(200)});
  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  ::close(fd);
}

TEST(HttpCallTest, OversizedResponseIsRefused) {
  auto server = node::MetadataServer::Start({.port = 0});
  ASSERT_TRUE(server.ok());
  ASSERT_TRUE((*server)->store().Put("big", std::string(100000, 'x')).ok());
  auto r = HttpCall("GET", "127.0.0.1", (*server)->port(), "/metadata?key=big", "",
                    {.max_response_bytes = 4096});
  EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  r = HttpCall("GET", "127.0.0.1", (*server)->port(), "/metadata?key=big", "");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body.size(), 100000u);
}

// A scripted HTTP/1.1 server for HttpConnectionPool: answers every request
// with "ok <n>" (n counts requests), framed by Content-Length; `mode` says
// what it does with the connection after each answer.
class ScriptedServer {
 public:
  enum class Mode { kKeepAlive, kCloseSilently, kSayClose };

  explicit ScriptedServer(Mode mode) : mode_(mode) {
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    MC_ASSERT(::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0, "bind");
    MC_ASSERT(::listen(listen_, 16) == 0, "listen");
    socklen_t len = sizeof(a);
    MC_ASSERT(::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len) == 0, "getsockname");
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~ScriptedServer() {
    stop_ = true;
    ::shutdown(listen_, SHUT_RDWR);
    ::close(listen_);
    thread_.join();
  }
  uint16_t port() const { return port_; }
  int accepts() const { return accepts_.load(); }

 private:
  void Serve() {
    while (!stop_) {
      const int c = ::accept(listen_, nullptr, nullptr);
      if (c < 0) return;
      ++accepts_;
      std::string in;
      char buf[4096];
      for (;;) {
        const size_t head = in.find("\r\n\r\n");
        if (head == std::string::npos) {
          const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
          if (n <= 0) break;
          in.append(buf, static_cast<size_t>(n));
          continue;
        }
        size_t body = 0;
        if (const size_t at = in.find("Content-Length: "); at != std::string::npos && at < head) {
          body = std::stoul(in.substr(at + 16));
        }
        if (in.size() < head + 4 + body) {
          const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
          if (n <= 0) break;
          in.append(buf, static_cast<size_t>(n));
          continue;
        }
        in.erase(0, head + 4 + body);
        const std::string text = absl::StrCat("ok ", ++requests_);
        const std::string answer =
            absl::StrCat("HTTP/1.1 200 OK\r\nContent-Length: ", text.size(),
                         mode_ == Mode::kSayClose ? "\r\nConnection: close" : "", "\r\n\r\n", text);
        if (::send(c, answer.data(), answer.size(), MSG_NOSIGNAL) < 0) break;
        if (mode_ != Mode::kKeepAlive) break;
      }
      ::close(c);
    }
  }

  const Mode mode_;
  int listen_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepts_{0};
  int requests_ = 0;  // the server thread's
  std::thread thread_;
};

TEST(HttpConnectionPoolTest, KeepsOneConnectionForSequentialCalls) {
  ScriptedServer server(ScriptedServer::Mode::kKeepAlive);
  HttpConnectionPool pool;
  for (int i = 1; i <= 5; ++i) {
    auto r = pool.Call("POST", "127.0.0.1", server.port(), "/v3/kv/range", R"({"key":"YQ=="})");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, absl::StrCat("ok ", i));
  }
  EXPECT_EQ(pool.connects(), 1u);
  EXPECT_EQ(server.accepts(), 1);
}

// A server that closes a connection after each answer without saying so (as
// an idle timeout does): the reused connection yields no answer, and the call
// goes through once more on a new one.
TEST(HttpConnectionPoolTest, AConnectionTheServerClosedIsReplacedOnce) {
  ScriptedServer server(ScriptedServer::Mode::kCloseSilently);
  HttpConnectionPool pool;
  for (int i = 1; i <= 3; ++i) {
    auto r = pool.Call("POST", "127.0.0.1", server.port(), "/", "{}");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->body, absl::StrCat("ok ", i));
  }
  EXPECT_EQ(server.accepts(), 3);
  EXPECT_EQ(pool.connects(), 3u);
}

TEST(HttpConnectionPoolTest, ConnectionCloseIsHonouredAndErrorsAreHttpCalls) {
  {
    ScriptedServer server(ScriptedServer::Mode::kSayClose);
    HttpConnectionPool pool;
    for (int i = 1; i <= 3; ++i) {
      auto r = pool.Call("GET", "127.0.0.1", server.port(), "/", "");
      ASSERT_TRUE(r.ok()) << r.status();
    }
    EXPECT_EQ(pool.connects(), 3u);  // none kept
  }
  // A refused port is Unavailable, as for HttpCall.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  HttpConnectionPool pool;
  auto r = pool.Call("GET", "127.0.0.1", ntohs(a.sin_port), "/", "");
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
}

}  // namespace
}  // namespace mooncake::transport::compat
