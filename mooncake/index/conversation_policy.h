// ConversationPolicy: a prefix-aware policy that recognizes multi-turn
// conversations online and keeps later turns longer.
//
// Signal. In a chat trace a request that extends the end of an earlier
// request is the next turn of a conversation, and the more turns a
// conversation has had, the likelier it is to have another (on the Mooncake
// conversation trace: 0.31 after the first turn, 0.42, 0.51, then 0.59-0.77).
// A first turn and a shared system prompt look alike to a cache; what tells
// them apart is where the match ends: a new conversation leaves a shared
// prefix in its middle, a next turn leaves the previous request at (or one
// block before) its end. So every admitted block remembers its request's turn
// and whether it was within one block of that request's end (the last block
// of a prompt is usually partial and differs in the next turn). Admit finds
// the deepest block of the chain it knows, cached or in a bounded ghost of
// evicted keys, and the request's turn is that block's turn + 1 if it was an
// end, else 0. The ghost is what makes this work under pressure: a
// conversation evicted between turns is still recognized when it returns.
//
// Ranking. Like LRU with a per-turn head start:
//
//   score(block) = clock_at_last_access + turn_bonus[min(turn, 3)] * gap
//
// where `clock` counts admitted charge and `gap` is the typical reuse gap,
// learned online: the gap_quantile of the clock distances between a
// conversation's turns (a log histogram that fades old counts), or the
// capacity until gap_samples_min gaps were seen. Bonuses are in units of that
// gap rather than of the capacity, so the same defaults hold from a cache that
// keeps a tenth of a typical gap to one that keeps several.
// The deepest block of each admitted request goes first (demote_tail): in the
// next turn it is almost never hit (it is the partial block).
//
// Prefix structure. A score only rises (a block keeps the best of its
// accesses), every access covers the block's whole prefix with the same
// candidate score, and ties go to the deeper block, so a parent never ranks
// below its child and the minimum is a leaf.
//
// Thread-safety: none; see eviction_policy.h.
// Invariants: those of index_internal::OrderedScoreSet, which keeps the
// entries in rank order; a key is never both tracked and in the ghost.
#ifndef MOONCAKE_INDEX_CONVERSATION_POLICY_H_
#define MOONCAKE_INDEX_CONVERSATION_POLICY_H_

#include <algorithm>
#include <array>
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
#include "mooncake/index/internal/gap_histogram.h"
#include "mooncake/index/internal/key_ghost.h"
#include "mooncake/index/internal/key_hash.h"
#include "mooncake/index/internal/ordered_score_set.h"

namespace mooncake::index {

struct ConversationOptions {
  uint64_t capacity = 0;  // cache capacity in charge units; REQUIRES > 0
  // Head start per turn class (first turn, second, third, fourth and later),
  // in typical reuse gaps. Chosen on the Mooncake conversation trace
  // (docs/index.md); non-decreasing keeps "more turns, longer life".
  std::array<double, 4> turn_bonus = {0.0, 2.0, 3.0, 4.0};
  double ghost_factor = 8.0;      // evicted keys remembered per peak tracked key
  double gap_quantile = 0.5;      // the "typical" reuse gap
  uint32_t gap_samples_min = 32;  // gaps seen before the histogram is trusted
  bool demote_tail = true;        // a request's deepest block goes first
};

template <typename K = BlockKey, typename Hash = index_internal::BlockKeyHash>
class ConversationPolicy {
 public:
  using key_type = K;

  explicit ConversationPolicy(const ConversationOptions& options) : options_(options) {
    MC_ASSERT(options.capacity > 0, "ConversationPolicy needs the cache capacity");
    MC_ASSERT(options.ghost_factor >= 0.0, "negative ghost_factor");
    MC_ASSERT(options.gap_quantile > 0.0 && options.gap_quantile <= 1.0,
              "gap_quantile must be in (0, 1]");
    for (double b : options.turn_bonus) {
      MC_ASSERT(b >= 0.0 && b <= kBonusMax, "turn_bonus must be in [0, 1000] gaps");
    }
  }

  void Touch(std::span<const K> chain) {
    if (chain.empty()) return;
    const Entry* deepest = Find(chain.back());
    MC_ASSERT(deepest != nullptr, "Touch of an untracked key");
    const Rank rank{kKept, clock_ + Bonus(deepest->turn)};
    for (size_t i = 0; i < chain.size(); ++i) Raise(chain[i], i, rank, /*stamp=*/false);
  }

  void Admit(std::span<const K> chain, size_t first_new, uint64_t charge) {
    MC_ASSERT(first_new <= chain.size(), "first_new past the chain");
    clock_ += static_cast<int64_t>(charge * (chain.size() - first_new));
    const uint8_t turn = TurnOf(chain);
    const int64_t score = clock_ + Bonus(turn);
    for (size_t i = 0; i < first_new; ++i) Raise(chain[i], i, RankAt(i, chain.size(), score), true);
    for (size_t i = first_new; i < chain.size(); ++i) {
      ghost_.Take(chain[i]);
      entries_.Insert(chain[i],
                      Entry{RankAt(i, chain.size(), score), static_cast<uint32_t>(i), turn,
                            /*ends=*/i + 2 >= chain.size(), clock_, charge});
    }
    peak_size_ = std::max(peak_size_, entries_.size());
  }

