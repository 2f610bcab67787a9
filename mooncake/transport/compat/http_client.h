// A small blocking HTTP/1.1 client for metadata servers: Mooncake's HTTP
// metadata server (GET/PUT/DELETE on <url>?key=...) and etcd's v3 JSON
// gateway (POST /v3/kv/...). HttpCall makes one connection per call
// ("Connection: close"): metadata traffic is a handful of calls per engine
// and per peer, so reuse buys nothing and a fresh socket cannot be left
// half-read by a failure. HttpConnectionPool keeps connections for callers
// that call often (the HA oplog on etcd).
//
// Bounds: the whole call (resolve, connect, send, receive) ends by
// options.timeout; a response over options.max_response_bytes (status line,
// headers and body together) fails with RESOURCE_EXHAUSTED. Bodies framed by
// Content-Length, "Transfer-Encoding: chunked" or the end of the connection
// are all read.
//
// Errors: INVALID_ARGUMENT (a URL this client cannot reach: not http://, a bad
// port), UNAVAILABLE (name does not resolve, refused, reset), DEADLINE_EXCEEDED,
// DATA_LOSS (not an HTTP/1.x answer), RESOURCE_EXHAUSTED. Any HTTP status is a
// result, not an error: the caller decides what 404 means.
//
// Thread-safety: pure functions and a pool that locks; calls may run
// concurrently.
#ifndef MOONCAKE_TRANSPORT_COMPAT_HTTP_CLIENT_H_
#define MOONCAKE_TRANSPORT_COMPAT_HTTP_CLIENT_H_

#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/base/tcp_connect.h"

namespace mooncake::transport::compat {

struct HttpUrl {
  std::string host;
  uint16_t port = 80;
  std::string path = "/";  // with its leading '/'
};

struct HttpClientOptions {
  absl::Duration timeout = absl::Seconds(3);
  size_t max_response_bytes = size_t{1} << 20;
  std::string authorization;  // an "Authorization" header's value; empty: none
};

struct HttpResult {
  int status = 0;
  std::string body;
};

// "http://host[:port][/path]" (an IPv6 host in brackets).
inline absl::StatusOr<HttpUrl> ParseHttpUrl(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata URL \"", AbslView(url), "\" does not start with http://"));
  }
  std::string_view rest = url.substr(kScheme.size());
  HttpUrl out;
  const size_t slash = rest.find('/');
  if (slash != std::string_view::npos) {
    out.path = std::string(rest.substr(slash));
    rest = rest.substr(0, slash);
  }
  if (std::optional<HostPortText> hp = SplitHostPort(rest); hp.has_value()) {
    uint32_t port = 0;
    if (!absl::SimpleAtoi(AbslView(hp->port), &port) || port == 0 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("bad port in URL \"", AbslView(url), "\""));
    }
    out.host = std::string(hp->host);
    out.port = static_cast<uint16_t>(port);
  } else if (rest.find(':') == std::string_view::npos) {
    out.host = std::string(rest);
  }
  if (out.host.size() > 2 && out.host.front() == '[' && out.host.back() == ']') {
    out.host = out.host.substr(1, out.host.size() - 2);
  }
  if (out.host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no host in URL \"", AbslView(url), "\""));
  }
  return out;
}

// Percent-encodes everything but RFC 3986's unreserved characters, so a key
// holding '/', '?' or '&' survives a query string.
inline std::string UrlEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() * 3);
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (absl::ascii_isalnum(u) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 0xF]);
    }
  }
  return out;
}

}  // namespace mooncake::transport::compat

namespace mooncake::transport::compat_internal {

inline int MillisLeft(absl::Time deadline) {
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now()) + 1;
  return ms <= 0 ? 0 : static_cast<int>(ms > 60'000 ? 60'000 : ms);
}

// Waits for `events` on `fd` until `deadline`.
inline absl::Status PollBy(int fd, short events, absl::Time deadline, std::string_view what) {
  for (;;) {
    const int left = MillisLeft(deadline);
    if (left == 0) {
      return absl::DeadlineExceededError(absl::StrCat("HTTP ", AbslView(what), ": timed out"));
    }
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, left);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return ErrnoToStatus(errno, what);
    if (rc > 0) return absl::OkStatus();
  }
}

inline absl::Status SendAllBy(int fd, std::string_view data, absl::Time deadline) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      RETURN_IF_ERROR(PollBy(fd, POLLOUT, deadline, "send"));
      continue;
    }
    return ErrnoToStatus(errno, "HTTP send");
  }
  return absl::OkStatus();
}

