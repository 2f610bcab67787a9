#include "mooncake/store/master/object_table.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake::master {
namespace {

TEST(ObjectTableTest, KeysSpreadOverShardsAndAreFound) {
  ObjectTable table(8);
  std::vector<int> per_shard(8);
  for (int i = 0; i < 800; ++i) {
    const std::string key = "key" + std::to_string(i);
    ++per_shard[table.ShardIndex(key)];
    table.With(key, [&](ObjectTable::Shard& s) { s.objects[key].size_bytes = i + 1; });
  }
  for (int n : per_shard) EXPECT_GT(n, 50);  // not all in one shard
  EXPECT_EQ(table.ObjectCount(), 800u);
  const uint64_t size =
      table.With("key7", [](ObjectTable::Shard& s) { return s.Find("key7")->size_bytes; });
  EXPECT_EQ(size, 8u);
  EXPECT_EQ(table.With("nope", [](ObjectTable::Shard& s) { return s.Find("nope"); }), nullptr);
}

TEST(ObjectTableTest, ConcurrentUpdatesOfOneKeyAreSerialized) {
  ObjectTable table(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        table.With("k", [](ObjectTable::Shard& s) { ++s.objects["k"].lease_refs; });
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(table.With("k", [](ObjectTable::Shard& s) { return s.Find("k")->lease_refs; }), 40000u);
}

TEST(ObjectTableDeathTest, ShardCountMustBeAPowerOfTwo) {
  EXPECT_DEATH(ObjectTable(3), "power of two");
}

}  // namespace
}  // namespace mooncake::master
