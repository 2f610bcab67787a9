// TcpLane: one requester-side TCP connection of TcpTransport.
//
// Slices queue on the lane; they move to `pending_` (sent, awaiting the
// response) in wire order while `inflight_bytes_` stays under the window, so
// many slices are in flight with no round trip between them. READ request
// frames are a header each and go out in one sendmsg; WRITE frames carry
// their payload straight from the caller's buffer. The receiver thread reads
// responses in order, each straight into its slice's destination, and
// digests the 64 KiB chunks of a READ slice that asked for them right after
// its payload is in, while those bytes are still in cache.
//
// Who sends: Kick() from Submit sends inline when the send lock is free and
// the work is small (no thread hop on the latency path); otherwise the sender
// thread does. Lock order: send_mu_ before mu_. A reserved batch's large
// WRITEs (below) are sent inline too, but for one sendmsg only: what that
// call leaves (the owner reads slowly or not at all; the socket's send
// timeout is one I/O tick) is handed to the sender thread mid-frame
// (`handoff_`), and so is everything queued after it, so a large WRITE
// holds its Submit for at most one tick.
//
// Who receives: the receiver thread, or a caller that claimed the lane when
// it submitted (SubmitForWait) and now Waits: it receives the responses on
// its own thread until its batch is settled, so a GET wakes no thread on the
// requester side but the caller's own. A claim keeps the receiver thread
// asleep for at most `claim_patience` (a timed wait), so a caller that never
// Waits, or one blocked in its own inline send, delays the lane by that much,
// never more. A frame a caller leaves unfinished (its deadline)
// stays in `cursor_` and its new owner goes on from there. Exactly one owner
// receives at a time (`owner_`).
//
// Reservation: a claim on an idle lane (nothing queued, on the wire or being
// received, no other claim) whose slices on that lane are all READs or all
// WRITEs does not wake the receiver thread at all: the lane is reserved for
// the caller (Owner::kReserved) until its Wait begins to receive. Such a
// batch cannot block its caller's own inline send (its requests are READ
// headers, or its responses are WRITE acks and short errors), and no one
// else's responses are behind it. Any later Enqueue (another batch, or the
// same batch's slices moved off a dead lane) turns the reservation into an
// ordinary claim (claim_patience, the receiver thread woken). A caller that
// never Waits, and is never followed, loses the lane to the receiver thread
// within one to two `ReservePatience()` (min(io_timeout / 4, 100 ms)): the
// thread checks on a timed wake-up. It makes those wake-ups only while it
// is "watching", for kWatchRounds patience periods after the lane's last
// activity; a lane idle for longer sleeps untimed, and its next claim is an
// ordinary one (which wakes the thread, and watching starts again).
//
// Failure: any I/O error, stall past io_timeout or protocol violation marks
// the lane dead, shuts the socket down (waking both threads) and fails every
// queued and pending slice with that Status. Pending slices are settled only
// under send_mu_, so no sender still reads a WRITE buffer once its batch can
// be collected.
//
// Buffers: a slice's local buffer is touched only while the slice is queued
// or pending (a WRITE is in pending_ before its payload goes out, a READ until
// its payload is in), and it is settled only after that. A WRITE the owner
// answers while the sendmsg that carried it has not returned yet (the kernel
// copied the bytes, the call is still reading the iovec, e.g. ASan's check)
// waits in answered_ and is settled by the sender once that call returned. So Holds(batch) false
// means the lane no longer touches the batch's buffers, and Abort gets there
// within one socket wake-up (TcpTransport::Cancel relies on both).
#ifndef MOONCAKE_TRANSPORT_INTERNAL_TCP_LANE_H_
#define MOONCAKE_TRANSPORT_INTERNAL_TCP_LANE_H_

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/base/tcp_connect.h"
#include "mooncake/base/trace.h"
#include "mooncake/base/value_checksum.h"
#include "mooncake/transport/internal/batch_table.h"
#include "mooncake/transport/internal/tcp_auth.h"
#include "mooncake/transport/internal/tcp_bind.h"
#include "mooncake/transport/internal/tcp_server.h"
#include "mooncake/transport/internal/tcp_wire.h"
#include "mooncake/transport/internal/unix_socket.h"