// Appends what arrives to `*buf`; false at the peer's end of stream.
inline absl::StatusOr<bool> RecvSomeBy(int fd, std::string* buf, size_t max_bytes,
                                       absl::Time deadline) {
  char chunk[16384];
  for (;;) {
    const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n > 0) {
      if (buf->size() + static_cast<size_t>(n) > max_bytes) {
        return absl::ResourceExhaustedError(
            absl::StrCat("HTTP response over ", max_bytes, " bytes"));
      }
      buf->append(chunk, static_cast<size_t>(n));
      return true;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return ErrnoToStatus(errno, "HTTP receive");
    if (absl::Status s = PollBy(fd, POLLIN, deadline, "receive"); !s.ok()) return s;
  }
}

// Decodes a complete chunked body; nullopt while more bytes are needed.
inline absl::StatusOr<std::optional<std::string>> Dechunk(std::string_view in) {
  std::string out;
  for (;;) {
    const size_t eol = in.find("\r\n");
    if (eol == std::string_view::npos) return std::optional<std::string>();
    std::string_view size_text = in.substr(0, eol);
    if (const size_t semi = size_text.find(';'); semi != std::string_view::npos) {
      size_text = size_text.substr(0, semi);
    }
    uint64_t size = 0;
    if (!absl::SimpleHexAtoi(AbslView(size_text), &size)) {
      return absl::DataLossError("HTTP chunked body: bad chunk size");
    }
    if (size == 0) return std::optional<std::string>(std::move(out));
    if (in.size() < eol + 2 + size + 2) return std::optional<std::string>();
    out.append(in.substr(eol + 2, size));
    in.remove_prefix(eol + 2 + size + 2);
  }
}

// One request with a JSON body; `close` asks the server to close after it.
inline std::string RequestText(std::string_view method, std::string_view host_port,
                               std::string_view target, std::string_view body,
                               std::string_view authorization, bool close) {
  return absl::StrCat(AbslView(method), " ", AbslView(target),
                      " HTTP/1.1\r\nHost: ", AbslView(host_port),
                      "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                      authorization.empty() ? "" : "\r\nAuthorization: ", AbslView(authorization),
                      close ? "\r\nConnection: close" : "", "\r\n\r\n", AbslView(body));
}

// How an answer was framed, for a caller that keeps connections.
struct ResponseFraming {
  bool received_any = false;  // a byte of the answer arrived
  bool reusable = false;      // framed, no "Connection: close", nothing after it
};

// Reads one HTTP/1.x answer from `fd`.
inline absl::StatusOr<transport::compat::HttpResult> ReadHttpResponse(
    int fd, size_t max_response_bytes, absl::Time deadline, ResponseFraming* framing = nullptr) {
  ResponseFraming local;
  ResponseFraming& f = framing != nullptr ? *framing : local;
  std::string in;
  std::optional<size_t> head_end, content_length;
  bool chunked = false, closes = false;
  transport::compat::HttpResult result;
  for (;;) {
    absl::StatusOr<bool> more = RecvSomeBy(fd, &in, max_response_bytes, deadline);
    if (!more.ok()) return more.status();
    f.received_any = f.received_any || !in.empty();
    if (!head_end.has_value()) {
      const size_t end = in.find("\r\n\r\n");
      if (end != std::string::npos) {
        head_end = end + 4;
        const std::string_view head(in.data(), end);
        if (!head.starts_with("HTTP/1.") || head.size() < 12 ||
            !absl::SimpleAtoi(AbslView(head.substr(9, 3)), &result.status)) {
          return absl::DataLossError("not an HTTP/1.x response");
        }
        const std::string lower = absl::AsciiStrToLower(AbslView(head));
        if (const size_t at = lower.find("\r\ncontent-length:"); at != std::string::npos) {
          const size_t from = at + 17;
          const size_t to = lower.find("\r\n", from);
          size_t n = 0;
          if (!absl::SimpleAtoi(AbslView(std::string_view(lower).substr(
                                    from, to == std::string::npos ? std::string::npos : to - from)),
                                &n)) {
            return absl::DataLossError("HTTP response: bad Content-Length");
          }
          content_length = n;
        }
        chunked = lower.find("\r\ntransfer-encoding: chunked") != std::string::npos;
        closes = lower.find("\r\nconnection: close") != std::string::npos ||
                 head.starts_with("HTTP/1.0");
      }
    }
    if (head_end.has_value()) {
      const std::string_view payload = std::string_view(in).substr(*head_end);
      if (chunked) {
        absl::StatusOr<std::optional<std::string>> body_or = Dechunk(payload);
        if (!body_or.ok()) return body_or.status();
        if (body_or->has_value()) {
          result.body = std::move(**body_or);
          // Chunk extensions or trailers make the exact end unknown here.
          f.reusable = !closes && payload.ends_with("0\r\n\r\n");
          return result;
        }
      } else if (content_length.has_value() && payload.size() >= *content_length) {
        result.body = std::string(payload.substr(0, *content_length));
        f.reusable = !closes && payload.size() == *content_length;
        return result;
      }
    }
    if (!*more) {
      if (!head_end.has_value() || chunked || content_length.has_value()) {
        return absl::DataLossError("HTTP response cut short by the server");
      }
      result.body = in.substr(*head_end);  // framed by the end of the connection
      return result;
    }
  }
}

}  // namespace mooncake::transport::compat_internal

