// HttpServer: a small HTTP/1.1 server for a node's operational endpoints
// (/metrics, /health) and the transfer-engine metadata store (/metadata). Not
// a general web server: one request per connection (answers carry
// "Connection: close"); GET and HEAD everywhere, PUT and DELETE only on the
// paths registered with HttpRoute::writes, whose requests may carry a
// Content-Length body of at most HttpRoute::max_body_bytes (other paths
// ignore bodies); POST alone on HttpRoute::action paths.
//
//   HttpServer http({.host = "127.0.0.1", .port = 0});
//   RETURN_IF_ERROR(http.Handle("/health", [](const HttpRequest&) {
//     return HttpResponse{.status = 200, .body = "ok\n"};
//   }));
//   RETURN_IF_ERROR(http.Start());   // http.address() is the bound address
//   ...
//   http.Stop();                     // or the destructor
//
// One thread runs a poll() loop over the listening socket and at most
// `max_connections` connections; handlers run on it, so they must be short
// (rendering metrics is). Answers:
//   200.. what the handler returns
//   400   malformed request head            405  a method the path does not take
//   404   no handler for the path           408  no progress for idle_timeout_ms
//   411   PUT without Content-Length        413  body over the path's max_body_bytes
//   431   head over limits.max_head_bytes   501  Transfer-Encoding (chunked) body
//   503   over max_connections, none idle
// A request with "Expect: 100-continue" whose body will be read gets
// "100 Continue" first. Memory: a connection holds at most its head, its body
// and one read (64 KiB), so at most max_connections x (max_head_bytes +
// max_body_bytes + 64 KiB) for all.
// A newcomer over max_connections takes the slot of the connection that has
// waited longest (at least idle_evict_ms) for its head, or since the last
// byte of its body, which gets 408.
// After answering, the server half-closes and drains what the peer still
// sends (up to linger_ms) before closing, so the peer reads the whole answer.
//
// Thread-safety: Handle before Start; Start, Stop and the destructor from one
// owning thread; address(), port() and stats() from any thread after Start.
#ifndef MOONCAKE_STORE_NODE_HTTP_SERVER_H_
#define MOONCAKE_STORE_NODE_HTTP_SERVER_H_

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/tcp_listen.h"
#include "mooncake/store/node/http_request.h"

namespace mooncake::node {

struct HttpResponse {
  int status = 200;
  std::string body;
  std::string content_type = "text/plain; charset=utf-8";
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

// What a path takes besides GET and HEAD.
struct HttpRoute {
  bool writes = false;        // PUT and DELETE too, with a Content-Length body
  size_t max_body_bytes = 0;  // larger bodies: 413 (writes only)
  // POST only, body ignored: an action (GET and HEAD answer 405, so a
  // crawler or a browser's prefetch never triggers it). Not with writes.
  bool action = false;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port
  size_t max_connections = 32;
  int64_t idle_timeout_ms = 5'000;  // to send a complete request head
  // Over max_connections, a connection waiting this long for its head makes
  // room for the newcomer (408); newer ones do not (the newcomer gets 503).
  int64_t idle_evict_ms = 250;
  int64_t linger_ms = 1'000;  // draining the peer after answering
  HttpLimits limits;
};

struct HttpServerStats {
  uint64_t requests = 0;  // answered with the handler's status
  uint64_t rejected = 0;  // answered 400/404/405/408/431/503
};

inline std::string_view HttpReason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 507:
      return "Insufficient Storage";
    default:
      return "Status";
  }
}

