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
// Asynchronous handlers (RegisterAsync) answer later, from any thread: they
// take a Responder<Response> instead of returning one, and return at once.
// For calls that wait on something another thread finishes (a log entry made
// durable by a group-commit thread) without holding a thread per call:
//
//   registry.RegisterAsync<PutEndMethod>(
//       [&](const proto::PutEndRequest& req, const ServerCallContext& ctx,
//           Responder<proto::PutEndResponse> respond) {
//         log.Append(Entry(req), [respond = std::move(respond)](absl::Status s) mutable {
//           if (!s.ok()) return std::move(respond)(s);
//           std::move(respond)(proto::PutEndResponse());
//         });
//       },
//       {.mode = ExecutionMode::kInline});
//
// A Responder completes its call exactly once; one destroyed without being
// called answers INTERNAL ("handler dropped the call"). The response is
// serialized (max_response_bytes applies: RESOURCE_EXHAUSTED), the metrics
// recorded (latency from ctx.received_ns) and the answer sent on the thread
// that completes it; that must not block long (it may write to a socket
// without blocking, or run an in-process caller's `done`). The request and
// ctx (ctx.peer included) are valid only while the handler runs: copy what
// the completion needs. Completing after the caller, its connection or the
// server has gone is allowed and a no-op for the transport (the metrics still
// count it). REQUIRES: the registry outlives every Responder it handed out.
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
// thread (may_defer false: it may block). Async handlers take kInline or
// kWorker (the start runs there; the completion wherever it happens) and must
// not block in either; kInlineFirst is refused for them.
//
// Per-method metrics (internal/method_metrics.h) are recorded in Invoke (for
// async handlers: at completion), with prefix "mooncake_rpc_server".
//
// Thread-safety: Register/RegisterAsync are not thread-safe and must finish
// before the registry serves (RpcServer::Start / the first in-process call
// freeze it; registering after that is a FailedPrecondition). Find, Invoke and
// InvokeAsync are thread-safe and lock-free on the registry. A Responder may
// be moved to and completed on any thread, but is not itself synchronized:
// one owner at a time.
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
#include "mooncake/base/auth.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/metrics.h"
#include "mooncake/store/rpc/channel.h"
#include "mooncake/store/rpc/frame.h"
#include "mooncake/store/rpc/internal/async_call.h"
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
  // Who the connection proved to be (base/auth.h) on a server with
  // credentials; null on a server without them and in process (trusted).
  const auth::Principal* principal = nullptr;
};

// Checks (and may rewrite) a parsed request before its handler runs, for
// calls whose ctx.principal is set (ServiceRegistry::SetRequestGuard): an
// error is the call's answer and the handler does not run.
using RequestGuard =
    std::function<absl::Status(const ServerCallContext&, google::protobuf::MessageLite&)>;

// Completes (may rewrite) an OK response before it is serialized, for calls
// whose ctx.principal is set (ServiceRegistry::SetResponseGuard): the master
// adds what only an authenticated caller gets (range capabilities). For an
// asynchronous handler it runs when the Responder is called, with a copy of
// the context whose `peer` is empty.
using ResponseGuard = std::function<void(const ServerCallContext&, google::protobuf::MessageLite&)>;

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

// A registered method, type-erased. Exactly one of `run` (Register) and
// `start` (RegisterAsync) is set; `async` says which.
struct Handler {
  uint16_t method_id = 0;
  bool async = false;
  std::string name;
  HandlerOptions options;
  // Parses `request`, runs the handler, serializes the response into
  // `*response` (cleared first). On error `*response` is left empty.
  std::function<absl::Status(std::string_view request, const ServerCallContext&,
                             std::string* response)>
      run;
  // Parses `request` and starts the handler with a Responder owning `call`
  // (bound by InvokeAsync); a request that does not parse finishes `call`
  // at once.
  std::function<void(std::string_view request, const ServerCallContext&,
                     std::unique_ptr<rpc_internal::AsyncCall> call)>
      start;
  rpc_internal::MethodMetrics* metrics = nullptr;
};

}  // namespace mooncake::rpc

