// PlanTransfer for a 16K-token request of a Llama-3-8B-shaped cache (32
// layers, 8 KV heads of 128 bf16, 16-token vLLM blocks) in the cases a PD
// connector meets, per layer (what layer-wise transfer plans) and for all 32
// layers at once. Counters: ranges (in the plan) and us_per_plan (wall).
// Planning 32 layers at once with one head row per range exceeds
// kMaxPlanRanges: that case reports the ResourceExhausted error by design.
//
// Baseline, same run: the naive plan, one range per (part, token, head) of one
// layer, sorted and merged afterwards; what the planner's folding avoids.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "mooncake/connector/kv_layout.h"

namespace mooncake::connector {
namespace {

constexpr uint64_t kTokens = 16384;

KvLayout Llama8B(KvOrder order, uint32_t block_size) {
  return KvLayout{.order = order,
                  .dtype = KvDtype::kBFloat16,
                  .num_layers = 32,
                  .num_parts = 2,
                  .block_size = block_size,
                  .num_kv_heads = 8,
                  .head_dim = 128,
                  .num_blocks = 8192,
                  .first_head = 0,
                  .total_kv_heads = 8};
}

std::vector<uint64_t> Blocks(uint64_t count, bool scattered) {
  std::vector<uint64_t> ids(8192);
  std::iota(ids.begin(), ids.end(), 0);
  if (scattered) std::shuffle(ids.begin(), ids.end(), std::mt19937_64(1));
  ids.resize(count);
  return ids;
}

// Wall-clock microseconds per plan (the loop's elapsed time over its
// iterations) and the plan's range count.
void Report(benchmark::State& state, std::chrono::steady_clock::time_point start, size_t ranges) {
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  state.counters["ranges"] = static_cast<double>(ranges);
  state.counters["us_per_plan"] =
      us / static_cast<double>(std::max<int64_t>(1, state.iterations()));
}

enum Case : int64_t {
  kIdentical,  // vLLM -> vLLM, consecutive blocks
  kIdenticalScattered,
  kVllmToSglang,  // layer-first 16 -> page-first 64
  kTp2ToTp1,      // prefill TP 2 rank 0 -> decode TP 1: per-token ranges
  kNhdToHnd,      // one head row per range
};

const char* CaseName(int64_t c) {
  switch (c) {
    case kIdentical:
      return "identical_consecutive";
    case kIdenticalScattered:
      return "identical_scattered";
    case kVllmToSglang:
      return "vllm16_to_sglang_page_first64";
    case kTp2ToTp1:
      return "tp2_rank0_to_tp1";
    default:
      return "nhd_to_hnd";
  }
}

void BM_PlanTransfer(benchmark::State& state) {
  const int64_t c = state.range(0);
  const bool all_layers = state.range(1) != 0;
  state.SetLabel(std::string(CaseName(c)) + (all_layers ? " 32 layers" : " 1 layer"));
  KvLayout src = Llama8B(KvOrder::kLayerFirst, 16);
  KvLayout dst = src;
  if (c == kVllmToSglang) dst = Llama8B(KvOrder::kPageFirst, 64);
  if (c == kTp2ToTp1) src = *TpShard(src, 0, 2);
  if (c == kNhdToHnd) dst = Llama8B(KvOrder::kLayerFirstHeadMajor, 16);
  const bool scattered = c == kIdenticalScattered;
  const auto src_blocks = Blocks(kTokens / src.block_size, scattered);
  const auto dst_blocks = Blocks(kTokens / dst.block_size, scattered);
  const std::vector<uint32_t> layers = all_layers ? AllLayers(32) : std::vector<uint32_t>{7};
  std::vector<CopyRange> plan;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const absl::Status s =
        PlanTransferInto(src, src_blocks, dst, dst_blocks, 0, kTokens, layers, plan);
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(plan.data());
  }
  Report(state, start, plan.size());
}
BENCHMARK(BM_PlanTransfer)
    ->ArgsProduct({{kIdentical, kIdenticalScattered, kVllmToSglang, kTp2ToTp1, kNhdToHnd}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

// One range per (part, token, head) of one layer, then sort and merge.
void BM_BaselineNaivePlan(benchmark::State& state) {
  const KvLayout l = Llama8B(KvOrder::kLayerFirst, 16);
  const auto blocks = Blocks(kTokens / l.block_size, false);
  std::vector<CopyRange> plan;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    plan.clear();
    for (uint32_t part = 0; part < 2; ++part) {
      for (uint64_t t = 0; t < kTokens; ++t) {
        for (uint32_t h = 0; h < l.num_kv_heads; ++h) {
          const ByteRange s = l.ElementLocation(7, part, blocks[t / 16], t % 16, h, 0);
          plan.push_back({s.region, s.region, s.offset, s.offset, l.HeadBytes()});
        }
      }
    }
    std::sort(plan.begin(), plan.end(),
              [](const CopyRange& a, const CopyRange& b) { return a.dst_offset < b.dst_offset; });
    size_t kept = 0;
    for (const CopyRange& r : plan) {
      if (kept > 0 && plan[kept - 1].dst_offset + plan[kept - 1].length == r.dst_offset &&
          plan[kept - 1].src_offset + plan[kept - 1].length == r.src_offset) {
        plan[kept - 1].length += r.length;
      } else {
        plan[kept++] = r;
      }
    }
    plan.resize(kept);
    benchmark::DoNotOptimize(plan.data());
  }
  state.SetLabel("identical_consecutive 1 layer, naive");
  Report(state, start, plan.size());
}
BENCHMARK(BM_BaselineNaivePlan)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mooncake::connector
