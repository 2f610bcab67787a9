// InProcessChannel: an RpcChannel that runs a ServiceRegistry's handlers on
// the calling thread, with no socket and no frame.
//
// For tests and for an embedded deployment (master and client in one
// process): code written against RpcChannel runs unchanged over TCP or in
// process. Requests and responses are still serialized, so a message that
// would not survive the wire does not survive here either, and size limits
// and status codes match TcpChannel's (channel_testing.h checks both).
//
// Deadlines: a handler cannot be interrupted; a call whose handler returns
// (or, async, completes) after the deadline completes with DEADLINE_EXCEEDED
// (its response dropped), as a TCP caller would see it. Execution modes are
// ignored.
//
// Async handlers (ServiceRegistry::RegisterAsync) start on the calling thread
// too; the call completes when their Responder is called, on that thread,
// which may be another one after CallRaw has returned: `done` then runs
// there. A handler that never answers is not timed out (there is no timer
// thread); dropping its Responder answers INTERNAL. Destroying the channel
// fails its outstanding async calls with CANCELLED at once, and waits only
// for completions already running their `done`; later completions are
// dropped (the pending table they need is shared, so this is safe).
//
// Thread-safety: CallRaw from any thread; the first call freezes the
// registry. For sync handlers `done` runs on the calling thread before
// CallRaw returns. The destructor must not run concurrently with CallRaw, nor
// from inside a `done`.
#ifndef MOONCAKE_STORE_RPC_INPROC_CHANNEL_H_
#define MOONCAKE_STORE_RPC_INPROC_CHANNEL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/rpc/channel.h"
#include "mooncake/store/rpc/frame.h"
#include "mooncake/store/rpc/internal/async_call.h"
#include "mooncake/store/rpc/internal/method_metrics.h"
#include "mooncake/store/rpc/service.h"

namespace mooncake::rpc {

struct InProcessChannelOptions {
  uint32_t max_payload_bytes = kDefaultMaxPayloadBytes;
  int64_t default_timeout_ns = 5'000'000'000;
  int64_t max_timeout_ns = 300'000'000'000;
  MetricsRegistry* metrics = nullptr;  // client-side metrics; null: private
};

}  // namespace mooncake::rpc

namespace mooncake::rpc_internal {

// What an InProcessChannel shares with its outstanding async calls, so that
// they can complete after the channel is gone: its limits, its client
// metrics and the table of calls not yet answered.
//
// Thread-safety: every method from any thread. Invariant: after Close(),
// pending_ is empty and stays so.
class InProcessCore {
 public:
  struct Pending {
    rpc::RawDone done;
    uint16_t method_id = 0;
    std::string_view method_name;  // outlives the call (RpcChannel contract)
    int64_t start_ns = 0;
    int64_t timeout_ns = 0;
  };

  explicit InProcessCore(const rpc::InProcessChannelOptions& options)
      : options_(options), metrics_(options.metrics, "mooncake_rpc_client") {}

  const rpc::InProcessChannelOptions& options() const { return options_; }
  MetricsRegistry* metrics() const { return metrics_.registry(); }

  // Applies the channel's checks to a handler's outcome (response size,
  // deadline, error message length), records the client metrics, runs `done`.
  void Finish(uint16_t method_id, std::string_view method_name, int64_t start_ns,
              int64_t timeout_ns, absl::Status status, std::string_view response,
              const rpc::RawDone& done) {
    const int64_t end_ns = MonotonicClock::Get().NowNs();
    if (status.ok() && response.size() > options_.max_payload_bytes) {
      status = absl::ResourceExhaustedError(absl::StrCat("response of ", response.size(),
                                                         " bytes exceeds the channel's limit of ",
                                                         options_.max_payload_bytes, " bytes"));
    }
    if (status.ok() && end_ns - start_ns > timeout_ns) {
      status = absl::DeadlineExceededError(
          absl::StrCat(AbslView(method_name), " (in process) took ",
                       static_cast<double>(end_ns - start_ns) / 1e6, " ms, over its deadline of ",
                       static_cast<double>(timeout_ns) / 1e6, " ms"));
    }
    if (!status.ok() && status.message().size() > rpc::kMaxErrorMessageBytes) {
      status = absl::Status(status.code(), status.message().substr(0, rpc::kMaxErrorMessageBytes));
    }
    metrics_.ForMethod(method_id, method_name)
        ->Record(status.code(), static_cast<uint64_t>(end_ns - start_ns));
    done(status, status.ok() ? response : std::string_view());
  }

  // REQUIRES: the channel is open (not concurrent with Close), `id` unused.
  void AddPending(uint64_t id, Pending pending) {
    MutexLock lock(&mu_);
    MC_ASSERT(!closed_, "a call on a destroyed in-process channel");
    const bool inserted = pending_.emplace(id, std::move(pending)).second;
    MC_ASSERT(inserted, "in-process call id reused");
  }

  // An async call's outcome: finishes it unless Close() already has.
  void Complete(uint64_t id, const absl::Status& status, std::string_view response) {
    std::optional<Pending> p;
    {
      MutexLock lock(&mu_);
      auto it = pending_.find(id);
      if (it == pending_.end()) return;  // cancelled by Close()
      p.emplace(std::move(it->second));
      pending_.erase(it);
      ++delivering_;
    }
    Finish(p->method_id, p->method_name, p->start_ns, p->timeout_ns, status, response, p->done);
    MutexLock lock(&mu_);
    --delivering_;
    MC_DASSERT(delivering_ >= 0, "delivery count below zero");
  }

