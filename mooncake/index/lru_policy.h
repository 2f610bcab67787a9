// LruPolicy: evicts the least recently used entry.
//
// Within one Touch/Admit the chain is refreshed deepest block first, so a
// prefix is always more recent than its extensions and the LRU end is a leaf
// whenever callers pass whole chains. An entry that can_evict rejects anyway
// is refreshed (it is the prefix of something live) and the scan goes on; one
// it skips (EvictVerdict::kSkip: not the caller's to take) keeps its place.
//
// Thread-safety: none; see eviction_policy.h.
// Invariant: list_ holds exactly the tracked keys, most recent at the front;
// charged_ is the sum of their charges.
#ifndef MOONCAKE_INDEX_LRU_POLICY_H_
#define MOONCAKE_INDEX_LRU_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <span>

#include "absl/container/flat_hash_map.h"
#include "mooncake/base/assert.h"
#include "mooncake/index/block_key.h"
#include "mooncake/index/eviction_policy.h"
#include "mooncake/index/internal/key_hash.h"

namespace mooncake::index {

template <typename K = BlockKey, typename Hash = index_internal::BlockKeyHash>
class LruPolicy {
 public:
  // Move-only: map_ holds iterators into list_, which a copy would share
  // with the original (a move keeps them valid).
  LruPolicy() = default;
  LruPolicy(const LruPolicy&) = delete;
  LruPolicy& operator=(const LruPolicy&) = delete;
  LruPolicy(LruPolicy&&) = default;
  LruPolicy& operator=(LruPolicy&&) = default;

  using key_type = K;

  void Touch(std::span<const K> chain) {
    for (size_t i = chain.size(); i-- > 0;) Refresh(chain[i]);
  }

  void Admit(std::span<const K> chain, size_t first_new, uint64_t charge) {
    MC_ASSERT(first_new <= chain.size(), "first_new past the chain");
    for (size_t i = chain.size(); i-- > first_new;) {
      list_.push_front(Node{chain[i], charge});
      const bool fresh = map_.try_emplace(chain[i], list_.begin()).second;
      MC_ASSERT(fresh, "Admit of a key that is already tracked");
      charged_ += charge;
    }
    for (size_t i = first_new; i-- > 0;) Refresh(chain[i]);
  }

  bool Erase(const K& key) {
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    charged_ -= it->second->charge;
    list_.erase(it->second);
    map_.erase(it);
    return true;
  }

  // Entries a scan passes over in place (EvictVerdict::kSkip) before it
  // gives up; rejected (kKeep) entries are refreshed instead and do not count.
  static constexpr size_t kMaxSkipped = 4096;

  template <typename CanEvict>
  std::optional<Eviction<K>> Evict(CanEvict&& can_evict) {
    if (list_.empty()) return std::nullopt;
    // `pos` walks from the least recent entry towards the front; kKeep
    // entries go to the front, kSkip ones stay where they are.
    auto pos = std::prev(list_.end());
    size_t skipped = 0;
    for (size_t scanned = 0, n = list_.size(); scanned < n; ++scanned) {
      const EvictVerdict v(can_evict(pos->key));
      const bool at_front = pos == list_.begin();
      const auto next = at_front ? list_.end() : std::prev(pos);
      if (v.kind == EvictVerdict::kEvict) {
        Eviction<K> victim{pos->key, pos->charge};
        map_.erase(pos->key);
        list_.erase(pos);
        charged_ -= victim.charge;
        return victim;
      }
      if (v.kind == EvictVerdict::kSkip) {
        if (++skipped > kMaxSkipped) return std::nullopt;
      } else {
        list_.splice(list_.begin(), list_, pos);
      }
      if (at_front) break;
      pos = next;
    }
    return std::nullopt;
  }

  bool Contains(const K& key) const { return map_.contains(key); }
  size_t size() const { return map_.size(); }
  uint64_t charged() const { return charged_; }

 private:
  struct Node {
    K key;
    uint64_t charge;
  };

  void Refresh(const K& key) {
    auto it = map_.find(key);
    MC_ASSERT(it != map_.end(), "Touch of an untracked key");
    list_.splice(list_.begin(), list_, it->second);
  }

  std::list<Node> list_;
  absl::flat_hash_map<K, typename std::list<Node>::iterator, Hash> map_;
  uint64_t charged_ = 0;
};

static_assert(EvictionPolicy<LruPolicy<>>);

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_LRU_POLICY_H_
