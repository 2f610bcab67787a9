// LruPolicy: evicts the least recently used entry.
//
// Within one Touch/Admit the chain is refreshed deepest block first, so a
// prefix is always more recent than its extensions and the LRU end is a leaf
// whenever callers pass whole chains. An entry that can_evict rejects anyway
// is refreshed (it is the prefix of something live) and the scan goes on; one
// it skips (EvictVerdict::kSkip: not the caller's to take) keeps its place.
//
// Layout: entries (the key once, its charge, the recency links as 32-bit
// indices) sit in a slab of fixed-size chunks that never move; the index is
// a flat set of 4-byte entry numbers whose hash and equality read the key
// from the slab (lookups by key build nothing). Against a node_hash_map
// node per entry (key, charge and two pointers in a heap node, and an
// 8-byte slot) this needs no heap block per entry: ~48 bytes an entry for a
// 24-byte key instead of ~79, the master's eviction order at 10M objects
// (docs/master_scale.md). Erased entries are reused (a free list), so the
// slab holds at most the peak number of entries.
//
// Thread-safety: none; see eviction_policy.h.
// Invariant: the list from head_ to tail_ holds exactly the tracked keys,
// most recent at head_; charged_ is the sum of their charges.
#ifndef MOONCAKE_INDEX_LRU_POLICY_H_
#define MOONCAKE_INDEX_LRU_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "mooncake/base/assert.h"
#include "mooncake/index/block_key.h"
#include "mooncake/index/eviction_policy.h"
#include "mooncake/index/internal/key_hash.h"

namespace mooncake::index {

template <typename K = BlockKey, typename Hash = index_internal::BlockKeyHash>
class LruPolicy {
 public:
  LruPolicy()
      : slab_(std::make_unique<Slab>()), index_(0, IndexHash{slab_.get()}, IndexEq{slab_.get()}) {}
  LruPolicy(const LruPolicy&) = delete;
  LruPolicy& operator=(const LruPolicy&) = delete;
  // A moved-from policy is empty and usable.
  LruPolicy(LruPolicy&& o) noexcept : LruPolicy() { Swap(o); }
  LruPolicy& operator=(LruPolicy&& o) noexcept {
    if (this != &o) {
      LruPolicy empty;
      Swap(empty);
      Swap(o);
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
      const uint32_t e = slab_->New(chain[i], charge);
      MC_ASSERT(index_.insert(Ref{e}).second, "Admit of a key that is already tracked");
      PushFront(e);
      charged_ += charge;
    }
    for (size_t i = first_new; i-- > 0;) Refresh(chain[i]);
  }

  bool Erase(const K& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    const uint32_t e = it->e;
    index_.erase(it);
    charged_ -= at(e).charge;
    Unlink(e);
    slab_->Free(e);
    return true;
  }

  // Entries a scan passes over in place (EvictVerdict::kSkip) before it
  // gives up; rejected (kKeep) entries are refreshed instead and do not count.
  static constexpr size_t kMaxSkipped = 4096;

