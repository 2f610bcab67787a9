// ClusterSim: a trace-driven model of a prefill cluster's KV cache, per-node
// DRAM caches against one global pool of the same total size (issue #41).
//
// P prefill nodes serve a request trace in order. Each request is one chain of
// prompt blocks (root first; equal keys mean equal prefixes) and a prompt
// length in tokens. Two pool modes:
//   kLocal   every node has its own PrefixCache of total/P blocks; a node can
//            reuse only what it prefilled itself.
//   kGlobal  one PrefixCache of total blocks that every node reads; a hit
//            saves prefill on any node. Blocks live in P segments, one per
//            node's DRAM, placed by the store's own placement code
//            (master::OrderCandidates, kClientLocalFirst: the prefilling
//            node's segment first, then the least loaded).
// Both modes use the repository's PrefixCache over a RadixTree and one of the
// index package's eviction policies, with one block = one charge unit.
//
// Routing, as Mooncake's Conductor does it (FAST'25, Algorithm 1): pick the
// node with the least estimated time to first token, in token units:
//   score(n) = saved_tokens(n) - queue_weight * backlog_tokens(n)
// where saved_tokens(n) = min(cached_prefix_blocks(n) * block_tokens,
// prompt_tokens) and backlog_tokens(n) is prefill work queued on n, drained
// at node_tokens_per_s as trace time passes. queue_weight = 1 makes the score
// exactly -(queue wait + own prefill) in tokens, up to the prompt length that
// is the same on every node. Ties go round-robin from after the last node
// chosen, so requests with no cached prefix spread out. In kGlobal every node
// sees the same prefix, so routing is by backlog only and hits do not depend
// on P or on routing at all.
//
// Cost model: a block read from the global pool costs no prefill tokens,
// wherever its segment is; the bytes it moves across nodes (hit blocks held
// in another node's segment, times block_tokens * kv_bytes_per_token) are
// counted in bytes_moved but not charged. A prompt's last, partial block
// saves only the tokens it holds.
//
// Thread-safety: none; one owner.
// Invariants: in kGlobal, segment_of_ holds exactly the cached blocks and
// each segment's used_bytes is block_bytes times the blocks it holds.
#ifndef MOONCAKE_TOOLS_CLUSTER_SIM_CLUSTER_SIM_H_
#define MOONCAKE_TOOLS_CLUSTER_SIM_CLUSTER_SIM_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/index/block_key.h"
#include "mooncake/index/conversation_policy.h"
#include "mooncake/index/internal/key_hash.h"
#include "mooncake/index/lru_policy.h"
#include "mooncake/index/mooncake_trace.h"
#include "mooncake/index/prefix_cache.h"
#include "mooncake/index/radix_tree.h"
#include "mooncake/index/reuse_depth_policy.h"
#include "mooncake/index/s3fifo_policy.h"
#include "mooncake/index/variant_policy.h"
#include "mooncake/store/master/placement.h"
#include "mooncake/store/master/segment_pool.h"

namespace mooncake::cluster_sim {

enum class PoolMode : uint8_t { kLocal, kGlobal };
enum class PolicyKind : uint8_t { kLru, kS3Fifo, kReuseDepth, kConversation };
// kConductor: the score above. kLeastLoaded: the score without its prefix
// term, a cache-blind baseline (the same as kConductor in kGlobal).
enum class RoutingKind : uint8_t { kConductor, kLeastLoaded };

// "lru", "s3fifo", "reuse_depth", "conversation".
inline std::optional<PolicyKind> ParsePolicyKind(std::string_view name) {
  if (name == "lru") return PolicyKind::kLru;
  if (name == "s3fifo") return PolicyKind::kS3Fifo;
  if (name == "reuse_depth") return PolicyKind::kReuseDepth;
  if (name == "conversation") return PolicyKind::kConversation;
  return std::nullopt;
}

inline const char* PolicyName(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kLru:
      return "lru";
    case PolicyKind::kS3Fifo:
      return "s3fifo";
    case PolicyKind::kReuseDepth:
      return "reuse_depth";
    case PolicyKind::kConversation:
      return "conversation";
  }
  return "?";
}

inline const char* RoutingName(RoutingKind kind) {
  return kind == RoutingKind::kConductor ? "conductor" : "least_loaded";
}

struct ClusterOptions {
  PoolMode mode = PoolMode::kLocal;
  uint32_t nodes = 4;            // prefill nodes; REQUIRES 1..kNodesMax
  uint64_t capacity_blocks = 0;  // total over all nodes; REQUIRES >= nodes
  uint64_t block_tokens = 512;   // tokens per block; REQUIRES > 0
  PolicyKind policy = PolicyKind::kLru;
  RoutingKind routing = RoutingKind::kConductor;
  double queue_weight = 1.0;           // backlog tokens that cancel one saved token
  double node_tokens_per_s = 20000.0;  // prefill throughput of one node; > 0
  // KV bytes per token, for bytes_moved only. Default: LLaMA2-70B in bf16
  // (80 layers x 8 KV heads x 128 dims x 2 (K and V) x 2 bytes).
  uint64_t kv_bytes_per_token = 327680;
};

