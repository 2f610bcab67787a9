// CudaTransport data path and IPC server; included only by cuda_transport.h.
// IWYU pragma: private, include "mooncake/transport/cuda_transport.h"
#ifndef MOONCAKE_TRANSPORT_INTERNAL_CUDA_TRANSPORT_DATA_H_
#define MOONCAKE_TRANSPORT_INTERNAL_CUDA_TRANSPORT_DATA_H_

#ifndef MOONCAKE_TRANSPORT_CUDA_TRANSPORT_H_
#error "include mooncake/transport/cuda_transport.h instead"
#endif

#include <poll.h>
#include <sys/socket.h>

namespace mooncake::transport {

// One cudaMemcpyAsync plus its completion event on the segment's GPU. Leaves
// *event null when the copy is already over (or never started): the status
// is then the request's result.
inline absl::Status CudaTransport::Issue(const TransferRequest& req, cudaEvent_t* event) {
  *event = nullptr;
  const Opened& o = handles_.at(req.segment);
  const int device = o.location.kind == MemoryKind::kGpu ? o.location.device : 0;
  transport_internal::CudaDeviceGuard guard(device);
  auto& pool = streams_[static_cast<size_t>(device)];
  cudaStream_t stream = pool[next_stream_++ % pool.size()];
  uint8_t* remote = o.ptr + req.remote_offset;
  void* dst = req.op == OpCode::kRead ? req.local_addr : static_cast<void*>(remote);
  const void* src = req.op == OpCode::kRead ? static_cast<const void*>(remote) : req.local_addr;
  cudaError_t e = cudaMemcpyAsync(dst, src, req.length, cudaMemcpyDefault, stream);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return CudaStatus(e, "cudaMemcpyAsync");
  }
  e = cudaEventCreateWithFlags(event, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(*event, stream);
  if (e == cudaSuccess) return absl::OkStatus();
  // The copy is in the stream: without an event, wait for it here.
  cudaGetLastError();
  if (*event != nullptr) cudaEventDestroy(*event);
  *event = nullptr;
  const cudaError_t sync = cudaStreamSynchronize(stream);
  return sync == cudaSuccess ? absl::OkStatus() : CudaStatus(sync, "cudaStreamSynchronize");
}

inline void CudaTransport::Refresh(Batch& b) {
  for (size_t i = 0; i < b.requests.size(); ++i) {
    if (b.requests[i].done || b.extra.events[i] == nullptr) continue;
    const cudaError_t e = cudaEventQuery(b.extra.events[i]);
    if (e == cudaErrorNotReady) continue;
    if (e != cudaSuccess) cudaGetLastError();
    Finish(b, i, CudaStatus(e, "copy failed on the GPU"));
  }
}

inline absl::StatusOr<BatchId> CudaTransport::Submit(std::span<const TransferRequest> requests) {
  if (requests.empty() || requests.size() > kMaxBatchRequests) {
    return absl::InvalidArgumentError(absl::StrCat("Submit: a batch holds 1..", kMaxBatchRequests,
                                                   " requests, got ", requests.size()));
  }
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(batches_.CheckRoom());
  auto [id, batch] = batches_.Create(requests);
  batch->extra.events.assign(requests.size(), nullptr);
  for (size_t i = 0; i < requests.size(); ++i) {
    const TransferRequest& q = requests[i];
    auto h = handles_.find(q.segment);
    if (q.local_addr == nullptr || q.length == 0 || q.remote_offset + q.length < q.remote_offset) {
      Finish(*batch, i, absl::InvalidArgumentError("null address, zero length or overflow"));
    } else if (h == handles_.end()) {
      Finish(*batch, i, absl::NotFoundError(absl::StrCat("unknown or closed handle ", q.segment)));
    } else if (h->second.local && !segments_.contains(h->second.id)) {
      Finish(*batch, i, absl::NotFoundError("the segment was unregistered by its owner"));
    } else if (q.remote_offset + q.length > h->second.length) {
      Finish(*batch, i,
             absl::OutOfRangeError(absl::StrCat("[", q.remote_offset, ", ",
                                                q.remote_offset + q.length, ") is outside the ",
                                                h->second.length, "-byte segment")));
    } else {
      const absl::Status issued = Issue(q, &batch->extra.events[i]);
      if (batch->extra.events[i] == nullptr) Finish(*batch, i, issued);
    }
  }
  return id;
}

inline absl::StatusOr<BatchProgress> CudaTransport::Poll(BatchId id) {
  MutexLock lock(&mu_);
  Batch* b = batches_.Find(id);
  if (b == nullptr) return transport_internal::UnknownBatchError(id);
  Refresh(*b);
  return b->progress();
}

inline absl::StatusOr<BatchResult> CudaTransport::Wait(BatchId id, absl::Time deadline) {
  for (int round = 0;; ++round) {
    {
      MutexLock lock(&mu_);
      ASSIGN_OR_RETURN(Batch * b, batches_.FindActive(id));
      Refresh(*b);
      if (b->all_done()) return batches_.Take(id);
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("Wait: batch ", id, " still in flight"));
    }
    if (round < 64) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(std::min(absl::Microseconds(20), deadline - now));
    }
  }
}

