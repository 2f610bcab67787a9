#include "mooncake/alloc/locked_allocator.h"

#include <atomic>
#include <cstdint>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/alloc/allocator_testing.h"
#include "mooncake/alloc/tlsf_allocator.h"

namespace mooncake::alloc {
namespace {

using Locked = LockedAllocator<TlsfAllocator>;

static_assert(ClaimableAllocator<TlsfAllocator>);
static_assert(ClaimableAllocator<Locked>);

// Has Claim with the wrong result type: not claimable.
struct BadClaim {
  std::optional<Allocation> allocate(uint64_t size, uint64_t alignment);
  void free(const Allocation& allocation);
  AllocatorStats stats() const;
  bool Claim(uint64_t offset, uint64_t size);
};
static_assert(Allocator<BadClaim> && !ClaimableAllocator<BadClaim>);

struct LockedTlsfFactory {
  using Allocator = Locked;
  static constexpr bool kServesWholeRange = true;
  static Locked Make(uint64_t capacity_bytes) {
    return Locked(TlsfAllocator(TlsfOptions{.capacity_bytes = capacity_bytes}));
  }
  static uint64_t RandomSize(std::mt19937_64& rng, uint64_t capacity_bytes) {
    return std::uniform_int_distribution<uint64_t>(1, capacity_bytes / 64)(rng);
  }
  static bool MustFit(uint64_t size, uint64_t alignment, uint64_t gap) {
    const uint64_t need = size + std::max<uint64_t>(alignment, 64) + 64;
    return gap >= need + need / 16;
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(LockedTlsf, AllocatorConformanceTest, LockedTlsfFactory);

// Threads allocate and free concurrently; each marks the granules it owns in
// a shared map, so two threads ever holding the same byte is caught.
TEST(LockedAllocatorTest, ConcurrentCallersNeverShareBytes) {
  constexpr uint64_t kCap = 1 << 20, kGranule = 64;
  Locked shared(TlsfAllocator(TlsfOptions{.capacity_bytes = kCap, .granularity_bytes = kGranule}));
  std::vector<std::atomic<int>> owner(kCap / kGranule);
  std::atomic<int> collisions{0};
  std::vector<std::thread> threads;
  for (int t = 1; t <= 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<Allocation> mine;
      for (int op = 0; op < 5000; ++op) {
        if (mine.empty() || rng() % 2 == 0) {
          std::optional<Allocation> a = shared.allocate(1 + rng() % 8192, 64);
          if (!a) continue;
          for (uint64_t g = a->offset / kGranule; g * kGranule < a->offset + a->size; ++g) {
            int expected = 0;
            if (!owner[g].compare_exchange_strong(expected, t)) ++collisions;
          }
          mine.push_back(*a);
        } else {
          const Allocation a = mine.back();
          mine.pop_back();
          for (uint64_t g = a.offset / kGranule; g * kGranule < a.offset + a.size; ++g) {
            owner[g].store(0);
          }
          shared.free(a);
        }
      }
      for (const Allocation& a : mine) {
        for (uint64_t g = a.offset / kGranule; g * kGranule < a.offset + a.size; ++g) {
          owner[g].store(0);
        }
        shared.free(a);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(collisions.load(), 0);
  EXPECT_EQ(shared.stats().live_allocations, 0u);
  shared.WithLock([](TlsfAllocator& a) { a.CheckInvariants(); });
}

TEST(LockedAllocatorTest, ClaimForwardsUnderTheLock) {
  Locked shared(TlsfAllocator(TlsfOptions{.capacity_bytes = 1 << 16, .granularity_bytes = 64}));
  const std::optional<Allocation> c = shared.Claim(4096, 100);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->offset, 4096u);
  EXPECT_FALSE(shared.Claim(4096, 64).has_value());
  EXPECT_EQ(shared.stats().used_bytes, 100u);
  shared.free(*c);
  EXPECT_EQ(shared.stats().live_allocations, 0u);
  shared.WithLock([](TlsfAllocator& a) { a.CheckInvariants(); });
}

}  // namespace
}  // namespace mooncake::alloc