namespace mooncake::rpc_internal {

// The response bytes of a handler's result, or RESOURCE_EXHAUSTED over
// `max_response_bytes`. `*out` is cleared first.
template <typename Resp>
absl::Status SerializeResponse(const Resp& resp, std::string_view method_name,
                               uint32_t max_response_bytes, std::string* out) {
  const size_t size = resp.ByteSizeLong();
  if (size > max_response_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(AbslView(method_name), " response of ", size,
                                                     " bytes exceeds the limit of ",
                                                     max_response_bytes, " bytes"));
  }
  out->clear();
  if (!resp.SerializeToString(out)) {
    return absl::InternalError(absl::StrCat(AbslView(method_name), " response does not serialize"));
  }
  return absl::OkStatus();
}

template <typename Req>
absl::Status MalformedRequest(std::string_view method_name, const Req& req, size_t size) {
  return absl::InvalidArgumentError(absl::StrCat("malformed ", AbslView(method_name), " request (",
                                                 size, " bytes): does not parse as ",
                                                 req.GetTypeName()));
}

}  // namespace mooncake::rpc_internal

namespace mooncake::rpc {

// Completes one call of an asynchronous handler (RegisterAsync), exactly
// once, from any thread:
//
//   std::move(respond)(response);                 // OK
//   std::move(respond)(absl::NotFoundError(...));  // an error, as a handler returns it
//
// Move-only. Destroying (or assigning over) a Responder that has not been
// called answers its call INTERNAL "handler dropped the call". Calling one
// twice or after a move is a programmer error (assertion).
template <typename Resp>
class Responder {
 public:
  Responder() = default;  // answers nothing; for containers
  Responder(Responder&&) noexcept = default;
  Responder& operator=(Responder&& other) noexcept {
    if (this != &other) {
      Drop();
      call_ = std::move(other.call_);
    }
    return *this;
  }
  ~Responder() { Drop(); }

  // Serializes `result` (RESOURCE_EXHAUSTED over the registry's
  // max_response_bytes), records the method's metrics and sends the answer
  // from this thread; a no-op for the transport when the caller is gone.
  void operator()(absl::StatusOr<Resp> result) && {
    MC_ASSERT(call_ != nullptr, "Responder called twice, after a move, or default-built");
    std::unique_ptr<rpc_internal::AsyncCall> call = std::move(call_);
    if (!result.ok()) {
      rpc_internal::AsyncCall::Finish(std::move(call), result.status(), {});
      return;
    }
    if (call->response_hook()) call->response_hook()(*result);
    std::string out;
    const absl::Status s = rpc_internal::SerializeResponse(*result, call->method_name(),
                                                           call->max_response_bytes(), &out);
    rpc_internal::AsyncCall::Finish(std::move(call), s,
                                    s.ok() ? std::string_view(out) : std::string_view());
  }

  // True until the call is answered (or moved away).
  bool pending() const { return call_ != nullptr; }

 private:
  friend class ServiceRegistry;
  explicit Responder(std::unique_ptr<rpc_internal::AsyncCall> call) : call_(std::move(call)) {
    MC_DASSERT(call_ != nullptr, "a Responder for no call");
  }

  void Drop() {
    if (call_ == nullptr) return;
    const std::string_view name = call_->method_name();
    rpc_internal::AsyncCall::Finish(
        std::move(call_),
        absl::InternalError(absl::StrCat(AbslView(name), ": handler dropped the call")), {});
  }

