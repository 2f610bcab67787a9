#include "mooncake/store/rpc/inproc_channel.h"

#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/channel_testing.h"
#include "mooncake/store/rpc/echo_testing.h"

namespace mooncake::rpc {
namespace {

struct InProcessHarness {
  using Channel = InProcessChannel;
  static std::unique_ptr<InProcessHarness> Make(ServiceRegistry* registry,
                                                uint32_t max_payload_bytes) {
    auto h = std::make_unique<InProcessHarness>();
    h->channel_ = std::make_unique<InProcessChannel>(
        registry, InProcessChannelOptions{.max_payload_bytes = max_payload_bytes});
    return h;
  }
  Channel& channel() { return *channel_; }
  std::unique_ptr<InProcessChannel> channel_;
};

INSTANTIATE_TYPED_TEST_SUITE_P(InProcess, RpcChannelConformance, InProcessHarness);

TEST(InProcessChannelTest, FirstCallFreezesTheRegistry) {
  ServiceRegistry registry;
  ASSERT_TRUE(registry.Register<EchoMethod>(EchoHandler).ok());
  InProcessChannel channel(&registry);
  ASSERT_TRUE(Call<EchoMethod>(channel, MakeEcho("x")).ok());
  EXPECT_EQ(registry.Register<EchoInlineMethod>(EchoHandler).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(InProcessChannelTest, InlineFirstHandlersRunWhereTheyMayBlock) {
  ServiceRegistry registry;
  ASSERT_TRUE(registry
                  .Register<EchoInlineMethod>(
                      [](const echo::EchoRequest& req,
                         const ServerCallContext& ctx) -> absl::StatusOr<echo::EchoResponse> {
                        if (ctx.may_defer) return DeferToWorker("not on a caller's thread");
                        echo::EchoResponse resp;
                        resp.set_payload(req.payload());
                        return resp;
                      },
                      {.mode = ExecutionMode::kInlineFirst})
                  .ok());
  InProcessChannel channel(&registry);
  auto r = Call<EchoInlineMethod>(channel, MakeEcho("ran"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->payload(), "ran");
}

TEST(InProcessChannelTest, RecordsClientMetrics) {
  ServiceRegistry registry;
  ASSERT_TRUE(RegisterEcho(&registry).ok());
  MetricsRegistry metrics;
  InProcessChannel channel(&registry, {.metrics = &metrics});
  ASSERT_TRUE(Call<EchoMethod>(channel, MakeEcho("x")).ok());
  EXPECT_FALSE(Call<UnregisteredMethod>(channel, MakeEcho("x")).ok());
  const std::string text = metrics.RenderPrometheus();
  EXPECT_NE(text.find("mooncake_rpc_client_calls_total{method=\"Echo\"} 1"), std::string::npos)
      << text;
  EXPECT_NE(text.find("mooncake_rpc_client_errors_total{code=\"UNIMPLEMENTED\",method="
                      "\"Unregistered\"} 1"),
            std::string::npos)
      << text;
}

// ---- Async handlers ----------------------------------------------------------

// The outcome of one CallAsync, and the thread its callback ran on.
struct Outcome {
  Mutex mu;
  std::optional<absl::StatusOr<echo::EchoResponse>> result ABSL_GUARDED_BY(mu);
  std::thread::id thread ABSL_GUARDED_BY(mu);

  auto Done() {
    return [this](absl::StatusOr<echo::EchoResponse> r) {
      MutexLock lock(&mu);
      EXPECT_FALSE(result.has_value()) << "done ran twice";
      result.emplace(std::move(r));
      thread = std::this_thread::get_id();
    };
  }
  bool has_result() {
    MutexLock lock(&mu);
    return result.has_value();
  }
  absl::StatusOr<echo::EchoResponse> Wait() {
    MutexLock lock(&mu);
    mu.Await(Condition(
        +[](std::optional<absl::StatusOr<echo::EchoResponse>>* r) { return r->has_value(); },
        &result));
    return *result;
  }
};

TEST(InProcessChannelAsyncTest, AnswerComesFromTheCompletingThreadAfterCallRawReturns) {
  ServiceRegistry registry;
  DeferredCompleter completer;
  ASSERT_TRUE(RegisterEchoAsync(&registry, &completer).ok());
  InProcessChannel channel(&registry);
  Outcome out;
  CallAsync<EchoAsyncMethod>(channel, MakeEcho("later", 30), {}, out.Done());
  EXPECT_FALSE(out.has_result());  // CallRaw returned without an answer
  auto r = out.Wait();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->payload(), "later");
  MutexLock lock(&out.mu);
  EXPECT_EQ(out.thread, completer.thread_id());
}

TEST(InProcessChannelAsyncTest, BlockingCallWaitsForTheAnswer) {
  ServiceRegistry registry;
  DeferredCompleter completer;
  ASSERT_TRUE(RegisterEchoAsync(&registry, &completer).ok());
  InProcessChannel channel(&registry);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 100; ++k) {
        const std::string p = std::to_string(t * 1000 + k);
        auto r = Call<EchoAsyncInlineMethod>(channel, MakeEcho(p, k % 3));
        if (!r.ok() || r->payload() != p) wrong.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(InProcessChannelAsyncTest, ErrorsDropsAndOversizedAnswers) {
  ServiceRegistry registry(nullptr, /*max_response_bytes=*/1000);
  DeferredCompleter completer;
  ASSERT_TRUE(RegisterEchoAsync(&registry, &completer).ok());
  ASSERT_TRUE(
      registry
          .RegisterAsync<EchoMethod>([](const echo::EchoRequest&, Responder<echo::EchoResponse>) {})
          .ok());
  InProcessChannel channel(&registry);
  echo::EchoRequest fail = MakeEcho("x", 3);
  fail.set_error_code(static_cast<uint32_t>(absl::StatusCode::kAborted));
  fail.set_error_message("log write failed");
  auto e = Call<EchoAsyncMethod>(channel, fail);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(e.status().message(), "log write failed");
  auto d = Call<EchoMethod>(channel, MakeEcho("x"));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(d.status().message().find("handler dropped the call"), std::string_view::npos);
  echo::EchoRequest big = MakeEcho("", 3);
  big.set_response_bytes(1001);
  EXPECT_EQ(Call<EchoAsyncMethod>(channel, big).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(InProcessChannelAsyncTest, AnswerAfterTheDeadlineIsDeadlineExceeded) {
  ServiceRegistry registry;
  DeferredCompleter completer;
  ASSERT_TRUE(RegisterEchoAsync(&registry, &completer).ok());
  InProcessChannel channel(&registry);
  auto r = Call<EchoAsyncMethod>(channel, MakeEcho("slow", 50), {.timeout_ns = 10'000'000});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
}

TEST(InProcessChannelAsyncTest, DestroyingTheChannelCancelsAndLateAnswersAreDropped) {
  ServiceRegistry registry;
  Mutex mu;
  std::vector<Responder<echo::EchoResponse>> stash;
  ASSERT_TRUE(registry
                  .RegisterAsync<EchoAsyncMethod>(
                      [&](const echo::EchoRequest&, Responder<echo::EchoResponse> r) {
                        MutexLock lock(&mu);
                        stash.push_back(std::move(r));
                      })
                  .ok());
  Outcome a, b;
  {
    InProcessChannel channel(&registry);
    CallAsync<EchoAsyncMethod>(channel, MakeEcho("a"), {}, a.Done());
    CallAsync<EchoAsyncMethod>(channel, MakeEcho("b"), {}, b.Done());
    EXPECT_FALSE(a.has_result());
  }
  EXPECT_EQ(a.Wait().status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(b.Wait().status().code(), absl::StatusCode::kCancelled);
  // Answered (and one dropped) from another thread after the channel is gone.
  std::thread([&] {
    MutexLock lock(&mu);
    ASSERT_EQ(stash.size(), 2u);
    std::move(stash[0])(echo::EchoResponse());
    stash.clear();
  }).join();
}

}  // namespace
}  // namespace mooncake::rpc
