#include "mooncake/alloc/allocator.h"

#include <cstdint>
#include <optional>

#include "gtest/gtest.h"
#include "mooncake/alloc/internal/archetype.h"
#include "mooncake/alloc/internal/handle.h"

namespace mooncake::alloc {
namespace {

// One broken type per requirement; the concept must reject each.
struct NoAllocate {
  void free(const Allocation&);
  AllocatorStats stats() const;
};
struct AllocateReturnsAllocation {  // not optional: cannot report failure
  Allocation allocate(uint64_t, uint64_t);
  void free(const Allocation&);
  AllocatorStats stats() const;
};
struct AllocateWithoutAlignment {
  std::optional<Allocation> allocate(uint64_t);
  void free(const Allocation&);
  AllocatorStats stats() const;
};
struct NoFree {
  std::optional<Allocation> allocate(uint64_t, uint64_t);
  AllocatorStats stats() const;
};
struct FreeTakesOffset {
  std::optional<Allocation> allocate(uint64_t, uint64_t);
  void free(uint64_t offset);
  AllocatorStats stats() const;
};
struct FreeMutatesAllocation {  // cannot take a const Allocation&
  std::optional<Allocation> allocate(uint64_t, uint64_t);
  void free(Allocation&);
  AllocatorStats stats() const;
};
struct NoStats {
  std::optional<Allocation> allocate(uint64_t, uint64_t);
  void free(const Allocation&);
};
struct NonConstStats {
  std::optional<Allocation> allocate(uint64_t, uint64_t);
  void free(const Allocation&);
  AllocatorStats stats();
};
struct StatsWrongType {
  std::optional<Allocation> allocate(uint64_t, uint64_t);
  void free(const Allocation&);
  uint64_t stats() const;
};

static_assert(Allocator<alloc_internal::AllocatorArchetype>);
static_assert(!Allocator<NoAllocate>);
static_assert(!Allocator<AllocateReturnsAllocation>);
static_assert(!Allocator<AllocateWithoutAlignment>);
static_assert(!Allocator<NoFree>);
static_assert(!Allocator<FreeTakesOffset>);
static_assert(!Allocator<FreeMutatesAllocation>);
static_assert(!Allocator<NoStats>);
static_assert(!Allocator<NonConstStats>);
static_assert(!Allocator<StatsWrongType>);

TEST(AllocatorTest, ValidAlignmentsArePowersOfTwo) {
  EXPECT_FALSE(IsValidAlignment(0));
  EXPECT_TRUE(IsValidAlignment(1));
  EXPECT_TRUE(IsValidAlignment(4096));
  EXPECT_TRUE(IsValidAlignment(uint64_t{1} << 63));
  EXPECT_FALSE(IsValidAlignment(3));
  EXPECT_FALSE(IsValidAlignment(4097));
  EXPECT_FALSE(IsValidAlignment(~uint64_t{0}));
}

TEST(AllocatorTest, ExternalFragmentationIsOneMinusLargestOverFree) {
  EXPECT_EQ(AllocatorStats{}.ExternalFragmentation(), 0.0);
  AllocatorStats s{
      .capacity_bytes = 100, .used_bytes = 20, .free_bytes = 80, .largest_free_bytes = 20};
  EXPECT_DOUBLE_EQ(s.ExternalFragmentation(), 0.75);
  s.largest_free_bytes = 80;
  EXPECT_DOUBLE_EQ(s.ExternalFragmentation(), 0.0);
}

TEST(AllocatorTest, HandlePackingRoundTrips) {
  const AllocationHandle h = alloc_internal::PackHandle(0xBEEF, 0x1234, 0xDEADBEEF);
  EXPECT_EQ(alloc_internal::HandleOwnerTag(h), 0xBEEF);
  EXPECT_EQ(alloc_internal::HandleGeneration(h), 0x1234);
  EXPECT_EQ(alloc_internal::HandleIndex(h), 0xDEADBEEFu);
  EXPECT_NE(h, AllocationHandle{});
}

TEST(AllocatorTest, OwnerTagsAreDistinctAndNeverZero) {
  uint16_t prev = alloc_internal::NewOwnerTag();
  for (int i = 0; i < 70000; ++i) {  // across the 16-bit wrap
    const uint16_t tag = alloc_internal::NewOwnerTag();
    EXPECT_NE(tag, 0);
    EXPECT_NE(tag, prev);
    prev = tag;
  }
}

}  // namespace
}  // namespace mooncake::alloc