  std::unique_ptr<rpc_internal::AsyncCall> call_;
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
    if (absl::Status s = CheckRegistrable(M::kId, M::kName); !s.ok()) return s;
    std::unique_ptr<Handler> h = NewHandler(M::kId, M::kName, options);
    const uint32_t max_response_bytes = max_response_bytes_;
    h->run = [fn = std::move(handler), max_response_bytes, guard = &guard_,
              response_guard = &response_guard_](std::string_view request,
                                                 const ServerCallContext& ctx,
                                                 std::string* response) mutable -> absl::Status {
      Req req;
      if (!req.ParseFromArray(request.data(), static_cast<int>(request.size()))) {
        return rpc_internal::MalformedRequest(M::kName, req, request.size());
      }
      if (ctx.principal != nullptr && *guard != nullptr) {
        if (absl::Status s = (*guard)(ctx, req); !s.ok()) return s;
      }
      absl::StatusOr<Resp> resp = [&] {
        if constexpr (std::is_invocable_v<F&, const Req&, const ServerCallContext&>) {
          return absl::StatusOr<Resp>(fn(req, ctx));
        } else {
          return absl::StatusOr<Resp>(fn(req));
        }
      }();
      if (!resp.ok()) return resp.status();
      if (ctx.principal != nullptr && *response_guard != nullptr) (*response_guard)(ctx, *resp);
      return rpc_internal::SerializeResponse(*resp, M::kName, max_response_bytes, response);
    };
    handlers_.emplace(M::kId, std::move(h));
    return absl::OkStatus();
  }

