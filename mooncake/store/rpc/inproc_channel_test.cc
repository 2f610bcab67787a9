#include "mooncake/store/rpc/inproc_channel.h"

#include <memory>

#include "gtest/gtest.h"
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

}  // namespace
}  // namespace mooncake::rpc