inline constexpr uint32_t kNodesMax = 4096;

struct SimRequest {
  int64_t timestamp_ms = 0;
  uint64_t prompt_tokens = 0;
  std::vector<index::BlockKey> chain;
};

// What one request got: the node it ran on and the cache hit it found there.
struct RouteResult {
  uint32_t node = 0;
  size_t hit_blocks = 0;
  uint64_t saved_tokens = 0;
  size_t remote_blocks = 0;  // kGlobal: hit blocks read from another node's segment
};

struct ClusterStats {
  uint64_t requests = 0;
  uint64_t prompt_tokens = 0;
  uint64_t saved_tokens = 0;  // prefill tokens served from cache
  uint64_t requested_blocks = 0;
  uint64_t hit_blocks = 0;
  uint64_t remote_hit_blocks = 0;
  uint64_t bytes_moved = 0;
  uint64_t evicted_blocks = 0;
  std::vector<uint64_t> requests_per_node;

  // Fraction of prompt tokens served from cache.
  double HitRate() const {
    return prompt_tokens == 0 ? 0.0 : static_cast<double>(saved_tokens) / prompt_tokens;
  }
  // trace_replay's measure: hit blocks / requested blocks.
  double BlockHitRate() const {
    return requested_blocks == 0 ? 0.0 : static_cast<double>(hit_blocks) / requested_blocks;
  }
};

// Trace requests to SimRequests: chains as index::TraceChain builds them; a
// request without input_length counts as its blocks times block_tokens.
inline std::vector<SimRequest> ToSimRequests(std::span<const index::TraceRequest> trace,
                                             uint64_t block_tokens) {
  MC_ASSERT(block_tokens > 0, "a block holds tokens");
  const index::BlockKeyer keyer =
      *index::BlockKeyer::Create(index::KeyNamespace{.model_id = "mooncake-trace"}, 1);
  std::vector<SimRequest> out;
  out.reserve(trace.size());
  for (const index::TraceRequest& r : trace) {
    SimRequest s{.timestamp_ms = r.timestamp_ms, .chain = index::TraceChain(keyer, r)};
    s.prompt_tokens =
        r.input_length > 0 ? static_cast<uint64_t>(r.input_length) : s.chain.size() * block_tokens;
    out.push_back(std::move(s));
  }
  return out;
}

// INVALID_ARGUMENT naming the first bad field, for options from user input.
inline absl::Status ValidateOptions(const ClusterOptions& o) {
  if (o.nodes == 0 || o.nodes > kNodesMax) {
    return absl::InvalidArgumentError(absl::StrCat("nodes must be in [1, ", kNodesMax, "]"));
  }
  if (o.block_tokens == 0) return absl::InvalidArgumentError("block_tokens must be positive");
  if (o.capacity_blocks < o.nodes) {
    return absl::InvalidArgumentError(absl::StrCat("a capacity of ", o.capacity_blocks,
                                                   " blocks gives some of the ", o.nodes,
                                                   " nodes no block"));
  }
  if (!(o.queue_weight >= 0.0)) return absl::InvalidArgumentError("queue_weight must be >= 0");
  if (!(o.node_tokens_per_s > 0.0)) {
    return absl::InvalidArgumentError("node_tokens_per_s must be positive");
  }
  return absl::OkStatus();
}

class ClusterSim {
 public:
  using Policy = index::VariantPolicy<index::LruPolicy<>, index::S3FifoPolicy<>,
                                      index::ReuseDepthPolicy<>, index::ConversationPolicy<>>;
  using Cache = index::PrefixCache<index::RadixTree<uint32_t>, Policy>;

  // REQUIRES: ValidateOptions(options).ok().
  explicit ClusterSim(const ClusterOptions& options)
      : options_(options), backlog_tokens_(options.nodes, 0.0) {
    MC_ASSERT(ValidateOptions(options).ok(), "invalid ClusterOptions");
    stats_.requests_per_node.assign(options.nodes, 0);
    const uint64_t block_bytes = options.block_tokens * options.kv_bytes_per_token;
    for (uint32_t n = 0; n < options.nodes; ++n) host_ids_.push_back(absl::StrCat("node", n));
    if (options.mode == PoolMode::kLocal) {
      for (uint32_t n = 0; n < options.nodes; ++n) caches_.push_back(MakeCache(NodeBlocks(n)));
    } else {
      caches_.push_back(MakeCache(options.capacity_blocks));
      for (uint32_t n = 0; n < options.nodes; ++n) {
        segments_.push_back(master::SegmentView{.id = n + 1u,
                                                .worker_id = host_ids_[n],
                                                .host_id = host_ids_[n],
                                                .name = host_ids_[n],
                                                .capacity_bytes = NodeBlocks(n) * block_bytes,
                                                .used_bytes = 0});
      }
    }
  }

