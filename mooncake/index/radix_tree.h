// RadixTree: a path-compressed tree over block keys.
//
// Blocks live in runs: a run is a stored path (keys, values) whose block
// k+1 is the child of block k. Inserting a chain extends a leaf run in place
// or starts a new run that branches off at any position of its parent run, so
// runs never split and a block's location (run, offset) never changes while
// it is stored. Match walks a run by comparing stored keys in sequence and
// does one hash lookup only where a chain leaves a run, so a long shared
// prefix costs a memory scan, not one random lookup per block.
//
// Every block also has an entry key -> (run, offset) in one hash map, which
// serves Find/IsLeaf/EraseLeaf by key and the jump into a child run.
//
// Thread-safety: none internally; see prefix_index.h.
// Invariants:
//   - run 0 is the sentinel root (no keys); every other live run has >= 1 key
//     and a live parent run; a run attached to run 0 holds a chain's block 0.
//   - branches[o] of a run counts the runs attached after its key o.
//   - where_[key] == (r, o) iff runs_[r].keys[o] == key.
//   - no reachable orphan: removal takes a leaf (the last key of a run with
//     no branch at that key) or a whole subtree.
// Runs are not merged after removals; a run that lost its tail keeps any
// branches, which costs one extra lookup per match through that point.
#ifndef MOONCAKE_INDEX_RADIX_TREE_H_
#define MOONCAKE_INDEX_RADIX_TREE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "mooncake/base/assert.h"
#include "mooncake/index/block_key.h"
#include "mooncake/index/internal/key_hash.h"
#include "mooncake/index/prefix_index.h"

namespace mooncake::index {

template <typename V>
class RadixTree {
 public:
  using value_type = V;

  RadixTree() { runs_.emplace_back(); }

  InsertResult Insert(std::span<const BlockKey> chain, std::span<const V> values) {
    MC_ASSERT(values.size() == chain.size(), "one value per block");
    Cursor at;
    InsertResult result;
    result.matched = Walk(chain, at, [](size_t, const V*, size_t) {});
    if (result.matched == chain.size()) return result;
    uint32_t r = ExtendableRun(at);
    if (r == kNone) r = NewRun(at);
    Run& run = runs_[r];
    for (size_t i = result.matched; i < chain.size(); ++i) {
      const uint32_t offset = static_cast<uint32_t>(run.keys.size());
      if (!where_.try_emplace(chain[i], Loc{r, offset}).second) break;  // stored elsewhere
      run.keys.push_back(chain[i]);
      run.values.push_back(values[i]);
      run.branches.push_back(0);
      ++result.inserted;
    }
    if (run.keys.empty()) DetachAndFree(r);  // the new run's first block conflicted
    size_ += result.inserted;
    return result;
  }

  size_t Match(std::span<const BlockKey> chain, std::span<V> out) const {
    MC_ASSERT(out.size() >= chain.size(), "output span shorter than the chain");
    Cursor at;
    return Walk(chain, at, [&](size_t i, const V* src, size_t n) { std::copy_n(src, n, &out[i]); });
  }

  size_t MatchLength(std::span<const BlockKey> chain) const {
    Cursor at;
    return Walk(chain, at, [](size_t, const V*, size_t) {});
  }

  const V* Find(const BlockKey& key) const {
    auto it = where_.find(key);
    return it == where_.end() ? nullptr : &runs_[it->second.run].values[it->second.offset];
  }

  bool IsLeaf(const BlockKey& key) const {
    auto it = where_.find(key);
    return it != where_.end() && IsLeafAt(it->second);
  }

  std::optional<V> EraseLeaf(const BlockKey& key) {
    auto it = where_.find(key);
    if (it == where_.end() || !IsLeafAt(it->second)) return std::nullopt;
    const uint32_t r = it->second.run;
    where_.erase(it);
    Run& run = runs_[r];
    std::optional<V> value(std::move(run.values.back()));
    run.keys.pop_back();
    run.values.pop_back();
    run.branches.pop_back();
    --size_;
    if (run.keys.empty()) DetachAndFree(r);
    return value;
  }

  template <typename Fn>
  size_t EraseSubtree(const BlockKey& key, Fn&& fn) {
    auto it = where_.find(key);
    if (it == where_.end()) return 0;
    const Loc loc = it->second;
    size_t removed = 0;
    // Whole runs branching at or after `offset` go first, then the tail.
    std::vector<uint32_t> doomed;
    for (uint32_t c : runs_[loc.run].children) {
      if (runs_[c].attach >= loc.offset) doomed.push_back(c);
    }
    for (uint32_t c : doomed) {
      removed += EraseWholeRun(c, fn);
    }
    removed += Truncate(loc.run, loc.offset, fn);
    return removed;
  }

  template <typename Fn>
  void ForEach(Fn&& fn) const {
    std::vector<uint32_t> stack(runs_[0].children.begin(), runs_[0].children.end());
    while (!stack.empty()) {
      const Run& run = runs_[stack.back()];
      stack.pop_back();
      for (size_t o = 0; o < run.keys.size(); ++o) fn(run.keys[o], run.values[o], run.depth + o);
      stack.insert(stack.end(), run.children.begin(), run.children.end());
    }
  }

  size_t size() const { return size_; }

