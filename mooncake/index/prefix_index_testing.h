// Conformance kit for PrefixIndex models (value_type must be uint64_t):
//
//   using MyTypes = ::testing::Types<MyIndex<uint64_t>>;
//   INSTANTIATE_TYPED_TEST_SUITE_P(MyIndex, PrefixIndexConformance, MyTypes);
#ifndef MOONCAKE_INDEX_PREFIX_INDEX_TESTING_H_
#define MOONCAKE_INDEX_PREFIX_INDEX_TESTING_H_

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"
#include "mooncake/index/block_key.h"
#include "mooncake/index/prefix_index.h"

namespace mooncake::index {
namespace index_testing {

// Real keys: one-token blocks chained from a fixed namespace.
inline std::vector<BlockKey> ChainOf(const std::vector<uint32_t>& ids) {
  static const BlockKeyer keyer = *BlockKeyer::Create(KeyNamespace{"conformance"}, 1);
  return keyer.Compute(std::span<const uint32_t>(ids));
}

inline std::vector<uint64_t> ValuesOf(size_t n, uint64_t base) {
  std::vector<uint64_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + i;
  return v;
}

// The obvious model: key -> {parent, value, depth}; children found by scan.
class ReferenceIndex {
 public:
  InsertResult Insert(const std::vector<BlockKey>& chain, const std::vector<uint64_t>& values) {
    InsertResult r;
    r.matched = MatchLength(chain);
    for (size_t i = r.matched; i < chain.size(); ++i) {
      if (map_.contains(chain[i])) break;
      map_[chain[i]] = Entry{i == 0 ? std::nullopt : std::optional(chain[i - 1]), values[i], i};
      ++r.inserted;
    }
    return r;
  }
  size_t MatchLength(const std::vector<BlockKey>& chain) const {
    for (size_t i = 0; i < chain.size(); ++i) {
      auto it = map_.find(chain[i]);
      if (it == map_.end() || it->second.depth != i) return i;
      if (i > 0 && it->second.parent != chain[i - 1]) return i;
    }
    return chain.size();
  }
  bool IsLeaf(const BlockKey& k) const {
    if (!map_.contains(k)) return false;
    for (const auto& [key, e] : map_) {
      if (e.parent == k) return false;
    }
    return true;
  }
  std::optional<uint64_t> EraseLeaf(const BlockKey& k) {
    if (!IsLeaf(k)) return std::nullopt;
    const uint64_t v = map_[k].value;
    map_.erase(k);
    return v;
  }
  size_t EraseSubtree(const BlockKey& k) {
    if (!map_.contains(k)) return 0;
    size_t n = 0;
    std::vector<BlockKey> stack = {k};
    while (!stack.empty()) {
      BlockKey cur = stack.back();
      stack.pop_back();
      for (const auto& [key, e] : map_) {
        if (e.parent == cur) stack.push_back(key);
      }
      map_.erase(cur);
      ++n;
    }
    return n;
  }
  const uint64_t* Find(const BlockKey& k) const {
    auto it = map_.find(k);
    return it == map_.end() ? nullptr : &it->second.value;
  }
  size_t size() const { return map_.size(); }

