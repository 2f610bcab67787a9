// Replays the Mooncake conversation trace through TieredStore and reports the
// prefix hit rate by tier: DRAM hits, SSD hits, misses.
//
// Each 512-token block is one object. Payloads are small stand-ins
// (--block_bytes, default 64 B) and budgets are scaled by the same factor,
// so 3M tokens of DRAM is 5,859 blocks' worth of stand-in bytes. Both tiers
// are DramTiers: the SSD tier is simulated by size (no 512-token blocks are
// written to disk), while TieredStore's own LRU demotion, write-back,
// promotion (2nd slow hit) and slow-tier eviction run for real.
// Prefix hit (as in mooncake/index/trace_replay.h): a request's blocks are
// looked up in order and its hit stops at its first miss; then every block
// from the miss on is inserted (or, if present further down, touched).
// Baselines in the same run: DRAM only at the same DRAM size (write-back off),
// and DRAM only at DRAM + SSD size.
//
// Run: bazel run -c opt //mooncake/tier:tier_trace_replay --
//      [--trace=/work/shared/traces/conversation_trace.jsonl]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mooncake/index/block_key.h"
#include "mooncake/index/mooncake_trace.h"
#include "mooncake/tier/dram_tier.h"
#include "mooncake/tier/tiered_store.h"

namespace mooncake::tier {
namespace {

constexpr uint64_t kBlockTokens = 512;

struct Result {
  uint64_t requested = 0, fast_hits = 0, slow_hits = 0, misses_requests = 0;
  TieredStoreStats stats;
};

std::string KeyOf(const index::BlockKey& k) {
  std::string s(sizeof(k.low) + sizeof(k.high), '\0');
  std::memcpy(s.data(), &k.low, sizeof(k.low));
  std::memcpy(s.data() + sizeof(k.low), &k.high, sizeof(k.high));
  return s;
}

Result Replay(const std::vector<std::vector<std::string>>& chains, uint64_t fast_tokens,
              uint64_t slow_tokens, uint64_t block_bytes) {
  const uint64_t fast_bytes = fast_tokens / kBlockTokens * block_bytes;
  const uint64_t slow_bytes = std::max<uint64_t>(slow_tokens / kBlockTokens * block_bytes, 64);
  // The fast arena has slack; the store's byte budget is what limits it.
  DramTier fast(fast_bytes + 64 * block_bytes), slow(slow_bytes);
  TieredStoreOptions o{.fast_budget_bytes = fast_bytes, .promote_after_hits = 2};
  if (slow_tokens == 0) o.write_back = [](const ObjectInfo&) { return false; };
  TieredStore<DramTier, DramTier> store(fast, slow, o);
  std::vector<std::byte> payload(block_bytes, std::byte{0x5a}), buf(block_bytes);
  Result res;
  for (const std::vector<std::string>& chain : chains) {
    res.requested += chain.size();
    size_t i = 0;
    for (; i < chain.size(); ++i) {
      const TieredStoreStats before = store.stats();
      if (!store.Get(chain[i], buf).ok()) break;
      const TieredStoreStats after = store.stats();
      res.fast_hits += after.fast_hits - before.fast_hits;
      res.slow_hits += after.slow_hits - before.slow_hits;
    }
    if (i < chain.size()) ++res.misses_requests;
    for (; i < chain.size(); ++i) {
      absl::Status s = store.Put(chain[i], payload);
      if (absl::IsAlreadyExists(s)) (void)store.Get(chain[i], buf);
    }
  }
  res.stats = store.stats();
  return res;
}

void Print(const char* name, const Result& r) {
  const double n = static_cast<double>(r.requested);
  std::printf(
      "%-34s DRAM hits %.4f  SSD hits %.4f  total %.4f  misses %.4f  | promotions %llu "
      "demotions %llu slow evictions %llu\n",
      name, r.fast_hits / n, r.slow_hits / n, (r.fast_hits + r.slow_hits) / n,
      1 - (r.fast_hits + r.slow_hits) / n, static_cast<unsigned long long>(r.stats.promotions),
      static_cast<unsigned long long>(r.stats.demotions),
      static_cast<unsigned long long>(r.stats.slow_evictions));
}

int Main(int argc, char** argv) {
  const absl::StatusOr<index::TraceReplayFlags> flags =
      index::ParseTraceReplayFlags(argc, argv, {.block_bytes = 64}, 1);
  if (!flags.ok()) {
    std::fprintf(stderr, "%s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  const uint64_t block_bytes = flags->block_bytes;
  auto requests = index::ReadTraceFile(flags->trace);
  if (!requests.ok()) {
    std::fprintf(stderr, "%s\n", std::string(requests.status().message()).c_str());
    return 1;
  }
  const index::BlockKeyer keyer = *index::BlockKeyer::Create(index::KeyNamespace{"trace"}, 1);
  std::vector<std::vector<std::string>> chains;
  for (const index::TraceRequest& req : *requests) {
    std::vector<std::string> chain;
    for (const index::BlockKey& k : index::TraceChain(keyer, req)) chain.push_back(KeyOf(k));
    chains.push_back(std::move(chain));
  }
  std::printf("trace %s: %zu requests; block = %llu tokens, stand-in payload %llu B\n",
              flags->trace.c_str(), chains.size(), static_cast<unsigned long long>(kBlockTokens),
              static_cast<unsigned long long>(block_bytes));
  Print("DRAM 3M over SSD 30M (TieredStore)", Replay(chains, 3'000'000, 30'000'000, block_bytes));
  Print("DRAM 3M only (baseline)", Replay(chains, 3'000'000, 0, block_bytes));
  Print("DRAM 33M only (same total)", Replay(chains, 33'000'000, 0, block_bytes));
  return 0;
}

}  // namespace
}  // namespace mooncake::tier

int main(int argc, char** argv) { return mooncake::tier::Main(argc, argv); }
