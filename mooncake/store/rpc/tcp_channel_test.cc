#include "mooncake/store/rpc/tcp_channel.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/tcp_listen.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/channel_testing.h"
#include "mooncake/store/rpc/echo_testing.h"
#include "mooncake/store/rpc/tcp_server.h"

namespace mooncake::rpc {
namespace {

struct TcpHarness {
  using Channel = TcpChannel;
  static std::unique_ptr<TcpHarness> Make(ServiceRegistry* registry, uint32_t max_payload_bytes) {
    auto h = std::make_unique<TcpHarness>();
    h->server = std::make_unique<RpcServer>(
        registry, RpcServerOptions{.worker_threads = 3, .max_payload_bytes = max_payload_bytes});
    if (!h->server->Start().ok()) return nullptr;
    auto ch = TcpChannel::Connect(h->server->address(), {.max_payload_bytes = max_payload_bytes});
    if (!ch.ok()) return nullptr;
    h->channel_ = std::move(*ch);
    return h;
  }
  Channel& channel() { return *channel_; }
  ~TcpHarness() {
    channel_.reset();
    server.reset();
  }
  std::unique_ptr<RpcServer> server;
  std::unique_ptr<TcpChannel> channel_;
};

INSTANTIATE_TYPED_TEST_SUITE_P(Tcp, RpcChannelConformance, TcpHarness);

class TcpChannelTest : public ::testing::Test {
 protected:
  void StartServer(RpcServerOptions options = {}) {
    if (!registered_) {
      ASSERT_TRUE(RegisterEcho(&registry_).ok());
      registered_ = true;
    }
    server_ = std::make_unique<RpcServer>(&registry_, options);
    ASSERT_TRUE(server_->Start().ok());
  }
  std::unique_ptr<TcpChannel> Connect(TcpChannelOptions options = {}) {
    auto ch = TcpChannel::Connect(server_->address(), options);
    EXPECT_TRUE(ch.ok()) << ch.status();
    return ch.ok() ? std::move(*ch) : nullptr;
  }

  ServiceRegistry registry_;
  bool registered_ = false;
  std::unique_ptr<RpcServer> server_;
};

// Waits (bounded) for `n` async completions recorded into `statuses`.
struct Collector {
  Mutex mu;
  std::vector<absl::Status> statuses;
  void Add(const absl::Status& s) {
    MutexLock lock(&mu);
    statuses.push_back(s);
  }
  bool WaitFor(size_t n, absl::Duration timeout = absl::Seconds(10)) {
    MutexLock lock(&mu);
    auto cond = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return statuses.size() >= n; };
    return mu.AwaitWithTimeout(Condition(&cond), timeout);
  }
};

TEST_F(TcpChannelTest, ThousandsOfCallsInFlightOnOneConnection) {
  StartServer();
  auto channel = Connect();
  constexpr int kCalls = 3000;
  std::atomic<int> wrong{0};
  Collector done;
  for (int i = 0; i < kCalls; ++i) {
    const std::string p = "call-" + std::to_string(i);
    auto cb = [&, p](absl::StatusOr<echo::EchoResponse> r) {
      if (!r.ok() || r->payload() != p) wrong.fetch_add(1);
      done.Add(r.status());
    };
    if (i % 2 == 0) {
      CallAsync<EchoInlineMethod>(*channel, MakeEcho(p), {}, cb);
    } else {
      CallAsync<EchoMethod>(*channel, MakeEcho(p), {}, cb);
    }
  }
  ASSERT_TRUE(done.WaitFor(kCalls));
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(channel->pending_calls(), 0u);
}

TEST_F(TcpChannelTest, DeadlineFiresWhileTheHandlerSleepsAndTheLateResponseIsDropped) {
  StartServer();
  auto channel = Connect();
  auto r = Call<EchoMethod>(*channel, MakeEcho("slow", 300), {.timeout_ns = 20'000'000});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.status().message().find("Echo"), std::string_view::npos) << r.status();
  // An idle connection does not read: the late response is found (and
  // dropped) by the next call's read, ahead of that call's own response.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(channel->late_responses(), 0u);
  auto fine = Call<EchoMethod>(*channel, MakeEcho("fine"));
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(fine->payload(), "fine");
  EXPECT_EQ(channel->late_responses(), 1u);
}

