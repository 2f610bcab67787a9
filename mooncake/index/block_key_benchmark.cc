// Key-chain hashing throughput (bytes of u32 token ids per second) for the
// block sizes engines use, against the same run's baselines: one XXH3-128
// over the whole token buffer (the hash's own ceiling) and memcpy.
#include <cstdint>
#include <cstring>
#include <vector>

#include "benchmark/benchmark.h"
#include "mooncake/base/hash.h"
#include "mooncake/index/block_key.h"

namespace mooncake::index {
namespace {

constexpr size_t kTokens = 128 * 1024;  // a 128K-token prompt

std::vector<uint32_t> Tokens() {
  std::vector<uint32_t> t(kTokens);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<uint32_t>(i * 2654435761u % 152064);
  return t;
}

void BM_KeyChain(benchmark::State& state) {
  const auto tokens = Tokens();
  const BlockKeyer keyer =
      *BlockKeyer::Create(KeyNamespace{.model_id = "bench"}, static_cast<uint32_t>(state.range(0)));
  std::vector<BlockKey> keys(keyer.NumFullBlocks(tokens.size()));
  for (auto _ : state) {
    keyer.Compute(tokens, keyer.root(), keys);
    benchmark::DoNotOptimize(keys.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * tokens.size() * sizeof(uint32_t));
  state.counters["blocks/s"] = benchmark::Counter(static_cast<double>(keys.size()),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_KeyChain)->Arg(16)->Arg(64)->Arg(256)->Arg(512);

void BM_BaselineXxh3WholeBuffer(benchmark::State& state) {
  const auto tokens = Tokens();
  for (auto _ : state) {
    benchmark::DoNotOptimize(StableHash128(tokens.data(), tokens.size() * sizeof(uint32_t)));
  }
  state.SetBytesProcessed(state.iterations() * tokens.size() * sizeof(uint32_t));
}
BENCHMARK(BM_BaselineXxh3WholeBuffer);

void BM_BaselineMemcpy(benchmark::State& state) {
  const auto tokens = Tokens();
  std::vector<uint32_t> dst(tokens.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), tokens.data(), tokens.size() * sizeof(uint32_t));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * tokens.size() * sizeof(uint32_t));
}
BENCHMARK(BM_BaselineMemcpy);

}  // namespace
}  // namespace mooncake::index
