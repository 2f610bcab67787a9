#include "mooncake/index/eviction_policy.h"

#include <functional>
#include <optional>
#include <span>

#include "gtest/gtest.h"
#include "mooncake/index/belady_policy.h"
#include "mooncake/index/block_key.h"
#include "mooncake/index/conversation_policy.h"
#include "mooncake/index/lru_policy.h"
#include "mooncake/index/reuse_depth_policy.h"
#include "mooncake/index/s3fifo_policy.h"

namespace mooncake::index {
namespace {

struct Complete {
  using key_type = BlockKey;
  void Touch(std::span<const BlockKey>) {}
  void Admit(std::span<const BlockKey>, size_t, uint64_t) {}
  bool Erase(const BlockKey&) { return false; }
  template <typename Fn>
  std::optional<Eviction<BlockKey>> Evict(Fn&&) {
    return std::nullopt;
  }
  bool Contains(const BlockKey&) const { return false; }
  size_t size() const { return 0; }
  uint64_t charged() const { return 0; }
};
static_assert(EvictionPolicy<Complete>);

struct NoKeyType {
  void Touch(std::span<const BlockKey>) {}
};
struct TouchTakesOneKey : Complete {
  void Touch(std::span<const BlockKey>) = delete;
  void Touch(const BlockKey&) {}
};
struct AdmitWithoutCharge : Complete {
  void Admit(std::span<const BlockKey>, size_t, uint64_t) = delete;
  void Admit(std::span<const BlockKey>, size_t) {}
};
struct EvictReturnsKeyOnly : Complete {
  template <typename Fn>
  std::optional<BlockKey> Evict(Fn&&) {
    return std::nullopt;
  }
};
struct EvictIgnoresPredicate : Complete {
  template <typename Fn>
  std::optional<Eviction<BlockKey>> Evict(Fn&&) = delete;
  std::optional<Eviction<BlockKey>> Evict() { return std::nullopt; }
};
struct EraseReturnsVoid : Complete {
  void Erase(const BlockKey&) {}
};
struct ContainsNotConst : Complete {
  bool Contains(const BlockKey&) const = delete;
  bool Contains(const BlockKey&) { return false; }
};
struct NoCharged : Complete {
  void charged() const {}
};

static_assert(!EvictionPolicy<NoKeyType>);
static_assert(!EvictionPolicy<TouchTakesOneKey>);
static_assert(!EvictionPolicy<AdmitWithoutCharge>);
static_assert(!EvictionPolicy<EvictReturnsKeyOnly>);
static_assert(!EvictionPolicy<EvictIgnoresPredicate>);
static_assert(!EvictionPolicy<EraseReturnsVoid>);
static_assert(!EvictionPolicy<ContainsNotConst>);
static_assert(!EvictionPolicy<NoCharged>);

TEST(EvictionPolicyTest, ModelsSatisfyTheConcept) {
  EXPECT_TRUE(EvictionPolicy<LruPolicy<>>);
  EXPECT_TRUE(EvictionPolicy<S3FifoPolicy<>>);
  EXPECT_TRUE(EvictionPolicy<ReuseDepthPolicy<>>);
  EXPECT_TRUE(EvictionPolicy<ConversationPolicy<>>);
  EXPECT_TRUE(EvictionPolicy<BeladyPolicy<>>);
  EXPECT_TRUE((EvictionPolicy<ConversationPolicy<uint64_t, std::hash<uint64_t>>>));
  EXPECT_TRUE((EvictionPolicy<LruPolicy<uint64_t, std::hash<uint64_t>>>));
}

}  // namespace
}  // namespace mooncake::index
