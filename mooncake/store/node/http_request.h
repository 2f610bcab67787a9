// ParseHttpRequest: the head of an HTTP/1.x request (request line and
// headers, up to the blank line), parsed from bytes a peer sent. The node's
// HTTP server (http_server.h) calls it on what it has read so far; the input
// is untrusted (fuzzed by http_request_fuzz.cc).
//
// Result:
//   std::nullopt              the head is not complete yet: read more
//   an HttpRequest            complete; `head_bytes` says where it ended
//   INVALID_ARGUMENT          malformed (answer 400)
//   RESOURCE_EXHAUSTED        the head exceeds `max_head_bytes` or has more
//                             than `max_headers` headers (answer 431)
// The method is not checked here (the server answers 405 to methods a path
// does not take).
//
// RequestBodyBytes reads what the head says about a body (RFC 9112 6.3):
//   std::nullopt              no Content-Length: no body
//   n                         Content-Length: n (several equal ones count once)
//   UNIMPLEMENTED             Transfer-Encoding (chunked bodies are not read:
//                             answer 501)
//   INVALID_ARGUMENT          a malformed or conflicting Content-Length (400)
//
// Accepted syntax (RFC 9112, strict): `METHOD SP target SP HTTP/1.x CRLF`,
// headers `name: value CRLF` (name a token, no space before the colon, value
// without control bytes), an empty line. A bare LF ends a line too (as most
// servers accept). Obsolete line folding is rejected.
//
// UrlDecode and QueryParameter read the request target's query (the
// metadata store's ?key=...).
//
// Thread-safety: pure functions.
#ifndef MOONCAKE_STORE_NODE_HTTP_REQUEST_H_
#define MOONCAKE_STORE_NODE_HTTP_REQUEST_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"

namespace mooncake::node {

struct HttpLimits {
  size_t max_head_bytes = 8192;  // request line + headers
  size_t max_headers = 64;
};

struct HttpRequest {
  std::string method;                                        // as sent (case-sensitive, RFC 9110)
  std::string target;                                        // as sent, e.g. "/metrics?x=1"
  std::string path;                                          // target up to '?'
  std::string query;                                         // after '?', "" if none
  int minor_version = 1;                                     // HTTP/1.<minor>
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  size_t head_bytes = 0;                                     // bytes of input the head used
  std::string body;  // the Content-Length body (filled by the server, for paths that take one)

  // First header named `name` (lower case), or nullptr.
  const std::string* Header(std::string_view name) const {
    for (const auto& [k, v] : headers) {
      if (k == name) return &v;
    }
    return nullptr;
  }
};

}  // namespace mooncake::node

namespace mooncake::node_internal {

inline bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// The next line of `in` from `*pos` (without its CR LF / LF), or nullopt when
// no line end is there yet.
inline std::optional<std::string_view> NextLine(std::string_view in, size_t* pos) {
  const size_t lf = in.find('\n', *pos);
  if (lf == std::string_view::npos) return std::nullopt;
  std::string_view line = in.substr(*pos, lf - *pos);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  *pos = lf + 1;
  return line;
}

inline absl::Status Malformed(std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("malformed HTTP request: ", AbslView(why)));
}

inline absl::Status ParseRequestLine(std::string_view line, node::HttpRequest* r) {
  const size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos || sp1 == 0) return Malformed("no method");
  const size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || sp2 == sp1 + 1) return Malformed("no request target");
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  for (char c : method) {
    if (!IsTokenChar(c)) return Malformed("bad character in the method");
  }
  for (char c : target) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) return Malformed("bad character in the request target");
  }
  if (target.front() != '/' && target != "*") return Malformed("the target must start with '/'");
  if (version.size() != 8 || !version.starts_with("HTTP/1.") || version[7] < '0' ||
      version[7] > '9') {
    return Malformed("the version must be HTTP/1.0 or HTTP/1.1");
  }
  r->method = std::string(method);
  r->target = std::string(target);
  const size_t q = target.find('?');
  r->path = std::string(target.substr(0, q));
  r->query = q == std::string_view::npos ? "" : std::string(target.substr(q + 1));
  r->minor_version = version[7] - '0';
  return absl::OkStatus();
}

inline absl::Status ParseHeaderLine(std::string_view line, node::HttpRequest* r) {
  if (line.front() == ' ' || line.front() == '\t') return Malformed("obsolete header folding");
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return Malformed("a header without a name");
  std::string name(line.substr(0, colon));
  for (char& c : name) {
    if (!IsTokenChar(c)) return Malformed("bad character in a header name");
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) return Malformed("control byte in a header value");
  }
  r->headers.emplace_back(std::move(name), std::string(value));
  return absl::OkStatus();
}

}  // namespace mooncake::node_internal

