// One accepted connection of an RpcServer: its socket, its frame decoder and
// its output buffer.
//
// Ownership and threads: the I/O loop that owns the connection reads, decodes,
// arms epoll interest and is the only thread that closes the fd (so an fd
// number is never reused while a task still names this connection). Handler
// workers hold a shared_ptr and call SendResponse, which appends under out_mu_
// and writes whatever the socket takes without blocking; the rest goes out on
// EPOLLOUT.
//
// Invariants (under out_mu_): out_off_ <= out_.size(); EPOLLOUT is armed iff
// unsent bytes remain and the connection is not corked; EPOLLIN is disarmed
// while unsent bytes exceed max_output_bytes (the peer is not reading: stop
// taking its requests), re-armed below half of that.
#ifndef MOONCAKE_STORE_RPC_INTERNAL_SERVER_CONNECTION_H_
#define MOONCAKE_STORE_RPC_INTERNAL_SERVER_CONNECTION_H_

#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/rpc/frame.h"
#include "mooncake/store/rpc/internal/socket.h"

namespace mooncake::rpc_internal {

class ServerConnection {
 public:
  static constexpr size_t kCorkFlushBytes = 256 << 10;

  ServerConnection(uint64_t id, UniqueFd fd, std::string peer, int epoll_fd,
                   uint32_t max_payload_bytes, size_t max_output_bytes, Counter* read_pauses)
      : id_(id),
        peer_(std::move(peer)),
        epoll_fd_(epoll_fd),
        max_output_bytes_(max_output_bytes),
        read_pauses_(read_pauses),
        decoder_(max_payload_bytes),
        fd_(std::move(fd)) {
    MC_ASSERT(fd_.valid() && read_pauses_ != nullptr, "connection without a socket or metrics");
  }

  uint64_t id() const { return id_; }

  // Authentication (loop thread; the principal is set once, before any call
  // of this connection is dispatched, and read-only after: calls read it
  // through ServerCallContext::principal while they hold the connection).
  bool authenticated() const { return principal_.has_value(); }
  const auth::Principal* principal() const { return principal_ ? &*principal_ : nullptr; }
  auth::ServerHandshake* handshake() { return handshake_.get(); }
  void StartHandshake(std::shared_ptr<const auth::Credentials> creds, std::string_view protocol) {
    handshake_ = std::make_unique<auth::ServerHandshake>(std::move(creds), protocol);
  }
  void Authenticated(auth::Principal who) {
    principal_ = std::move(who);
    handshake_.reset();
  }
  const std::string& peer() const { return peer_; }
  rpc::FrameDecoder& decoder() { return decoder_; }  // loop thread only
  int fd() const { return fd_.get(); }               // loop thread only