// Caller-runs receive: a blocking Call on a connection nobody else reads
// receives its own response; the I/O thread stays asleep.
TEST_F(TcpChannelTest, BlockingCallsLeaveTheIoThreadAsleep) {
  StartServer();
  auto channel = Connect();
  ASSERT_TRUE(Call<EchoInlineMethod>(*channel, MakeEcho("warm")).ok());
  const uint64_t before = channel->io_wakeups();
  constexpr int kCalls = 200;
  for (int i = 0; i < kCalls; ++i) {
    const std::string p = "call-" + std::to_string(i);
    auto r = Call<EchoInlineMethod>(*channel, MakeEcho(p));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->payload(), p);
  }
  // Without caller-runs receive each call wakes the thread twice (the call's
  // deadline, then its response).
  EXPECT_LT(channel->io_wakeups() - before, static_cast<uint64_t>(kCalls / 10));
}

// Blocking callers on several threads share a connection with a stream of
// asynchronous calls: whoever reads completes everyone's calls, each exactly
// once and with its own response; deadlines still fire.
TEST_F(TcpChannelTest, CallerReceiversAndAsyncCallsShareAConnection) {
  StartServer({.worker_threads = 2});
  auto channel = Connect();
  std::atomic<int> wrong{0};
  std::atomic<int> async_done{0};
  constexpr int kThreads = 4;
  constexpr int kPerThread = 300;
  constexpr int kAsync = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::string p = absl::StrCat("t", t, "-", i);
        auto r = (i % 2 == 0) ? Call<EchoInlineMethod>(*channel, MakeEcho(p))
                              : Call<EchoMethod>(*channel, MakeEcho(p));
        if (!r.ok() || r->payload() != p) wrong.fetch_add(1);
        if (i % 50 == 0) {  // now and then one that expires while we read
          auto late = Call<EchoMethod>(*channel, MakeEcho("slow", 30), {.timeout_ns = 5'000'000});
          if (late.status().code() != absl::StatusCode::kDeadlineExceeded) wrong.fetch_add(1);
        }
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < kAsync; ++i) {
      const std::string p = "async-" + std::to_string(i);
      CallAsync<EchoInlineMethod>(*channel, MakeEcho(p), {},
                                  [&, p](absl::StatusOr<echo::EchoResponse> r) {
                                    if (!r.ok() || r->payload() != p) wrong.fetch_add(1);
                                    async_done.fetch_add(1);
                                  });
      if (i % 100 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 1000 && async_done.load() < kAsync; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(async_done.load(), kAsync);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(channel->pending_calls(), 0u);
}

// An asynchronous call left pending when a receiving caller is done is
// completed by the I/O thread, which the caller wakes as it leaves.
TEST_F(TcpChannelTest, CallLeftPendingByAReceivingCallerIsCompletedByTheThread) {
  StartServer({.worker_threads = 2});
  auto channel = Connect();
  Collector slow;
  {
    TcpChannel::CallerReceive receive(*channel);
    CallAsync<EchoMethod>(*channel, MakeEcho("slow", 100), {},
                          [&](absl::StatusOr<echo::EchoResponse> r) { slow.Add(r.status()); });
    // Done at once: this caller stops reading, the slow call is still out.
    receive.Until([] { return true; });
  }
  ASSERT_TRUE(slow.WaitFor(1, absl::Seconds(5)));
  EXPECT_TRUE(slow.statuses[0].ok()) << slow.statuses[0];
}

// The server goes away while a caller reads for itself: the caller's call
// and an asynchronous one both fail with UNAVAILABLE, and the channel
// reconnects afterwards.
TEST_F(TcpChannelTest, ServerGoneWhileTheCallerReads) {
  StartServer({.worker_threads = 2});
  auto channel = Connect();
  Collector other;
  CallAsync<EchoMethod>(*channel, MakeEcho("other", 500), {},
                        [&](absl::StatusOr<echo::EchoResponse> r) { other.Add(r.status()); });
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    server_->Stop();
  });
  auto r = Call<EchoMethod>(*channel, MakeEcho("mine", 500));
  killer.join();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  ASSERT_TRUE(other.WaitFor(1, absl::Seconds(5)));
  EXPECT_EQ(other.statuses[0].code(), absl::StatusCode::kUnavailable) << other.statuses[0];
}

