// StoreDriver: a KvDriver over the mooncake store's client library (one
// Client with its own TcpChannel to the master).
//
// Gets use GetInto / BatchGetInto into buffers the driver owns (one slot of
// max_value_bytes per batch item): the store reads a value straight into its
// destination, so this is the client's zero-staging path. Which transport
// carries the bytes is the ClientOptions' choice: `use_shm` maps the worker's
// memfd segments on the same host (one copy, no worker CPU); without it the
// client reads over the TCP transport.
//
// Thread-safety: none (one driver per thread).
#ifndef MOONCAKE_TOOLS_BENCH_STORE_DRIVER_H_
#define MOONCAKE_TOOLS_BENCH_STORE_DRIVER_H_

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/client.h"
#include "mooncake/store/rpc/tcp_channel.h"
#include "tools/bench/kv_driver.h"

namespace mooncake::bench {

struct StoreOptions {
  std::string master_address;  // host:port of the master's RPC server
  bool use_shm = false;        // else TCP only (use_local is always off: another process)
  bool cache_enabled = true;   // the client's metadata cache (its default)
  size_t max_value_bytes = size_t{16} << 20;  // get buffer per batch slot
  // The client's TCP settings; defaults are the client's own.
  size_t tcp_lanes_per_peer = client::ClientOptions{}.tcp_lanes_per_peer;
  uint32_t tcp_slice_bytes = client::ClientOptions{}.tcp_slice_bytes;
  uint64_t tcp_spread_min_bytes = client::ClientOptions{}.tcp_spread_min_bytes;
  size_t tcp_whole_request_lanes = client::ClientOptions{}.tcp_whole_request_lanes;
  bool verify_checksums = client::ClientOptions{}.verify_checksums;
  // Puts declare this dtype (TensorMeta.dtype; UNSPECIFIED: none), which lets
  // the store's SSD tier compress float data.
  store::proto::DType dtype = store::proto::DTYPE_UNSPECIFIED;
  int64_t timeout_ms = 10'000;
};

class StoreDriver {
 public:
  using Client = client::Client<rpc::TcpChannel>;

  // What Connect would refuse in `o` without a master: for a check before
  // any server starts. Errors: INVALID_ARGUMENT.
  static absl::Status CheckOptions(const StoreOptions& o) {
    if (o.max_value_bytes == 0) return absl::InvalidArgumentError("max_value_bytes must be > 0");
    return Client::CheckOptions(ToClientOptions(o));
  }

  static absl::StatusOr<std::unique_ptr<StoreDriver>> Connect(const StoreOptions& o) {
    RETURN_IF_ERROR(CheckOptions(o));
    ASSIGN_OR_RETURN(auto channel, rpc::TcpChannel::Connect(o.master_address));
    ASSIGN_OR_RETURN(auto client, Client::Create(ToClientOptions(o), channel.get()));
    auto d = std::unique_ptr<StoreDriver>(
        new StoreDriver(std::move(channel), std::move(client), o.use_shm, o.max_value_bytes));
    if (o.dtype != store::proto::DTYPE_UNSPECIFIED) {
      d->tensor_.set_dtype(o.dtype);
      d->put_options_.tensor = &d->tensor_;
    }
    return d;
  }

  static client::ClientOptions ToClientOptions(const StoreOptions& o) {
    client::ClientOptions co;
    co.use_local = false;
    co.use_shm = o.use_shm;
    co.use_tcp = true;
    co.cache_enabled = o.cache_enabled;
    co.tcp_lanes_per_peer = o.tcp_lanes_per_peer;
    co.tcp_slice_bytes = o.tcp_slice_bytes;
    co.tcp_spread_min_bytes = o.tcp_spread_min_bytes;
    co.tcp_whole_request_lanes = o.tcp_whole_request_lanes;
    co.verify_checksums = o.verify_checksums;
    co.rpc_timeout_ms = o.timeout_ms;
    co.transfer_timeout_ms = o.timeout_ms;
    return co;
  }

  StoreDriver(const StoreDriver&) = delete;
  StoreDriver& operator=(const StoreDriver&) = delete;
  ~StoreDriver() {
    client_.reset();  // before the channel it uses
  }

  std::string_view system() const { return shm_ ? "store-shm" : "store-tcp"; }

  absl::Status Put(std::string_view key, std::string_view value) {
    return client_->Put(key, value, put_options_);
  }

  absl::StatusOr<std::string_view> Get(std::string_view key) {
    EnsureSlots(1);
    ASSIGN_OR_RETURN(size_t n, client_->GetInto(key, buffer_.data(), slot_bytes_));
    return std::string_view(buffer_.data(), n);
  }

  // One BatchPut: its PutStarts, writes and PutEnds each go out together.
  void BatchPut(std::span<const std::string_view> keys, std::span<const std::string_view> values,
                std::vector<absl::Status>& out) {
    MC_ASSERT(!keys.empty() && keys.size() <= kMaxBatchKeys && keys.size() == values.size(),
              "batch size out of range");
    put_items_.resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) put_items_[i] = {keys[i], values[i]};
    out = client_->BatchPut(put_items_, put_options_);
  }

  void BatchGet(std::span<const std::string_view> keys,
                std::vector<absl::StatusOr<std::string_view>>& out) {
    MC_ASSERT(!keys.empty() && keys.size() <= kMaxBatchKeys, "batch size out of range");
    EnsureSlots(keys.size());
    items_.resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      items_[i] = {keys[i], buffer_.data() + i * slot_bytes_, slot_bytes_};
    }
    std::vector<absl::StatusOr<size_t>> r = client_->BatchGetInto(items_);
    out.clear();
    for (size_t i = 0; i < keys.size(); ++i) {
      if (r[i].ok()) {
        out.emplace_back(std::string_view(buffer_.data() + i * slot_bytes_, *r[i]));
      } else {
        out.emplace_back(r[i].status());
      }
    }
  }

  absl::Status Remove(std::string_view key) { return client_->Remove(key); }

  client::ClientStats stats() const { return client_->stats(); }

 private:
  StoreDriver(std::unique_ptr<rpc::TcpChannel> channel, std::unique_ptr<Client> client, bool shm,
              size_t slot_bytes)
      : channel_(std::move(channel)),
        client_(std::move(client)),
        shm_(shm),
        slot_bytes_(slot_bytes) {
    MC_ASSERT(channel_ != nullptr && client_ != nullptr, "driver parts");
  }

  // Grows the get buffer to `slots` slots. Pages are touched once here so the
  // first timed get does not pay for faulting them in (memcached's and Redis's
  // clients reuse warm buffers too).
  void EnsureSlots(size_t slots) {
    const size_t need = slots * slot_bytes_;
    if (buffer_.size() >= need) return;
    buffer_.resize(need, '\0');
  }

  std::unique_ptr<rpc::TcpChannel> channel_;
  std::unique_ptr<Client> client_;
  bool shm_;
  size_t slot_bytes_;
  std::vector<char> buffer_;
  std::vector<client::GetIntoItem> items_;
  std::vector<client::PutItem> put_items_;
  store::proto::TensorMeta tensor_;
  client::PutOptions put_options_;  // .tensor points at tensor_ when a dtype is given
};
static_assert(KvDriver<StoreDriver>);

}  // namespace mooncake::bench

#endif  // MOONCAKE_TOOLS_BENCH_STORE_DRIVER_H_
