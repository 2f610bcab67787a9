// Fuzzes FrameDecoder: arbitrary bytes, fed in chunks whose sizes come from
// the input, must give frames or one sticky error with a canonical code;
// never a crash, an over-read or a frame that does not re-encode to the
// bytes it came from.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mooncake/store/rpc/frame.h"

namespace mooncake {

std::vector<std::string> FuzzSeeds() {
  using rpc::FrameHeader;
  using rpc::FrameKind;
  std::vector<std::string> seeds;
  FrameHeader req;
  req.method_id = 7;
  req.request_id = 1;
  req.timeout_us = 5000;
  seeds.push_back(std::string(1, '\x05') + rpc::EncodeFrame(req, "abc"));
  FrameHeader resp;
  resp.kind = FrameKind::kResponse;
  resp.method_id = 7;
  resp.request_id = 1;
  resp.code = absl::StatusCode::kNotFound;
  std::string two = rpc::EncodeFrame(req, std::string(300, 'x'));
  rpc::AppendFrame(resp, "not found", &two);
  seeds.push_back(std::string(1, '\x40') + two);
  seeds.push_back(std::string(1, '\x01') + rpc::EncodeFrame(req, ""));
  return seeds;
}

}  // namespace mooncake

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mooncake::rpc;
  if (size == 0) return 0;
  // The first byte picks the chunk size; a small limit makes oversize likely.
  const size_t chunk = 1 + data[0] % 97;
  FrameDecoder dec(4096);
  size_t at = 1;
  size_t consumed = 0;
  bool failed = false;
  while (at < size && !failed) {
    const size_t n = std::min(chunk, size - at);
    dec.Append(std::string_view(reinterpret_cast<const char*>(data + at), n));
    at += n;
    for (;;) {
      auto next = dec.Next();
      if (!next.ok()) {
        const auto code = next.status().code();
        if (code != absl::StatusCode::kInvalidArgument && code != absl::StatusCode::kDataLoss &&
            code != absl::StatusCode::kUnimplemented &&
            code != absl::StatusCode::kResourceExhausted) {
          std::abort();
        }
        if (next.status().message().empty()) std::abort();
        if (dec.Next().status() != next.status()) std::abort();  // sticky
        failed = true;
        break;
      }
      if (!next->has_value()) break;
      const Frame& f = **next;
      if (f.payload.size() > 4096) std::abort();
      const std::string again = EncodeFrame(f.header, f.payload);
      if (again.size() + consumed > size - 1) std::abort();
      if (std::memcmp(again.data(), data + 1 + consumed, again.size()) != 0) std::abort();
      consumed += again.size();
    }
  }
  // The one-shot decoder agrees on a single whole frame.
  auto one = DecodeFrame(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), 4096);
  if (one.ok() && one->payload.size() + kFrameHeaderBytes != size - 1) std::abort();
  return 0;
}
