// The RPC contract: methods (RpcMethod) and the channels that call them
// (RpcChannel).
//
// A method is a type naming a stable 16-bit id, a name (for metrics and error
// messages) and a protobuf request and response:
//
//   struct GetReplicasMethod {
//     static constexpr uint16_t kId = 7;
//     static constexpr std::string_view kName = "GetReplicas";
//     using Request = proto::GetReplicasRequest;
//     using Response = proto::GetReplicasResponse;
//   };
//
// A channel carries serialized requests to a ServiceRegistry (service.h) and
// delivers each call's outcome exactly once. Typed calls over any channel are
// in call.h (rpc::Call<M>, rpc::CallAsync<M>).
//
// Semantics every channel keeps (channel_testing.h checks each model):
//   - Exactly once. `done` runs exactly once per CallRaw, with OK and the
//     response payload, or with an error and an empty payload. It may run on
//     the calling thread (immediate failures, in-process channels) or on the
//     channel's I/O thread (or, in process, on the thread that answers an
//     asynchronous handler's call: service.h RegisterAsync); it must not
//     block (it holds up other calls).
//   - Never a hang. Every call has a finite deadline (CallOptions::timeout_ns,
//     or the channel's default) and `done` runs by then, give or take
//     scheduling delay.
//   - Status codes the channel itself produces (handlers' own codes pass
//     through unchanged, with their message):
//       DEADLINE_EXCEEDED   no response by the deadline
//       UNAVAILABLE         cannot connect, connection lost (every pending call
//                           fails with it), server overloaded
//       UNIMPLEMENTED       no handler for the method id
//       RESOURCE_EXHAUSTED  request or response over the size limit, too many
//                           calls in flight
//       INVALID_ARGUMENT    the handler could not parse the request
//       INTERNAL            the caller could not parse the response
//       CANCELLED           the channel was destroyed with the call pending
//   - Calls may be made concurrently from any number of threads; many may be
//     in flight at once on one channel, and responses may arrive in any order.
#ifndef MOONCAKE_STORE_RPC_CHANNEL_H_
#define MOONCAKE_STORE_RPC_CHANNEL_H_

#include <concepts>
#include <cstdint>
#include <functional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "google/protobuf/message_lite.h"

namespace mooncake::rpc {

// --- Methods -----------------------------------------------------------------

template <typename M>
concept RpcMethod =
    // A stable wire id; 0 is reserved (a frame with method id 0 is malformed).
    std::convertible_to<decltype(M::kId), uint16_t> &&(M::kId != 0) &&
    // A name for metrics labels and error messages.
    std::convertible_to<decltype(M::kName), std::string_view>&&
    // Protobuf messages (full or lite runtime).
    std::derived_from<typename M::Request, google::protobuf::MessageLite>&& std::derived_from<
        typename M::Response, google::protobuf::MessageLite>;

// --- Calls -------------------------------------------------------------------

struct CallOptions {
  // Relative deadline; 0 = the channel's default. Values above the channel's
  // maximum are clamped to it.
  int64_t timeout_ns = 0;
};

// The outcome of one call: OK with the serialized response (valid only during
// the callback), or an error with an empty payload.
using RawDone = std::function<void(const absl::Status& status, std::string_view payload)>;

// --- Channels, one requirement per line ----------------------------------------

template <typename C>
concept RpcChannel = requires(C& c, uint16_t method_id, std::string_view method_name,
                              std::string_view request, CallOptions options, RawDone done) {
  // Thread-safe. Copies `request` before returning; `method_name` must outlive
  // the call (method types' kName literals do). Runs `done` exactly once.
  { c.CallRaw(method_id, method_name, request, options, std::move(done)) } -> std::same_as<void>;
  // The largest request payload the channel sends (larger ones fail with
  // RESOURCE_EXHAUSTED without being sent). O(1).
  { std::as_const(c).max_payload_bytes() } -> std::convertible_to<uint32_t>;
};

}  // namespace mooncake::rpc

#endif  // MOONCAKE_STORE_RPC_CHANNEL_H_
