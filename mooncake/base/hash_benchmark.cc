// StableHash64/128 throughput against memcpy of the same bytes (the memory
// bandwidth ceiling), same run.
#include <cstring>
#include <vector>

#include "benchmark/benchmark.h"
#include "mooncake/base/hash.h"

namespace mooncake {
namespace {

void BM_StableHash64(benchmark::State& state) {
  std::vector<char> buf(state.range(0), 'x');
  for (auto _ : state) benchmark::DoNotOptimize(StableHash64(buf.data(), buf.size()));
  state.SetBytesProcessed(state.iterations() * buf.size());
}
BENCHMARK(BM_StableHash64)->Arg(64)->Arg(4096)->Arg(1 << 20);

void BM_StableHash128(benchmark::State& state) {
  std::vector<char> buf(state.range(0), 'x');
  for (auto _ : state) benchmark::DoNotOptimize(StableHash128(buf.data(), buf.size()));
  state.SetBytesProcessed(state.iterations() * buf.size());
}
BENCHMARK(BM_StableHash128)->Arg(64)->Arg(4096)->Arg(1 << 20);

void BM_BaselineMemcpy(benchmark::State& state) {
  std::vector<char> src(state.range(0), 'x'), dst(state.range(0));
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * src.size());
}
BENCHMARK(BM_BaselineMemcpy)->Arg(64)->Arg(4096)->Arg(1 << 20);

}  // namespace
}  // namespace mooncake
