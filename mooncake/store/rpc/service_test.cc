#include "mooncake/store/rpc/service.h"

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/rpc/echo_testing.h"
#include "mooncake/store/rpc/testdata/echo.pb.h"

namespace mooncake::rpc {
namespace {

ServerCallContext Ctx(uint16_t method, uint64_t id = 1) {
  ServerCallContext ctx;
  ctx.method_id = method;
  ctx.request_id = id;
  ctx.received_ns = MonotonicClock::Get().NowNs();
  return ctx;
}

TEST(ServiceRegistryTest, RegisterFindInvoke) {
  ServiceRegistry registry;
  ASSERT_TRUE(RegisterEcho(&registry).ok());
  registry.Freeze();
  const Handler* h = registry.Find(EchoMethod::kId);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->name, "Echo");
  EXPECT_EQ(h->options.mode, ExecutionMode::kWorker);
  EXPECT_EQ(registry.Find(EchoInlineMethod::kId)->options.mode, ExecutionMode::kInline);
  EXPECT_EQ(registry.Find(UnregisteredMethod::kId), nullptr);
  std::string out;
  ASSERT_TRUE(
      registry.Invoke(*h, MakeEcho("abc").SerializeAsString(), Ctx(EchoMethod::kId, 77), &out)
          .ok());
  echo::EchoResponse resp;
  ASSERT_TRUE(resp.ParseFromString(out));
  EXPECT_EQ(resp.payload(), "abc");
  EXPECT_EQ(resp.request_id(), 77u);  // the handler saw its context
}

TEST(ServiceRegistryTest, DuplicateIdIsAlreadyExists) {
  ServiceRegistry registry;
  ASSERT_TRUE(registry.Register<EchoMethod>(EchoHandler).ok());
  const absl::Status s = registry.Register<EchoMethod>(EchoHandler);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find("Echo"), std::string_view::npos);
}