  template <typename CanEvict>
  std::optional<Eviction<K>> Evict(CanEvict&& can_evict) {
    // `pos` walks from the least recent entry towards the front; kKeep
    // entries go to the front, kSkip ones stay where they are.
    uint32_t pos = tail_;
    size_t skipped = 0;
    for (size_t scanned = 0, n = index_.size(); scanned < n && pos != kNil; ++scanned) {
      const EvictVerdict v(can_evict(std::as_const(at(pos).key)));
      const uint32_t next = at(pos).prev;  // kNil at the front
      if (v.kind == EvictVerdict::kEvict) {
        index_.erase(Ref{pos});
        Eviction<K> victim{std::move(at(pos).key), at(pos).charge};
        charged_ -= victim.charge;
        Unlink(pos);
        slab_->Free(pos);
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

  bool Contains(const K& key) const { return index_.contains(key); }
  size_t size() const { return index_.size(); }
  uint64_t charged() const { return charged_; }

 private:
  static constexpr uint32_t kNil = std::numeric_limits<uint32_t>::max();

  struct Entry {
    K key{};
    uint64_t charge = 0;
    uint32_t prev = kNil;  // more recent; kNil at head_ (and the free list's link in `next`)
    uint32_t next = kNil;  // less recent; kNil at tail_
  };

  // Entries in chunks of kChunk that never move; freed ones are reused first.
  class Slab {
   public:
    Entry& operator[](uint32_t e) { return chunks_[e >> kChunkLog2][e & (kChunk - 1)]; }
    const Entry& operator[](uint32_t e) const { return chunks_[e >> kChunkLog2][e & (kChunk - 1)]; }

    uint32_t New(const K& key, uint64_t charge) {
      uint32_t e = free_;
      if (e != kNil) {
        free_ = (*this)[e].next;
      } else {
        MC_ASSERT(end_ < kNil, "an LRU policy holds at most 2^32 - 1 entries");
        if ((end_ & (kChunk - 1)) == 0) chunks_.push_back(std::make_unique<Entry[]>(kChunk));
        e = end_++;
      }
      Entry& n = (*this)[e];
      n.key = key;
      n.charge = charge;
      return e;
    }
    // The entry's key is released at once (a long key's heap block).
    void Free(uint32_t e) {
      (*this)[e] = Entry{};
      (*this)[e].next = free_;
      free_ = e;
    }

   private:
    static constexpr uint32_t kChunkLog2 = 8;
    static constexpr uint32_t kChunk = 1u << kChunkLog2;
    std::vector<std::unique_ptr<Entry[]>> chunks_;
    uint32_t end_ = 0;      // entries ever made
    uint32_t free_ = kNil;  // freed entries, linked through `next`
  };

  // The index holds entry numbers; its hash and equality read their keys.
  struct Ref {
    uint32_t e;
  };
  struct IndexHash {
    using is_transparent = void;
    const Slab* slab;
    size_t operator()(Ref r) const { return Hash{}((*slab)[r.e].key); }
    size_t operator()(const K& k) const { return Hash{}(k); }
  };
  struct IndexEq {
    using is_transparent = void;
    const Slab* slab;
    // By key, so that an Admit of a tracked key finds it (keys are unique).
    bool operator()(Ref a, Ref b) const { return (*slab)[a.e].key == (*slab)[b.e].key; }
    bool operator()(Ref a, const K& k) const { return (*slab)[a.e].key == k; }
    bool operator()(const K& k, Ref a) const { return (*slab)[a.e].key == k; }
  };

  Entry& at(uint32_t e) { return (*slab_)[e]; }

  void Swap(LruPolicy& o) noexcept {
    std::swap(slab_, o.slab_);
    index_.swap(
        o.index_);  // with its hash and equality, which point at the slab that moved with it
    std::swap(head_, o.head_);
    std::swap(tail_, o.tail_);
    std::swap(charged_, o.charged_);
  }

  void PushFront(uint32_t e) {
    at(e).prev = kNil;
    at(e).next = head_;
    if (head_ != kNil) at(head_).prev = e;
    head_ = e;
    if (tail_ == kNil) tail_ = e;
  }
  void Unlink(uint32_t e) {
    Entry& l = at(e);
    (l.prev != kNil ? at(l.prev).next : head_) = l.next;
    (l.next != kNil ? at(l.next).prev : tail_) = l.prev;
    l.prev = l.next = kNil;
  }
  void MoveToFront(uint32_t e) {
    if (head_ == e) return;
    Unlink(e);
    PushFront(e);
  }

  void Refresh(const K& key) {
    auto it = index_.find(key);
    MC_ASSERT(it != index_.end(), "Touch of an untracked key");
    MoveToFront(it->e);
  }

  std::unique_ptr<Slab> slab_;  // on the heap: the index's functors point at it across moves
  absl::flat_hash_set<Ref, IndexHash, IndexEq> index_;
  uint32_t head_ = kNil;
  uint32_t tail_ = kNil;
  uint64_t charged_ = 0;
};

static_assert(EvictionPolicy<LruPolicy<>>);

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_LRU_POLICY_H_