  // The channel's destructor: fails every outstanding call with CANCELLED
  // and waits for completions already running their `done`, so none runs
  // after the channel is gone. Idempotent.
  void Close() {
    absl::flat_hash_map<uint64_t, Pending> cancelled;
    {
      MutexLock lock(&mu_);
      closed_ = true;
      cancelled.swap(pending_);
    }
    for (auto& [id, p] : cancelled) {
      Finish(p.method_id, p.method_name, p.start_ns, p.timeout_ns,
             absl::CancelledError(absl::StrCat(AbslView(p.method_name),
                                               ": in-process channel destroyed with the call "
                                               "pending")),
             {}, p.done);
    }
    MutexLock lock(&mu_);
    mu_.Await(Condition(
        +[](int* delivering) { return *delivering == 0; }, &delivering_));
    MC_DASSERT(pending_.empty(), "a call added while closing");
  }

 private:
  const rpc::InProcessChannelOptions options_;
  MetricsTable metrics_;
  Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int delivering_ ABSL_GUARDED_BY(mu_) = 0;  // Complete calls running `done`
  absl::flat_hash_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
};

// An async call made through an InProcessChannel.
class InProcessCall final : public AsyncCall {
 public:
  InProcessCall(std::shared_ptr<InProcessCore> core, uint64_t id)
      : core_(std::move(core)), id_(id) {
    MC_DASSERT(core_ != nullptr, "a call without its channel's core");
  }

 private:
  void Deliver(const absl::Status& status, std::string_view payload) override {
    core_->Complete(id_, status, payload);
  }

  const std::shared_ptr<InProcessCore> core_;
  const uint64_t id_;
};

}  // namespace mooncake::rpc_internal

namespace mooncake::rpc {

class InProcessChannel {
 public:
  // `registry` must outlive the channel and every async call made through it.
  explicit InProcessChannel(ServiceRegistry* registry, InProcessChannelOptions options = {})
      : registry_(registry), core_(std::make_shared<rpc_internal::InProcessCore>(options)) {
    MC_ASSERT(registry_ != nullptr, "a channel needs a registry");
    MC_ASSERT(options.max_payload_bytes <= kMaxPayloadBytesCeiling, "limit over the ceiling");
  }
  InProcessChannel(const InProcessChannel&) = delete;
  InProcessChannel& operator=(const InProcessChannel&) = delete;
  ~InProcessChannel() { core_->Close(); }

  void CallRaw(uint16_t method_id, std::string_view method_name, std::string_view request,
               CallOptions options, RawDone done) {
    MC_DASSERT(done != nullptr, "a call needs a completion");
    registry_->Freeze();
    const InProcessChannelOptions& o = core_->options();
    const int64_t start_ns = MonotonicClock::Get().NowNs();
    int64_t timeout_ns = options.timeout_ns > 0 ? options.timeout_ns : o.default_timeout_ns;
    timeout_ns = std::min(timeout_ns, o.max_timeout_ns);
    const Handler* handler = nullptr;
    absl::Status status = Find(method_id, method_name, request, start_ns, &handler);
    std::string response;
    if (status.ok()) {
      ServerCallContext ctx;
      ctx.request_id = next_id_.fetch_add(1, std::memory_order_relaxed);
      ctx.method_id = method_id;
      ctx.received_ns = start_ns;
      ctx.deadline_ns = start_ns + timeout_ns;
      ctx.peer = "inproc";
      if (handler->async) {
        core_->AddPending(ctx.request_id,
                          {std::move(done), method_id, method_name, start_ns, timeout_ns});
        registry_->InvokeAsync(
            *handler, request, ctx,
            std::make_unique<rpc_internal::InProcessCall>(core_, ctx.request_id));
        return;
      }
      status = registry_->Invoke(*handler, request, ctx, &response);
    }
    core_->Finish(method_id, method_name, start_ns, timeout_ns, std::move(status), response, done);
  }

  uint32_t max_payload_bytes() const { return core_->options().max_payload_bytes; }
  MetricsRegistry* metrics() const { return core_->metrics(); }

 private:
  absl::Status Find(uint16_t method_id, std::string_view method_name, std::string_view request,
                    int64_t start_ns, const Handler** handler) {
    const uint32_t max_payload_bytes = core_->options().max_payload_bytes;
    if (request.size() > max_payload_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat(AbslView(method_name), " request of ", request.size(),
                       " bytes exceeds the channel's limit of ", max_payload_bytes, " bytes"));
    }
    *handler = registry_->Find(method_id);
    if (*handler == nullptr) {
      registry_->RecordRejected(0, "unknown", absl::StatusCode::kUnimplemented, start_ns);
      return absl::UnimplementedError(
          absl::StrCat("no handler for method id ", method_id, " on this server"));
    }
    return absl::OkStatus();
  }

  ServiceRegistry* const registry_;
  const std::shared_ptr<rpc_internal::InProcessCore> core_;
  std::atomic<uint64_t> next_id_{1};
};

static_assert(RpcChannel<InProcessChannel>);

}  // namespace mooncake::rpc

#endif  // MOONCAKE_STORE_RPC_INPROC_CHANNEL_H_
