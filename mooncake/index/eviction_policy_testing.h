// Conformance kit for EvictionPolicy models keyed by BlockKey:
//
//   using MyTypes = ::testing::Types<MyPolicy<>>;
//   INSTANTIATE_TYPED_TEST_SUITE_P(MyPolicy, EvictionPolicyConformance, MyTypes);
//
// A policy that is not default-constructible specializes
// PolicyFactory<P>::Make() (capacity hint: kConformanceCapacity charge units).
#ifndef MOONCAKE_INDEX_EVICTION_POLICY_TESTING_H_
#define MOONCAKE_INDEX_EVICTION_POLICY_TESTING_H_

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"
#include "mooncake/index/block_key.h"
#include "mooncake/index/eviction_policy.h"

namespace mooncake::index {

inline constexpr uint64_t kConformanceCapacity = 64;

template <typename P>
struct PolicyFactory {
  static P Make() { return P(); }
};

namespace index_testing {

inline BlockKey PolicyKey(uint64_t i) { return StableHash128(&i, sizeof(i)); }

inline std::vector<BlockKey> PolicyChain(uint64_t base, size_t n) {
  std::vector<BlockKey> chain;
  for (size_t i = 0; i < n; ++i) chain.push_back(PolicyKey(base + i));
  return chain;
}

// A small multi-turn chat workload: `conversations` chats of up to 6 turns
// (each turn extends the previous prompt by a few blocks), and between two
// turns of a chat a flood of one-shot prompts (`flood_blocks` blocks) that
// have nothing in common but a 1-block root. Chains are root first, as in
// trace_replay.h. Deterministic for a seed.
inline std::vector<std::vector<BlockKey>> ConversationWorkload(uint64_t seed, size_t conversations,
                                                               size_t flood_blocks) {
  std::mt19937_64 rng(seed);
  uint64_t next_id = 1;
  auto extend = [&](std::vector<BlockKey> chain, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const BlockKey parent = chain.empty() ? BlockKey{} : chain.back();
      const uint64_t buf[3] = {parent.low, parent.high, chain.empty() ? 0 : next_id++};
      chain.push_back(StableHash128(buf, sizeof(buf)));
    }
    return chain;
  };
  std::vector<std::vector<BlockKey>> chats(conversations, extend({}, 1));
  std::vector<size_t> turns_left(conversations);
  for (size_t c = 0; c < conversations; ++c) turns_left[c] = 2 + rng() % 5;
  std::vector<std::vector<BlockKey>> requests;
  for (bool more = true; more;) {
    more = false;
    for (size_t c = 0; c < conversations; ++c) {
      if (turns_left[c] == 0) continue;
      more = true;
      --turns_left[c];
      chats[c] = extend(chats[c], 2 + rng() % 4);
      requests.push_back(chats[c]);
      for (size_t flooded = 0; flooded < flood_blocks / conversations;) {
        const size_t n = 4 + rng() % 8;
        requests.push_back(extend(extend({}, 1), n));
        flooded += n;
      }
    }
  }
  return requests;
}

}  // namespace index_testing

template <typename P>
class EvictionPolicyConformance : public ::testing::Test {
 protected:
  P policy_ = PolicyFactory<P>::Make();
};

TYPED_TEST_SUITE_P(EvictionPolicyConformance);

TYPED_TEST_P(EvictionPolicyConformance, AdmitTracksAndCharges) {
  const auto chain = index_testing::PolicyChain(0, 5);
  this->policy_.Admit(chain, 0, 3);
  EXPECT_EQ(this->policy_.size(), 5u);
  EXPECT_EQ(this->policy_.charged(), 15u);
  for (const auto& k : chain) EXPECT_TRUE(this->policy_.Contains(k));
  EXPECT_FALSE(this->policy_.Contains(index_testing::PolicyKey(99)));
  // Extending the chain admits only the new tail.
  auto longer = index_testing::PolicyChain(0, 7);
  this->policy_.Admit(longer, 5, 1);
  EXPECT_EQ(this->policy_.size(), 7u);
  EXPECT_EQ(this->policy_.charged(), 17u);
}

TYPED_TEST_P(EvictionPolicyConformance, EvictReturnsWhatItDropped) {
  EXPECT_FALSE(this->policy_.Evict([](const BlockKey&) { return true; }).has_value());
  const auto chain = index_testing::PolicyChain(10, 4);
  this->policy_.Admit(chain, 0, 2);
  std::set<BlockKey> left(chain.begin(), chain.end());
  while (this->policy_.size() > 0) {
    const uint64_t before = this->policy_.charged();
    auto victim = this->policy_.Evict([](const BlockKey&) { return true; });
    ASSERT_TRUE(victim.has_value());
    EXPECT_EQ(victim->charge, 2u);
    EXPECT_EQ(this->policy_.charged(), before - 2);
    EXPECT_EQ(left.erase(victim->key), 1u) << "evicted an unknown or repeated key";
    EXPECT_FALSE(this->policy_.Contains(victim->key));
  }
  EXPECT_TRUE(left.empty());
  EXPECT_EQ(this->policy_.charged(), 0u);
}

