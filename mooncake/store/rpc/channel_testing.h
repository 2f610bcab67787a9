// Conformance kit for RpcChannel models (channel.h): one typed test suite
// that every model instantiates.
//
// A harness type H says how to stand a model up against a registry:
//   using Channel = ...;                       // the model
//   static std::unique_ptr<H> Make(ServiceRegistry* registry,
//                                  uint32_t max_payload_bytes);
//   Channel& channel();
// The registry has the echo service (echo_testing.h) registered and a
// response limit of kKitMaxPayloadBytes; Make builds whatever serves it.
//
//   INSTANTIATE_TYPED_TEST_SUITE_P(Tcp, RpcChannelConformance, TcpHarness);
#ifndef MOONCAKE_STORE_RPC_CHANNEL_TESTING_H_
#define MOONCAKE_STORE_RPC_CHANNEL_TESTING_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/channel.h"
#include "mooncake/store/rpc/echo_testing.h"
#include "mooncake/store/rpc/service.h"

namespace mooncake::rpc {

inline constexpr uint32_t kKitMaxPayloadBytes = 1 << 20;

template <typename H>
class RpcChannelConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = std::make_unique<ServiceRegistry>(nullptr, kKitMaxPayloadBytes);
    ASSERT_TRUE(RegisterEcho(registry_.get()).ok());
    harness_ = H::Make(registry_.get(), kKitMaxPayloadBytes);
    ASSERT_NE(harness_, nullptr);
    static_assert(RpcChannel<typename H::Channel>);
  }
  void TearDown() override { harness_.reset(); }

  typename H::Channel& channel() { return harness_->channel(); }

  std::unique_ptr<ServiceRegistry> registry_;
  std::unique_ptr<H> harness_;
};

TYPED_TEST_SUITE_P(RpcChannelConformance);

TYPED_TEST_P(RpcChannelConformance, RoundTripOnWorkerAndInline) {
  auto r = Call<EchoMethod>(this->channel(), MakeEcho("hello"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->payload(), "hello");
  auto i = Call<EchoInlineMethod>(this->channel(), MakeEcho("inline"));
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(i->payload(), "inline");
}

TYPED_TEST_P(RpcChannelConformance, BinaryAndLargePayloads) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (const std::string& p : {std::string(), all, std::string(kKitMaxPayloadBytes - 64, 'z')}) {
    auto r = Call<EchoMethod>(this->channel(), MakeEcho(p));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->payload(), p);
  }
}

TYPED_TEST_P(RpcChannelConformance, HandlerErrorPassesThrough) {
  echo::EchoRequest req;
  req.set_error_code(static_cast<uint32_t>(absl::StatusCode::kNotFound));
  req.set_error_message("key \"k1\" not found");
  auto r = Call<EchoMethod>(this->channel(), req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "key \"k1\" not found");
}

TYPED_TEST_P(RpcChannelConformance, UnknownMethodIsUnimplemented) {
  auto r = Call<UnregisteredMethod>(this->channel(), MakeEcho("x"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented) << r.status();
}

TYPED_TEST_P(RpcChannelConformance, MalformedRequestIsInvalidArgument) {
  absl::Status got;
  std::atomic<int> calls{0};
  // Field 1 (bytes) with a length running past the end: does not parse.
  this->channel().CallRaw(EchoMethod::kId, EchoMethod::kName, std::string("\x0a\x7f", 2), {},
                          [&](const absl::Status& s, std::string_view) {
                            got = s;
                            calls.fetch_add(1);
                          });
  for (int i = 0; i < 5000 && calls.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(got.code(), absl::StatusCode::kInvalidArgument) << got;
}

TYPED_TEST_P(RpcChannelConformance, SlowHandlerMissesItsDeadline) {
  auto r = Call<EchoMethod>(this->channel(), MakeEcho("slow", /*sleep_ms=*/300),
                            {.timeout_ns = 30'000'000});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  // The channel still works afterwards.
  auto ok = Call<EchoMethod>(this->channel(), MakeEcho("after"));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->payload(), "after");
}

TYPED_TEST_P(RpcChannelConformance, OversizedRequestIsResourceExhausted) {
  auto r = Call<EchoMethod>(this->channel(), MakeEcho(std::string(kKitMaxPayloadBytes + 1, 'x')));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
}

TYPED_TEST_P(RpcChannelConformance, OversizedResponseIsResourceExhausted) {
  echo::EchoRequest req;
  req.set_response_bytes(kKitMaxPayloadBytes + 1);
  auto r = Call<EchoMethod>(this->channel(), req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
}

TYPED_TEST_P(RpcChannelConformance, ConcurrentCallsFromManyThreads) {
  constexpr int kThreads = 6;
  constexpr int kCalls = 150;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        const std::string p = std::to_string(t) + ":" + std::to_string(i) + std::string(i, 'p');
        auto r = i % 2 == 0 ? Call<EchoMethod>(this->channel(), MakeEcho(p))
                            : Call<EchoInlineMethod>(this->channel(), MakeEcho(p));
        if (!r.ok() || r->payload() != p) wrong.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TYPED_TEST_P(RpcChannelConformance, AsyncCallsCompleteExactlyOnce) {
  constexpr int kCalls = 500;
  std::vector<std::atomic<int>> completions(kCalls);
  std::atomic<int> wrong{0};
  Mutex mu;
  int done = 0;
  for (int i = 0; i < kCalls; ++i) {
    CallAsync<EchoMethod>(this->channel(), MakeEcho(std::to_string(i)), {},
                          [&, i](absl::StatusOr<echo::EchoResponse> r) {
                            if (!r.ok() || r->payload() != std::to_string(i)) wrong.fetch_add(1);
                            completions[i].fetch_add(1);
                            MutexLock lock(&mu);
                            ++done;
                          });
  }
  MutexLock lock(&mu);
  ASSERT_TRUE(mu.AwaitWithTimeout(Condition(
                                      +[](int* d) { return *d == kCalls; }, &done),
                                  absl::Seconds(20)));
  for (int i = 0; i < kCalls; ++i) EXPECT_EQ(completions[i].load(), 1) << i;
  EXPECT_EQ(wrong.load(), 0);
}

REGISTER_TYPED_TEST_SUITE_P(RpcChannelConformance, RoundTripOnWorkerAndInline,
                            BinaryAndLargePayloads, HandlerErrorPassesThrough,
                            UnknownMethodIsUnimplemented, MalformedRequestIsInvalidArgument,
                            SlowHandlerMissesItsDeadline, OversizedRequestIsResourceExhausted,
                            OversizedResponseIsResourceExhausted, ConcurrentCallsFromManyThreads,
                            AsyncCallsCompleteExactlyOnce);

}  // namespace mooncake::rpc

#endif  // MOONCAKE_STORE_RPC_CHANNEL_TESTING_H_