  // The blocks node n holds (kLocal) or its segment holds (kGlobal): the
  // total split evenly, the remainder to the first nodes.
  uint64_t NodeBlocks(uint32_t n) const {
    const uint64_t base = options_.capacity_blocks / options_.nodes;
    return base + (n < options_.capacity_blocks % options_.nodes ? 1 : 0);
  }

  // Routes, serves and caches one request. Requests come in timestamp order
  // (an earlier timestamp than the last one is taken as the same time).
  RouteResult Submit(const SimRequest& req) {
    Advance(req.timestamp_ms);
    RouteResult result;
    result.node = Route(req);
    next_node_ = (result.node + 1) % options_.nodes;
    Cache& cache = MutableCache(result.node);
    result.hit_blocks = cache.LookupLength(req.chain);
    result.saved_tokens = SavedTokens(result.hit_blocks, req.prompt_tokens);
    if (options_.mode == PoolMode::kGlobal) {
      for (size_t i = 0; i < result.hit_blocks; ++i) {
        const auto it = segment_of_.find(req.chain[i]);
        MC_ASSERT(it != segment_of_.end(), "a cached block has no segment");
        if (it->second != result.node) ++result.remote_blocks;
      }
    }
    MC_ASSERT(result.saved_tokens <= req.prompt_tokens, "saved more than the prompt");
    backlog_tokens_[result.node] += static_cast<double>(req.prompt_tokens - result.saved_tokens);
    Store(req, result.node);
    Count(req, result);
    return result;
  }

  // The node Submit would pick for `req` at its timestamp, changing nothing.
  uint32_t Route(const SimRequest& req) const {
    const size_t global_hit =
        options_.mode == PoolMode::kGlobal ? caches_[0].index().MatchLength(req.chain) : 0;
    uint32_t best = 0;
    double best_score = 0.0;
    for (uint32_t k = 0; k < options_.nodes; ++k) {
      const uint32_t n = (next_node_ + k) % options_.nodes;
      const size_t hit = options_.mode == PoolMode::kGlobal
                             ? global_hit
                             : caches_[n].index().MatchLength(req.chain);
      const uint64_t saved =
          options_.routing == RoutingKind::kConductor ? SavedTokens(hit, req.prompt_tokens) : 0;
      const double score =
          static_cast<double>(saved) - options_.queue_weight * BacklogAt(n, req.timestamp_ms);
      if (k == 0 || score > best_score) {
        best = n;
        best_score = score;
      }
    }
    MC_DASSERT(best < options_.nodes, "routed past the last node");
    return best;
  }

  uint64_t SavedTokens(size_t hit_blocks, uint64_t prompt_tokens) const {
    return std::min<uint64_t>(hit_blocks * options_.block_tokens, prompt_tokens);
  }

  const ClusterStats& stats() const { return stats_; }
  const ClusterOptions& options() const { return options_; }
  double backlog_tokens(uint32_t node) const { return backlog_tokens_[node]; }
  // kGlobal: the node whose segment holds `key`, if it is cached.
  std::optional<uint32_t> SegmentOf(const index::BlockKey& key) const {
    const auto it = segment_of_.find(key);
    if (it == segment_of_.end()) return std::nullopt;
    return it->second;
  }
  // The cache node n reads: its own (kLocal) or the pool (kGlobal).
  const Cache& CacheOf(uint32_t node) const {
    return caches_[options_.mode == PoolMode::kLocal ? node : 0];
  }

 private:
  Cache MakeCache(uint64_t blocks) const {
    MC_ASSERT(blocks > 0, "a cache of no block");
    Policy policy;
    switch (options_.policy) {
      case PolicyKind::kLru:
        policy = Policy(index::LruPolicy<>());
        break;
      case PolicyKind::kS3Fifo:
        policy = Policy(index::S3FifoPolicy<>());
        break;
      case PolicyKind::kReuseDepth:
        policy = Policy(index::ReuseDepthPolicy<>(index::ReuseDepthOptions{.capacity = blocks}));
        break;
      case PolicyKind::kConversation:
        policy =
            Policy(index::ConversationPolicy<>(index::ConversationOptions{.capacity = blocks}));
        break;
    }
    return Cache(blocks, /*block_charge=*/1, index::RadixTree<uint32_t>(), std::move(policy));
  }

  Cache& MutableCache(uint32_t node) {
    return caches_[options_.mode == PoolMode::kLocal ? node : 0];
  }