namespace mooncake::transport::compat {

// One request to host:port. `target` is the path with its query
// ("/metadata?key=a%2Fb").
inline absl::StatusOr<HttpResult> HttpCall(std::string_view method, const std::string& host,
                                           uint16_t port, std::string_view target,
                                           std::string_view body, HttpClientOptions options = {}) {
  namespace ci = compat_internal;
  MC_ASSERT(options.max_response_bytes > 0, "a response needs room");
  const absl::Time deadline = absl::Now() + options.timeout;
  absl::StatusOr<UniqueFd> fd = mooncake::ConnectTcp(HostPort{host, port}, deadline);
  if (!fd.ok()) return fd.status();
  const std::string request = ci::RequestText(method, JoinHostPort(host, port), target, body,
                                              options.authorization, /*close=*/true);
  if (absl::Status s = ci::SendAllBy(fd->get(), request, deadline); !s.ok()) return s;
  return ci::ReadHttpResponse(fd->get(), options.max_response_bytes, deadline);
}

// Keeps connections to HTTP/1.1 servers open between calls (keep-alive), for
// a caller whose every call would otherwise pay a TCP connect: etcd's JSON
// gateway, where the HA oplog makes a call per batch of changes. Call sends
// the request on an idle connection to host:port, or a new one; a reused
// connection that the server had closed (no byte of an answer arrives) is
// replaced by a new one once. A connection goes back to the pool only when
// its answer was framed (Content-Length or chunked), the server did not ask
// to close, and nothing followed the answer; at most `max_idle` a server.
//
// Thread-safety: every method may be called concurrently; a connection serves
// one call at a time.
class HttpConnectionPool {
 public:
  explicit HttpConnectionPool(size_t max_idle = 8) : max_idle_(max_idle) {}
  HttpConnectionPool(const HttpConnectionPool&) = delete;
  HttpConnectionPool& operator=(const HttpConnectionPool&) = delete;

  // As HttpCall (errors included), over a kept-alive connection.
  absl::StatusOr<HttpResult> Call(std::string_view method, const std::string& host, uint16_t port,
                                  std::string_view target, std::string_view body,
                                  HttpClientOptions options = {}) {
    namespace ci = compat_internal;
    MC_ASSERT(options.max_response_bytes > 0, "a response needs room");
    const absl::Time deadline = absl::Now() + options.timeout;
    const std::string key = JoinHostPort(host, port);
    const std::string request =
        ci::RequestText(method, key, target, body, options.authorization, /*close=*/false);
    for (int attempt = 0;; ++attempt) {
      UniqueFd fd = attempt == 0 ? TakeIdle(key) : UniqueFd();
      const bool reused = fd.valid();
      if (!reused) {
        absl::StatusOr<UniqueFd> fresh = mooncake::ConnectTcp(HostPort{host, port}, deadline);
        if (!fresh.ok()) return fresh.status();
        fd = std::move(*fresh);
        connects_.fetch_add(1, std::memory_order_relaxed);
      }
      ci::ResponseFraming framing;
      absl::Status sent = ci::SendAllBy(fd.get(), request, deadline);
      absl::StatusOr<HttpResult> r =
          sent.ok() ? ci::ReadHttpResponse(fd.get(), options.max_response_bytes, deadline, &framing)
                    : absl::StatusOr<HttpResult>(sent);
      // A kept-alive connection the server closed while it was idle: nothing
      // of an answer came, so the server did not take the request.
      if (!r.ok() && reused && !framing.received_any && attempt == 0 &&
          !absl::IsDeadlineExceeded(r.status())) {
        continue;
      }
      if (r.ok() && framing.reusable) PutIdle(key, std::move(fd));
      return r;
    }
  }

  // New connections made so far (tests and metrics).
  uint64_t connects() const { return connects_.load(std::memory_order_relaxed); }

 private:
  UniqueFd TakeIdle(const std::string& key) {
    MutexLock lock(&mu_);
    auto it = idle_.find(key);
    if (it == idle_.end() || it->second.empty()) return UniqueFd();
    UniqueFd fd = std::move(it->second.back());
    it->second.pop_back();
    return fd;
  }
  void PutIdle(const std::string& key, UniqueFd fd) {
    MutexLock lock(&mu_);
    std::vector<UniqueFd>& list = idle_[key];
    if (list.size() < max_idle_) list.push_back(std::move(fd));  // else closed here
  }

  const size_t max_idle_;
  std::atomic<uint64_t> connects_{0};
  Mutex mu_;
  absl::flat_hash_map<std::string, std::vector<UniqueFd>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::transport::compat

#endif  // MOONCAKE_TRANSPORT_COMPAT_HTTP_CLIENT_H_