  // An asynchronous handler: `handler` is invocable as (const Request&,
  // Responder<Response>) or (const Request&, const ServerCallContext&,
  // Responder<Response>), returns nothing and must not block; it answers by
  // calling the Responder, now or later from any thread (see the top of this
  // file). It must be thread-safe (calls start concurrently). options.mode is
  // kInline or kWorker. Errors: INVALID_ARGUMENT (kInlineFirst),
  // ALREADY_EXISTS, FAILED_PRECONDITION as for Register.
  template <RpcMethod M, typename F>
  absl::Status RegisterAsync(F handler, HandlerOptions options = {}) {
    using Req = typename M::Request;
    using Resp = typename M::Response;
    constexpr bool kWithContext =
        std::is_invocable_v<F&, const Req&, const ServerCallContext&, Responder<Resp>>;
    static_assert(kWithContext || std::is_invocable_v<F&, const Req&, Responder<Resp>>,
                  "async handler must be callable as (const Request&[, const "
                  "ServerCallContext&], Responder<Response>)");
    if (options.mode == ExecutionMode::kInlineFirst) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot register ", AbslView(std::string_view(M::kName)),
                       ": async handlers never block, so kInlineFirst has nothing to defer; use "
                       "kInline or kWorker"));
    }
    if (absl::Status s = CheckRegistrable(M::kId, M::kName); !s.ok()) return s;
    std::unique_ptr<Handler> h = NewHandler(M::kId, M::kName, options);
    h->async = true;
    h->start = [fn = std::move(handler), guard = &guard_, response_guard = &response_guard_](
                   std::string_view request, const ServerCallContext& ctx,
                   std::unique_ptr<rpc_internal::AsyncCall> call) mutable {
      Req req;
      if (!req.ParseFromArray(request.data(), static_cast<int>(request.size()))) {
        rpc_internal::AsyncCall::Finish(
            std::move(call), rpc_internal::MalformedRequest(M::kName, req, request.size()), {});
        return;
      }
      if (ctx.principal != nullptr && *guard != nullptr) {
        if (absl::Status s = (*guard)(ctx, req); !s.ok()) {
          rpc_internal::AsyncCall::Finish(std::move(call), s, {});
          return;
        }
      }
      if (ctx.principal != nullptr && *response_guard != nullptr) {
        // The Responder may run after the connection (and its principal) is
        // gone: the hook keeps its own copy.
        auto who = std::make_shared<const auth::Principal>(*ctx.principal);
        ServerCallContext kept = ctx;
        kept.peer = {};
        kept.principal = who.get();
        call->set_response_hook(
            [g = response_guard, kept, who](google::protobuf::MessageLite& m) { (*g)(kept, m); });
      }
      if constexpr (kWithContext) {
        fn(req, ctx, Responder<Resp>(std::move(call)));
      } else {
        fn(req, Responder<Resp>(std::move(call)));
      }
    };
    handlers_.emplace(M::kId, std::move(h));
    return absl::OkStatus();
  }

  // The guard every call of an authenticated connection passes (after its
  // request parses, before its handler). Only before Freeze; a registry
  // served without credentials never calls it.
  absl::Status SetRequestGuard(RequestGuard guard) {
    if (frozen()) {
      return absl::FailedPreconditionError(
          "cannot set a request guard: the registry already serves");
    }
    guard_ = std::move(guard);
    return absl::OkStatus();
  }

  // The guard every OK response of an authenticated connection passes
  // before it is serialized. Only before Freeze.
  absl::Status SetResponseGuard(ResponseGuard guard) {
    if (frozen()) {
      return absl::FailedPreconditionError(
          "cannot set a response guard: the registry already serves");
    }
    response_guard_ = std::move(guard);
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
  // the call is recorded once, where it finally runs. REQUIRES: !handler.async.
  absl::Status Invoke(const Handler& handler, std::string_view request,
                      const ServerCallContext& ctx, std::string* response) const {
    MC_DASSERT(ctx.method_id == handler.method_id, "context names another method");
    MC_DASSERT(!handler.async, "Invoke on an async handler: use InvokeAsync");
    absl::Status s = handler.run(request, ctx, response);
    if (!s.ok()) response->clear();
    if (ctx.may_defer && IsDeferToWorker(s)) return s;
    const int64_t now = MonotonicClock::Get().NowNs();
    handler.metrics->Record(
        s.code(), static_cast<uint64_t>(now > ctx.received_ns ? now - ctx.received_ns : 0));
    return s;
  }

  // Starts an async `handler` on this thread with a Responder owning `call`.
  // The outcome reaches `call` (AsyncCall::Finish, which records the metrics)
  // exactly once: before this returns (a malformed request, a handler that
  // answers at once) or later, on the thread that completes it.
  // REQUIRES: handler.async.
  void InvokeAsync(const Handler& handler, std::string_view request, const ServerCallContext& ctx,
                   std::unique_ptr<rpc_internal::AsyncCall> call) const {
    MC_ASSERT(handler.async && call != nullptr, "InvokeAsync needs an async handler and a call");
    MC_DASSERT(ctx.method_id == handler.method_id, "context names another method");
    call->Bind(handler.metrics, handler.name, ctx.received_ns, max_response_bytes_);
    handler.start(request, ctx, std::move(call));
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
  absl::Status CheckRegistrable(uint16_t method_id, std::string_view name) const {
    if (frozen_.load(std::memory_order_acquire)) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot register ", AbslView(name), ": the registry already serves"));
    }
    if (auto it = handlers_.find(method_id); it != handlers_.end()) {
      return absl::AlreadyExistsError(absl::StrCat("method id ", method_id, " (", AbslView(name),
                                                   ") is already registered as ",
                                                   it->second->name));
    }
    return absl::OkStatus();
  }

  std::unique_ptr<Handler> NewHandler(uint16_t method_id, std::string_view name,
                                      HandlerOptions options) {
    auto h = std::make_unique<Handler>();
    h->method_id = method_id;
    h->name = std::string(name);
    h->options = options;
    h->metrics = metrics_.ForMethod(method_id, name);
    return h;
  }

  rpc_internal::MetricsTable metrics_;
  uint32_t max_response_bytes_;
  std::atomic<bool> frozen_{false};
  absl::flat_hash_map<uint16_t, std::unique_ptr<Handler>> handlers_;
  RequestGuard guard_;            // set before Freeze, read-only after
  ResponseGuard response_guard_;  // likewise
};

}  // namespace mooncake::rpc

#endif  // MOONCAKE_STORE_RPC_SERVICE_H_