namespace mooncake::transport_internal {

struct Slice {
  std::shared_ptr<BatchState> batch;
  uint32_t index = 0;  // request index in the batch
  OpCode op = OpCode::kRead;
  char* local = nullptr;
  uint64_t segment = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
  uint64_t tag = 0;
  uint64_t* digests = nullptr;       // READ: this slice's chunk digest slots (SubrangeDigests)
  const char* capability = nullptr;  // kCapabilityBytes sent after the header, or none
  int64_t sent_ns = 0;               // trace::NowNs() when its frame went out; 0: not traced
  uint8_t attempts = 0;              // paths it was moved off after a lane died (tcp_paths.h)
};

// One lane's share of a batch: a single slice (a small get or put) needs no heap block.
using Slices = absl::InlinedVector<Slice, 1>;
// A peer's share of a batch, by the peer's lane index.
using LaneSlices = absl::InlinedVector<Slices, 4>;

// What a lane tells the path it belongs to about its slices (multi-path
// peers, internal/tcp_paths.h); a single-path peer's lanes have none.
// Called on the lane's threads, or the Enqueue caller's, with no lane lock
// held but possibly send_mu_: an observer must not call back into the lane.
class SliceObserver {
 public:
  virtual ~SliceObserver() = default;
  // `s` is settled with `status` (a slice taken over by Rescue is not).
  virtual void Settled(const Slice& s, const absl::Status& status) = 0;
  // The lane died (with `why`) holding `s`, sent or not: true if the
  // observer took `s` over (moved from; it is settled elsewhere), false to
  // settle it here with `why`.
  virtual bool Rescue(Slice& s, const absl::Status& why) = 0;
};

// Connects to host:port (a literal: endpoints carry them) before `deadline`;
// the socket is blocking, its I/O bounded by socket timeouts (TuneTcpSocket).
// A non-empty `local_host` binds the local end to that address first.
inline absl::StatusOr<UniqueFd> ConnectTcp(const std::string& host, uint16_t port,
                                           absl::Time deadline, absl::Duration io_timeout,
                                           const std::string& local_host = {}) {
  const ConnectOptions options{.resolve_names = false, .blocking = true};
  ASSIGN_OR_RETURN(UniqueFd fd, local_host.empty()
                                    ? mooncake::ConnectTcp(HostPort{host, port}, deadline, options)
                                    : ConnectTcpFrom(local_host, host, port, deadline));
  TuneTcpSocket(fd.get(), io_timeout);
  return fd;
}

class TcpLane {
 public:
  struct Limits {
    uint64_t window_bytes = 8 << 20;  // bytes in flight (sent, unanswered)
    size_t window_slices = 256;
    absl::Duration io_timeout = absl::Seconds(5);
    uint32_t inline_write_bytes = 64 << 10;  // larger WRITE slices go via the sender thread
    absl::Duration claim_patience = absl::Milliseconds(2);
    std::shared_ptr<const auth::Credentials> auth;  // set: handshake on connect (tcp_auth.h)
  };

  // `outstanding` counts the transport's unsettled slices; the lane
  // decrements it for every slice it settles.
  // `observer` (may be null) outlives the lane.
  TcpLane(BatchTable* table, std::atomic<size_t>* outstanding, Limits limits,
          SliceObserver* observer = nullptr)
      : table_(table), outstanding_(outstanding), limits_(limits), observer_(observer) {}
  ~TcpLane() { Stop(absl::CancelledError("transport shut down")); }
  TcpLane(const TcpLane&) = delete;
  TcpLane& operator=(const TcpLane&) = delete;

  absl::Status Connect(const std::string& host, uint16_t port, absl::Time deadline,
                       const std::string& local_host = {}) {
    ASSIGN_OR_RETURN(fd_, ConnectTcp(host, port, deadline, limits_.io_timeout, local_host));
    RETURN_IF_ERROR(
        AuthenticateToOwner(fd_.get(), limits_.auth.get(), deadline, JoinHostPort(host, port)));
    sender_ = std::thread([this] { SenderLoop(); });
    receiver_ = std::thread([this] { ReceiverLoop(); });
    return absl::OkStatus();
  }

  bool dead() const {
    MutexLock lock(&mu_);
    return dead_;
  }

