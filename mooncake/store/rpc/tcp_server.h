// RpcServer: serves a ServiceRegistry over TCP (frames of frame.h).
//
//   ServiceRegistry registry;
//   registry.Register<EchoMethod>(...);
//   RpcServer server(&registry, {.port = 0});
//   RETURN_IF_ERROR(server.Start());
//   ... connect a TcpChannel to server.address() ...
//   server.Stop();   // or let the destructor do it
//
// Threads: `io_threads` event loops (epoll, level-triggered); loop 0 also
// accepts and deals new connections round-robin. A loop reads what a socket
// has, decodes every complete frame and either runs the handler inline
// (ExecutionMode::kInline, and kInlineFirst unless it defers) or hands it to
// the `worker_threads` pool through a bounded queue of
// `worker_queue_capacity` calls. Responses of one read are
// written together (pipelined requests cost one send).
//
// Bounds and failure behaviour:
//   - a request whose method has no handler: UNIMPLEMENTED response;
//   - a full worker queue: UNAVAILABLE response ("server overloaded"), the
//     request is not run;
//   - a request whose deadline (sent in the frame) passed while it was queued:
//     DEADLINE_EXCEEDED response, not run;
//   - any malformed frame (bad magic, checksum, version, reserved bits, over
//     `max_payload_bytes`, a response frame): one connection-error frame
//     (request id 0) saying why, then the connection is half-closed, drained
//     for at most `linger_ms`, and closed. Other connections are unaffected.
//   - more than `max_connections` connections: the newcomer gets a
//     RESOURCE_EXHAUSTED connection error and is closed;
//   - a peer that does not read its responses: once `max_output_bytes` are
//     unsent, the server stops reading that peer's requests until it catches
//     up (memory per connection stays bounded).
// Async handlers (ServiceRegistry::RegisterAsync) start like the others
// (kInline on the I/O thread, kWorker on the pool, after the queue's deadline
// check) and return without an answer; the thread that completes the
// Responder serializes the answer and writes it to the connection (or queues
// it behind a cork or a slow reader, exactly like a worker's answer).
// Responses of one connection may so leave in any order; callers match them
// by request id. An answer for a connection that has closed, or a server that
// has stopped, is dropped: the Responder holds the connection by shared_ptr,
// and a closed connection ignores sends. The server does not bound the async
// calls outstanding; the handler's own queue does (a caller bounds its calls
// in flight, too: TcpChannel's max_pending_calls).
// Metrics: per method (service.h), plus mooncake_rpc_server_connections
// (gauge), _protocol_errors_total, _overloaded_total, _read_pauses_total and
// _deferred_total (kInlineFirst calls moved to the pool, service.h).
//
// Thread-safety: Start, Stop and the destructor from one owning thread;
// address()/port() from any thread after Start. Stop drops queued calls (their
// connections are closed first, so their callers see UNAVAILABLE) and waits
// for running handlers to return. It does not wait for async calls still
// outstanding: their callers see UNAVAILABLE (connection closed) at once, and
// their later completions, from any thread, are dropped (metrics still
// recorded; the registry must outlive them).
#ifndef MOONCAKE_STORE_RPC_TCP_SERVER_H_
#define MOONCAKE_STORE_RPC_TCP_SERVER_H_

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/tcp_listen.h"
#include "mooncake/store/rpc/frame.h"
#include "mooncake/store/rpc/internal/async_call.h"
#include "mooncake/store/rpc/internal/auth_handshake.h"
#include "mooncake/store/rpc/internal/server_connection.h"
#include "mooncake/store/rpc/internal/socket.h"
#include "mooncake/store/rpc/internal/worker_pool.h"
#include "mooncake/store/rpc/service.h"

