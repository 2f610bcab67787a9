#include "mooncake/alloc/scoped_allocation.h"

#include <optional>
#include <utility>

#include "gtest/gtest.h"
#include "mooncake/alloc/tlsf_allocator.h"

namespace mooncake::alloc {
namespace {

TEST(ScopedAllocationTest, FreesOnDestruction) {
  TlsfAllocator a({.capacity_bytes = 1 << 20});
  {
    std::optional<ScopedAllocation<TlsfAllocator>> x = AllocateScoped(a, 4096, 64);
    ASSERT_TRUE(x.has_value() && *x);
    EXPECT_EQ(x->size(), 4096u);
    EXPECT_EQ(a.stats().live_allocations, 1u);
  }
  EXPECT_EQ(a.stats().live_allocations, 0u);
}

TEST(ScopedAllocationTest, FailureYieldsNothing) {
  TlsfAllocator a({.capacity_bytes = 1 << 20});
  EXPECT_FALSE(AllocateScoped(a, 0, 1).has_value());
  EXPECT_FALSE(AllocateScoped(a, 2 << 20, 1).has_value());
  EXPECT_FALSE(AllocateScoped(a, 64, 3).has_value());
}

TEST(ScopedAllocationTest, MoveTransfersOwnershipOnce) {
  TlsfAllocator a({.capacity_bytes = 1 << 20});
  ScopedAllocation<TlsfAllocator> x = *AllocateScoped(a, 4096, 64);
  const uint64_t offset = x.offset();
  ScopedAllocation<TlsfAllocator> y = std::move(x);
  EXPECT_FALSE(x);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(y.offset(), offset);
  ScopedAllocation<TlsfAllocator> z = *AllocateScoped(a, 128, 64);
  EXPECT_EQ(a.stats().live_allocations, 2u);
  z = std::move(y);  // frees z's old allocation
  EXPECT_EQ(a.stats().live_allocations, 1u);
  EXPECT_EQ(z.offset(), offset);
  z.reset();
  EXPECT_FALSE(z);
  EXPECT_EQ(a.stats().live_allocations, 0u);
}

TEST(ScopedAllocationTest, ReleaseHandsBackWithoutFreeing) {
  TlsfAllocator a({.capacity_bytes = 1 << 20});
  Allocation raw;
  {
    ScopedAllocation<TlsfAllocator> x = *AllocateScoped(a, 4096, 64);
    raw = x.release();
    EXPECT_FALSE(x);
  }
  EXPECT_EQ(a.stats().live_allocations, 1u);
  a.free(raw);
  EXPECT_EQ(a.stats().live_allocations, 0u);
}

}  // namespace
}  // namespace mooncake::alloc