  // Queues slices (true: the caller must Kick() next, and until then the
  // sender thread leaves them to it); a dead lane fails them at once (false).
  // `claim`: the submitting caller will receive them itself (ReceiveFor with
  // the slices' batch id).
  bool Enqueue(Slices& slices, bool claim = false) {
    absl::Status dead_status;
    {
      MutexLock lock(&mu_);
      if (!dead_) {
        const bool idle = watching_ && queue_.empty() && pending_.empty() &&
                          owner_ == Owner::kNone && claims_ == 0;
        if (owner_ == Owner::kReserved) {
          // Someone else's slices go behind the reserved batch: the
          // reservation becomes an ordinary, timed claim.
          owner_ = Owner::kNone;
          ++claims_;
          claim_expiry_ = absl::Now() + limits_.claim_patience;
        }
        const bool reserve = claim && idle && !slices.empty() && OneKindOfOp(slices);
        const BatchId batch = slices.empty() ? 0 : slices.front().batch->id();
        enqueued_ += slices.size();
        for (Slice& s : slices) queue_.push_back(std::move(s));
        slices.clear();
        ++kicks_;
        if (reserve) {
          owner_ = Owner::kReserved;
          ++reservations_;
          reserved_batch_ = batch;
          reserve_expiry_ = absl::Now() + ReservePatience();
        } else if (claim) {
          ++claims_;
          claim_expiry_ = absl::Now() + limits_.claim_patience;
        }
        return true;
      }
      dead_status = dead_status_;
    }
    for (Slice& s : slices) SettleOrRescue(s, dead_status);
    slices.clear();
    return false;
  }

  // After a true Enqueue: sends what it can inline if no one else is sending.
  // What is left (a closed window, a large WRITE, a sender busy) goes to the
  // sender thread, which is woken only now, not for every Enqueue.
  void Kick() {
    if (send_mu_.TryLock()) {
      SendSomeLocked(/*inline_mode=*/true);
      send_mu_.Unlock();
    }
    MutexLock lock(&mu_);
    MC_DASSERT(kicks_ > 0, "Kick without Enqueue");
    --kicks_;
  }

  // The claiming caller's Wait: receives this lane's responses on the
  // calling thread until `settled()` is true, nothing is on the wire, or it
  // would block past `give_up` (then the receiver thread goes on, from the
  // middle of a frame if need be). Returns at once if the claim was dropped
  // and the receiver thread took over.
  template <typename Settled>
  void ReceiveFor(BatchId batch, Settled settled, absl::Time give_up) {
    {
      MutexLock lock(&mu_);
      ReleaseClaimLocked(batch);
      if (dead_ || owner_ != Owner::kNone) return;
      owner_ = Owner::kCaller;
    }
    for (;;) {
      if (settled() || absl::Now() >= give_up) break;
      Step r = ReceiveStep(give_up);
      if (r.kind == StepKind::kBroken) {
        Fail(r.status);  // dead before anyone else can own the broken cursor
        ReleaseOwner();
        return;
      }
      if (r.kind != StepKind::kFrame) break;
      FinishFrame(std::move(r.slice), r.status, /*release=*/false);
    }
    ReleaseOwner();
  }

  // Drops the claim of `batch`, whose caller will not receive (it polls or
  // cancels); a reservation goes back to the receiver thread at once.
  void DropClaim(BatchId batch) {
    MutexLock lock(&mu_);
    ReleaseClaimLocked(batch);
  }

  // True while a reservation holds the lane (tests).
  bool reserved() const {
    MutexLock lock(&mu_);
    return !dead_ && owner_ == Owner::kReserved;
  }
  // Slices ever queued on this lane (tests).
  uint64_t enqueued() const {
    MutexLock lock(&mu_);
    return enqueued_;
  }
  // Inline sends that left frames to the sender thread (tests).
  uint64_t handoffs() const {
    MutexLock lock(&mu_);
    return handoffs_;
  }