  // Node n's queued prefill at `now_ms`: what it had at the last request,
  // less what it prefilled since.
  double BacklogAt(uint32_t n, int64_t now_ms) const {
    const double done = now_ms > now_ms_ ? static_cast<double>(now_ms - now_ms_) / 1000.0 *
                                               options_.node_tokens_per_s
                                         : 0.0;
    return std::max(0.0, backlog_tokens_[n] - done);
  }

  void Advance(int64_t now_ms) {
    if (now_ms <= now_ms_) return;
    for (uint32_t n = 0; n < options_.nodes; ++n) backlog_tokens_[n] = BacklogAt(n, now_ms);
    now_ms_ = now_ms;
  }

  // Inserts the request's blocks where node `node` reads them; in kGlobal,
  // frees the segments of evicted blocks, then places the new ones.
  void Store(const SimRequest& req, uint32_t node) {
    values_.assign(req.chain.size(), node);
    evicted_.clear();
    const index::InsertResult r = MutableCache(node).Insert(req.chain, values_, evicted_);
    stats_.evicted_blocks += evicted_.size();
    if (options_.mode == PoolMode::kLocal) return;
    const uint64_t block_bytes = options_.block_tokens * options_.kv_bytes_per_token;
    dropped_.clear();  // new blocks trimmed by the same Insert: never placed
    for (const index::Evicted<uint32_t>& e : evicted_) {
      const auto it = segment_of_.find(e.key);
      if (it == segment_of_.end()) {
        dropped_.insert(e.key);
        continue;
      }
      MC_ASSERT(segments_[it->second].used_bytes >= block_bytes, "segment accounting");
      segments_[it->second].used_bytes -= block_bytes;
      segment_of_.erase(it);
    }
    const master::PlacementRequest put{.size_bytes = block_bytes,
                                       .client_host_id = host_ids_[node]};
    for (size_t i = r.matched; i < r.matched + r.inserted; ++i) {
      if (dropped_.contains(req.chain[i])) continue;
      PlaceBlock(req.chain[i], put);
    }
    MC_DASSERT(segment_of_.size() == CacheOf(node).index().size(), "segments and pool disagree");
  }

  // One block is one put: the first segment in placement order with room.
  // After eviction the pool fits its capacity, which the segments sum to,
  // so some segment always has room.
  void PlaceBlock(const index::BlockKey& key, const master::PlacementRequest& put) {
    const std::vector<size_t> order =
        master::OrderCandidates(segments_, put, master::PlacementStrategy::kClientLocalFirst);
    for (size_t s : order) {
      master::SegmentView& seg = segments_[s];
      if (seg.capacity_bytes - seg.used_bytes >= put.size_bytes) {
        seg.used_bytes += put.size_bytes;
        const bool fresh = segment_of_.try_emplace(key, static_cast<uint32_t>(s)).second;
        MC_ASSERT(fresh, "a block placed twice");
        return;
      }
    }
    MC_ASSERT(false, "no segment has room for a block the pool kept");
  }

  void Count(const SimRequest& req, const RouteResult& result) {
    ++stats_.requests;
    ++stats_.requests_per_node[result.node];
    stats_.prompt_tokens += req.prompt_tokens;
    stats_.saved_tokens += result.saved_tokens;
    stats_.requested_blocks += req.chain.size();
    stats_.hit_blocks += result.hit_blocks;
    stats_.remote_hit_blocks += result.remote_blocks;
    stats_.bytes_moved +=
        result.remote_blocks * options_.block_tokens * options_.kv_bytes_per_token;
  }

  ClusterOptions options_;
  std::vector<Cache> caches_;  // kLocal: one per node; kGlobal: the pool
  std::vector<double> backlog_tokens_;
  std::vector<std::string> host_ids_;
  std::vector<master::SegmentView> segments_;  // kGlobal: segment n is node n's DRAM
  absl::flat_hash_map<index::BlockKey, uint32_t, index_internal::BlockKeyHash> segment_of_;
  absl::flat_hash_set<index::BlockKey, index_internal::BlockKeyHash> dropped_;
  std::vector<uint32_t> values_;
  std::vector<index::Evicted<uint32_t>> evicted_;
  ClusterStats stats_;
  int64_t now_ms_ = 0;
  uint32_t next_node_ = 0;
};

// Replays `requests` through a fresh cluster.
inline ClusterStats Simulate(std::span<const SimRequest> requests, const ClusterOptions& options) {
  ClusterSim sim(options);
  for (const SimRequest& r : requests) sim.Submit(r);
  return sim.stats();
}

}  // namespace mooncake::cluster_sim

#endif  // MOONCAKE_TOOLS_CLUSTER_SIM_CLUSTER_SIM_H_
