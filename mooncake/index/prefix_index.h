// PrefixIndex: which leading blocks of a key chain are cached, and their values.
//
// A chain is a span of BlockKeys, root first (block_key.h): chain[i] names the
// whole prefix of blocks 0..i, and chain[0]'s parent is the namespace root.
// An index stores a forest of blocks, each with a value of type
// `value_type` (a replica handle, an allocator offset, a tier id).
//
// Invariant (no reachable orphan): a block is stored only while its parent is
// stored. A block is useful only when its whole prefix is cached, so removal
// either takes a leaf (EraseLeaf) or a whole subtree (EraseSubtree).
//
// Semantics:
//   Insert(chain, values)  stores the missing blocks of `chain` with their
//       values; blocks already present keep their value (first writer wins).
//       Returns {matched, inserted}: chain[0, matched) was already present and
//       chain[matched, matched + inserted) was added. If matched + inserted <
//       chain.size(), chain[matched + inserted] is already stored under a
//       different parent (a key collision or a malformed chain) and nothing
//       from it on was inserted. REQUIRES: values.size() == chain.size().
//   Match(chain, out)      the length m of the longest stored prefix of chain
//       (a block counts only if it is stored under chain's previous block, or
//       as a root for chain[0]); copies the m values into out[0, m).
//       REQUIRES: out.size() >= chain.size().
//   MatchLength(chain)     the same m without copying values.
//   Find(key)              the value of a stored block, or nullptr.
//   IsLeaf(key)            true if `key` is stored and has no stored child.
//   EraseLeaf(key)         removes a stored leaf and returns its value;
//       nullopt (and no change) if absent or if it has children.
//   EraseSubtree(key, fn)  removes `key` and all its descendants, calling
//       fn(key, value&&) once per removed block; returns how many.
//   ForEach(fn)            calls fn(key, const value&, depth) for every block,
//       parents before their children.
//   size(), Stats()        stored blocks; memory and shape.
//
// Thread-safety: models are not internally synchronized. Const methods may run
// concurrently with each other; anything else needs external exclusion (the
// store's master shards its index and locks each shard).
#ifndef MOONCAKE_INDEX_PREFIX_INDEX_H_
#define MOONCAKE_INDEX_PREFIX_INDEX_H_

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "mooncake/index/block_key.h"

namespace mooncake::index_internal {

// Archetypes: the concept checks the template members with these callables.
template <typename V>
struct EraseVisitorArchetype {
  void operator()(const ::mooncake::index::BlockKey&, V&&) const {}
};
template <typename V>
struct ForEachVisitorArchetype {
  void operator()(const ::mooncake::index::BlockKey&, const V&, size_t) const {}
};

}  // namespace mooncake::index_internal

namespace mooncake::index {

struct InsertResult {
  size_t matched = 0;   // leading blocks that were already stored
  size_t inserted = 0;  // blocks added after them

  friend bool operator==(const InsertResult&, const InsertResult&) = default;
};

struct IndexStats {
  size_t blocks = 0;        // stored blocks
  size_t nodes = 0;         // structural nodes (radix runs, hash entries)
  size_t memory_bytes = 0;  // estimate of heap bytes held
};

template <typename I>
concept PrefixIndex = requires(
    I& index, const I& cindex, std::span<const BlockKey> chain,
    std::span<const typename I::value_type> values, std::span<typename I::value_type> out,
    const BlockKey& key, index_internal::EraseVisitorArchetype<typename I::value_type> erase_fn,
    index_internal::ForEachVisitorArchetype<typename I::value_type> each_fn) {
  typename I::value_type;
  requires std::copyable<typename I::value_type>;
  // O(chain.size()) amortized.
  { index.Insert(chain, values) } -> std::same_as<InsertResult>;
  // O(matched length); RadixTree: one hash lookup per run, not per block.
  { cindex.Match(chain, out) } -> std::same_as<size_t>;
  { cindex.MatchLength(chain) } -> std::same_as<size_t>;
  // O(1) expected.
  { cindex.Find(key) } -> std::same_as<const typename I::value_type*>;
  { cindex.IsLeaf(key) } -> std::same_as<bool>;
  { index.EraseLeaf(key) } -> std::same_as<std::optional<typename I::value_type>>;
  // O(removed blocks) for RadixTree; HashChainIndex may scan everything.
  { index.EraseSubtree(key, erase_fn) } -> std::same_as<size_t>;
  { cindex.ForEach(each_fn) } -> std::same_as<void>;
  { cindex.size() } -> std::same_as<size_t>;
  { cindex.Stats() } -> std::same_as<IndexStats>;
};

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_PREFIX_INDEX_H_