 private:
  struct Entry {
    std::optional<BlockKey> parent;
    uint64_t value;
    size_t depth;
  };
  std::map<BlockKey, Entry> map_;
};

// ForEach visits every stored block once, with the stored value.
template <typename Index>
void ExpectForEachConsistent(const Index& index) {
  absl::flat_hash_map<BlockKey, size_t> seen;
  size_t count = 0;
  index.ForEach([&](const BlockKey& k, const uint64_t& v, size_t depth) {
    EXPECT_EQ(index.Find(k), &v) << "ForEach value is not the stored one";
    seen[k] = depth;
    ++count;
  });
  EXPECT_EQ(count, index.size());
  EXPECT_EQ(seen.size(), index.size()) << "ForEach visited a block twice";
}

}  // namespace index_testing

template <typename Index>
class PrefixIndexConformance : public ::testing::Test {
 protected:
  Index index_;
};

TYPED_TEST_SUITE_P(PrefixIndexConformance);

TYPED_TEST_P(PrefixIndexConformance, MatchAfterInsert) {
  const auto chain = index_testing::ChainOf({1, 2, 3, 4, 5});
  const auto values = index_testing::ValuesOf(5, 100);
  EXPECT_EQ(this->index_.Insert(chain, values), (InsertResult{0, 5}));
  std::vector<uint64_t> out(5);
  EXPECT_EQ(this->index_.Match(chain, out), 5u);
  EXPECT_EQ(out, values);
  EXPECT_EQ(this->index_.size(), 5u);
  EXPECT_EQ(this->index_.Stats().blocks, 5u);
  EXPECT_EQ(this->index_.Insert(chain, index_testing::ValuesOf(5, 900)), (InsertResult{5, 0}));
  EXPECT_EQ(*this->index_.Find(chain[2]), 102u) << "first writer wins";
}

TYPED_TEST_P(PrefixIndexConformance, PartialMatch) {
  const auto a = index_testing::ChainOf({1, 2, 3, 4});
  const auto b = index_testing::ChainOf({1, 2, 7, 8, 9});
  this->index_.Insert(a, index_testing::ValuesOf(4, 0));
  EXPECT_EQ(this->index_.MatchLength(b), 2u);
  EXPECT_EQ(this->index_.Insert(b, index_testing::ValuesOf(5, 10)), (InsertResult{2, 3}));
  EXPECT_EQ(this->index_.MatchLength(a), 4u);
  EXPECT_EQ(this->index_.MatchLength(b), 5u);
  EXPECT_EQ(this->index_.size(), 7u);
  // A chain that does not start at the root matches nothing.
  std::vector<BlockKey> tail(b.begin() + 1, b.end());
  EXPECT_EQ(this->index_.MatchLength(tail), 0u);
  EXPECT_EQ(this->index_.MatchLength({}), 0u);
  EXPECT_FALSE(this->index_.IsLeaf(a[1]));
  EXPECT_TRUE(this->index_.IsLeaf(a[3]));
  EXPECT_TRUE(this->index_.IsLeaf(b[4]));
}

TYPED_TEST_P(PrefixIndexConformance, EraseLeafTakesOnlyLeaves) {
  const auto a = index_testing::ChainOf({1, 2, 3});
  this->index_.Insert(a, index_testing::ValuesOf(3, 0));
  EXPECT_FALSE(this->index_.EraseLeaf(a[1]).has_value());
  EXPECT_FALSE(this->index_.EraseLeaf(index_testing::ChainOf({9})[0]).has_value());
  EXPECT_EQ(this->index_.EraseLeaf(a[2]), std::optional<uint64_t>(2));
  EXPECT_EQ(this->index_.MatchLength(a), 2u);
  EXPECT_TRUE(this->index_.IsLeaf(a[1]));
  EXPECT_EQ(this->index_.EraseLeaf(a[1]), std::optional<uint64_t>(1));
  EXPECT_EQ(this->index_.EraseLeaf(a[0]), std::optional<uint64_t>(0));
  EXPECT_EQ(this->index_.size(), 0u);
  // The chain can be inserted again after full eviction.
  EXPECT_EQ(this->index_.Insert(a, index_testing::ValuesOf(3, 5)), (InsertResult{0, 3}));
}

TYPED_TEST_P(PrefixIndexConformance, EraseSubtreeRemovesDescendants) {
  const auto a = index_testing::ChainOf({1, 2, 3, 4});
  const auto b = index_testing::ChainOf({1, 2, 5});
  const auto c = index_testing::ChainOf({6});
  this->index_.Insert(a, index_testing::ValuesOf(4, 0));
  this->index_.Insert(b, index_testing::ValuesOf(3, 10));
  this->index_.Insert(c, index_testing::ValuesOf(1, 20));
  std::vector<uint64_t> removed;
  EXPECT_EQ(
      this->index_.EraseSubtree(a[1], [&](const BlockKey&, uint64_t&& v) { removed.push_back(v); }),
      4u);
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<uint64_t>{1, 2, 3, 12}));
  EXPECT_EQ(this->index_.size(), 2u);
  EXPECT_EQ(this->index_.MatchLength(a), 1u);
  EXPECT_EQ(this->index_.Find(a[3]), nullptr);
  EXPECT_TRUE(this->index_.IsLeaf(a[0]));
  index_testing::ExpectForEachConsistent(this->index_);
}

TYPED_TEST_P(PrefixIndexConformance, ConflictingKeyStopsInsert) {
  const auto a = index_testing::ChainOf({1, 2});
  this->index_.Insert(a, index_testing::ValuesOf(2, 0));
  // a[1] presented as the child of another block: a malformed chain.
  std::vector<BlockKey> bad = {index_testing::ChainOf({3})[0], a[1],
                               index_testing::ChainOf({4})[0]};
  EXPECT_EQ(this->index_.Insert(bad, index_testing::ValuesOf(3, 50)), (InsertResult{0, 1}));
  EXPECT_EQ(this->index_.MatchLength(bad), 1u);
  EXPECT_EQ(*this->index_.Find(a[1]), 1u);
  // A chain whose first key is stored deeper is not a root.
  std::vector<BlockKey> bad_root = {a[1]};
  EXPECT_EQ(this->index_.Insert(bad_root, index_testing::ValuesOf(1, 60)), (InsertResult{0, 0}));
  EXPECT_EQ(this->index_.size(), 3u);
  index_testing::ExpectForEachConsistent(this->index_);
}

