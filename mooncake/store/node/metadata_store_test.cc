#include "mooncake/store/node/metadata_store.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake::node {
namespace {

TEST(MetadataStore, PutGetReplaceDelete) {
  MetadataStore s;
  EXPECT_TRUE(absl::IsNotFound(s.Get("a").status()));
  ASSERT_TRUE(s.Put("a", "one").ok());
  EXPECT_EQ(*s.Get("a"), "one");
  ASSERT_TRUE(s.Put("a", "three").ok());
  EXPECT_EQ(*s.Get("a"), "three");
  EXPECT_EQ(s.stats().keys, 1u);
  EXPECT_EQ(s.stats().bytes, 1u + 5u);
  ASSERT_TRUE(s.Put(std::string("b\0c", 3), std::string("\0\xff", 2)).ok());  // any bytes
  EXPECT_EQ(*s.Get(std::string("b\0c", 3)), std::string("\0\xff", 2));
  EXPECT_TRUE(absl::IsNotFound(s.Get("b").status()));
  ASSERT_TRUE(s.Delete("a").ok());
  EXPECT_TRUE(absl::IsNotFound(s.Get("a").status()));
  EXPECT_TRUE(absl::IsNotFound(s.Delete("a")));
  EXPECT_EQ(s.stats().keys, 1u);
  EXPECT_EQ(s.stats().bytes, 5u);
  ASSERT_TRUE(s.Put("empty", "").ok());  // an empty value is a value
  EXPECT_EQ(*s.Get("empty"), "");
}

TEST(MetadataStore, KeysMustBeNonEmptyAndBounded) {
  MetadataStore s({.max_key_bytes = 8, .max_value_bytes = 16, .max_total_bytes = 64});
  EXPECT_TRUE(absl::IsInvalidArgument(s.Put("", "v")));
  EXPECT_TRUE(absl::IsInvalidArgument(s.Get("").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(s.Delete("")));
  EXPECT_TRUE(s.Put(std::string(8, 'k'), "v").ok());
  EXPECT_TRUE(absl::IsInvalidArgument(s.Put(std::string(9, 'k'), "v")));
  EXPECT_TRUE(absl::IsInvalidArgument(s.Get(std::string(9, 'k')).status()));
}

TEST(MetadataStore, ValueAndTotalLimitsLeaveTheStoreUnchanged) {
  MetadataStore s({.max_key_bytes = 8, .max_value_bytes = 16, .max_total_bytes = 40});
  EXPECT_TRUE(s.Put("a", std::string(16, 'x')).ok());
  EXPECT_TRUE(absl::IsOutOfRange(s.Put("b", std::string(17, 'x'))));
  EXPECT_TRUE(absl::IsNotFound(s.Get("b").status()));
  EXPECT_TRUE(s.Put("b", std::string(16, 'y')).ok());  // 34 of 40 bytes
  EXPECT_EQ(s.stats().bytes, 34u);
  const absl::Status full = s.Put("c", "123456");  // 41 > 40
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  EXPECT_TRUE(absl::IsNotFound(s.Get("c").status()));
  EXPECT_EQ(s.stats().bytes, 34u);
  // A replacement counts only the difference: "a" shrinking makes room.
  EXPECT_TRUE(s.Put("a", "z").ok());
  EXPECT_EQ(s.stats().bytes, 19u);
  EXPECT_TRUE(s.Put("c", "123456").ok());
  // Replacing with a larger value past the total is refused; the old stays.
  EXPECT_EQ(s.stats().bytes, 26u);
  EXPECT_TRUE(absl::IsResourceExhausted(s.Put("a", std::string(16, 'w'))));  // 41
  EXPECT_EQ(*s.Get("a"), "z");
  EXPECT_TRUE(s.Delete("b").ok());
  EXPECT_TRUE(s.Put("a", std::string(16, 'w')).ok());
  EXPECT_EQ(s.stats().bytes, 17u + 7u);
}

TEST(MetadataStore, ConcurrentWritersKeepTheAccounting) {
  MetadataStore s;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&s, t] {
      for (int i = 0; i < 500; ++i) {
        const std::string key = "k" + std::to_string(i % 50);
        ASSERT_TRUE(s.Put(key, std::string(static_cast<size_t>(t + i % 7), 'v')).ok());
        if (i % 3 == 0) (void)s.Delete(key);
      }
    });
  }
  for (auto& th : threads) th.join();
  uint64_t bytes = 0;
  uint64_t keys = 0;
  for (int i = 0; i < 50; ++i) {
    const std::string key = "k" + std::to_string(i);
    auto v = s.Get(key);
    if (v.ok()) {
      ++keys;
      bytes += key.size() + v->size();
    }
  }
  EXPECT_EQ(s.stats().keys, keys);
  EXPECT_EQ(s.stats().bytes, bytes);
}

}  // namespace
}  // namespace mooncake::node