  // Loop thread: registers with epoll for reading.
  absl::Status Register() {
    MutexLock lock(&out_mu_);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = id_;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd_.get(), &ev) != 0) {
      return ErrnoToStatus(errno, "epoll_ctl(ADD)");
    }
    events_ = ev.events;
    return absl::OkStatus();
  }

  // Any thread. Dropped silently once the connection is closed or draining.
  void SendResponse(const rpc::FrameHeader& header, std::string_view payload) {
    MC_DASSERT(header.kind == rpc::FrameKind::kResponse, "servers send responses only");
    MutexLock lock(&out_mu_);
    if (closed_ || draining_) return;
    rpc::AppendFrame(header, payload, &out_);
    // A cork batches small responses; big ones go out as they come so the
    // buffer never holds much more than the socket can take.
    if (corked_ == 0 || out_.size() - out_off_ >= kCorkFlushBytes) FlushLocked();
  }

  // True while reads are paused because the peer is not taking responses;
  // the loop then stops serving frames it already buffered, too.
  // Lock-free: the loop asks once per frame.
  bool ReadPaused() const { return read_paused_.load(std::memory_order_acquire); }

  // Any thread: a status as a response (its message cut to the wire limit).
  void SendError(const rpc::FrameHeader& request, const absl::Status& status) {
    MC_DASSERT(!status.ok(), "SendError with OK");
    rpc::FrameHeader h;
    h.kind = rpc::FrameKind::kResponse;
    h.method_id = request.method_id;
    h.request_id = request.request_id;
    h.code = status.code();
    SendResponse(h, StdView(status.message()).substr(0, rpc::kMaxErrorMessageBytes));
  }

  // Loop thread: responses produced between Cork and Uncork go out in one
  // write (a read that carried many pipelined requests).
  void Cork() {
    MutexLock lock(&out_mu_);
    ++corked_;
  }
  void Uncork() {
    MutexLock lock(&out_mu_);
    MC_DASSERT(corked_ > 0, "uncork without cork");
    if (--corked_ == 0 && !closed_) FlushLocked();
  }

  // Loop thread, on EPOLLOUT.
  void OnWritable() {
    MutexLock lock(&out_mu_);
    if (!closed_) FlushLocked();
  }

  // Loop thread: a protocol error. Sends a connection error (request id 0),
  // half-closes, and from then on only discards input until the peer closes
  // or the loop's linger timer fires, so the peer can read why.
  void FailAndDrain(const absl::Status& status) {
    MutexLock lock(&out_mu_);
    if (closed_ || draining_) return;
    rpc::FrameHeader h;
    h.kind = rpc::FrameKind::kResponse;
    h.code = status.code();
    rpc::AppendFrame(h, StdView(status.message()).substr(0, rpc::kMaxErrorMessageBytes), &out_);
    FlushLocked();  // even when corked: nothing else will follow
    draining_ = true;
    ::shutdown(fd_.get(), SHUT_WR);
  }

  bool draining() const {
    MutexLock lock(&out_mu_);
    return draining_;
  }

  // Loop thread only: deregisters and closes the fd. Idempotent.
  void Close() {
    MutexLock lock(&out_mu_);
    if (closed_) return;
    closed_ = true;
    read_paused_.store(false, std::memory_order_release);
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd_.get(), nullptr);
    fd_.Reset();
    out_.clear();
    out_off_ = 0;
  }

  size_t UnsentBytes() const {
    MutexLock lock(&out_mu_);
    return out_.size() - out_off_;
  }

 private:
  void FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(out_mu_) {
    while (out_off_ < out_.size()) {
      const ssize_t n = ::send(fd_.get(), out_.data() + out_off_, out_.size() - out_off_,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        out_off_ += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      // The peer is gone. Only the loop closes the fd; shutting it down makes
      // the loop see EPOLLHUP and do so.
      ::shutdown(fd_.get(), SHUT_RDWR);
      out_.clear();
      out_off_ = 0;
      break;
    }
    if (out_off_ == out_.size()) {
      out_.clear();
      out_off_ = 0;
    } else if (out_off_ > (size_t{1} << 20) && out_off_ * 2 > out_.size()) {
      out_.erase(0, out_off_);  // keep the buffer from creeping
      out_off_ = 0;
    }
    UpdateInterestLocked();
  }

  void UpdateInterestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(out_mu_) {
    const size_t unsent = out_.size() - out_off_;
    uint32_t want = EPOLLRDHUP;
    const bool read_paused = (events_ & EPOLLIN) == 0;
    const bool pause = read_paused ? unsent > max_output_bytes_ / 2 : unsent > max_output_bytes_;
    if (!pause) want |= EPOLLIN;
    if (pause && !read_paused) read_pauses_->Increment();
    if (unsent > 0) want |= EPOLLOUT;
    if (want == events_) return;
    epoll_event ev{};
    ev.events = want;
    ev.data.u64 = id_;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd_.get(), &ev) == 0) {
      events_ = want;
      // release: pairs with ReadPaused; a mirror of events_ for the loop.
      read_paused_.store((want & EPOLLIN) == 0, std::memory_order_release);
    }
  }

  const uint64_t id_;
  std::unique_ptr<auth::ServerHandshake> handshake_;  // loop thread only
  std::optional<auth::Principal> principal_;          // see authenticated()
  const std::string peer_;
  const int epoll_fd_;
  const size_t max_output_bytes_;
  Counter* const read_pauses_;
  rpc::FrameDecoder decoder_;  // loop thread only

  mutable Mutex out_mu_;
  UniqueFd fd_;  // closed (under out_mu_) only by the loop thread
  std::string out_ ABSL_GUARDED_BY(out_mu_);
  size_t out_off_ ABSL_GUARDED_BY(out_mu_) = 0;
  uint32_t events_ ABSL_GUARDED_BY(out_mu_) = 0;
  int corked_ ABSL_GUARDED_BY(out_mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(out_mu_) = false;
  bool closed_ ABSL_GUARDED_BY(out_mu_) = false;
  // (events_ & EPOLLIN) == 0 && !closed_, written under out_mu_.
  std::atomic<bool> read_paused_{false};
};

}  // namespace mooncake::rpc_internal

#endif  // MOONCAKE_STORE_RPC_INTERNAL_SERVER_CONNECTION_H_
