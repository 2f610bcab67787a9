#include "mooncake/store/rpc/tcp_server.h"

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/echo_testing.h"
#include "mooncake/store/rpc/frame.h"
#include "mooncake/store/rpc/internal/socket.h"
#include "mooncake/store/rpc/tcp_channel.h"

namespace mooncake::rpc {
namespace {

struct OwnedFrame {
  FrameHeader header;
  std::string payload;
};

// A raw client socket that speaks (or abuses) the frame format directly.
class RawConn {
 public:
  explicit RawConn(const std::string& address) {
    auto fd = rpc_internal::ConnectTcp(address, 2'000'000'000);
    EXPECT_TRUE(fd.ok()) << fd.status();
    if (fd.ok()) fd_ = std::move(*fd);
  }

  // A small fixed receive buffer (no autotuning: loopback's can reach 32 MB).
  void ShrinkReceiveBuffer() {
    int bytes = 64 << 10;
    ASSERT_EQ(::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)), 0);
  }

  // Best effort: a server that already closed may refuse part of it.
  bool Send(std::string_view bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      pollfd p{fd_.get(), POLLOUT, 0};
      if (::poll(&p, 1, 2000) <= 0) return false;
      const ssize_t n = ::send(fd_.get(), bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }

  // The next frame, nullopt on EOF; fails the test on timeout.
  std::optional<OwnedFrame> Read(int timeout_ms = 5000) {
    for (;;) {
      auto next = dec_.Next();
      EXPECT_TRUE(next.ok()) << next.status();
      if (!next.ok()) return std::nullopt;
      if (next->has_value()) return OwnedFrame{(*next)->header, std::string((*next)->payload)};
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, timeout_ms) <= 0) {
        ADD_FAILURE() << "no frame within " << timeout_ms << " ms";
        return std::nullopt;
      }
      auto span = dec_.WritableSpan(64 << 10);
      const ssize_t n = ::recv(fd_.get(), span.data(), span.size(), 0);
      if (n <= 0) return std::nullopt;
      dec_.Commit(static_cast<size_t>(n));
    }
  }

  // True when the server closes the connection within the timeout.
  bool ReadsEof(int timeout_ms = 5000) {
    char buf[4096];
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < until) {
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), 0);
      if (n <= 0) return true;
    }
    return false;
  }

 private:
  UniqueFd fd_;
  FrameDecoder dec_{kMaxPayloadBytesCeiling};
};

std::string EchoFrame(uint64_t id, const echo::EchoRequest& req, uint16_t method = EchoMethod::kId,
                      uint32_t timeout_us = 0) {
  FrameHeader h;
  h.method_id = method;
  h.request_id = id;
  h.timeout_us = timeout_us;
  return EncodeFrame(h, req.SerializeAsString());
}

class TcpServerTest : public ::testing::Test {
 protected:
  void Start(RpcServerOptions options = {}) {
    ASSERT_TRUE(RegisterEcho(&registry_).ok());
    server_ = std::make_unique<RpcServer>(&registry_, options);
    ASSERT_TRUE(server_->Start().ok());
  }
  // The server still answers a well-behaved client.
  void ExpectHealthy() {
    auto channel = TcpChannel::Connect(server_->address());
    ASSERT_TRUE(channel.ok()) << channel.status();
    auto r = Call<EchoMethod>(**channel, MakeEcho("still here"));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->payload(), "still here");
  }
  std::string Metrics() { return server_->metrics()->RenderPrometheus(); }

  MetricsRegistry metrics_;
  ServiceRegistry registry_{&metrics_};
  std::unique_ptr<RpcServer> server_;
};

TEST_F(TcpServerTest, GarbageGetsAConnectionErrorThenClose) {
  Start();
  RawConn conn(server_->address());
  ASSERT_TRUE(conn.Send("GET / HTTP/1.1\r\nHost: example\r\n\r\n"));
  auto f = conn.Read();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->header.kind, FrameKind::kResponse);
  EXPECT_EQ(f->header.request_id, 0u);
  EXPECT_EQ(f->header.code, absl::StatusCode::kInvalidArgument);
  EXPECT_NE(f->payload.find("magic"), std::string::npos) << f->payload;
  EXPECT_TRUE(conn.ReadsEof());
  ExpectHealthy();
  EXPECT_NE(Metrics().find("mooncake_rpc_server_protocol_errors_total 1"), std::string::npos);
}