  // Settles queued slices of cancelled batches now instead of when sent.
  void SweepCancelled() {
    std::vector<Slice> swept;
    {
      MutexLock lock(&mu_);
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (it->batch->cancelled()) {
          swept.push_back(std::move(*it));
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (Slice& s : swept) SettleSlice(s, absl::CancelledError("cancelled"));
  }

  // True while a slice of batch `id` is queued, on the wire or being
  // received: until then the lane may still touch that batch's buffers.
  bool Holds(BatchId id) const {
    MutexLock lock(&mu_);
    for (const Slice& s : queue_) {
      if (s.batch->id() == id) return true;
    }
    for (const Slice& s : pending_) {  // includes what the sender is writing now
      if (s.batch->id() == id) return true;
    }
    for (const auto& [s, status] : answered_) {
      if (s.batch->id() == id) return true;
    }
    return false;
  }

  // Breaks the lane: shuts the socket down, so a send or receive blocked on
  // it returns at once, and fails every slice it holds with `why`.
  void Abort(const absl::Status& why) { Fail(why); }

  void Stop(const absl::Status& why) {
    Fail(why);
    if (sender_.joinable()) sender_.join();
    if (receiver_.joinable()) receiver_.join();
    SettleAllAfterDeath();  // when never connected, or the receiver never ran
  }

 private:
  void Fail(const absl::Status& why) {
    MutexLock lock(&mu_);
    if (dead_) return;
    dead_ = true;
    dead_status_ = why;
    if (fd_.valid()) ::shutdown(fd_.get(), SHUT_RDWR);
  }

  void SettleAllAfterDeath() {
    MutexLock send(&send_mu_);  // no sender is writing from a pending slice now
    handoff_.reset();           // never sent on: the lane is dead
    std::deque<Slice> pending, queued;
    std::vector<std::pair<Slice, absl::Status>> answered;
    absl::Status status;
    {
      MutexLock lock(&mu_);
      MC_ASSERT(dead_, "settling a live lane");
      // A caller receiving into a pending slice leaves at once (the socket is
      // shut down); only then may its buffer be handed back.
      const auto no_caller = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return owner_ != Owner::kCaller;
      };
      mu_.Await(Condition(&no_caller));
      pending.swap(pending_);
      queued.swap(queue_);
      answered.swap(answered_);
      inflight_bytes_ = 0;
      status = dead_status_;
    }
    for (auto& [s, st] : answered) SettleSlice(s, st);
    for (Slice& s : pending) SettleOrRescue(s, status);
    for (Slice& s : queued) SettleOrRescue(s, status);
  }

  // The claim of `batch` ends: its reservation (if it still holds the lane)
  // or one count of claims_.
  void ReleaseClaimLocked(BatchId batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (owner_ == Owner::kReserved && reserved_batch_ == batch) {
      owner_ = Owner::kNone;
    } else if (claims_ > 0) {
      --claims_;
    }
  }

  // All READs (their requests are headers) or all WRITEs (their responses
  // are acks): a batch that cannot fill the socket in the direction its
  // caller does not drain while it sends.
  static bool OneKindOfOp(std::span<const Slice> slices) {
    for (const Slice& s : slices) {
      if (s.op != slices.front().op) return false;
    }
    return true;
  }

  // Short next to any owner's io_timeout (the owner's send to this lane
  // stalls while a late reserver holds it), long next to a request.
  absl::Duration ReservePatience() const {
    return std::clamp(limits_.io_timeout / 4, absl::Milliseconds(1), absl::Milliseconds(100));
  }
  static constexpr int kWatchRounds = 10;

  // A slice of the batch the lane is reserved for: its caller's Kick sends
  // it inline even when it is a large WRITE (acks cannot block that send, no
  // one else's slices wait behind it, and the caller Waits next anyway).
  bool ReservedForLocked(const Slice& s) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return owner_ == Owner::kReserved && s.batch->id() == reserved_batch_;
  }

  bool IsLargeWrite(const Slice& s) const {
    return s.op == OpCode::kWrite && s.length > limits_.inline_write_bytes;
  }

  bool WindowOpenLocked(const Slice& s) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return pending_.empty() || (inflight_bytes_ + s.length <= limits_.window_bytes &&
                                pending_.size() < limits_.window_slices);
  }

