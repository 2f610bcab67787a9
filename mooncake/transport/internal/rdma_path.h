// RdmaPath: one local RDMA port (a device and a port number) that the RDMA
// transport may spread a peer's traffic over (RdmaOptions::paths,
// rdma_engine.h), and ParseRdmaPaths for lists of them. Kept apart from the
// engine so that options structs can hold paths without the engine's code.
//
// Thread-safety: plain data and a pure function.
#ifndef MOONCAKE_TRANSPORT_INTERNAL_RDMA_PATH_H_
#define MOONCAKE_TRANSPORT_INTERNAL_RDMA_PATH_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "mooncake/base/absl_compat.h"

namespace mooncake::transport_internal {

// One local port a peer's traffic may take (RdmaOptions::paths).
struct RdmaPath {
  std::string device_name;  // empty: the first device found
  uint8_t port = 1;
  int gid_index = 0;  // RoCE v2 usually wants the IPv4-mapped GID (often 3)
  double weight = 1;  // its window's share against the other paths' (> 0)
};

inline constexpr size_t kRdmaPathsMax = 8;

// What one path has carried (RdmaEngine::path_stats()).
struct RdmaPathStats {
  std::string name;  // "device:port"
  double weight = 1;
  uint64_t wrs_done = 0;  // completed OK on this path
  uint64_t bytes_done = 0;
  uint64_t wrs_moved = 0;  // failed here for the path's sake and went to another path
  uint64_t breaks = 0;     // queue pairs of this path that broke
  uint64_t connect_failures = 0;
};

// Parses a list of local paths, "DEVICE[:PORT[:GID_INDEX]]" separated by
// commas (port 1 and GID index 0 by default), e.g. "mlx5_0:1,mlx5_1:1" or
// "rocep1s0:1:3,rocep2s0:1:3": the store's MOONCAKE_RDMA_PATHS. Each path
// has weight 1. InvalidArgument names the entry that does not parse.
inline absl::StatusOr<std::vector<RdmaPath>> ParseRdmaPaths(std::string_view text) {
  std::vector<RdmaPath> out;
  for (absl::string_view entry : absl::StrSplit(AbslView(text), ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(entry, ':');
    RdmaPath p;
    p.device_name = std::string(parts[0]);
    uint32_t port = 1;
    int gid = 0;
    const bool ok =
        !p.device_name.empty() && parts.size() <= 3 &&
        (parts.size() < 2 || (absl::SimpleAtoi(parts[1], &port) && port >= 1 && port <= 255)) &&
        (parts.size() < 3 || (absl::SimpleAtoi(parts[2], &gid) && gid >= 0));
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("RDMA path \"", entry,
                       "\": expected DEVICE[:PORT[:GID_INDEX]], port 1..255, GID index >= 0"));
    }
    p.port = static_cast<uint8_t>(port);
    p.gid_index = gid;
    out.push_back(std::move(p));
  }
  if (out.empty()) return absl::InvalidArgumentError("RDMA paths: none listed");
  if (out.size() > kRdmaPathsMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("RDMA paths: at most ", kRdmaPathsMax, ", got ", out.size()));
  }
  return out;
}

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_RDMA_PATH_H_
