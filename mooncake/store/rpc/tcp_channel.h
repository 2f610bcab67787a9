// TcpChannel: the RPC client. One TCP connection to one server, any number of
// calls in flight on it, matched by request id (an RpcChannel, channel.h).
//
//   ASSIGN_OR_RETURN(auto channel, TcpChannel::Connect("10.0.0.1:7000", {}));
//   ASSIGN_OR_RETURN(auto resp,
//                    rpc::Call<GetReplicasMethod>(*channel, req, {.timeout_ns = 50'000'000}));
//
// Writes: a call is sent at once, except while the connection's I/O thread
// is completing calls (calls made from callbacks, or by threads they woke):
// those go out together when it is done, one send for all. TcpChannel::Batch
// does the same on demand.
//
// Deadlines: each call's deadline travels in its frame (so the server skips
// calls that expired in its queue) and is enforced here by the connection's
// I/O thread (or the caller receiving for itself): DEADLINE_EXCEEDED at the
// deadline, and a response that comes later is dropped (late_responses();
// counted when the connection next reads: an idle one reads only for a peer
// that closes).
//
// Connection loss (EOF, reset, a malformed frame, a connection error from the
// server) fails every pending call with UNAVAILABLE at once. The next call
// reconnects: one attempt, bounded by the smaller of connect_timeout_ns and
// the call's timeout, and at most one attempt per reconnect_backoff_ns; while
// another thread reconnects, or within the backoff, calls fail fast with
// UNAVAILABLE. Nothing is retried automatically: only the caller knows which
// of its calls are idempotent.
//
// Failover (options.resolve set: a server that moves, such as the leader of an
// HA master cluster found in etcd): the address comes from resolve() before
// the first connect and again whenever a call is answered UNAVAILABLE
// (connection lost or refused, "not the leader", overloaded); such a call is
// sent again, to the address resolve() gives then, every failover_retry_ns
// until its deadline. So a call spans a failover and fails only at its
// deadline. A server that stops answering without closing (paused, cut off)
// is noticed too: while calls wait and none completes for failover_probe_ns,
// resolve() is asked again, and if the server moved the connection is broken
// so its calls go to the new address. Only for servers whose every method may safely run twice (the
// HA master's are: docs/ha.md says why).
//
// Metrics: per method with prefix "mooncake_rpc_client" (latency from send to
// completion), on `options.metrics` or a private registry.
//
// Thread-safety: CallRaw and the accessors from any thread. Callbacks run on
// the I/O thread, on the calling thread for immediate failures, or on a
// thread receiving for its own calls (CallerReceive, which rpc::Call uses),
// and must not block or destroy the channel. The destructor fails pending calls with
// CANCELLED and returns after every callback has run.
#ifndef MOONCAKE_STORE_RPC_TCP_CHANNEL_H_
#define MOONCAKE_STORE_RPC_TCP_CHANNEL_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/rpc/channel.h"
#include "mooncake/store/rpc/frame.h"
#include "mooncake/store/rpc/internal/auth_handshake.h"
#include "mooncake/store/rpc/internal/client_connection.h"
#include "mooncake/store/rpc/internal/method_metrics.h"
#include "mooncake/store/rpc/internal/socket.h"

