// StableHash64/128 throughput against memcpy of the same bytes (the memory
// bandwidth ceiling), same run.
#include <algorithm>
#include <cstring>
#include <vector>

#include "benchmark/benchmark.h"
#include "mooncake/base/fast_hash.h"
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

// The SSD tier's record checksum: FastStableHasher64 fed 256 KiB pieces (AVX2
// where the CPU has it), against the library's one-shot StableHash64 above.
void BM_FastStableHasher64Pieces(benchmark::State& state) {
  std::vector<char> buf(state.range(0), 'x');
  constexpr size_t kPiece = 256 << 10;
  for (auto _ : state) {
    FastStableHasher64 h;
    for (size_t at = 0; at < buf.size(); at += kPiece) {
      h.Update(buf.data() + at, std::min(kPiece, buf.size() - at));
    }
    benchmark::DoNotOptimize(h.Digest());
  }
  state.SetBytesProcessed(state.iterations() * buf.size());
  state.SetLabel(FastStableHash64Kernel());
}
BENCHMARK(BM_FastStableHasher64Pieces)->Arg(1 << 20);

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
