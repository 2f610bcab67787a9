#include "mooncake/store/master/evictor.h"

#include <chrono>
#include <future>
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
static_assert(ObjectEvictionPolicy<index::S3FifoPolicy<ObjectKey, ObjectKeyHash>>);

template <typename P>
class EvictorTest : public ::testing::Test {};

using Policies = ::testing::Types<index::LruPolicy<ObjectKey, ObjectKeyHash>,
                                  index::S3FifoPolicy<ObjectKey, ObjectKeyHash>>;
TYPED_TEST_SUITE(EvictorTest, Policies);

TYPED_TEST(EvictorTest, EvictsOnlyWhatCanGoUntilTheTarget) {
  Evictor<TypeParam> ev;
  for (int i = 0; i < 10; ++i) ev.Admit("k" + std::to_string(i), 100);
  ev.Admit("k3", 100);  // already tracked: a touch, not a crash
  std::string unknown = "never-admitted";
  ev.Touch(std::span<const std::string>(&unknown, 1));  // tolerated
  std::set<std::string> evicted;
  auto can = [](const ObjectKey& k) { return k != "k0" && k != "k1"; };
  auto remove = [&](const ObjectKey& k) -> std::optional<uint64_t> {
    evicted.insert(k.str());
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
  auto remove = [](const ObjectKey& k) -> std::optional<uint64_t> {
    if (k == "a") return std::nullopt;  // leased between the check and the removal
    return 1;
  };
  const EvictionResult r = ev.EvictUntil(
      10, 10, [](const ObjectKey&) { return true; }, remove);
  EXPECT_EQ(r.victims, 1u);
  EXPECT_TRUE(ev.Contains("a"));
  EXPECT_FALSE(ev.Contains("b"));
  ev.Erase("a");
  EXPECT_EQ(ev.size(), 0u);
}

// The mutex is released while victims are removed: a read (Touch), a commit
// (Admit) and a size() from other threads complete in the middle of a large
// eviction, and the policy has given up at most one batch of victims by the
// first removal. (Were the mutex held across the batch, the other thread
// would block until EvictUntil returned and the wait would time out.)
TYPED_TEST(EvictorTest, RemovalRunsWithoutTheLockInBoundedBatches) {
  constexpr int kKeys = 1000;
  Evictor<TypeParam> ev;
  for (int i = 0; i < kKeys; ++i) ev.Admit("k" + std::to_string(i), 1);
  int removals = 0;
  bool others_ran = false;
  size_t size_at_first_removal = 0;
  auto remove = [&](const ObjectKey& k) -> std::optional<uint64_t> {
    if (removals++ == 0) {
      auto other = std::async(std::launch::async, [&ev, k = k.str()] {
        ev.Touch(std::span<const std::string>(&k, 1));  // a victim being removed: a no-op
        const std::string hot = "k999";
        ev.Touch(std::span<const std::string>(&hot, 1));
        ev.Admit("new", 1);
        return ev.size();
      });
      others_ran = other.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
      if (others_ran) size_at_first_removal = other.get();
    }
    return 1;
  };
  const EvictionResult r = ev.EvictUntil(
      kKeys, kKeys, [](const ObjectKey& k) { return k != "new"; }, remove);
  EXPECT_TRUE(others_ran);
  // kKeys admitted plus "new", less one batch taken out.
  EXPECT_GE(size_at_first_removal, kKeys + 1 - kEvictionBatchMax);
  EXPECT_EQ(r.victims, static_cast<uint64_t>(kKeys));
  EXPECT_EQ(removals, kKeys);
  EXPECT_TRUE(ev.Contains("new"));
  EXPECT_EQ(ev.size(), 1u);
}

// A batch stops taking victims once their charges cover the target, so
// removing outside the lock does not evict more than one at a time would.
TYPED_TEST(EvictorTest, ABatchTakesOnlyWhatTheTargetNeeds) {
  Evictor<TypeParam> ev;
  for (int i = 0; i < 100; ++i) ev.Admit("k" + std::to_string(i), 100);
  auto remove = [](const ObjectKey&) -> std::optional<uint64_t> { return 100; };
  const EvictionResult r = ev.EvictUntil(
      250, 100, [](const ObjectKey&) { return true; }, remove);
  EXPECT_EQ(r.victims, 3u);
  EXPECT_EQ(ev.size(), 97u);
}

}  // namespace
}  // namespace mooncake::master
