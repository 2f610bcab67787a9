// One client TCP connection: many calls in flight, matched by request id.
//
// Threads: callers (any number) register a pending call, append its frame to
// the output buffer and write what the socket takes without blocking. One I/O
// thread per connection polls the socket and an eventfd; it reads responses
// and completes their calls, writes leftover output on POLLOUT (and, after
// each wake-up, the requests callers queued while it was completing calls:
// many calls, one send), and fails
// calls whose deadline passed (DEADLINE_EXCEEDED) from a min-heap of
// deadlines. On EOF, a socket error or a malformed frame the connection is
// broken: every pending call fails with UNAVAILABLE, and so does every later
// call (TcpChannel then reconnects).
//
// Exactly once: a call is completed only by whoever erases it from pending_
// under mu_ (response, deadline, break, destruction), outside the lock.
//
// Caller-runs receive: a thread that is about to wait for its own calls may
// take the reader role (TryTakeReader) and receive on its own thread
// (ReceiveUntil): it reads the socket, completes calls (its own and any
// other) and expires deadlines, as the I/O thread would. One reader at a time
// touches the decoder. While a caller reads, the I/O thread polls the socket
// only for POLLRDHUP (a closing peer), which data does not wake, so a
// blocking call costs the caller's own wake-up and nothing else; a call
// registered meanwhile does not wake the I/O thread either, unless its
// deadline comes before the reader's next wake-up (then the I/O thread keeps
// that deadline). A reader leaving with calls still pending wakes the I/O
// thread to take over.
//
// Invariants: every pending call has a heap entry with its deadline (the heap
// may also hold stale entries of finished calls; it is rebuilt when stale
// entries outnumber live ones); broken_ => pending_ is empty.
#ifndef MOONCAKE_STORE_RPC_INTERNAL_CLIENT_CONNECTION_H_
#define MOONCAKE_STORE_RPC_INTERNAL_CLIENT_CONNECTION_H_

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <queue>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/rpc/channel.h"
#include "mooncake/store/rpc/frame.h"
#include "mooncake/store/rpc/internal/method_metrics.h"
#include "mooncake/store/rpc/internal/socket.h"

namespace mooncake::rpc_internal {

struct ClientConnectionLimits {
  uint32_t max_payload_bytes = rpc::kDefaultMaxPayloadBytes;
  size_t max_pending_calls = 65536;
};

class ClientConnection {
 public:
  static constexpr size_t kCorkFlushBytes = 256 << 10;

  ClientConnection(UniqueFd fd, std::string address, ClientConnectionLimits limits,
                   MetricsTable* metrics)
      : address_(std::move(address)),
        limits_(limits),
        metrics_(metrics),
        decoder_(limits.max_payload_bytes),
        fd_(std::move(fd)) {
    MC_ASSERT(fd_.valid() && metrics_ != nullptr, "connection needs a socket and metrics");
    thread_ = std::thread([this] { Run(); });
  }
  ClientConnection(const ClientConnection&) = delete;
  ClientConnection& operator=(const ClientConnection&) = delete;

  // Fails what is still pending with CANCELLED. Must not run on the I/O
  // thread (TcpChannel never lets it).
  ~ClientConnection() {
    MC_ASSERT(std::this_thread::get_id() != thread_.get_id(),
              "a client connection destroyed from its own callback");
    stop_.store(true, std::memory_order_release);
    wake_.Notify();
    thread_.join();
    BreakWith(absl::CancelledError(absl::StrCat("channel to ", address_, " closed")));
  }

