// Insert and longest-prefix match for every PrefixIndex model, with about 1M
// resident blocks and 128K-token prompts (8K blocks of 16 tokens).
//
// Resident set: 128 chains of 8192 blocks. Chain c shares a random-length
// prefix with an earlier chain, like prompts that share system prompts and
// documents. Match looks up every resident chain in turn (full hits);
// MatchDiverging looks up chains that leave the tree halfway. Insert adds
// 8K-block chains that branch off a resident chain halfway. Compare the
// models' blocks/s in the same run (RadixTree / HashChainIndex).
#include <cstdint>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "mooncake/index/block_key.h"
#include "mooncake/index/hash_chain_index.h"
#include "mooncake/index/radix_tree.h"

namespace mooncake::index {
namespace {

constexpr size_t kChainBlocks = 8192;
constexpr size_t kResidentChains = 128;

BlockKey RandomKey(std::mt19937_64& rng) { return BlockKey{rng(), rng()}; }

struct Workload {
  std::vector<std::vector<BlockKey>> resident;
  std::vector<std::vector<BlockKey>> diverging;
  Workload() {
    std::mt19937_64 rng(42);
    for (size_t c = 0; c < kResidentChains; ++c) {
      std::vector<BlockKey> chain;
      if (c > 0) {
        const auto& base = resident[rng() % c];
        chain.assign(base.begin(), base.begin() + rng() % 1024);  // shared head
      }
      while (chain.size() < kChainBlocks) chain.push_back(RandomKey(rng));
      resident.push_back(std::move(chain));
    }
    for (size_t c = 0; c < 64; ++c) {
      std::vector<BlockKey> chain(resident[c].begin(), resident[c].begin() + kChainBlocks / 2);
      while (chain.size() < kChainBlocks) chain.push_back(RandomKey(rng));
      diverging.push_back(std::move(chain));
    }
  }
};

const Workload& GetWorkload() {
  static const Workload* w = new Workload();
  return *w;
}

template <typename Index>
Index* Resident() {
  static Index* index = [] {
    auto* idx = new Index();
    const std::vector<uint64_t> values(kChainBlocks, 7);
    for (const auto& chain : GetWorkload().resident) idx->Insert(chain, values);
    return idx;
  }();
  return index;
}

template <typename Index>
void BM_Match(benchmark::State& state) {
  const Index& index = *Resident<Index>();
  const auto& chains = GetWorkload().resident;
  std::vector<uint64_t> out(kChainBlocks);
  size_t i = 0, blocks = 0;
  for (auto _ : state) {
    blocks += index.Match(chains[i++ % chains.size()], out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["resident_blocks"] = static_cast<double>(index.size());
  state.counters["blocks/s"] =
      benchmark::Counter(static_cast<double>(blocks), benchmark::Counter::kIsRate);
}
BENCHMARK_TEMPLATE(BM_Match, RadixTree<uint64_t>);
BENCHMARK_TEMPLATE(BM_Match, HashChainIndex<uint64_t>);

template <typename Index>
void BM_MatchDiverging(benchmark::State& state) {
  const Index& index = *Resident<Index>();
  const auto& chains = GetWorkload().diverging;
  size_t i = 0, blocks = 0;
  for (auto _ : state) blocks += index.MatchLength(chains[i++ % chains.size()]);
  state.counters["blocks/s"] =
      benchmark::Counter(static_cast<double>(blocks), benchmark::Counter::kIsRate);
}
BENCHMARK_TEMPLATE(BM_MatchDiverging, RadixTree<uint64_t>);
BENCHMARK_TEMPLATE(BM_MatchDiverging, HashChainIndex<uint64_t>);

// Each iteration inserts one 8K-block chain (4K new blocks after a shared
// half) into a copy of the resident index, then erases what it added so the
// index stays at ~1M blocks.
template <typename Index>
void BM_Insert(benchmark::State& state) {
  Index index = *Resident<Index>();
  const auto& chains = GetWorkload().diverging;
  const std::vector<uint64_t> values(kChainBlocks, 9);
  size_t i = 0, inserted = 0;
  for (auto _ : state) {
    const auto& chain = chains[i++ % chains.size()];
    inserted += index.Insert(chain, values).inserted;
    state.PauseTiming();
    index.EraseSubtree(chain[kChainBlocks / 2], [](const BlockKey&, uint64_t&&) {});
    state.ResumeTiming();
  }
  state.counters["resident_blocks"] = static_cast<double>(index.size());
  state.counters["blocks/s"] =
      benchmark::Counter(static_cast<double>(inserted), benchmark::Counter::kIsRate);
}
BENCHMARK_TEMPLATE(BM_Insert, RadixTree<uint64_t>);
BENCHMARK_TEMPLATE(BM_Insert, HashChainIndex<uint64_t>);

}  // namespace
}  // namespace mooncake::index
