#include "mooncake/store/ha/etcd_client.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/tcp_listen.h"
#include "mooncake/store/ha/testing/etcd_process.h"

namespace mooncake::ha {
namespace {

class EtcdClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EtcdProcess>> p = EtcdProcess::Start();
    if (absl::IsFailedPrecondition(p.status())) GTEST_SKIP() << p.status();
    ASSERT_TRUE(p.ok()) << p.status();
    etcd_ = *std::move(p);
    absl::StatusOr<EtcdClient> c = EtcdClient::Create(etcd_->endpoint());
    ASSERT_TRUE(c.ok()) << c.status();
    client_.emplace(*c);
  }

  std::unique_ptr<EtcdProcess> etcd_;
  std::optional<EtcdClient> client_;
};

// A port nothing listens on (bound, then closed).
uint16_t DeadPort() {
  absl::StatusOr<TcpListener> l = ListenTcp({"127.0.0.1", 0});
  EXPECT_TRUE(l.ok());
  return l.ok() ? l->port : 1;
}

TEST(EtcdClientCreateTest, ParsesEndpointLists) {
  absl::StatusOr<EtcdClient> c =
      EtcdClient::Create("http://127.0.0.1:2379, 10.0.0.2:2380,etcd://h:1");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->endpoint_count(), 3u);
  EXPECT_EQ(c->Describe(), "etcd 127.0.0.1:2379,10.0.0.2:2380,h:1");
  EXPECT_TRUE(absl::IsInvalidArgument(EtcdClient::Create("").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(EtcdClient::Create("a:1,,b:2").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(EtcdClient::Create("https://a:1").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(EtcdClient::Create("a:99999").status()));
}

TEST(EtcdClientCreateTest, PrefixEnd) {
  EXPECT_EQ(EtcdClient::PrefixEnd("/a/"), "/a0");
  EXPECT_EQ(EtcdClient::PrefixEnd("ab"), "ac");
  EXPECT_EQ(EtcdClient::PrefixEnd(std::string("a\xff\xff", 3)), "b");
  EXPECT_EQ(EtcdClient::PrefixEnd(std::string("\xff", 1)), std::string(1, '\0'));
  EXPECT_EQ(EtcdClient::PrefixEnd(""), std::string(1, '\0'));
}

TEST_F(EtcdClientTest, PutRangeDelete) {
  const EtcdClient& c = *client_;
  absl::StatusOr<int64_t> rev1 = c.Put("/t/a", "1");
  ASSERT_TRUE(rev1.ok()) << rev1.status();
  absl::StatusOr<int64_t> rev2 = c.Put("/t/b", std::string("\0\xff binary", 9));
  ASSERT_TRUE(rev2.ok()) << rev2.status();
  EXPECT_GT(*rev2, *rev1);
  ASSERT_TRUE(c.Put("/t/c", "").ok());
  ASSERT_TRUE(c.Put("/u", "other").ok());

  absl::StatusOr<EtcdRange> one = c.Range("/t/a");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->kvs.size(), 1u);
  EXPECT_EQ(one->kvs[0].key, "/t/a");
  EXPECT_EQ(one->kvs[0].value, "1");
  EXPECT_EQ(one->kvs[0].create_revision, *rev1);
  EXPECT_EQ(one->kvs[0].version, 1);
  EXPECT_GE(one->revision, *rev2);

  absl::StatusOr<EtcdRange> all = c.Range("/t/", EtcdClient::PrefixEnd("/t/"));
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->kvs.size(), 3u);
  EXPECT_EQ(all->kvs[1].value, std::string("\0\xff binary", 9));
  EXPECT_EQ(all->kvs[2].value, "");
  EXPECT_EQ(all->count, 3);
  EXPECT_FALSE(all->more);

  absl::StatusOr<EtcdRange> limited = c.Range("/t/", EtcdClient::PrefixEnd("/t/"), 2);
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(limited->kvs.size(), 2u);
  EXPECT_TRUE(limited->more);
  absl::StatusOr<EtcdRange> last =
      c.Range("/t/", EtcdClient::PrefixEnd("/t/"),
              EtcdRangeOptions{.limit = 1, .keys_only = true, .descend = true});
  ASSERT_TRUE(last.ok());
  ASSERT_EQ(last->kvs.size(), 1u);
  EXPECT_EQ(last->kvs[0].key, "/t/c");
  EXPECT_EQ(last->kvs[0].value, "");

  absl::StatusOr<EtcdRange> missing = c.Range("/nope");
  ASSERT_TRUE(missing.ok());
  EXPECT_TRUE(missing->kvs.empty());

  absl::StatusOr<int64_t> deleted = c.DeleteRange("/t/", EtcdClient::PrefixEnd("/t/"));
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 3);
  EXPECT_EQ(*c.DeleteRange("/t/a"), 0);
  EXPECT_EQ(c.Range("/u")->kvs.size(), 1u);
}

