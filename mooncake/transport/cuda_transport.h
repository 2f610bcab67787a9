// CudaTransport: GPU segments moved by the CUDA copy engines
// (--config=cuda; host runtime API only, no kernels).
//
//   ASSIGN_OR_RETURN(auto cuda, CudaTransport::Create());
//   void* gpu; cudaMalloc(&gpu, len);
//   ASSIGN_OR_RETURN(auto seg, cuda->RegisterMemory(gpu, len, MemoryLocation::Gpu(0)));
//   // same host, other process: cuda->OpenSegment("cuda://mooncake-cuda-123-0", id)
//
// - Segments: cudaMalloc memory of GPU n (checked with
//   cudaPointerGetAttributes) or host memory (same process only). A GPU
//   segment may start inside an allocation: its base and offset are resolved
//   with cuMemGetAddressRange (through cudaGetDriverEntryPointByVersion, so
//   only libcudart is linked) and the segment must lie inside it.
// - Same process: OpenSegment of the own endpoint yields the pointer itself.
// - Same host, other process: the owner answers on an abstract Unix socket
//   (cuda_ipc.h) with a cudaIpcMemHandle_t of the allocation plus the
//   segment's offset; the requester maps it with cudaIpcOpenMemHandle (one
//   mapping per allocation, reference-counted, closed with the last handle).
//   Device ordinals must mean the same GPU in both processes (same
//   CUDA_VISIBLE_DEVICES). The owner must keep the memory alive while peers
//   have it open: CUDA cannot revoke a mapping (UnregisterMemory stops new
//   opens and same-process requests only).
// - Transfers: each request is one cudaMemcpyAsync (cudaMemcpyDefault, so
//   host<->device, device<->device and peer copies all work through UVA) on
//   one of `streams_per_device` non-blocking streams of the segment's GPU,
//   round robin, followed by an event; Poll/Wait query the events. Local
//   buffers may be host memory (pinned is faster) or device pointers.
// - Cancel cannot recall a copy the GPU accepted: it fails unfinished
//   requests with Cancelled and synchronizes their events before returning.
// - No GPU: Create returns FailedPrecondition "no CUDA device ...".
//
// Thread-safety: every method may be called concurrently (one mutex; the
// server thread answers IPC opens).
#ifndef MOONCAKE_TRANSPORT_CUDA_TRANSPORT_H_
#define MOONCAKE_TRANSPORT_CUDA_TRANSPORT_H_

#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/transport/internal/batch_table.h"
#include "mooncake/transport/internal/cuda_ipc.h"
#include "mooncake/transport/transport.h"
#include "mooncake/transport/transport_metrics.h"

namespace mooncake::transport_internal {

// Makes `device` current for the calling thread for one scope.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device) {
    if (cudaGetDevice(&prev_) != cudaSuccess) prev_ = -1;
    if (prev_ != device) cudaSetDevice(device);
  }
  ~CudaDeviceGuard() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

// cuMemGetAddressRange from the driver, reached through the runtime so that
// only libcudart is linked. Null if the driver does not offer it.
using CuMemGetAddressRangeFn = int (*)(unsigned long long* base, size_t* size,
                                       unsigned long long ptr);
inline CuMemGetAddressRangeFn CuMemGetAddressRange() {
  static const CuMemGetAddressRangeFn fn = []() -> CuMemGetAddressRangeFn {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return reinterpret_cast<CuMemGetAddressRangeFn>(p);
  }();
  return fn;
}

}  // namespace mooncake::transport_internal

