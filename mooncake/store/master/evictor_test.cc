#include "mooncake/store/master/evictor.h"

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/index/lru_policy.h"
#include "mooncake/index/s3fifo_policy.h"

namespace mooncake::master {
namespace {

// Block-keyed policies are not object policies (the master keys by string).
static_assert(!ObjectEvictionPolicy<index::LruPolicy<>>);
static_assert(ObjectEvictionPolicy<index::S3FifoPolicy<std::string, ObjectKeyHash>>);

template <typename P>
class EvictorTest : public ::testing::Test {};

using Policies = ::testing::Types<index::LruPolicy<std::string, ObjectKeyHash>,
                                  index::S3FifoPolicy<std::string, ObjectKeyHash>>;
TYPED_TEST_SUITE(EvictorTest, Policies);

TYPED_TEST(EvictorTest, EvictsOnlyWhatCanGoUntilTheTarget) {
  Evictor<TypeParam> ev;
  for (int i = 0; i < 10; ++i) ev.Admit("k" + std::to_string(i), 100);
  ev.Admit("k3", 100);  // already tracked: a touch, not a crash
  std::string unknown = "never-admitted";
  ev.Touch(std::span<const std::string>(&unknown, 1));  // tolerated
  std::set<std::string> evicted;
  auto can = [](const std::string& k) { return k != "k0" && k != "k1"; };
  auto remove = [&](const std::string& k) -> std::optional<uint64_t> {
    evicted.insert(k);
    return 100;
  };
  const EvictionResult r = ev.EvictUntil(350, 100, can, remove);
  EXPECT_EQ(r.freed_bytes, 400u);
  EXPECT_EQ(r.victims, 4u);
  EXPECT_FALSE(evicted.contains("k0"));
  EXPECT_FALSE(evicted.contains("k1"));
  EXPECT_EQ(ev.size(), 6u);
}

TYPED_TEST(EvictorTest, AVictimThatBecameBusyIsKept) {
  Evictor<TypeParam> ev;
  ev.Admit("a", 1);
  ev.Admit("b", 1);
  auto remove = [](const std::string& k) -> std::optional<uint64_t> {
    if (k == "a") return std::nullopt;  // leased between the check and the removal
    return 1;
  };
  const EvictionResult r = ev.EvictUntil(
      10, 10, [](const std::string&) { return true; }, remove);
  EXPECT_EQ(r.victims, 1u);
  EXPECT_TRUE(ev.Contains("a"));
  EXPECT_FALSE(ev.Contains("b"));
  ev.Erase("a");
  EXPECT_EQ(ev.size(), 0u);
}

}  // namespace
}  // namespace mooncake::master