namespace mooncake::rpc {

struct RpcServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port (see port())
  size_t io_threads = 1;
  size_t worker_threads = 2;
  size_t worker_queue_capacity = 4096;
  uint32_t max_payload_bytes = kDefaultMaxPayloadBytes;  // requests; <= kMaxPayloadBytesCeiling
  size_t max_connections = 1024;
  size_t max_output_bytes = size_t{64} << 20;  // unsent bytes per connection before pausing reads
  int64_t linger_ms = 1000;                    // drain time after a protocol error
  // Authentication (base/auth.h, internal/auth_handshake.h): with
  // credentials, a connection must prove a principal they list before any
  // call; its calls then carry it (ServerCallContext::principal) through the
  // registry's request guard. Null: no authentication (every peer served).
  std::shared_ptr<const auth::Credentials> auth;
  // A connection that has not authenticated by then is closed.
  int64_t auth_timeout_ms = 5000;
};

}  // namespace mooncake::rpc

namespace mooncake::rpc_internal {

struct ServerShared;

// One event loop thread and the connections it owns.
class IoLoop {
 public:
  IoLoop(ServerShared* shared, size_t index);
  ~IoLoop();
  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  void Stop();
  // Any thread: hand an accepted socket to this loop.
  void Adopt(UniqueFd fd, std::string peer);
  int epoll_fd() const { return epoll_fd_.get(); }

 private:
  using ConnPtr = std::shared_ptr<ServerConnection>;
  void Run();
  void AdoptPending();
  void AcceptAll();
  void OnEvent(uint64_t id, uint32_t events);
  void ReadAndServe(const ConnPtr& conn);
  bool ServeFrames(const ConnPtr& conn);
  void HandleRequest(const ConnPtr& conn, const rpc::Frame& frame, int64_t now_ns);
  void DrainInput(const ConnPtr& conn);
  void CloseConn(uint64_t id);
  void ExpireDraining(int64_t now_ns);
  // A frame of a connection that has not authenticated yet; false when it
  // failed (the connection is then draining).
  bool ServeAuthFrame(const ConnPtr& conn, const rpc::Frame& frame, int64_t now_ns);
  void RefuseAuth(const ConnPtr& conn, const absl::Status& why, int64_t now_ns);
  void ExpireAuth(int64_t now_ns);

  ServerShared* const shared_;
  const size_t index_;
  UniqueFd epoll_fd_;
  EventFd wake_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  Mutex adopt_mu_;
  std::vector<std::pair<UniqueFd, std::string>> adopt_ ABSL_GUARDED_BY(adopt_mu_);
  absl::flat_hash_map<uint64_t, ConnPtr> conns_;              // loop thread only
  absl::flat_hash_map<uint64_t, int64_t> draining_until_ns_;  // loop thread only
  absl::flat_hash_map<uint64_t, int64_t> auth_until_ns_;      // loop thread only
};

// Where an async call's answer goes on a TCP server: the connection that
// carried its request (kept alive by this call; SendResponse/SendError are
// thread-safe and no-ops once it is closed).
class ConnectionCall final : public AsyncCall {
 public:
  ConnectionCall(std::shared_ptr<ServerConnection> conn, const rpc::FrameHeader& response)
      : conn_(std::move(conn)), response_(response) {
    MC_DASSERT(conn_ != nullptr && response_.kind == rpc::FrameKind::kResponse, "bad call");
  }

 private:
  void Deliver(const absl::Status& status, std::string_view payload) override {
    if (status.ok()) {
      conn_->SendResponse(response_, payload);
    } else {
      conn_->SendError(response_, status);
    }
  }

  const std::shared_ptr<ServerConnection> conn_;
  const rpc::FrameHeader response_;
};

// State every loop shares.
struct ServerShared {
  rpc::ServiceRegistry* registry = nullptr;
  rpc::RpcServerOptions options;
  UniqueFd listen_fd;
  std::unique_ptr<WorkerPool> workers;
  std::vector<std::unique_ptr<IoLoop>> loops;
  std::atomic<uint64_t> next_conn_id{1};
  std::atomic<size_t> next_loop{0};
  std::atomic<int64_t> connections{0};
  Gauge* connections_gauge = nullptr;
  Counter* protocol_errors = nullptr;
  Counter* overloaded = nullptr;
  Counter* read_pauses = nullptr;
  Counter* deferred = nullptr;
  Counter* auth_failures = nullptr;
};

}  // namespace mooncake::rpc_internal

