// OrderedScoreSet: the bookkeeping every score-ordered eviction policy shares
// (BeladyPolicy, ReuseDepthPolicy, ConversationPolicy): a map from key to the
// policy's Entry and an ordered set of each entry's rank, kept equal, plus the
// total charge. The policy decides what an Entry holds and how it ranks; this
// class keeps the two structures consistent and implements Erase and Evict
// the way eviction_policy.h specifies them.
//
//   Entry        a policy's per-key record; REQUIRES a `uint64_t charge`.
//   RankOf       a stateless callable: RankOf{}(entry, key) -> a
//                std::tuple whose last element is the key; the smallest tuple
//                is evicted first (so ties always break on the key).
//
// Thread-safety: none (the owning policy's; see eviction_policy.h).
// Invariant: order_ holds exactly one RankOf{}(entry, key) per key of map_,
// computed from that key's current Entry; charged_ is the sum of the charges.
// Complexity: Insert, Update, Erase O(log n); Evict O(log n) plus one step per
// entry it skips because can_evict refused it.
#ifndef MOONCAKE_INDEX_INTERNAL_ORDERED_SCORE_SET_H_
#define MOONCAKE_INDEX_INTERNAL_ORDERED_SCORE_SET_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "mooncake/base/assert.h"
#include "mooncake/index/eviction_policy.h"

namespace mooncake::index_internal {

template <typename K, typename Hash, typename Entry, typename RankOf>
class OrderedScoreSet {
 public:
  using Rank = decltype(RankOf{}(std::declval<const Entry&>(), std::declval<const K&>()));
  static constexpr size_t kKeyIndex = std::tuple_size_v<Rank> - 1;
  static_assert(std::is_same_v<std::tuple_element_t<kKeyIndex, Rank>, K>,
                "a rank ends with the key, so that equal scores still order");

  // Starts tracking `key`. REQUIRES: !Contains(key).
  void Insert(const K& key, const Entry& entry) {
    const bool fresh = map_.try_emplace(key, entry).second;
    MC_ASSERT(fresh, "Admit of a key that is already tracked");
    order_.insert(RankOf{}(entry, key));
    charged_ += entry.charge;
  }

  // The entry of `key`, or nullptr when it is not tracked.
  const Entry* Find(const K& key) const {
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second;
  }

  // Lets `change(Entry&)` edit the entry of `key`, then re-ranks it if its
  // rank moved (an edit of fields outside the rank costs no reordering).
  // `change` must not alter the charge. REQUIRES: Contains(key).
  template <typename Change>
  void Update(const K& key, Change&& change) {
    auto it = map_.find(key);
    MC_ASSERT(it != map_.end(), "Touch of an untracked key");
    Entry& e = it->second;
    const Rank before = RankOf{}(e, key);
    [[maybe_unused]] const uint64_t charge = e.charge;
    std::forward<Change>(change)(e);
    MC_DASSERT(e.charge == charge, "a re-rank changed the charge");
    Rank after = RankOf{}(e, key);
    if (after == before) return;
    order_.erase(before);
    order_.insert(std::move(after));
  }

  // Stops tracking `key`; false if it was not tracked.
  bool Erase(const K& key) {
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    order_.erase(RankOf{}(it->second, key));
    charged_ -= it->second.charge;
    map_.erase(it);
    return true;
  }

  // Removes and returns the lowest-ranked key that `can_evict(key)` accepts,
  // calling `on_evict(key, entry)` first (e.g. to remember it in a ghost);
  // nullopt when it accepts none.
  template <typename CanEvict, typename OnEvict>
  std::optional<::mooncake::index::Eviction<K>> Evict(CanEvict&& can_evict, OnEvict&& on_evict) {
    for (auto it = order_.begin(); it != order_.end(); ++it) {
      const K key = std::get<kKeyIndex>(*it);
      if (!can_evict(key)) continue;
      auto m = map_.find(key);
      MC_DASSERT(m != map_.end(), "ordered key missing from the map");
      on_evict(key, std::as_const(m->second));
      const ::mooncake::index::Eviction<K> victim{key, m->second.charge};
      charged_ -= victim.charge;
      order_.erase(it);
      map_.erase(m);
      return victim;
    }
    return std::nullopt;
  }

  template <typename CanEvict>
  std::optional<::mooncake::index::Eviction<K>> Evict(CanEvict&& can_evict) {
    return Evict(std::forward<CanEvict>(can_evict), [](const K&, const Entry&) {});
  }

  bool Contains(const K& key) const { return map_.contains(key); }
  size_t size() const { return map_.size(); }
  uint64_t charged() const { return charged_; }

 private:
  uint64_t charged_ = 0;
  absl::flat_hash_map<K, Entry, Hash> map_;
  absl::btree_set<Rank> order_;
};

}  // namespace mooncake::index_internal

#endif  // MOONCAKE_INDEX_INTERNAL_ORDERED_SCORE_SET_H_
