// The store's RDMA route: how a worker's and a client's transport Router get
// an RDMA transport (transport/rdma_transport.h). The Router ranks it below
// local, cuda and shm and above tcp (transport/router.h), so a peer that both
// sides reach over RDMA is read and written over it, and a slice that fails on
// RDMA fails over to TCP (Router::failovers() counts it; a client shows it as
// ClientStats::transport_failovers).
//
// Which RDMA transport. RdmaTransportFactory, when set, makes it (tests hand
// in RdmaEngine<FakeVerbs> on one in-process fabric); when empty, the real
// verbs do, in a build with --config=rdma (kRdmaBuilt).
//
// The backend. internal/rdma_backend_on.h (links libibverbs) and
// internal/rdma_backend_off.h; the BUILD file selects which target this one
// depends on, and the "on" target defines MOONCAKE_STORE_RDMA for its
// dependents. This is the store's only backend #if: worker.h, client_core.h
// and the options include this header and never test the macro.
//
// A host with no RDMA device (MakeRdmaTransport's FailedPrecondition) simply
// gets no RDMA route: the store runs on its other transports.
//
// Authentication (docs/security.md): `auth` makes the real verbs' control
// channel run base/auth.h's handshake; `refuse_tenants` (a worker that checks
// tenants' capabilities) serves it to "cluster" only, so tenants' clients get
// no queue pair and no memory key, and read and write over TCP. A factory
// makes its transport as it likes (tests).
//
// Thread-safety: AppendRdmaRoute has no state; call it from any thread.
#ifndef MOONCAKE_STORE_CLIENT_RDMA_ROUTE_H_
#define MOONCAKE_STORE_CLIENT_RDMA_ROUTE_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/transport/internal/any_transport.h"
#include "mooncake/transport/internal/rdma_path.h"

#if defined(MOONCAKE_STORE_RDMA)  // set by //mooncake/store/client:rdma_backend_on
#include "mooncake/store/client/internal/rdma_backend_on.h"
#else
#include "mooncake/store/client/internal/rdma_backend_off.h"
#endif

namespace mooncake::client {

// Makes the RDMA transport for one Router (its Name() must be "rdma").
using RdmaTransportFactory =
    std::function<absl::StatusOr<std::unique_ptr<transport_internal::AnyTransport>>()>;

// Whether this build has the real RDMA transport (--config=rdma): the default
// of WorkerOptions::serve_rdma and ClientOptions::use_rdma.
inline constexpr bool kRdmaBuilt = client_internal::kRdmaBackendBuilt;

// Appends the RDMA transport to `list` when `enabled`: `factory`'s, else the
// real verbs' listening for its control channel on `listen_host`. No device:
// nothing appended, OK unless `required` (then FAILED_PRECONDITION). Also
// FAILED_PRECONDITION when enabled in a build without RDMA and no factory is
// set; other errors as the transport's Create says. `paths`: the real verbs'
// local ports (RdmaOptions::paths); empty: MOONCAKE_RDMA_PATHS, else the
// first device's port 1. A factory makes its transport as it likes.
inline absl::Status AppendRdmaRoute(
    bool enabled, bool required, const RdmaTransportFactory& factory,
    const std::string& listen_host,
    std::vector<std::unique_ptr<transport_internal::AnyTransport>>* list,
    std::shared_ptr<const auth::Credentials> auth = nullptr, bool refuse_tenants = false,
    const std::vector<transport_internal::RdmaPath>& paths = {}) {
  MC_ASSERT(list != nullptr, "AppendRdmaRoute needs a list");
  if (!enabled) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<transport_internal::AnyTransport>> t =
      factory ? factory()
              : client_internal::MakeDefaultRdmaTransport(listen_host, std::move(auth),
                                                          refuse_tenants, paths);
  if (!t.ok()) {
    if (factory || !kRdmaBuilt || !client_internal::IsNoRdmaDevice(t.status())) {
      return t.status();
    }
    if (required) {
      return absl::FailedPreconditionError(absl::StrCat(
          "RDMA was asked for, but this host has no RDMA device: ", t.status().message()));
    }
    return absl::OkStatus();  // no device on this host: no RDMA route
  }
  MC_ASSERT(*t != nullptr && (*t)->Name() == "rdma",
            "the RDMA factory must make an rdma transport");
  list->push_back(std::move(*t));
  return absl::OkStatus();
}

}  // namespace mooncake::client

#endif  // MOONCAKE_STORE_CLIENT_RDMA_ROUTE_H_