  // Thread-safe. REQUIRES: deadline_ns > now, request.size() <= limit.
  void Call(uint16_t method_id, std::string_view method_name, std::string_view request,
            int64_t timeout_ns, rpc::RawDone done) {
    MC_DASSERT(request.size() <= limits_.max_payload_bytes, "caller checks the size");
    MethodMetrics* m = metrics_->ForMethod(method_id, method_name);
    const int64_t start_ns = MonotonicClock::Get().NowNs();
    const int64_t deadline_ns = start_ns + timeout_ns;
    const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
    bool wake = false;
    absl::Status refuse;
    {
      MutexLock lock(&mu_);
      if (broken_) {
        refuse = broken_status_;
      } else if (pending_.size() >= limits_.max_pending_calls) {
        refuse = absl::ResourceExhaustedError(
            absl::StrCat(limits_.max_pending_calls, " calls already in flight to ", address_));
      } else {
        pending_.emplace(id, Pending{std::move(done), method_name, deadline_ns, start_ns, m});
        heap_.push({deadline_ns, id});
        if (heap_.size() > 2 * pending_.size() + 1024) RebuildHeapLocked();
        // The I/O thread must wake for this deadline unless a reading caller
        // wakes by then anyway: one about to (re)compute its poll timeout
        // (kReaderRecomputes), or one asleep until reader_until_ns_.
        wake = deadline_ns < sleeping_until_ns_ &&
               (reader_ != Reader::kCaller || deadline_ns < reader_until_ns_);
      }
    }
    if (!refuse.ok()) {
      m->Record(refuse.code(), 0);
      done(refuse, {});
      return;
    }
    rpc::FrameHeader h;
    h.kind = rpc::FrameKind::kRequest;
    h.method_id = method_id;
    h.request_id = id;
    h.timeout_us = static_cast<uint32_t>(
        std::min<int64_t>(timeout_ns / 1000, std::numeric_limits<uint32_t>::max()));
    {
      MutexLock lock(&out_mu_);
      rpc::AppendFrame(h, request, &out_);
      const bool big = out_.size() - out_off_ >= kCorkFlushBytes;
      // While the I/O thread is completing calls it flushes when done: calls
      // made meanwhile (typically from its callbacks or from threads they
      // woke) share one send instead of one each.
      if (!want_out_.load(std::memory_order_relaxed) && ((corked_ == 0 && !io_busy_) || big)) {
        wake |= FlushLocked();
      }
    }
    if (wake) wake_.Notify();
  }

  // Calls made between Cork and the matching Uncork (from any thread) are
  // written together at the Uncork: one send for many calls.
  void Cork() {
    MutexLock lock(&out_mu_);
    ++corked_;
  }
  void Uncork() {
    bool wake = false;
    {
      MutexLock lock(&out_mu_);
      MC_ASSERT(corked_ > 0, "uncork without cork");
      if (--corked_ == 0 && !io_busy_ && !want_out_.load(std::memory_order_relaxed)) {
        wake = FlushLocked();
      }
    }
    if (wake) wake_.Notify();
  }

  // Caller-runs receive (see the header comment). True when the calling
  // thread now holds the reader role: it must call ReleaseReader, and may
  // call ReceiveUntil in between. False while another thread reads or once
  // the connection is broken.
  bool TryTakeReader() {
    MutexLock lock(&mu_);
    if (broken_ || reader_ != Reader::kNone) return false;
    reader_ = Reader::kCaller;
    reader_until_ns_ = kReaderRecomputes;
    return true;
  }

  // Receives and completes calls until done() (called without any lock of
  // ours held), until nothing is pending, or until the connection breaks.
  // Completions of any call on this connection may run here. REQUIRES: the
  // reader role, taken by TryTakeReader on this thread.
  template <typename Done>
  void ReceiveUntil(Done&& done) {
    while (!done()) {
      int timeout_ms = -1;
      {
        MutexLock lock(&mu_);
        MC_DASSERT(reader_ == Reader::kCaller, "ReceiveUntil without the reader role");
        if (broken_ || pending_.empty()) return;
        const int64_t now_ns = MonotonicClock::Get().NowNs();
        const int64_t wait_ns = std::clamp<int64_t>(heap_.top().first - now_ns, 0, kMaxPollNs);
        timeout_ms = static_cast<int>((wait_ns + 999999) / 1000000);
        // A call registered from now on with an earlier deadline wakes the
        // I/O thread to keep it (Call).
        reader_until_ns_ = now_ns + wait_ns;
      }
      pollfd p{fd_.get(), POLLIN, 0};
      const int rc = ::poll(&p, 1, timeout_ms);
      if (rc < 0 && errno != EINTR) {
        BreakWith(ErrnoToStatus(errno, "poll"));
        return;
      }
      if ((p.revents & (POLLIN | POLLHUP | POLLERR)) && !ReadResponses()) return;
      ExpireDeadlines(MonotonicClock::Get().NowNs());
    }
  }

  // Fails every pending call with `status` and shuts the socket (a reading
  // caller's poll returns at once). The connection stays broken.
  void Break(const absl::Status& status) { BreakWith(status); }

