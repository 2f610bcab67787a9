// RPC channels to the connector's peers, one per address, made on first use
// and dropped after a transport-level failure so that the next call
// reconnects (a restarted peer at the same address is reached again).
//
// Thread-safety: thread-safe.
#ifndef MOONCAKE_CONNECTOR_INTERNAL_PEER_CHANNELS_H_
#define MOONCAKE_CONNECTOR_INTERNAL_PEER_CHANNELS_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mooncake/base/auth.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/tcp_channel.h"

namespace mooncake::connector_internal {

class PeerChannels {
 public:
  static constexpr size_t kMaxPeers = 1024;

  // `auth`: credentials every channel proves (null: none).
  explicit PeerChannels(std::shared_ptr<const auth::Credentials> auth = nullptr)
      : auth_(std::move(auth)) {}

  // One call, bounded by `timeout_ms` (connecting included).
  template <rpc::RpcMethod M>
  absl::StatusOr<typename M::Response> Call(const std::string& address,
                                            const typename M::Request& request,
                                            int64_t timeout_ms) {
    std::shared_ptr<rpc::TcpChannel> channel;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = channels_.find(address);
      if (it != channels_.end()) channel = it->second;
    }
    if (channel == nullptr) {
      rpc::TcpChannelOptions o;
      o.auth = auth_;
      o.connect_timeout_ns = std::min<int64_t>(timeout_ms, 2'000) * 1'000'000;
      o.reconnect_backoff_ns = 0;
      absl::StatusOr<std::unique_ptr<rpc::TcpChannel>> made = rpc::TcpChannel::Connect(address, o);
      if (!made.ok()) return made.status();
      channel = std::shared_ptr<rpc::TcpChannel>(std::move(*made));
      std::lock_guard<std::mutex> lock(mu_);
      if (channels_.size() >= kMaxPeers) channels_.clear();  // reconnect on demand
      channels_[address] = channel;
    }
    rpc::CallOptions options;
    options.timeout_ns = timeout_ms * 1'000'000;
    absl::StatusOr<typename M::Response> r = rpc::Call<M>(*channel, request, options);
    if (!r.ok() && (absl::IsUnavailable(r.status()) || absl::IsDeadlineExceeded(r.status()))) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = channels_.find(address);
      if (it != channels_.end() && it->second == channel) channels_.erase(it);
    }
    return r;
  }

 private:
  const std::shared_ptr<const auth::Credentials> auth_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<rpc::TcpChannel>> channels_;
};

}  // namespace mooncake::connector_internal

#endif  // MOONCAKE_CONNECTOR_INTERNAL_PEER_CHANNELS_H_