TEST_F(EtcdClientTest, CompactDropsHistoryKeepsValues) {
  const EtcdClient& c = *client_;
  ASSERT_TRUE(c.Put("/h/k", "v1").ok());
  absl::StatusOr<int64_t> rev = c.Put("/h/k", "v2");
  ASSERT_TRUE(rev.ok()) << rev.status();
  ASSERT_TRUE(c.Compact(*rev).ok());
  absl::StatusOr<EtcdRange> r = c.Range("/h/k");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->kvs.size(), 1u);
  EXPECT_EQ(r->kvs[0].value, "v2");
  // Compacting again to the same revision is refused, clearly.
  EXPECT_TRUE(absl::IsFailedPrecondition(c.Compact(*rev))) << c.Compact(*rev);
}

TEST_F(EtcdClientTest, TxnRunsTheBranchTheComparesChoose) {
  const EtcdClient& c = *client_;
  const std::vector<EtcdCompare> absent = {{.key = "/x", .target = EtcdCompare::kCreate}};
  const std::vector<EtcdOp> put = {{.kind = EtcdOp::kPut, .key = "/x", .value = "v1"},
                                   {.kind = EtcdOp::kRange, .key = "/x"}};
  const std::vector<EtcdOp> read = {{.kind = EtcdOp::kRange, .key = "/x"},
                                    {.kind = EtcdOp::kDeleteRange, .key = "/nothing"},
                                    {.kind = EtcdOp::kRange, .key = "/x", .keys_only = true}};

  absl::StatusOr<EtcdTxnResult> first = c.Txn(absent, put, read);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->succeeded);
  ASSERT_EQ(first->ranges.size(), 1u);
  ASSERT_EQ(first->ranges[0].kvs.size(), 1u);
  EXPECT_EQ(first->ranges[0].kvs[0].value, "v1");
  EXPECT_EQ(first->ranges[0].kvs[0].create_revision, first->revision);

  absl::StatusOr<EtcdTxnResult> second = c.Txn(absent, put, read);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->succeeded);
  ASSERT_EQ(second->ranges.size(), 2u);
  EXPECT_EQ(second->ranges[0].kvs[0].value, "v1");
  EXPECT_EQ(second->ranges[1].kvs[0].value, "");  // keys_only
  EXPECT_EQ(second->revision, first->revision);   // nothing written

  // Value, version and mod-revision compares.
  absl::StatusOr<EtcdTxnResult> by_value =
      c.Txn({{.key = "/x", .target = EtcdCompare::kValue, .value = "v1"},
             {.key = "/x", .target = EtcdCompare::kVersion, .number = 1},
             {.key = "/x",
              .target = EtcdCompare::kMod,
              .result = EtcdCompare::kLess,
              .number = first->revision + 1}},
            {{.kind = EtcdOp::kPut, .key = "/x", .value = "v2"}});
  ASSERT_TRUE(by_value.ok()) << by_value.status();
  EXPECT_TRUE(by_value->succeeded);
  EXPECT_TRUE(by_value->ranges.empty());
  absl::StatusOr<EtcdTxnResult> stale = c.Txn({{.key = "/x",
                                                .target = EtcdCompare::kValue,
                                                .result = EtcdCompare::kNotEqual,
                                                .value = "v2"}},
                                              {{.kind = EtcdOp::kPut, .key = "/x", .value = "v3"}});
  ASSERT_TRUE(stale.ok());
  EXPECT_FALSE(stale->succeeded);
  EXPECT_EQ(c.Range("/x")->kvs[0].value, "v2");
}

