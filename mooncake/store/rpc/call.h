// Typed calls over any RpcChannel (channel.h): serialize the request, parse the
// response.
//
//   absl::StatusOr<proto::GetReplicasResponse> r =
//       rpc::Call<GetReplicasMethod>(channel, request, {.timeout_ns = 2'000'000});
//
//   rpc::CallAsync<GetReplicasMethod>(channel, request, {},
//       [](absl::StatusOr<proto::GetReplicasResponse> r) { ... });
//
// Call blocks the calling thread until the outcome (at the latest the
// deadline; in process, an asynchronous handler's answer, however late: see
// inproc_channel.h). CallAsync's callback runs where the channel runs `done`
// (see channel.h: it must not block), which in process may be the thread that
// answers an asynchronous handler's call. A request over the channel's size limit
// fails with RESOURCE_EXHAUSTED before anything is sent; a response that does
// not parse fails with INTERNAL.
#ifndef MOONCAKE_STORE_RPC_CALL_H_
#define MOONCAKE_STORE_RPC_CALL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/rpc/channel.h"

namespace mooncake::rpc_internal {

template <rpc::RpcMethod M>
absl::StatusOr<typename M::Response> ParseResponse(const absl::Status& status,
                                                   std::string_view payload) {
  if (!status.ok()) return status;
  typename M::Response response;
  if (!response.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::InternalError(absl::StrCat("malformed ", AbslView(std::string_view(M::kName)),
                                            " response (", payload.size(),
                                            " bytes): does not parse as ", response.GetTypeName()));
  }
  return response;
}

template <rpc::RpcMethod M>
absl::Status SerializeRequest(const typename M::Request& request, uint32_t max_payload_bytes,
                              std::string* out) {
  const size_t size = request.ByteSizeLong();
  if (size > max_payload_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(AbslView(std::string_view(M::kName)), " request of ", size,
                     " bytes exceeds the channel's limit of ", max_payload_bytes, " bytes"));
  }
  if (!request.SerializeToString(out)) {
    return absl::InvalidArgumentError(absl::StrCat(
        AbslView(std::string_view(M::kName)), " request does not serialize (missing fields?)"));
  }
  return absl::OkStatus();
}

}  // namespace mooncake::rpc_internal

namespace mooncake::rpc {

// `done` is invoked exactly once with absl::StatusOr<typename M::Response>.
template <RpcMethod M, RpcChannel C, typename F>
void CallAsync(C& channel, const typename M::Request& request, CallOptions options, F done) {
  std::string payload;
  if (absl::Status s =
          rpc_internal::SerializeRequest<M>(request, channel.max_payload_bytes(), &payload);
      !s.ok()) {
    done(absl::StatusOr<typename M::Response>(std::move(s)));
    return;
  }
  channel.CallRaw(
      M::kId, M::kName, payload, options,
      [done = std::move(done)](const absl::Status& status, std::string_view response) mutable {
        done(rpc_internal::ParseResponse<M>(status, response));
      });
}

// Runs issue() (which makes calls on `channel`), then, on channels that can
// (TcpChannel::CallerReceive), receives their responses on this thread until
// done() or until another thread is reading. The caller then waits for its
// outcome as usual; done() is called without the channel's locks held.
template <RpcChannel C, typename Issue, typename Done>
void IssueAndReceive(C& channel, Issue&& issue, Done&& done) {
  if constexpr (requires { typename C::CallerReceive; }) {
    typename C::CallerReceive receive(channel);
    issue();
    receive.Until(std::forward<Done>(done));
  } else {
    issue();
  }
}

template <RpcMethod M, RpcChannel C>
absl::StatusOr<typename M::Response> Call(C& channel, const typename M::Request& request,
                                          CallOptions options = {}) {
  struct Waiter {
    Mutex mu;
    std::optional<absl::StatusOr<typename M::Response>> result ABSL_GUARDED_BY(mu);
  } waiter;
  IssueAndReceive(
      channel,
      [&] {
        CallAsync<M>(channel, request, options, [&waiter](absl::StatusOr<typename M::Response> r) {
          MutexLock lock(&waiter.mu);
          waiter.result.emplace(std::move(r));
        });
      },
      [&waiter] {
        MutexLock lock(&waiter.mu);
        return waiter.result.has_value();
      });
  // Channels run `done` by the deadline (channel.h), so this wait is bounded.
  MutexLock lock(&waiter.mu);
  waiter.mu.Await(Condition(
      +[](std::optional<absl::StatusOr<typename M::Response>>* r) { return r->has_value(); },
      &waiter.result));
  return std::move(*waiter.result);
}

}  // namespace mooncake::rpc

#endif  // MOONCAKE_STORE_RPC_CALL_H_
