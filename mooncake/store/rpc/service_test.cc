#include "mooncake/store/rpc/service.h"

#include <string>

#include "gtest/gtest.h"
#include "mooncake/base/metrics.h"
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

}  // namespace
}  // namespace mooncake::rpc
