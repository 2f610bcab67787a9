// Worker ids: how a worker names itself to the master, and what a client
// reads back out of a replica's worker id. Worker and client both use this
// header; the format is theirs alone (the master only compares ids).
//
//   worker_id = <router endpoint> "#" <directory's router segment id, decimal>
//
// e.g. "router://host/123|local://0|shm://@mc.123.0|tcp://127.0.0.1:4000#76..."
// The router endpoint (mooncake/transport/router.h) carries the worker's
// host, pid and transports' endpoints; the number names the worker's segment
// directory (segment_directory_format.h). A fresh worker process has a fresh
// endpoint (pid, ports, socket names), so worker ids are unique per process
// as master.proto requires.
//
// Thread-safety: pure functions.
#ifndef MOONCAKE_STORE_RPC_WORKER_ID_H_
#define MOONCAKE_STORE_RPC_WORKER_ID_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"

namespace mooncake::rpc {

// A worker id split into its parts.
struct WorkerAddress {
  std::string router_endpoint;
  uint64_t directory_segment_id = 0;
  std::string host;  // from the router endpoint: "router://<host>/<pid>|..."
};

inline std::string FormatWorkerId(std::string_view router_endpoint, uint64_t directory_id) {
  return absl::StrCat(AbslView(router_endpoint), "#", directory_id);
}

// INVALID_ARGUMENT for an id FormatWorkerId did not produce.
inline absl::StatusOr<WorkerAddress> ParseWorkerId(std::string_view worker_id) {
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("worker id '", AbslView(worker_id),
                     "' is not <router endpoint>#<directory segment id> (a mooncake worker)"));
  };
  constexpr std::string_view kScheme = "router://";
  const size_t hash = worker_id.rfind('#');
  if (hash == std::string_view::npos || !worker_id.starts_with(kScheme)) return bad();
  WorkerAddress a;
  if (!absl::SimpleAtoi(AbslView(worker_id.substr(hash + 1)), &a.directory_segment_id) ||
      a.directory_segment_id == 0) {
    return bad();
  }
  a.router_endpoint = std::string(worker_id.substr(0, hash));
  const std::string_view rest = worker_id.substr(kScheme.size());
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos || slash == 0) return bad();
  a.host = std::string(rest.substr(0, slash));
  return a;
}

}  // namespace mooncake::rpc

#endif  // MOONCAKE_STORE_RPC_WORKER_ID_H_