inline absl::StatusOr<BatchResult> CudaTransport::Cancel(BatchId id) {
  MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Batch * b, batches_.FindActive(id));
  b->cancelling = true;
  Refresh(*b);
  for (size_t i = 0; i < b->requests.size(); ++i) {
    if (b->requests[i].done) continue;
    // The GPU accepted the copy and cannot drop it: wait until it is over.
    cudaEventSynchronize(b->extra.events[i]);
    Finish(*b, i, absl::CancelledError("request cancelled before it completed"));
  }
  return batches_.Take(id);
}

// --- IPC server: answers OpenSegment requests from other processes. ----------

inline void CudaTransport::Serve() {
  while (!stopping_.load(std::memory_order_relaxed)) {
    pollfd fds[2] = {{wake_read_.get(), POLLIN, 0}, {listen_.get(), POLLIN, 0}};
    if (::poll(fds, 2, 200) <= 0) continue;
    if (fds[0].revents != 0) break;
    for (;;) {
      const int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) break;
      UniqueFd conn(fd);
      Answer(conn.get());
    }
  }
}

inline void CudaTransport::Answer(int fd) {
  namespace ipc = transport_internal::cuda_ipc;
  const absl::Time deadline = absl::Now() + options_.io_timeout;
  ipc::Request req;
  if (!ipc::RecvBytes(fd, &req, sizeof(req), deadline).ok()) return;
  ipc::Reply reply;
  if (req.magic != ipc::kMagic || req.version != ipc::kVersion) {
    ipc::SetReplyStatus(&reply, absl::FailedPreconditionError("CUDA IPC: bad magic or version"));
  } else {
    MutexLock lock(&mu_);
    auto it = segments_.find(req.segment_id);
    if (it == segments_.end()) {
      ipc::SetReplyStatus(&reply, absl::NotFoundError(absl::StrCat("no segment ", req.segment_id,
                                                                   " at ", LocalEndpoint())));
    } else if (!it->second.exportable) {
      ipc::SetReplyStatus(&reply, it->second.export_error);
    } else {
      const LocalSegment& s = it->second;
      reply.length = s.length;
      reply.offset = s.offset;
      reply.device = s.location.device;
      reply.kind = static_cast<uint8_t>(s.location.kind);
      std::memcpy(reply.handle.data(), &s.handle, sizeof(s.handle));
    }
  }
  ipc::SendBytes(fd, &reply, sizeof(reply), deadline).IgnoreError();
}

}  // namespace mooncake::transport

#endif  // MOONCAKE_TRANSPORT_INTERNAL_CUDA_TRANSPORT_DATA_H_