TEST_F(EtcdClientTest, LeaseGrantKeepAliveRevokeAndExpiry) {
  const EtcdClient& c = *client_;
  absl::StatusOr<int64_t> lease = c.Grant(1);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(c.Put("/leased", "x", *lease).ok());
  EXPECT_EQ(c.Range("/leased")->kvs.at(0).lease, *lease);
  absl::StatusOr<int64_t> ttl = c.KeepAlive(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  EXPECT_GE(*ttl, 1);

  // Unrenewed, it expires and takes the key with it.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!c.Range("/leased")->kvs.empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(c.Range("/leased")->kvs.empty());
  EXPECT_TRUE(absl::IsNotFound(c.KeepAlive(*lease).status())) << c.KeepAlive(*lease).status();
  EXPECT_TRUE(absl::IsNotFound(c.Put("/leased", "x", *lease).status()));

  absl::StatusOr<int64_t> second = c.Grant(10);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(c.Put("/leased2", "y", *second).ok());
  ASSERT_TRUE(c.Revoke(*second).ok());
  EXPECT_TRUE(c.Range("/leased2")->kvs.empty());
  EXPECT_TRUE(absl::IsNotFound(c.KeepAlive(*second).status()));
  EXPECT_TRUE(absl::IsNotFound(c.Revoke(*second)));
}

TEST_F(EtcdClientTest, TooLargeRequestIsResourceExhausted) {
  // Over etcd's --max-request-bytes (1.5 MiB): "etcdserver: request is too large".
  absl::StatusOr<int64_t> r = client_->Put("/big", std::string(1600 << 10, 'x'));
  EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("too large"), absl::string_view::npos) << r.status();
  // Over the gateway's gRPC message limit (2 MiB): RESOURCE_EXHAUSTED too.
  r = client_->Put("/big", std::string(2 << 20, 'x'));
  EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_TRUE(client_->Range("/big")->kvs.empty());
}

TEST_F(EtcdClientTest, SecondEndpointServesWhenTheFirstIsDead) {
  const std::string dead = absl::StrCat("127.0.0.1:", DeadPort());
  absl::StatusOr<EtcdClient> c = EtcdClient::Create(absl::StrCat(dead, ",", etcd_->endpoint()));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->Put("/k", "v").ok());
  EXPECT_EQ(c->Range("/k")->kvs.at(0).value, "v");
}

TEST_F(EtcdClientTest, PausedEtcdTimesOutThenAnswersAgain) {
  absl::StatusOr<EtcdClient> c =
      EtcdClient::Create(etcd_->endpoint(), {.timeout = absl::Milliseconds(200)});
  ASSERT_TRUE(c.ok());
  etcd_->Pause();
  const absl::Time start = absl::Now();
  absl::StatusOr<EtcdRange> r = c->Range("/k");
  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  etcd_->Resume();
  EXPECT_TRUE(c->Range("/k").ok());
}