TEST_F(TcpServerTest, RandomGarbageNeverCrashesTheServer) {
  Start({.max_payload_bytes = 4096, .linger_ms = 100});
  std::mt19937_64 rng(7);
  const std::string valid = EchoFrame(1, MakeEcho("seed payload"));
  for (int i = 0; i < 40; ++i) {
    RawConn conn(server_->address());
    std::string bytes;
    switch (i % 4) {
      case 0:  // pure noise
        bytes.resize(1 + rng() % 2000);
        for (char& c : bytes) c = static_cast<char>(rng());
        break;
      case 1:  // a valid frame with a few flipped bytes
        bytes = valid;
        for (int k = 0; k < 3; ++k)
          bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
        break;
      case 2:  // valid frames followed by noise
        bytes = valid + valid + std::string(64, static_cast<char>(rng()));
        break;
      default:  // a truncated frame, then the peer hangs up
        bytes = valid.substr(0, rng() % valid.size());
        break;
    }
    conn.Send(bytes);
    if (i % 4 == 3) continue;  // destructor closes mid-frame
    // Whatever came back, the server ends the connection (or answers
    // valid frames and then ends it once the noise starts).
    EXPECT_TRUE(conn.ReadsEof()) << "case " << i;
  }
  ExpectHealthy();
}

TEST_F(TcpServerTest, OversizedFrameIsRefusedWithoutReadingThePayload) {
  Start({.max_payload_bytes = 1024});
  RawConn conn(server_->address());
  // Only the header of a 1 GiB frame: the server must answer from it alone.
  std::string header = EchoFrame(5, MakeEcho("x"));
  header.resize(kFrameHeaderBytes);
  const uint32_t huge = 1u << 30;
  for (int i = 0; i < 4; ++i) header[20 + i] = static_cast<char>(huge >> (8 * i));
  const uint32_t sum = FrameChecksum(header.data(), 28);
  for (int i = 0; i < 4; ++i) header[28 + i] = static_cast<char>(sum >> (8 * i));
  ASSERT_TRUE(conn.Send(header));
  auto f = conn.Read();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->header.code, absl::StatusCode::kResourceExhausted);
  EXPECT_NE(f->payload.find("exceeds the limit of 1024"), std::string::npos) << f->payload;
  EXPECT_TRUE(conn.ReadsEof());
  ExpectHealthy();
}

TEST_F(TcpServerTest, ResponseFrameFromAClientIsAProtocolError) {
  Start();
  RawConn conn(server_->address());
  FrameHeader h;
  h.kind = FrameKind::kResponse;
  h.method_id = 1;
  h.request_id = 3;
  ASSERT_TRUE(conn.Send(EncodeFrame(h, "")));
  auto f = conn.Read();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->header.code, absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(conn.ReadsEof());
}

TEST_F(TcpServerTest, UnknownMethodKeepsTheConnection) {
  Start();
  RawConn conn(server_->address());
  ASSERT_TRUE(conn.Send(EchoFrame(11, MakeEcho("?"), 4242)));
  auto f = conn.Read();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->header.request_id, 11u);
  EXPECT_EQ(f->header.code, absl::StatusCode::kUnimplemented);
  ASSERT_TRUE(conn.Send(EchoFrame(12, MakeEcho("ok"))));
  auto g = conn.Read();
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->header.request_id, 12u);
  EXPECT_EQ(g->header.code, absl::StatusCode::kOk);
}

