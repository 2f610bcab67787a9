// An echo service for the RPC tests and benchmarks: method types and a
// handler that echoes, sleeps or fails on request (testdata/echo.proto).
#ifndef MOONCAKE_STORE_RPC_ECHO_TESTING_H_
#define MOONCAKE_STORE_RPC_ECHO_TESTING_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mooncake/store/rpc/channel.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/rpc/testdata/echo.pb.h"

namespace mooncake::rpc {

// Runs on the handler thread pool.
struct EchoMethod {
  static constexpr uint16_t kId = 1;
  static constexpr std::string_view kName = "Echo";
  using Request = echo::EchoRequest;
  using Response = echo::EchoResponse;
};

// Same messages, run inline on the server's I/O thread.
struct EchoInlineMethod {
  static constexpr uint16_t kId = 2;
  static constexpr std::string_view kName = "EchoInline";
  using Request = echo::EchoRequest;
  using Response = echo::EchoResponse;
};

// Never registered: calls get UNIMPLEMENTED.
struct UnregisteredMethod {
  static constexpr uint16_t kId = 999;
  static constexpr std::string_view kName = "Unregistered";
  using Request = echo::EchoRequest;
  using Response = echo::EchoResponse;
};

static_assert(RpcMethod<EchoMethod>);
static_assert(RpcMethod<EchoInlineMethod>);

inline absl::StatusOr<echo::EchoResponse> EchoHandler(const echo::EchoRequest& req,
                                                      const ServerCallContext& ctx) {
  if (req.sleep_ms() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(req.sleep_ms()));
  if (req.error_code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(req.error_code()), req.error_message());
  }
  echo::EchoResponse resp;
  if (req.response_bytes() > 0) {
    resp.set_payload(std::string(req.response_bytes(), 'r'));
  } else {
    resp.set_payload(req.payload());
  }
  resp.set_request_id(ctx.request_id);
  return resp;
}

// Registers EchoMethod (worker) and EchoInlineMethod (inline).
inline absl::Status RegisterEcho(ServiceRegistry* registry) {
  if (absl::Status s = registry->Register<EchoMethod>(EchoHandler); !s.ok()) return s;
  return registry->Register<EchoInlineMethod>(EchoHandler, {.mode = ExecutionMode::kInline});
}

inline echo::EchoRequest MakeEcho(std::string payload, uint32_t sleep_ms = 0) {
  echo::EchoRequest req;
  req.set_payload(std::move(payload));
  req.set_sleep_ms(sleep_ms);
  return req;
}

}  // namespace mooncake::rpc

#endif  // MOONCAKE_STORE_RPC_ECHO_TESTING_H_
