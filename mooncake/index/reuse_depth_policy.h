// ReuseDepthPolicy: a prefix-aware policy that ranks blocks by a
// depth-weighted reuse score and evicts the lowest.
//
//   score(block) = clock_at_last_access
//                + reuse_bonus * capacity * min(hits, hit_cap)
//                - depth_penalty * capacity * depth
//
// `clock` counts admitted charge, so a term of `x * capacity` means "x cache
// turnovers": the bonus keeps a block that was read before (a conversation's
// earlier turns, a shared system prompt) about reuse_bonus turnovers longer per
// hit, and the penalty makes a block `depth` deep expire as if it were
// depth * depth_penalty turnovers older. The penalty reflects how prefix hits
// are counted: a request's hit stops at its first miss, so block d is worth
// something only while blocks 0..d-1 are cached, and long tails are the
// cheapest thing to give back. Every read of a block also reads its prefix
// (more hits, same clock, smaller depth), so a parent's score is never below
// its child's and the minimum is a leaf; ties go to the deeper block.
//
// Defaults were chosen on the Mooncake conversation trace (docs/index.md has
// the sweep); tools/trace_replay measures them on any trace.
//
// Thread-safety: none; see eviction_policy.h.
// Invariants: those of index_internal::OrderedScoreSet, which keeps the
// entries in (score, depth, key) order.
#ifndef MOONCAKE_INDEX_REUSE_DEPTH_POLICY_H_
#define MOONCAKE_INDEX_REUSE_DEPTH_POLICY_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <tuple>
#include <utility>

#include "mooncake/base/assert.h"
#include "mooncake/index/block_key.h"
#include "mooncake/index/eviction_policy.h"
#include "mooncake/index/internal/key_hash.h"
#include "mooncake/index/internal/ordered_score_set.h"

namespace mooncake::index {

struct ReuseDepthOptions {
  uint64_t capacity = 0;        // the cache capacity in charge units; REQUIRES > 0
  double reuse_bonus = 0.8;     // turnovers of extra life per hit
  uint32_t hit_cap = 2;         // hits beyond this earn nothing more
  double depth_penalty = 0.02;  // turnovers of lost life per block of depth
};

template <typename K = BlockKey, typename Hash = index_internal::BlockKeyHash>
class ReuseDepthPolicy {
 public:
  using key_type = K;

  explicit ReuseDepthPolicy(const ReuseDepthOptions& options)
      : bonus_(Turnovers(options.reuse_bonus, options.capacity)),
        penalty_(Turnovers(options.depth_penalty, options.capacity)),
        hit_cap_(options.hit_cap) {
    MC_ASSERT(options.capacity > 0, "ReuseDepthPolicy needs the cache capacity");
    MC_ASSERT(options.reuse_bonus >= 0 && options.depth_penalty >= 0, "negative weights");
  }

  void Touch(std::span<const K> chain) {
    for (size_t i = 0; i < chain.size(); ++i) Rescore(chain[i], i, /*hit=*/true);
  }

  void Admit(std::span<const K> chain, size_t first_new, uint64_t charge) {
    MC_ASSERT(first_new <= chain.size(), "first_new past the chain");
    for (size_t i = first_new; i < chain.size(); ++i) clock_ += static_cast<int64_t>(charge);
    for (size_t i = 0; i < first_new; ++i) Rescore(chain[i], i, /*hit=*/false);
    for (size_t i = first_new; i < chain.size(); ++i) {
      entries_.Insert(chain[i], Entry{Score(0, i), static_cast<uint32_t>(i), 0, charge});
    }
  }

  bool Erase(const K& key) { return entries_.Erase(key); }

  // Scans upward from the lowest score; a rejected entry is skipped (it is
  // the prefix of a lower-scored block only if a caller broke the chain
  // discipline, so the scan is short in practice and bounded by size()).
  template <typename CanEvict>
  std::optional<Eviction<K>> Evict(CanEvict&& can_evict) {
    return entries_.Evict(std::forward<CanEvict>(can_evict));
  }

  bool Contains(const K& key) const { return entries_.Contains(key); }
  size_t size() const { return entries_.size(); }
  uint64_t charged() const { return entries_.charged(); }

 private:
  struct Entry {
    int64_t score;
    uint32_t depth;
    uint32_t hits;
    uint64_t charge;
  };

  // An "unlimited" capacity is clamped so that scores stay far from overflow.
  static int64_t Turnovers(double x, uint64_t capacity) {
    const double c = static_cast<double>(std::min<uint64_t>(capacity, uint64_t{1} << 40));
    return static_cast<int64_t>(std::llround(std::min(x, 1e3) * c));
  }

  // Lowest score first; among equals the deeper block, then the key.
  struct RankOf {
    std::tuple<int64_t, int64_t, K> operator()(const Entry& e, const K& key) const {
      return {e.score, -static_cast<int64_t>(e.depth), key};
    }
  };

  int64_t Score(uint32_t hits, size_t depth) const {
    return clock_ + bonus_ * std::min(hits, hit_cap_) - penalty_ * static_cast<int64_t>(depth);
  }

  void Rescore(const K& key, size_t depth, bool hit) {
    entries_.Update(key, [&](Entry& e) {
      if (hit && e.hits < hit_cap_) ++e.hits;
      e.depth = static_cast<uint32_t>(depth);
      e.score = Score(e.hits, depth);
    });
  }

  int64_t bonus_;
  int64_t penalty_;
  uint32_t hit_cap_;
  int64_t clock_ = 0;
  index_internal::OrderedScoreSet<K, Hash, Entry, RankOf> entries_;
};

static_assert(EvictionPolicy<ReuseDepthPolicy<>>);

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_REUSE_DEPTH_POLICY_H_