TEST_F(TcpServerTest, PipelinedRequestsInOneWriteAllAnswered) {
  Start();
  RawConn conn(server_->address());
  std::string batch;
  constexpr uint64_t kN = 200;
  for (uint64_t id = 1; id <= kN; ++id) {
    batch += EchoFrame(id, MakeEcho(std::to_string(id)),
                       id % 2 ? EchoMethod::kId : EchoInlineMethod::kId);
  }
  ASSERT_TRUE(conn.Send(batch));
  std::vector<int> seen(kN + 1, 0);
  for (uint64_t i = 0; i < kN; ++i) {
    auto f = conn.Read();
    ASSERT_TRUE(f.has_value());
    ASSERT_EQ(f->header.code, absl::StatusCode::kOk) << f->payload;
    echo::EchoResponse resp;
    ASSERT_TRUE(resp.ParseFromString(f->payload));
    EXPECT_EQ(resp.payload(), std::to_string(f->header.request_id));
    EXPECT_EQ(resp.request_id(), f->header.request_id);
    ++seen[f->header.request_id];
  }
  for (uint64_t id = 1; id <= kN; ++id) EXPECT_EQ(seen[id], 1) << id;
}

// Echo messages served in kInlineFirst mode (and, to test misuse, kInline):
// the reply says where the handler ran; payload "defer" asks to move.
struct EchoFirstMethod {
  static constexpr uint16_t kId = 3;
  static constexpr std::string_view kName = "EchoFirst";
  using Request = echo::EchoRequest;
  using Response = echo::EchoResponse;
};
struct EchoDeferInlineMethod {
  static constexpr uint16_t kId = 4;
  static constexpr std::string_view kName = "EchoDeferInline";
  using Request = echo::EchoRequest;
  using Response = echo::EchoResponse;
};

absl::StatusOr<echo::EchoResponse> WhereItRan(const echo::EchoRequest& req,
                                              const ServerCallContext& ctx) {
  if (ctx.may_defer && req.payload() == "defer") return DeferToWorker("the test asked");
  echo::EchoResponse resp;
  resp.set_payload(req.payload() + (ctx.may_defer ? "@io" : "@pool"));
  return resp;
}

TEST_F(TcpServerTest, InlineFirstRunsOnTheIoThreadUnlessItDefers) {
  ASSERT_TRUE(
      registry_.Register<EchoFirstMethod>(WhereItRan, {.mode = ExecutionMode::kInlineFirst}).ok());
  Start({.worker_threads = 1});
  auto channel = TcpChannel::Connect(server_->address());
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stay = Call<EchoFirstMethod>(**channel, MakeEcho("stay"));
  ASSERT_TRUE(stay.ok()) << stay.status();
  EXPECT_EQ(stay->payload(), "stay@io");
  auto moved = Call<EchoFirstMethod>(**channel, MakeEcho("defer"));
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(moved->payload(), "defer@pool");
  const std::string m = Metrics();
  EXPECT_NE(m.find("mooncake_rpc_server_deferred_total 1"), std::string::npos) << m;
  // Each call is recorded once, where it finally ran.
  EXPECT_NE(m.find("mooncake_rpc_server_calls_total{method=\"EchoFirst\"} 2"), std::string::npos)
      << m;
  EXPECT_EQ(m.find("mooncake_rpc_server_errors_total{code=\"INTERNAL\""), std::string::npos) << m;
}

TEST_F(TcpServerTest, DeferredCallOnAFullQueueIsOverloaded) {
  ASSERT_TRUE(
      registry_.Register<EchoFirstMethod>(WhereItRan, {.mode = ExecutionMode::kInlineFirst}).ok());
  Start({.worker_threads = 1, .worker_queue_capacity = 1});
  RawConn conn(server_->address());
  // One echo runs and one waits; the deferral finds the queue full.
  ASSERT_TRUE(conn.Send(EchoFrame(1, MakeEcho("hold", 300))));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the pool's thread took it
  ASSERT_TRUE(conn.Send(EchoFrame(2, MakeEcho("wait")) +
                        EchoFrame(3, MakeEcho("defer"), EchoFirstMethod::kId)));
  bool saw_overloaded = false;
  for (int i = 0; i < 3; ++i) {
    auto f = conn.Read();
    ASSERT_TRUE(f.has_value());
    if (f->header.request_id == 3) {
      saw_overloaded = f->header.code == absl::StatusCode::kUnavailable;
      EXPECT_NE(f->payload.find("overloaded"), std::string::npos) << f->payload;
    }
  }
  EXPECT_TRUE(saw_overloaded);
  ExpectHealthy();
}