TEST(ServiceRegistryTest, RegisterAfterFreezeIsFailedPrecondition) {
  ServiceRegistry registry;
  registry.Freeze();
  EXPECT_EQ(registry.Register<EchoMethod>(EchoHandler).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ServiceRegistryTest, HandlerWithoutContext) {
  ServiceRegistry registry;
  ASSERT_TRUE(registry
                  .Register<EchoMethod>(
                      [](const echo::EchoRequest& r) -> absl::StatusOr<echo::EchoResponse> {
                        echo::EchoResponse resp;
                        resp.set_payload(r.payload() + "!");
                        return resp;
                      })
                  .ok());
  registry.Freeze();
  std::string out;
  ASSERT_TRUE(registry
                  .Invoke(*registry.Find(EchoMethod::kId), MakeEcho("hi").SerializeAsString(),
                          Ctx(EchoMethod::kId), &out)
                  .ok());
  echo::EchoResponse resp;
  ASSERT_TRUE(resp.ParseFromString(out));
  EXPECT_EQ(resp.payload(), "hi!");
}

TEST(ServiceRegistryTest, MalformedRequestIsInvalidArgument) {
  ServiceRegistry registry;
  ASSERT_TRUE(RegisterEcho(&registry).ok());
  registry.Freeze();
  std::string out = "stale";
  const absl::Status s = registry.Invoke(*registry.Find(EchoMethod::kId),
                                         std::string("\x0a\x7f", 2), Ctx(EchoMethod::kId), &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("EchoRequest"), std::string_view::npos) << s;
  EXPECT_TRUE(out.empty());
}

TEST(ServiceRegistryTest, OversizedResponseIsResourceExhausted) {
  ServiceRegistry registry(nullptr, /*max_response_bytes=*/100);
  ASSERT_TRUE(RegisterEcho(&registry).ok());
  registry.Freeze();
  echo::EchoRequest req;
  req.set_response_bytes(101);
  std::string out;
  EXPECT_EQ(registry
                .Invoke(*registry.Find(EchoMethod::kId), req.SerializeAsString(),
                        Ctx(EchoMethod::kId), &out)
                .code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(ServiceRegistryTest, MetricsCountCallsAndErrorsByCode) {
  MetricsRegistry metrics;
  ServiceRegistry registry(&metrics);
  ASSERT_TRUE(RegisterEcho(&registry).ok());
  registry.Freeze();
  const Handler& h = *registry.Find(EchoMethod::kId);
  std::string out;
  echo::EchoRequest fail;
  fail.set_error_code(static_cast<uint32_t>(absl::StatusCode::kPermissionDenied));
  for (int i = 0; i < 3; ++i) {
    (void)registry.Invoke(h, MakeEcho("x").SerializeAsString(), Ctx(EchoMethod::kId), &out);
  }
  (void)registry.Invoke(h, fail.SerializeAsString(), Ctx(EchoMethod::kId), &out);
  registry.RecordRejected(0, "unknown", absl::StatusCode::kUnimplemented, 0);
  const std::string text = metrics.RenderPrometheus();
  EXPECT_NE(text.find("mooncake_rpc_server_calls_total{method=\"Echo\"} 4"), std::string::npos)
      << text;
  EXPECT_NE(text.find("mooncake_rpc_server_errors_total{code=\"PERMISSION_DENIED\",method="
                      "\"Echo\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("mooncake_rpc_server_calls_total{method=\"unknown\"} 1"), std::string::npos)
      << text;
  EXPECT_NE(text.find("mooncake_rpc_server_latency_seconds_count{method=\"Echo\"} 4"),
            std::string::npos);
}

// An AsyncCall that keeps its outcome, so a test can wait for it.
struct Outcome {
  Mutex mu;
  std::optional<absl::Status> status ABSL_GUARDED_BY(mu);
  std::string payload ABSL_GUARDED_BY(mu);
  std::thread::id thread ABSL_GUARDED_BY(mu);

  absl::Status Wait() {
    MutexLock lock(&mu);
    mu.Await(Condition(
        +[](std::optional<absl::Status>* s) { return s->has_value(); }, &status));
    return *status;
  }
  bool done() {
    MutexLock lock(&mu);
    return status.has_value();
  }
};

// It points at the test's Outcome rather than sharing it: every test waits for
// the delivery, so the Outcome outlives the call, and the delivering thread
// never holds the last reference (libstdc++'s shared_ptr release takes a
// both-counts-are-one shortcut that ThreadSanitizer reports as a race on the
// free when that thread is another than the one that waited).
class RecordingCall final : public rpc_internal::AsyncCall {
 public:
  explicit RecordingCall(Outcome* out) : out_(out) {}

 private:
  void Deliver(const absl::Status& status, std::string_view payload) override {
    MutexLock lock(&out_->mu);
    EXPECT_FALSE(out_->status.has_value()) << "delivered twice";
    // A copy with its own representation, not a reference to the caller's:
    // an error Status's refcount lives in Debian's libabsl_status, which is
    // not built for ThreadSanitizer, so a last release on the delivering
    // thread after this one read it would look like a race on the free.
    out_->status = absl::Status(status.code(), status.message());
    out_->payload = std::string(payload);
    out_->thread = std::this_thread::get_id();
  }
  Outcome* out_;
};

std::shared_ptr<Outcome> StartAsync(const ServiceRegistry& registry, uint16_t method,
                                    const std::string& request, uint64_t id = 1) {
  auto out = std::make_shared<Outcome>();
  registry.InvokeAsync(*registry.Find(method), request, Ctx(method, id),
                       std::make_unique<RecordingCall>(out.get()));
  return out;
}

TEST(ServiceRegistryAsyncTest, CompletesFromAnotherThreadAfterADelay) {
  MetricsRegistry metrics;
  ServiceRegistry registry(&metrics);
  DeferredCompleter completer;
  ASSERT_TRUE(RegisterEchoAsync(&registry, &completer).ok());
  registry.Freeze();
  EXPECT_TRUE(registry.Find(EchoAsyncMethod::kId)->async);
  auto out =
      StartAsync(registry, EchoAsyncMethod::kId, MakeEcho("later", 30).SerializeAsString(), 42);
  // InvokeAsync returned without an answer, and nothing is counted yet.
  EXPECT_FALSE(out->done());
  EXPECT_NE(
      metrics.RenderPrometheus().find("mooncake_rpc_server_calls_total{method=\"EchoAsync\"} 0"),
      std::string::npos);
  ASSERT_TRUE(out->Wait().ok());
  MutexLock lock(&out->mu);
  EXPECT_EQ(out->thread, completer.thread_id());
  echo::EchoResponse resp;
  ASSERT_TRUE(resp.ParseFromString(out->payload));
  EXPECT_EQ(resp.payload(), "later");
  EXPECT_EQ(resp.request_id(), 42u);
  const std::string text = metrics.RenderPrometheus();
  EXPECT_NE(text.find("mooncake_rpc_server_calls_total{method=\"EchoAsync\"} 1"), std::string::npos)
      << text;
}

TEST(ServiceRegistryAsyncTest, ErrorCompletionKeepsCodeAndMessage) {
  ServiceRegistry registry;
  DeferredCompleter completer;
  ASSERT_TRUE(RegisterEchoAsync(&registry, &completer).ok());
  registry.Freeze();
  echo::EchoRequest req = MakeEcho("x", 5);
  req.set_error_code(static_cast<uint32_t>(absl::StatusCode::kNotFound));
  req.set_error_message("no such key");
  auto out = StartAsync(registry, EchoAsyncMethod::kId, req.SerializeAsString());
  const absl::Status s = out->Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "no such key");
}

TEST(ServiceRegistryAsyncTest, DroppedResponderIsInternal) {
  MetricsRegistry metrics;
  ServiceRegistry registry(&metrics);
  ASSERT_TRUE(registry
                  .RegisterAsync<EchoAsyncMethod>(
                      [](const echo::EchoRequest&, Responder<echo::EchoResponse> respond) {
                        EXPECT_TRUE(respond.pending());
                      })
                  .ok());
  registry.Freeze();
  auto out = StartAsync(registry, EchoAsyncMethod::kId, MakeEcho("x").SerializeAsString());
  ASSERT_TRUE(out->done());  // dropped as the handler returned
  const absl::Status s = out->Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("handler dropped the call"), std::string_view::npos) << s;
  EXPECT_NE(metrics.RenderPrometheus().find(
                "mooncake_rpc_server_errors_total{code=\"INTERNAL\",method=\"EchoAsync\"} 1"),
            std::string::npos);
}

TEST(ServiceRegistryAsyncTest, AssigningOverAPendingResponderDropsIt) {
  ServiceRegistry registry;
  std::vector<Responder<echo::EchoResponse>> kept;
  ASSERT_TRUE(registry
                  .RegisterAsync<EchoAsyncMethod>(
                      [&kept](const echo::EchoRequest&, Responder<echo::EchoResponse> respond) {
                        kept.push_back(std::move(respond));
                      })
                  .ok());
  registry.Freeze();
  auto first = StartAsync(registry, EchoAsyncMethod::kId, MakeEcho("1").SerializeAsString(), 1);
  auto second = StartAsync(registry, EchoAsyncMethod::kId, MakeEcho("2").SerializeAsString(), 2);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_FALSE(first->done());
  kept[0] = std::move(kept[1]);
  EXPECT_EQ(first->Wait().code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(second->done());
  std::move(kept[0])(echo::EchoResponse());
  EXPECT_TRUE(second->Wait().ok());
  EXPECT_FALSE(kept[0].pending());
}

TEST(ServiceRegistryAsyncTest, OversizedResponseIsResourceExhausted) {
  ServiceRegistry registry(nullptr, /*max_response_bytes=*/100);
  DeferredCompleter completer;
  ASSERT_TRUE(RegisterEchoAsync(&registry, &completer).ok());
  registry.Freeze();
  echo::EchoRequest req;
  req.set_response_bytes(101);
  auto out = StartAsync(registry, EchoAsyncMethod::kId, req.SerializeAsString());
  const absl::Status s = out->Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("EchoAsync response of"), std::string_view::npos) << s;
  MutexLock lock(&out->mu);
  EXPECT_TRUE(out->payload.empty());
}

TEST(ServiceRegistryAsyncTest, MalformedRequestFinishesAtOnceWithoutTheHandler) {
  ServiceRegistry registry;
  bool ran = false;
  ASSERT_TRUE(
      registry
          .RegisterAsync<EchoAsyncMethod>(
              [&ran](const echo::EchoRequest&, Responder<echo::EchoResponse>) { ran = true; })
          .ok());
  registry.Freeze();
  auto out = StartAsync(registry, EchoAsyncMethod::kId, std::string("\x0a\x7f", 2));
  ASSERT_TRUE(out->done());
  EXPECT_EQ(out->Wait().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ran);
}

TEST(ServiceRegistryAsyncTest, InlineFirstIsRefusedAndIdsAreShared) {
  ServiceRegistry registry;
  auto noop = [](const echo::EchoRequest&, Responder<echo::EchoResponse>) {};
  EXPECT_EQ(
      registry.RegisterAsync<EchoAsyncMethod>(noop, {.mode = ExecutionMode::kInlineFirst}).code(),
      absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(registry.Register<EchoMethod>(EchoHandler).ok());
  // Sync and async registrations share one id space.
  struct SameId : EchoMethod {};
  EXPECT_EQ(registry.RegisterAsync<SameId>(noop).code(), absl::StatusCode::kAlreadyExists);
  registry.Freeze();
  EXPECT_EQ(registry.RegisterAsync<EchoAsyncMethod>(noop).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace mooncake::rpc

namespace mooncake::rpc {
namespace {

// The response guard runs on OK answers of calls that carry a principal, in
// sync handlers before serializing and in async ones when the Responder is
// called (after the caller's context, and its principal, are gone).
TEST(ServiceRegistryResponseGuardTest, CompletesAnswersOfAuthenticatedCallsOnly) {
  ServiceRegistry registry;
  DeferredCompleter completer;
  ASSERT_TRUE(RegisterEcho(&registry).ok());
  ASSERT_TRUE(RegisterEchoAsync(&registry, &completer).ok());
  ASSERT_TRUE(
      registry
          .SetResponseGuard([](const ServerCallContext& ctx, google::protobuf::MessageLite& m) {
            auto& resp = static_cast<echo::EchoResponse&>(m);
            resp.set_payload(resp.payload() + "+" + ctx.principal->name);
          })
          .ok());
  registry.Freeze();
  EXPECT_TRUE(absl::IsFailedPrecondition(registry.SetResponseGuard(nullptr)));

  ServerCallContext ctx = Ctx(EchoMethod::kId);
  std::string out;
  ASSERT_TRUE(
      registry.Invoke(*registry.Find(EchoMethod::kId), MakeEcho("a").SerializeAsString(), ctx, &out)
          .ok());
  echo::EchoResponse resp;
  ASSERT_TRUE(resp.ParseFromString(out));
  EXPECT_EQ(resp.payload(), "a");  // no principal: untouched

  auto who = std::make_unique<auth::Principal>(auth::PrincipalFromName("tenant:alice"));
  ctx.principal = who.get();
  ASSERT_TRUE(
      registry.Invoke(*registry.Find(EchoMethod::kId), MakeEcho("b").SerializeAsString(), ctx, &out)
          .ok());
  ASSERT_TRUE(resp.ParseFromString(out));
  EXPECT_EQ(resp.payload(), "b+tenant:alice");

  auto async_out = std::make_shared<Outcome>();
  ServerCallContext actx = Ctx(EchoAsyncMethod::kId);
  actx.principal = who.get();
  registry.InvokeAsync(*registry.Find(EchoAsyncMethod::kId), MakeEcho("c", 20).SerializeAsString(),
                       actx, std::make_unique<RecordingCall>(async_out.get()));
  who.reset();  // the connection is gone before the answer
  ASSERT_TRUE(async_out->Wait().ok());
  MutexLock lock(&async_out->mu);
  ASSERT_TRUE(resp.ParseFromString(async_out->payload));
  EXPECT_EQ(resp.payload(), "c+tenant:alice");
}

}  // namespace
}  // namespace mooncake::rpc
