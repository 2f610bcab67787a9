// LruPolicy: evicts the least recently used entry.
//
// Within one Touch/Admit the chain is refreshed deepest block first, so a
// prefix is always more recent than its extensions and the LRU end is a leaf
// whenever callers pass whole chains. An entry that can_evict rejects anyway
// is refreshed (it is the prefix of something live) and the scan goes on; one
// it skips (EvictVerdict::kSkip: not the caller's to take) keeps its place.
//
// Layout: one node_hash_map node per entry holds the key once, its charge and
// the recency links (an intrusive doubly linked list through the map's nodes,
// which never move). Against a std::list beside a map of iterators this keeps
// one copy of the key instead of two and one heap node instead of a node and
// a map slot: ~80 bytes an entry instead of ~130 for 32-byte keys (the
// master's eviction order at 10M objects, docs/master_scale.md).
//
// Thread-safety: none; see eviction_policy.h.
// Invariant: the list from head_ to tail_ holds exactly the tracked keys,
// most recent at head_; charged_ is the sum of their charges.
#ifndef MOONCAKE_INDEX_LRU_POLICY_H_
#define MOONCAKE_INDEX_LRU_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>

#include "absl/container/node_hash_map.h"
#include "mooncake/base/assert.h"
#include "mooncake/index/block_key.h"
#include "mooncake/index/eviction_policy.h"
#include "mooncake/index/internal/key_hash.h"

namespace mooncake::index {

template <typename K = BlockKey, typename Hash = index_internal::BlockKeyHash>
class LruPolicy {
 public:
  // Move-only: the links point at the map's nodes, which a copy would not
  // share (a move keeps them: node_hash_map's nodes stay where they are).
  LruPolicy() = default;
  LruPolicy(const LruPolicy&) = delete;
  LruPolicy& operator=(const LruPolicy&) = delete;
  LruPolicy(LruPolicy&& o) noexcept
      : map_(std::move(o.map_)),
        head_(std::exchange(o.head_, nullptr)),
        tail_(std::exchange(o.tail_, nullptr)),
        charged_(std::exchange(o.charged_, 0)) {
    o.map_.clear();
  }
  LruPolicy& operator=(LruPolicy&& o) noexcept {
    if (this != &o) {
      map_ = std::move(o.map_);
      o.map_.clear();
      head_ = std::exchange(o.head_, nullptr);
      tail_ = std::exchange(o.tail_, nullptr);
      charged_ = std::exchange(o.charged_, 0);
    }
    return *this;
  }

  using key_type = K;

  void Touch(std::span<const K> chain) {
    for (size_t i = chain.size(); i-- > 0;) Refresh(chain[i]);
  }

  void Admit(std::span<const K> chain, size_t first_new, uint64_t charge) {
    MC_ASSERT(first_new <= chain.size(), "first_new past the chain");
    for (size_t i = chain.size(); i-- > first_new;) {
      auto [it, fresh] = map_.try_emplace(chain[i], Links{charge, nullptr, nullptr});
      MC_ASSERT(fresh, "Admit of a key that is already tracked");
      PushFront(&*it);
      charged_ += charge;
    }
    for (size_t i = first_new; i-- > 0;) Refresh(chain[i]);
  }

  bool Erase(const K& key) {
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    charged_ -= it->second.charge;
    Unlink(&*it);
    map_.erase(it);
    return true;
  }

  // Entries a scan passes over in place (EvictVerdict::kSkip) before it
  // gives up; rejected (kKeep) entries are refreshed instead and do not count.
  static constexpr size_t kMaxSkipped = 4096;

  template <typename CanEvict>
  std::optional<Eviction<K>> Evict(CanEvict&& can_evict) {
    // `pos` walks from the least recent entry towards the front; kKeep
    // entries go to the front, kSkip ones stay where they are.
    Entry* pos = tail_;
    size_t skipped = 0;
    for (size_t scanned = 0, n = map_.size(); scanned < n && pos != nullptr; ++scanned) {
      const EvictVerdict v(can_evict(pos->first));
      Entry* const next = pos->second.prev;  // nullptr at the front
      if (v.kind == EvictVerdict::kEvict) {
        Eviction<K> victim{pos->first, pos->second.charge};
        charged_ -= victim.charge;
        Unlink(pos);
        map_.erase(pos->first);
        return victim;
      }
      if (v.kind == EvictVerdict::kSkip) {
        if (++skipped > kMaxSkipped) return std::nullopt;
      } else {
        MoveToFront(pos);
      }
      pos = next;
    }
    return std::nullopt;
  }

  bool Contains(const K& key) const { return map_.contains(key); }
  size_t size() const { return map_.size(); }
  uint64_t charged() const { return charged_; }

 private:
  struct Links;
  using Map = absl::node_hash_map<K, Links, Hash>;
  using Entry = typename Map::value_type;
  struct Links {
    uint64_t charge = 0;
    Entry* prev = nullptr;  // more recent; nullptr at head_
    Entry* next = nullptr;  // less recent; nullptr at tail_
  };

  void PushFront(Entry* e) {
    e->second.prev = nullptr;
    e->second.next = head_;
    if (head_ != nullptr) head_->second.prev = e;
    head_ = e;
    if (tail_ == nullptr) tail_ = e;
  }
  void Unlink(Entry* e) {
    Links& l = e->second;
    (l.prev != nullptr ? l.prev->second.next : head_) = l.next;
    (l.next != nullptr ? l.next->second.prev : tail_) = l.prev;
    l.prev = l.next = nullptr;
  }
  void MoveToFront(Entry* e) {
    if (head_ == e) return;
    Unlink(e);
    PushFront(e);
  }

  void Refresh(const K& key) {
    auto it = map_.find(key);
    MC_ASSERT(it != map_.end(), "Touch of an untracked key");
    MoveToFront(&*it);
  }

  Map map_;
  Entry* head_ = nullptr;
  Entry* tail_ = nullptr;
  uint64_t charged_ = 0;
};

static_assert(EvictionPolicy<LruPolicy<>>);

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_LRU_POLICY_H_