namespace mooncake::rpc {

struct TcpChannelOptions {
  uint32_t max_payload_bytes = kDefaultMaxPayloadBytes;  // requests sent and responses accepted
  int64_t connect_timeout_ns = 2'000'000'000;
  int64_t default_timeout_ns = 5'000'000'000;  // CallOptions::timeout_ns == 0
  int64_t max_timeout_ns = 300'000'000'000;    // longer timeouts are clamped
  size_t max_pending_calls = 65536;            // more in flight: RESOURCE_EXHAUSTED
  int64_t reconnect_backoff_ns = 100'000'000;
  MetricsRegistry* metrics = nullptr;  // null: a private registry
  // Failover (see the file comment): where the server is now; null = the
  // address given to Connect, always.
  std::function<absl::StatusOr<std::string>()> resolve;
  int64_t failover_retry_ns = 50'000'000;  // between attempts of a call
  // While calls wait and none completes for this long, resolve() is asked
  // whether the server moved (a leader paused or cut off answers nothing;
  // the calls then go to the new one instead of waiting for their deadline).
  int64_t failover_probe_ns = 250'000'000;
  // Authentication (base/auth.h): prove credentials->self() on every
  // connection, and check the server's proof, before the first call; within
  // connect_timeout_ns with the connect. Null: none (a server with a token
  // file then refuses every call with UNAUTHENTICATED).
  std::shared_ptr<const auth::Credentials> auth;
};

class TcpChannel {
 public:
  // Connects now. Errors: INVALID_ARGUMENT (address, options), UNAVAILABLE
  // (refused, unreachable), DEADLINE_EXCEEDED (connect timed out).
  // With options.resolve, `address` is ignored: resolve() is asked (again
  // every failover_retry_ns while it fails or the server refuses) until a
  // connection is made or connect_timeout_ns passes.
  static absl::StatusOr<std::unique_ptr<TcpChannel>> Connect(std::string address,
                                                             TcpChannelOptions options = {}) {
    if (absl::Status s = CheckOptions(options); !s.ok()) return s;
    auto channel = std::unique_ptr<TcpChannel>(new TcpChannel(std::move(address), options));
    const int64_t deadline = MonotonicClock::Get().NowNs() + options.connect_timeout_ns;
    for (;;) {
      absl::Status failed;
      if (options.resolve != nullptr) {
        absl::StatusOr<std::string> a = options.resolve();
        if (a.ok()) {
          MutexLock lock(&channel->mu_);
          channel->address_ = *a;
        } else {
          failed = a.status();
        }
      }
      if (failed.ok()) {
        const int64_t left = deadline - MonotonicClock::Get().NowNs();
        auto fd = rpc_internal::ConnectAndAuthenticate(
            channel->address(), std::max<int64_t>(left, 1'000'000), options.auth.get());
        if (fd.ok()) {
          {
            MutexLock lock(&channel->mu_);
            channel->conn_ = channel->MakeConnection(std::move(*fd));
          }
          if (options.resolve != nullptr) channel->StartRetryThread();
          return channel;
        }
        failed = fd.status();
      }
      if (options.resolve == nullptr || failed.code() == absl::StatusCode::kUnauthenticated ||
          MonotonicClock::Get().NowNs() + options.failover_retry_ns >= deadline) {
        return failed;
      }
      std::this_thread::sleep_for(std::chrono::nanoseconds(options.failover_retry_ns));
    }
  }

