// RdmaTransport: one-sided RDMA READ/WRITE over ibverbs RC queue pairs
// (--config=rdma; links libibverbs).
//
//   ASSIGN_OR_RETURN(auto rdma, MakeRdmaTransport({.device_name = "mlx5_0"}));
//   ASSIGN_OR_RETURN(auto seg, rdma->RegisterMemory(buf, len, MemoryLocation::HostDram()));
//   // peer: rdma->OpenSegment("rdma://10.0.0.7:40123", seg_id) ... Submit / Wait
//
// It is RdmaEngine<IbVerbs>: every design choice (QP bring-up over the TCP
// control channel, slicing into WRs, chained posts, selective signalling,
// error-completion handling, on-the-fly registration of unregistered local
// buffers) is described in internal/rdma_engine.h and tested device-free
// against FakeVerbs (internal/rdma_engine_test.cc). This header only binds
// the real verbs.
//
// Without an RDMA device MakeRdmaTransport returns FailedPrecondition
// "no RDMA device ..." at run time (the Router then skips RDMA).
//
// Segments: any host memory (ibv_reg_mr pins it; mind RLIMIT_MEMLOCK). GPU
// memory works with GPUDirect RDMA (nvidia-peermem) by registering the
// device pointer with MemoryLocation::Gpu(n); the engine does not touch it.
// UnregisterMemory deregisters the MR at once: the device then rejects the
// peers' accesses (their requests fail with NotFound).
//
// Thread-safety: every method may be called concurrently.
#ifndef MOONCAKE_TRANSPORT_RDMA_TRANSPORT_H_
#define MOONCAKE_TRANSPORT_RDMA_TRANSPORT_H_

#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "mooncake/transport/internal/ib_verbs.h"
#include "mooncake/transport/internal/rdma_engine.h"
#include "mooncake/transport/transport.h"

namespace mooncake::transport {

using RdmaOptions = transport_internal::RdmaOptions;
using RdmaTransport = transport_internal::RdmaEngine<transport_internal::IbVerbs>;

static_assert(Transport<RdmaTransport>);

inline absl::StatusOr<std::unique_ptr<RdmaTransport>> MakeRdmaTransport(RdmaOptions options = {}) {
  return RdmaTransport::Create(transport_internal::IbVerbs{}, std::move(options));
}

}  // namespace mooncake::transport

#endif  // MOONCAKE_TRANSPORT_RDMA_TRANSPORT_H_
