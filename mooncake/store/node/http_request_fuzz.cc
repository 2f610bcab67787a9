// Fuzzes ParseHttpRequest: any bytes give a request, "incomplete" or an
// error, never a crash; a parsed head is within the input and the limit, and
// parsing its head again gives the same request. Then what follows the head:
// RequestBodyBytes gives a length, none, or a 400/501 error, and a body that
// is all there is the bytes after the head; the query's key parameter
// decodes (never longer than the query) or is a 400; the query of POST
// /drain and /preempt parses (deadline and bandwidth in range) or is a 400.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "mooncake/base/assert.h"
#include "mooncake/store/node/drain.h"
#include "mooncake/store/node/http_request.h"

namespace mooncake {

std::vector<std::string> FuzzSeeds() {
  return {
      "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET /health?x=1 HTTP/1.0\n\n",
      "\r\nPOST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
      "GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n",
      "GET / HTTP/1.1\r\n" + std::string(9000, 'x'),
      "GET /\x01 HTTP/1.1\r\n\r\n",
      "PUT /metadata?key=a%2Fb+c HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
      "PUT /metadata?key=%zz HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nab",
      "PUT /metadata?key=x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
      "DELETE /metadata?x=1&key=%41 HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
      "POST /drain?deadline_ms=30000&bandwidth=1G HTTP/1.1\r\n\r\n",
      "POST /preempt?deadline_ms=0&bandwidth=-1&x HTTP/1.1\r\n\r\n",
      "",
  };
}

}  // namespace mooncake

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using mooncake::node::HttpLimits;
  using mooncake::node::ParseHttpRequest;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const HttpLimits limits{.max_head_bytes = 512, .max_headers = 8};
  auto r = ParseHttpRequest(in, limits);
  if (!r.ok()) {
    MC_ASSERT(absl::IsInvalidArgument(r.status()) || absl::IsResourceExhausted(r.status()),
              "unexpected error code");
    return 0;
  }
  if (!r->has_value()) {
    MC_ASSERT(in.size() < limits.max_head_bytes, "incomplete past the head limit");
    return 0;
  }
  const auto& req = **r;
  MC_ASSERT(req.head_bytes > 0 && req.head_bytes <= in.size(), "head outside the input");
  MC_ASSERT(req.head_bytes <= limits.max_head_bytes, "head over the limit");
  MC_ASSERT(req.headers.size() <= limits.max_headers, "too many headers");
  MC_ASSERT(!req.path.empty() && req.target.starts_with(req.path), "path not a target prefix");
  auto again = ParseHttpRequest(in.substr(0, req.head_bytes), limits);
  MC_ASSERT(again.ok() && again->has_value(), "the head alone does not parse");
  MC_ASSERT((*again)->target == req.target && (*again)->headers == req.headers, "re-parse differs");

  auto length = mooncake::node::RequestBodyBytes(req);
  if (!length.ok()) {
    const int status = mooncake::node::HttpStatusForParseError(length.status());
    MC_ASSERT(status == 400 || status == 501, "a body length error is not 400 or 501");
  } else if (length->has_value() && in.size() - req.head_bytes >= **length) {
    const std::string_view body = in.substr(req.head_bytes, **length);
    MC_ASSERT(body.size() == **length && body.data() + body.size() <= in.data() + in.size(),
              "body outside the input");
  }
  auto drain = mooncake::node::ParseDrainQuery(req.query);
  MC_ASSERT(drain.ok() || absl::IsInvalidArgument(drain.status()), "unexpected drain error code");
  if (drain.ok()) {
    MC_ASSERT(drain->deadline_ms >= 1 && drain->deadline_ms <= mooncake::node::kMaxDrainDeadlineMs,
              "a drain deadline out of range");
  }
  auto key = mooncake::node::QueryParameter(req.query, "key");
  MC_ASSERT(key.ok() || absl::IsInvalidArgument(key.status()), "unexpected query error code");
  if (key.ok() && key->has_value()) {
    MC_ASSERT((*key)->size() <= req.query.size(), "a decoded key longer than its query");
    // Every byte escaped decodes back to the same key.
    std::string encoded = "key=";
    for (unsigned char c : **key) {
      constexpr char kHex[] = "0123456789ABCDEF";
      encoded += {'%', kHex[c >> 4], kHex[c & 15]};
    }
    auto again_key = mooncake::node::QueryParameter(encoded, "key");
    MC_ASSERT(again_key.ok() && again_key->has_value() && **again_key == **key,
              "an escaped key does not decode to itself");
  }
  return 0;
}