TEST(EtcdClientErrorTest, UnreachableEndpointIsUnavailableFast) {
  const uint16_t port = DeadPort();
  absl::StatusOr<EtcdClient> c = EtcdClient::Create(absl::StrCat("127.0.0.1:", port));
  ASSERT_TRUE(c.ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<int64_t> r = c->Put("/k", "v");
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_NE(r.status().message().find(absl::StrCat("127.0.0.1:", port)), absl::string_view::npos)
      << r.status();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
}

// A one-connection-at-a-time HTTP server answering every request with `reply`.
class GarbageServer {
 public:
  explicit GarbageServer(std::string reply) : reply_(std::move(reply)) {
    absl::StatusOr<TcpListener> l = ListenTcp({"127.0.0.1", 0}, {.non_blocking = false});
    EXPECT_TRUE(l.ok()) << l.status();
    listener_ = *std::move(l);
    thread_ = std::thread([this] { Serve(); });
  }
  ~GarbageServer() {
    stop_ = true;
    ::shutdown(listener_.fd.get(), SHUT_RDWR);  // wakes accept()
    thread_.join();
  }
  uint16_t port() const { return listener_.port; }

 private:
  void Serve() {
    while (!stop_) {
      const int fd = ::accept(listener_.fd.get(), nullptr, nullptr);
      if (fd < 0) continue;
      std::string in;
      char buf[4096];
      // Read the head and a body of Content-Length bytes (requests here are small).
      while (in.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) break;
        in.append(buf, static_cast<size_t>(n));
      }
      (void)!::send(fd, reply_.data(), reply_.size(), MSG_NOSIGNAL);
      ::shutdown(fd, SHUT_WR);
      while (::recv(fd, buf, sizeof(buf), 0) > 0) {
      }
      ::close(fd);
    }
  }

  std::string reply_;
  TcpListener listener_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::string HttpOk(std::string_view body) {
  return absl::StrCat("HTTP/1.1 200 OK\r\nContent-Length: ", body.size(), "\r\n\r\n",
                      AbslView(body));
}

TEST(EtcdClientErrorTest, BadJsonIsDataLossNeverACrash) {
  for (const std::string_view body :
       {"{not json", "[1,2]", "\"str\"", "{\"kvs\": 7}", "{\"kvs\": [{\"key\": \"!!notb64\"}]}",
        "{\"kvs\": [{\"key\": \"YQ==\", \"create_revision\": \"x1\"}]}", "{\"count\": {}}",
        "{\"kvs\": [5]}"}) {
    GarbageServer server(HttpOk(body));
    absl::StatusOr<EtcdClient> c = EtcdClient::Create(absl::StrCat("127.0.0.1:", server.port()));
    ASSERT_TRUE(c.ok());
    absl::StatusOr<EtcdRange> r = c->Range("/k");
    EXPECT_TRUE(absl::IsDataLoss(r.status())) << body << " -> " << r.status();
  }
  for (const std::string_view body : {"{}", "{\"result\": {\"TTL\": []}}", "{\"responses\": 3}"}) {
    GarbageServer server(HttpOk(body));
    absl::StatusOr<EtcdClient> c = EtcdClient::Create(absl::StrCat("127.0.0.1:", server.port()));
    ASSERT_TRUE(c.ok());
    EXPECT_TRUE(absl::IsDataLoss(c->KeepAlive(1).status())) << body;
    EXPECT_TRUE(absl::IsDataLoss(c->Grant(1).status())) << body;
    // Either branch holds a range, so every answer must carry one response.
    EXPECT_TRUE(absl::IsDataLoss(
        c->Txn({}, {{.kind = EtcdOp::kRange, .key = "a"}}, {{.kind = EtcdOp::kRange, .key = "a"}})
            .status()))
        << body;
  }
  {
    GarbageServer server("this is not HTTP\r\n\r\n");
    absl::StatusOr<EtcdClient> c = EtcdClient::Create(absl::StrCat("127.0.0.1:", server.port()));
    EXPECT_TRUE(absl::IsDataLoss(c->Range("/k").status()));
  }
  {
    GarbageServer server(
        HttpOk("{\"error\":\"etcdserver: no such thing\",\"message\":\"etcdserver: no such "
               "thing\",\"code\":3}"));
    absl::StatusOr<EtcdClient> c = EtcdClient::Create(absl::StrCat("127.0.0.1:", server.port()));
    absl::StatusOr<EtcdRange> r = c->Range("/k");
    EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
    EXPECT_NE(r.status().message().find("no such thing"), absl::string_view::npos);
  }
}

}  // namespace
}  // namespace mooncake::ha