  // Gives the reader role back; wakes the I/O thread when calls are left.
  void ReleaseReader() {
    bool wake = false;
    {
      MutexLock lock(&mu_);
      MC_DASSERT(reader_ == Reader::kCaller, "ReleaseReader without the reader role");
      reader_ = Reader::kNone;
      wake = !pending_.empty() && !broken_;
    }
    if (wake) wake_.Notify();
  }

  bool broken() const {
    MutexLock lock(&mu_);
    return broken_;
  }
  // True once the I/O thread has returned (the connection can be destroyed
  // from any thread).
  bool exited() const { return exited_.load(std::memory_order_acquire); }
  uint64_t late_responses() const { return late_responses_.load(std::memory_order_relaxed); }
  // send() system calls made so far (requests share them when batched).
  uint64_t send_calls() const { return send_calls_.load(std::memory_order_relaxed); }
  // Times the I/O thread returned from poll (callers that receive for
  // themselves leave it asleep).
  uint64_t io_wakeups() const { return io_wakeups_.load(std::memory_order_relaxed); }
  size_t pending() const {
    MutexLock lock(&mu_);
    return pending_.size();
  }

 private:
  struct Pending {
    rpc::RawDone done;
    std::string_view method_name;
    int64_t deadline_ns;
    int64_t start_ns;
    MethodMetrics* metrics;
  };
  using HeapEntry = std::pair<int64_t, uint64_t>;  // (deadline, request id)

  struct Completion {
    Pending call;
    absl::Status status;
    std::string_view payload;
  };

  static void Complete(Completion& c, int64_t now_ns) {
    c.call.metrics->Record(c.status.code(), static_cast<uint64_t>(now_ns - c.call.start_ns));
    c.call.done(c.status, c.status.ok() ? c.payload : std::string_view());
  }

