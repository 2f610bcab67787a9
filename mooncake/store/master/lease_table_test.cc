#include "mooncake/store/master/lease_table.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake::master {
namespace {

TEST(LeaseTableTest, TakeReturnsObjectsOnce) {
  LeaseTable t;
  const uint64_t id = t.Grant(100, {{"a", 1}, {"b", 2}});
  EXPECT_NE(id, 0u);
  EXPECT_EQ(t.live(), 1u);
  auto objs = t.Take(id);
  ASSERT_TRUE(objs.has_value());
  ASSERT_EQ(objs->size(), 2u);
  EXPECT_EQ((*objs)[1].key, "b");
  EXPECT_FALSE(t.Take(id).has_value());
  EXPECT_FALSE(t.Take(12345).has_value());
  EXPECT_EQ(t.live(), 0u);
}

TEST(LeaseTableTest, ExpiredLeasesAreTakenAtTheirTime) {
  LeaseTable t;
  const uint64_t early = t.Grant(100, {{"a", 1}});
  t.Grant(200, {{"b", 2}});
  const uint64_t released = t.Grant(50, {{"c", 3}});
  ASSERT_TRUE(t.Take(released).has_value());
  EXPECT_TRUE(t.TakeExpired(99, 10).empty());
  auto due = t.TakeExpired(150, 10);
  ASSERT_EQ(due.size(), 1u);  // the released one is not returned again
  EXPECT_EQ(due[0][0].key, "a");
  EXPECT_FALSE(t.Take(early).has_value());
  EXPECT_EQ(t.TakeExpired(1000, 10).size(), 1u);
  EXPECT_EQ(t.live(), 0u);
}

TEST(LeaseTableTest, ConcurrentGrantsGetDistinctIds) {
  LeaseTable t;
  std::vector<std::vector<uint64_t>> ids(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < 1000; ++j) ids[i].push_back(t.Grant(j, {{"k", 1}}));
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(t.live(), 4000u);
  size_t taken = 0;
  for (auto& v : ids) {
    for (uint64_t id : v) taken += t.Take(id).has_value();
  }
  EXPECT_EQ(taken, 4000u);
}

}  // namespace
}  // namespace mooncake::master
