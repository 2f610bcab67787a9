// The RDMA backend of rdma_route.h in a --config=rdma build: the real verbs
// (transport/rdma_transport.h). rdma_route.h picks it;
// rdma_backend_off.h is the other build's.
#ifndef MOONCAKE_STORE_CLIENT_INTERNAL_RDMA_BACKEND_ON_H_
#define MOONCAKE_STORE_CLIENT_INTERNAL_RDMA_BACKEND_ON_H_

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/auth.h"
#include "mooncake/transport/internal/any_transport.h"
#include "mooncake/transport/rdma_transport.h"

namespace mooncake::client_internal {

inline constexpr bool kRdmaBackendBuilt = true;

inline absl::StatusOr<std::unique_ptr<transport_internal::AnyTransport>> MakeDefaultRdmaTransport(
    const std::string& listen_host, std::shared_ptr<const auth::Credentials> auth,
    bool refuse_tenants, const std::vector<transport_internal::RdmaPath>& paths) {
  transport::RdmaOptions o;
  // Several local ports (docs/transport.md, "Aggregation"): every peer is
  // reached over each, its transfers spread over them.
  o.paths = paths;
  if (const char* env = std::getenv("MOONCAKE_RDMA_PATHS");
      paths.empty() && env != nullptr && *env != '\0') {
    absl::StatusOr<std::vector<transport_internal::RdmaPath>> parsed =
        transport_internal::ParseRdmaPaths(env);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("MOONCAKE_RDMA_PATHS: ", parsed.status().message()));
    }
    o.paths = *std::move(parsed);
  }
  o.listen_host = listen_host;
  o.auth = std::move(auth);
  o.refuse_tenants = refuse_tenants;
  absl::StatusOr<std::unique_ptr<transport::RdmaTransport>> t = transport::MakeRdmaTransport(o);
  if (!t.ok()) return t.status();
  return std::unique_ptr<transport_internal::AnyTransport>(
      new transport_internal::AnyTransportOf<transport::RdmaTransport>(std::move(*t)));
}

// MakeRdmaTransport's answer on a host without an RDMA device.
inline bool IsNoRdmaDevice(const absl::Status& s) {
  return s.code() == absl::StatusCode::kFailedPrecondition &&
         absl::StrContains(s.message(), "no RDMA device");
}

}  // namespace mooncake::client_internal

#endif  // MOONCAKE_STORE_CLIENT_INTERNAL_RDMA_BACKEND_ON_H_
