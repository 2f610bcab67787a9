#include "mooncake/base/interned_string.h"

#include <atomic>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "gtest/gtest.h"
#include "mooncake/base/mutex.h"

namespace mooncake {
namespace {

TEST(InternedStringTest, EqualValuesShareOneCopy) {
  const InternedString a("worker-interned-1");
  const InternedString b(std::string("worker-interned-1"));
  const InternedString c(std::string_view("worker-interned-2"));
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.data(), b.data());  // one copy
  EXPECT_NE(a, c);
  EXPECT_EQ(a, "worker-interned-1");
  EXPECT_EQ(a, std::string("worker-interned-1"));
  EXPECT_EQ(std::string_view("worker-interned-1"), a);
  EXPECT_NE(a, "worker-interned-");
  EXPECT_LT(a, c);
  EXPECT_EQ(a.size(), 17u);
  EXPECT_EQ(a.str(), "worker-interned-1");
  EXPECT_EQ(a.view(), "worker-interned-1");
}

TEST(InternedStringTest, EmptyIsTheDefaultAndInternsNothing) {
  const size_t before = InternedString::interned_count();
  const InternedString d;
  const InternedString e("");
  EXPECT_TRUE(d.empty());
  EXPECT_EQ(d, e);
  EXPECT_EQ(d, "");
  EXPECT_EQ(InternedString::interned_count(), before);
}

TEST(InternedStringTest, ConvertsToTheStringTypesFunctionsTake) {
  const InternedString a("host-abc");
  auto by_ref = [](const std::string& s) { return s.size(); };
  auto by_view = [](std::string_view s) { return s.size(); };
  EXPECT_EQ(by_ref(a), 8u);
  EXPECT_EQ(by_view(a), 8u);
  std::string copy = a;
  EXPECT_EQ(copy, "host-abc");
  InternedString assigned;
  assigned = copy;  // from a std::string, as the fields' old assignments did
  EXPECT_EQ(assigned, a);
}

TEST(InternedStringTest, HashesAsTheString) {
  const InternedString a("tenant-x");
  EXPECT_EQ(absl::HashOf(a), absl::HashOf(std::string("tenant-x")));
  absl::flat_hash_map<std::string, int> by_string{{"tenant-x", 7}};
  EXPECT_EQ(by_string.find(AbslView(a.view()))->second, 7);
  absl::flat_hash_set<InternedString> set{a, InternedString("tenant-x"), InternedString("y")};
  EXPECT_EQ(set.size(), 2u);
}

TEST(InternedStringTest, ConcurrentInternsOfOneValueAgree) {
  const uint64_t bytes_before = InternedString::interned_bytes();
  std::vector<const char*> seen(8);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < seen.size(); ++t) {
    threads.emplace_back([&seen, t] {
      for (int i = 0; i < 1000; ++i) {
        InternedString s(std::string("concurrent-") + std::to_string(i));
        if (i == 999) seen[t] = s.data();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const char* p : seen) EXPECT_EQ(p, seen[0]);
  // 1,000 distinct values were added once each, however many threads asked.
  EXPECT_GE(InternedString::interned_bytes() - bytes_before, 1000u * 12);
  EXPECT_LE(InternedString::interned_bytes() - bytes_before, 1000u * 15);
}

static_assert(sizeof(InternedString) == 4, "an id, so records that repeat one stay small");

// Values are read without the pool's lock while another thread interns new
// ones, across several of the id table's chunks; each value reads back as
// itself.
TEST(InternedStringTest, ReadsWhileAnotherThreadInternsCrossChunks) {
  constexpr int kValues = 3 * static_cast<int>(InternedString::kChunk) + 17;
  Mutex mu;
  std::vector<std::pair<InternedString, std::string>> handed;  // guarded by mu
  std::thread writer([&] {
    for (int i = 0; i < kValues; ++i) {
      std::string v = "chunked-" + std::to_string(i);
      InternedString s(v);
      MutexLock lock(&mu);
      handed.emplace_back(s, std::move(v));
    }
  });
  std::vector<std::thread> readers;
  std::atomic<int> bad{0};
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      for (size_t seen = 0; seen < static_cast<size_t>(kValues);) {
        std::vector<std::pair<InternedString, std::string>> copy;
        {
          MutexLock lock(&mu);
          copy.assign(handed.begin() + static_cast<std::ptrdiff_t>(seen), handed.end());
        }
        for (const auto& [s, v] : copy) {
          if (s.view() != v || s != InternedString(v)) bad.fetch_add(1);
        }
        seen += copy.size();
      }
    });
  }
  writer.join();
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GE(InternedString::interned_count(), static_cast<size_t>(kValues));
}

}  // namespace
}  // namespace mooncake
