#include "mooncake/base/inline_string.h"

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/hash/hash.h"
#include "gtest/gtest.h"

namespace mooncake {
namespace {

TEST(InlineStringTest, ShortValuesStayInlineAndLongOnesGoToTheHeap) {
  for (size_t n : {0, 1, 15, 16, 18, 22, 23, 24, 100, 5000}) {
    std::string v;
    for (size_t i = 0; i < n; ++i) v.push_back(static_cast<char>('a' + i % 26));
    if (n > 0) v[n / 2] = '\0';  // an embedded NUL is a byte like any other
    const InlineString s(v);
    EXPECT_EQ(s.view(), v) << n;
    EXPECT_EQ(s.size(), n);
    EXPECT_EQ(s.empty(), n == 0);
    EXPECT_EQ(s.on_heap(), n > InlineString::kInlineMax) << n;
    EXPECT_EQ(s.str(), v);
    EXPECT_TRUE(s == std::string_view(v));
    EXPECT_TRUE(s == v);
  }
  EXPECT_EQ(sizeof(InlineString), 24u);
}

TEST(InlineStringTest, CopiesAreDeepAndMovesLeaveTheSourceEmpty) {
  const std::string long_value(40, 'x');
  for (const std::string& v : {std::string("short-key"), long_value}) {
    InlineString a(v);
    InlineString b = a;
    EXPECT_EQ(b.view(), v);
    if (a.on_heap()) {
      EXPECT_NE(a.data(), b.data());
    }
    InlineString c = std::move(a);
    EXPECT_EQ(c.view(), v);
    EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
    InlineString d("other");
    d = c;
    EXPECT_EQ(d.view(), v);
    d = std::move(b);
    EXPECT_EQ(d.view(), v);
    d = d;  // self-assignment keeps the value
    EXPECT_EQ(d.view(), v);
    InlineString e(long_value);
    e = InlineString("tiny");  // a heap value replaced by an inline one frees its block
    EXPECT_EQ(e.view(), "tiny");
    EXPECT_FALSE(e.on_heap());
  }
}

TEST(InlineStringTest, HashesAgreeAcrossStringTypesForHeterogeneousLookup) {
  const InlineStringHash h;
  for (const std::string& v :
       {std::string(""), std::string("k18-bytes-long-key"), std::string(64, 'q')}) {
    const InlineString s(v);
    EXPECT_EQ(h(s), h(v));
    EXPECT_EQ(h(s), h(std::string_view(v)));
    EXPECT_EQ(h(s), h(absl::string_view(v)));
    EXPECT_EQ(h(s), absl::Hash<InlineString>()(s));
    EXPECT_TRUE(InlineStringEq()(s, v));
    EXPECT_TRUE(InlineStringEq()(std::string_view(v), s));
  }
  absl::node_hash_map<InlineString, int, InlineStringHash, InlineStringEq> m;
  std::vector<std::string> keys;
  for (int i = 0; i < 1000; ++i)
    keys.push_back(std::string(static_cast<size_t>(i % 40), 'a') + std::to_string(i));
  for (int i = 0; i < 1000; ++i) m.try_emplace(InlineString(keys[i]), i);
  for (int i = 0; i < 1000; ++i) {
    auto it = m.find(std::string_view(keys[i]));
    ASSERT_NE(it, m.end());
    EXPECT_EQ(it->second, i);
    EXPECT_EQ(m.find(keys[i])->first.view(), keys[i]);
    EXPECT_EQ(m.count(absl::string_view(keys[i])), 1u);
  }
  EXPECT_EQ(m.find(std::string_view("absent")), m.end());
  for (int i = 0; i < 1000; i += 2) EXPECT_EQ(m.erase(std::string_view(keys[i])), 1u);
  EXPECT_EQ(m.size(), 500u);
}

TEST(InlineStringTest, ABorrowedKeyRefersToItsSourceAndItsCopiesOwnTheirBytes) {
  for (size_t n : {3, 23, 24, 300}) {
    std::string source(n, 'b');
    const InlineString borrowed = InlineString::Borrow(source);
    EXPECT_TRUE(borrowed.borrowed());
    EXPECT_FALSE(borrowed.on_heap());
    EXPECT_EQ(borrowed.data(), source.data());  // no copy
    EXPECT_EQ(borrowed.view(), source);
    EXPECT_EQ(InlineStringHash()(borrowed), InlineStringHash()(source));
    const InlineString copy = borrowed;  // a copy owns its bytes
    InlineString assigned("x");
    assigned = borrowed;
    absl::node_hash_map<InlineString, int, InlineStringHash, InlineStringEq> m;
    m.try_emplace(borrowed, 1);  // what a container stores from a const reference is a copy
    source.assign(n, 'c');       // the source changes: only the borrowed key sees it
    EXPECT_EQ(borrowed.view(), std::string(n, 'c'));
    const InlineString* stored = &m.begin()->first;
    for (const InlineString* k :
         std::initializer_list<const InlineString*>{&copy, &assigned, stored}) {
      EXPECT_FALSE(k->borrowed());
      EXPECT_EQ(k->view(), std::string(n, 'b'));
    }
    InlineString moved = InlineString::Borrow(source);
    const InlineString moved_to = std::move(moved);  // a move passes the reference on
    EXPECT_TRUE(moved_to.borrowed());
    EXPECT_EQ(moved_to.data(), source.data());
  }
}

TEST(InlineStringTest, OrdersAsItsBytes) {
  EXPECT_LT(InlineString("abc"), InlineString("abd"));
  EXPECT_LT(InlineString("ab"), InlineString(std::string(30, 'b')));
  EXPECT_EQ(InlineString(std::string(30, 'b')), InlineString(std::string(30, 'b')));
}

}  // namespace
}  // namespace mooncake
