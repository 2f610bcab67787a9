#include "tools/bench/text_query.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace mooncake::bench {
namespace {

TEST(PrometheusValueTest, ReadsPlainAndSumsLabelledSamples) {
  const std::string text =
      "# HELP mooncake_master_used_bytes Segment bytes allocated.\n"
      "# TYPE mooncake_master_used_bytes gauge\n"
      "mooncake_master_used_bytes 1048576\n"
      "mooncake_master_used_bytes_total 5\n"
      "mooncake_master_worker_used_bytes{worker=\"a\"} 10\n"
      "mooncake_master_worker_used_bytes{worker=\"b\"} 2.5e1\n";
  auto used = PrometheusValue(text, "mooncake_master_used_bytes");
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_DOUBLE_EQ(*used, 1048576);  // not the _total series sharing its prefix
  auto per_worker = PrometheusValue(text, "mooncake_master_worker_used_bytes");
  ASSERT_TRUE(per_worker.ok());
  EXPECT_DOUBLE_EQ(*per_worker, 35);
  EXPECT_TRUE(absl::IsNotFound(PrometheusValue(text, "mooncake_master_capacity_bytes").status()));
  EXPECT_TRUE(absl::IsInternal(PrometheusValue("m x\n", "m").status()));
}

TEST(PrometheusValueTest, FiltersByLabels) {
  const std::string text =
      "mooncake_master_copies_total{kind=\"repair\",result=\"ok\"} 3\n"
      "mooncake_master_copies_total{kind=\"repair\",result=\"failed\"} 1\n"
      "mooncake_master_copies_total{kind=\"hot\",result=\"ok\"} 7\n";
  auto repair_ok =
      PrometheusValue(text, "mooncake_master_copies_total", {"kind=\"repair\"", "result=\"ok\""});
  ASSERT_TRUE(repair_ok.ok()) << repair_ok.status();
  EXPECT_DOUBLE_EQ(*repair_ok, 3);
  EXPECT_DOUBLE_EQ(*PrometheusValue(text, "mooncake_master_copies_total", {"result=\"ok\""}), 10);
  EXPECT_DOUBLE_EQ(*PrometheusValue(text, "mooncake_master_copies_total"), 11);
  // A counter that has not moved has no sample.
  auto hot_failed =
      PrometheusValue(text, "mooncake_master_copies_total", {"kind=\"hot\"", "result=\"failed\""});
  EXPECT_TRUE(absl::IsNotFound(hot_failed.status())) << hot_failed.status();
  EXPECT_DOUBLE_EQ(hot_failed.value_or(0), 0);
  // The metric's name is not part of its labels.
  EXPECT_TRUE(absl::IsNotFound(PrometheusValue("kind_total 4\n", "kind_total", {"kind"}).status()));
}

TEST(JsonIntFieldTest, ReadsIntegerFieldsOfAFlatObject) {
  const std::string drain =
      "{\"objects_moved\":12,\"objects_total\": 40,\"objects_left\":-1,"
      "\"note\":\"bytes_moved\",\"bytes_moved\":786432,\"state\":\"done\"}\n";
  EXPECT_EQ(*JsonIntField(drain, "objects_moved"), 12);
  EXPECT_EQ(*JsonIntField(drain, "objects_total"), 40);
  EXPECT_EQ(*JsonIntField(drain, "objects_left"), -1);
  EXPECT_EQ(*JsonIntField(drain, "bytes_moved"), 786432);  // not the string value before it
  EXPECT_TRUE(absl::IsNotFound(JsonIntField(drain, "objects").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(JsonIntField(drain, "state").status()));
  EXPECT_EQ(JsonIntField("{}", "objects_moved").value_or(-1), -1);
}

TEST(HostAndPortTest, AcceptsHostPortOnly) {
  auto hp = HostAndPort("127.0.0.1:9090");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->first, "127.0.0.1");
  EXPECT_EQ(hp->second, 9090);
  for (const char* bad : {"", "127.0.0.1", ":80", "h:0", "h:65536", "h:x"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(HostAndPort(bad).status())) << bad;
  }
}

// Serves one connection with `reply` and closes it; returns the port.
int ServeOnce(std::string reply, std::thread& t) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(listen(fd, 1), 0);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  t = std::thread([fd, reply] {
    const int c = accept(fd, nullptr, nullptr);
    char buf[4096];
    (void)!recv(c, buf, sizeof(buf), 0);
    (void)!send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
    close(c);
    close(fd);
  });
  return ntohs(a.sin_port);
}

TEST(HttpGetTest, ReturnsTheBodyOfA200) {
  std::thread t;
  const int port = ServeOnce("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nm 1\n", t);
  auto body = HttpGet(absl::StrCat("127.0.0.1:", port), "/metrics");
  t.join();
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, "m 1\n");
}

TEST(HttpGetTest, Non200IsAnErrorNamingTheStatus) {
  std::thread t;
  const int port = ServeOnce("HTTP/1.0 404 Not Found\r\n\r\nnope", t);
  auto body = HttpGet(absl::StrCat("127.0.0.1:", port), "/metrics");
  t.join();
  EXPECT_TRUE(absl::IsUnavailable(body.status()));
  EXPECT_NE(body.status().message().find("404"), std::string::npos) << body.status();
  EXPECT_NE(body.status().message().find("nope"), std::string::npos) << body.status();
}

TEST(HttpGetTest, NotHttpIsInternal) {
  std::thread t;
  const int port = ServeOnce("garbage", t);
  auto body = HttpGet(absl::StrCat("127.0.0.1:", port), "/");
  t.join();
  EXPECT_TRUE(absl::IsInternal(body.status())) << body.status();
}

TEST(MemcachedStatTest, ParsesTheNamedStat) {
  std::thread t;
  const int port =
      ServeOnce("STAT pid 1\r\nSTAT bytes 123\r\nSTAT limit_maxbytes 1000\r\nEND\r\n", t);
  auto v = MemcachedStat(absl::StrCat("127.0.0.1:", port), "bytes");
  t.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_DOUBLE_EQ(*v, 123);
}

TEST(TextExchangeTest, NothingListeningIsUnavailable) {
  // A port that was bound and released again: nothing listens there.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  close(fd);
  auto r = HttpGet(absl::StrCat("127.0.0.1:", ntohs(a.sin_port)), "/");
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
}

}  // namespace
}  // namespace mooncake::bench