TEST_F(TcpServerTest, DeferralOutsideInlineFirstIsAnInternalError) {
  // A kInline handler (may_defer is false there) that defers anyway: the
  // caller gets the INTERNAL error, nothing is queued or retried.
  ASSERT_TRUE(registry_
                  .Register<EchoDeferInlineMethod>(
                      [](const echo::EchoRequest&) -> absl::StatusOr<echo::EchoResponse> {
                        return DeferToWorker("misused");
                      },
                      {.mode = ExecutionMode::kInline})
                  .ok());
  Start();
  auto channel = TcpChannel::Connect(server_->address());
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto r = Call<EchoDeferInlineMethod>(**channel, MakeEcho("x"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal) << r.status();
  EXPECT_NE(r.status().message().find("misused"), std::string::npos) << r.status();
  EXPECT_NE(Metrics().find("mooncake_rpc_server_deferred_total 0"), std::string::npos);
}

TEST_F(TcpServerTest, FullWorkerQueueRepliesOverloaded) {
  Start({.worker_threads = 1, .worker_queue_capacity = 2});
  RawConn conn(server_->address());
  std::string batch;
  for (uint64_t id = 1; id <= 10; ++id) batch += EchoFrame(id, MakeEcho("busy", 200));
  ASSERT_TRUE(conn.Send(batch));
  int ok = 0;
  int overloaded = 0;
  for (int i = 0; i < 10; ++i) {
    auto f = conn.Read();
    ASSERT_TRUE(f.has_value());
    if (f->header.code == absl::StatusCode::kOk) ++ok;
    if (f->header.code == absl::StatusCode::kUnavailable) {
      ++overloaded;
      EXPECT_NE(f->payload.find("overloaded"), std::string::npos);
    }
  }
  EXPECT_EQ(ok + overloaded, 10);
  EXPECT_GE(overloaded, 7);  // one running, two queued while the batch arrived
  EXPECT_GE(ok, 1);
}

TEST_F(TcpServerTest, RequestExpiredInTheQueueIsNotRun) {
  Start({.worker_threads = 1});
  RawConn conn(server_->address());
  echo::EchoRequest second = MakeEcho("never");
  second.set_error_code(static_cast<uint32_t>(absl::StatusCode::kInternal));  // would fail if run
  ASSERT_TRUE(conn.Send(EchoFrame(1, MakeEcho("hold", 150)) +
                        EchoFrame(2, second, EchoMethod::kId, /*timeout_us=*/10'000)));
  for (int i = 0; i < 2; ++i) {
    auto f = conn.Read();
    ASSERT_TRUE(f.has_value());
    if (f->header.request_id == 2) {
      EXPECT_EQ(f->header.code, absl::StatusCode::kDeadlineExceeded) << f->payload;
      EXPECT_NE(f->payload.find("queue"), std::string::npos);
    } else {
      EXPECT_EQ(f->header.code, absl::StatusCode::kOk);
    }
  }
}

TEST_F(TcpServerTest, ConnectionsOverTheLimitAreTurnedAway) {
  Start({.max_connections = 2});
  RawConn a(server_->address());
  RawConn b(server_->address());
  // Make sure both are accepted before the third arrives.
  ASSERT_TRUE(a.Send(EchoFrame(1, MakeEcho("a"))));
  ASSERT_TRUE(a.Read().has_value());
  ASSERT_TRUE(b.Send(EchoFrame(1, MakeEcho("b"))));
  ASSERT_TRUE(b.Read().has_value());
  RawConn c(server_->address());
  auto f = c.Read();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->header.code, absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(c.ReadsEof());
}

TEST_F(TcpServerTest, PeerThatStopsReadingIsPausedNotBuffered) {
  Start({.max_output_bytes = 64 << 10});
  RawConn conn(server_->address());
  echo::EchoRequest big;
  big.set_response_bytes(32 << 10);
  std::string batch;
  conn.ShrinkReceiveBuffer();
  constexpr uint64_t kN = 300;  // ~10 MB of responses, far over the socket buffers
  for (uint64_t id = 1; id <= kN; ++id) batch += EchoFrame(id, big, EchoInlineMethod::kId);
  std::thread writer([&] { conn.Send(batch); });
  // Read nothing until the server has paused this peer (bounded: a server
  // that buffers without limit never does, and the test fails below).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (Metrics().find("mooncake_rpc_server_read_pauses_total 0") != std::string::npos &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  uint64_t got = 0;
  for (; got < kN; ++got) {
    auto f = conn.Read();
    if (!f.has_value() || f->header.code != absl::StatusCode::kOk) break;
  }
  writer.join();
  EXPECT_EQ(got, kN);
  EXPECT_EQ(Metrics().find("mooncake_rpc_server_read_pauses_total 0"), std::string::npos)
      << Metrics();
}

TEST_F(TcpServerTest, StartTwiceAndBadOptionsFail) {
  Start();
  EXPECT_EQ(server_->Start().code(), absl::StatusCode::kFailedPrecondition);
  ServiceRegistry other;
  RpcServer bad(&other, {.io_threads = 0});
  EXPECT_EQ(bad.Start().code(), absl::StatusCode::kInvalidArgument);
  RpcServer busy(&other, {.port = server_->port()});
  EXPECT_FALSE(busy.Start().ok());
}

TEST_F(TcpServerTest, SeveralIoThreadsServeManyConnections) {
  Start({.io_threads = 3});
  std::vector<std::unique_ptr<TcpChannel>> channels;
  for (int i = 0; i < 6; ++i) {
    auto ch = TcpChannel::Connect(server_->address());
    ASSERT_TRUE(ch.ok());
    channels.push_back(std::move(*ch));
  }
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 100; ++k) {
        const std::string p = std::to_string(i * 1000 + k);
        auto r = Call<EchoInlineMethod>(*channels[i], MakeEcho(p));
        if (!r.ok() || r->payload() != p) wrong.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

// ---- Async handlers ----------------------------------------------------------

// Keeps the Responders of its calls, for a test to answer when it likes.
struct StashMethod {
  static constexpr uint16_t kId = 7;
  static constexpr std::string_view kName = "Stash";
  using Request = echo::EchoRequest;
  using Response = echo::EchoResponse;
};
// Drops its Responders unanswered.
struct DropMethod {
  static constexpr uint16_t kId = 8;
  static constexpr std::string_view kName = "Drop";
  using Request = echo::EchoRequest;
  using Response = echo::EchoResponse;
};

class TcpServerAsyncTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kMaxResponseBytes = 64 << 10;

  void Start(RpcServerOptions options = {}) {
    ASSERT_TRUE(RegisterEchoAsync(&registry_, &completer_).ok());
    ASSERT_TRUE(registry_
                    .RegisterAsync<StashMethod>(
                        [this](const echo::EchoRequest&, Responder<echo::EchoResponse> r) {
                          MutexLock lock(&mu_);
                          stash_.push_back(std::move(r));
                        },
                        {.mode = ExecutionMode::kInline})
                    .ok());
    ASSERT_TRUE(registry_
                    .RegisterAsync<DropMethod>(
                        [](const echo::EchoRequest&, Responder<echo::EchoResponse>) {})
                    .ok());
    server_ = std::make_unique<RpcServer>(&registry_, options);
    ASSERT_TRUE(server_->Start().ok());
  }

  std::vector<Responder<echo::EchoResponse>> WaitStashed(size_t n) {
    MutexLock lock(&mu_);
    want_ = n;
    mu_.AwaitWithTimeout(Condition(this, &TcpServerAsyncTest::Enough), absl::Seconds(5));
    EXPECT_EQ(stash_.size(), n);
    return std::move(stash_);
  }
  bool Enough() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stash_.size() >= want_; }

  bool WaitForMetric(const std::string& needle) {
    for (int i = 0; i < 500; ++i) {
      if (metrics_.RenderPrometheus().find(needle) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "no " << needle << " in\n" << metrics_.RenderPrometheus();
    return false;
  }

  static void Answer(std::vector<Responder<echo::EchoResponse>> stashed) {
    // From another thread, as a group-commit thread would.
    std::thread([stashed = std::move(stashed)]() mutable {
      for (auto& r : stashed) {
        echo::EchoResponse resp;
        resp.set_payload("late");
        std::move(r)(resp);
      }
    }).join();
  }

  // Destroyed in reverse: the server first, then the completer (answering
  // what is left after the server is gone), then the registry.
  MetricsRegistry metrics_;
  ServiceRegistry registry_{&metrics_, kMaxResponseBytes};
  DeferredCompleter completer_;
  Mutex mu_;
  std::vector<Responder<echo::EchoResponse>> stash_ ABSL_GUARDED_BY(mu_);
  size_t want_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<RpcServer> server_;
};

TEST_F(TcpServerAsyncTest, AnswerComesLaterFromAnotherThread) {
  Start();
  auto channel = TcpChannel::Connect(server_->address());
  ASSERT_TRUE(channel.ok()) << channel.status();
  for (const bool inline_start : {false, true}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = inline_start ? Call<EchoAsyncInlineMethod>(**channel, MakeEcho("deferred", 30))
                          : Call<EchoAsyncMethod>(**channel, MakeEcho("deferred", 30));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->payload(), "deferred");
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(30));
  }
  WaitForMetric("mooncake_rpc_server_calls_total{method=\"EchoAsyncInline\"} 1");
  WaitForMetric("mooncake_rpc_server_calls_total{method=\"EchoAsync\"} 1");
}

TEST_F(TcpServerAsyncTest, ManyPipelinedCallsOnOneConnectionKeepTheirIds) {
  Start();
  RawConn conn(server_->address());
  std::string batch;
  constexpr uint64_t kN = 1000;
  for (uint64_t id = 1; id <= kN; ++id) {
    // Later ids often finish first: delays 0..6 ms.
    batch += EchoFrame(id, MakeEcho(std::to_string(id), static_cast<uint32_t>((kN - id) % 7)),
                       id % 2 ? EchoAsyncMethod::kId : EchoAsyncInlineMethod::kId);
  }
  ASSERT_TRUE(conn.Send(batch));
  std::vector<int> seen(kN + 1, 0);
  for (uint64_t i = 0; i < kN; ++i) {
    auto f = conn.Read();
    ASSERT_TRUE(f.has_value());
    ASSERT_EQ(f->header.code, absl::StatusCode::kOk) << f->payload;
    ASSERT_LE(f->header.request_id, kN);
    echo::EchoResponse resp;
    ASSERT_TRUE(resp.ParseFromString(f->payload));
    EXPECT_EQ(resp.payload(), std::to_string(f->header.request_id));
    EXPECT_EQ(resp.request_id(), f->header.request_id);
    ++seen[f->header.request_id];
  }
  for (uint64_t id = 1; id <= kN; ++id) EXPECT_EQ(seen[id], 1) << id;
}

TEST_F(TcpServerAsyncTest, ManyConcurrentCallsThroughOneChannel) {
  Start({.io_threads = 2, .worker_threads = 2});
  auto channel = TcpChannel::Connect(server_->address());
  ASSERT_TRUE(channel.ok()) << channel.status();
  constexpr int kThreads = 4;
  constexpr int kCalls = 250;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kCalls; ++k) {
        const std::string p = std::to_string(t * 1000 + k);
        auto r = k % 2 ? Call<EchoAsyncMethod>(**channel, MakeEcho(p, k % 3))
                       : Call<EchoAsyncInlineMethod>(**channel, MakeEcho(p, k % 3));
        if (!r.ok() || r->payload() != p) wrong.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_F(TcpServerAsyncTest, ErrorAnswerKeepsCodeAndMessage) {
  Start();
  auto channel = TcpChannel::Connect(server_->address());
  ASSERT_TRUE(channel.ok()) << channel.status();
  echo::EchoRequest req = MakeEcho("x", 5);
  req.set_error_code(static_cast<uint32_t>(absl::StatusCode::kFailedPrecondition));
  req.set_error_message("lease held elsewhere");
  auto r = Call<EchoAsyncInlineMethod>(**channel, req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(), "lease held elsewhere");
}

TEST_F(TcpServerAsyncTest, DroppedResponderAnswersInternal) {
  Start();
  auto channel = TcpChannel::Connect(server_->address());
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto r = Call<DropMethod>(**channel, MakeEcho("x"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(r.status().message().find("handler dropped the call"), std::string_view::npos)
      << r.status();
}

TEST_F(TcpServerAsyncTest, OversizedAnswerIsResourceExhausted) {
  Start();
  auto channel = TcpChannel::Connect(server_->address());
  ASSERT_TRUE(channel.ok()) << channel.status();
  echo::EchoRequest req = MakeEcho("", 2);
  req.set_response_bytes(kMaxResponseBytes + 1);
  auto r = Call<EchoAsyncMethod>(**channel, req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  req.set_response_bytes(kMaxResponseBytes - 16);
  auto ok = Call<EchoAsyncMethod>(**channel, req);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->payload().size(), kMaxResponseBytes - 16);
}

TEST_F(TcpServerAsyncTest, AnswerAfterTheClientDisconnectedIsDropped) {
  Start();
  auto conn = std::make_unique<RawConn>(server_->address());
  ASSERT_TRUE(conn->Send(EchoFrame(1, MakeEcho("a"), StashMethod::kId) +
                         EchoFrame(2, MakeEcho("b"), StashMethod::kId)));
  std::vector<Responder<echo::EchoResponse>> stashed = WaitStashed(2);
  conn.reset();
  ASSERT_TRUE(WaitForMetric("mooncake_rpc_server_connections 0"));
  Answer(std::move(stashed));
  WaitForMetric("mooncake_rpc_server_calls_total{method=\"Stash\"} 2");
  auto channel = TcpChannel::Connect(server_->address());
  ASSERT_TRUE(channel.ok());
  EXPECT_TRUE(Call<EchoAsyncMethod>(**channel, MakeEcho("still here")).ok());
}

TEST_F(TcpServerAsyncTest, StopDoesNotWaitForOutstandingCallsAndLateAnswersAreDropped) {
  Start();
  auto channel = TcpChannel::Connect(server_->address());
  ASSERT_TRUE(channel.ok()) << channel.status();
  Mutex mu;
  std::vector<absl::Status> outcomes;
  for (int i = 0; i < 3; ++i) {
    CallAsync<StashMethod>(**channel, MakeEcho("x"), {.timeout_ns = 60'000'000'000},
                           [&](absl::StatusOr<echo::EchoResponse> r) {
                             MutexLock lock(&mu);
                             outcomes.push_back(r.status());
                           });
  }
  // A call the completer answers long after the server is gone.
  CallAsync<EchoAsyncMethod>(**channel, MakeEcho("y", 200), {.timeout_ns = 60'000'000'000},
                             [&](absl::StatusOr<echo::EchoResponse> r) {
                               MutexLock lock(&mu);
                               outcomes.push_back(r.status());
                             });
  std::vector<Responder<echo::EchoResponse>> stashed = WaitStashed(3);
  // The EchoAsync call runs on a worker: it is outstanding (in the completer)
  // only once that worker ran, which a loaded machine may delay past Stop.
  for (int i = 0; i < 500 && completer_.added() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(completer_.added(), 1u);
  const auto t0 = std::chrono::steady_clock::now();
  server_->Stop();
  server_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  {
    // The callers learn at once that the connection is gone.
    MutexLock lock(&mu);
    EXPECT_TRUE(mu.AwaitWithTimeout(
        Condition(
            +[](std::vector<absl::Status>* v) { return v->size() == 4; }, &outcomes),
        absl::Seconds(5)));
    for (const absl::Status& s : outcomes) EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  }
  Answer(std::move(stashed));
  std::this_thread::sleep_for(std::chrono::milliseconds(250));  // the completer's answer, too
  WaitForMetric("mooncake_rpc_server_calls_total{method=\"Stash\"} 3");
  WaitForMetric("mooncake_rpc_server_calls_total{method=\"EchoAsync\"} 1");
}

}  // namespace
}  // namespace mooncake::rpc
