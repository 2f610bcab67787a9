// HashChainIndex: one flat hash map from block key to {value, parent key},
// the way vLLM's prefix cache keys its blocks. The simple baseline for
// RadixTree: every matched block costs one hash lookup.
//
// Thread-safety: none internally; see prefix_index.h.
// Invariants: every stored entry's parent is stored (or it is a root, parent
// == kNoParent with depth 0); num_children counts the stored entries whose
// parent is this key.
#ifndef MOONCAKE_INDEX_HASH_CHAIN_INDEX_H_
#define MOONCAKE_INDEX_HASH_CHAIN_INDEX_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "mooncake/base/assert.h"
#include "mooncake/index/block_key.h"
#include "mooncake/index/internal/key_hash.h"
#include "mooncake/index/match_prefix.h"
#include "mooncake/index/prefix_index.h"

namespace mooncake::index {

template <typename V>
class HashChainIndex {
 public:
  using value_type = V;

  HashChainIndex() = default;

  InsertResult Insert(std::span<const BlockKey> chain, std::span<const V> values) {
    MC_ASSERT(values.size() == chain.size(), "one value per block");
    InsertResult result;
    result.matched = MatchLength(chain);
    for (size_t i = result.matched; i < chain.size(); ++i) {
      const BlockKey parent = i == 0 ? kNoParent : chain[i - 1];
      auto [it, fresh] =
          map_.try_emplace(chain[i], Entry{parent, values[i], static_cast<uint32_t>(i), 0});
      if (!fresh) break;  // stored under another parent: collision or malformed chain
      // The parent was just inserted or matched; one lookup (cache-hot).
      if (i > 0) ++map_.find(parent)->second.num_children;
      ++result.inserted;
    }
    return result;
  }

  size_t Match(std::span<const BlockKey> chain, std::span<V> out) const {
    MC_ASSERT(out.size() >= chain.size(), "output span shorter than the chain");
    return Walk(chain, [&](size_t i, const Entry& e) { out[i] = e.value; });
  }

  size_t MatchLength(std::span<const BlockKey> chain) const {
    return Walk(chain, [](size_t, const Entry&) {});
  }

  const V* Find(const BlockKey& key) const {
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second.value;
  }

  bool IsLeaf(const BlockKey& key) const {
    auto it = map_.find(key);
    return it != map_.end() && it->second.num_children == 0;
  }

  std::optional<V> EraseLeaf(const BlockKey& key) {
    auto it = map_.find(key);
    if (it == map_.end() || it->second.num_children != 0) return std::nullopt;
    std::optional<V> value(std::move(it->second.value));
    DetachFromParent(it->second);
    map_.erase(it);
    return value;
  }

  // O(size()): the map has no child links, so descendants are found by a scan.
  template <typename Fn>
  size_t EraseSubtree(const BlockKey& key, Fn&& fn) {
    auto root = map_.find(key);
    if (root == map_.end()) return 0;
    absl::flat_hash_map<BlockKey, std::vector<BlockKey>, index_internal::BlockKeyHash> kids;
    for (const auto& [k, e] : map_) {
      if (e.depth > root->second.depth) kids[e.parent].push_back(k);
    }
    DetachFromParent(root->second);
    std::vector<BlockKey> stack = {key};
    size_t removed = 0;
    while (!stack.empty()) {
      const BlockKey k = stack.back();
      stack.pop_back();
      if (auto c = kids.find(k); c != kids.end())
        stack.insert(stack.end(), c->second.begin(), c->second.end());
      auto it = map_.find(k);
      MC_DASSERT(it != map_.end(), "descendant vanished during EraseSubtree");
      fn(k, std::move(it->second.value));
      map_.erase(it);
      ++removed;
    }
    return removed;
  }

  // Parents before children: entries are visited in order of depth.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    std::vector<std::pair<uint32_t, const BlockKey*>> order;
    order.reserve(map_.size());
    for (const auto& [k, e] : map_) order.emplace_back(e.depth, &k);
    std::sort(order.begin(), order.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [depth, k] : order) fn(*k, map_.find(*k)->second.value, size_t{depth});
  }

  size_t size() const { return map_.size(); }

  IndexStats Stats() const {
    const size_t slot = sizeof(std::pair<const BlockKey, Entry>) + 1;  // + control byte
    return IndexStats{map_.size(), map_.size(), map_.capacity() * slot};
  }

 private:
  static constexpr BlockKey kNoParent{};

  struct Entry {
    BlockKey parent;
    V value;
    uint32_t depth;
    uint32_t num_children;
  };

  // A block matches when it is stored under the chain's previous block at
  // its depth; the walk itself is the shared one (match_prefix.h).
  template <typename Visit>
  size_t Walk(std::span<const BlockKey> chain, Visit&& visit) const {
    return MatchPrefix(chain, [&](size_t i, const BlockKey& key) {
      auto it = map_.find(key);
      if (it == map_.end()) return false;
      const Entry& e = it->second;
      const BlockKey expected_parent = i == 0 ? kNoParent : chain[i - 1];
      if (e.parent != expected_parent || e.depth != i) return false;
      visit(i, e);
      return true;
    });
  }

  void DetachFromParent(const Entry& e) {
    if (e.depth == 0) return;
    auto p = map_.find(e.parent);
    MC_ASSERT(p != map_.end(), "stored block with a missing parent");
    MC_DASSERT(p->second.num_children > 0, "child count underflow");
    --p->second.num_children;
  }

  absl::flat_hash_map<BlockKey, Entry, index_internal::BlockKeyHash> map_;
};

static_assert(PrefixIndex<HashChainIndex<uint64_t>>);

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_HASH_CHAIN_INDEX_H_