// A call from another thread with an earlier deadline than the reading
// caller's poll: it still expires on time (the I/O thread is woken for it).
TEST_F(TcpChannelTest, ShortCallRegisteredWhileACallerReadsMeetsItsDeadline) {
  StartServer({.worker_threads = 4});
  auto channel = Connect();
  ASSERT_TRUE(Call<EchoInlineMethod>(*channel, MakeEcho("warm")).ok());
  std::thread reader([&] {
    // Takes the reader role and polls with a ~5 s timeout.
    auto r = Call<EchoMethod>(*channel, MakeEcho("long", 1500), {.timeout_ns = 5'000'000'000});
    EXPECT_TRUE(r.ok()) << r.status();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = std::chrono::steady_clock::now();
  auto r = Call<EchoMethod>(*channel, MakeEcho("short", 1000), {.timeout_ns = 50'000'000});
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_LT(ms, 500) << "a 50 ms call completed after " << ms << " ms";
  reader.join();
}

// ~TcpChannel cancels every pending call and returns after every callback
// ran (file comment), also while a thread receives for itself.
TEST_F(TcpChannelTest, DestroyingTheChannelWhileACallerReadsCancelsItsCall) {
  StartServer({.worker_threads = 2});
  auto channel = Connect();
  std::atomic<bool> returned{false};
  absl::Status got;
  TcpChannel* raw = channel.get();
  std::thread caller([&] {
    auto r = Call<EchoMethod>(*raw, MakeEcho("slow", 500));
    got = r.status();
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = std::chrono::steady_clock::now();
  channel.reset();
  const bool returned_at_reset = returned.load();
  caller.join();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_EQ(got.code(), absl::StatusCode::kCancelled) << got << " after " << ms << " ms";
  EXPECT_TRUE(returned_at_reset || ms < 1000) << ms;  // no hang (CANCELLED is the real check)
}

TEST_F(TcpChannelTest, ShortDeadlinesAmongLongOnesFireInOrder) {
  StartServer({.worker_threads = 4});
  auto channel = Connect();
  Collector done;
  // A long-deadline call first: the I/O thread must still wake for the
  // shorter deadlines that come after it.
  CallAsync<EchoMethod>(*channel, MakeEcho("long", 200), {.timeout_ns = 5'000'000'000},
                        [&](absl::StatusOr<echo::EchoResponse> r) { done.Add(r.status()); });
  for (int i = 0; i < 3; ++i) {
    CallAsync<EchoMethod>(*channel, MakeEcho("short", 1000), {.timeout_ns = 30'000'000},
                          [&](absl::StatusOr<echo::EchoResponse> r) { done.Add(r.status()); });
  }
  ASSERT_TRUE(done.WaitFor(3, absl::Milliseconds(900)));
  {
    MutexLock lock(&done.mu);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(done.statuses[i].code(), absl::StatusCode::kDeadlineExceeded);
    }
  }
  ASSERT_TRUE(done.WaitFor(4));
  MutexLock lock(&done.mu);
  EXPECT_TRUE(done.statuses[3].ok()) << done.statuses[3];
}

TEST_F(TcpChannelTest, ServerStoppedMidCallFailsEveryPendingCallWithUnavailable) {
  StartServer({.worker_threads = 2});
  auto channel = Connect();
  Collector done;
  for (int i = 0; i < 5; ++i) {
    CallAsync<EchoMethod>(*channel, MakeEcho("x", 400), {.timeout_ns = 30'000'000'000},
                          [&](absl::StatusOr<echo::EchoResponse> r) { done.Add(r.status()); });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::thread stopper([&] { server_->Stop(); });
  ASSERT_TRUE(done.WaitFor(5));
  stopper.join();
  MutexLock lock(&done.mu);
  for (const auto& s : done.statuses) EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

TEST_F(TcpChannelTest, ServerProcessKilledMidCall) {
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipefd[0]);
    ServiceRegistry registry;
    if (!RegisterEcho(&registry).ok()) ::_exit(2);
    RpcServer server(&registry, {});
    if (!server.Start().ok()) ::_exit(3);
    const uint16_t port = server.port();
    if (::write(pipefd[1], &port, sizeof(port)) != sizeof(port)) ::_exit(4);
    for (;;) ::pause();
  }
  ::close(pipefd[1]);
  uint16_t port = 0;
  ASSERT_EQ(::read(pipefd[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  ::close(pipefd[0]);
  auto channel = TcpChannel::Connect("127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(channel.ok()) << channel.status();
  ASSERT_TRUE(Call<EchoMethod>(**channel, MakeEcho("alive")).ok());
  Collector done;
  CallAsync<EchoMethod>(**channel, MakeEcho("dies", 60'000), {.timeout_ns = 60'000'000'000},
                        [&](absl::StatusOr<echo::EchoResponse> r) { done.Add(r.status()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::kill(child, SIGKILL);
  int wstatus = 0;
  ::waitpid(child, &wstatus, 0);
  ASSERT_TRUE(done.WaitFor(1));
  MutexLock lock(&done.mu);
  EXPECT_EQ(done.statuses[0].code(), absl::StatusCode::kUnavailable) << done.statuses[0];
  // Later calls fail fast too (the reconnect is refused).
  auto after = Call<EchoMethod>(**channel, MakeEcho("x"), {.timeout_ns = 1'000'000'000});
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable) << after.status();
}

TEST_F(TcpChannelTest, ConnectRefusedIsUnavailable) {
  auto listener = ListenTcp({"127.0.0.1", 0}, {.backlog = 1});
  ASSERT_TRUE(listener.ok()) << listener.status();
  const uint16_t port = listener->port;
  listener->fd.Reset();  // nothing listens there now
  auto ch = TcpChannel::Connect("127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(ch.status().code(), absl::StatusCode::kUnavailable) << ch.status();
}

TEST_F(TcpChannelTest, BadAddressIsInvalidArgument) {
  EXPECT_EQ(TcpChannel::Connect("no-port").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TcpChannel::Connect("127.0.0.1:99999").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TcpChannel::Connect("127.0.0.1:1", {.default_timeout_ns = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TcpChannelTest, ReconnectsAfterTheServerComesBack) {
  StartServer();
  const uint16_t port = server_->port();
  auto channel = Connect({.reconnect_backoff_ns = 0});
  ASSERT_TRUE(Call<EchoMethod>(*channel, MakeEcho("one")).ok());
  server_->Stop();
  server_.reset();
  auto down = Call<EchoMethod>(*channel, MakeEcho("two"));
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable) << down.status();
  StartServer({.port = port});
  auto back = Call<EchoMethod>(*channel, MakeEcho("three"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->payload(), "three");
}

TEST_F(TcpChannelTest, ServerLimitSmallerThanClientsClosesWithTheReason) {
  StartServer({.max_payload_bytes = 1024});
  auto channel = Connect();
  auto r = Call<EchoMethod>(*channel, MakeEcho(std::string(4096, 'x')));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_NE(r.status().message().find("exceeds the limit of 1024"), std::string_view::npos)
      << r.status();
}

TEST_F(TcpChannelTest, TooManyCallsInFlightIsResourceExhausted) {
  StartServer({.worker_threads = 2});
  auto channel = Connect({.max_pending_calls = 2});
  Collector done;
  for (int i = 0; i < 2; ++i) {
    CallAsync<EchoMethod>(*channel, MakeEcho("slow", 200), {},
                          [&](absl::StatusOr<echo::EchoResponse> r) { done.Add(r.status()); });
  }
  auto third = Call<EchoMethod>(*channel, MakeEcho("third"));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted) << third.status();
  ASSERT_TRUE(done.WaitFor(2));
}

TEST_F(TcpChannelTest, DestroyingTheChannelCancelsPendingCalls) {
  StartServer();
  auto channel = Connect();
  Collector done;
  CallAsync<EchoMethod>(*channel, MakeEcho("slow", 300), {},
                        [&](absl::StatusOr<echo::EchoResponse> r) { done.Add(r.status()); });
  channel.reset();
  ASSERT_TRUE(done.WaitFor(1, absl::ZeroDuration()));  // ran before reset() returned
  MutexLock lock(&done.mu);
  EXPECT_EQ(done.statuses[0].code(), absl::StatusCode::kCancelled) << done.statuses[0];
}

TEST_F(TcpChannelTest, CallbackMayCallAgainOnTheSameChannel) {
  StartServer();
  auto channel = Connect();
  Collector done;
  CallAsync<EchoMethod>(*channel, MakeEcho("first"), {}, [&](absl::StatusOr<echo::EchoResponse> r) {
    done.Add(r.status());
    CallAsync<EchoMethod>(*channel, MakeEcho("second"), {},
                          [&](absl::StatusOr<echo::EchoResponse> r2) { done.Add(r2.status()); });
  });
  ASSERT_TRUE(done.WaitFor(2));
  MutexLock lock(&done.mu);
  EXPECT_TRUE(done.statuses[0].ok() && done.statuses[1].ok());
}

// Calls a completion callback makes are sent when the I/O thread is done
// completing, together: one send for all of them, not one each.
TEST_F(TcpChannelTest, CallsMadeFromACallbackShareOneSend) {
  StartServer();
  auto channel = Connect();
  constexpr int kFanOut = 32;
  Collector done;
  uint64_t sends_before_fan_out = 0;
  CallAsync<EchoMethod>(*channel, MakeEcho("first"), {}, [&](absl::StatusOr<echo::EchoResponse> r) {
    done.Add(r.status());
    sends_before_fan_out = channel->send_calls();
    for (int i = 0; i < kFanOut; ++i) {
      CallAsync<EchoInlineMethod>(
          *channel, MakeEcho(std::to_string(i)), {},
          [&](absl::StatusOr<echo::EchoResponse> r2) { done.Add(r2.status()); });
    }
    EXPECT_EQ(channel->send_calls(), sends_before_fan_out) << "queued, not sent, in a callback";
  });
  ASSERT_TRUE(done.WaitFor(kFanOut + 1));
  EXPECT_EQ(channel->send_calls(), sends_before_fan_out + 1);
  MutexLock lock(&done.mu);
  for (const auto& s : done.statuses) EXPECT_TRUE(s.ok()) << s;
}

TEST_F(TcpChannelTest, BatchedCallsGoOutWhenTheBatchEnds) {
  StartServer();
  auto channel = Connect();
  Collector done;
  {
    TcpChannel::Batch batch(*channel);
    for (int i = 0; i < 50; ++i) {
      CallAsync<EchoInlineMethod>(
          *channel, MakeEcho(std::to_string(i)), {},
          [&](absl::StatusOr<echo::EchoResponse> r) { done.Add(r.status()); });
    }
    EXPECT_EQ(channel->send_calls(), 0u);
    // Corked: nothing was sent, so nothing can have come back.
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    MutexLock lock(&done.mu);
    EXPECT_TRUE(done.statuses.empty());
  }
  ASSERT_TRUE(done.WaitFor(50));
  EXPECT_EQ(channel->send_calls(), 1u) << "50 calls, one send";
  MutexLock lock(&done.mu);
  for (const auto& s : done.statuses) EXPECT_TRUE(s.ok()) << s;
}

TEST_F(TcpChannelTest, PerMethodMetricsOnBothSides) {
  MetricsRegistry server_metrics;
  ServiceRegistry registry(&server_metrics);
  ASSERT_TRUE(RegisterEcho(&registry).ok());
  RpcServer server(&registry, {});
  ASSERT_TRUE(server.Start().ok());
  MetricsRegistry client_metrics;
  auto channel = TcpChannel::Connect(server.address(), {.metrics = &client_metrics});
  ASSERT_TRUE(channel.ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Call<EchoMethod>(**channel, MakeEcho("m")).ok());
  echo::EchoRequest fail;
  fail.set_error_code(static_cast<uint32_t>(absl::StatusCode::kNotFound));
  EXPECT_FALSE(Call<EchoMethod>(**channel, fail).ok());
  const std::string client = client_metrics.RenderPrometheus();
  const std::string srv = server_metrics.RenderPrometheus();
  for (const std::string* text : {&client, &srv}) {
    EXPECT_NE(text->find("_calls_total{method=\"Echo\"} 4"), std::string::npos) << *text;
    EXPECT_NE(text->find("_errors_total{code=\"NOT_FOUND\",method=\"Echo\"} 1"), std::string::npos)
        << *text;
    EXPECT_NE(text->find("_latency_seconds_count{method=\"Echo\"} 4"), std::string::npos) << *text;
  }
  EXPECT_NE(srv.find("mooncake_rpc_server_connections 1"), std::string::npos) << srv;
}

// ---- Failover (TcpChannelOptions::resolve) ------------------------------------

namespace failover {

struct Server {
  ServiceRegistry registry;
  std::unique_ptr<RpcServer> server;
};

std::unique_ptr<Server> StartEcho(int64_t sleep_ms) {
  auto s = std::make_unique<Server>();
  EXPECT_TRUE(s->registry
                  .Register<EchoMethod>(
                      [sleep_ms](const echo::EchoRequest& req, const ServerCallContext& ctx) {
                        std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
                        return EchoHandler(req, ctx);
                      })
                  .ok());
  s->server = std::make_unique<RpcServer>(&s->registry, RpcServerOptions{.worker_threads = 2});
  EXPECT_TRUE(s->server->Start().ok());
  return s;
}

TEST(TcpChannelFailoverTest, CallsFollowTheServerWhenTheFirstOneGoes) {
  auto a = StartEcho(0);
  auto b = StartEcho(0);
  Mutex mu;
  std::string where = a->server->address();
  TcpChannelOptions o;
  o.resolve = [&]() -> absl::StatusOr<std::string> {
    MutexLock lock(&mu);
    return where;
  };
  auto ch = TcpChannel::Connect("", o);
  ASSERT_TRUE(ch.ok()) << ch.status();
  EXPECT_EQ((*ch)->address(), a->server->address());
  ASSERT_TRUE(Call<EchoMethod>(**ch, MakeEcho("one")).ok());
  a->server->Stop();
  {
    MutexLock lock(&mu);
    where = b->server->address();
  }
  auto r = Call<EchoMethod>(**ch, MakeEcho("two"), {.timeout_ns = 5'000'000'000});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->payload(), "two");
  EXPECT_EQ((*ch)->address(), b->server->address());
  EXPECT_GE((*ch)->failover_retries(), 1u);
}

TEST(TcpChannelFailoverTest, ASilentServerIsLeftWhenTheResolverNamesAnother) {
  auto silent = StartEcho(3'000);  // answers, but only after 3 s
  auto b = StartEcho(0);
  Mutex mu;
  std::string where = silent->server->address();
  TcpChannelOptions o;
  o.resolve = [&]() -> absl::StatusOr<std::string> {
    MutexLock lock(&mu);
    return where;
  };
  o.failover_probe_ns = 100'000'000;
  auto ch = TcpChannel::Connect("", o);
  ASSERT_TRUE(ch.ok()) << ch.status();
  std::thread flip([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    MutexLock lock(&mu);
    where = b->server->address();
  });
  const auto start = std::chrono::steady_clock::now();
  auto r = Call<EchoMethod>(**ch, MakeEcho("moved"), {.timeout_ns = 10'000'000'000});
  const auto took = std::chrono::steady_clock::now() - start;
  flip.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(took, std::chrono::milliseconds(2'500));  // not the silent server's 3 s
  EXPECT_EQ((*ch)->silent_moves(), 1u);
}

TEST(TcpChannelFailoverTest, NoServerAtAllFailsAtTheDeadline) {
  TcpChannelOptions o;
  o.resolve = []() -> absl::StatusOr<std::string> {
    return absl::UnavailableError("no leader elected");
  };
  o.connect_timeout_ns = 300'000'000;
  auto ch = TcpChannel::Connect("", o);
  EXPECT_TRUE(absl::IsUnavailable(ch.status())) << ch.status();
  o.failover_probe_ns = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(TcpChannel::Connect("", o).status()));
}

}  // namespace failover
}  // namespace
}  // namespace mooncake::rpc