  IndexStats Stats() const {
    IndexStats s;
    s.blocks = size_;
    s.nodes = runs_.size() - 1 - free_runs_.size();
    s.memory_bytes = where_.capacity() * (sizeof(std::pair<const BlockKey, Loc>) + 1) +
                     runs_.capacity() * sizeof(Run);
    for (const Run& run : runs_) {
      s.memory_bytes += run.keys.capacity() * sizeof(BlockKey) + run.values.capacity() * sizeof(V) +
                        run.branches.capacity() * sizeof(uint32_t) +
                        run.children.capacity() * sizeof(uint32_t);
    }
    return s;
  }

 private:
  static constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

  struct Loc {
    uint32_t run;
    uint32_t offset;
  };

  struct Run {
    std::vector<BlockKey> keys;
    std::vector<V> values;
    std::vector<uint32_t> branches;  // runs attached after keys[o]
    std::vector<uint32_t> children;  // attached runs, any order
    uint32_t parent = kNone;
    uint32_t attach = kNone;      // parent offset this run follows; kNone under the root
    uint32_t child_slot = kNone;  // index in parent's children
    uint32_t depth = 0;           // depth of keys[0]
  };

  // Where a walk stopped: after runs_[run].keys[offset], or at the root.
  struct Cursor {
    uint32_t run = 0;
    uint32_t offset = kNone;
  };

  bool IsLeafAt(const Loc& loc) const {
    const Run& run = runs_[loc.run];
    return loc.offset + 1 == run.keys.size() && run.branches[loc.offset] == 0;
  }

  // Calls visit(i, values, n) for each matched stretch chain[i, i+n).
  template <typename Visit>
  size_t Walk(std::span<const BlockKey> chain, Cursor& at, Visit&& visit) const {
    size_t i = 0;
    while (i < chain.size()) {
      // Continue inside the current run by comparing stored keys.
      if (at.run != 0 && at.offset + 1 < runs_[at.run].keys.size()) {
        const Run& run = runs_[at.run];
        const size_t start = at.offset + 1;
        const size_t limit = std::min(run.keys.size() - start, chain.size() - i);
        size_t n = 0;
        while (n < limit && run.keys[start + n] == chain[i + n]) ++n;
        if (n > 0) {
          visit(i, &run.values[start], n);
          i += n;
          at.offset = static_cast<uint32_t>(start + n - 1);
          continue;
        }
      }
      // Leave the run: chain[i] must start a run attached exactly here.
      auto it = where_.find(chain[i]);
      if (it == where_.end() || it->second.offset != 0) break;
      const Run& next = runs_[it->second.run];
      if (next.parent != at.run || next.attach != at.offset) break;
      at = Cursor{it->second.run, kNone};  // offset kNone + 1 == 0: scan from the start
    }
    return i;
  }

  // The run whose end `at` is, if it can grow in place (a leaf run's tail).
  uint32_t ExtendableRun(const Cursor& at) const {
    if (at.run == 0) return kNone;
    return IsLeafAt(Loc{at.run, at.offset}) ? at.run : kNone;
  }

  uint32_t NewRun(const Cursor& at) {
    uint32_t r;
    if (!free_runs_.empty()) {
      r = free_runs_.back();
      free_runs_.pop_back();
    } else {
      r = static_cast<uint32_t>(runs_.size());
      runs_.emplace_back();  // may move runs_: take references after this
    }
    Run& run = runs_[r];
    Run& parent = runs_[at.run];
    run.parent = at.run;
    run.attach = at.run == 0 ? kNone : at.offset;
    run.depth = at.run == 0 ? 0 : parent.depth + at.offset + 1;
    run.child_slot = static_cast<uint32_t>(parent.children.size());
    parent.children.push_back(r);
    if (at.run != 0) ++parent.branches[at.offset];
    return r;
  }

  void DetachAndFree(uint32_t r) {
    Run& run = runs_[r];
    MC_DASSERT(run.keys.empty(), "freeing a run that still holds blocks");
    MC_DASSERT(run.children.empty(), "freeing a run with attached runs");
    Run& parent = runs_[run.parent];
    if (run.parent != 0) {
      MC_DASSERT(parent.branches[run.attach] > 0, "branch count underflow");
      --parent.branches[run.attach];
    }
    const uint32_t moved = parent.children.back();
    parent.children[run.child_slot] = moved;
    runs_[moved].child_slot = run.child_slot;
    parent.children.pop_back();
    FreeRun(r);
  }

  void FreeRun(uint32_t r) {
    runs_[r] = Run{};
    free_runs_.push_back(r);
  }

  // Removes keys[from, end) of run r (its attached runs must be gone).
  template <typename Fn>
  size_t Truncate(uint32_t r, uint32_t from, Fn& fn) {
    Run& run = runs_[r];
    const size_t n = run.keys.size() - from;
    for (size_t o = from; o < run.keys.size(); ++o) {
      where_.erase(run.keys[o]);
      fn(run.keys[o], std::move(run.values[o]));
    }
    run.keys.resize(from);
    run.values.erase(run.values.begin() + from, run.values.end());
    run.branches.resize(from);
    size_ -= n;
    if (from == 0) DetachAndFree(r);
    return n;
  }

  template <typename Fn>
  size_t EraseWholeRun(uint32_t r, Fn& fn) {
    size_t removed = 0;
    while (!runs_[r].children.empty()) removed += EraseWholeRun(runs_[r].children.back(), fn);
    return removed + Truncate(r, 0, fn);
  }

  std::vector<Run> runs_;
  std::vector<uint32_t> free_runs_;
  absl::flat_hash_map<BlockKey, Loc, index_internal::BlockKeyHash> where_;
  size_t size_ = 0;
};

static_assert(PrefixIndex<RadixTree<uint64_t>>);

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_RADIX_TREE_H_
