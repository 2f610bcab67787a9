#include "mooncake/index/lru_policy.h"

#include <cstdint>
#include <list>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/hash/hash.h"
#include "gtest/gtest.h"
#include "mooncake/index/eviction_policy_testing.h"

namespace mooncake::index {
namespace {

using LruTypes = ::testing::Types<LruPolicy<>>;
INSTANTIATE_TYPED_TEST_SUITE_P(Lru, EvictionPolicyConformance, LruTypes);

using index_testing::PolicyChain;

TEST(LruPolicyTest, TouchedChainOutlivesOlderOne) {
  LruPolicy<> lru;
  const auto a = PolicyChain(0, 2);
  const auto b = PolicyChain(10, 2);
  lru.Admit(a, 0, 1);
  lru.Admit(b, 0, 1);
  lru.Touch(a);
  auto always = [](const BlockKey&) { return true; };
  EXPECT_EQ(lru.Evict(always)->key, b[1]);
  EXPECT_EQ(lru.Evict(always)->key, b[0]);
  EXPECT_EQ(lru.Evict(always)->key, a[1]);
}

TEST(LruPolicyTest, AdmitRefreshesThePrefix) {
  LruPolicy<> lru;
  const auto a = PolicyChain(0, 3);
  const auto b = PolicyChain(10, 1);
  lru.Admit(std::span<const BlockKey>(a).first(1), 0, 1);
  lru.Admit(b, 0, 1);
  lru.Admit(a, 1, 1);  // a[0] is the prefix of the new blocks: refreshed
  EXPECT_EQ(lru.Evict([](const BlockKey&) { return true; })->key, b[0]);
}

// Keys 0..n-1 admitted one by one: 0 is the least recent.
LruPolicy<> Ordered(int n, std::vector<BlockKey>* keys) {
  LruPolicy<> lru;
  for (int i = 0; i < n; ++i) {
    keys->push_back(PolicyChain(100 * i, 1)[0]);
    lru.Admit(std::span<const BlockKey>(&keys->back(), 1), 0, 1);
  }
  return lru;
}

TEST(LruPolicyTest, SkippedKeysKeepTheirPlaceRejectedOnesAreRefreshed) {
  std::vector<BlockKey> k;
  LruPolicy<> lru = Ordered(4, &k);
  // k0 is skipped (not the caller's), k1 rejected (in use): k2 goes.
  auto first = [&](const BlockKey& key) -> EvictVerdict {
    if (key == k[0]) return EvictVerdict::kSkip;
    if (key == k[1]) return EvictVerdict::kKeep;
    return EvictVerdict::kEvict;
  };
  EXPECT_EQ(lru.Evict(first)->key, k[2]);
  // k0 is still the least recent; k1 became the most recent.
  auto always = [](const BlockKey&) { return true; };
  EXPECT_EQ(lru.Evict(always)->key, k[0]);
  EXPECT_EQ(lru.Evict(always)->key, k[3]);
  EXPECT_EQ(lru.Evict(always)->key, k[1]);
  EXPECT_FALSE(lru.Evict(always).has_value());
}

TEST(LruPolicyTest, AScanSkipsABoundedNumberOfKeys) {
  std::vector<BlockKey> k;
  const int n = static_cast<int>(LruPolicy<>::kMaxSkipped) + 2;
  LruPolicy<> lru = Ordered(n, &k);
  auto only_newest = [&](const BlockKey& key) -> EvictVerdict {
    return key == k.back() ? EvictVerdict::kEvict : EvictVerdict::kSkip;
  };
  EXPECT_FALSE(lru.Evict(only_newest).has_value()) << "past the bound";
  EXPECT_EQ(lru.size(), static_cast<size_t>(n));
  auto always = [](const BlockKey&) { return true; };
  EXPECT_EQ(lru.Evict(always)->key, k[0]) << "the order is unchanged";
}

using StringLru = LruPolicy<std::string, absl::Hash<std::string>>;

// The reference: a list, most recent first, of (key, charge).
struct ListModel {
  std::list<std::pair<std::string, uint64_t>> order;
  std::list<std::pair<std::string, uint64_t>>::iterator Find(const std::string& k) {
    for (auto it = order.begin(); it != order.end(); ++it) {
      if (it->first == k) return it;
    }
    return order.end();
  }
};

// Random Admit / Touch / Erase / Evict (with verdicts that keep and skip)
// on keys short and long: the policy's order, charges and answers match the
// list's, and erased entries' room is reused (the slab never holds more
// entries than were tracked at once, checked through the order staying
// right after many rounds of churn).
TEST(LruPolicyTest, MatchesAListOverRandomOperations) {
  std::mt19937_64 rng(7);
  StringLru lru;
  ListModel model;
  uint64_t charged = 0;
  auto key_of = [](uint64_t i) {
    // Every third key is longer than any inline buffer.
    return i % 3 == 0 ? std::string(40, 'k') + std::to_string(i) : "k" + std::to_string(i);
  };
  for (int step = 0; step < 20000; ++step) {
    const uint64_t i = rng() % 300;
    const std::string key = key_of(i);
    const bool tracked = model.Find(key) != model.order.end();
    switch (rng() % 4) {
      case 0:
        if (!tracked) {
          const uint64_t charge = 1 + rng() % 100;
          lru.Admit(std::span<const std::string>(&key, 1), 0, charge);
          model.order.emplace_front(key, charge);
          charged += charge;
        }
        break;
      case 1:
        if (tracked) {
          lru.Touch(std::span<const std::string>(&key, 1));
          model.order.splice(model.order.begin(), model.order, model.Find(key));
        }
        break;
      case 2: {
        const auto it = model.Find(key);
        ASSERT_EQ(lru.Erase(key), it != model.order.end());
        if (it != model.order.end()) {
          charged -= it->second;
          model.order.erase(it);
        }
        break;
      }
      case 3: {
        // Keys of i % 5 == 0 are skipped, i % 5 == 1 kept, the rest evicted.
        const uint64_t salt = rng() % 5;
        auto verdict = [&](const std::string& k) -> EvictVerdict {
          const uint64_t v = (std::hash<std::string>{}(k) + salt) % 5;
          return v == 0 ? EvictVerdict::kSkip : v == 1 ? EvictVerdict::kKeep : EvictVerdict::kEvict;
        };
        std::optional<std::pair<std::string, uint64_t>> want;
        std::list<std::pair<std::string, uint64_t>> kept;
        for (auto it = model.order.end(); it != model.order.begin();) {
          --it;
          const EvictVerdict v = verdict(it->first);
          if (v.kind == EvictVerdict::kEvict) {
            want = *it;
            model.order.erase(it);
            break;
          }
          if (v.kind == EvictVerdict::kKeep) {
            auto moved = it++;
            kept.splice(kept.end(), model.order, moved);
          }
        }
        // Refreshed keys went to the front in the order the scan met them.
        for (auto& e : kept) model.order.push_front(e);
        std::optional<Eviction<std::string>> got = lru.Evict(verdict);
        ASSERT_EQ(got.has_value(), want.has_value()) << "step " << step;
        if (got.has_value()) {
          EXPECT_EQ(got->key, want->first);
          EXPECT_EQ(got->charge, want->second);
          charged -= got->charge;
        }
        break;
      }
    }
    ASSERT_EQ(lru.size(), model.order.size()) << "step " << step;
    ASSERT_EQ(lru.charged(), charged);
  }
  // The whole order, least recent first.
  auto always = [](const std::string&) { return true; };
  for (auto it = model.order.rbegin(); it != model.order.rend(); ++it) {
    std::optional<Eviction<std::string>> got = lru.Evict(always);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->key, it->first);
  }
  EXPECT_EQ(lru.size(), 0u);
  EXPECT_EQ(lru.charged(), 0u);
}

TEST(LruPolicyDeathTest, AdmitOfATrackedKeyIsCaught) {
  LruPolicy<> lru;
  const auto a = PolicyChain(0, 1);
  lru.Admit(a, 0, 1);
  EXPECT_DEATH(lru.Admit(a, 0, 1), "already tracked");
}

TEST(LruPolicyTest, AMoveKeepsTheOrderAndLeavesAnEmptyUsablePolicy) {
  std::vector<BlockKey> k;
  LruPolicy<> a = Ordered(3, &k);
  LruPolicy<> b(std::move(a));
  EXPECT_EQ(a.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is specified
  EXPECT_FALSE(a.Contains(k[0]));
  a.Admit(std::span<const BlockKey>(&k[1], 1), 0, 5);
  EXPECT_EQ(a.charged(), 5u);
  LruPolicy<> c;
  c = std::move(b);
  auto always = [](const BlockKey&) { return true; };
  EXPECT_EQ(c.Evict(always)->key, k[0]);
  EXPECT_EQ(c.Evict(always)->key, k[1]);
  EXPECT_EQ(c.Evict(always)->key, k[2]);
  EXPECT_EQ(a.Evict(always)->key, k[1]);
}

}  // namespace
}  // namespace mooncake::index