namespace mooncake::node {

inline absl::StatusOr<std::optional<HttpRequest>> ParseHttpRequest(std::string_view in,
                                                                   const HttpLimits& limits = {}) {
  MC_ASSERT(limits.max_head_bytes > 0, "max_head_bytes must be > 0");
  auto too_large = [&] {
    return absl::ResourceExhaustedError(
        absl::StrCat("request header fields too large: the limit is ", limits.max_head_bytes,
                     " bytes and ", limits.max_headers, " headers"));
  };
  // Only the first max_head_bytes count: a longer head is refused however it
  // ends, and a peer cannot make the parser scan more.
  const std::string_view window = in.substr(0, limits.max_head_bytes);
  size_t pos = 0;
  // RFC 9112 2.2: ignore empty lines before the request line.
  for (;;) {
    const size_t start = pos;
    std::optional<std::string_view> line = node_internal::NextLine(window, &pos);
    if (!line.has_value()) {
      pos = start;
      break;
    }
    if (!line->empty()) {
      pos = start;
      break;
    }
  }
  HttpRequest r;
  std::optional<std::string_view> request_line = node_internal::NextLine(window, &pos);
  if (!request_line.has_value()) {
    if (in.size() >= limits.max_head_bytes) return too_large();
    return std::optional<HttpRequest>();
  }
  if (absl::Status s = node_internal::ParseRequestLine(*request_line, &r); !s.ok()) return s;
  for (;;) {
    std::optional<std::string_view> line = node_internal::NextLine(window, &pos);
    if (!line.has_value()) {
      if (in.size() >= limits.max_head_bytes) return too_large();
      return std::optional<HttpRequest>();
    }
    if (line->empty()) break;
    if (r.headers.size() >= limits.max_headers) return too_large();
    if (absl::Status s = node_internal::ParseHeaderLine(*line, &r); !s.ok()) return s;
  }
  MC_ASSERT(pos <= limits.max_head_bytes && pos <= in.size(), "parser overran its window");
  r.head_bytes = pos;
  return std::optional<HttpRequest>(std::move(r));
}

inline absl::StatusOr<std::optional<uint64_t>> RequestBodyBytes(const HttpRequest& r) {
  std::optional<uint64_t> length;
  for (const auto& [name, value] : r.headers) {
    if (name == "transfer-encoding") {
      return absl::UnimplementedError(
          "Transfer-Encoding is not supported here; send the body with a Content-Length");
    }
    if (name != "content-length") continue;
    // At most 19 digits: every such number fits in uint64_t.
    if (value.empty() || value.size() > 19 ||
        value.find_first_not_of("0123456789") != std::string::npos) {
      return node_internal::Malformed("Content-Length must be a decimal byte count");
    }
    uint64_t n = 0;
    for (char c : value) n = n * 10 + static_cast<uint64_t>(c - '0');
    if (length.has_value() && *length != n) {
      return node_internal::Malformed("conflicting Content-Length headers");
    }
    length = n;
  }
  return length;
}

// %XX escapes and '+' (a space, as forms and Go's and Python's query
// parsers have it) decoded. INVALID_ARGUMENT for a '%' without two hex digits.
inline absl::StatusOr<std::string> UrlDecode(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out += ' ';
    } else if (text[i] != '%') {
      out += text[i];
    } else if (i + 2 < text.size() && hex(text[i + 1]) >= 0 && hex(text[i + 2]) >= 0) {
      out += static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2]));
      i += 2;
    } else {
      return node_internal::Malformed("a '%' in the query is not followed by two hex digits");
    }
  }
  MC_DASSERT(out.size() <= text.size(), "decoding never grows the text");
  return out;
}

// The first parameter called `name` (after decoding) in a query string
// ("a=1&b=2"), decoded; std::nullopt when there is none. A parameter without
// '=' has the value "". Errors: those of UrlDecode.
inline absl::StatusOr<std::optional<std::string>> QueryParameter(std::string_view query,
                                                                 std::string_view name) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const size_t eq = pair.find('=');
    absl::StatusOr<std::string> key = UrlDecode(pair.substr(0, eq));
    if (!key.ok()) return key.status();
    if (*key != name) continue;
    absl::StatusOr<std::string> value =
        UrlDecode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1));
    if (!value.ok()) return value.status();
    return std::optional<std::string>(std::move(*value));
  }
  return std::optional<std::string>();
}

// The HTTP status a parse error gets.
inline int HttpStatusForParseError(const absl::Status& s) {
  if (absl::IsResourceExhausted(s)) return 431;
  return absl::IsUnimplemented(s) ? 501 : 400;
}

}  // namespace mooncake::node

#endif  // MOONCAKE_STORE_NODE_HTTP_REQUEST_H_