namespace mooncake::rpc {

class RpcServer {
 public:
  // `registry` must outlive the server; Start freezes it.
  RpcServer(ServiceRegistry* registry, RpcServerOptions options) {
    MC_ASSERT(registry != nullptr, "a server needs a registry");
    shared_.registry = registry;
    shared_.options = std::move(options);
  }
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;
  ~RpcServer() { Stop(); }

  // Binds, listens and starts the threads. Errors: INVALID_ARGUMENT (bad
  // options or host), ALREADY_EXISTS (port in use), FAILED_PRECONDITION
  // (started twice), others from the socket calls.
  absl::Status Start();

  // Idempotent.
  void Stop();

  uint16_t port() const { return port_; }
  // "host:port", an IPv6 host in brackets ("[::1]:50051"), as Connect takes it.
  std::string address() const { return JoinHostPort(shared_.options.host, port_); }
  MetricsRegistry* metrics() const { return shared_.registry->metrics(); }

 private:
  absl::Status CheckOptions() const;

  rpc_internal::ServerShared shared_;
  uint16_t port_ = 0;
  bool started_ = false;
  bool stopped_ = false;
};

// ---- Implementation ------------------------------------------------------------

}  // namespace mooncake::rpc

namespace mooncake::rpc_internal {

inline IoLoop::IoLoop(ServerShared* shared, size_t index)
    : shared_(shared), index_(index), epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)) {
  MC_ASSERT(epoll_fd_.valid(), "epoll_create1 failed");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // connection ids start at 1; 0 is the wake fd
  MC_ASSERT(::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, wake_.fd(), &ev) == 0,
            "epoll_ctl(wake) failed");
}

inline IoLoop::~IoLoop() { Stop(); }

inline void IoLoop::Stop() {
  stop_.store(true, std::memory_order_release);
  wake_.Notify();
  if (thread_.joinable()) thread_.join();
}

inline void IoLoop::Adopt(UniqueFd fd, std::string peer) {
  {
    MutexLock lock(&adopt_mu_);
    adopt_.emplace_back(std::move(fd), std::move(peer));
  }
  wake_.Notify();
}

inline void IoLoop::AdoptPending() {
  std::vector<std::pair<UniqueFd, std::string>> adopted;
  {
    MutexLock lock(&adopt_mu_);
    adopted.swap(adopt_);
  }
  for (auto& [fd, peer] : adopted) {
    const uint64_t id = shared_->next_conn_id.fetch_add(1, std::memory_order_relaxed);
    auto conn = std::make_shared<ServerConnection>(
        id, std::move(fd), std::move(peer), epoll_fd_.get(), shared_->options.max_payload_bytes,
        shared_->options.max_output_bytes, shared_->read_pauses);
    if (!conn->Register().ok()) {
      conn->Close();
      shared_->connections.fetch_sub(1, std::memory_order_relaxed);
      continue;
    }
    if (shared_->options.auth != nullptr) {
      auth_until_ns_[id] =
          MonotonicClock::Get().NowNs() + shared_->options.auth_timeout_ms * 1'000'000;
    }
    conns_.emplace(id, std::move(conn));
  }
}

inline void IoLoop::AcceptAll() {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    const int fd = ::accept4(shared_->listen_fd.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN, or EMFILE & co: retried on the next readiness
    }
    UniqueFd owned(fd);
    SetNoDelay(fd);
    const int64_t n = shared_->connections.fetch_add(1, std::memory_order_relaxed) + 1;
    if (static_cast<size_t>(n) > shared_->options.max_connections) {
      shared_->connections.fetch_sub(1, std::memory_order_relaxed);
      rpc::FrameHeader h;
      h.kind = rpc::FrameKind::kResponse;
      h.code = absl::StatusCode::kResourceExhausted;
      const std::string frame =
          rpc::EncodeFrame(h, absl::StrCat("server has its maximum of ",
                                           shared_->options.max_connections, " connections"));
      (void)!::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      continue;
    }
    shared_->connections_gauge->Set(static_cast<double>(n));
    const size_t target =
        shared_->next_loop.fetch_add(1, std::memory_order_relaxed) % shared_->loops.size();
    shared_->loops[target]->Adopt(std::move(owned), SockaddrToString(ss));
  }
}

