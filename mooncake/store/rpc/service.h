// ServiceRegistry: the handlers a server runs, one per method id.
//
//   ServiceRegistry registry;
//   RETURN_IF_ERROR(registry.Register<GetReplicasMethod>(
//       [&](const proto::GetReplicasRequest& req) -> absl::StatusOr<proto::GetReplicasResponse> {
//         return master.GetReplicas(req);
//       },
//       {.mode = ExecutionMode::kInline}));
//   RpcServer server(&registry, options);   // or InProcessChannel channel(&registry);
//
// A handler takes the parsed request (and optionally a ServerCallContext) and
// returns absl::StatusOr<Response>. Its error status travels to the caller
// with code and message (the message cut to kMaxErrorMessageBytes).
//
// ExecutionMode says where a handler runs on a TCP server: kWorker (default)
// on the server's handler thread pool, so it may block (disk, locks held long,
// calls to other services); kInline on the I/O thread that read the request,
// which saves two thread hand-offs per call but stalls every connection of that
// thread while it runs: use it only for short non-blocking handlers (a
// metadata lookup). kInlineFirst runs on the I/O thread too, with
// ctx.may_defer set; a handler that finds it would have to block or run long
// (PutStart that must evict much) returns DeferToWorker() and runs again,
// from the start, on the pool, where may_defer is false. So it must leave no
// trace when it defers. InProcessChannel runs every handler on the caller's
// thread (may_defer false: it may block).
//
// Per-method metrics (internal/method_metrics.h) are recorded in Invoke, with
// prefix "mooncake_rpc_server".
//
// Thread-safety: Register is not thread-safe and must finish before the
// registry serves (RpcServer::Start / the first in-process call freeze it;
// registering after that is a FailedPrecondition). Find and Invoke are
// thread-safe and lock-free on the registry.
#ifndef MOONCAKE_STORE_RPC_SERVICE_H_
#define MOONCAKE_STORE_RPC_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/metrics.h"
#include "mooncake/store/rpc/channel.h"
#include "mooncake/store/rpc/frame.h"
#include "mooncake/store/rpc/internal/method_metrics.h"

namespace mooncake::rpc {

enum class ExecutionMode : uint8_t { kWorker, kInline, kInlineFirst };

struct HandlerOptions {
  ExecutionMode mode = ExecutionMode::kWorker;
};

struct ServerCallContext {
  uint64_t request_id = 0;
  uint16_t method_id = 0;
  int64_t received_ns = 0;  // MonotonicClock time the request was read
  int64_t deadline_ns = 0;  // MonotonicClock time the caller gives up; 0 = none sent
  std::string_view peer;    // "ip:port" of the caller; "inproc" in-process
  // Set only while a kInlineFirst handler runs on a server I/O thread: it must
  // not block there, and may return DeferToWorker() instead. (kInline
  // handlers run there too, with no way out: false.)
  bool may_defer = false;
};

// What a kInlineFirst handler returns on the I/O thread to be run again on
// the handler pool. Never reaches a caller: the server recognises it
// (IsDeferToWorker) and queues the call; returned anywhere else (off the I/O
// thread, or by another mode) it is an INTERNAL error like any other.
inline constexpr std::string_view kDeferToWorkerPayload = "type.mooncake/rpc.DeferToWorker";

inline absl::Status DeferToWorker(std::string_view why) {
  absl::Status s = absl::InternalError(
      absl::StrCat("handler deferred to the worker pool outside an I/O thread: ", AbslView(why)));
  s.SetPayload(AbslView(kDeferToWorkerPayload), absl::Cord("1"));
  return s;
}

inline bool IsDeferToWorker(const absl::Status& s) {
  return !s.ok() && s.GetPayload(AbslView(kDeferToWorkerPayload)).has_value();
}

// A registered method, type-erased.
struct Handler {
  uint16_t method_id = 0;
  std::string name;
  HandlerOptions options;
  // Parses `request`, runs the handler, serializes the response into
  // `*response` (cleared first). On error `*response` is left empty.
  std::function<absl::Status(std::string_view request, const ServerCallContext&,
                             std::string* response)>
      run;
  rpc_internal::MethodMetrics* metrics = nullptr;
};

class ServiceRegistry {
 public:
  // `metrics` may be null (a private registry is used); it must outlive this.
  explicit ServiceRegistry(MetricsRegistry* metrics = nullptr,
                           uint32_t max_response_bytes = kDefaultMaxPayloadBytes)
      : metrics_(metrics, "mooncake_rpc_server"), max_response_bytes_(max_response_bytes) {
    MC_ASSERT(max_response_bytes <= kMaxPayloadBytesCeiling, "limit over the format's ceiling");
  }
  ServiceRegistry(const ServiceRegistry&) = delete;
  ServiceRegistry& operator=(const ServiceRegistry&) = delete;

