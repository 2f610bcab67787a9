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
// after the deadline completes with DEADLINE_EXCEEDED (its response dropped),
// as a TCP caller would see it. Execution modes are ignored.
//
// Thread-safety: CallRaw from any thread; the first call freezes the
// registry. `done` runs on the calling thread before CallRaw returns.
#ifndef MOONCAKE_STORE_RPC_INPROC_CHANNEL_H_
#define MOONCAKE_STORE_RPC_INPROC_CHANNEL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/store/rpc/channel.h"
#include "mooncake/store/rpc/frame.h"
#include "mooncake/store/rpc/internal/method_metrics.h"
#include "mooncake/store/rpc/service.h"

namespace mooncake::rpc {

struct InProcessChannelOptions {
  uint32_t max_payload_bytes = kDefaultMaxPayloadBytes;
  int64_t default_timeout_ns = 5'000'000'000;
  int64_t max_timeout_ns = 300'000'000'000;
  MetricsRegistry* metrics = nullptr;  // client-side metrics; null: private
};

class InProcessChannel {
 public:
  // `registry` must outlive the channel.
  explicit InProcessChannel(ServiceRegistry* registry, InProcessChannelOptions options = {})
      : registry_(registry), options_(options), metrics_(options.metrics, "mooncake_rpc_client") {
    MC_ASSERT(registry_ != nullptr, "a channel needs a registry");
    MC_ASSERT(options_.max_payload_bytes <= kMaxPayloadBytesCeiling, "limit over the ceiling");
  }

  void CallRaw(uint16_t method_id, std::string_view method_name, std::string_view request,
               CallOptions options, RawDone done) {
    MC_DASSERT(done != nullptr, "a call needs a completion");
    registry_->Freeze();
    const int64_t start_ns = MonotonicClock::Get().NowNs();
    int64_t timeout_ns = options.timeout_ns > 0 ? options.timeout_ns : options_.default_timeout_ns;
    timeout_ns = std::min(timeout_ns, options_.max_timeout_ns);
    std::string response;
    absl::Status status = Run(method_id, method_name, request, start_ns, timeout_ns, &response);
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
    if (!status.ok() && status.message().size() > kMaxErrorMessageBytes) {
      status = absl::Status(status.code(), status.message().substr(0, kMaxErrorMessageBytes));
    }
    metrics_.ForMethod(method_id, method_name)
        ->Record(status.code(), static_cast<uint64_t>(end_ns - start_ns));
    done(status, status.ok() ? std::string_view(response) : std::string_view());
  }

  uint32_t max_payload_bytes() const { return options_.max_payload_bytes; }
  MetricsRegistry* metrics() const { return metrics_.registry(); }

 private:
  absl::Status Run(uint16_t method_id, std::string_view method_name, std::string_view request,
                   int64_t start_ns, int64_t timeout_ns, std::string* response) {
    if (request.size() > options_.max_payload_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          AbslView(method_name), " request of ", request.size(),
          " bytes exceeds the channel's limit of ", options_.max_payload_bytes, " bytes"));
    }
    const Handler* handler = registry_->Find(method_id);
    if (handler == nullptr) {
      registry_->RecordRejected(0, "unknown", absl::StatusCode::kUnimplemented, start_ns);
      return absl::UnimplementedError(
          absl::StrCat("no handler for method id ", method_id, " on this server"));
    }
    ServerCallContext ctx;
    ctx.request_id = next_id_.fetch_add(1, std::memory_order_relaxed);
    ctx.method_id = method_id;
    ctx.received_ns = start_ns;
    ctx.deadline_ns = start_ns + timeout_ns;
    ctx.peer = "inproc";
    return registry_->Invoke(*handler, request, ctx, response);
  }

  ServiceRegistry* const registry_;
  const InProcessChannelOptions options_;
  mutable rpc_internal::MetricsTable metrics_;
  std::atomic<uint64_t> next_id_{1};
};

static_assert(RpcChannel<InProcessChannel>);

}  // namespace mooncake::rpc

#endif  // MOONCAKE_STORE_RPC_INPROC_CHANNEL_H_