  TcpChannel(const TcpChannel&) = delete;
  TcpChannel& operator=(const TcpChannel&) = delete;
  ~TcpChannel() {
    StopRetries();
    std::vector<ConnPtr> conns;
    {
      MutexLock lock(&mu_);
      conns = retired_;
      if (conn_ != nullptr) conns.push_back(conn_);
    }
    const absl::Status closed =
        absl::CancelledError(absl::StrCat("channel to ", address(), " closed"));
    for (const ConnPtr& c : conns) c->Break(closed);
    // A caller receiving for itself (CallerReceive) holds its connection and
    // may be completing calls (into metrics_): the break wakes it, and it lets
    // go once it is out. Then nothing but this channel holds a connection.
    for (const ConnPtr& c : conns) {
      while (c.use_count() > 2) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    // No fence needed for their last writes: the connection is destroyed by
    // the last shared_ptr release below (conn_.reset / retired_.clear), an
    // acquire-release decrement that synchronizes with theirs.
    conns.clear();
    MutexLock lock(&mu_);
    conn_.reset();
    retired_.clear();
  }

  void CallRaw(uint16_t method_id, std::string_view method_name, std::string_view request,
               CallOptions options, RawDone done) {
    MC_DASSERT(done != nullptr, "a call needs a completion");
    if (request.size() > options_.max_payload_bytes) {
      done(absl::ResourceExhaustedError(absl::StrCat(
               AbslView(method_name), " request of ", request.size(),
               " bytes exceeds the channel's limit of ", options_.max_payload_bytes, " bytes")),
           {});
      return;
    }
    int64_t timeout_ns = options.timeout_ns > 0 ? options.timeout_ns : options_.default_timeout_ns;
    timeout_ns = std::min(timeout_ns, options_.max_timeout_ns);
    if (options_.resolve != nullptr) {
      auto call = std::make_shared<FailoverCall>();
      call->method_id = method_id;
      call->method_name = method_name;
      call->request = std::string(request);
      call->deadline_ns = MonotonicClock::Get().NowNs() + timeout_ns;
      call->done = std::move(done);
      Attempt(std::move(call), /*re_resolve=*/false);
      return;
    }
    auto conn = Connection(timeout_ns);
    if (!conn.ok()) {
      done(conn.status(), {});
      return;
    }
    (*conn)->Call(method_id, method_name, request, timeout_ns, std::move(done));
  }

  // Batches the writes of calls made while it lives, from any thread: they go
  // out in one send when the last Batch on the connection ends (or once 256
  // KiB are waiting). For a client issuing many calls at once (a batch get):
  // saves a syscall per call. Keep it short-lived: batched calls are not sent
  // before it ends, though their deadlines run.
  class Batch {
   public:
    explicit Batch(TcpChannel& channel) {
      MutexLock lock(&channel.mu_);
      conn_ = channel.conn_;
      if (conn_ != nullptr) conn_->Cork();
    }
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;
    ~Batch() {
      if (conn_ != nullptr) conn_->Uncork();
    }

   private:
    std::shared_ptr<rpc_internal::ClientConnection> conn_;
  };

  // Caller-runs receive, for a thread that will wait for the calls it makes
  // while this lives (rpc::Call, a client's batch of calls): when no other
  // thread is reading the connection, the caller receives the responses
  // itself in Until, so a blocking call wakes only the caller (not the
  // connection's I/O thread and then the caller). Completions of other calls
  // on the connection may run in Until too. Otherwise (another caller or the
  // I/O thread reads, not connected) Until returns at once and the calls
  // complete as usual.
  //
  //   TcpChannel::CallerReceive receive(channel);
  //   rpc::CallAsync<M>(channel, req, {}, [&](auto r) { ... set done ... });
  //   receive.Until([&] { return done; });   // then wait for done as before
  class CallerReceive {
   public:
    explicit CallerReceive(TcpChannel& channel) {
      {
        MutexLock lock(&channel.mu_);
        conn_ = channel.conn_;
      }
      if (conn_ != nullptr && !conn_->TryTakeReader()) conn_.reset();
    }
    CallerReceive(const CallerReceive&) = delete;
    CallerReceive& operator=(const CallerReceive&) = delete;
    ~CallerReceive() {
      if (conn_ != nullptr) conn_->ReleaseReader();
    }

    // Receives until done() (called with none of the channel's locks held),
    // until nothing is pending on the connection, or until it breaks.
    template <typename Done>
    void Until(Done&& done) {
      if (conn_ != nullptr) conn_->ReceiveUntil(std::forward<Done>(done));
    }

   private:
    std::shared_ptr<rpc_internal::ClientConnection> conn_;
  };

  uint32_t max_payload_bytes() const { return options_.max_payload_bytes; }
  // The server's address (with resolve: the latest answer).
  std::string address() const {
    MutexLock lock(&mu_);
    return address_;
  }
  // Calls sent again after UNAVAILABLE (failover, see the file comment).
  uint64_t failover_retries() const { return failover_retries_.load(std::memory_order_relaxed); }
  // Connections broken because the server went silent and moved (Probe).
  uint64_t silent_moves() const { return silent_moves_.load(std::memory_order_relaxed); }
  MetricsRegistry* metrics() const { return metrics_.registry(); }

  // Calls in flight on the current connection.
  size_t pending_calls() const {
    MutexLock lock(&mu_);
    return conn_ == nullptr ? 0 : conn_->pending();
  }
  // Responses that arrived after their call's deadline, current connection.
  uint64_t late_responses() const {
    MutexLock lock(&mu_);
    return conn_ == nullptr ? 0 : conn_->late_responses();
  }
  // send() system calls on the current connection (fewer than calls when
  // calls are batched: Batch, or calls made from completion callbacks).
  uint64_t send_calls() const {
    MutexLock lock(&mu_);
    return conn_ == nullptr ? 0 : conn_->send_calls();
  }
  // Wake-ups of the current connection's I/O thread (see CallerReceive).
  uint64_t io_wakeups() const {
    MutexLock lock(&mu_);
    return conn_ == nullptr ? 0 : conn_->io_wakeups();
  }
  bool connected() const {
    MutexLock lock(&mu_);
    return conn_ != nullptr && !conn_->broken();
  }

 private:
  using ConnPtr = std::shared_ptr<rpc_internal::ClientConnection>;

  TcpChannel(std::string address, const TcpChannelOptions& options)
      : address_(std::move(address)),
        options_(options),
        metrics_(options.metrics, "mooncake_rpc_client") {}

  static absl::Status CheckOptions(const TcpChannelOptions& o) {
    if (o.max_payload_bytes > kMaxPayloadBytesCeiling) {
      return absl::InvalidArgumentError(absl::StrCat("max_payload_bytes ", o.max_payload_bytes,
                                                     " exceeds the format's ceiling of ",
                                                     kMaxPayloadBytesCeiling));
    }
    if (o.connect_timeout_ns <= 0 || o.default_timeout_ns <= 0 || o.max_timeout_ns <= 0 ||
        o.max_pending_calls < 1 || o.reconnect_backoff_ns < 0 || o.failover_retry_ns <= 0 ||
        o.failover_probe_ns <= 0) {
      return absl::InvalidArgumentError(
          "timeouts, failover intervals and max_pending_calls must be positive, "
          "reconnect_backoff_ns >= 0");
    }
    return absl::OkStatus();
  }

  ConnPtr MakeConnection(UniqueFd fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::make_shared<rpc_internal::ClientConnection>(
        std::move(fd), address_,
        rpc_internal::ClientConnectionLimits{options_.max_payload_bytes,
                                             options_.max_pending_calls},
        &metrics_);
  }

  // One call that follows the server (options.resolve).
  struct FailoverCall {
    uint16_t method_id = 0;
    std::string_view method_name;
    std::string request;
    int64_t deadline_ns = 0;
    RawDone done;
  };

  // Sends `call` (to a freshly resolved address when `re_resolve`); an
  // UNAVAILABLE answer with time left is queued for another attempt.
  void Attempt(std::shared_ptr<FailoverCall> call, bool re_resolve) {
    const int64_t left = call->deadline_ns - MonotonicClock::Get().NowNs();
    if (left <= 0) {
      call->done(absl::DeadlineExceededError(
                     absl::StrCat(AbslView(call->method_name),
                                  ": no server answered before the deadline (", address(), ")")),
                 {});
      return;
    }
    auto conn = Connection(left, re_resolve);
    if (!conn.ok()) {
      Retry(std::move(call), conn.status());
      return;
    }
    ConnPtr c = *conn;
    c->Call(call->method_id, call->method_name, call->request, left,
            [this, call](const absl::Status& s, std::string_view payload) mutable {
              completions_.fetch_add(1, std::memory_order_relaxed);
              if (absl::IsUnavailable(s)) {
                Retry(std::move(call), s);
                return;
              }
              call->done(s, payload);
            });
  }

  // Queues `call` for another attempt after failover_retry_ns (on the retry
  // thread: never blocks a connection's I/O thread), or ends it with `why`
  // when its deadline comes first or the channel is closing.
  void Retry(std::shared_ptr<FailoverCall> call, const absl::Status& why) {
    const int64_t at = MonotonicClock::Get().NowNs() + options_.failover_retry_ns;
    if (at >= call->deadline_ns) {
      call->done(why, {});
      return;
    }
    {
      MutexLock lock(&retry_mu_);
      if (!retry_stop_) {
        if (!retry_thread_.joinable()) retry_thread_ = std::thread([this] { RetryLoop(); });
        retries_.emplace(at, std::move(call));
        failover_retries_.fetch_add(1, std::memory_order_relaxed);
        return;
      }
    }
    call->done(absl::CancelledError("channel closed"), {});
  }

  void StartRetryThread() {
    MutexLock lock(&retry_mu_);
    if (!retry_stop_ && !retry_thread_.joinable()) {
      retry_thread_ = std::thread([this] { RetryLoop(); });
    }
  }

  // The retry thread's check for a server that went silent (see the file
  // comment): only acts when resolve() names another address.
  void Probe() {
    ConnPtr c;
    {
      MutexLock lock(&mu_);
      c = conn_;
    }
    const uint64_t done = completions_.load(std::memory_order_relaxed);
    const bool progress = done != probe_completions_;
    probe_completions_ = done;
    if (c == nullptr || c->broken() || c->pending() == 0 || progress) return;
    absl::StatusOr<std::string> a = options_.resolve();
    if (!a.ok()) return;
    MutexLock lock(&mu_);
    if (*a == address_ || conn_ != c) return;
    address_ = *a;
    conn_->Break(absl::UnavailableError(absl::StrCat("no answer for ",
                                                     options_.failover_probe_ns / 1'000'000,
                                                     " ms and the server moved to ", address_)));
    last_attempt_ns_ = 0;  // connect there now
    silent_moves_.fetch_add(1, std::memory_order_relaxed);
  }

  void RetryLoop() {
    MutexLock lock(&retry_mu_);
    int64_t next_probe = MonotonicClock::Get().NowNs() + options_.failover_probe_ns;
    for (;;) {
      if (retry_stop_) return;
      const int64_t now = MonotonicClock::Get().NowNs();
      if (now >= next_probe) {
        retry_mu_.Unlock();
        Probe();
        retry_mu_.Lock();
        next_probe = MonotonicClock::Get().NowNs() + options_.failover_probe_ns;
        continue;
      }
      if (retries_.empty() || retries_.begin()->first > now) {
        const int64_t wait =
            std::min(next_probe, retries_.empty() ? next_probe : retries_.begin()->first) - now;
        retry_mu_.AwaitWithTimeout(Condition(&retry_stop_), absl::Nanoseconds(wait));
        continue;
      }
      std::shared_ptr<FailoverCall> call = std::move(retries_.begin()->second);
      retries_.erase(retries_.begin());
      retry_mu_.Unlock();
      Attempt(std::move(call), /*re_resolve=*/true);
      retry_mu_.Lock();
    }
  }

  void StopRetries() {
    std::multimap<int64_t, std::shared_ptr<FailoverCall>> left;
    {
      MutexLock lock(&retry_mu_);
      retry_stop_ = true;
    }
    if (retry_thread_.joinable()) retry_thread_.join();
    {
      MutexLock lock(&retry_mu_);
      left.swap(retries_);
    }
    for (auto& [at, call] : left) call->done(absl::CancelledError("channel closed"), {});
  }

  // The live connection, reconnecting if it broke (see the file comment).
  // `re_resolve` (failover): ask resolve() where the server is now, and move
  // there if it moved.
  absl::StatusOr<ConnPtr> Connection(int64_t timeout_ns, bool re_resolve = false) {
    if (re_resolve && options_.resolve != nullptr) {
      absl::StatusOr<std::string> a = options_.resolve();
      if (!a.ok()) return absl::UnavailableError(a.status().message());
      MutexLock lock(&mu_);
      if (*a != address_) {
        address_ = *a;
        if (conn_ != nullptr) {
          conn_->Break(absl::UnavailableError(absl::StrCat("the server moved to ", address_)));
        }
        last_attempt_ns_ = 0;  // connect there now
      }
    }
    absl::Status last;
    {
      MutexLock lock(&mu_);
      if (conn_ != nullptr && !conn_->broken()) return conn_;
      const int64_t now = MonotonicClock::Get().NowNs();
      if (reconnecting_ || now - last_attempt_ns_ < options_.reconnect_backoff_ns) {
        // A broken connection answers with its own status (why it broke).
        if (conn_ != nullptr) return conn_;
        return absl::UnavailableError(
            absl::StrCat("not connected to ", address_, ": ", last_error_.ToString()));
      }
      reconnecting_ = true;
      last_attempt_ns_ = now;
    }
    auto fd = rpc_internal::ConnectAndAuthenticate(
        address(), std::min(timeout_ns, options_.connect_timeout_ns), options_.auth.get());
    MutexLock lock(&mu_);
    reconnecting_ = false;
    if (!fd.ok()) {
      last_error_ = fd.status();
      // A refused authentication keeps its code: retrying will not help.
      return absl::Status(
          fd.status().code() == absl::StatusCode::kUnauthenticated
              ? absl::StatusCode::kUnauthenticated
              : absl::StatusCode::kUnavailable,
          absl::StrCat("reconnect to ", address_, " failed: ", fd.status().ToString()));
    }
    // The old connection may be destroyed only off its own I/O thread (this
    // call might run in one of its callbacks): keep it until it has exited.
    if (conn_ != nullptr) retired_.push_back(std::move(conn_));
    std::erase_if(retired_, [](const ConnPtr& c) { return c->exited() && c.use_count() == 1; });
    conn_ = MakeConnection(std::move(*fd));
    return conn_;
  }

  std::string address_ ABSL_GUARDED_BY(mu_);  // changes only with options_.resolve
  const TcpChannelOptions options_;
  mutable rpc_internal::MetricsTable metrics_;
  mutable Mutex mu_;
  ConnPtr conn_ ABSL_GUARDED_BY(mu_);
  std::vector<ConnPtr> retired_ ABSL_GUARDED_BY(mu_);
  bool reconnecting_ ABSL_GUARDED_BY(mu_) = false;
  int64_t last_attempt_ns_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  // Failover retries (options_.resolve).
  Mutex retry_mu_;
  std::multimap<int64_t, std::shared_ptr<FailoverCall>> retries_ ABSL_GUARDED_BY(retry_mu_);
  bool retry_stop_ ABSL_GUARDED_BY(retry_mu_) = false;
  std::thread retry_thread_;
  std::atomic<uint64_t> failover_retries_{0};
  std::atomic<uint64_t> completions_{0};  // answers to failover calls (Probe)
  uint64_t probe_completions_ = 0;        // retry thread only
  std::atomic<uint64_t> silent_moves_{0};
};

static_assert(RpcChannel<TcpChannel>);

}  // namespace mooncake::rpc

#endif  // MOONCAKE_STORE_RPC_TCP_CHANNEL_H_
