#include "mooncake/store/client/metadata_cache.h"

#include <cstdint>
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/clock.h"

namespace mooncake::client {
namespace {

constexpr int64_t kMs = 1'000'000;

CachedObject Obj(uint64_t lease, int64_t end_ns, uint64_t version = 1) {
  CachedObject o;
  o.size_bytes = 10;
  o.version = version;
  o.lease_id = lease;
  o.lease_end_ns = end_ns;
  return o;
}

std::vector<store::proto::Replica> Replicas(int n) {
  std::vector<store::proto::Replica> v(n);
  for (int i = 0; i < n; ++i) v[i].set_segment_id(static_cast<uint64_t>(i));
  return v;
}

std::vector<uint64_t> Order(const ReplicaOrder& o) {
  std::vector<uint64_t> out;
  for (size_t k = 0; k < o.size(); ++k) out.push_back(o[k].segment_id());
  return out;
}

TEST(ReplicaOrderTest, RotatesAsStdRotateAndComposes) {
  ReplicaOrder o(Replicas(5));
  EXPECT_EQ(Order(o), (std::vector<uint64_t>{0, 1, 2, 3, 4}));
  ReplicaOrder a = o;
  a.Rotate(1, 3);  // std::rotate(begin, begin + 1, begin + 3)
  EXPECT_EQ(Order(a), (std::vector<uint64_t>{1, 2, 0, 3, 4}));
  a.Rotate(1, 3);  // again, over the order a reads in now
  EXPECT_EQ(Order(a), (std::vector<uint64_t>{2, 0, 1, 3, 4}));
  a.Rotate(1, 3);
  EXPECT_EQ(Order(a), (std::vector<uint64_t>{0, 1, 2, 3, 4}));
  ReplicaOrder b = o;
  b.Rotate(4, 5);
  EXPECT_EQ(Order(b), (std::vector<uint64_t>{4, 0, 1, 2, 3}));
  EXPECT_EQ(Order(o), (std::vector<uint64_t>{0, 1, 2, 3, 4})) << "a copy's order is its own";
  EXPECT_TRUE(ReplicaOrder().empty());
  EXPECT_TRUE(ReplicaOrder(Replicas(0)).empty());
}

TEST(ReplicaOrderTest, ACacheHitSharesTheReplicasAndOrdersItsOwnCopy) {
  FakeClock clock;
  MetadataCache cache(8, &clock);
  CachedObject obj = Obj(1, clock.NowNs() + 100 * kMs);
  obj.replicas = ReplicaOrder(Replicas(3));
  (void)cache.Insert("", "k", std::move(obj));
  std::optional<CachedObject> hit = cache.Lookup("", "k", 0);
  ASSERT_TRUE(hit.has_value());
  hit->replicas.Rotate(2, 3);
  EXPECT_EQ(Order(hit->replicas), (std::vector<uint64_t>{2, 0, 1}));
  std::optional<CachedObject> again = cache.Lookup("", "k", 0);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(Order(again->replicas), (std::vector<uint64_t>{0, 1, 2})) << "the cached order stays";
  EXPECT_EQ(&again->replicas[0], &hit->replicas[1]) << "one copy of the replicas";
}

TEST(MetadataCache, HitsUntilTheLeaseNearsItsEnd) {
  FakeClock clock;
  MetadataCache cache(8, &clock);
  EXPECT_TRUE(cache.Insert("", "k", Obj(1, clock.NowNs() + 100 * kMs)).empty());
  ASSERT_TRUE(cache.Lookup("", "k", 10 * kMs).has_value());
  EXPECT_FALSE(cache.Lookup("t", "k", 0).has_value()) << "tenants are separate";
  clock.AdvanceMs(95);
  EXPECT_FALSE(cache.Lookup("", "k", 10 * kMs).has_value()) << "too little lease left";
  EXPECT_EQ(cache.size(), 0u) << "the dying entry is dropped";
}

TEST(MetadataCache, TenantAndKeyDoNotAlias) {
  FakeClock clock;
  MetadataCache cache(8, &clock);
  (void)cache.Insert("a", "bc", Obj(1, clock.NowNs() + 100 * kMs));
  EXPECT_FALSE(cache.Lookup("ab", "c", 0).has_value());
}

TEST(MetadataCache, ReplacedAndEvictedLiveLeasesAreReturned) {
  FakeClock clock;
  MetadataCache cache(2, &clock);
  const int64_t end = clock.NowNs() + 100 * kMs;
  EXPECT_TRUE(cache.Insert("", "a", Obj(1, end)).empty());
  EXPECT_EQ(cache.Insert("", "a", Obj(2, end)), std::vector<uint64_t>{1});
  EXPECT_TRUE(cache.Insert("", "b", Obj(3, end)).empty());
  ASSERT_TRUE(cache.Lookup("", "a", 0).has_value());  // a is now most recent
  EXPECT_EQ(cache.Insert("", "c", Obj(4, end)), std::vector<uint64_t>{3});
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.Erase("", "a"), std::optional<uint64_t>(2));
  EXPECT_EQ(cache.Erase("", "a"), std::nullopt);
  clock.AdvanceMs(200);
  EXPECT_EQ(cache.Erase("", "c"), std::nullopt) << "an ended lease needs no release";
}

TEST(MetadataCache, ClearReturnsLiveLeases) {
  FakeClock clock;
  MetadataCache cache(8, &clock);
  (void)cache.Insert("", "a", Obj(1, clock.NowNs() + 100 * kMs));
  (void)cache.Insert("", "b", Obj(2, clock.NowNs() + 1 * kMs));
  clock.AdvanceMs(5);
  EXPECT_EQ(cache.Clear(), std::vector<uint64_t>{1});
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace mooncake::client

namespace mooncake::client {
namespace {

TEST(MetadataCacheReadsTest, CountsCachedReadsAndHandsThemOverWhenTheLeaseEnds) {
  FakeClock clock(1'000'000'000);
  MetadataCache cache(4, &clock);
  CachedObject o;
  o.lease_id = 7;
  o.lease_end_ns = clock.NowNs() + 1'000'000'000;
  EXPECT_TRUE(cache.Insert("", "k", o).empty());
  uint32_t served = 99;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cache.Lookup("", "k", 0, &served).has_value());
  EXPECT_EQ(served, 99u);  // untouched on a hit
  clock.AdvanceMs(2'000);  // the lease ran out
  EXPECT_FALSE(cache.Lookup("", "k", 0, &served).has_value());
  EXPECT_EQ(served, 3u);
}

}  // namespace
}  // namespace mooncake::client
