#include "mooncake/alloc/size_class_allocator.h"

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "mooncake/alloc/allocator_testing.h"
#include "mooncake/alloc/tlsf_allocator.h"

namespace mooncake::alloc {
namespace {

using Slab = SizeClassAllocator<TlsfAllocator>;

TlsfAllocator Backing(uint64_t capacity_bytes) {
  return TlsfAllocator(TlsfOptions{.capacity_bytes = capacity_bytes, .granularity_bytes = 64});
}

struct SlabFactory {
  using Allocator = Slab;
  static constexpr bool kServesWholeRange = false;
  static constexpr uint64_t kClasses[] = {192, 4096, 24576, 65536};
  static Slab Make(uint64_t capacity_bytes) {
    return Slab(Backing(capacity_bytes),
                SizeClassOptions{.class_bytes = {65536, 192, 24576, 4096}, .page_bytes = 1 << 18});
  }
  static uint64_t RandomSize(std::mt19937_64& rng, uint64_t) {
    if (rng() % 2 == 0) return kClasses[rng() % 4];
    return std::uniform_int_distribution<uint64_t>(1, 65536)(rng);
  }
  // Free slots of other classes count as gaps, so no size is promised.
  static bool MustFit(uint64_t, uint64_t, uint64_t) { return false; }
};

INSTANTIATE_TYPED_TEST_SUITE_P(SizeClass, AllocatorConformanceTest, SlabFactory);

TEST(SizeClassAllocatorTest, CreateRejectsBadOptionsWithInvalidArgument) {
  for (const SizeClassOptions& bad :
       {SizeClassOptions{}, SizeClassOptions{.class_bytes = {0, 64}},
        SizeClassOptions{.class_bytes = {64, 64}},
        SizeClassOptions{.class_bytes = {64}, .page_alignment = 3},
        SizeClassOptions{.class_bytes = std::vector<uint64_t>(40, 1)}}) {
    absl::StatusOr<Slab> s = Slab::Create(Backing(1 << 20), bad);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("SizeClassOptions"), absl::string_view::npos);
  }
}

TEST(SizeClassAllocatorTest, RoundsUpToTheSmallestClassAndRejectsLargerSizes) {
  Slab s(Backing(1 << 22), {.class_bytes = {4096, 1024}, .page_bytes = 1 << 16});
  EXPECT_EQ(s.ClassFor(1, 1), 0u);
  EXPECT_EQ(s.ClassFor(1024, 1), 0u);
  EXPECT_EQ(s.ClassFor(1025, 1), 1u);
  EXPECT_FALSE(s.ClassFor(4097, 1).has_value());
  EXPECT_FALSE(s.allocate(4097, 1).has_value());
  // 1024-byte slots are only 1024-aligned.
  EXPECT_EQ(s.ClassFor(100, 2048), 1u);
  EXPECT_FALSE(s.ClassFor(100, 8192).has_value());
  EXPECT_EQ(s.slots_per_page(0), 64u);
  EXPECT_EQ(s.slots_per_page(1), 16u);
}

TEST(SizeClassAllocatorTest, AutoPageSizeIsAThousandthOfTheRangeWithinBounds) {
  Slab small(Backing(1 << 20), {.class_bytes = {4096}});
  EXPECT_EQ(small.slots_per_page(0), 16u);  // 64 KiB floor
  Slab mid(Backing(uint64_t{1} << 30), {.class_bytes = {4096}});
  EXPECT_EQ(mid.slots_per_page(0), 256u);  // 1 MiB
  Slab big(Backing(uint64_t{1} << 34), {.class_bytes = {4096, 8 << 20}});
  EXPECT_EQ(big.slots_per_page(0), 1024u);  // 4 MiB cap
  EXPECT_EQ(big.slots_per_page(1), 1u);
}

TEST(SizeClassAllocatorTest, PacksSlotsIntoPagesAndReturnsEmptyPages) {
  Slab s(Backing(1 << 22), {.class_bytes = {4096}, .page_bytes = 1 << 16});
  std::vector<Allocation> live;
  for (int i = 0; i < 40; ++i) live.push_back(*s.allocate(4096, 4096));
  EXPECT_EQ(s.page_count(), 3u);  // 16 slots a page
  EXPECT_EQ(live[1].offset - live[0].offset, 4096u);
  EXPECT_EQ(s.backing().stats().used_bytes, 3u << 16);
  EXPECT_EQ(s.stats().free_bytes, (1u << 22) - 40 * 4096);
  s.CheckInvariants();
  for (int i = 0; i < 16; ++i) s.free(live[i]);  // empties the first page
  EXPECT_EQ(s.page_count(), 2u);
  for (int i = 16; i < 40; ++i) s.free(live[i]);
  EXPECT_EQ(s.page_count(), 0u);
  EXPECT_EQ(s.backing().stats().live_allocations, 0u);
  s.CheckInvariants();
}

// Regression for the CacheLib-style failure: memory freed by one class must
// serve another class.
TEST(SizeClassAllocatorTest, MemoryFreedByOneClassServesAnother) {
  constexpr uint64_t kCap = 1 << 20;
  Slab s(Backing(kCap), {.class_bytes = {4096, 65536}, .page_bytes = 1 << 16});
  std::vector<Allocation> small;
  while (std::optional<Allocation> x = s.allocate(4096, 1)) small.push_back(*x);
  EXPECT_EQ(small.size(), kCap / 4096);
  EXPECT_FALSE(s.allocate(65536, 1).has_value());
  for (const Allocation& x : small) s.free(x);
  std::vector<Allocation> large;
  while (std::optional<Allocation> x = s.allocate(65536, 1)) large.push_back(*x);
  EXPECT_EQ(large.size(), kCap / 65536);
  for (const Allocation& x : large) s.free(x);
  s.CheckInvariants();
}

TEST(SizeClassAllocatorTest, ShrinksPagesWhenTheBackingIsNearlyFull) {
  constexpr uint64_t kCap = 1 << 20;
  Slab s(Backing(kCap), {.class_bytes = {4096}, .page_bytes = 1 << 18});
  std::optional<Allocation> filler = s.backing().allocate(kCap - 3 * 4096, 1);
  ASSERT_TRUE(filler.has_value());
  std::vector<Allocation> live;
  while (std::optional<Allocation> x = s.allocate(4096, 1)) live.push_back(*x);
  EXPECT_EQ(live.size(), 3u);  // pages of 2 and 1 slots
  for (const Allocation& x : live) s.free(x);
  s.backing().free(*filler);
  s.CheckInvariants();
}

TEST(SizeClassAllocatorTest, StatsCountFreeSlotsAsFree) {
  constexpr uint64_t kCap = 1 << 20;
  Slab s(Backing(kCap), {.class_bytes = {1000}, .page_bytes = 10000});
  const Allocation x = *s.allocate(900, 8);
  const AllocatorStats st = s.stats();
  EXPECT_EQ(st.used_bytes, 900u);
  EXPECT_EQ(st.live_allocations, 1u);
  // One page of 10 slots: 9 free slots, 100 bytes of rounding in the used
  // slot and the backing's granule tail are overhead.
  EXPECT_EQ(st.free_bytes, kCap - 10048 + 9000);
  s.free(x);
  EXPECT_EQ(s.stats().free_bytes, kCap);
}

}  // namespace
}  // namespace mooncake::alloc
