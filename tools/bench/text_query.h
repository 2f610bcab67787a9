// Small plain-text queries the benchmarks make on the side of the workload:
// an HTTP request (the store's GET /metrics, POST /drain), a memcached
// text-protocol request ("stats"), and parsers for their answers (Prometheus
// text, an integer field of a flat JSON object).
//
// Thread-safety: free functions with no shared state.
#ifndef MOONCAKE_TOOLS_BENCH_TEXT_QUERY_H_
#define MOONCAKE_TOOLS_BENCH_TEXT_QUERY_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/host_port.h"

namespace mooncake::bench {

inline constexpr size_t kMaxTextReplyBytes = size_t{16} << 20;

// Splits "host:port". INVALID_ARGUMENT when malformed.
inline absl::StatusOr<std::pair<std::string, int>> HostAndPort(std::string_view address) {
  const std::optional<HostPortText> split = mooncake::SplitHostPort(address);
  int port = 0;
  if (!split || !absl::SimpleAtoi(AbslView(split->port), &port) || port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", AbslView(address), "' is not host:port"));
  }
  return std::pair{std::string(split->host), port};
}

// Sends `request` to address (an IPv4 host:port), reads until `done(reply)`
// says the reply is complete or the peer closes. UNAVAILABLE on connection
// errors, DEADLINE_EXCEEDED after `timeout_ms`.
template <typename Done>
absl::StatusOr<std::string> TextExchange(std::string_view address, std::string_view request,
                                         Done done, int timeout_ms = 5'000) {
  auto hp = HostAndPort(address);
  if (!hp.ok()) return hp.status();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(hp->second));
  if (inet_pton(AF_INET, hp->first.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("not an IPv4 address: ", hp->first));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("connect ", AbslView(address), ": ", std::strerror(errno)));
  }
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    sent += static_cast<size_t>(n);
  }
  std::string reply;
  char buf[16384];
  while (!done(std::string_view(reply))) {
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, timeout_ms);
    if (ready == 0) {
      return absl::DeadlineExceededError(absl::StrCat("no reply from ", AbslView(address)));
    }
    const ssize_t n = ready < 0 ? -1 : recv(fd, buf, sizeof(buf), 0);
    if (n < 0) return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    if (n == 0) break;
    reply.append(buf, static_cast<size_t>(n));
    if (reply.size() > kMaxTextReplyBytes) return absl::OutOfRangeError("reply too large");
  }
  return reply;
}

// `method` http://address/path (HTTP/1.0, no body); the body of a 200 answer.
inline absl::StatusOr<std::string> HttpCall(std::string_view method, std::string_view address,
                                            std::string_view path, int timeout_ms = 5'000) {
  const std::string request =
      absl::StrCat(AbslView(method), " ", AbslView(path), " HTTP/1.0\r\nHost: ", AbslView(address),
                   "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  auto reply = TextExchange(
      address, request, [](std::string_view) { return false; }, timeout_ms);
  if (!reply.ok()) return reply.status();
  const size_t body = reply->find("\r\n\r\n");
  if (!reply->starts_with("HTTP/1.") || body == std::string::npos) {
    return absl::InternalError(absl::StrCat("not an HTTP answer from ", AbslView(address)));
  }
  if (reply->find(" 200") != reply->find(' ')) {
    // The start of the body too: it says why (e.g. a refused POST /drain).
    return absl::UnavailableError(absl::StrCat(AbslView(method), " ", AbslView(path), ": ",
                                               reply->substr(0, reply->find('\r')), " ",
                                               reply->substr(body + 4, 300)));
  }
  return reply->substr(body + 4);
}

// GET http://address/path (HTTP/1.0); the body of a 200 answer.
inline absl::StatusOr<std::string> HttpGet(std::string_view address, std::string_view path) {
  return HttpCall("GET", address, path);
}