inline void IoLoop::Run() {
  constexpr int kMaxEvents = 128;
  epoll_event events[kMaxEvents];
  while (!stop_.load(std::memory_order_acquire)) {
    const int timeout_ms = draining_until_ns_.empty() && auth_until_ns_.empty() ? -1 : 50;
    const int n = ::epoll_wait(epoll_fd_.get(), events, kMaxEvents, timeout_ms);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == 0) {
        wake_.Drain();
        AdoptPending();
      } else if (id == UINT64_MAX) {
        AcceptAll();
      } else {
        OnEvent(id, events[i].events);
      }
    }
    if (!draining_until_ns_.empty()) ExpireDraining(MonotonicClock::Get().NowNs());
    if (!auth_until_ns_.empty()) ExpireAuth(MonotonicClock::Get().NowNs());
  }
  AdoptPending();
  for (auto& [id, conn] : conns_) conn->Close();
  shared_->connections.fetch_sub(static_cast<int64_t>(conns_.size()), std::memory_order_relaxed);
  conns_.clear();
  draining_until_ns_.clear();
  auth_until_ns_.clear();
}

inline void IoLoop::OnEvent(uint64_t id, uint32_t events) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;  // closed earlier in this batch
  ConnPtr conn = it->second;
  if (events & EPOLLOUT) {
    const bool was_paused = conn->ReadPaused();
    conn->OnWritable();
    if (was_paused && !conn->ReadPaused() && !conn->draining() &&
        conn->decoder().BufferedBytes() > 0) {
      // Frames read before the pause: serve them now, the socket may have
      // nothing new to wake us for.
      conn->Cork();
      ServeFrames(conn);
      conn->Uncork();
    }
  }
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    if (conn->draining()) {
      DrainInput(conn);
    } else {
      ReadAndServe(conn);
    }
  }
}

