// PeerView: what one handshake told this engine about a peer engine (its
// transport endpoint and registered buffers), and the translation Mooncake's
// API needs from a raw remote address to (segment handle, offset).
//
// A view is immutable but for the segment handles it opens lazily, one per
// buffer, on first use (a peer may register hundreds of buffers; a handle
// costs one short control connection). Its destructor closes them, so a
// batch in flight keeps its view alive (shared_ptr) and a view replaced by a
// fresher handshake goes away only when its last batch is done.
//
// HandshakeMethod is the RPC every engine serves (handshake.proto); Handshake
// calls it on a fresh connection, bounded by `timeout`.
//
// Thread-safety: Map and first_buffer may be called concurrently.
#ifndef MOONCAKE_TRANSPORT_COMPAT_PEER_VIEW_H_
#define MOONCAKE_TRANSPORT_COMPAT_PEER_VIEW_H_

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/tcp_channel.h"
#include "mooncake/transport/compat/handshake.pb.h"
#include "mooncake/transport/transport.h"

namespace mooncake::transport::compat {

struct HandshakeMethod {
  static constexpr uint16_t kId = static_cast<uint16_t>(proto::TRANSFER_ENGINE_HANDSHAKE);
  static constexpr std::string_view kName = "TransferEngineHandshake";
  using Request = proto::HandshakeRequest;
  using Response = proto::HandshakeResponse;
};
static_assert(rpc::RpcMethod<HandshakeMethod>);

// Asks the engine whose rpc server listens at `rpc_address` ("host:port"),
// proving `auth` when it is not null.
inline absl::StatusOr<proto::HandshakeResponse> Handshake(
    const std::string& rpc_address, std::string_view my_name, absl::Duration timeout,
    std::shared_ptr<const auth::Credentials> auth = nullptr) {
  MC_ASSERT(timeout > absl::ZeroDuration(), "a handshake needs a deadline");
  rpc::TcpChannelOptions options;
  options.auth = std::move(auth);
  options.connect_timeout_ns = absl::ToInt64Nanoseconds(timeout);
  ASSIGN_OR_RETURN(std::unique_ptr<rpc::TcpChannel> channel,
                   rpc::TcpChannel::Connect(rpc_address, options));
  proto::HandshakeRequest request;
  request.set_peer_name(std::string(my_name));
  return rpc::Call<HandshakeMethod>(*channel, request,
                                    {.timeout_ns = absl::ToInt64Nanoseconds(timeout)});
}

template <Transport T>
class PeerView {
 public:
  struct Buffer {
    uint64_t addr = 0;
    uint64_t length = 0;
    SegmentId segment = 0;
  };
  struct Target {
    SegmentHandle handle = 0;
    uint64_t offset = 0;
  };

  // `transport` must outlive the view.
  PeerView(T* transport, const proto::HandshakeResponse& answer) : transport_(transport) {
    MC_ASSERT(transport != nullptr, "a view needs its transport");
    endpoint_ = answer.endpoint();
    buffers_.reserve(static_cast<size_t>(answer.buffers_size()));
    for (const proto::BufferDesc& b : answer.buffers()) {
      buffers_.push_back({b.addr(), b.length(), b.segment_id()});
    }
    // Registration order gives first_buffer(); address order lets Map search.
    first_buffer_ = buffers_.empty() ? 0 : buffers_.front().addr;
    std::sort(buffers_.begin(), buffers_.end(),
              [](const Buffer& a, const Buffer& b) { return a.addr < b.addr; });
    handles_.assign(buffers_.size(), 0);
  }
  ~PeerView() {
    MutexLock lock(&mu_);
    for (const SegmentHandle h : handles_) {
      if (h != 0) (void)transport_->CloseSegment(h);  // NotFound is fine: nothing to close
    }
  }
  PeerView(const PeerView&) = delete;
  PeerView& operator=(const PeerView&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  size_t buffer_count() const { return buffers_.size(); }
  // The peer's first registered buffer still registered at handshake time; 0: none.
  uint64_t first_buffer() const { return first_buffer_; }

  // The buffer holding `remote_addr`, opened. NOT_FOUND when no buffer of the
  // view holds it (the caller may refresh the view and ask again); what
  // OpenSegment returns otherwise. Lengths are checked by the transport,
  // requester- and owner-side, against the buffer's length.
  absl::StatusOr<Target> Map(uint64_t remote_addr) {
    // The last buffer starting at or before the address (owners never register
    // overlapping buffers, so it is the only candidate).
    auto it = std::upper_bound(buffers_.begin(), buffers_.end(), remote_addr,
                               [](uint64_t a, const Buffer& b) { return a < b.addr; });
    if (it != buffers_.begin()) {
      const size_t i = static_cast<size_t>(std::prev(it) - buffers_.begin());
      const Buffer& b = buffers_[i];
      if (remote_addr - b.addr >= b.length) return NotIn(remote_addr);
      MutexLock lock(&mu_);
      if (handles_[i] == 0) {
        ASSIGN_OR_RETURN(RemoteSegment r, transport_->OpenSegment(endpoint_, b.segment));
        handles_[i] = r.handle;
      }
      MC_DASSERT(handles_[i] != 0, "an opened segment has a handle");
      return Target{handles_[i], remote_addr - b.addr};
    }
    return NotIn(remote_addr);
  }

 private:
  static absl::Status NotIn(uint64_t remote_addr) {
    return absl::NotFoundError(
        absl::StrCat("address 0x", absl::Hex(remote_addr), " is in no buffer the peer registered"));
  }

  T* const transport_;
  std::string endpoint_;
  uint64_t first_buffer_ = 0;
  std::vector<Buffer> buffers_;  // by address; immutable after construction
  Mutex mu_;
  std::vector<SegmentHandle> handles_ ABSL_GUARDED_BY(mu_);  // 0: not opened yet
};

}  // namespace mooncake::transport::compat

#endif  // MOONCAKE_TRANSPORT_COMPAT_PEER_VIEW_H_