  void SenderLoop() {
    for (;;) {
      {
        MutexLock lock(&mu_);
        const auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          // Slices a Kick is about to send inline are left to it, but not a
          // large WRITE at the head, which an inline Kick sends only for the
          // batch the lane is reserved for.
          return dead_ || handoff_pending_ ||
                 (!queue_.empty() && WindowOpenLocked(queue_.front()) &&
                  (kicks_ == 0 ||
                   (IsLargeWrite(queue_.front()) && !ReservedForLocked(queue_.front()))));
        };
        mu_.Await(Condition(&ready));
        if (dead_) return;
      }
      MutexLock send(&send_mu_);
      if (!FinishHandoff()) return;
      SendSomeLocked(/*inline_mode=*/false);
    }
  }

  // Sends what a Kick left mid-frame (sender thread). False: the lane died.
  bool FinishHandoff() ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_) {
    if (!handoff_.has_value()) return true;
    Handoff h = std::move(*handoff_);
    handoff_.reset();
    {
      MutexLock lock(&mu_);
      handoff_pending_ = false;
    }
    if (absl::Status st =
            SendIovBy(fd_.get(), h.iov.data() + h.at, static_cast<int>(h.iov.size() - h.at),
                      absl::Now() + limits_.io_timeout, "request frames");
        !st.ok()) {
      Fail(st);
      return false;
    }
    SettleAnswered(h.last_tag);
    return true;
  }

  // Moves slices queue -> pending within the window and writes their frames.
  void SendSomeLocked(bool inline_mode) ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_) {
    if (handoff_.has_value()) {  // the socket is mid-frame: only its sender goes on
      if (inline_mode || !FinishHandoff()) return;
    }
    for (;;) {
      absl::InlinedVector<Slice, 4> out, cancelled;
      bool large = false;  // inline: a reserved batch's large WRITE is in `out`
      trace::Scope span("tcp.send", "tcp");
      {
        MutexLock lock(&mu_);
        while (!dead_ && !queue_.empty() && out.size() < 64 && WindowOpenLocked(queue_.front())) {
          Slice& s = queue_.front();
          if (inline_mode && IsLargeWrite(s) && !ReservedForLocked(s)) break;
          if (s.batch->cancelled()) {
            cancelled.push_back(std::move(s));
          } else {
            large = large || (inline_mode && IsLargeWrite(s));
            s.tag = next_tag_++;
            s.sent_ns = span.start_ns();  // 0: not traced
            inflight_bytes_ += s.length;
            pending_.push_back(s);
            out.push_back(std::move(s));
          }
          queue_.pop_front();
        }
      }
      for (Slice& s : cancelled) {
        SettleSlice(s, absl::CancelledError("cancelled"));
      }
      if (out.empty()) {
        span.Dismiss();
        return;
      }
      if (span.active()) TraceSend(span, out);
      if (large) {  // one sendmsg, then the sender thread has the rest
        SendInlineOrHandOff(out);
        return;
      }
      const absl::Status st = WriteFrames(out);
      if (!st.ok()) {
        Fail(st);
        return;
      }
      SettleAnswered(out.back().tag);
    }
  }

  // The send span's arguments: the first slice and the bytes of all of them.
  static void TraceSend(trace::Scope& span, std::span<const Slice> out) {
    uint64_t bytes = 0;
    for (const Slice& s : out) bytes += s.length;
    span.set_batch(out.front().batch->id());
    span.set_slice(out.front().index);
    span.set_bytes(bytes);
  }

  // One sendmsg of `out`'s frames; what it leaves goes to the sender thread.
  void SendInlineOrHandOff(std::span<const Slice> out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_) {
    Handoff h;
    EncodeFrames(out, &h.headers, &h.iov);
    h.last_tag = out.back().tag;
    iovec* next = h.iov.data();
    int left = static_cast<int>(h.iov.size());
    const absl::StatusOr<bool> sent = SendIovSome(fd_.get(), &next, &left, "request frames");
    if (!sent.ok()) {
      Fail(sent.status());
      return;
    }
    h.at = static_cast<size_t>(next - h.iov.data());
    if (left == 0) {
      SettleAnswered(h.last_tag);
      return;
    }
    handoff_ = std::move(h);  // the headers' buffer moves with it: iov stays valid
    MutexLock lock(&mu_);
    handoff_pending_ = true;
    ++handoffs_;
  }

  // Request frames of `out`: a header each, a WRITE's payload straight from
  // the caller's buffer. `iov` points into `headers`.
  // Headers and Iov: std::vector, or absl::InlinedVector for a write that
  // finishes before they go out of scope.
  template <typename Headers, typename Iov>
  static void EncodeFrames(std::span<const Slice> out, Headers* headers, Iov* iov) {
    headers->resize(out.size());
    iov->reserve(out.size() * 3);
    for (size_t i = 0; i < out.size(); ++i) {
      const Slice& s = out[i];
      (*headers)[i] = EncodeHeader({s.op == OpCode::kRead ? FrameType::kRead : FrameType::kWrite, 0,
                                    s.tag, s.segment, s.offset, s.length,
                                    s.capability != nullptr ? kAuxCapability : 0u});
      iov->push_back({(*headers)[i].data(), (*headers)[i].size()});
      if (s.capability != nullptr) {
        iov->push_back({const_cast<char*>(s.capability), kWireCapabilityBytes});
      }
      if (s.op == OpCode::kWrite) iov->push_back({s.local, s.length});
    }
  }

  absl::Status WriteFrames(std::span<const Slice> out) {
    absl::InlinedVector<WireHeader, 4> headers;
    absl::InlinedVector<iovec, 12> iov;
    EncodeFrames(out, &headers, &iov);
    return SendIovBy(fd_.get(), iov.data(), static_cast<int>(iov.size()),
                     absl::Now() + limits_.io_timeout, "request frames");
  }

  // Every frame up to `tag` is sent (its sendmsg returned): settles the
  // WRITEs the owner already answered.
  void SettleAnswered(uint64_t tag) ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_) {
    std::vector<std::pair<Slice, absl::Status>> done;
    {
      MutexLock lock(&mu_);
      sent_tag_ = tag;
      done.swap(answered_);
    }
    for (auto& [s, status] : done) SettleSlice(s, status);
  }

  // kReserved: no one receives yet; the claiming caller of reserved_batch_
  // will (see "Reservation" above).
  enum class Owner { kNone, kThread, kCaller, kReserved };
  enum class StepKind { kFrame, kIdle, kGaveUp, kBroken };
  struct Step {
    StepKind kind = StepKind::kIdle;
    Slice slice;          // kFrame: the slice answered
    absl::Status status;  // kFrame: its outcome; kBroken: why the lane broke
  };
  // The response being received (to pending_.front()); the owner's only.
  struct Cursor {
    bool active = false;
    Slice slice;
    absl::Time deadline;  // io_timeout after the frame's receive began
    WireHeader raw;
    size_t header_got = 0;
    bool have_header = false;
    FrameHeader h;
    size_t body_got = 0;
    std::string message;  // an ERROR frame's text
    int64_t recv_ns = 0;  // trace::NowNs() when its receive began; 0: not traced
  };

  void ReceiverLoop() {
    for (;;) {
      {
        MutexLock lock(&mu_);
        if (!AcquireForThreadLocked()) break;
      }
      Step r = ReceiveStep(absl::InfiniteFuture());
      if (r.kind == StepKind::kBroken) {
        Fail(r.status);  // dead before anyone else can own the broken cursor
        ReleaseOwner();
        break;
      }
      if (r.kind == StepKind::kFrame) {
        FinishFrame(std::move(r.slice), r.status, /*release=*/true);
      } else {
        ReleaseOwner();
      }
    }
    SettleAllAfterDeath();
  }

  // Sleeps until the thread should receive (true) or the lane is dead. A
  // claim holds it back until claim_expiry_ (a timed wait, so a caller that
  // never Waits, or one stuck sending, delays the lane by claim_patience at
  // most); the idle sleep ends when a claim arrives so its timer can start,
  // and every reserve_patience, when a reservation past its expiry is taken
  // over (a reservation does not wake the thread).
  bool AcquireForThreadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return dead_ || (owner_ == Owner::kNone && !pending_.empty() && claims_ == 0);
    };
    const auto ready_or_claimed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return dead_ || claims_ > 0 || (owner_ == Owner::kNone && !pending_.empty());
    };
    for (;;) {
      if (dead_) return false;
      const absl::Time now = absl::Now();
      if (claims_ > 0 && now >= claim_expiry_) {
        claims_ = 0;  // late claimers find the thread receiving and wait on the table
      }
      if (owner_ == Owner::kReserved && now >= reserve_expiry_) {
        owner_ = Owner::kNone;  // so does a late reserver
      }
      if (owner_ == Owner::kNone && !pending_.empty() && claims_ == 0) {
        owner_ = Owner::kThread;
        quiet_rounds_ = 0;
        return true;
      }
      if (claims_ > 0) {
        mu_.AwaitWithDeadline(Condition(&ready), claim_expiry_);
        quiet_rounds_ = 0;
      } else if (owner_ == Owner::kReserved) {
        mu_.AwaitWithDeadline(Condition(&ready_or_claimed), reserve_expiry_);
        quiet_rounds_ = 0;
      } else if (quiet_rounds_ < kWatchRounds) {
        // Watching: new claims may reserve, so wake up to check on them.
        const uint64_t seen = reservations_;
        watching_ = true;
        const bool woke = mu_.AwaitWithTimeout(Condition(&ready_or_claimed), ReservePatience());
        watching_ = false;
        quiet_rounds_ = (woke || reservations_ != seen) ? 0 : quiet_rounds_ + 1;
      } else {
        mu_.Await(Condition(&ready_or_claimed));  // long idle: claims wake it
        quiet_rounds_ = 0;
      }
    }
  }

  void ReleaseOwner() {
    MutexLock lock(&mu_);
    owner_ = Owner::kNone;
  }

  // The owner received the whole response to pending_.front(): pops it (and
  // with `release` gives up ownership in the same step, so the next owner
  // starts on the next slice) and settles it.
  void FinishFrame(Slice front, const absl::Status& outcome, bool release) {
    {
      MutexLock lock(&mu_);
      MC_DASSERT(!pending_.empty() && pending_.front().tag == front.tag, "pending order");
      inflight_bytes_ -= pending_.front().length;
      pending_.pop_front();
      if (release) owner_ = Owner::kNone;
      // The owner has every byte of this WRITE, but the sendmsg that
      // carried them may not have returned yet: the sender settles it then.
      if (front.op == OpCode::kWrite && front.tag > sent_tag_) {
        answered_.push_back({std::move(front), outcome});
        return;
      }
    }
    SettleSlice(front, outcome);
  }

  // Receive owner only: receives (the rest of) the response to
  // pending_.front(). kGaveUp: it would block past `give_up`; what arrived so
  // far stays in cursor_. kIdle: nothing is on the wire.
  Step ReceiveStep(absl::Time give_up) {
    Cursor& c = cursor_;
    if (!c.active) {
      MutexLock lock(&mu_);
      if (pending_.empty()) return {};
      c = Cursor{};
      c.active = true;
      c.slice = pending_.front();
      c.deadline = absl::Now() + limits_.io_timeout;
      c.recv_ns = c.slice.sent_ns != 0 && trace::Enabled() ? trace::NowNs() : 0;
    }
    const auto broken = [](absl::Status st) { return Step{StepKind::kBroken, {}, std::move(st)}; };
    if (!c.have_header) {
      absl::StatusOr<bool> got =
          RecvSomeAhead(fd_.get(), reinterpret_cast<char*>(c.raw.data()), c.raw.size(),
                        &c.header_got, &ahead_, c.deadline, give_up, "response header");
      if (!got.ok()) return broken(got.status());
      if (!*got) return {StepKind::kGaveUp, {}, {}};
      absl::StatusOr<FrameHeader> h = DecodeHeader(c.raw.data());
      if (!h.ok()) return broken(h.status());
      if (h->tag != c.slice.tag) {
        return broken(absl::DataLossError(absl::StrCat(
            "response tag ", h->tag, " does not match the oldest request ", c.slice.tag)));
      }
      switch (h->type) {
        case FrameType::kReadData:
          if (c.slice.op != OpCode::kRead || h->length != c.slice.length) {
            return broken(absl::DataLossError("READ_DATA does not match its request"));
          }
          break;
        case FrameType::kWriteAck:
          if (c.slice.op != OpCode::kWrite) {
            return broken(absl::DataLossError("WRITE_ACK for a READ"));
          }
          break;
        case FrameType::kError:
          c.message.assign(h->length, '\0');
          break;
        default:
          return broken(absl::DataLossError("unexpected frame type in a response"));
      }
      c.h = *h;
      c.have_header = true;
    }
    absl::Status outcome;
    if (c.h.type != FrameType::kWriteAck) {
      const bool data = c.h.type == FrameType::kReadData;
      absl::StatusOr<bool> got =
          RecvSomeAhead(fd_.get(), data ? c.slice.local : c.message.data(), c.h.length, &c.body_got,
                        &ahead_, c.deadline, give_up, data ? "READ_DATA payload" : "ERROR message");
      if (!got.ok()) return broken(got.status());
      if (!*got) return {StepKind::kGaveUp, {}, {}};
      if (data && c.slice.digests != nullptr) {  // while the bytes are in cache
        DigestChunks(c.slice.local, c.slice.length, c.slice.digests);
      }
      if (!data) {
        outcome = absl::Status(static_cast<absl::StatusCode>(c.h.code),
                               absl::StrCat("owner: ", c.message));
      }
    }
    c.active = false;
    if (c.recv_ns != 0) TraceFrame(c);
    return {StepKind::kFrame, std::move(c.slice), std::move(outcome)};
  }

  // A traced slice's round trip (its frame sent to its response in) and the
  // receive of its response.
  static void TraceFrame(const Cursor& c) {
    const int64_t now = trace::NowNs();
    const uint64_t batch = c.slice.batch->id();
    trace::Record("tcp.wire", "tcp", c.slice.sent_ns, now, batch, c.slice.index, c.slice.length);
    trace::Record("tcp.recv", "tcp", c.recv_ns, now, batch, c.slice.index, c.slice.length);
  }

  void SettleSlice(const Slice& s, const absl::Status& status) {
    if (observer_ != nullptr) observer_->Settled(s, status);
    table_->Settle(*s.batch, s.index, status);
    // relaxed: the count is a soft admission bound, it publishes nothing.
    outstanding_->fetch_sub(1, std::memory_order_relaxed);
  }

  // A slice the dead lane held: its path's observer may move it to another.
  void SettleOrRescue(Slice& s, const absl::Status& why) {
    if (observer_ == nullptr || !observer_->Rescue(s, why)) SettleSlice(s, why);
  }

  BatchTable* const table_;
  std::atomic<size_t>* const outstanding_;
  const Limits limits_;
  SliceObserver* const observer_;
  UniqueFd fd_;
  std::thread sender_;
  std::thread receiver_;
  Mutex send_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable Mutex mu_;
  bool dead_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status dead_status_ ABSL_GUARDED_BY(mu_);
  std::deque<Slice> queue_ ABSL_GUARDED_BY(mu_);    // not yet sent
  std::deque<Slice> pending_ ABSL_GUARDED_BY(mu_);  // sent, in wire order
  uint64_t inflight_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_tag_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t sent_tag_ ABSL_GUARDED_BY(mu_) = 0;       // frames up to it are sent
  Owner owner_ ABSL_GUARDED_BY(mu_) = Owner::kNone;  // who receives now
  size_t claims_ ABSL_GUARDED_BY(mu_) = 0;           // callers that will receive
  size_t kicks_ ABSL_GUARDED_BY(mu_) = 0;            // Enqueues whose Kick is to come
  absl::Time claim_expiry_ ABSL_GUARDED_BY(mu_);     // of the newest claim
  BatchId reserved_batch_ ABSL_GUARDED_BY(mu_) = 0;  // while owner_ == kReserved
  // Frames a Kick's one sendmsg left unsent, for the sender thread.
  struct Handoff {
    std::vector<WireHeader> headers;
    std::vector<iovec> iov;
    size_t at = 0;  // first iovec not wholly sent
    uint64_t last_tag = 0;
  };
  std::optional<Handoff> handoff_ ABSL_GUARDED_BY(send_mu_);
  bool handoff_pending_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t handoffs_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;
  bool watching_ ABSL_GUARDED_BY(mu_) = false;  // the receiver's timed idle wait
  int quiet_rounds_ ABSL_GUARDED_BY(mu_) = 0;   // patience periods with nothing to do
  uint64_t reservations_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time reserve_expiry_ ABSL_GUARDED_BY(mu_);
  Cursor cursor_;    // the receive owner's
  ReadAhead ahead_;  // the receive owner's: bytes of the stream past the cursor
  // WRITEs the owner answered while their sendmsg was still running.
  std::vector<std::pair<Slice, absl::Status>> answered_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_TCP_LANE_H_