namespace mooncake::transport {

// Maps a CUDA runtime error onto a canonical code with the runtime's text.
inline absl::Status CudaStatus(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  const std::string text =
      absl::StrCat(AbslView(what), ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  switch (e) {
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
      return absl::InvalidArgumentError(text);
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(text);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNotSupported:
      return absl::FailedPreconditionError(text);
    case cudaErrorDevicesUnavailable:
    case cudaErrorMapBufferObjectFailed:
      return absl::UnavailableError(text);
    default:
      return absl::InternalError(text);
  }
}

struct CudaOptions {
  int streams_per_device = 4;
  size_t batches_in_flight_max = 256;
  absl::Duration io_timeout = absl::Seconds(5);
  MetricsRegistry* metrics = nullptr;  // null: a private registry
};

class CudaTransport {
 public:
  // FailedPrecondition "no CUDA device" when the runtime sees no GPU.
  static absl::StatusOr<std::unique_ptr<CudaTransport>> Create(CudaOptions options = {}) {
    if (options.streams_per_device < 1 || options.batches_in_flight_max < 1 ||
        options.io_timeout <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("CudaOptions: streams, batches and timeout must be > 0");
    }
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no CUDA device: cudaGetDeviceCount reported ",
          e == cudaSuccess ? std::string("0 devices") : std::string(cudaGetErrorName(e)),
          "; GPU segments need a GPU and driver (use a host transport here)"));
    }
    std::unique_ptr<CudaTransport> t(new CudaTransport(options, count));
    RETURN_IF_ERROR(t->Init());
    return t;
  }

  CudaTransport(const CudaTransport&) = delete;
  CudaTransport& operator=(const CudaTransport&) = delete;
  ~CudaTransport() { Shutdown(); }

  std::string_view Name() const { return "cuda"; }
  std::string LocalEndpoint() const { return absl::StrCat("cuda://", socket_name_); }
  int device_count() const { return device_count_; }
  TransportMetrics& metrics() { return metrics_; }

  absl::StatusOr<SegmentDesc> RegisterMemory(void* addr, uint64_t length, MemoryLocation location);
  absl::Status UnregisterMemory(SegmentId id);
  absl::StatusOr<RemoteSegment> OpenSegment(std::string_view endpoint, SegmentId id);
  absl::Status CloseSegment(SegmentHandle handle);
  absl::StatusOr<BatchId> Submit(std::span<const TransferRequest> requests);
  absl::StatusOr<BatchProgress> Poll(BatchId batch);
  absl::StatusOr<BatchResult> Wait(BatchId batch, absl::Time deadline);
  absl::StatusOr<BatchResult> Cancel(BatchId batch);

 private:
  struct LocalSegment {
    uint8_t* addr = nullptr;
    uint64_t length = 0;
    MemoryLocation location;
    bool exportable = false;
    absl::Status export_error;  // why not, when !exportable
    cudaIpcMemHandle_t handle{};
    uint64_t offset = 0;  // within the exported allocation
  };
  struct Mapping {  // an imported allocation
    void* base = nullptr;
    int refs = 0;
  };
  struct Opened {
    uint8_t* ptr = nullptr;
    uint64_t length = 0;
    MemoryLocation location;
    SegmentId id = 0;
    bool local = false;       // our own segment: revocable by UnregisterMemory
    std::string mapping_key;  // imported: key into mappings_
  };
  // Per batch: each request's completion event, null once finished or never
  // issued (a synchronous copy or an error).
  struct BatchEvents {
    std::vector<cudaEvent_t> events;
  };
  using Batches = transport_internal::BatchRecords<BatchEvents>;
  using Batch = Batches::Batch;

  CudaTransport(CudaOptions options, int devices)
      : options_(options),
        device_count_(devices),
        metrics_(options.metrics, "cuda"),
        batches_(options.batches_in_flight_max, &metrics_) {}

  absl::Status Init();
  void Shutdown();
  absl::Status ResolveExport(LocalSegment& seg, void* addr, uint64_t length);
  absl::StatusOr<Opened> Import(std::string_view name, SegmentId id);
  absl::Status Issue(const TransferRequest& req, cudaEvent_t* event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Finish(Batch& b, size_t index, const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Refresh(Batch& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Serve();
  void Answer(int fd);

  const CudaOptions options_;
  const int device_count_;
  TransportMetrics metrics_;
  std::string socket_name_;
  UniqueFd listen_, wake_read_, wake_write_;
  std::thread server_;
  std::atomic<bool> stopping_{false};

  Mutex mu_;
  std::vector<std::vector<cudaStream_t>> streams_ ABSL_GUARDED_BY(mu_);  // [device][k]
  size_t next_stream_ ABSL_GUARDED_BY(mu_) = 0;
  SegmentId next_segment_ ABSL_GUARDED_BY(mu_) = 1;
  SegmentHandle next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<SegmentId, LocalSegment> segments_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<SegmentHandle, Opened> handles_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Mapping> mappings_ ABSL_GUARDED_BY(mu_);
  Batches batches_ ABSL_GUARDED_BY(mu_);
};

static_assert(Transport<CudaTransport>);

}  // namespace mooncake::transport

// Member definitions, split to keep each header readable.
#include "mooncake/transport/internal/cuda_transport_data.h"  // IWYU pragma: export
#include "mooncake/transport/internal/cuda_transport_impl.h"  // IWYU pragma: export

#endif  // MOONCAKE_TRANSPORT_CUDA_TRANSPORT_H_
