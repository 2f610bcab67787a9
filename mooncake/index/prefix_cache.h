// PrefixCache: a PrefixIndex kept within a capacity by an EvictionPolicy.
//
// What trace replay and the eviction-policy studies run (the store keeps its own object table; both
// match prefixes with index::MatchPrefix): Lookup reads the longest cached prefix of a chain and
// tells the policy; Insert stores the missing blocks, then evicts leaves in the policy's order
// until the charge fits the capacity and returns what it evicted (key and value) so the caller can
// free it. A chain longer than the capacity is inserted and then trimmed from its tail.
//
// Thread-safety: none; one owner (the store shards its caches).
// Invariants: index.size() == policy.size(); policy.charged() <= capacity
// after every Insert/Erase returns.
#ifndef MOONCAKE_INDEX_PREFIX_CACHE_H_
#define MOONCAKE_INDEX_PREFIX_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "mooncake/base/assert.h"
#include "mooncake/index/block_key.h"
#include "mooncake/index/eviction_policy.h"
#include "mooncake/index/prefix_index.h"

namespace mooncake::index {

template <typename V>
struct Evicted {
  BlockKey key;
  V value;
  uint64_t charge = 0;
};

template <PrefixIndex Index, EvictionPolicy Policy>
requires std::same_as<typename Policy::key_type, BlockKey>
class PrefixCache {
 public:
  using value_type = typename Index::value_type;

  // `capacity` and `block_charge` share a unit (blocks or bytes).
  PrefixCache(uint64_t capacity, uint64_t block_charge, Index index, Policy policy)
      : capacity_(capacity),
        block_charge_(block_charge),
        index_(std::move(index)),
        policy_(std::move(policy)) {
    MC_ASSERT(block_charge > 0, "a block must cost something");
  }

  // The length of the cached prefix of `chain`; its values go to out[0, m).
  // REQUIRES: out.size() >= chain.size().
  size_t Lookup(std::span<const BlockKey> chain, std::span<value_type> out) {
    const size_t m = index_.Match(chain, out);
    policy_.Touch(chain.first(m));
    return m;
  }

  size_t LookupLength(std::span<const BlockKey> chain) {
    const size_t m = index_.MatchLength(chain);
    policy_.Touch(chain.first(m));
    return m;
  }

  // Stores the missing blocks of `chain`; returns the insert result and
  // appends every block evicted to make room to `evicted`.
  InsertResult Insert(std::span<const BlockKey> chain, std::span<const value_type> values,
                      std::vector<Evicted<value_type>>& evicted) {
    const InsertResult r = index_.Insert(chain, values);
    policy_.Admit(chain.first(r.matched + r.inserted), r.matched, block_charge_);
    while (policy_.charged() > capacity_) {
      std::optional<Eviction<BlockKey>> victim =
          policy_.Evict([this](const BlockKey& k) { return index_.IsLeaf(k); });
      MC_ASSERT(victim.has_value(), "over capacity with no evictable block");
      std::optional<value_type> value = index_.EraseLeaf(victim->key);
      MC_ASSERT(value.has_value(), "policy chose a block the index cannot evict");
      evicted.push_back(Evicted<value_type>{victim->key, std::move(*value), victim->charge});
    }
    MC_DASSERT(index_.size() == policy_.size(), "index and policy disagree");
    return r;
  }

  // Removes `key` and everything cached after it; returns what went.
  std::vector<Evicted<value_type>> Erase(const BlockKey& key) {
    std::vector<Evicted<value_type>> out;
    index_.EraseSubtree(key, [&](const BlockKey& k, value_type&& v) {
      out.push_back(Evicted<value_type>{k, std::move(v), block_charge_});
      const bool tracked = policy_.Erase(k);
      MC_ASSERT(tracked, "index block unknown to the policy");
    });
    return out;
  }

  const Index& index() const { return index_; }
  const Policy& policy() const { return policy_; }
  uint64_t capacity() const { return capacity_; }
  uint64_t charged() const { return policy_.charged(); }

 private:
  uint64_t capacity_;
  uint64_t block_charge_;
  Index index_;
  Policy policy_;
};

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_PREFIX_CACHE_H_
