// Fuzzes ParseHttpRequest: any bytes give a request, "incomplete" or an
// error, never a crash; a parsed head is within the input and the limit, and
// parsing its head again gives the same request.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mooncake/base/assert.h"
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
  return 0;
}