TYPED_TEST_P(EvictionPolicyConformance, EvictsDeepestFirstOnOneChain) {
  const auto chain = index_testing::PolicyChain(20, 6);
  this->policy_.Admit(chain, 0, 1);
  this->policy_.Touch(std::span<const BlockKey>(chain).first(3));
  for (size_t i = chain.size(); i-- > 0;) {
    auto victim = this->policy_.Evict([](const BlockKey&) { return true; });
    ASSERT_TRUE(victim.has_value());
    EXPECT_EQ(victim->key, chain[i]) << "a prefix went before its extension";
  }
}

TYPED_TEST_P(EvictionPolicyConformance, EvictHonorsCanEvict) {
  const auto chain = index_testing::PolicyChain(30, 5);
  this->policy_.Admit(chain, 0, 1);
  EXPECT_FALSE(this->policy_.Evict([](const BlockKey&) { return false; }).has_value());
  EXPECT_EQ(this->policy_.size(), 5u);
  auto victim = this->policy_.Evict([&](const BlockKey& k) { return k == chain[1]; });
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(victim->key, chain[1]);
  EXPECT_EQ(this->policy_.size(), 4u);
}

TYPED_TEST_P(EvictionPolicyConformance, EraseForgets) {
  const auto chain = index_testing::PolicyChain(40, 3);
  this->policy_.Admit(chain, 0, 4);
  EXPECT_TRUE(this->policy_.Erase(chain[2]));
  EXPECT_FALSE(this->policy_.Erase(chain[2]));
  EXPECT_FALSE(this->policy_.Contains(chain[2]));
  EXPECT_EQ(this->policy_.charged(), 8u);
  auto victim = this->policy_.Evict([](const BlockKey&) { return true; });
  ASSERT_TRUE(victim.has_value());
  EXPECT_NE(victim->key, chain[2]);
}

// Random chains over a small alphabet form a forest; eviction must always
// take a leaf of it (can_evict says which) and the accounting must match.
TYPED_TEST_P(EvictionPolicyConformance, RandomOpsAgainstReference) {
  for (uint64_t seed : {11, 12, 13}) {
    TypeParam policy = PolicyFactory<TypeParam>::Make();
    std::mt19937_64 rng(seed);
    std::map<BlockKey, std::optional<BlockKey>> parent;  // tracked key -> parent
    absl::flat_hash_map<BlockKey, int> kids;
    auto chain_of = [&](const std::vector<uint64_t>& ids) {
      std::vector<BlockKey> c;
      BlockKey h{};
      for (uint64_t id : ids) {
        uint64_t buf[3] = {h.low, h.high, id};
        h = StableHash128(buf, sizeof(buf));
        c.push_back(h);
      }
      return c;
    };
    auto is_leaf = [&](const BlockKey& k) { return kids[k] == 0; };
    for (int op = 0; op < 2000; ++op) {
      std::vector<uint64_t> ids(1 + rng() % 10);
      for (auto& id : ids) id = rng() % 3;
      const auto chain = chain_of(ids);
      size_t present = 0;
      while (present < chain.size() && parent.contains(chain[present])) ++present;
      policy.Touch(std::span<const BlockKey>(chain).first(present));
      policy.Admit(chain, present, 1);
      for (size_t i = present; i < chain.size(); ++i) {
        parent[chain[i]] = i == 0 ? std::nullopt : std::optional(chain[i - 1]);
        if (i > 0) ++kids[chain[i - 1]];
      }
      while (policy.charged() > kConformanceCapacity) {
        auto victim = policy.Evict(is_leaf);
        ASSERT_TRUE(victim.has_value()) << op;
        auto it = parent.find(victim->key);
        ASSERT_NE(it, parent.end()) << "evicted an untracked key";
        ASSERT_TRUE(is_leaf(victim->key)) << "evicted a block with cached children";
        if (it->second) --kids[*it->second];
        parent.erase(it);
      }
      ASSERT_EQ(policy.size(), parent.size()) << op;
      ASSERT_EQ(policy.charged(), parent.size()) << op;
    }
    for (const auto& [k, p] : parent) ASSERT_TRUE(policy.Contains(k));
  }
}

REGISTER_TYPED_TEST_SUITE_P(EvictionPolicyConformance, AdmitTracksAndCharges,
                            EvictReturnsWhatItDropped, EvictsDeepestFirstOnOneChain,
                            EvictHonorsCanEvict, EraseForgets, RandomOpsAgainstReference);

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_EVICTION_POLICY_TESTING_H_
