#include "mooncake/tier/tiered_store.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/tier/dram_tier.h"
#include "mooncake/tier/ssd_tier.h"

namespace mooncake::tier {
namespace {

constexpr uint64_t kObj = 4096;

// An object's bytes are a function of its key, so any wrong byte is visible.
std::vector<std::byte> Bytes(const std::string& key, uint64_t size = kObj) {
  std::vector<std::byte> out(size);
  uint64_t h = std::hash<std::string>{}(key);
  for (size_t i = 0; i < size; ++i) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = static_cast<std::byte>(h >> 56);
  }
  return out;
}

std::string Key(int i) { return "k" + std::to_string(i); }

void ExpectObject(TieredStore<DramTier, DramTier>& store, const std::string& key) {
  std::vector<std::byte> buf(kObj);
  auto r = store.Get(key, buf);
  ASSERT_TRUE(r.ok()) << key << ": " << r.status();
  EXPECT_EQ(buf, Bytes(key)) << key;
}

TEST(TieredStoreTest, EvictedObjectsAreWrittenBackAndPromotedOnSecondHit) {
  DramTier fast(1 << 20), slow(1 << 20);
  TieredStore<DramTier, DramTier> store(fast, slow, {.fast_budget_bytes = 4 * kObj});
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(store.Put(Key(i), Bytes(Key(i))).ok());
  EXPECT_EQ(store.fast_charged_bytes(), 4 * kObj);
  // LRU: k0..k3 went down, k4..k7 stayed up.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(store.Locate(Key(i)), Location::kSlow) << i;
  for (int i = 4; i < 8; ++i) EXPECT_EQ(store.Locate(Key(i)), Location::kFast) << i;
  EXPECT_EQ(store.stats().demotions, 4u);
  ExpectObject(store, Key(0));  // first slow hit: stays down
  EXPECT_EQ(store.Locate(Key(0)), Location::kSlow);
  ExpectObject(store, Key(0));  // second: promoted, slow copy kept
  EXPECT_EQ(store.Locate(Key(0)), Location::kBoth);
  ExpectObject(store, Key(0));
  const TieredStoreStats s = store.stats();
  EXPECT_EQ(s.slow_hits, 2u);
  EXPECT_EQ(s.fast_hits, 1u);
  EXPECT_EQ(s.promotions, 1u);
  EXPECT_EQ(s.demotions, 5u);  // k4 made room for k0
  EXPECT_EQ(s.fast.objects, 4u);
  EXPECT_EQ(s.slow.objects, 5u);
  std::vector<std::byte> buf(kObj);
  EXPECT_TRUE(absl::IsNotFound(store.Get("absent", buf).status()));
  EXPECT_EQ(store.stats().misses, 1u);
}

TEST(TieredStoreTest, WriteBackPolicyDecidesDrop) {
  DramTier fast(1 << 20), slow(1 << 20);
  TieredStore<DramTier, DramTier> store(
      fast, slow, {.fast_budget_bytes = 2 * kObj, .write_back = [](const ObjectInfo& info) {
                     return info.meta.user_tag == 1;
                   }});
  ASSERT_TRUE(store.Put("keep", Bytes("keep"), {.user_tag = 1}).ok());
  ASSERT_TRUE(store.Put("drop", Bytes("drop"), {.user_tag = 0}).ok());
  ASSERT_TRUE(store.Put("a", Bytes("a")).ok());
  ASSERT_TRUE(store.Put("b", Bytes("b")).ok());
  EXPECT_EQ(store.Locate("keep"), Location::kSlow);
  EXPECT_EQ(store.Locate("drop"), std::nullopt);
  std::vector<std::byte> buf(kObj);
  EXPECT_TRUE(absl::IsNotFound(store.Get("drop", buf).status()));
  ExpectObject(store, "keep");
  EXPECT_EQ(store.stats().demote_drops, 1u);
  EXPECT_EQ(store.stats().demotions, 1u);
}

TEST(TieredStoreTest, FullSlowTierEvictsItsLruThenDropsWhatCannotFit) {
  DramTier fast(1 << 20), slow(3 * kObj);
  TieredStore<DramTier, DramTier> store(fast, slow, {.fast_budget_bytes = 2 * kObj});
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(store.Put(Key(i), Bytes(Key(i))).ok());
  const TieredStoreStats s = store.stats();
  EXPECT_EQ(s.slow.objects, 3u);
  EXPECT_EQ(s.slow_evictions, 5u);
  EXPECT_EQ(s.demotions, 8u);
  // The newest demoted objects are on the slow tier, the oldest are gone.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(store.Locate(Key(i)), std::nullopt) << i;
  for (int i = 5; i < 8; ++i) ExpectObject(store, Key(i));
  // An object larger than the slow tier can never be written back.
  DramTier fast2(1 << 20), tiny(kObj);
  TieredStore<DramTier, DramTier> store2(fast2, tiny, {.fast_budget_bytes = 4 * kObj});
  ASSERT_TRUE(store2.Put("big", Bytes("big", 2 * kObj)).ok());
  ASSERT_TRUE(store2.Put("big2", Bytes("big2", 2 * kObj)).ok());
  ASSERT_TRUE(store2.Put("big3", Bytes("big3", 2 * kObj)).ok());
  EXPECT_EQ(store2.stats().demote_failures, 1u);
  EXPECT_EQ(store2.Locate("big"), std::nullopt);
}

TEST(TieredStoreTest, PutRemoveAndBadInput) {
  DramTier fast(1 << 20), slow(1 << 20);
  TieredStore<DramTier, DramTier> store(fast, slow, {.fast_budget_bytes = 2 * kObj});
  ASSERT_TRUE(store.Put("a", Bytes("a")).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(store.Put("a", Bytes("a"))));
  EXPECT_TRUE(absl::IsInvalidArgument(store.Put("", Bytes("a"))));
  EXPECT_TRUE(absl::IsInvalidArgument(store.Put("e", {})));
  ASSERT_TRUE(store.Put("b", Bytes("b")).ok());
  ASSERT_TRUE(store.Put("c", Bytes("c")).ok());  // a -> slow
  EXPECT_TRUE(store.Remove("a").ok());
  EXPECT_TRUE(store.Remove("c").ok());
  EXPECT_TRUE(absl::IsNotFound(store.Remove("a")));
  EXPECT_EQ(slow.stats().objects, 0u);
  EXPECT_EQ(fast.stats().objects, 1u);
  ASSERT_TRUE(store.Put("a", Bytes("a")).ok());  // a key may be reused after Remove
  ExpectObject(store, "a");
  std::vector<std::byte> small(10);
  EXPECT_TRUE(absl::IsInvalidArgument(store.Get("a", small).status()));
  // Larger than the fast budget: straight to the slow tier.
  ASSERT_TRUE(store.Put("huge", Bytes("huge", 3 * kObj)).ok());
  EXPECT_EQ(store.Locate("huge"), Location::kSlow);
}

// Readers hammer a working set four times the fast budget, so every read
// races demotions and promotions started by other readers and by a writer.
TEST(TieredStoreTest, ReadsRacingDemotionAndPromotionAreAlwaysCorrect) {
  DramTier fast(1 << 20), slow(4 << 20);
  TieredStore<DramTier, DramTier> store(fast, slow,
                                        {.fast_budget_bytes = 16 * kObj, .promote_after_hits = 1});
  constexpr int kKeys = 64;
  for (int i = 0; i < kKeys; ++i) ASSERT_TRUE(store.Put(Key(i), Bytes(Key(i))).ok());
  std::atomic<int> wrong{0}, misses{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::byte> buf(kObj);
      for (int n = 0; n < 3000; ++n) {
        const std::string key = Key((n * 7 + t * 13) % kKeys);
        auto r = store.Get(key, buf);
        if (!r.ok()) {
          misses.fetch_add(1);
        } else if (buf != Bytes(key)) {
          wrong.fetch_add(1);
        }
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = kKeys; i < kKeys + 200; ++i) {
      if (!store.Put(Key(i), Bytes(Key(i))).ok()) misses.fetch_add(1);
      if (i % 3 == 0) (void)store.Remove(Key(i));
    }
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(misses.load(), 0);  // nothing was dropped: the slow tier has room
  const TieredStoreStats s = store.stats();
  EXPECT_GT(s.promotions, 0u);
  EXPECT_GT(s.demotions, 0u);
  EXPECT_LE(store.fast_charged_bytes(), 16 * kObj);
  for (int i = 0; i < kKeys; ++i) ExpectObject(store, Key(i));
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name + "." + std::to_string(::getpid());
}

TEST(TieredStoreTest, DramOverSsdRoundTripsWithRacingReaders) {
  SsdTierOptions o;
  o.paths = {TempPath("tiered")};
  o.capacity_bytes_per_file = 8 << 20;
  o.bounce_arena_bytes = 4 << 20;
  o.device_read_bytes_per_s = 1e9;
  o.device_write_bytes_per_s = 1e9;
  auto ssd = SsdTier::Open(o);
  ASSERT_TRUE(ssd.ok()) << ssd.status();
  DramTier dram(1 << 20);
  TieredStore<DramTier, SsdTier> store(dram, **ssd, {.fast_budget_bytes = 8 * kObj});
  constexpr int kKeys = 32;
  for (int i = 0; i < kKeys; ++i) ASSERT_TRUE(store.Put(Key(i), Bytes(Key(i))).ok());
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::byte> buf(kObj);
      for (int n = 0; n < 150; ++n) {
        const std::string key = Key((n * 5 + t) % kKeys);
        auto r = store.Get(key, buf);
        if (!r.ok()) {
          failed.fetch_add(1);
        } else if (buf != Bytes(key)) {
          wrong.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(failed.load(), 0);
  const TieredStoreStats s = store.stats();
  EXPECT_EQ(s.slow.objects, s.slow.writes - s.slow.removes);
  EXPECT_GT(s.slow_hits, 0u);
  EXPECT_GT(s.promotions, 0u);
  std::remove(o.paths[0].c_str());
}

}  // namespace
}  // namespace mooncake::tier
