#include "mooncake/store/client/metadata_cache.h"

#include <cstdint>

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
