// CudaTransport member definitions; included only by cuda_transport.h.
// IWYU pragma: private, include "mooncake/transport/cuda_transport.h"
#ifndef MOONCAKE_TRANSPORT_INTERNAL_CUDA_TRANSPORT_IMPL_H_
#define MOONCAKE_TRANSPORT_INTERNAL_CUDA_TRANSPORT_IMPL_H_

#ifndef MOONCAKE_TRANSPORT_CUDA_TRANSPORT_H_
#error "include mooncake/transport/cuda_transport.h instead"
#endif

namespace mooncake::transport {

inline absl::Status CudaTransport::Init() {
  static std::atomic<uint64_t> instances{0};
  socket_name_ = absl::StrCat("mooncake-cuda-", ::getpid(), "-", instances.fetch_add(1));
  {
    MutexLock lock(&mu_);
    streams_.resize(static_cast<size_t>(device_count_));
    for (int d = 0; d < device_count_; ++d) {
      transport_internal::CudaDeviceGuard guard(d);
      for (int k = 0; k < options_.streams_per_device; ++k) {
        cudaStream_t s = nullptr;
        RETURN_IF_ERROR(
            CudaStatus(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"));
        streams_[static_cast<size_t>(d)].push_back(s);
      }
    }
  }
  ASSIGN_OR_RETURN(listen_, transport_internal::cuda_ipc::Listen(socket_name_));
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return ErrnoToStatus(errno, "pipe2");
  }
  wake_read_ = UniqueFd(fds[0]);
  wake_write_ = UniqueFd(fds[1]);
  server_ = std::thread([this] { Serve(); });
  return absl::OkStatus();
}

inline void CudaTransport::Shutdown() {
  if (server_.joinable()) {
    stopping_.store(true, std::memory_order_relaxed);  // the pipe write publishes it
    const char byte = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_write_.get(), &byte, 1);
    server_.join();
  }
  MutexLock lock(&mu_);
  batches_.ForEach([](BatchId, Batch& b) {
    for (cudaEvent_t e : b.extra.events) {
      if (e != nullptr) {
        cudaEventSynchronize(e);
        cudaEventDestroy(e);
      }
    }
  });
  batches_.Clear();
  for (auto& [key, m] : mappings_) cudaIpcCloseMemHandle(m.base);
  mappings_.clear();
  for (auto& per_device : streams_) {
    for (cudaStream_t s : per_device) cudaStreamDestroy(s);
  }
  streams_.clear();
}

// Finds the allocation around the segment and takes its IPC handle. A
// segment that cannot be exported stays usable in this process.
inline absl::Status CudaTransport::ResolveExport(LocalSegment& seg, void* addr, uint64_t length) {
  auto range = transport_internal::CuMemGetAddressRange();
  unsigned long long base = 0;
  size_t size = 0;
  if (range == nullptr || range(&base, &size, reinterpret_cast<unsigned long long>(addr)) != 0) {
    seg.export_error = absl::FailedPreconditionError(
        "cuMemGetAddressRange failed: the segment's allocation is unknown, so it cannot be "
        "exported over CUDA IPC");
    return absl::OkStatus();
  }
  const auto a = reinterpret_cast<unsigned long long>(addr);
  if (a + length > base + size) {
    return absl::InvalidArgumentError(absl::StrCat("RegisterMemory: [addr, addr + ", length,
                                                   ") runs past the end of its ", size,
                                                   "-byte cudaMalloc allocation"));
  }
  const cudaError_t e = cudaIpcGetMemHandle(&seg.handle, reinterpret_cast<void*>(base));
  if (e != cudaSuccess) {
    cudaGetLastError();
    seg.export_error = CudaStatus(e,
                                  "cudaIpcGetMemHandle (memory from a cudaMallocAsync pool or "
                                  "VMM is not IPC-exportable this way)");
    return absl::OkStatus();
  }
  seg.offset = a - base;
  seg.exportable = true;
  return absl::OkStatus();
}

inline absl::StatusOr<SegmentDesc> CudaTransport::RegisterMemory(void* addr, uint64_t length,
                                                                 MemoryLocation location) {
  const auto a = reinterpret_cast<uint64_t>(addr);
  if (addr == nullptr || length == 0 || a + length < a) {
    return absl::InvalidArgumentError("RegisterMemory: null address, zero length or overflow");
  }
  LocalSegment seg;
  seg.addr = static_cast<uint8_t*>(addr);
  seg.length = length;
  seg.location = location;
  if (location.kind == MemoryKind::kGpu) {
    if (location.device < 0 || location.device >= device_count_) {
      return absl::InvalidArgumentError(absl::StrCat("RegisterMemory: GPU ", location.device,
                                                     " does not exist (", device_count_,
                                                     " visible)"));
    }
    cudaPointerAttributes attr{};
    const cudaError_t e = cudaPointerGetAttributes(&attr, addr);
    if (e != cudaSuccess) cudaGetLastError();
    if (e != cudaSuccess || attr.type != cudaMemoryTypeDevice || attr.device != location.device) {
      return absl::FailedPreconditionError(
          absl::StrCat("RegisterMemory: the range is not device memory of GPU ", location.device,
                       " (allocate it with cudaMalloc on that device)"));
    }
    transport_internal::CudaDeviceGuard guard(location.device);
    RETURN_IF_ERROR(ResolveExport(seg, addr, length));
  } else {
    seg.export_error = absl::FailedPreconditionError(
        "host-memory segments of the CUDA transport are same-process only; use the SHM "
        "transport for host memory across processes");
  }
  MutexLock lock(&mu_);
  const SegmentId id = next_segment_++;
  segments_[id] = seg;
  return SegmentDesc{id, length, location};
}

inline absl::Status CudaTransport::UnregisterMemory(SegmentId id) {
  MutexLock lock(&mu_);
  if (segments_.erase(id) == 0) {
    return absl::NotFoundError(absl::StrCat("UnregisterMemory: no segment ", id));
  }
  return absl::OkStatus();
}

inline absl::StatusOr<CudaTransport::Opened> CudaTransport::Import(std::string_view name,
                                                                   SegmentId id) {
  ASSIGN_OR_RETURN(const transport_internal::cuda_ipc::Reply reply,
                   transport_internal::cuda_ipc::Ask(name, id, absl::Now() + options_.io_timeout));
  RETURN_IF_ERROR(transport_internal::cuda_ipc::ReplyStatus(reply));
  if (reply.device < 0 || reply.device >= device_count_) {
    return absl::FailedPreconditionError(
        absl::StrCat("the owner's GPU ", reply.device, " is not visible in this process (",
                     device_count_, " visible): align CUDA_VISIBLE_DEVICES"));
  }
  const std::string key(reply.handle.data(), reply.handle.size());
  MutexLock lock(&mu_);
  Mapping& m = mappings_[key];
  if (m.refs == 0) {
    cudaIpcMemHandle_t handle;
    std::memcpy(&handle, reply.handle.data(), sizeof(handle));
    transport_internal::CudaDeviceGuard guard(reply.device);
    const cudaError_t e = cudaIpcOpenMemHandle(&m.base, handle, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      cudaGetLastError();
      mappings_.erase(key);
      return CudaStatus(e, "cudaIpcOpenMemHandle");
    }
  }
  ++m.refs;
  return Opened{static_cast<uint8_t*>(m.base) + reply.offset,
                reply.length,
                MemoryLocation::Gpu(reply.device),
                id,
                false,
                key};
}

inline absl::StatusOr<RemoteSegment> CudaTransport::OpenSegment(std::string_view endpoint,
                                                                SegmentId id) {
  constexpr std::string_view kScheme = "cuda://";
  if (endpoint.substr(0, kScheme.size()) != kScheme || endpoint.size() == kScheme.size() ||
      endpoint.size() > kScheme.size() + 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad endpoint '", AbslView(endpoint), "'; expected cuda://<socket name>"));
  }
  const std::string_view name = endpoint.substr(kScheme.size());
  Opened opened;
  if (name == socket_name_) {
    MutexLock lock(&mu_);
    auto it = segments_.find(id);
    if (it == segments_.end()) return absl::NotFoundError(absl::StrCat("no segment ", id));
    opened = Opened{it->second.addr, it->second.length, it->second.location, id, true, {}};
  } else {
    ASSIGN_OR_RETURN(opened, Import(name, id));
  }
  MutexLock lock(&mu_);
  const SegmentHandle handle = next_handle_++;
  handles_[handle] = opened;
  return RemoteSegment{handle, id, opened.length, opened.location};
}

inline absl::Status CudaTransport::CloseSegment(SegmentHandle handle) {
  MutexLock lock(&mu_);
  auto it = handles_.find(handle);
  if (it == handles_.end()) {
    return absl::NotFoundError(absl::StrCat("CloseSegment: unknown handle ", handle));
  }
  if (!it->second.local) {
    auto m = mappings_.find(it->second.mapping_key);
    MC_ASSERT(m != mappings_.end(), "imported segment without a mapping");
    if (--m->second.refs == 0) {
      cudaIpcCloseMemHandle(m->second.base);
      mappings_.erase(m);
    }
  }
  handles_.erase(it);
  return absl::OkStatus();
}

inline void CudaTransport::Finish(Batch& b, size_t index, const absl::Status& s) {
  cudaEvent_t& event = b.extra.events[index];
  if (event != nullptr) cudaEventDestroy(event);
  event = nullptr;
  batches_.Finish(b, index, s);
}

}  // namespace mooncake::transport

#endif  // MOONCAKE_TRANSPORT_INTERNAL_CUDA_TRANSPORT_IMPL_H_
