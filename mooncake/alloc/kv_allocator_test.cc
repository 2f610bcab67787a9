#include "mooncake/alloc/kv_allocator.h"

#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "mooncake/alloc/allocator_testing.h"
#include "mooncake/alloc/internal/first_fit_allocator.h"
#include "mooncake/alloc/internal/kv_workload.h"

namespace mooncake::alloc {
namespace {

TlsfAllocator Backing(uint64_t capacity_bytes) {
  return TlsfAllocator(TlsfOptions{.capacity_bytes = capacity_bytes, .granularity_bytes = 64});
}

constexpr uint64_t kBlocks[] = {8192, 24576, 65536};

struct KvFactory {
  using Allocator = KvAllocator<>;
  static constexpr bool kServesWholeRange = true;
  static KvAllocator<> Make(uint64_t capacity_bytes) {
    return KvAllocator<>(
        Backing(capacity_bytes),
        SizeClassOptions{.class_bytes = {8192, 24576, 65536}, .page_bytes = 1 << 18});
  }
  static uint64_t RandomSize(std::mt19937_64& rng, uint64_t capacity_bytes) {
    if (rng() % 3 != 0) return kBlocks[rng() % 3];
    return std::uniform_int_distribution<uint64_t>(1, capacity_bytes / 16)(rng);
  }
  static bool MustFit(uint64_t, uint64_t, uint64_t) { return false; }
};

INSTANTIATE_TYPED_TEST_SUITE_P(Kv, AllocatorConformanceTest, KvFactory);

TEST(KvAllocatorTest, CreateRejectsBadOptions) {
  absl::StatusOr<KvAllocator<>> a = KvAllocator<>::Create(Backing(1 << 20), {});
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(KvAllocator<>::Create(Backing(1 << 20), {.class_bytes = {4096}}).ok());
}

TEST(KvAllocatorTest, RoutesExactBlockSizesToSlotsAndTheRestToTheBacking) {
  KvAllocator<> a = KvFactory::Make(1 << 22);
  const Allocation block = *a.allocate(24576, 4096);
  EXPECT_TRUE(a.slab().Owns(block));
  EXPECT_EQ(a.slab().page_count(), 1u);
  const Allocation odd = *a.allocate(24575, 64);  // one byte off: an odd size
  EXPECT_FALSE(a.slab().Owns(odd));
  EXPECT_TRUE(a.backing().Owns(odd));
  const Allocation too_aligned = *a.allocate(8192, 1 << 16);  // slots are 8 KiB aligned
  EXPECT_FALSE(a.slab().Owns(too_aligned));
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.used_bytes, 24576u + 24575u + 8192u);
  EXPECT_EQ(s.live_allocations, 3u);
  a.free(block);
  a.free(odd);
  a.free(too_aligned);
  EXPECT_EQ(a.slab().page_count(), 0u);
  EXPECT_EQ(a.stats().largest_free_bytes, 1u << 22);
}

TEST(KvAllocatorTest, FallsBackToTheBackingWhenNoPageFits) {
  constexpr uint64_t kCap = 1 << 20;
  KvAllocator<> a(Backing(kCap),
                  {.class_bytes = {65536}, .page_bytes = 1 << 18, .page_alignment = 1 << 16});
  // A hole larger than a block but not 64 KiB aligned: no page can go there.
  // (Odd sizes are cut from the top, so the hole sits below `lead`.)
  std::optional<Allocation> lead = a.allocate(4096, 1);
  std::optional<Allocation> hole = a.allocate(65536 + 64, 1);
  std::optional<Allocation> rest = a.allocate(kCap - 4096 - 65536 - 64, 1);
  ASSERT_TRUE(lead && hole && rest);
  a.free(*hole);
  std::optional<Allocation> block = a.allocate(65536, 1);
  ASSERT_TRUE(block.has_value());
  EXPECT_FALSE(a.slab().Owns(*block));
  EXPECT_EQ(block->offset, hole->offset);
  for (const Allocation& x : {*lead, *rest, *block}) a.free(x);
  EXPECT_EQ(a.stats().free_bytes, kCap);
}

// Utilization at first failure on the seeded mixed KV workload, scaled down
// from the benchmark (docs/alloc.md has the 1 GiB figures). With per-layer
// blocks the slab packs them exactly and must beat TLSF alone and first fit;
// with whole-model blocks the automatic page size gives one-slot pages, and
// the composition still beats TLSF alone because odd sizes are cut from the
// other end of each extent than blocks. Deterministic: seeded.
double MeanUtilization(auto make, const alloc_internal::KvWorkloadOptions& options,
                       uint64_t capacity_bytes) {
  double sum = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    auto a = make();
    alloc_internal::KvWorkload w(options, seed);
    sum += alloc_internal::RunUntilFirstFailure(a, capacity_bytes, w, 0.55, 1 << 20).utilization;
    EXPECT_EQ(a.stats().live_allocations, 0u);
  }
  return sum / 4;
}