  // Returns true when the I/O thread must be woken (POLLOUT needed, or the
  // socket failed).
  bool FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(out_mu_) {
    while (out_off_ < out_.size()) {
      const ssize_t n = ::send(fd_.get(), out_.data() + out_off_, out_.size() - out_off_,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      send_calls_.fetch_add(1, std::memory_order_relaxed);  // relaxed: a statistic
      if (n > 0) {
        out_off_ += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      // A dead socket: poll reports it to the I/O thread, which breaks.
      ::shutdown(fd_.get(), SHUT_RDWR);
      out_.clear();
      out_off_ = 0;
      return true;
    }
    if (out_off_ == out_.size()) {
      out_.clear();
      out_off_ = 0;
      want_out_.store(false, std::memory_order_relaxed);
      return false;
    }
    const bool was = want_out_.exchange(true, std::memory_order_relaxed);
    return !was;
  }

  void RebuildHeapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<HeapEntry> live;
    live.reserve(pending_.size());
    for (const auto& [id, p] : pending_) live.push_back({p.deadline_ns, id});
    heap_ = decltype(heap_)(std::greater<HeapEntry>(), std::move(live));
  }

  void Run() {
    while (!stop_.load(std::memory_order_acquire)) {
      int timeout_ms = -1;
      bool read = false;
      const int64_t now_ns = MonotonicClock::Get().NowNs();
      {
        MutexLock lock(&mu_);
        if (broken_) break;
        // Idle, or a caller reads: only a closing peer wakes us (POLLRDHUP),
        // not data. Deadlines are kept here too (a reading caller keeps those
        // due before it wakes; see Call). Idle with stale heap entries must
        // sleep "forever": a call registered now then wakes us, which is what
        // makes us read for it.
        read = !pending_.empty() && reader_ == Reader::kNone;
        sleeping_until_ns_ =
            pending_.empty() ? std::numeric_limits<int64_t>::max() : heap_.top().first;
        if (sleeping_until_ns_ != std::numeric_limits<int64_t>::max()) {
          const int64_t wait_ns = std::clamp<int64_t>(sleeping_until_ns_ - now_ns, 0, kMaxPollNs);
          timeout_ms = static_cast<int>((wait_ns + 999999) / 1000000);
        }
      }
      pollfd fds[2] = {{fd_.get(), static_cast<short>(read ? POLLIN : POLLRDHUP), 0},
                       {wake_.fd(), POLLIN, 0}};
      if (want_out_.load(std::memory_order_relaxed)) fds[0].events |= POLLOUT;
      const int rc = ::poll(fds, 2, timeout_ms);
      io_wakeups_.fetch_add(1, std::memory_order_relaxed);  // relaxed: a statistic
      if (rc < 0 && errno != EINTR) {
        BreakWith(ErrnoToStatus(errno, "poll"));
        break;
      }
      if (fds[1].revents & POLLIN) wake_.Drain();
      SetBusy(true);
      bool caller_sees_hangup = false;
      if (fds[0].revents & (POLLIN | POLLHUP | POLLERR | POLLRDHUP)) {
        if (TakeReaderForThread()) {
          const bool ok = ReadResponses();
          ReleaseThreadReader();
          if (!ok) break;
        } else {
          // Data polled just before a caller took the role: the next poll
          // leaves it to the caller. A hang-up stays reported, though.
          caller_sees_hangup = (fds[0].revents & (POLLHUP | POLLERR | POLLRDHUP)) != 0;
        }
      }
      ExpireDeadlines(MonotonicClock::Get().NowNs());
      SetBusy(false);  // and sends what the completions above queued
      if (caller_sees_hangup) {
        // The reading caller sees the same and breaks the connection; wait
        // for that (or for it to leave) rather than spin on a level-triggered
        // hang-up.
        MutexLock lock(&mu_);
        mu_.AwaitWithTimeout(Condition(
                                 +[](ClientConnection* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
                                   return c->reader_ != Reader::kCaller || c->broken_;
                                 },
                                 this),
                             absl::Milliseconds(10));
      }
    }
    exited_.store(true, std::memory_order_release);
  }

  bool TakeReaderForThread() {
    MutexLock lock(&mu_);
    if (reader_ != Reader::kNone) return false;
    reader_ = Reader::kThread;
    return true;
  }
  void ReleaseThreadReader() {
    MutexLock lock(&mu_);
    reader_ = Reader::kNone;
  }

  // I/O thread: while busy, callers leave their frames for the flush that
  // ending the busy spell does (see Call).
  void SetBusy(bool busy) {
    MutexLock lock(&out_mu_);
    io_busy_ = busy;
    // A partial write left by an earlier flush goes on even when corked.
    if (!busy && (corked_ == 0 || want_out_.load(std::memory_order_relaxed))) FlushLocked();
  }

  // The reader role's holder only. Returns false once the connection is
  // broken.
  bool ReadResponses() {
    constexpr size_t kReadChunk = 64 << 10;
    for (int i = 0; i < 16; ++i) {
      std::span<uint8_t> dst = decoder_.WritableSpan(std::max(kReadChunk, decoder_.MissingBytes()));
      const ssize_t r = ::recv(fd_.get(), dst.data(), dst.size(), MSG_DONTWAIT);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (r == 0) {
        // An authentication refusal keeps its code (retrying cannot help);
        // any other reason is UNAVAILABLE, as a lost connection is.
        const absl::StatusCode code = server_error_.code() == absl::StatusCode::kUnauthenticated
                                          ? absl::StatusCode::kUnauthenticated
                                          : absl::StatusCode::kUnavailable;
        BreakWith(absl::Status(
            code, server_error_.ok()
                      ? absl::StrCat("connection to ", address_, " closed by the server")
                      : absl::StrCat("connection to ", address_, " closed by the server: ",
                                     absl::StatusCodeToString(server_error_.code()), ": ",
                                     server_error_.message())));
        return false;
      }
      if (r < 0) {
        BreakWith(absl::UnavailableError(absl::StrCat(
            "connection to ", address_, " lost: ", ErrnoToStatus(errno, "recv").message())));
        return false;
      }
      decoder_.Commit(static_cast<size_t>(r));
      if (!DispatchFrames()) return false;
      if (static_cast<size_t>(r) < dst.size()) return true;
    }
    return true;
  }

  bool DispatchFrames() {
    std::vector<Completion> done;
    absl::Status protocol_error;
    {
      MutexLock lock(&mu_);
      for (;;) {
        auto next = decoder_.Next();
        if (!next.ok()) {
          protocol_error = next.status();
          break;
        }
        if (!next->has_value()) break;
        const rpc::Frame& f = **next;
        if (f.header.kind != rpc::FrameKind::kResponse) {
          protocol_error = absl::InvalidArgumentError("the server sent a request frame");
          break;
        }
        if (f.header.request_id == 0) {  // connection error; EOF follows
          server_error_ = absl::Status(f.header.code, AbslView(f.payload));
          continue;
        }
        auto it = pending_.find(f.header.request_id);
        if (it == pending_.end()) {  // finished already (deadline)
          late_responses_.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        absl::Status s = f.header.code == absl::StatusCode::kOk
                             ? absl::OkStatus()
                             : absl::Status(f.header.code, AbslView(f.payload));
        done.push_back({std::move(it->second), std::move(s), f.payload});
        pending_.erase(it);
      }
    }
    // Payload views stay valid: the decoder is not written until we return.
    const int64_t now_ns = MonotonicClock::Get().NowNs();
    for (Completion& c : done) Complete(c, now_ns);
    if (!protocol_error.ok()) {
      BreakWith(absl::UnavailableError(absl::StrCat("protocol error on the connection to ",
                                                    address_, ": ", protocol_error.ToString())));
      return false;
    }
    return true;
  }

  void ExpireDeadlines(int64_t now_ns) {
    std::vector<Completion> expired;
    {
      MutexLock lock(&mu_);
      while (!heap_.empty() && heap_.top().first <= now_ns) {
        const auto [deadline, id] = heap_.top();
        heap_.pop();
        auto it = pending_.find(id);
        if (it == pending_.end() || it->second.deadline_ns != deadline) continue;
        const double ms = static_cast<double>(deadline - it->second.start_ns) / 1e6;
        absl::Status s = absl::DeadlineExceededError(
            absl::StrCat(AbslView(it->second.method_name), " (request ", id, ") to ", address_,
                         " got no response within ", ms, " ms"));
        expired.push_back({std::move(it->second), std::move(s), {}});
        pending_.erase(it);
      }
    }
    for (Completion& c : expired) Complete(c, now_ns);
  }

  void BreakWith(const absl::Status& status) {
    MC_DASSERT(!status.ok(), "breaking with OK");
    std::vector<Completion> failed;
    {
      MutexLock lock(&mu_);
      if (!broken_) {
        broken_ = true;
        broken_status_ = status;
      }
      for (auto& [id, p] : pending_) failed.push_back({std::move(p), status, {}});
      pending_.clear();
      heap_ = {};
    }
    ::shutdown(fd_.get(), SHUT_RDWR);
    const int64_t now_ns = MonotonicClock::Get().NowNs();
    for (Completion& c : failed) Complete(c, now_ns);
  }

  const std::string address_;
  const ClientConnectionLimits limits_;
  MetricsTable* const metrics_;
  rpc::FrameDecoder decoder_;  // the reader role's holder only
  absl::Status server_error_;  // the reader role's holder only
  UniqueFd fd_;                // closed only by the destructor, after the join
  EventFd wake_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<bool> stop_{false};
  std::atomic<bool> exited_{false};
  std::atomic<uint64_t> late_responses_{0};
  std::atomic<uint64_t> send_calls_{0};
  std::atomic<uint64_t> io_wakeups_{0};

  mutable Mutex mu_;
  absl::flat_hash_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::priority_queue<HeapEntry, std::vector<HeapEntry>, std::greater<HeapEntry>> heap_
      ABSL_GUARDED_BY(mu_);
  int64_t sleeping_until_ns_ ABSL_GUARDED_BY(mu_) = 0;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status broken_status_ ABSL_GUARDED_BY(mu_);
  enum class Reader : uint8_t { kNone, kThread, kCaller };
  Reader reader_ ABSL_GUARDED_BY(mu_) = Reader::kNone;  // who may read the socket
  // While a caller reads: when its poll returns at the latest, or
  // kReaderRecomputes before it first computes that (it will see every call
  // registered until then: no deadline needs the I/O thread).
  static constexpr int64_t kReaderRecomputes = std::numeric_limits<int64_t>::min();
  static constexpr int64_t kMaxPollNs = 60'000'000'000;
  int64_t reader_until_ns_ ABSL_GUARDED_BY(mu_) = 0;

  Mutex out_mu_;
  std::string out_ ABSL_GUARDED_BY(out_mu_);
  size_t out_off_ ABSL_GUARDED_BY(out_mu_) = 0;
  int corked_ ABSL_GUARDED_BY(out_mu_) = 0;
  bool io_busy_ ABSL_GUARDED_BY(out_mu_) = false;  // the I/O thread will flush
  // relaxed: a hint for poll's event mask; a stale read costs one extra
  // wake-up or is fixed by the Notify that follows every false->true change.
  std::atomic<bool> want_out_{false};

  std::thread thread_;  // last: starts once everything above is built
};

}  // namespace mooncake::rpc_internal

#endif  // MOONCAKE_STORE_RPC_INTERNAL_CLIENT_CONNECTION_H_
