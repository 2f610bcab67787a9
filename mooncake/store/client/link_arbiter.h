// Router settings that put a host's shared link arbiter (qos/shm_arbiter.h)
// on a router's NIC routes: the store client (ClientOptions::qos_link) and the
// worker's copies between workers (WorkerOptions::qos_link) use it.
//
//   ASSIGN_OR_RETURN(RouterOptions ro, LinkArbiterRouterOptions("eth0", 125e6, 1, list));
//   ASSIGN_OR_RETURN(auto router, Router::CreateFromList(ro, std::move(list)));
//
// Every transfer of such a router is in class `cls` (0 latency-critical, 1
// bulk): Submit uses the router's last class, so the router gets cls + 1
// classes. Its slices are cut to the arbiter's largest grant of that class.
// Only the tcp and rdma routes of `list` take grants; local and shm copies
// stay on the host and take none.
//
// Errors: INVALID_ARGUMENT for a class above 1, a rate of 0 or a bad link
// name; FAILED_PRECONDITION when the link exists at another rate
// (ShmArbiter::Open).
#ifndef MOONCAKE_STORE_CLIENT_LINK_ARBITER_H_
#define MOONCAKE_STORE_CLIENT_LINK_ARBITER_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/qos/shm_arbiter.h"
#include "mooncake/transport/internal/any_transport.h"
#include "mooncake/transport/router.h"

namespace mooncake::client {

inline absl::StatusOr<transport::RouterOptions> LinkArbiterRouterOptions(
    std::string_view link, uint64_t bytes_per_s, uint32_t cls,
    const std::vector<std::unique_ptr<transport_internal::AnyTransport>>& list) {
  if (cls > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("qos class ", cls, "; use 0 (latency-critical) or 1 (bulk)"));
  }
  if (bytes_per_s == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "link '", std::string(link), "' needs its rate in bytes per second (what it sustains)"));
  }
  qos::ShmArbiterOptions ao;
  ao.priority_classes = 2;
  ASSIGN_OR_RETURN(std::unique_ptr<qos::ShmArbiter> opened,
                   qos::ShmArbiter::Open(link, bytes_per_s, ao));
  std::shared_ptr<qos::ShmArbiter> arbiter = std::move(opened);
  transport::RouterOptions ro;
  ro.priority_classes = cls + 1;
  ro.slice_bytes = std::min(ro.slice_bytes, arbiter->max_grant_bytes(cls));
  for (const auto& t : list) {
    if (t->Name() == "tcp" || t->Name() == "rdma") {
      ro.arbiters.push_back(transport::RouteArbiter{std::string(t->Name()), arbiter});
    }
  }
  return ro;
}

}  // namespace mooncake::client

#endif  // MOONCAKE_STORE_CLIENT_LINK_ARBITER_H_