TEST(KvAllocatorTest, UtilizationAtFirstFailureOnTheMixedKvWorkload) {
  constexpr uint64_t kCap = uint64_t{256} << 20;
  for (const bool per_layer : {true, false}) {
    SCOPED_TRACE(per_layer ? "per-layer blocks" : "whole-model blocks");
    const alloc_internal::KvWorkloadOptions options =
        per_layer ? alloc_internal::PerLayerKvWorkloadOptions()
                  : alloc_internal::KvWorkloadOptions{};
    const std::vector<uint64_t>& blocks = options.block_bytes;
    const double kv = MeanUtilization(
        [&] { return KvAllocator<>(Backing(kCap), {.class_bytes = blocks}); }, options, kCap);
    const double tlsf = MeanUtilization([&] { return Backing(kCap); }, options, kCap);
    const double ff =
        MeanUtilization([&] { return alloc_internal::FirstFitAllocator(kCap); }, options, kCap);
    EXPECT_GE(kv, ff);
    EXPECT_GT(kv, tlsf);
    if (per_layer) {
      EXPECT_GT(kv, 0.97);
    }
    std::printf("%s: kv %.4f tlsf %.4f first-fit %.4f\n", per_layer ? "per-layer" : "whole-model",
                kv, tlsf, ff);
  }
}

// A filter that refuses a slot keeps its whole page (and the window) in place.
TEST(KvAllocatorTest, RelocationMovesOnlyWhatTheFilterAllows) {
  constexpr uint64_t kCap = uint64_t{1} << 20;
  constexpr uint64_t kOdd = 100 << 10;  // a direct (non-block) size
  auto fragmented = [&](std::vector<Allocation>* kept) {
    KvAllocator<> a = KvFactory::Make(kCap);
    std::vector<Allocation> all;
    while (std::optional<Allocation> x = a.allocate(kOdd, 64)) all.push_back(*x);
    for (size_t i = 0; i < all.size(); ++i) {
      if (i % 2 == 0) {
        a.free(all[i]);
      } else {
        kept->push_back(all[i]);
      }
    }
    return a;
  };
  std::vector<Allocation> kept;
  KvAllocator<> a = fragmented(&kept);
  ASSERT_GE(a.stats().free_bytes, 2 * kOdd);
  ASSERT_FALSE(a.allocate(2 * kOdd, 64).has_value());
  int calls = 0;
  auto count = [&](const Relocation&) { ++calls; };
  const AllocatorStats before = a.stats();
  EXPECT_FALSE(a.AllocateRelocating(
      2 * kOdd, 64, RelocationOptions{}, [](uint64_t, AllocationHandle) { return false; }, count));
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(a.stats(), before);
  EXPECT_TRUE(a.AllocateRelocating(
      2 * kOdd, 64, RelocationOptions{}, [](uint64_t, AllocationHandle) { return true; }, count));
  EXPECT_GT(calls, 0);
  a.backing().CheckInvariants();
}

// Multi-slot pages (8/24/64 KiB slots in 256 KiB pages) and odd sizes:
// a moved page moves each of its live slots, whose handles stay valid.
TEST(KvAllocatorTest, RelocationKeepsEveryAllocationsBytes) {
  constexpr uint64_t kCap = uint64_t{4} << 20;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    KvAllocator<> a = KvFactory::Make(kCap);
    const uint64_t relocations = ExpectRelocationKeepsBytes(
        a, kCap,
        [](std::mt19937_64& rng) {
          if (rng() % 4 == 0) {
            return std::pair<uint64_t, uint64_t>(4096 + rng() % (300 << 10), 64);
          }
          return std::pair<uint64_t, uint64_t>(kBlocks[rng() % 3], 4096);
        },
        seed, 2000);
    EXPECT_GT(relocations, 0u);
    a.slab().CheckInvariants();
    a.backing().CheckInvariants();
  }
}

// The target, on a smaller range: with relocation the composed
// allocator fills past 0.97 before its first failure (without: ~0.95).
TEST(KvAllocatorTest, RelocationRaisesUtilizationAtFirstFailure) {
  constexpr uint64_t kCap = uint64_t{256} << 20;
  const alloc_internal::KvWorkloadOptions options;
  double with = 0, without = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    KvAllocator<> a(Backing(kCap), {.class_bytes = options.block_bytes});
    alloc_internal::KvWorkload w(options, seed);
    const alloc_internal::RelocatingRun run = alloc_internal::RunUntilFirstFailureRelocating(
        a, kCap, w, 0.55, 1 << 20, RelocationOptions{});
    with += run.first_failure.utilization / 4;
    EXPECT_LT(run.moved_bytes, run.allocated_bytes / 50);
    EXPECT_EQ(a.stats().live_allocations, 0u);
    KvAllocator<> b(Backing(kCap), {.class_bytes = options.block_bytes});
    alloc_internal::KvWorkload w2(options, seed);
    without += alloc_internal::RunUntilFirstFailure(b, kCap, w2, 0.55, 1 << 20).utilization / 4;
  }
  std::printf("256 MiB whole-model: relocating %.4f, plain %.4f\n", with, without);
  EXPECT_GT(with, without);
  EXPECT_GT(with, 0.96);
}

}  // namespace
}  // namespace mooncake::alloc
