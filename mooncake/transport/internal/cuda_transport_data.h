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

// One cudaMemcpyAsync plus its completion event on the segment's GPU.
inline void CudaTransport::Issue(Request& r, const TransferRequest& req) {
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
    r.status = CudaStatus(e, "cudaMemcpyAsync");
    return;
  }
  e = cudaEventCreateWithFlags(&r.event, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(r.event, stream);
  if (e != cudaSuccess) {
    // The copy is in the stream: without an event, wait for it here.
    cudaGetLastError();
    if (r.event != nullptr) cudaEventDestroy(r.event);
    r.event = nullptr;
    const cudaError_t sync = cudaStreamSynchronize(stream);
    r.status = sync == cudaSuccess ? absl::OkStatus() : CudaStatus(sync, "cudaStreamSynchronize");
  }
}

inline void CudaTransport::Refresh(Batch& b) {
  for (Request& r : b.requests) {
    if (r.done || r.event == nullptr) continue;
    const cudaError_t e = cudaEventQuery(r.event);
    if (e == cudaErrorNotReady) continue;
    if (e != cudaSuccess) cudaGetLastError();
    Finish(b, r, CudaStatus(e, "copy failed on the GPU"));
  }
}

inline absl::StatusOr<BatchId> CudaTransport::Submit(std::span<const TransferRequest> requests) {
  if (requests.empty() || requests.size() > kMaxBatchRequests) {
    return absl::InvalidArgumentError(absl::StrCat("Submit: a batch holds 1..", kMaxBatchRequests,
                                                   " requests, got ", requests.size()));
  }
  absl::MutexLock lock(&mu_);
  if (batches_.size() >= options_.batches_in_flight_max) {
    return absl::ResourceExhaustedError(
        absl::StrCat("Submit: ", batches_.size(), " batches in flight; Wait for some first"));
  }
  const BatchId id = next_batch_++;
  auto batch = std::make_unique<Batch>();
  batch->submitted = absl::Now();
  batch->requests.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const TransferRequest& q = requests[i];
    Request& r = batch->requests[i];
    r.op = q.op;
    r.length = q.length;
    auto h = handles_.find(q.segment);
    if (q.local_addr == nullptr || q.length == 0 || q.remote_offset + q.length < q.remote_offset) {
      Finish(*batch, r, absl::InvalidArgumentError("null address, zero length or overflow"));
    } else if (h == handles_.end()) {
      Finish(*batch, r, absl::NotFoundError(absl::StrCat("unknown or closed handle ", q.segment)));
    } else if (h->second.local && !segments_.contains(h->second.id)) {
      Finish(*batch, r, absl::NotFoundError("the segment was unregistered by its owner"));
    } else if (q.remote_offset + q.length > h->second.length) {
      Finish(*batch, r,
             absl::OutOfRangeError(absl::StrCat("[", q.remote_offset, ", ",
                                                q.remote_offset + q.length, ") is outside the ",
                                                h->second.length, "-byte segment")));
    } else {
      Issue(r, q);
      if (r.event == nullptr) Finish(*batch, r, r.status);
    }
  }
  batches_[id] = std::move(batch);
  return id;
}

inline absl::StatusOr<BatchProgress> CudaTransport::Poll(BatchId id) {
  absl::MutexLock lock(&mu_);
  auto it = batches_.find(id);
  if (it == batches_.end()) return absl::NotFoundError(absl::StrCat("Poll: unknown batch ", id));
  Refresh(*it->second);
  const Batch& b = *it->second;
  return BatchProgress{b.requests.size(), b.done_count - b.failed_count, b.failed_count};
}

inline BatchResult CudaTransport::Take(BatchId id) {
  auto it = batches_.find(id);
  MC_ASSERT(it != batches_.end(), "Take of an unknown batch");
  BatchResult result;
  for (const Request& r : it->second->requests) {
    MC_DASSERT(r.done && r.event == nullptr, "batch taken with copies in flight");
    result.statuses.push_back(r.status);
    metrics_.RecordRequest(r.op, r.length, r.status.ok());
  }
  metrics_.RecordBatchLatencyNs(
      static_cast<uint64_t>(absl::ToInt64Nanoseconds(absl::Now() - it->second->submitted)));
  batches_.erase(it);
  return result;
}

inline absl::StatusOr<BatchResult> CudaTransport::Wait(BatchId id, absl::Time deadline) {
  for (int round = 0;; ++round) {
    {
      absl::MutexLock lock(&mu_);
      auto it = batches_.find(id);
      if (it == batches_.end() || it->second->cancelling) {
        return absl::NotFoundError(absl::StrCat("Wait: unknown or cancelled batch ", id));
      }
      Refresh(*it->second);
      if (it->second->done_count == it->second->requests.size()) return Take(id);
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
  absl::MutexLock lock(&mu_);
  auto it = batches_.find(id);
  if (it == batches_.end() || it->second->cancelling) {
    return absl::NotFoundError(absl::StrCat("Cancel: unknown or cancelled batch ", id));
  }
  Batch& b = *it->second;
  b.cancelling = true;
  Refresh(b);
  for (Request& r : b.requests) {
    if (r.done) continue;
    // The GPU accepted the copy and cannot drop it: wait until it is over.
    cudaEventSynchronize(r.event);
    Finish(b, r, absl::CancelledError("request cancelled before it completed"));
  }
  return Take(id);
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
    absl::MutexLock lock(&mu_);
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
