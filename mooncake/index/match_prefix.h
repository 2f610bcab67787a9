// MatchPrefix: the longest-prefix walk over a chain of block keys, written once.
//
// Every per-block prefix matcher in mooncake asks the same question, "how many
// leading blocks of this chain are present", and differs only in where a block
// lives: HashChainIndex looks each block up in its map, the store's master
// looks each block object up in its object table
// (store/master/block_object_probe.h). MatchPrefix is that walk; a
// PrefixProbe says where blocks live. RadixTree does not use it: it matches a
// whole run with one lookup and a sequential compare (radix_tree.h).
//
// Semantics:
//   MatchPrefix(chain, probe)  calls probe(i, chain[i]) for i = 0, 1, ... in
//       order and stops at the first call that returns false (or at the end);
//       returns how many calls returned true, the length m of the present
//       prefix. probe(m, chain[m]) is the last call when m < chain.size();
//       no block after a miss is probed, so a probe may record what it found
//       for each hit (a value, a lease) and nothing for a miss.
//   PrefixProbe<P, Key>        a callable probe(size_t i, const Key& key) ->
//       bool: true if block i (whose key is `key`) is present and extends the
//       match, which may depend on i (a depth or a parent check).
//   KeyChain<C>                anything range-for can walk (std::span,
//       std::vector, protobuf's RepeatedPtrField) with a size().
//
// Complexity: O(m + 1) probe calls; no allocation.
// Thread-safety: MatchPrefix holds no state; the probe decides what it locks.
#ifndef MOONCAKE_INDEX_MATCH_PREFIX_H_
#define MOONCAKE_INDEX_MATCH_PREFIX_H_

#include <concepts>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "mooncake/base/assert.h"

namespace mooncake::index {

template <typename C>
concept KeyChain = requires(const C& chain) {
  chain.begin();  // forward walk, root first
  chain.end();
  { chain.size() } -> std::convertible_to<size_t>;  // O(1)
};

// The key type a chain holds.
template <KeyChain C>
using ChainKey = std::remove_cvref_t<decltype(*std::declval<const C&>().begin())>;

template <typename P, typename Key>
concept PrefixProbe = requires(P& probe, size_t i, const Key& key) {
  // Called once per block, in chain order, until it returns false.
  { probe(i, key) } -> std::same_as<bool>;
};

template <KeyChain Chain, PrefixProbe<ChainKey<Chain>> Probe>
[[nodiscard]] size_t MatchPrefix(const Chain& chain, Probe&& probe) {
  size_t matched = 0;
  for (const ChainKey<Chain>& key : chain) {
    if (!probe(matched, key)) break;
    ++matched;
  }
  MC_DASSERT(matched <= static_cast<size_t>(chain.size()), "matched past the chain's end");
  return matched;
}

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_MATCH_PREFIX_H_
