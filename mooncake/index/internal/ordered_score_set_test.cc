#include "mooncake/index/internal/ordered_score_set.h"

#include <cstdint>
#include <functional>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake::index_internal {
namespace {

struct Entry {
  int64_t score;
  uint64_t charge;
};

struct RankOf {
  std::tuple<int64_t, uint64_t> operator()(const Entry& e, const uint64_t& key) const {
    return {e.score, key};
  }
};

using Set = OrderedScoreSet<uint64_t, std::hash<uint64_t>, Entry, RankOf>;

const auto kAny = [](const uint64_t&) { return true; };

TEST(OrderedScoreSetTest, EvictsLowestScoreThenLowestKey) {
  Set s;
  s.Insert(7, Entry{5, 1});
  s.Insert(3, Entry{5, 2});
  s.Insert(9, Entry{1, 4});
  EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(s.charged(), 7u);
  std::vector<uint64_t> order;
  while (auto v = s.Evict(kAny)) order.push_back(v->key);
  EXPECT_EQ(order, (std::vector<uint64_t>{9, 3, 7}));
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.charged(), 0u);
}

TEST(OrderedScoreSetTest, UpdateReranks) {
  Set s;
  s.Insert(1, Entry{10, 1});
  s.Insert(2, Entry{20, 1});
  s.Update(1, [](Entry& e) { e.score = 30; });
  EXPECT_EQ(s.Find(1)->score, 30);
  EXPECT_EQ(s.Evict(kAny)->key, 2u);
  EXPECT_EQ(s.Evict(kAny)->key, 1u);
}

TEST(OrderedScoreSetTest, EraseKeepsChargeAndOrderConsistent) {
  Set s;
  s.Insert(1, Entry{1, 10});
  s.Insert(2, Entry{2, 20});
  EXPECT_TRUE(s.Erase(1));
  EXPECT_FALSE(s.Erase(1));
  EXPECT_FALSE(s.Contains(1));
  EXPECT_EQ(s.Find(1), nullptr);
  EXPECT_EQ(s.charged(), 20u);
  auto v = s.Evict(kAny);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->key, 2u);
  EXPECT_EQ(v->charge, 20u);
  EXPECT_FALSE(s.Evict(kAny).has_value());
}

TEST(OrderedScoreSetTest, EvictSkipsRefusedKeysAndReportsTheVictim) {
  Set s;
  s.Insert(1, Entry{1, 1});
  s.Insert(2, Entry{2, 1});
  std::vector<uint64_t> seen;
  auto v = s.Evict([](const uint64_t& k) { return k != 1; },
                   [&](const uint64_t& k, const Entry& e) {
                     seen.push_back(k);
                     EXPECT_EQ(e.score, 2);
                   });
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->key, 2u);
  EXPECT_EQ(seen, (std::vector<uint64_t>{2}));
  EXPECT_TRUE(s.Contains(1));
  EXPECT_FALSE(s.Evict([](const uint64_t&) { return false; }).has_value());
  EXPECT_EQ(s.size(), 1u);
}

}  // namespace
}  // namespace mooncake::index_internal