// True if the labels of a sample line's `series` ("name{a=\"x\",b=\"y\"}")
// contain each of `labels`; the name itself (its first `name_size` bytes) is
// not searched.
inline bool LabelsContain(std::string_view series, size_t name_size,
                          std::initializer_list<std::string_view> labels) {
  const std::string_view label_text = series.substr(name_size);
  for (std::string_view l : labels) {
    if (label_text.find(l) == std::string_view::npos) return false;
  }
  return true;
}

// The sum of every sample of metric `name` in Prometheus text (one sample
// for a metric without labels) whose label set contains each of `labels`,
// written as in the text (e.g. {"kind=\"repair\"", "result=\"ok\""}).
// NOT_FOUND if there is none: a labelled counter that has not moved yet has
// no sample, so callers wanting 0 for it write `.value_or(0)`.
inline absl::StatusOr<double> PrometheusValue(std::string_view text, std::string_view name,
                                              std::initializer_list<std::string_view> labels = {}) {
  double sum = 0;
  bool found = false;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(begin, end - begin);
    begin = end + 1;
    if (!line.starts_with(name) || line.size() <= name.size()) continue;
    const char next = line[name.size()];
    if (next != ' ' && next != '{') continue;
    const size_t space = line.rfind(' ');
    if (!LabelsContain(line.substr(0, space), name.size(), labels)) continue;
    double v = 0;
    if (!absl::SimpleAtod(AbslView(line.substr(space + 1)), &v)) {
      return absl::InternalError(absl::StrCat("bad sample: ", AbslView(line)));
    }
    sum += v;
    found = true;
  }
  if (!found) return absl::NotFoundError(absl::StrCat("no metric ", AbslView(name)));
  return sum;
}

// The integer N of `"key": N` in a flat JSON object (one without nested
// objects holding the same key), such as the store's POST /drain answer.
// NOT_FOUND if the key is absent, INVALID_ARGUMENT if its value is not an
// integer.
inline absl::StatusOr<int64_t> JsonIntField(std::string_view json, std::string_view key) {
  const std::string needle = absl::StrCat("\"", AbslView(key), "\"");
  size_t at = 0;
  for (;; at += needle.size()) {
    at = json.find(needle, at);
    if (at == std::string_view::npos) {
      return absl::NotFoundError(absl::StrCat("no field ", needle));
    }
    size_t colon = at + needle.size();
    while (colon < json.size() && json[colon] == ' ') ++colon;
    if (colon < json.size() && json[colon] == ':') {  // a key, not a string value
      size_t begin = colon + 1;
      while (begin < json.size() && json[begin] == ' ') ++begin;
      size_t end = begin;
      while (end < json.size() && (json[end] == '-' || (json[end] >= '0' && json[end] <= '9'))) {
        ++end;
      }
      int64_t v = 0;
      if (!absl::SimpleAtoi(AbslView(json.substr(begin, end - begin)), &v)) {
        return absl::InvalidArgumentError(absl::StrCat("field ", needle, " is not an integer"));
      }
      return v;
    }
  }
}

// memcached "stats": the value of "STAT <name> <value>".
inline absl::StatusOr<double> MemcachedStat(std::string_view address, std::string_view name) {
  auto reply =
      TextExchange(address, "stats\r\n", [](std::string_view r) { return r.ends_with("END\r\n"); });
  if (!reply.ok()) return reply.status();
  const std::string needle = absl::StrCat("STAT ", AbslView(name), " ");
  const size_t at = reply->find(needle);
  double v = 0;
  if (at == std::string::npos) return absl::NotFoundError(absl::StrCat("no stat ", needle));
  const size_t end = reply->find('\r', at);
  if (!absl::SimpleAtod(reply->substr(at + needle.size(), end - at - needle.size()), &v)) {
    return absl::InternalError(absl::StrCat("bad stat ", needle));
  }
  return v;
}

}  // namespace mooncake::bench

#endif  // MOONCAKE_TOOLS_BENCH_TEXT_QUERY_H_
