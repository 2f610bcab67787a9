#include "mooncake/tier/internal/staging_arena.h"

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake::tier_internal {
namespace {

TEST(StagingArenaTest, AcquiresAlignedSlicesOfTheArena) {
  StagingArena arena;
  arena.Init(64 * kBlockBytes + 100);  // rounded down
  EXPECT_EQ(arena.bytes(), 64 * kBlockBytes);
  Staging s = arena.Acquire(5000);
  ASSERT_NE(s.data, nullptr);
  EXPECT_TRUE(s.in_arena());
  EXPECT_GE(s.data, arena.base());
  EXPECT_LT(s.data, arena.base() + arena.bytes());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s.data) % kBlockBytes, 0u);
  EXPECT_EQ(arena.used_bytes(), 2 * kBlockBytes);
  std::memset(s.data, 1, 5000);
  arena.Release(s);
  EXPECT_EQ(s.data, nullptr);
  EXPECT_EQ(arena.used_bytes(), 0u);
  arena.Release(s);  // an empty staging: a no-op
}

TEST(StagingArenaTest, FallsBackToTheHeapWhenFull) {
  StagingArena arena;
  arena.Init(4 * kBlockBytes);
  Staging big = arena.Acquire(4 * kBlockBytes);
  EXPECT_TRUE(big.in_arena());
  Staging more = arena.Acquire(kBlockBytes);
  EXPECT_FALSE(more.in_arena());
  ASSERT_NE(more.data, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(more.data) % kBlockBytes, 0u);
  std::memset(more.data, 2, kBlockBytes);
  arena.Release(more);
  arena.Release(big);
  EXPECT_EQ(arena.used_bytes(), 0u);
}

TEST(StagingArenaTest, WithoutMemoryEveryStagingIsFromTheHeap) {
  StagingArena arena;
  arena.Init(100);  // under one block: no arena
  EXPECT_EQ(arena.bytes(), 0u);
  Staging s = arena.Acquire(10 * kBlockBytes);
  EXPECT_FALSE(s.in_arena());
  ASSERT_NE(s.data, nullptr);
  arena.Release(s);
}

TEST(StagingArenaTest, ConcurrentAcquireAndReleaseGiveDisjointSlices) {
  StagingArena arena;
  arena.Init(256 * kBlockBytes);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        Staging s = arena.Acquire(kBlockBytes * (1 + i % 3));
        std::memset(s.data, t, kBlockBytes);
        std::this_thread::yield();
        for (uint64_t k = 0; k < kBlockBytes; ++k) {
          if (s.data[k] != std::byte(t)) {
            bad.fetch_add(1);
            break;
          }
        }
        arena.Release(s);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(arena.used_bytes(), 0u);
}

}  // namespace
}  // namespace mooncake::tier_internal
