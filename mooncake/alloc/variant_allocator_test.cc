#include "mooncake/alloc/variant_allocator.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>
#include <random>

#include "gtest/gtest.h"
#include "mooncake/alloc/allocator_testing.h"
#include "mooncake/alloc/kv_allocator.h"
#include "mooncake/alloc/tlsf_allocator.h"

namespace mooncake::alloc {
namespace {

using TlsfOrKv = VariantAllocator<TlsfAllocator, KvAllocator<>>;

constexpr uint64_t kGranule = 64;

uint64_t LogUniformSize(std::mt19937_64& rng, uint64_t max_bytes) {
  const int bits = std::uniform_int_distribution<int>(0, std::bit_width(max_bytes) - 1)(rng);
  const uint64_t lo = uint64_t{1} << bits;
  return std::uniform_int_distribution<uint64_t>(lo, std::min(max_bytes, 2 * lo - 1))(rng);
}
constexpr uint64_t kBlocks[] = {8192, 65536};

TlsfAllocator Tlsf(uint64_t capacity_bytes) {
  return TlsfAllocator(
      TlsfOptions{.capacity_bytes = capacity_bytes, .granularity_bytes = kGranule});
}

KvAllocator<> Kv(uint64_t capacity_bytes) {
  return KvAllocator<>(Tlsf(capacity_bytes),
                       SizeClassOptions{.class_bytes = {8192, 65536}, .page_bytes = 1 << 18});
}

// The kit over the variant holding each model.
struct VariantTlsfFactory {
  using Allocator = TlsfOrKv;
  static constexpr bool kServesWholeRange = true;
  static TlsfOrKv Make(uint64_t capacity_bytes) { return TlsfOrKv(Tlsf(capacity_bytes)); }
  static uint64_t RandomSize(std::mt19937_64& rng, uint64_t capacity_bytes) {
    return LogUniformSize(rng, capacity_bytes / 8);
  }
  static bool MustFit(uint64_t size, uint64_t alignment, uint64_t gap) {
    const uint64_t need = size + std::max(alignment, kGranule) + kGranule;
    return gap >= need + need / 16;
  }
};

struct VariantKvFactory {
  using Allocator = TlsfOrKv;
  static constexpr bool kServesWholeRange = true;
  static TlsfOrKv Make(uint64_t capacity_bytes) { return TlsfOrKv(Kv(capacity_bytes)); }
  static uint64_t RandomSize(std::mt19937_64& rng, uint64_t capacity_bytes) {
    if (rng() % 3 != 0) return kBlocks[rng() % 2];
    return std::uniform_int_distribution<uint64_t>(1, capacity_bytes / 16)(rng);
  }
  static bool MustFit(uint64_t, uint64_t, uint64_t) { return false; }
};

using VariantFactories = testing::Types<VariantTlsfFactory, VariantKvFactory>;
INSTANTIATE_TYPED_TEST_SUITE_P(Variant, AllocatorConformanceTest, VariantFactories);

TEST(VariantAllocatorTest, CallsGoToTheHeldModel) {
  TlsfOrKv tlsf(Tlsf(1 << 22));
  TlsfOrKv kv(Kv(1 << 22));
  EXPECT_EQ(tlsf.index(), 0u);
  EXPECT_EQ(kv.index(), 1u);
  ASSERT_NE(kv.get_if<KvAllocator<>>(), nullptr);
  EXPECT_EQ(kv.get_if<TlsfAllocator>(), nullptr);

  const Allocation block = *kv.allocate(8192, 4096);
  EXPECT_TRUE(kv.get_if<KvAllocator<>>()->slab().Owns(block));
  EXPECT_EQ(kv.stats().used_bytes, 8192u);
  const Allocation t = *tlsf.allocate(8192, 4096);
  EXPECT_EQ(tlsf.stats().used_bytes, 8192u);
  EXPECT_EQ(kv.get_if<KvAllocator<>>()->slab().page_count(), 1u);

  kv.free(block);
  tlsf.free(t);
  EXPECT_EQ(kv.stats().used_bytes, 0u);
  EXPECT_EQ(tlsf.stats().used_bytes, 0u);
  EXPECT_EQ(kv.stats().largest_free_bytes, kv.stats().capacity_bytes);
}

// A standby master rebuilds a segment by claiming its replicas' ranges; with
// the KV composition a claimed block is a direct allocation of the backing,
// freed there.
TEST(VariantAllocatorTest, ClaimReachesBothModels) {
  for (const bool kv : {false, true}) {
    TlsfOrKv a = kv ? TlsfOrKv(Kv(1 << 22)) : TlsfOrKv(Tlsf(1 << 22));
    const std::optional<Allocation> c = a.Claim(65536, 8192);
    ASSERT_TRUE(c.has_value()) << "model " << a.index();
    EXPECT_EQ(c->offset, 65536u);
    EXPECT_EQ(c->size, 8192u);
    EXPECT_FALSE(a.Claim(65536 + 4096, 64).has_value()) << "overlaps the first claim";
    EXPECT_EQ(a.stats().used_bytes, 8192u);
    EXPECT_EQ(a.stats().live_allocations, 1u);
    a.free(*c);
    EXPECT_EQ(a.stats().used_bytes, 0u);
    EXPECT_EQ(a.stats().largest_free_bytes, a.stats().capacity_bytes);
  }
}

TEST(VariantAllocatorTest, RelocationReachesBothModels) {
  constexpr uint64_t kQuarter = 256 << 10;
  for (int model = 0; model < 2; ++model) {
    TlsfOrKv a = model == 0 ? TlsfOrKv(Tlsf(1 << 20)) : TlsfOrKv(Kv(1 << 20));
    EXPECT_TRUE(a.SupportsRelocation());
    std::vector<Allocation> q;
    for (int i = 0; i < 4; ++i) q.push_back(*a.allocate(kQuarter, 4096));
    a.free(q[0]);
    a.free(q[2]);
    ASSERT_FALSE(a.allocate(2 * kQuarter, 4096).has_value());
    int moves = 0;
    std::optional<Allocation> big = a.AllocateRelocating(
        2 * kQuarter, 4096, RelocationOptions{}, [](uint64_t, AllocationHandle) { return true; },
        [&](const Relocation&) { ++moves; });
    ASSERT_TRUE(big.has_value()) << a.index();
    EXPECT_EQ(moves, 1);
  }
}

}  // namespace
}  // namespace mooncake::alloc
