// CountingChannel<C>: an RpcChannel that forwards to another and counts the
// calls per method id, so tests can prove a path made no master RPC.
//
// Thread-safety: as the wrapped channel; the counters are atomics.
#ifndef MOONCAKE_STORE_CLIENT_TESTING_COUNTING_CHANNEL_H_
#define MOONCAKE_STORE_CLIENT_TESTING_COUNTING_CHANNEL_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>
#include <utility>

#include "mooncake/store/rpc/channel.h"

namespace mooncake::store_testing {

template <rpc::RpcChannel C>
class CountingChannel {
 public:
  // `inner` must outlive this.
  explicit CountingChannel(C* inner) : inner_(inner) {}

  void CallRaw(uint16_t method_id, std::string_view method_name, std::string_view request,
               rpc::CallOptions options, rpc::RawDone done) {
    // relaxed: counters read after the calls they count have returned.
    counts_[method_id % counts_.size()].fetch_add(1, std::memory_order_relaxed);
    inner_->CallRaw(method_id, method_name, request, options, std::move(done));
  }
  uint32_t max_payload_bytes() const { return inner_->max_payload_bytes(); }

  uint64_t calls(uint16_t method_id) const {
    return counts_[method_id % counts_.size()].load(std::memory_order_relaxed);
  }
  uint64_t total() const {
    uint64_t n = 0;
    for (const auto& c : counts_) n += c.load(std::memory_order_relaxed);
    return n;
  }

 private:
  C* const inner_;
  std::array<std::atomic<uint64_t>, 64> counts_{};
};

}  // namespace mooncake::store_testing

#endif  // MOONCAKE_STORE_CLIENT_TESTING_COUNTING_CHANNEL_H_
