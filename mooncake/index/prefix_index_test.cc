#include "mooncake/index/prefix_index.h"

#include <cstdint>
#include <optional>
#include <span>

#include "gtest/gtest.h"
#include "mooncake/index/hash_chain_index.h"
#include "mooncake/index/radix_tree.h"

namespace mooncake::index {
namespace {

// One broken type per requirement: each misses or mistypes exactly one.
struct Complete {
  using value_type = int;
  InsertResult Insert(std::span<const BlockKey>, std::span<const int>) { return {}; }
  size_t Match(std::span<const BlockKey>, std::span<int>) const { return 0; }
  size_t MatchLength(std::span<const BlockKey>) const { return 0; }
  const int* Find(const BlockKey&) const { return nullptr; }
  bool IsLeaf(const BlockKey&) const { return false; }
  std::optional<int> EraseLeaf(const BlockKey&) { return std::nullopt; }
  template <typename Fn>
  size_t EraseSubtree(const BlockKey&, Fn&&) {
    return 0;
  }
  template <typename Fn>
  void ForEach(Fn&&) const {}
  size_t size() const { return 0; }
  IndexStats Stats() const { return {}; }
};
static_assert(PrefixIndex<Complete>, "the archetype itself must satisfy the concept");

struct NoValueType : Complete {
  using value_type = void;
};
struct InsertReturnsBool : Complete {
  bool Insert(std::span<const BlockKey>, std::span<const int>) { return false; }
};
struct MatchNotConst : Complete {
  size_t Match(std::span<const BlockKey>, std::span<int>) = delete;
};
struct NoMatchLength {
  using value_type = int;
  InsertResult Insert(std::span<const BlockKey>, std::span<const int>) { return {}; }
  size_t Match(std::span<const BlockKey>, std::span<int>) const { return 0; }
  const int* Find(const BlockKey&) const { return nullptr; }
  bool IsLeaf(const BlockKey&) const { return false; }
  std::optional<int> EraseLeaf(const BlockKey&) { return std::nullopt; }
  template <typename Fn>
  size_t EraseSubtree(const BlockKey&, Fn&&) {
    return 0;
  }
  template <typename Fn>
  void ForEach(Fn&&) const {}
  size_t size() const { return 0; }
  IndexStats Stats() const { return {}; }
};
struct FindReturnsCopy : Complete {
  int Find(const BlockKey&) const { return 0; }
};
struct EraseLeafReturnsBool : Complete {
  bool EraseLeaf(const BlockKey&) { return false; }
};
struct EraseSubtreeWithoutVisitor : Complete {
  template <typename Fn>
  size_t EraseSubtree(const BlockKey&, Fn&&) = delete;
};
struct NoStats : Complete {
  void Stats() const {}
};

static_assert(!PrefixIndex<NoValueType>);
static_assert(!PrefixIndex<InsertReturnsBool>);
static_assert(!PrefixIndex<MatchNotConst>);
static_assert(!PrefixIndex<NoMatchLength>);
static_assert(!PrefixIndex<FindReturnsCopy>);
static_assert(!PrefixIndex<EraseLeafReturnsBool>);
static_assert(!PrefixIndex<EraseSubtreeWithoutVisitor>);
static_assert(!PrefixIndex<NoStats>);
static_assert(PrefixIndex<RadixTree<int>>);
static_assert(PrefixIndex<HashChainIndex<int>>);

TEST(PrefixIndexTest, ModelsSatisfyTheConcept) {
  EXPECT_TRUE((PrefixIndex<RadixTree<uint64_t>>));
  EXPECT_FALSE(PrefixIndex<NoStats>);
}

}  // namespace
}  // namespace mooncake::index
