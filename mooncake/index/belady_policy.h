// BeladyPolicy: the offline reference. It is told the whole request sequence
// in advance and evicts the block whose next read is farthest away (never
// read again first), deepest first among equals. It answers "how far is an
// online policy from what knowing the future would give" in trace replay;
// it cannot run in a store.
//
// Prefix hits stop at the first miss, so farthest-next-use is not provably
// optimal here (keeping a block is worth nothing without its prefix); it is
// the classic clairvoyant reference. It stays leaf-first by construction: a
// parent is read whenever its child is, so its next read is never later, and
// ties go to the deeper block.
//
// Protocol. `future` maps each key to the sorted indices of the requests whose
// chains contain it (BeladyFuture builds it from the chains). Request r's
// calls are Touch (its hit prefix, optional) then exactly one Admit, as
// trace_replay.h's Replay does; the policy counts Admits to know r.
//
// Thread-safety: none; see eviction_policy.h. The future is shared read-only.
// Invariants: those of index_internal::OrderedScoreSet, which keeps the
// entries in rank order.
#ifndef MOONCAKE_INDEX_BELADY_POLICY_H_
#define MOONCAKE_INDEX_BELADY_POLICY_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "mooncake/base/assert.h"
#include "mooncake/index/block_key.h"
#include "mooncake/index/eviction_policy.h"
#include "mooncake/index/internal/key_hash.h"
#include "mooncake/index/internal/ordered_score_set.h"

namespace mooncake::index {

template <typename K = BlockKey, typename Hash = index_internal::BlockKeyHash>
using BeladyFuture = absl::flat_hash_map<K, std::vector<uint32_t>, Hash>;

// Key -> indices of the requests that contain it, ascending.
template <typename K = BlockKey, typename Hash = index_internal::BlockKeyHash>
std::shared_ptr<const BeladyFuture<K, Hash>> MakeBeladyFuture(
    std::span<const std::vector<K>> chains) {
  MC_ASSERT(chains.size() < std::numeric_limits<uint32_t>::max(), "too many requests");
  auto future = std::make_shared<BeladyFuture<K, Hash>>();
  for (size_t r = 0; r < chains.size(); ++r) {
    for (const K& key : chains[r]) {
      std::vector<uint32_t>& uses = (*future)[key];
      if (uses.empty() || uses.back() != r) uses.push_back(static_cast<uint32_t>(r));
    }
  }
  return future;
}

template <typename K = BlockKey, typename Hash = index_internal::BlockKeyHash>
class BeladyPolicy {
 public:
  using key_type = K;

  // REQUIRES: future != nullptr.
  explicit BeladyPolicy(std::shared_ptr<const BeladyFuture<K, Hash>> future)
      : future_(std::move(future)) {
    MC_ASSERT(future_ != nullptr, "BeladyPolicy needs the request sequence");
  }

  void Touch(std::span<const K> chain) {
    for (size_t i = 0; i < chain.size(); ++i) Rescore(chain[i], i);
  }

  void Admit(std::span<const K> chain, size_t first_new, uint64_t charge) {
    MC_ASSERT(first_new <= chain.size(), "first_new past the chain");
    for (size_t i = 0; i < first_new; ++i) Rescore(chain[i], i);
    for (size_t i = first_new; i < chain.size(); ++i) {
      entries_.Insert(chain[i], Entry{NextUse(chain[i]), static_cast<uint32_t>(i), charge});
    }
    ++request_;
  }

  bool Erase(const K& key) { return entries_.Erase(key); }

  template <typename CanEvict>
  std::optional<Eviction<K>> Evict(CanEvict&& can_evict) {
    return entries_.Evict(std::forward<CanEvict>(can_evict));
  }

  bool Contains(const K& key) const { return entries_.Contains(key); }
  size_t size() const { return entries_.size(); }
  uint64_t charged() const { return entries_.charged(); }

 private:
  static constexpr uint32_t kNever = std::numeric_limits<uint32_t>::max();

  struct Entry {
    uint32_t next_use;
    uint32_t depth;
    uint64_t charge;
  };

  // Farthest next use first; among equals the deeper block, then the key.
  struct RankOf {
    std::tuple<int64_t, int64_t, K> operator()(const Entry& e, const K& key) const {
      return {-static_cast<int64_t>(e.next_use), -static_cast<int64_t>(e.depth), key};
    }
  };

  // The first request after the current one that reads `key`.
  uint32_t NextUse(const K& key) const {
    auto it = future_->find(key);
    if (it == future_->end()) return kNever;
    const std::vector<uint32_t>& uses = it->second;
    auto next = std::upper_bound(uses.begin(), uses.end(), request_);
    return next == uses.end() ? kNever : *next;
  }

  void Rescore(const K& key, size_t depth) {
    const uint32_t next_use = NextUse(key);
    entries_.Update(key, [&](Entry& e) {
      e.next_use = next_use;
      e.depth = static_cast<uint32_t>(depth);
    });
  }

  std::shared_ptr<const BeladyFuture<K, Hash>> future_;
  uint32_t request_ = 0;
  index_internal::OrderedScoreSet<K, Hash, Entry, RankOf> entries_;
};

static_assert(EvictionPolicy<BeladyPolicy<>>);

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_BELADY_POLICY_H_
