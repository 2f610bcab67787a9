// Record() cost of LatencyHistogram against a std::vector push_back (what a
// "keep every sample and sort" approach pays per sample), same run.
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "mooncake/base/histogram.h"

namespace mooncake {
namespace {

std::vector<uint64_t> Samples() {
  std::mt19937_64 rng(1);
  std::lognormal_distribution<double> d(10, 2);
  std::vector<uint64_t> v(4096);
  for (auto& x : v) x = static_cast<uint64_t>(d(rng));
  return v;
}

void BM_HistogramRecord(benchmark::State& state) {
  const auto samples = Samples();
  LatencyHistogram h;
  size_t i = 0;
  for (auto _ : state) {
    h.Record(samples[i++ & 4095]);
  }
  benchmark::DoNotOptimize(h.Count());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HistogramRecord);

void BM_BaselineVectorPushBack(benchmark::State& state) {
  const auto samples = Samples();
  std::vector<uint64_t> v;
  v.reserve(1 << 20);
  size_t i = 0;
  for (auto _ : state) {
    if (v.size() == (1 << 20)) v.clear();
    v.push_back(samples[i++ & 4095]);
  }
  benchmark::DoNotOptimize(v.data());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BaselineVectorPushBack);

void BM_HistogramP99(benchmark::State& state) {
  const auto samples = Samples();
  LatencyHistogram h;
  for (uint64_t s : samples) h.Record(s);
  for (auto _ : state) benchmark::DoNotOptimize(h.P99());
}
BENCHMARK(BM_HistogramP99);

}  // namespace
}  // namespace mooncake
