// EvictionPolicy: decides which cached block goes when space is needed.
//
// A policy tracks entries (keys of type `key_type`, each with a charge: 1 per
// block when capacity counts blocks, bytes when it counts bytes). It sees
// whole chains, root first, so it can keep a prefix at least as long as its
// extensions, and it never stores values: evicting returns the key and charge,
// and the caller (PrefixCache, the store's master) frees what it names.
//
// Semantics:
//   Touch(chain)   chain[0, n) are tracked and were just read (a prefix hit).
//   Admit(chain, first_new, charge)  chain[first_new, end) become tracked,
//       each with `charge`; chain[0, first_new) are tracked and are their
//       prefix (refreshed, not counted as a hit). REQUIRES: the new keys are
//       not tracked.
//   Erase(key)     stop tracking a key removed by other means; false if it
//       was not tracked.
//   Evict(can_evict)  choose a tracked key for which can_evict(key) is true
//       (the index passes "is a leaf", so eviction takes leaves first), stop
//       tracking it and return it with its charge. nullopt when nothing is
//       tracked or no candidate passes within a bounded scan. can_evict may
//       answer an EvictVerdict (below) instead of a bool.
//   Contains(key), size(), charged()  tracked keys and their total charge.
//
// Thread-safety: models are not synchronized; one owner (a cache shard).
#ifndef MOONCAKE_INDEX_EVICTION_POLICY_H_
#define MOONCAKE_INDEX_EVICTION_POLICY_H_

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace mooncake::index_internal {

template <typename K>
struct CanEvictArchetype {
  bool operator()(const K&) const { return true; }
};

}  // namespace mooncake::index_internal

namespace mooncake::index {

// What a can_evict predicate may answer instead of a bool. As a bool it is
// true only for kEvict, so every policy understands it; the LRU policy also
// honours kSkip:
//   kEvict  take this key
//   kKeep   not now (leased, pinned): the policy may move it out of the way
//           (LRU refreshes it, so the next scan does not meet it first)
//   kSkip   not what this caller may take (another worker's object): pass
//           over it and leave its place in the order as it is
struct EvictVerdict {
  enum Kind { kKeep, kEvict, kSkip };
  Kind kind = kKeep;
  constexpr EvictVerdict(Kind k) : kind(k) {}                           // NOLINT
  constexpr EvictVerdict(bool evict) : kind(evict ? kEvict : kKeep) {}  // NOLINT
  constexpr explicit operator bool() const { return kind == kEvict; }
};

template <typename K>
struct Eviction {
  K key;
  uint64_t charge = 0;
};

template <typename P>
concept EvictionPolicy =
    requires(P& policy, const P& cpolicy, std::span<const typename P::key_type> chain,
             size_t first_new, uint64_t charge, const typename P::key_type& key,
             index_internal::CanEvictArchetype<typename P::key_type> can_evict) {
  typename P::key_type;
  // O(chain.size()) amortized (x log n for ordered policies).
  { policy.Touch(chain) } -> std::same_as<void>;
  { policy.Admit(chain, first_new, charge) } -> std::same_as<void>;
  // O(1) expected (log n for ordered policies).
  { policy.Erase(key) } -> std::same_as<bool>;
  // Amortized O(1); a scan past entries can_evict rejects is bounded.
  { policy.Evict(can_evict) } -> std::same_as<std::optional<Eviction<typename P::key_type>>>;
  { cpolicy.Contains(key) } -> std::same_as<bool>;
  { cpolicy.size() } -> std::same_as<size_t>;
  { cpolicy.charged() } -> std::same_as<uint64_t>;
};

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_EVICTION_POLICY_H_