  bool Erase(const K& key) { return entries_.Erase(key); }

  // Lowest rank first; a rejected entry is skipped (with whole chains it is
  // never the minimum, so the scan is short; it is bounded by size()).
  // An evicted key is remembered in the ghost, so its turn survives.
  template <typename CanEvict>
  std::optional<Eviction<K>> Evict(CanEvict&& can_evict) {
    return entries_.Evict(std::forward<CanEvict>(can_evict), [this](const K& key, const Entry& e) {
      if (GhostLimit() > 0) ghost_.Remember(key, Ghost{e.turn, e.ends, e.stamp}, GhostLimit());
    });
  }

  bool Contains(const K& key) const { return entries_.Contains(key); }
  size_t size() const { return entries_.size(); }
  uint64_t charged() const { return entries_.charged(); }

  // Observability (tests, tools): the reuse gap the bonuses are scaled by,
  // and how many evicted keys the ghost remembers.
  double typical_gap() const {
    if (gaps_.total() < options_.gap_samples_min) return static_cast<double>(options_.capacity);
    return gaps_.Quantile(options_.gap_quantile);
  }
  size_t ghost_size() const { return ghost_.size(); }
  // The turn (0 = first) this policy assigned to a tracked key.
  std::optional<uint32_t> TurnOfKey(const K& key) const {
    const Entry* e = entries_.Find(key);
    if (e == nullptr) return std::nullopt;
    return e->turn;
  }

 private:
  static constexpr double kBonusMax = 1e3;
  static constexpr uint8_t kTurnMax = 255;
  static constexpr int kDemoted = 0;  // tier of a request's deepest block
  static constexpr int kKept = 1;

  // Compared as (tier, score): every demoted block goes before any other.
  struct Rank {
    int tier;
    int64_t score;
    friend bool operator<(const Rank& a, const Rank& b) {
      return std::tie(a.tier, a.score) < std::tie(b.tier, b.score);
    }
  };

  struct Entry {
    Rank rank;
    uint32_t depth;
    uint8_t turn;   // of the request that admitted the block
    bool ends;      // within one block of that request's end
    int64_t stamp;  // clock of the last Admit that covered the block
    uint64_t charge;
  };

  struct Ghost {
    uint8_t turn;
    bool ends;
    int64_t stamp;
  };

  // Lowest rank first; among equals the deeper block, then the key.
  struct RankOf {
    std::tuple<int, int64_t, int64_t, K> operator()(const Entry& e, const K& key) const {
      return {e.rank.tier, e.rank.score, -static_cast<int64_t>(e.depth), key};
    }
  };

  const Entry* Find(const K& key) const { return entries_.Find(key); }

  Rank RankAt(size_t i, size_t n, int64_t score) const {
    return Rank{options_.demote_tail && i + 1 == n ? kDemoted : kKept, score};
  }

  int64_t Bonus(uint8_t turn) const {
    const double b = options_.turn_bonus[std::min<size_t>(turn, options_.turn_bonus.size() - 1)];
    // typical_gap() is at most 2^64 and b at most 1e3: clamp far from overflow.
    return static_cast<int64_t>(std::min(b * typical_gap(), 0x1p60));
  }

  size_t GhostLimit() const {
    return static_cast<size_t>(options_.ghost_factor * static_cast<double>(peak_size_));
  }

  // The deepest block of `chain` this policy knows decides the request's
  // turn; a continuation also records its gap (clock already counts the
  // request's new blocks, so a gap is the charge admitted in between plus
  // this turn's).
  uint8_t TurnOf(std::span<const K> chain) {
    for (size_t i = chain.size(); i-- > 0;) {
      uint8_t turn;
      bool ends;
      int64_t stamp;
      if (const Entry* e = Find(chain[i])) {
        std::tie(turn, ends, stamp) = std::tuple(e->turn, e->ends, e->stamp);
      } else if (const Ghost* g = ghost_.Find(chain[i])) {
        std::tie(turn, ends, stamp) = std::tuple(g->turn, g->ends, g->stamp);
      } else {
        continue;
      }
      if (!ends) return 0;
      MC_DASSERT(clock_ >= stamp, "a stamp from the future");
      gaps_.Record(static_cast<uint64_t>(clock_ - stamp));
      return turn == kTurnMax ? kTurnMax : static_cast<uint8_t>(turn + 1);
    }
    return 0;
  }

  // Gives `key` the better of its rank and `rank`; an Admit also moves its
  // stamp (Touch does not, so the next Admit still sees the previous turn's).
  void Raise(const K& key, size_t depth, const Rank& rank, bool stamp) {
    entries_.Update(key, [&](Entry& e) {
      if (stamp) e.stamp = clock_;
      e.rank = std::max(e.rank, rank);
      e.depth = static_cast<uint32_t>(depth);
    });
  }

  ConversationOptions options_;
  int64_t clock_ = 0;
  size_t peak_size_ = 0;
  index_internal::OrderedScoreSet<K, Hash, Entry, RankOf> entries_;
  index_internal::KeyGhost<K, Ghost, Hash> ghost_;
  index_internal::GapHistogram gaps_;
};

static_assert(EvictionPolicy<ConversationPolicy<>>);

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_CONVERSATION_POLICY_H_
