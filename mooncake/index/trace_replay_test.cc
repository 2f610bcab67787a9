#include "mooncake/index/trace_replay.h"

#include <vector>

#include "gtest/gtest.h"
#include "mooncake/index/lru_policy.h"
#include "mooncake/index/mooncake_trace.h"
#include "mooncake/index/radix_tree.h"

namespace mooncake::index {
namespace {

std::vector<std::vector<BlockKey>> Chains(const char* text) {
  const BlockKeyer keyer = *BlockKeyer::Create(KeyNamespace{"trace"}, 1);
  auto trace = ParseTrace(text);
  EXPECT_TRUE(trace.ok()) << trace.status();
  std::vector<std::vector<BlockKey>> chains;
  for (const auto& r : *trace) chains.push_back(TraceChain(keyer, r));
  return chains;
}

constexpr char kTrace[] =
    "{\"hash_ids\": [0, 1, 2]}\n"
    "{\"hash_ids\": [0, 1, 3]}\n"     // hits 0, 1
    "{\"hash_ids\": [0, 1, 2, 4]}\n"  // hits 0, 1, 2 when cached
    "{\"hash_ids\": [5]}\n";

TEST(TraceReplayTest, UnlimitedCapacityCountsEveryPrefixHit) {
  const auto chains = Chains(kTrace);
  PrefixCache<RadixTree<uint32_t>, LruPolicy<>> cache(1000, 1, {}, {});
  const ReplayStats s = Replay<decltype(cache)>(chains, cache);
  EXPECT_EQ(s.requests, 4u);
  EXPECT_EQ(s.requested_blocks, 11u);
  EXPECT_EQ(s.hit_blocks, 5u);
  EXPECT_EQ(s.evicted_blocks, 0u);
  EXPECT_DOUBLE_EQ(s.HitRate(), 5.0 / 11.0);
}

TEST(TraceReplayTest, SmallCapacityEvictsTheOldTail) {
  const auto chains = Chains(kTrace);
  PrefixCache<RadixTree<uint32_t>, LruPolicy<>> cache(3, 1, {}, {});
  const ReplayStats s = Replay<decltype(cache)>(chains, cache);
  // r1 misses 3 blocks; r2 hits 0,1 and its new block 3 evicts 2 (the LRU
  // leaf); r3 hits 0,1 and inserting 2,4 evicts 3, then 4 (its own tail, the
  // least recent leaf left); r4 misses and its block evicts 2.
  EXPECT_EQ(s.hit_blocks, 4u);
  EXPECT_EQ(s.evicted_blocks, 4u);
}

}  // namespace
}  // namespace mooncake::index
