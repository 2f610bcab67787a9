// PD connectors: moving a request's KV cache from a prefill instance into a
// decode instance's paged KV memory, layer by layer, with one-sided transport
// writes (docs/connector.md).
//
// Roles
//   DecodeConnector<T>  (decode_connector.h) registers the decode cache's
//                       memory with transport T, and for each request pulls:
//                       it sends (request id, block ids, layout, segment ids)
//                       to every prefill source (one per prefill TP rank), then
//                       waits per layer (WaitLayer) or for all (WaitAll).
//   PrefillConnector<T> (prefill_connector.h) serves those pulls: the engine
//                       adds a request with its blocks (AddRequest) and calls
//                       SaveLayer(layer) as soon as a layer's KV is written;
//                       the connector plans the layer's byte ranges (kv_layout.h
//                       converts layouts, page sizes and head slices in the
//                       ranges themselves: no staging copy), writes them into
//                       the decode memory and notifies the decode side.
//
// Protocol (connector.proto; both sides run an RPC server)
//   decode  -> prefill  Pull    the request's destination; answered at once
//   prefill -> decode   Notify  layers in place / finished / failed
//   decode  -> prefill  Status  progress of a pull (when notifies stop coming)
//   either  -> prefill  Cancel  answered once no write of the pull is in flight
//
// Lifecycle and failure semantics
//   - A prefill request ends when every expected pull (the decode group's TP
//     degree) has finished, when the engine aborts it, or when
//     request_timeout_ms passes after its last layer was saved (default 120 s;
//     while the engine still computes, the blocks are its own); its blocks are
//     then handed back (TakeReleased) and the prefill side never touches the
//     decode memory for it again. Pulls that arrive for a request the engine
//     has not added yet wait (the same timeout, from their arrival).
//   - The decode side never hangs: WaitLayer/WaitAll return by their timeout,
//     and earlier with UNAVAILABLE when a source stops answering Status (a
//     killed prefill process), or with the source's error. The engine then
//     recomputes. End(request) cancels unfinished pulls; its blocks are safe
//     to reuse at once when every source confirmed (or finished), otherwise
//     only after `reusable_after` (the source's own request timeout plus the
//     transport's I/O deadline, after which no write of it can land).
//
// Thread-safety: every method of both connectors may be called from any
// thread. Blocking calls say so.
#ifndef MOONCAKE_CONNECTOR_CONNECTOR_H_
#define MOONCAKE_CONNECTOR_CONNECTOR_H_

#include <cstdint>
#include <string_view>

#include "mooncake/connector/connector.pb.h"
#include "mooncake/store/rpc/channel.h"

namespace mooncake::connector {

// The RPC methods (ids from connector.proto, never reused).
struct PullMethod {
  static constexpr uint16_t kId = static_cast<uint16_t>(proto::PULL);
  static constexpr std::string_view kName = "ConnectorPull";
  using Request = proto::PullRequest;
  using Response = proto::PullResponse;
};
struct NotifyMethod {
  static constexpr uint16_t kId = static_cast<uint16_t>(proto::NOTIFY);
  static constexpr std::string_view kName = "ConnectorNotify";
  using Request = proto::NotifyRequest;
  using Response = proto::NotifyResponse;
};
struct StatusMethod {
  static constexpr uint16_t kId = static_cast<uint16_t>(proto::STATUS);
  static constexpr std::string_view kName = "ConnectorStatus";
  using Request = proto::StatusRequest;
  using Response = proto::StatusResponse;
};
struct CancelMethod {
  static constexpr uint16_t kId = static_cast<uint16_t>(proto::CANCEL);
  static constexpr std::string_view kName = "ConnectorCancel";
  using Request = proto::CancelRequest;
  using Response = proto::CancelResponse;
};
static_assert(rpc::RpcMethod<PullMethod>);
static_assert(rpc::RpcMethod<NotifyMethod>);
static_assert(rpc::RpcMethod<StatusMethod>);
static_assert(rpc::RpcMethod<CancelMethod>);

// Limits every side enforces on what it receives.
inline constexpr size_t kMaxRequestIdBytes = 256;
inline constexpr size_t kMaxBlocksPerRequest = 1 << 20;
inline constexpr uint32_t kMaxTpRanks = 64;

}  // namespace mooncake::connector

#endif  // MOONCAKE_CONNECTOR_CONNECTOR_H_