  // `handler` is invocable as (const Request&) or (const Request&, const
  // ServerCallContext&) and returns absl::StatusOr<Response>; it must be
  // thread-safe (calls run concurrently). Errors: ALREADY_EXISTS (id taken),
  // FAILED_PRECONDITION (the registry already serves).
  template <RpcMethod M, typename F>
  absl::Status Register(F handler, HandlerOptions options = {}) {
    using Req = typename M::Request;
    using Resp = typename M::Response;
    static_assert(std::is_invocable_v<F&, const Req&> ||
                      std::is_invocable_v<F&, const Req&, const ServerCallContext&>,
                  "handler must be callable as (const Request&[, const ServerCallContext&])");
    if (frozen_.load(std::memory_order_acquire)) {
      return absl::FailedPreconditionError(absl::StrCat("cannot register ",
                                                        AbslView(std::string_view(M::kName)),
                                                        ": the registry already serves"));
    }
    if (handlers_.contains(M::kId)) {
      return absl::AlreadyExistsError(
          absl::StrCat("method id ", M::kId, " (", AbslView(std::string_view(M::kName)),
                       ") is already registered as ", handlers_.at(M::kId)->name));
    }
    auto h = std::make_unique<Handler>();
    h->method_id = M::kId;
    h->name = std::string(M::kName);
    h->options = options;
    h->metrics = metrics_.ForMethod(M::kId, M::kName);
    const uint32_t max_response_bytes = max_response_bytes_;
    h->run = [fn = std::move(handler), max_response_bytes](
                 std::string_view request, const ServerCallContext& ctx,
                 std::string* response) mutable -> absl::Status {
      Req req;
      if (!req.ParseFromArray(request.data(), static_cast<int>(request.size()))) {
        return absl::InvalidArgumentError(
            absl::StrCat("malformed ", AbslView(std::string_view(M::kName)), " request (",
                         request.size(), " bytes): does not parse as ", req.GetTypeName()));
      }
      absl::StatusOr<Resp> resp = [&] {
        if constexpr (std::is_invocable_v<F&, const Req&, const ServerCallContext&>) {
          return absl::StatusOr<Resp>(fn(req, ctx));
        } else {
          return absl::StatusOr<Resp>(fn(req));
        }
      }();
      if (!resp.ok()) return resp.status();
      const size_t size = resp->ByteSizeLong();
      if (size > max_response_bytes) {
        return absl::ResourceExhaustedError(
            absl::StrCat(AbslView(std::string_view(M::kName)), " response of ", size,
                         " bytes exceeds the limit of ", max_response_bytes, " bytes"));
      }
      response->clear();
      if (!resp->SerializeToString(response)) {
        return absl::InternalError(
            absl::StrCat(AbslView(std::string_view(M::kName)), " response does not serialize"));
      }
      return absl::OkStatus();
    };
    handlers_.emplace(M::kId, std::move(h));
    return absl::OkStatus();
  }

  // After this, Register fails and Find/Invoke may run concurrently.
  void Freeze() { frozen_.store(true, std::memory_order_release); }
  bool frozen() const { return frozen_.load(std::memory_order_acquire); }

  // nullptr for an unknown method id. REQUIRES: frozen().
  const Handler* Find(uint16_t method_id) const {
    MC_DASSERT(frozen(), "Find on a registry that may still change");
    auto it = handlers_.find(method_id);
    return it == handlers_.end() ? nullptr : it->second.get();
  }

  // Runs `handler` and records its metrics (latency from ctx.received_ns). A
  // deferral (IsDeferToWorker, only with ctx.may_defer) records nothing:
  // the call is recorded once, where it finally runs.
  absl::Status Invoke(const Handler& handler, std::string_view request,
                      const ServerCallContext& ctx, std::string* response) const {
    MC_DASSERT(ctx.method_id == handler.method_id, "context names another method");
    absl::Status s = handler.run(request, ctx, response);
    if (!s.ok()) response->clear();
    if (ctx.may_defer && IsDeferToWorker(s)) return s;
    const int64_t now = MonotonicClock::Get().NowNs();
    handler.metrics->Record(
        s.code(), static_cast<uint64_t>(now > ctx.received_ns ? now - ctx.received_ns : 0));
    return s;
  }

  // Records a call that never reached a handler (unknown method, overload,
  // expired in the queue) under the method's metrics.
  void RecordRejected(uint16_t method_id, std::string_view name, absl::StatusCode code,
                      int64_t received_ns) {
    const int64_t now = MonotonicClock::Get().NowNs();
    metrics_.ForMethod(method_id, name)
        ->Record(code, static_cast<uint64_t>(now > received_ns ? now - received_ns : 0));
  }

  MetricsRegistry* metrics() const { return metrics_.registry(); }
  uint32_t max_response_bytes() const { return max_response_bytes_; }

 private:
  rpc_internal::MetricsTable metrics_;
  uint32_t max_response_bytes_;
  std::atomic<bool> frozen_{false};
  absl::flat_hash_map<uint16_t, std::unique_ptr<Handler>> handlers_;
};

}  // namespace mooncake::rpc

#endif  // MOONCAKE_STORE_RPC_SERVICE_H_
