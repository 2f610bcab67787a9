// The RDMA backend of rdma_route.h in a build without --config=rdma: no real
// verbs (only a factory the caller sets can add RDMA). rdma_route.h picks it;
// rdma_backend_on.h is the other build's.
#ifndef MOONCAKE_STORE_CLIENT_INTERNAL_RDMA_BACKEND_OFF_H_
#define MOONCAKE_STORE_CLIENT_INTERNAL_RDMA_BACKEND_OFF_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mooncake/base/auth.h"
#include "mooncake/transport/internal/any_transport.h"
#include "mooncake/transport/internal/rdma_path.h"

namespace mooncake::client_internal {

inline constexpr bool kRdmaBackendBuilt = false;

inline absl::StatusOr<std::unique_ptr<transport_internal::AnyTransport>> MakeDefaultRdmaTransport(
    const std::string& /*listen_host*/, std::shared_ptr<const auth::Credentials> /*auth*/,
    bool /*refuse_tenants*/, const std::vector<transport_internal::RdmaPath>& /*paths*/) {
  return absl::FailedPreconditionError(
      "RDMA requested but this build has no RDMA transport (build with --config=rdma)");
}

inline bool IsNoRdmaDevice(const absl::Status& /*s*/) { return false; }

}  // namespace mooncake::client_internal

#endif  // MOONCAKE_STORE_CLIENT_INTERNAL_RDMA_BACKEND_OFF_H_
