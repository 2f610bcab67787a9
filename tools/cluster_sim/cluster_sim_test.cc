#include "tools/cluster_sim/cluster_sim.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/index/block_key.h"
#include "mooncake/index/lru_policy.h"
#include "mooncake/index/mooncake_trace.h"
#include "mooncake/index/prefix_cache.h"
#include "mooncake/index/radix_tree.h"
#include "mooncake/index/trace_replay.h"

namespace mooncake::cluster_sim {
namespace {

constexpr uint64_t kBlockTokens = 512;

// One request per id list, prompts of whole blocks unless `tokens` says.
SimRequest Req(std::vector<uint64_t> ids, int64_t timestamp_ms = 0, uint64_t tokens = 0) {
  index::TraceRequest t{.timestamp_ms = timestamp_ms,
                        .input_length = static_cast<int64_t>(tokens),
                        .hash_ids = std::move(ids)};
  return ToSimRequests(std::span<const index::TraceRequest>(&t, 1), kBlockTokens)[0];
}

std::vector<SimRequest> Reqs(std::vector<std::vector<uint64_t>> lists) {
  std::vector<SimRequest> out;
  for (auto& ids : lists) out.push_back(Req(std::move(ids)));
  return out;
}

// Conversations that share a system-prompt block 0 and grow by 1-3 blocks a
// turn, interleaved at random: a small stand-in for the conversation trace.
std::vector<SimRequest> RandomConversations(int conversations, int requests, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<uint64_t>> chats(conversations, std::vector<uint64_t>{0});
  uint64_t next_id = 1;
  std::vector<SimRequest> out;
  for (int i = 0; i < requests; ++i) {
    auto& chat = chats[rng() % conversations];
    const int grow = 1 + static_cast<int>(rng() % 3);
    for (int g = 0; g < grow; ++g) chat.push_back(next_id++);
    out.push_back(Req(chat, /*timestamp_ms=*/i * 100,
                      /*tokens=*/chat.size() * kBlockTokens - rng() % kBlockTokens));
  }
  return out;
}

ClusterOptions Options(PoolMode mode, uint32_t nodes, uint64_t blocks, double queue_weight = 0.0) {
  return ClusterOptions{.mode = mode,
                        .nodes = nodes,
                        .capacity_blocks = blocks,
                        .block_tokens = kBlockTokens,
                        .queue_weight = queue_weight};
}

uint64_t ReplayHitBlocks(const std::vector<SimRequest>& requests, uint64_t blocks) {
  std::vector<std::vector<index::BlockKey>> chains;
  for (const SimRequest& r : requests) chains.push_back(r.chain);
  index::PrefixCache<index::RadixTree<uint32_t>, index::LruPolicy<>> cache(blocks, 1, {}, {});
  return index::Replay<decltype(cache)>(chains, cache).hit_blocks;
}

TEST(ClusterSimTest, OneLocalNodeEqualsTheGlobalPool) {
  const auto requests = RandomConversations(20, 400, 1);
  for (uint64_t blocks : {5u, 40u, 200u}) {
    const ClusterStats local = Simulate(requests, Options(PoolMode::kLocal, 1, blocks));
    const ClusterStats global = Simulate(requests, Options(PoolMode::kGlobal, 1, blocks));
    EXPECT_EQ(local.hit_blocks, global.hit_blocks) << blocks;
    EXPECT_EQ(local.saved_tokens, global.saved_tokens) << blocks;
    EXPECT_EQ(local.evicted_blocks, global.evicted_blocks) << blocks;
    EXPECT_EQ(global.remote_hit_blocks, 0u);
    EXPECT_GT(global.hit_blocks, 0u);
  }
}

TEST(ClusterSimTest, GlobalHitsMatchTraceReplayForAnyNodeCount) {
  const auto requests = RandomConversations(30, 500, 2);
  for (uint64_t blocks : {16u, 100u}) {
    const uint64_t expected = ReplayHitBlocks(requests, blocks);
    ASSERT_GT(expected, 0u);
    for (uint32_t nodes : {1u, 4u, 16u}) {
      for (double weight : {0.0, 1.0}) {
        const ClusterStats s =
            Simulate(requests, Options(PoolMode::kGlobal, nodes, blocks, weight));
        EXPECT_EQ(s.hit_blocks, expected) << nodes << " nodes, " << blocks << " blocks";
      }
    }
  }
}

TEST(ClusterSimTest, DisjointPrefixesOnTwoNodesLoseNothing) {
  // Family A (1, 2, ...) and family B (10, 11, ...) alternate; each node
  // holds one family whole, so splitting 8 blocks in two costs no hit.
  const auto requests =
      Reqs({{1, 2}, {10, 11}, {1, 2, 3}, {10, 11, 12}, {1, 2, 3, 4}, {10, 11, 12, 13}});
  ClusterSim local(Options(PoolMode::kLocal, 2, 8));
  std::vector<uint32_t> nodes;
  for (const SimRequest& r : requests) nodes.push_back(local.Submit(r).node);
  EXPECT_EQ(nodes, (std::vector<uint32_t>{0, 1, 0, 1, 0, 1}));
  const ClusterStats global = Simulate(requests, Options(PoolMode::kGlobal, 2, 8));
  EXPECT_EQ(local.stats().hit_blocks, 10u);  // 0 + 0 + 2 + 2 + 3 + 3
  EXPECT_EQ(global.hit_blocks, 10u);
  EXPECT_EQ(local.stats().saved_tokens, 10 * kBlockTokens);
  EXPECT_EQ(local.stats().requested_blocks, 18u);
}

TEST(ClusterSimTest, SplitCapacityLosesTheSharedPrefixTail) {
  // Two conversations on one system block 0; cache affinity sends all four
  // requests to node 0, whose 2 blocks hold only one conversation's tail.
  const auto requests = Reqs({{0, 1}, {0, 2}, {0, 1}, {0, 2}});
  const ClusterStats local = Simulate(requests, Options(PoolMode::kLocal, 2, 4));
  const ClusterStats global = Simulate(requests, Options(PoolMode::kGlobal, 2, 4));
  EXPECT_EQ(local.hit_blocks, 3u);   // 0 + 1 + 1 + 1
  EXPECT_EQ(global.hit_blocks, 5u);  // 0 + 1 + 2 + 2
  EXPECT_EQ(local.requests_per_node, (std::vector<uint64_t>{4, 0}));
  EXPECT_DOUBLE_EQ(local.HitRate(), 3.0 / 8.0);
  EXPECT_DOUBLE_EQ(global.HitRate(), 5.0 / 8.0);
}

TEST(ClusterSimTest, RoutesToTheLongestPrefixOverAnIdleNode) {
  // queue_weight 0.5, no draining: node 0 gets [1,5] (backlog 1024), node 1
  // then gets [1] (node 0 scores 512 - 512 = 0, not above node 1's 0).
  ClusterOptions o = Options(PoolMode::kLocal, 3, 30, 0.5);
  o.node_tokens_per_s = 1e-9;
  ClusterSim sim(o);
  EXPECT_EQ(sim.Submit(Req({1, 5})).node, 0u);
  const RouteResult second = sim.Submit(Req({1}));
  EXPECT_EQ(second.node, 1u);
  EXPECT_EQ(second.hit_blocks, 0u);
  // Node 0: 1024 - 512 = 512; node 1: 512 - 256 = 256; idle node 2: 0.
  const SimRequest third = Req({1, 5, 7});
  EXPECT_EQ(sim.Route(third), 0u);
  const RouteResult r = sim.Submit(third);
  EXPECT_EQ(r.node, 0u);
  EXPECT_EQ(r.hit_blocks, 2u);
  EXPECT_EQ(r.saved_tokens, 2 * kBlockTokens);
  EXPECT_DOUBLE_EQ(sim.backlog_tokens(0), 1024.0 + 512.0);
}

TEST(ClusterSimTest, QueuePenaltyOutweighsAShortPrefix) {
  for (PoolMode mode : {PoolMode::kLocal, PoolMode::kGlobal}) {
    ClusterOptions o = Options(mode, 2, 40, 1.0);
    o.node_tokens_per_s = 1e-9;
    ClusterSim sim(o);
    EXPECT_EQ(sim.Submit(Req({1, 2, 3, 4, 5, 6, 7, 8, 9, 10})).node, 0u);
    // Node 0 holds block 1 (saves 512) but has 5120 tokens queued.
    const RouteResult r = sim.Submit(Req({1, 20}));
    EXPECT_EQ(r.node, 1u);
    if (mode == PoolMode::kLocal) {
      EXPECT_EQ(r.hit_blocks, 0u);
    } else {
      // The pool serves block 1 to node 1 from node 0's segment.
      EXPECT_EQ(r.hit_blocks, 1u);
      EXPECT_EQ(r.remote_blocks, 1u);
      EXPECT_EQ(sim.stats().bytes_moved, kBlockTokens * o.kv_bytes_per_token);
    }
  }
}

TEST(ClusterSimTest, LeastLoadedRoutingIgnoresTheCache) {
  // The conductor keeps both conversations on node 0 (block 0 is there);
  // least-loaded routing alternates, and each node sees every other turn.
  const auto requests = Reqs({{0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {0, 1, 2, 3, 4}});
  ClusterOptions o = Options(PoolMode::kLocal, 2, 20);
  const ClusterStats conductor = Simulate(requests, o);
  EXPECT_EQ(conductor.requests_per_node, (std::vector<uint64_t>{4, 0}));
  EXPECT_EQ(conductor.hit_blocks, 9u);  // 0 + 2 + 3 + 4
  o.routing = RoutingKind::kLeastLoaded;
  const ClusterStats blind = Simulate(requests, o);
  EXPECT_EQ(blind.requests_per_node, (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ(blind.hit_blocks, 5u);  // 0 + 0 + 2 (node 0's [0,1]) + 3 (node 1's [0,1,2])
}

TEST(ClusterSimTest, BacklogDrainsWithTraceTime) {
  ClusterOptions o = Options(PoolMode::kLocal, 2, 40, 1.0);
  o.node_tokens_per_s = 1000.0;
  ClusterSim sim(o);
  EXPECT_EQ(sim.Submit(Req({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0)).node, 0u);
  // 5120 queued tokens take 5.12 s; at 4 s 1120 remain, more than 512 saved.
  EXPECT_EQ(sim.Route(Req({1, 20}, 4000)), 1u);
  const RouteResult r = sim.Submit(Req({1, 20}, 6000));
  EXPECT_EQ(r.node, 0u);
  EXPECT_EQ(r.hit_blocks, 1u);
  EXPECT_DOUBLE_EQ(sim.backlog_tokens(0), 512.0);
}

TEST(ClusterSimTest, PartialLastBlockSavesOnlyItsTokens) {
  ClusterSim sim(Options(PoolMode::kGlobal, 2, 10));
  EXPECT_EQ(sim.Submit(Req({1, 2}, 0, 700)).saved_tokens, 0u);
  const RouteResult r = sim.Submit(Req({1, 2}, 0, 700));
  EXPECT_EQ(r.hit_blocks, 2u);
  EXPECT_EQ(r.saved_tokens, 700u);
  EXPECT_DOUBLE_EQ(sim.stats().HitRate(), 700.0 / 1400.0);
}

TEST(ClusterSimTest, PoolPlacesBlocksOnThePrefillingNodeFirst) {
  // 4 blocks in two segments of 2.
  ClusterSim sim(Options(PoolMode::kGlobal, 2, 4));
  EXPECT_EQ(sim.Submit(Req({1, 2})).node, 0u);
  EXPECT_EQ(sim.Submit(Req({3})).node, 1u);
  const std::vector<index::BlockKey> keys = {Req({1}).chain[0], Req({1, 2}).chain[1],
                                             Req({3}).chain[0], Req({4}).chain[0],
                                             Req({4, 5}).chain[1]};
  EXPECT_EQ(sim.SegmentOf(keys[0]), 0u);
  EXPECT_EQ(sim.SegmentOf(keys[1]), 0u);
  EXPECT_EQ(sim.SegmentOf(keys[2]), 1u);
  // [4,5] on node 0: the pool evicts 2 (the LRU leaf); 4 takes node 0's
  // freed slot, 5 spills to node 1's segment.
  EXPECT_EQ(sim.Submit(Req({4, 5})).node, 0u);
  EXPECT_EQ(sim.SegmentOf(keys[1]), std::nullopt);
  EXPECT_EQ(sim.SegmentOf(keys[3]), 0u);
  EXPECT_EQ(sim.SegmentOf(keys[4]), 1u);
  // Node 1 (round-robin among equal scores) reads 4 from node 0's segment.
  const RouteResult r = sim.Submit(Req({4, 5, 6}));
  EXPECT_EQ(r.node, 1u);
  EXPECT_EQ(r.hit_blocks, 2u);
  EXPECT_EQ(r.remote_blocks, 1u);
}

TEST(ClusterSimTest, EveryPolicyKeepsTheAccounting) {
  const auto requests = RandomConversations(40, 600, 3);
  for (PolicyKind policy : {PolicyKind::kLru, PolicyKind::kS3Fifo, PolicyKind::kReuseDepth,
                            PolicyKind::kConversation}) {
    for (PoolMode mode : {PoolMode::kLocal, PoolMode::kGlobal}) {
      ClusterOptions o = Options(mode, 4, 64, 1.0);
      o.policy = policy;
      const ClusterStats s = Simulate(requests, o);
      uint64_t routed = 0;
      for (uint64_t n : s.requests_per_node) routed += n;
      EXPECT_EQ(routed, s.requests) << PolicyName(policy);
      EXPECT_EQ(s.requests, requests.size());
      EXPECT_LE(s.saved_tokens, s.prompt_tokens);
      EXPECT_LE(s.hit_blocks, s.requested_blocks);
      EXPECT_GT(s.hit_blocks, 0u) << PolicyName(policy);
    }
  }
}

TEST(ClusterSimTest, ValidateOptionsRejectsTooFewBlocks) {
  EXPECT_FALSE(ValidateOptions(Options(PoolMode::kLocal, 8, 7)).ok());
  EXPECT_TRUE(ValidateOptions(Options(PoolMode::kLocal, 8, 8)).ok());
  EXPECT_FALSE(ValidateOptions(Options(PoolMode::kLocal, 0, 8)).ok());
  EXPECT_EQ(ParsePolicyKind("conversation"), PolicyKind::kConversation);
  EXPECT_EQ(ParsePolicyKind("fifo"), std::nullopt);
}

}  // namespace
}  // namespace mooncake::cluster_sim