TYPED_TEST_P(PrefixIndexConformance, NoReachableOrphanAfterEviction) {
  std::mt19937_64 rng(7);
  std::vector<std::vector<BlockKey>> chains;
  for (int c = 0; c < 40; ++c) {
    std::vector<uint32_t> ids;
    const int len = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < len; ++i) ids.push_back(static_cast<uint32_t>(rng() % 3));
    chains.push_back(index_testing::ChainOf(ids));
    this->index_.Insert(chains.back(), index_testing::ValuesOf(chains.back().size(), c * 100));
  }
  while (this->index_.size() > 0) {
    // Evict one leaf (the first one ForEach shows), then check every chain.
    std::optional<BlockKey> leaf;
    this->index_.ForEach([&](const BlockKey& k, const uint64_t&, size_t) {
      if (!leaf && this->index_.IsLeaf(k)) leaf = k;
    });
    ASSERT_TRUE(leaf.has_value()) << "a non-empty forest has a leaf";
    ASSERT_TRUE(this->index_.EraseLeaf(*leaf).has_value());
    for (const auto& chain : chains) {
      const size_t m = this->index_.MatchLength(chain);
      for (size_t i = m; i < chain.size(); ++i) {
        ASSERT_EQ(this->index_.Find(chain[i]), nullptr) << "reachable orphan at depth " << i;
      }
    }
  }
}

TYPED_TEST_P(PrefixIndexConformance, RandomOpsMatchReference) {
  for (uint64_t seed : {1, 2, 3}) {
    TypeParam index;
    index_testing::ReferenceIndex ref;
    std::mt19937_64 rng(seed);
    std::vector<std::vector<BlockKey>> chains;
    for (int op = 0; op < 3000; ++op) {
      const int kind = static_cast<int>(rng() % 10);
      if (kind < 4 || chains.empty()) {
        std::vector<uint32_t> ids;
        const int len = 1 + static_cast<int>(rng() % 20);
        for (int i = 0; i < len; ++i) ids.push_back(static_cast<uint32_t>(rng() % 4));
        chains.push_back(index_testing::ChainOf(ids));
        const auto values = index_testing::ValuesOf(len, op * 1000);
        ASSERT_EQ(index.Insert(chains.back(), values), ref.Insert(chains.back(), values)) << op;
        continue;
      }
      const auto& chain = chains[rng() % chains.size()];
      const BlockKey key = chain[rng() % chain.size()];
      if (kind < 7) {
        std::vector<uint64_t> out(chain.size());
        const size_t m = index.Match(chain, out);
        ASSERT_EQ(m, ref.MatchLength(chain)) << op;
        for (size_t i = 0; i < m; ++i) ASSERT_EQ(out[i], *ref.Find(chain[i])) << op;
      } else if (kind < 9) {
        ASSERT_EQ(index.IsLeaf(key), ref.IsLeaf(key)) << op;
        ASSERT_EQ(index.EraseLeaf(key), ref.EraseLeaf(key)) << op;
      } else {
        const size_t n = index.EraseSubtree(key, [](const BlockKey&, uint64_t&&) {});
        ASSERT_EQ(n, ref.EraseSubtree(key)) << op;
      }
      ASSERT_EQ(index.size(), ref.size()) << op;
      const uint64_t* found = index.Find(key);
      const uint64_t* expected = ref.Find(key);
      ASSERT_EQ(found == nullptr, expected == nullptr) << op;
      if (found != nullptr) {
        ASSERT_EQ(*found, *expected) << op;
      }
    }
    index_testing::ExpectForEachConsistent(index);
  }
}

REGISTER_TYPED_TEST_SUITE_P(PrefixIndexConformance, MatchAfterInsert, PartialMatch,
                            EraseLeafTakesOnlyLeaves, EraseSubtreeRemovesDescendants,
                            ConflictingKeyStopsInsert, NoReachableOrphanAfterEviction,
                            RandomOpsMatchReference);

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_PREFIX_INDEX_TESTING_H_
