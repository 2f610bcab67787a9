// Any bytes: ParseTrace returns a Status or requests, never crashes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mooncake/index/mooncake_trace.h"

namespace mooncake {
std::vector<std::string> FuzzSeeds() {
  return {
      R"({"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2]})",
      "{\"hash_ids\": [0, 1]}\n{\"hash_ids\": [0, 2], \"x\": {\"y\": [true, null, \"s\\\"\"]}}\n",
      R"({"hash_ids": [4294967295], "timestamp": 1.5e3})",
  };
}
}  // namespace mooncake

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto trace = mooncake::index::ParseTrace(text);
  if (trace.ok()) {
    for (const auto& req : *trace) {
      for (uint64_t id : req.hash_ids) {
        if (id > 0xFFFFFFFFu) __builtin_trap();
      }
    }
  }
  return 0;
}
