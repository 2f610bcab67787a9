// CUDA transport bandwidth: host->GPU (WRITE), GPU->host (READ) and
// GPU->GPU (READ into a device buffer) through CudaTransport, against raw
// cudaMemcpyAsync + cudaStreamSynchronize of the same size in the same run.
// Counters: GBps (transport), raw_GBps (baseline), ratio = GBps / raw_GBps.
// Host buffers are pinned (cudaMallocHost) for both. Without a GPU every
// benchmark reports "no CUDA device" and measures nothing.
//
//   bazel run -c opt --config=cuda //mooncake/transport:cuda_transport_benchmark --
//     --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "mooncake/transport/cuda_transport.h"

namespace mooncake::transport {
namespace {

enum Path { kHostToGpu = 0, kGpuToHost = 1, kGpuToGpu = 2 };

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void BM_CudaCopy(benchmark::State& state) {
  const auto path = static_cast<Path>(state.range(0));
  const size_t block = static_cast<size_t>(state.range(1));
  const int batch = static_cast<int>(state.range(2));
  auto t = CudaTransport::Create();
  if (!t.ok()) {
    state.SkipWithError(std::string(t.status().message()).c_str());
    return;
  }
  const size_t total = block * static_cast<size_t>(batch);
  void *seg_mem = nullptr, *dev_local = nullptr, *host = nullptr;
  if (cudaMalloc(&seg_mem, total) != cudaSuccess || cudaMalloc(&dev_local, total) != cudaSuccess ||
      cudaMallocHost(&host, total) != cudaSuccess) {
    state.SkipWithError("cudaMalloc/cudaMallocHost failed");
    return;
  }
  auto seg = (*t)->RegisterMemory(seg_mem, total, MemoryLocation::Gpu(0));
  if (!seg.ok()) {
    state.SkipWithError(std::string(seg.status().message()).c_str());
    return;
  }
  auto remote = (*t)->OpenSegment((*t)->LocalEndpoint(), seg->id);
  if (!remote.ok()) {
    state.SkipWithError(std::string(remote.status().message()).c_str());
    return;
  }
  void* local = path == kGpuToGpu ? dev_local : host;
  const OpCode op = path == kHostToGpu ? OpCode::kWrite : OpCode::kRead;
  std::vector<TransferRequest> reqs;
  for (int i = 0; i < batch; ++i) {
    reqs.push_back({op, static_cast<char*>(local) + i * block, remote->handle, i * block, block});
  }
  cudaStream_t raw_stream;
  cudaStreamCreateWithFlags(&raw_stream, cudaStreamNonBlocking);
  double transport_s = 0, raw_s = 0;
  for (auto _ : state) {
    const auto a = std::chrono::steady_clock::now();
    auto id = (*t)->Submit(reqs);
    auto r = (*t)->Wait(*id, absl::InfiniteFuture());
    const auto b = std::chrono::steady_clock::now();
    if (!r.ok() || !r->ok()) {
      state.SkipWithError("transfer failed");
      break;
    }
    // Baseline: the same copies issued raw on one stream.
    for (int i = 0; i < batch; ++i) {
      void* dst = op == OpCode::kRead ? static_cast<char*>(local) + i * block
                                      : static_cast<char*>(seg_mem) + i * block;
      const void* src = op == OpCode::kRead ? static_cast<char*>(seg_mem) + i * block
                                            : static_cast<char*>(local) + i * block;
      cudaMemcpyAsync(dst, src, block, cudaMemcpyDefault, raw_stream);
    }
    cudaStreamSynchronize(raw_stream);
    const auto c = std::chrono::steady_clock::now();
    transport_s += Seconds(a, b);
    raw_s += Seconds(b, c);
    state.SetIterationTime(Seconds(a, b));
  }
  const double bytes = static_cast<double>(total) * static_cast<double>(state.iterations());
  state.counters["GBps"] = bytes / transport_s / 1e9;
  state.counters["raw_GBps"] = bytes / raw_s / 1e9;
  state.counters["ratio"] = raw_s / transport_s;
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  cudaStreamDestroy(raw_stream);
  (*t)->CloseSegment(remote->handle).IgnoreError();
  (*t)->UnregisterMemory(seg->id).IgnoreError();
  cudaFree(seg_mem);
  cudaFree(dev_local);
  cudaFreeHost(host);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int path : {kHostToGpu, kGpuToHost, kGpuToGpu}) {
    for (int64_t block : {64 << 10, 1 << 20, 16 << 20}) {
      for (int64_t batch : {1, 16}) b->Args({path, block, batch});
    }
  }
  b->ArgNames({"path", "block", "batch"})->UseManualTime();
}
BENCHMARK(BM_CudaCopy)->Apply(Args);

}  // namespace
}  // namespace mooncake::transport

BENCHMARK_MAIN();