// `allow`: the methods an Allow header lists ("" for none). `head`: the
// answer to a HEAD request (the GET answer's head: its Content-Length, no
// body).
inline std::string FormatHttpResponse(const HttpResponse& r, std::string_view allow = {},
                                      bool head = false) {
  std::string out = absl::StrCat("HTTP/1.1 ", r.status, " ", AbslView(HttpReason(r.status)),
                                 "\r\nContent-Type: ", r.content_type,
                                 "\r\nContent-Length: ", r.body.size(), "\r\n");
  if (!allow.empty()) absl::StrAppend(&out, "Allow: ", AbslView(allow), "\r\n");
  absl::StrAppend(&out, "Connection: close\r\n\r\n");
  if (!head) out += r.body;
  return out;
}

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options) : options_(std::move(options)) {}
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  ~HttpServer() { Stop(); }

  // Serves `path` (exact match, query ignored) with GET and HEAD, and PUT and
  // DELETE too when route.writes. Errors: INVALID_ARGUMENT (path not starting
  // with '/'), ALREADY_EXISTS, FAILED_PRECONDITION (started).
  absl::Status Handle(std::string path, HttpHandler handler, HttpRoute route = {}) {
    if (started_) return absl::FailedPreconditionError("HttpServer::Handle after Start");
    if (path.empty() || path.front() != '/') {
      return absl::InvalidArgumentError(absl::StrCat("HTTP path \"", path, "\" must start with /"));
    }
    MC_ASSERT(handler != nullptr, "a null HTTP handler");
    MC_ASSERT(route.writes || route.max_body_bytes == 0, "a body limit on a read-only path");
    MC_ASSERT(!(route.action && route.writes), "an action path takes POST only");
    if (!handlers_.emplace(path, Route{std::move(handler), route}).second) {
      return absl::AlreadyExistsError(absl::StrCat("HTTP path ", path, " registered twice"));
    }
    return absl::OkStatus();
  }

  // Binds and starts serving. Errors: those of ListenTcp (ALREADY_EXISTS for
  // a port in use), INVALID_ARGUMENT (options), FAILED_PRECONDITION (twice).
  absl::Status Start() {
    if (started_) return absl::FailedPreconditionError("HttpServer::Start called twice");
    if (options_.max_connections == 0 || options_.idle_timeout_ms <= 0 || options_.linger_ms < 0 ||
        options_.idle_evict_ms < 0) {
      return absl::InvalidArgumentError(
          "HttpServerOptions: max_connections and idle_timeout_ms > 0, linger_ms and "
          "idle_evict_ms >= 0");
    }
    auto listener =
        ListenTcp({options_.host, options_.port}, {.backlog = 64, .resolve_names = true});
    if (!listener.ok()) return listener.status();
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) {
      return absl::InternalError("HttpServer: pipe2 failed");
    }
    wake_read_.Reset(pipe_fds[0]);
    wake_write_.Reset(pipe_fds[1]);
    listen_ = std::move(listener->fd);
    port_ = listener->port;
    started_ = true;
    thread_ = std::thread([this] { Run(); });
    return absl::OkStatus();
  }

  // Stops accepting, closes every connection and joins the thread.
  // Idempotent.
  void Stop() {
    if (!started_ || stopped_) return;
    stopped_ = true;
    stop_.store(true, std::memory_order_release);
    const char b = 1;
    (void)!::write(wake_write_.get(), &b, 1);
    if (thread_.joinable()) thread_.join();
    listen_.Reset();
  }

  uint16_t port() const { return port_; }
  // "host:port", an IPv6 host in brackets (so "http://" + address() is a URL).
  std::string address() const { return JoinHostPort(options_.host, port_); }
  HttpServerStats stats() const {
    // relaxed: statistics.
    return {requests_.load(std::memory_order_relaxed), rejected_.load(std::memory_order_relaxed)};
  }

 private:
  struct Route {
    HttpHandler handler;
    HttpRoute options;
  };

  struct Conn {
    UniqueFd fd;
    std::string in;
    // Set once the head is in and a body is awaited: `body_bytes` of it.
    std::optional<HttpRequest> request;
    const Route* route = nullptr;
    uint64_t body_bytes = 0;
    std::string out;
    size_t sent = 0;
    bool answered = false;      // `out` holds the whole answer
    bool head = false;          // a HEAD request: the answer's head only
    bool write_closed = false;  // answer sent, SHUT_WR done; draining input
    int64_t deadline_ns = 0;    // idle (reading) or linger (draining) limit
  };

  static constexpr size_t kReadBytes = 64 * 1024;

  void Run() {
    std::vector<std::unique_ptr<Conn>> conns;
    std::vector<pollfd> fds;
    while (!stop_.load(std::memory_order_acquire)) {
      fds.clear();
      fds.push_back({wake_read_.get(), POLLIN, 0});
      fds.push_back({listen_.get(), POLLIN, 0});
      for (const auto& c : conns) {
        const short ev = c->answered && !c->write_closed ? POLLOUT : POLLIN;
        fds.push_back({c->fd.get(), ev, 0});
      }
      const int n = ::poll(fds.data(), fds.size(), 100);
      if (n < 0 && errno != EINTR) break;
      const int64_t now = MonotonicClock::Get().NowNs();
      for (size_t i = 0; i < conns.size(); ++i) {
        const short re = fds[i + 2].revents;
        if (re != 0) Service(*conns[i], re, now);
        if (!conns[i]->answered && now >= conns[i]->deadline_ns) {
          Reject(*conns[i], 408, "the request did not arrive in time\n", now);
        }
      }
      std::erase_if(conns, [&](const std::unique_ptr<Conn>& c) {
        return !c->fd.valid() || (c->write_closed && now >= c->deadline_ns);
      });
      if (n > 0 && (fds[1].revents & POLLIN)) Accept(&conns, now);
    }
  }

  // Full: the connection that has waited longest for its request head, if it
  // has waited idle_evict_ms, is answered 408 and closed to make room, so idle
  // (or slow-loris) connections cannot keep health probes out; busy servers,
  // whose connections are all fresh, still answer newcomers 503.
  bool EvictIdle(std::vector<std::unique_ptr<Conn>>* conns, int64_t now) {
    Conn* oldest = nullptr;
    for (const auto& c : *conns) {
      if (!c->answered && c->fd.valid() &&
          (oldest == nullptr || c->deadline_ns < oldest->deadline_ns)) {
        oldest = c.get();
      }
    }
    const int64_t waited =
        oldest == nullptr ? 0 : now - (oldest->deadline_ns - options_.idle_timeout_ms * 1'000'000);
    if (oldest == nullptr || waited < options_.idle_evict_ms * 1'000'000) return false;
    Reject(*oldest, 408, "idle for a newer connection; send the request head at once\n", now);
    oldest->fd.Reset();  // closed now: its slot is the newcomer's
    std::erase_if(*conns, [](const std::unique_ptr<Conn>& c) { return !c->fd.valid(); });
    return true;
  }

  void Accept(std::vector<std::unique_ptr<Conn>>* conns, int64_t now) {
    for (;;) {
      const int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or out of fds: retried on the next readiness
      auto c = std::make_unique<Conn>();
      c->fd.Reset(fd);
      c->deadline_ns = now + options_.idle_timeout_ms * 1'000'000;
      if (conns->size() >= options_.max_connections && !EvictIdle(conns, now)) {
        Reject(*c, 503, "too many HTTP connections; retry later\n", now);
        // Best effort, without waiting: a small answer fits the send buffer.
        Write(*c, now);
        continue;  // closed with `c`
      }
      conns->push_back(std::move(c));
    }
  }

  void Service(Conn& c, short revents, int64_t now) {
    if (c.write_closed) {
      Drain(c);
      return;
    }
    if (c.answered) {
      if (revents & (POLLOUT | POLLERR | POLLHUP)) Write(c, now);
      return;
    }
    // A body is read in one go as far as the socket has it; a head in small
    // reads (it is re-parsed after each).
    const size_t want = c.request.has_value() ? kReadBytes : 4096;
    const size_t old_size = c.in.size();
    c.in.resize(old_size + want);
    const ssize_t r = ::recv(c.fd.get(), c.in.data() + old_size, want, 0);
    c.in.resize(old_size + static_cast<size_t>(std::max<ssize_t>(r, 0)));
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (r <= 0) {
      c.fd.Reset();  // the peer left before its request was complete
      return;
    }
    if (c.request.has_value()) {
      c.deadline_ns = now + options_.idle_timeout_ms * 1'000'000;  // progress
      MaybeAnswerWithBody(c, now);
      return;
    }
    auto parsed = ParseHttpRequest(c.in, options_.limits);
    if (!parsed.ok()) {
      Reject(c, HttpStatusForParseError(parsed.status()),
             absl::StrCat(parsed.status().message(), "\n"), now);
    } else if (parsed->has_value()) {
      OnHead(c, std::move(**parsed), now);
    }
  }

  static constexpr std::string_view kReadMethods = "GET, HEAD";
  static constexpr std::string_view kWriteMethods = "GET, HEAD, PUT, DELETE";

  void OnHead(Conn& c, HttpRequest req, int64_t now) {
    const bool head = req.method == "HEAD";  // RFC 9110 9.3.2: GET's head, no body
    c.head = head;
    auto it = handlers_.find(req.path);
    if (it == handlers_.end()) {
      std::string paths;
      for (const auto& [p, h] : handlers_) absl::StrAppend(&paths, " ", p);
      Reject(c, 404, absl::StrCat("no such path; served:", paths, "\n"), now);
      return;
    }
    const Route& route = it->second;
    if (route.options.action) {
      if (req.method != "POST") {
        Reject(c, 405, "only POST is served here\n", now, "POST");
        return;
      }
      Answer(c, route, req, now);  // bodies ignored
      return;
    }
    const bool write = req.method == "PUT" || req.method == "DELETE";
    if (req.method != "GET" && !head && !(write && route.options.writes)) {
      const std::string_view allow = route.options.writes ? kWriteMethods : kReadMethods;
      Reject(c, 405, absl::StrCat("only ", AbslView(allow), " are served here\n"), now, allow);
      return;
    }
    if (!route.options.writes) {  // bodies ignored
      Answer(c, route, req, now);
      return;
    }
    auto length = RequestBodyBytes(req);
    if (!length.ok()) {
      Reject(c, HttpStatusForParseError(length.status()),
             absl::StrCat(length.status().message(), "\n"), now);
      return;
    }
    if (!length->has_value() && req.method == "PUT") {
      Reject(c, 411, "PUT needs a Content-Length\n", now);
      return;
    }
    const uint64_t bytes = length->value_or(0);
    if (bytes > route.options.max_body_bytes) {
      Reject(c, 413,
             absl::StrCat("the body is ", bytes, " bytes; this path takes at most ",
                          route.options.max_body_bytes, "\n"),
             now);
      return;
    }
    const std::string* expect = req.Header("expect");
    if (expect != nullptr && absl::EqualsIgnoreCase(*expect, "100-continue") && bytes > 0 &&
        c.in.size() == req.head_bytes) {
      // Best effort without waiting: 25 bytes fit a fresh socket's buffer; a
      // peer that does not read them loses nothing (it sends after a delay).
      constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      (void)!::send(c.fd.get(), kContinue.data(), kContinue.size(), MSG_NOSIGNAL);
    }
    c.route = &route;
    c.body_bytes = bytes;
    c.request = std::move(req);
    c.deadline_ns = now + options_.idle_timeout_ms * 1'000'000;
    MaybeAnswerWithBody(c, now);
  }

  // Answers once the whole body is in; bytes after it are ignored (one
  // request per connection).
  void MaybeAnswerWithBody(Conn& c, int64_t now) {
    MC_DASSERT(c.request.has_value() && c.route != nullptr, "no request awaiting a body");
    const size_t start = c.request->head_bytes;
    if (c.in.size() - start < c.body_bytes) return;
    c.request->body = c.in.substr(start, c.body_bytes);
    c.in.clear();
    c.in.shrink_to_fit();
    Answer(c, *c.route, *c.request, now);
  }

  void Answer(Conn& c, const Route& route, const HttpRequest& req, int64_t now) {
    const HttpResponse resp = route.handler(req);
    requests_.fetch_add(1, std::memory_order_relaxed);  // relaxed: a statistic
    c.out = FormatHttpResponse(resp, {}, c.head);
    c.answered = true;
    Write(c, now);
  }

  void Reject(Conn& c, int status, std::string body, int64_t now, std::string_view allow = {}) {
    rejected_.fetch_add(1, std::memory_order_relaxed);  // relaxed: a statistic
    // A HEAD rejected before Answer (a malformed or oversized head, a timeout)
    // still gets no body.
    if (!c.head && c.in.starts_with("HEAD ")) c.head = true;
    c.out = FormatHttpResponse({.status = status, .body = std::move(body)}, allow, c.head);
    c.answered = true;
    Write(c, now);
  }

  void Write(Conn& c, int64_t now) {
    MC_DASSERT(c.answered && c.sent <= c.out.size(), "writing without an answer");
    while (c.sent < c.out.size()) {
      const ssize_t w =
          ::send(c.fd.get(), c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno == EAGAIN) return;  // POLLOUT brings us back
      if (w <= 0) {
        c.fd.Reset();  // the peer is gone
        return;
      }
      c.sent += static_cast<size_t>(w);
    }
    ::shutdown(c.fd.get(), SHUT_WR);
    c.write_closed = true;
    c.deadline_ns = now + options_.linger_ms * 1'000'000;
  }

  // Reads and drops what the peer still sends until its EOF: closing with
  // unread input would reset the connection and could lose our answer.
  static void Drain(Conn& c) {
    char buf[4096];
    for (int i = 0; i < 16; ++i) {
      const ssize_t r = ::recv(c.fd.get(), buf, sizeof(buf), 0);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && errno == EAGAIN) return;
      if (r <= 0) {
        c.fd.Reset();  // EOF: the peer has our answer
        return;
      }
    }  // still sending: go on at the next readiness, until linger_ms
  }

  const HttpServerOptions options_;
  std::map<std::string, Route> handlers_;  // fixed after Start (Conn::route points in)
  UniqueFd listen_;
  UniqueFd wake_read_;
  UniqueFd wake_write_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> rejected_{0};
  uint16_t port_ = 0;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace mooncake::node

#endif  // MOONCAKE_STORE_NODE_HTTP_SERVER_H_
