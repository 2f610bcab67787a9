#include "mooncake/index/conversation_policy.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/index/eviction_policy_testing.h"
#include "mooncake/index/lru_policy.h"
#include "mooncake/index/prefix_cache.h"
#include "mooncake/index/radix_tree.h"
#include "mooncake/index/trace_replay.h"

namespace mooncake::index {

template <>
struct PolicyFactory<ConversationPolicy<>> {
  static ConversationPolicy<> Make() {
    return ConversationPolicy<>(ConversationOptions{.capacity = kConformanceCapacity});
  }
};

namespace {

using ConversationTypes = ::testing::Types<ConversationPolicy<>>;
INSTANTIATE_TYPED_TEST_SUITE_P(Conversation, EvictionPolicyConformance, ConversationTypes);

using index_testing::PolicyChain;

auto Always() {
  return [](const BlockKey&) { return true; };
}

// chain + n fresh blocks (ids from `base`).
std::vector<BlockKey> Extend(std::vector<BlockKey> chain, uint64_t base, size_t n) {
  for (size_t i = 0; i < n; ++i) chain.push_back(index_testing::PolicyKey(base + i));
  return chain;
}

// Admits `chain` the way PrefixCache does after a lookup.
void Request(ConversationPolicy<>& p, const std::vector<BlockKey>& chain) {
  size_t m = 0;
  while (m < chain.size() && p.Contains(chain[m])) ++m;
  p.Touch(std::span<const BlockKey>(chain).first(m));
  p.Admit(chain, m, 1);
}

TEST(ConversationPolicyTest, RequestExtendingAnEndIsTheNextTurn) {
  ConversationPolicy<> p(ConversationOptions{.capacity = 100});
  const auto turn0 = PolicyChain(0, 4);
  Request(p, turn0);
  EXPECT_EQ(p.TurnOfKey(turn0[3]), 0u);
  // Diverges at turn0's last block (the partial one): still the next turn.
  const auto turn1 = Extend(std::vector<BlockKey>(turn0.begin(), turn0.end() - 1), 100, 3);
  Request(p, turn1);
  EXPECT_EQ(p.TurnOfKey(turn1.back()), 1u);
  const auto turn2 = Extend(turn1, 200, 2);
  Request(p, turn2);
  EXPECT_EQ(p.TurnOfKey(turn2.back()), 2u);
}

TEST(ConversationPolicyTest, SharingAPrefixMiddleIsAFirstTurn) {
  ConversationPolicy<> p(ConversationOptions{.capacity = 100});
  const auto system_and_question = PolicyChain(0, 10);
  Request(p, system_and_question);
  // Same 5-block system prompt, another question: not a continuation.
  const auto other = Extend(
      std::vector<BlockKey>(system_and_question.begin(), system_and_question.begin() + 5), 100, 4);
  Request(p, other);
  EXPECT_EQ(p.TurnOfKey(other.back()), 0u);
}

TEST(ConversationPolicyTest, GhostRecognizesAnEvictedConversation) {
  ConversationPolicy<> p(ConversationOptions{.capacity = 100});
  const auto turn0 = PolicyChain(0, 4);
  Request(p, turn0);
  while (p.Evict(Always())) {
  }
  EXPECT_EQ(p.size(), 0u);
  EXPECT_EQ(p.ghost_size(), 4u);
  const auto turn1 = Extend(turn0, 100, 2);
  Request(p, turn1);
  EXPECT_EQ(p.TurnOfKey(turn1.back()), 1u);
  EXPECT_EQ(p.ghost_size(), 0u) << "re-admitted keys leave the ghost";
}

TEST(ConversationPolicyTest, NoGhostForgetsEvictedConversations) {
  ConversationPolicy<> p(ConversationOptions{.capacity = 100, .ghost_factor = 0});
  const auto turn0 = PolicyChain(0, 4);
  Request(p, turn0);
  while (p.Evict(Always())) {
  }
  EXPECT_EQ(p.ghost_size(), 0u);
  const auto turn1 = Extend(turn0, 100, 2);
  Request(p, turn1);
  EXPECT_EQ(p.TurnOfKey(turn1.back()), 0u);
}

TEST(ConversationPolicyTest, LaterTurnOutlivesNewerFirstTurns) {
  ConversationPolicy<> p(ConversationOptions{.capacity = 10});
  const auto turn0 = PolicyChain(0, 3);
  Request(p, turn0);
  const auto turn1 = Extend(turn0, 100, 2);
  Request(p, turn1);  // turn 1: head start of 2 gaps (the capacity, 10, until gaps are learned)
  const auto fresh = PolicyChain(1000, 3);
  Request(p, fresh);  // newer, but a first turn
  // Demoted tails first (deepest of each request, oldest first), then the
  // rest of `fresh`, and only then the turn-1 chain.
  EXPECT_EQ(p.Evict(Always())->key, fresh[2]);
  EXPECT_EQ(p.Evict(Always())->key, turn1.back());
  EXPECT_EQ(p.Evict(Always())->key, fresh[1]);
  EXPECT_EQ(p.Evict(Always())->key, fresh[0]);
  EXPECT_EQ(p.Evict(Always())->key, turn1[3]);
}

TEST(ConversationPolicyTest, WithoutDemotionTheTailStaysWithItsChain) {
  ConversationPolicy<> p(ConversationOptions{.capacity = 10, .demote_tail = false});
  const auto old_chain = PolicyChain(0, 3);
  Request(p, old_chain);
  const auto new_chain = PolicyChain(100, 3);
  Request(p, new_chain);
  EXPECT_EQ(p.Evict(Always())->key, old_chain[2]);
}

TEST(ConversationPolicyTest, TypicalGapIsLearnedFromTurns) {
  ConversationPolicy<> p(ConversationOptions{.capacity = 1000, .gap_samples_min = 4});
  EXPECT_EQ(p.typical_gap(), 1000.0);
  for (uint64_t c = 0; c < 8; ++c) {
    const auto turn0 = PolicyChain(c * 1000, 4);
    Request(p, turn0);
    Request(p, PolicyChain(c * 1000 + 500, 60));   // 60 blocks of other traffic
    Request(p, Extend(turn0, c * 1000 + 100, 4));  // gap = 60 + 4 new blocks
  }
  // 64 lies in [2^6, 2^6.5): the median is reported as that bucket's top.
  EXPECT_NEAR(p.typical_gap(), 90.5, 0.1);
}

TEST(ConversationPolicyTest, TouchKeepsParentsAtOrAboveChildren) {
  ConversationPolicy<> p(ConversationOptions{.capacity = 10});
  const auto a = PolicyChain(0, 5);
  Request(p, a);
  const auto b = PolicyChain(100, 5);
  Request(p, b);
  p.Touch(std::span<const BlockKey>(a).first(2));  // a[0, 2) now rank with b
  std::vector<BlockKey> order;
  while (auto v = p.Evict(Always())) order.push_back(v->key);
  ASSERT_EQ(order.size(), 10u);
  auto pos = [&](const BlockKey& k) { return std::find(order.begin(), order.end(), k); };
  for (size_t i = 0; i + 1 < a.size(); ++i) EXPECT_LT(pos(a[i + 1]), pos(a[i])) << i;
  EXPECT_LT(pos(a[2]), pos(b[0])) << "untouched a[2, 5) is older than b";
  EXPECT_LT(pos(b[2]), pos(a[1])) << "equal ranks: the deeper block goes first";
}

// The workload this policy is for: chats whose turns are separated by more
// one-shot traffic than the cache holds. LRU loses every chat between turns.
TEST(ConversationPolicyTest, BeatsLruOnInterleavedChats) {
  const auto chains = index_testing::ConversationWorkload(7, 8, 300);
  const uint64_t capacity = 200;
  PrefixCache<RadixTree<uint32_t>, LruPolicy<>> lru(capacity, 1, RadixTree<uint32_t>(),
                                                    LruPolicy<>());
  PrefixCache<RadixTree<uint32_t>, ConversationPolicy<>> conv(
      capacity, 1, RadixTree<uint32_t>(),
      ConversationPolicy<>(ConversationOptions{.capacity = capacity}));
  const double lru_rate = Replay<decltype(lru)>(chains, lru).HitRate();
  const double conv_rate = Replay<decltype(conv)>(chains, conv).HitRate();
  EXPECT_GT(conv_rate, 1.3 * lru_rate) << "lru " << lru_rate << " conversation " << conv_rate;
  EXPECT_LE(conv.charged(), capacity);
}

TEST(ConversationPolicyDeathTest, RejectsBadOptions) {
  EXPECT_DEATH(ConversationPolicy<>(ConversationOptions{}), "capacity");
  EXPECT_DEATH(ConversationPolicy<>(ConversationOptions{.capacity = 1, .gap_quantile = 0}),
               "gap_quantile");
  EXPECT_DEATH(
      ConversationPolicy<>(ConversationOptions{.capacity = 1, .turn_bonus = {0, -1, 0, 0}}),
      "turn_bonus");
}

}  // namespace
}  // namespace mooncake::index
