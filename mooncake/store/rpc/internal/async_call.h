// One call of an asynchronous handler (ServiceRegistry::RegisterAsync,
// service.h) between its start and its completion: what its Responder needs to
// finish it. Each transport subclasses it to say where the outcome goes
// (RpcServer: a connection; InProcessChannel: the caller's `done`).
//
// Lifetime: owned by exactly one Responder (or, before the handler runs, by
// the registry's start function) through a unique_ptr; Finish consumes it.
// The transport state a subclass needs (a connection, a channel's pending
// table) it holds by shared_ptr, so a completion after the connection, the
// server or the channel has gone is a no-op, never a use-after-free. The
// ServiceRegistry (whose metrics `metrics_` points into) must outlive every
// call it started.
//
// Thread-safety: Finish may run on any thread, once; nothing else touches the
// call concurrently (it has a single owner).
#ifndef MOONCAKE_STORE_RPC_INTERNAL_ASYNC_CALL_H_
#define MOONCAKE_STORE_RPC_INTERNAL_ASYNC_CALL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/store/rpc/internal/method_metrics.h"

namespace google::protobuf {
class MessageLite;
}  // namespace google::protobuf

namespace mooncake::rpc_internal {

class AsyncCall {
 public:
  AsyncCall() = default;
  AsyncCall(const AsyncCall&) = delete;
  AsyncCall& operator=(const AsyncCall&) = delete;
  virtual ~AsyncCall() = default;

  // Set once by ServiceRegistry::InvokeAsync before the handler sees the call.
  // `method_name` and `metrics` belong to the registry's Handler.
  void Bind(MethodMetrics* metrics, std::string_view method_name, int64_t received_ns,
            uint32_t max_response_bytes) {
    MC_ASSERT(metrics != nullptr, "an async call needs its method's metrics");
    metrics_ = metrics;
    method_name_ = method_name;
    received_ns_ = received_ns;
    max_response_bytes_ = max_response_bytes;
  }

  std::string_view method_name() const { return method_name_; }
  uint32_t max_response_bytes() const { return max_response_bytes_; }

  // What the Responder applies to an OK response before serializing it (the
  // registry's response guard, bound to the call's principal); empty: none.
  using ResponseHook = std::function<void(google::protobuf::MessageLite&)>;
  void set_response_hook(ResponseHook hook) { response_hook_ = std::move(hook); }
  const ResponseHook& response_hook() const { return response_hook_; }

  // Records the call's metrics (latency from its receipt) and hands the
  // outcome to the transport: OK with the serialized response, or an error
  // with an empty payload. Consumes the call.
  static void Finish(std::unique_ptr<AsyncCall> call, const absl::Status& status,
                     std::string_view payload) {
    MC_ASSERT(call != nullptr && call->metrics_ != nullptr, "finishing an unbound async call");
    MC_DASSERT(status.ok() || payload.empty(), "an error carries no payload");
    const int64_t now = MonotonicClock::Get().NowNs();
    call->metrics_->Record(
        status.code(),
        static_cast<uint64_t>(now > call->received_ns_ ? now - call->received_ns_ : 0));
    call->Deliver(status, payload);
  }

 protected:
  // The transport's side. Runs exactly once, on the completing thread; must
  // not block, and must be a no-op once the peer (connection, channel) is
  // gone. `payload` is valid only during the call.
  virtual void Deliver(const absl::Status& status, std::string_view payload) = 0;

 private:
  MethodMetrics* metrics_ = nullptr;
  std::string_view method_name_;
  int64_t received_ns_ = 0;
  uint32_t max_response_bytes_ = 0;
  ResponseHook response_hook_;
};

}  // namespace mooncake::rpc_internal

#endif  // MOONCAKE_STORE_RPC_INTERNAL_ASYNC_CALL_H_