// Reads until the socket is empty (bounded per wake for fairness), serving
// complete frames after each read so the buffer holds at most one frame.
inline void IoLoop::ReadAndServe(const ConnPtr& conn) {
  constexpr size_t kReadChunk = 64 << 10;
  constexpr int kMaxReadsPerWake = 16;
  conn->Cork();
  bool close = false;
  for (int i = 0; i < kMaxReadsPerWake; ++i) {
    rpc::FrameDecoder& dec = conn->decoder();
    std::span<uint8_t> dst = dec.WritableSpan(std::max(kReadChunk, dec.MissingBytes()));
    const ssize_t r = ::recv(conn->fd(), dst.data(), dst.size(), 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (r <= 0) {
      close = true;  // EOF or a socket error: nobody to answer
      break;
    }
    dec.Commit(static_cast<size_t>(r));
    if (!ServeFrames(conn)) break;                   // protocol error: now draining
    if (static_cast<size_t>(r) < dst.size()) break;  // socket drained
    if (conn->ReadPaused()) break;
  }
  conn->Uncork();
  if (close) CloseConn(conn->id());
}

// Returns false after a protocol error (the connection is then draining).
inline bool IoLoop::ServeFrames(const ConnPtr& conn) {
  const int64_t now_ns = MonotonicClock::Get().NowNs();
  for (;;) {
    // Backpressure: leave the rest buffered until the peer reads (OnEvent
    // resumes when the output drains).
    if (conn->ReadPaused()) return true;
    auto next = conn->decoder().Next();
    if (!next.ok()) {
      shared_->protocol_errors->Increment();
      conn->FailAndDrain(absl::Status(
          next.status().code(), absl::StrCat("closing connection: ", next.status().message())));
      draining_until_ns_[conn->id()] = now_ns + shared_->options.linger_ms * 1000000;
      return false;
    }
    if (!next->has_value()) return true;
    const rpc::Frame& frame = **next;
    if (frame.header.kind != rpc::FrameKind::kRequest) {
      shared_->protocol_errors->Increment();
      conn->FailAndDrain(absl::InvalidArgumentError(
          "closing connection: a client sent a response frame (request id " +
          std::to_string(frame.header.request_id) + ")"));
      draining_until_ns_[conn->id()] = now_ns + shared_->options.linger_ms * 1000000;
      return false;
    }
    if (shared_->options.auth != nullptr && !conn->authenticated()) {
      if (!ServeAuthFrame(conn, frame, now_ns)) return false;
      continue;
    }
    HandleRequest(conn, frame, now_ns);
  }
}

inline void IoLoop::RefuseAuth(const ConnPtr& conn, const absl::Status& why, int64_t now_ns) {
  shared_->auth_failures->Increment();
  auth_until_ns_.erase(conn->id());
  conn->FailAndDrain(why);
  draining_until_ns_[conn->id()] = now_ns + shared_->options.linger_ms * 1000000;
}

inline bool IoLoop::ServeAuthFrame(const ConnPtr& conn, const rpc::Frame& frame, int64_t now_ns) {
  const rpc::FrameHeader& h = frame.header;
  rpc::FrameHeader resp;
  resp.kind = rpc::FrameKind::kResponse;
  resp.method_id = h.method_id;
  resp.request_id = h.request_id;
  if (h.method_id == rpc::kAuthHelloMethodId && conn->handshake() == nullptr) {
    conn->StartHandshake(shared_->options.auth, rpc::kAuthProtocol);
    absl::StatusOr<std::string> challenge = conn->handshake()->OnHello(frame.payload);
    if (!challenge.ok()) {
      RefuseAuth(conn, challenge.status(), now_ns);
      return false;
    }
    conn->SendResponse(resp, *challenge);
    return true;
  }
  if (h.method_id == rpc::kAuthProofMethodId && conn->handshake() != nullptr) {
    auth::Principal who;
    absl::StatusOr<std::string> ok = conn->handshake()->OnProof(frame.payload, &who);
    if (!ok.ok()) {
      RefuseAuth(conn, ok.status(), now_ns);
      return false;
    }
    conn->Authenticated(std::move(who));
    auth_until_ns_.erase(conn->id());
    conn->SendResponse(resp, *ok);
    return true;
  }
  RefuseAuth(conn,
             absl::UnauthenticatedError(
                 absl::StrCat("authentication required: this server has an auth token file "
                              "(--auth_token_file); connect with a token it lists (method id ",
                              h.method_id, " before the handshake)")),
             now_ns);
  return false;
}

inline void IoLoop::ExpireAuth(int64_t now_ns) {
  std::vector<uint64_t> expired;
  for (const auto& [id, until] : auth_until_ns_) {
    if (now_ns >= until) expired.push_back(id);
  }
  for (uint64_t id : expired) {
    auth_until_ns_.erase(id);
    auto it = conns_.find(id);
    if (it == conns_.end() || it->second->authenticated()) continue;
    RefuseAuth(it->second,
               absl::UnauthenticatedError(absl::StrCat("did not authenticate within ",
                                                       shared_->options.auth_timeout_ms, " ms")),
               now_ns);
  }
}

inline void IoLoop::HandleRequest(const ConnPtr& conn, const rpc::Frame& frame, int64_t now_ns) {
  rpc::ServiceRegistry& registry = *shared_->registry;
  const rpc::FrameHeader& h = frame.header;
  const rpc::Handler* handler = registry.Find(h.method_id);
  if (handler == nullptr) {
    // One "unknown" series for every unknown id: ids come from the peer and
    // must not mint metric series.
    registry.RecordRejected(0, "unknown", absl::StatusCode::kUnimplemented, now_ns);
    conn->SendError(h, absl::UnimplementedError(absl::StrCat("no handler for method id ",
                                                             h.method_id, " on this server")));
    return;
  }
  rpc::ServerCallContext ctx;
  ctx.request_id = h.request_id;
  ctx.method_id = h.method_id;
  ctx.received_ns = now_ns;
  ctx.deadline_ns = h.timeout_us == 0 ? 0 : now_ns + int64_t{h.timeout_us} * 1000;
  ctx.peer = conn->peer();
  ctx.principal = conn->principal();
  rpc::FrameHeader resp;
  resp.kind = rpc::FrameKind::kResponse;
  resp.method_id = h.method_id;
  resp.request_id = h.request_id;
  if (handler->options.mode != rpc::ExecutionMode::kWorker) {
    if (handler->async) {
      registry.InvokeAsync(*handler, frame.payload, ctx,
                           std::make_unique<ConnectionCall>(conn, resp));
      return;
    }
    std::string out;
    ctx.may_defer = handler->options.mode == rpc::ExecutionMode::kInlineFirst;
    const absl::Status s = registry.Invoke(*handler, frame.payload, ctx, &out);
    if (!ctx.may_defer || !rpc::IsDeferToWorker(s)) {
      if (s.ok()) {
        conn->SendResponse(resp, out);
      } else {
        conn->SendError(h, s);
      }
      return;
    }
    shared_->deferred->Increment();
    ctx.may_defer = false;
  }
  const bool queued = shared_->workers->TrySubmit([conn, handler, &registry, ctx, resp,
                                                   payload = std::string(frame.payload)]() mutable {
    if (ctx.deadline_ns != 0 && MonotonicClock::Get().NowNs() > ctx.deadline_ns) {
      registry.RecordRejected(handler->method_id, handler->name,
                              absl::StatusCode::kDeadlineExceeded, ctx.received_ns);
      conn->SendError(resp, absl::DeadlineExceededError(
                                absl::StrCat(handler->name, " expired in the server's queue")));
      return;
    }
    if (handler->async) {
      registry.InvokeAsync(*handler, payload, ctx, std::make_unique<ConnectionCall>(conn, resp));
      return;
    }
    std::string out;
    const absl::Status s = registry.Invoke(*handler, payload, ctx, &out);
    if (s.ok()) {
      conn->SendResponse(resp, out);
    } else {
      conn->SendError(resp, s);
    }
  });
  if (!queued) {
    shared_->overloaded->Increment();
    registry.RecordRejected(handler->method_id, handler->name, absl::StatusCode::kUnavailable,
                            now_ns);
    conn->SendError(h, absl::UnavailableError(absl::StrCat(
                           "server overloaded: ", shared_->workers->capacity(),
                           " calls already queued for its handler threads; retry later")));
  }
}

inline void IoLoop::DrainInput(const ConnPtr& conn) {
  char sink[16 << 10];
  for (int i = 0; i < 64; ++i) {
    const ssize_t r = ::recv(conn->fd(), sink, sizeof(sink), 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (r <= 0) break;
  }
  // EOF or error: the peer has our error frame or is gone. (A peer still
  // flooding after 64 reads is cut off by the linger timer.)
  if (conn->UnsentBytes() == 0) CloseConn(conn->id());
}

inline void IoLoop::ExpireDraining(int64_t now_ns) {
  std::vector<uint64_t> expired;
  for (const auto& [id, until] : draining_until_ns_) {
    if (now_ns >= until) expired.push_back(id);
  }
  for (uint64_t id : expired) CloseConn(id);
}

inline void IoLoop::CloseConn(uint64_t id) {
  draining_until_ns_.erase(id);
  auth_until_ns_.erase(id);
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  it->second->Close();
  conns_.erase(it);
  const int64_t n = shared_->connections.fetch_sub(1, std::memory_order_relaxed) - 1;
  shared_->connections_gauge->Set(static_cast<double>(n));
}

}  // namespace mooncake::rpc_internal

namespace mooncake::rpc {

inline absl::Status RpcServer::CheckOptions() const {
  const RpcServerOptions& o = shared_.options;
  if (o.io_threads < 1 || o.io_threads > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("io_threads must be in [1, 64], got ", o.io_threads));
  }
  if (o.worker_threads < 1 || o.worker_threads > 1024 || o.worker_queue_capacity < 1) {
    return absl::InvalidArgumentError(
        "worker_threads must be in [1, 1024] and worker_queue_capacity >= 1");
  }
  if (o.max_payload_bytes > kMaxPayloadBytesCeiling) {
    return absl::InvalidArgumentError(absl::StrCat("max_payload_bytes ", o.max_payload_bytes,
                                                   " exceeds the format's ceiling of ",
                                                   kMaxPayloadBytesCeiling));
  }
  if (o.auth != nullptr && o.auth_timeout_ms < 1) {
    return absl::InvalidArgumentError("auth_timeout_ms must be positive");
  }
  if (o.max_connections < 1 || o.max_output_bytes < 1 || o.linger_ms < 0) {
    return absl::InvalidArgumentError(
        "max_connections and max_output_bytes must be positive, linger_ms >= 0");
  }
  return absl::OkStatus();
}

inline absl::Status RpcServer::Start() {
  if (started_) return absl::FailedPreconditionError("RpcServer::Start called twice");
  if (absl::Status s = CheckOptions(); !s.ok()) return s;
  auto listener = ListenTcp({shared_.options.host, shared_.options.port},
                            {.backlog = 1024, .resolve_names = true});
  if (!listener.ok()) return listener.status();
  port_ = listener->port;
  shared_.listen_fd = std::move(listener->fd);

  MetricsRegistry* m = shared_.registry->metrics();
  auto gauge = m->GetGauge("mooncake_rpc_server_connections", "Open RPC server connections.");
  auto proto = m->GetCounter("mooncake_rpc_server_protocol_errors_total",
                             "Connections closed for a malformed frame.");
  auto over = m->GetCounter("mooncake_rpc_server_overloaded_total",
                            "Requests refused because the handler queue was full.");
  if (!gauge.ok()) return gauge.status();
  if (!proto.ok()) return proto.status();
  auto pauses = m->GetCounter("mooncake_rpc_server_read_pauses_total",
                              "Times a connection's reads paused: max_output_bytes unsent.");
  auto deferred = m->GetCounter("mooncake_rpc_server_deferred_total",
                                "kInlineFirst calls the I/O thread handed to the handler pool.");
  if (!over.ok()) return over.status();
  if (!pauses.ok()) return pauses.status();
  if (!deferred.ok()) return deferred.status();
  auto auth_failures =
      m->GetCounter("mooncake_rpc_server_auth_failures_total",
                    "Connections refused: no, wrong or late authentication (auth token file set).");
  if (!auth_failures.ok()) return auth_failures.status();
  shared_.auth_failures = *auth_failures;
  shared_.read_pauses = *pauses;
  shared_.deferred = *deferred;
  shared_.connections_gauge = *gauge;
  shared_.protocol_errors = *proto;
  shared_.overloaded = *over;

  shared_.registry->Freeze();
  shared_.workers = std::make_unique<rpc_internal::WorkerPool>(
      shared_.options.worker_threads, shared_.options.worker_queue_capacity);
  for (size_t i = 0; i < shared_.options.io_threads; ++i) {
    shared_.loops.push_back(std::make_unique<rpc_internal::IoLoop>(&shared_, i));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = UINT64_MAX;  // the listening socket
  if (::epoll_ctl(shared_.loops[0]->epoll_fd(), EPOLL_CTL_ADD, shared_.listen_fd.get(), &ev) != 0) {
    return ErrnoToStatus(errno, "epoll_ctl(listen)");
  }
  for (auto& loop : shared_.loops) loop->Start();
  started_ = true;
  return absl::OkStatus();
}

inline void RpcServer::Stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  // Loops first: they close every connection, so callers of queued or
  // running calls see UNAVAILABLE at once; then the workers finish.
  for (auto& loop : shared_.loops) loop->Stop();
  shared_.listen_fd.Reset();
  shared_.workers->Stop();
  shared_.loops.clear();
}

}  // namespace mooncake::rpc

#endif  // MOONCAKE_STORE_RPC_TCP_SERVER_H_
