#include "mooncake/alloc/tlsf_allocator.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/alloc/allocator_testing.h"

namespace mooncake::alloc {
namespace {

uint64_t LogUniformSize(std::mt19937_64& rng, uint64_t max_bytes) {
  const int bits = std::uniform_int_distribution<int>(0, std::bit_width(max_bytes) - 1)(rng);
  const uint64_t lo = uint64_t{1} << bits;
  return std::uniform_int_distribution<uint64_t>(lo, std::min(max_bytes, 2 * lo - 1))(rng);
}

template <uint64_t kGranule>
struct TlsfFactory {
  using Allocator = TlsfAllocator;
  static constexpr bool kServesWholeRange = true;
  static TlsfAllocator Make(uint64_t capacity_bytes) {
    return TlsfAllocator(
        TlsfOptions{.capacity_bytes = capacity_bytes, .granularity_bytes = kGranule});
  }
  static uint64_t RandomSize(std::mt19937_64& rng, uint64_t capacity_bytes) {
    return LogUniformSize(rng, capacity_bytes / 8);
  }
  // Good fit rounds the request plus worst-case padding up to a bin (1/32);
  // a gap seen by the reference may lose a granule of rounding at its start.
  static bool MustFit(uint64_t size, uint64_t alignment, uint64_t gap) {
    const uint64_t need = size + std::max(alignment, kGranule) + kGranule;
    return gap >= need + need / 16;
  }
};

// TLSF whose allocate() cuts from the high end of the chosen extent, so the
// kit covers Allocate(..., CarveEnd::kHigh) too.
class HighEndTlsf {
 public:
  explicit HighEndTlsf(TlsfAllocator inner) : inner_(std::move(inner)) {}
  std::optional<Allocation> allocate(uint64_t size, uint64_t alignment) {
    return inner_.Allocate(size, alignment, CarveEnd::kHigh);
  }
  void free(const Allocation& allocation) { inner_.free(allocation); }
  AllocatorStats stats() const { return inner_.stats(); }

 private:
  TlsfAllocator inner_;
};

template <uint64_t kGranule>
struct HighEndTlsfFactory : TlsfFactory<kGranule> {
  using Allocator = HighEndTlsf;
  static HighEndTlsf Make(uint64_t capacity_bytes) {
    return HighEndTlsf(TlsfFactory<kGranule>::Make(capacity_bytes));
  }
};

using TlsfFactories = testing::Types<TlsfFactory<1>, TlsfFactory<64>, TlsfFactory<4096>,
                                     HighEndTlsfFactory<1>, HighEndTlsfFactory<64>>;
INSTANTIATE_TYPED_TEST_SUITE_P(Tlsf, AllocatorConformanceTest, TlsfFactories);

TEST(TlsfAllocatorTest, CreateRejectsBadOptionsWithInvalidArgument) {
  for (const TlsfOptions& bad : {TlsfOptions{.capacity_bytes = 0},
                                 TlsfOptions{.capacity_bytes = 100, .granularity_bytes = 64},
                                 TlsfOptions{.capacity_bytes = 4096, .granularity_bytes = 0},
                                 TlsfOptions{.capacity_bytes = 4096, .granularity_bytes = 48},
                                 TlsfOptions{.capacity_bytes = (uint64_t{1} << 62) + 64}}) {
    absl::StatusOr<TlsfAllocator> a = TlsfAllocator::Create(bad);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(a.status().message().find("TlsfOptions"), absl::string_view::npos);
  }
  EXPECT_TRUE(TlsfAllocator::Create({.capacity_bytes = uint64_t{1} << 62}).ok());
}

// With granularity 1 every free byte is in a free record and records are
// fully coalesced, so the model's view must equal the reference exactly.
TEST(TlsfAllocatorTest, CoalescingKeepsFreeExtentsEqualToReferenceGaps) {
  constexpr uint64_t kCap = 1 << 20;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    TlsfAllocator a({.capacity_bytes = kCap, .granularity_bytes = 1});
    IntervalSetReference ref(kCap);
    std::vector<Allocation> live;
    std::mt19937_64 rng(seed);
    for (int op = 0; op < 4000; ++op) {
      if (live.empty() || rng() % 100 < 55) {
        const uint64_t size = LogUniformSize(rng, kCap / 16);
        const uint64_t alignment = uint64_t{1} << (rng() % 13);
        if (std::optional<Allocation> got = a.allocate(size, alignment)) {
          ref.Insert(*got, size, alignment);
          live.push_back(*got);
        }
      } else {
        const size_t i = rng() % live.size();
        a.free(live[i]);
        ref.Erase(live[i]);
        live[i] = live.back();
        live.pop_back();
      }
      a.CheckInvariants();
      const AllocatorStats s = a.stats();
      ASSERT_EQ(s.free_bytes, kCap - ref.used_bytes());
      ASSERT_EQ(s.largest_free_bytes, ref.LargestGap()) << "op " << op;
    }
  }
}

TEST(TlsfAllocatorTest, HighEndCarveTakesTheTopOfTheExtent) {
  constexpr uint64_t kCap = 1 << 20;
  TlsfAllocator a({.capacity_bytes = kCap, .granularity_bytes = 64});
  const std::optional<Allocation> low = a.Allocate(100, 1, CarveEnd::kLow);
  const std::optional<Allocation> high = a.Allocate(100, 1, CarveEnd::kHigh);
  const std::optional<Allocation> aligned = a.Allocate(5000, 4096, CarveEnd::kHigh);
  ASSERT_TRUE(low && high && aligned);
  EXPECT_EQ(low->offset, 0u);
  EXPECT_EQ(high->offset, kCap - 128);  // 100 rounded up to the granule
  // [kCap - 128 - 5056, ...) rounded down to 4096.
  EXPECT_EQ(aligned->offset, (kCap - 128 - 5056) & ~uint64_t{4095});
  a.CheckInvariants();
  // The tail padding between `aligned` and `high` is free and reusable.
  const uint64_t tail = kCap - 128 - (aligned->offset + 5056);
  const std::optional<Allocation> fill = a.Allocate(tail, 64, CarveEnd::kLow);
  ASSERT_TRUE(fill.has_value());
  EXPECT_EQ(fill->offset, aligned->offset + 5056);
  for (const Allocation& x : {*low, *high, *aligned, *fill}) a.free(x);
  a.CheckInvariants();
  EXPECT_EQ(a.stats().largest_free_bytes, kCap);
}

// Both ends, mixed at random, against the reference gaps (granularity 1).
TEST(TlsfAllocatorTest, MixedCarveEndsKeepInvariants) {
  constexpr uint64_t kCap = 1 << 20;
  TlsfAllocator a({.capacity_bytes = kCap, .granularity_bytes = 1});
  IntervalSetReference ref(kCap);
  std::vector<Allocation> live;
  std::mt19937_64 rng(11);
  for (int op = 0; op < 4000; ++op) {
    if (live.empty() || rng() % 100 < 55) {
      const uint64_t size = LogUniformSize(rng, kCap / 16);
      const uint64_t alignment = uint64_t{1} << (rng() % 13);
      const CarveEnd end = rng() % 2 == 0 ? CarveEnd::kLow : CarveEnd::kHigh;
      if (std::optional<Allocation> got = a.Allocate(size, alignment, end)) {
        ref.Insert(*got, size, alignment);
        live.push_back(*got);
      }
    } else {
      const size_t i = rng() % live.size();
      a.free(live[i]);
      ref.Erase(live[i]);
      live[i] = live.back();
      live.pop_back();
    }
    a.CheckInvariants();
    ASSERT_EQ(a.stats().largest_free_bytes, ref.LargestGap()) << "op " << op;
  }
}

TEST(TlsfAllocatorTest, RoundsReservationsUpToTheGranule) {
  TlsfAllocator a({.capacity_bytes = 1 << 20, .granularity_bytes = 256});
  const std::optional<Allocation> x = a.allocate(1, 1);
  const std::optional<Allocation> y = a.allocate(300, 1);
  ASSERT_TRUE(x && y);
  EXPECT_EQ(x->size, 1u);
  EXPECT_EQ(y->offset % 256, 0u);
  EXPECT_EQ(y->offset - x->offset, 256u);
  EXPECT_EQ(a.stats().used_bytes, 301u);
  EXPECT_EQ(a.stats().free_bytes, (1u << 20) - 256 - 512);
  a.CheckInvariants();
}

TEST(TlsfAllocatorTest, LargeAlignmentsSplitPaddingOffAsFreeSpace) {
  TlsfAllocator a({.capacity_bytes = 1 << 20, .granularity_bytes = 64});
  const std::optional<Allocation> small = a.allocate(64, 1);
  const std::optional<Allocation> big = a.allocate(1000, 1 << 16);
  ASSERT_TRUE(small && big);
  EXPECT_EQ(big->offset, 1u << 16);
  // The padding [64, 65536) is free and reusable.
  const std::optional<Allocation> fill = a.allocate((1 << 16) - 64, 1);
  ASSERT_TRUE(fill.has_value());
  EXPECT_EQ(fill->offset, 64u);
  a.CheckInvariants();
}

TEST(TlsfAllocatorTest, AlignmentBeyondCapacityOnlyFitsAtOffsetZero) {
  TlsfAllocator a({.capacity_bytes = 3 << 12, .granularity_bytes = 64});
  const std::optional<Allocation> x = a.allocate(64, uint64_t{1} << 40);
  ASSERT_TRUE(x.has_value());
  EXPECT_EQ(x->offset, 0u);
  EXPECT_FALSE(a.allocate(64, uint64_t{1} << 40).has_value());
  EXPECT_FALSE(a.allocate(64, uint64_t{1} << 63).has_value());
  a.free(*x);
  a.CheckInvariants();
}

// Regression: a plain good-fit search rounds a request up to the next bin
// and so never reuses a hole of exactly the request's size unless that size
// is a bin boundary; with fixed-size KV blocks that strands every hole.
TEST(TlsfAllocatorTest, ReusesAnExactSizeHoleWhenFull) {
  constexpr uint64_t kBlock = 917504;  // 896 KiB: not a bin boundary
  constexpr uint64_t kCap = kBlock * 40;
  TlsfAllocator a({.capacity_bytes = kCap, .granularity_bytes = 4096});
  std::vector<Allocation> live;
  while (std::optional<Allocation> x = a.allocate(kBlock, 4096)) live.push_back(*x);
  ASSERT_EQ(live.size(), 40u);
  for (size_t i = 1; i < live.size(); i += 3) a.free(live[i]);
  for (size_t i = 1; i < live.size(); i += 3) {
    ASSERT_TRUE(a.allocate(kBlock, 4096).has_value()) << "hole " << i << " not reused";
  }
  EXPECT_EQ(a.stats().free_bytes, 0u);
  a.CheckInvariants();
}

// Near exhaustion step 3 scans the bins below the "sure fit" bin.
TEST(TlsfAllocatorTest, FindsAFittingBlockInsideALowerBinWhenNothingElseFits) {
  TlsfAllocator a({.capacity_bytes = 1 << 20, .granularity_bytes = 64});
  // Bin [1024 + 32k]: a hole of 1088 bytes, then a request of 1050 rounded to 1088.
  const auto a1 = a.allocate(1 << 19, 1);
  const auto hole = a.allocate(1088, 1);
  const auto rest = a.allocate((1 << 19) - 1088, 1);
  ASSERT_TRUE(a1 && hole && rest);
  EXPECT_EQ(a.stats().free_bytes, 0u);
  a.free(*hole);
  const std::optional<Allocation> x = a.allocate(1030, 1);
  ASSERT_TRUE(x.has_value());
  EXPECT_EQ(x->offset, hole->offset);
  a.CheckInvariants();
}

TEST(TlsfAllocatorTest, StaleHandleAfterReuseDies) {
  if (!AssertEnabled(AssertLevel::kDebug)) GTEST_SKIP();
  testing::FLAGS_gtest_death_test_style = "threadsafe";
  TlsfAllocator a({.capacity_bytes = 1 << 20});
  const Allocation first = *a.allocate(4096, 1);
  a.free(first);
  const Allocation second = *a.allocate(4096, 1);  // same record, new generation
  EXPECT_EQ(second.offset, first.offset);
  EXPECT_DEATH(a.free(first), "double free or stale handle");
  a.free(second);
}

TEST(TlsfAllocatorTest, EditedAllocationDiesInDebugBuilds) {
  if (!AssertEnabled(AssertLevel::kDebug)) GTEST_SKIP();
  testing::FLAGS_gtest_death_test_style = "threadsafe";
  TlsfAllocator a({.capacity_bytes = 1 << 20});
  Allocation x = *a.allocate(4096, 1);
  Allocation edited = x;
  edited.offset += 64;
  EXPECT_DEATH(a.free(edited), "modified");
  a.free(x);
}

TEST(TlsfAllocatorTest, ReserveRecordsAvoidsGrowth) {
  TlsfAllocator a({.capacity_bytes = 1 << 20, .reserve_records = 1000});
  std::vector<Allocation> live;
  for (int i = 0; i < 400; ++i) live.push_back(*a.allocate(64 + i, 1));
  for (const Allocation& x : live) a.free(x);
  a.CheckInvariants();
  EXPECT_EQ(a.stats().largest_free_bytes, 1u << 20);
}

// Four 256 KiB allocations; the first and third freed: 512 KiB free, no
// 512 KiB extent. Relocation moves one neighbour into the other hole.
TEST(TlsfAllocatorTest, RelocationOpensAnExtentByMovingANeighbour) {
  TlsfAllocator a({.capacity_bytes = 1 << 20});
  constexpr uint64_t kQuarter = 256 << 10;
  std::vector<Allocation> q;
  for (int i = 0; i < 4; ++i) q.push_back(*a.allocate(kQuarter, 4096));
  a.free(q[0]);
  a.free(q[2]);
  ASSERT_FALSE(a.allocate(2 * kQuarter, 1).has_value());
  std::vector<Relocation> moves;
  const std::optional<Allocation> big = a.AllocateRelocating(
      2 * kQuarter, 4096, RelocationOptions{}, [&](const Relocation& r) { moves.push_back(r); });
  ASSERT_TRUE(big.has_value());
  ASSERT_EQ(moves.size(), 1u);
  Allocation& moved = moves[0].from_offset == q[1].offset ? q[1] : q[3];
  ASSERT_EQ(moves[0].from_offset, moved.offset);
  EXPECT_NE(moves[0].handle, moved.handle);
  moved.offset = moves[0].to_offset;
  moved.handle = moves[0].handle;
  EXPECT_TRUE(big->offset + big->size <= moved.offset || moved.offset + kQuarter <= big->offset);
  a.CheckInvariants();
  EXPECT_EQ(a.stats().used_bytes, 4 * kQuarter);
  a.free(moved);  // the new handle is the live one
  a.free(moved.offset == q[1].offset ? q[3] : q[1]);
  a.free(*big);
  a.CheckInvariants();
  EXPECT_EQ(a.stats().largest_free_bytes, 1u << 20);
}

// An owner that may not move some allocations (a range being written)
// filters them: windows holding one are skipped.
TEST(TlsfAllocatorTest, RelocationSkipsWindowsWithAnUnmovableAllocation) {
  TlsfAllocator a({.capacity_bytes = 1 << 20});
  constexpr uint64_t kQuarter = 256 << 10;
  std::vector<Allocation> q;
  for (int i = 0; i < 4; ++i) q.push_back(*a.allocate(kQuarter, 4096));
  a.free(q[0]);
  a.free(q[2]);
  int calls = 0;
  auto count = [&](const Relocation&) { ++calls; };
  const AllocatorStats before = a.stats();
  auto none = [](uint64_t, AllocationHandle) { return false; };
  EXPECT_FALSE(a.AllocateRelocating(2 * kQuarter, 4096, RelocationOptions{}, none, count));
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(a.stats(), before);
  a.CheckInvariants();
  // Only q[3] may move: the window [q2, q3] opens, q[1] stays.
  auto only_q3 = [&](uint64_t offset, AllocationHandle handle) {
    return offset == q[3].offset && handle == q[3].handle;
  };
  std::vector<Relocation> moves;
  const std::optional<Allocation> big =
      a.AllocateRelocating(2 * kQuarter, 4096, RelocationOptions{}, only_q3,
                           [&](const Relocation& r) { moves.push_back(r); });
  ASSERT_TRUE(big.has_value());
  ASSERT_EQ(moves.size(), 1u);
  EXPECT_EQ(moves[0].from_offset, q[3].offset);
  EXPECT_EQ(big->offset, q[2].offset);
  a.free(Allocation{.offset = moves[0].to_offset, .size = kQuarter, .handle = moves[0].handle});
  a.free(q[1]);
  a.free(*big);
  a.CheckInvariants();
  EXPECT_EQ(a.stats().used_bytes, 0u);
}

TEST(TlsfAllocatorTest, RelocationThatCannotWorkMovesNothing) {
  TlsfAllocator a({.capacity_bytes = 1 << 20});
  constexpr uint64_t kQuarter = 256 << 10;
  std::vector<Allocation> q;
  for (int i = 0; i < 4; ++i) q.push_back(*a.allocate(kQuarter, 4096));
  a.free(q[1]);
  int calls = 0;
  auto count = [&](const Relocation&) { ++calls; };
  // Fewer free bytes than asked.
  EXPECT_FALSE(a.AllocateRelocating(kQuarter + 64, 1, RelocationOptions{}, count).has_value());
  // Enough bytes would be free, but the budget forbids moving a neighbour.
  a.free(q[3]);
  const AllocatorStats before = a.stats();
  EXPECT_FALSE(
      a.AllocateRelocating(2 * kQuarter, 1, RelocationOptions{.max_moved_bytes = 4096}, count)
          .has_value());
  // Bad requests.
  EXPECT_FALSE(a.AllocateRelocating(0, 1, RelocationOptions{}, count).has_value());
  EXPECT_FALSE(a.AllocateRelocating(4096, 3, RelocationOptions{}, count).has_value());
  EXPECT_FALSE(
      a.AllocateRelocating(4096, 1, RelocationOptions{.max_alignment = 3}, count).has_value());
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(a.stats(), before);
  a.CheckInvariants();
  // A full range with everything the same size: the moved record would need
  // the very hole it leaves, so nothing fits anywhere else.
  TlsfAllocator b({.capacity_bytes = 1 << 20});
  std::vector<Allocation> eighths;
  for (int i = 0; i < 8; ++i) eighths.push_back(*b.allocate(128 << 10, 1));
  b.free(eighths[1]);
  b.free(eighths[4]);
  const AllocatorStats full = b.stats();
  EXPECT_FALSE(b.AllocateRelocating(384 << 10, 1, RelocationOptions{}, count).has_value());
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(b.stats(), full);
  b.CheckInvariants();
  EXPECT_TRUE(b.AllocateRelocating(256 << 10, 1, RelocationOptions{}, count).has_value());
  EXPECT_EQ(calls, 1);
  b.CheckInvariants();
}

TEST(TlsfAllocatorTest, RelocationKeepsEveryAllocationsBytes) {
  constexpr uint64_t kCap = uint64_t{4} << 20;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    TlsfAllocator a({.capacity_bytes = kCap});
    const uint64_t relocations = ExpectRelocationKeepsBytes(
        a, kCap,
        [](std::mt19937_64& rng) {
          static constexpr uint64_t kSizes[] = {64 << 10, 160 << 10, 256 << 10};
          if (rng() % 4 == 0) return std::pair<uint64_t, uint64_t>(1 + rng() % (200 << 10), 64);
          return std::pair<uint64_t, uint64_t>(kSizes[rng() % 3], 4096);
        },
        seed, 2000);
    EXPECT_GT(relocations, 0u);
    a.CheckInvariants();
  }
}

// The (offset, size) records a standby master replays; gaps between them.
std::vector<std::pair<uint64_t, uint64_t>> ClaimLayout() {
  return {{0, 100}, {128, 64}, {1024, 4000}, {8192, 1}, {8256, 8000}, {65536, 64}};
}

void ExpectLayoutClaimed(TlsfAllocator& a, const std::vector<Allocation>& claimed) {
  uint64_t used = 0, reserved = 0;
  for (const Allocation& c : claimed) {
    used += c.size;
    reserved += a.ReservedBytes(c.size);
  }
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.used_bytes, used);
  EXPECT_EQ(s.free_bytes, a.capacity_bytes() - reserved);
  EXPECT_EQ(s.live_allocations, claimed.size());
  a.CheckInvariants();
}

// Frees every claim (in the given order) and checks the whole range is one
// free extent again.
void FreeAllAndAllocateEverything(TlsfAllocator& a, const std::vector<Allocation>& claimed) {
  for (const Allocation& c : claimed) {
    a.free(c);
    a.CheckInvariants();
  }
  EXPECT_EQ(a.stats().live_allocations, 0u);
  const std::optional<Allocation> all = a.allocate(a.capacity_bytes(), 1);
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->offset, 0u);
  a.free(*all);
}

TEST(TlsfAllocatorTest, ClaimsInAscendingOrderRebuildTheLayout) {
  TlsfAllocator a({.capacity_bytes = 1 << 20, .granularity_bytes = 64});
  std::vector<Allocation> claimed;
  for (const auto& [offset, size] : ClaimLayout()) {
    const std::optional<Allocation> c = a.Claim(offset, size);
    ASSERT_TRUE(c.has_value()) << offset;
    EXPECT_EQ(c->offset, offset);
    EXPECT_EQ(c->size, size);
    EXPECT_TRUE(a.Owns(*c));
    claimed.push_back(*c);
    a.CheckInvariants();
  }
  ExpectLayoutClaimed(a, claimed);
  // allocate() fills the gaps the claims left, never a claimed byte.
  const std::optional<Allocation> gap = a.allocate(64, 64);
  ASSERT_TRUE(gap.has_value());
  EXPECT_EQ(gap->offset, 192u);
  a.free(*gap);
  FreeAllAndAllocateEverything(a, claimed);
}

// 200k ascending claims behind a used tail: a walk of the records per claim
// would be ~2e10 steps and time the test out; the hint makes each O(1).
TEST(TlsfAllocatorTest, AscendingClaimsStayConstantTimeBehindAUsedTail) {
  constexpr uint64_t kGranule = 64, kClaims = 200'000, kCap = kGranule * (2 * kClaims + 2);
  TlsfAllocator a({.capacity_bytes = kCap, .granularity_bytes = kGranule});
  ASSERT_TRUE(a.Claim(kCap - kGranule, kGranule).has_value());
  for (uint64_t i = 0; i < kClaims; ++i) {
    ASSERT_TRUE(a.Claim(2 * i * kGranule, kGranule).has_value()) << i;
  }
  EXPECT_EQ(a.stats().live_allocations, kClaims + 1);
  a.CheckInvariants();
}

TEST(TlsfAllocatorTest, ClaimsInAnyOrderRebuildTheSameLayout) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20; ++round) {
    std::vector<std::pair<uint64_t, uint64_t>> layout = ClaimLayout();
    std::shuffle(layout.begin(), layout.end(), rng);
    TlsfAllocator a({.capacity_bytes = 1 << 20, .granularity_bytes = 64});
    std::vector<Allocation> claimed;
    for (const auto& [offset, size] : layout) {
      const std::optional<Allocation> c = a.Claim(offset, size);
      ASSERT_TRUE(c.has_value()) << offset;
      ASSERT_EQ(c->offset, offset);
      claimed.push_back(*c);
      a.CheckInvariants();
    }
    ExpectLayoutClaimed(a, claimed);
    std::shuffle(claimed.begin(), claimed.end(), rng);
    FreeAllAndAllocateEverything(a, claimed);
  }
}

TEST(TlsfAllocatorTest, OverlappingClaimIsRefusedWithNoSideEffect) {
  TlsfAllocator a({.capacity_bytes = 1 << 16, .granularity_bytes = 64});
  const std::optional<Allocation> first = a.Claim(1024, 1000);  // reserves [1024, 2048)
  ASSERT_TRUE(first.has_value());
  const AllocatorStats before = a.stats();
  EXPECT_FALSE(a.Claim(1024, 64).has_value());    // same start
  EXPECT_FALSE(a.Claim(1984, 64).has_value());    // last granule, in the rounding
  EXPECT_FALSE(a.Claim(960, 128).has_value());    // runs into it from below
  EXPECT_FALSE(a.Claim(1536, 4096).has_value());  // starts inside, runs past it
  EXPECT_EQ(a.stats().used_bytes, before.used_bytes);
  EXPECT_EQ(a.stats().free_bytes, before.free_bytes);
  EXPECT_EQ(a.stats().live_allocations, 1u);
  a.CheckInvariants();
  // Its neighbours on both sides are still free.
  EXPECT_TRUE(a.Claim(960, 64).has_value());
  EXPECT_TRUE(a.Claim(2048, 64).has_value());
  a.CheckInvariants();
}

TEST(TlsfAllocatorTest, ClaimStraddlingAUsedRecordIsRefused) {
  TlsfAllocator a({.capacity_bytes = 1 << 16, .granularity_bytes = 64});
  ASSERT_TRUE(a.Claim(4096, 4096).has_value());
  // allocate() takes [0, 64) from the low end.
  const std::optional<Allocation> low = a.allocate(64, 64);
  ASSERT_TRUE(low.has_value());
  ASSERT_EQ(low->offset, 0u);
  EXPECT_FALSE(a.Claim(64, 16384).has_value());  // over the used [4096, 8192)
  EXPECT_FALSE(a.Claim(0, 128).has_value());     // over the allocated [0, 64)
  EXPECT_EQ(a.stats().live_allocations, 2u);
  a.CheckInvariants();
  const std::optional<Allocation> between = a.Claim(64, 4096 - 64);  // exactly the hole
  ASSERT_TRUE(between.has_value());
  EXPECT_TRUE(a.Claim(8192, 64).has_value());
  a.CheckInvariants();
  a.free(*between);
  a.CheckInvariants();
}

TEST(TlsfAllocatorTest, ClaimRefusesMisalignedEmptyAndOutOfRange) {
  constexpr uint64_t kCap = 1 << 16;
  TlsfAllocator a({.capacity_bytes = kCap, .granularity_bytes = 64});
  EXPECT_FALSE(a.Claim(32, 64).has_value());  // off the granule
  EXPECT_FALSE(a.Claim(1, 1).has_value());
  EXPECT_FALSE(a.Claim(0, 0).has_value());
  EXPECT_FALSE(a.Claim(kCap, 64).has_value());
  EXPECT_FALSE(a.Claim(kCap - 64, 65).has_value());  // rounds up to 128: past the end
  EXPECT_FALSE(a.Claim(0, kCap + 1).has_value());
  EXPECT_FALSE(a.Claim(0, UINT64_MAX).has_value());
  EXPECT_FALSE(a.Claim(UINT64_MAX & ~uint64_t{63}, 64).has_value());
  EXPECT_EQ(a.stats().live_allocations, 0u);
  a.CheckInvariants();
  // A size off the granule reserves the rounded-up range, like allocate().
  const std::optional<Allocation> c = a.Claim(kCap - 128, 65);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(a.stats().used_bytes, 65u);
  EXPECT_EQ(a.stats().free_bytes, kCap - 128);
  EXPECT_FALSE(a.Claim(kCap - 64, 64).has_value());
  a.free(*c);
  EXPECT_TRUE(a.Claim(0, kCap).has_value());  // the whole range
  a.CheckInvariants();
}

// Claims, allocations and frees in random order against a map of granules.
TEST(TlsfAllocatorTest, ClaimAgreesWithAGranuleBitmap) {
  constexpr uint64_t kGranule = 64, kGranules = 512, kCap = kGranule * kGranules;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    std::mt19937_64 rng(seed);
    TlsfAllocator a({.capacity_bytes = kCap, .granularity_bytes = kGranule});
    std::vector<bool> used(kGranules, false);
    std::vector<Allocation> live;
    auto mark = [&](const Allocation& x, bool value) {
      for (uint64_t g = x.offset / kGranule; g < (x.offset + a.ReservedBytes(x.size)) / kGranule;
           ++g) {
        ASSERT_NE(used[g], value) << "granule " << g;
        used[g] = value;
      }
    };
    int claims = 0;
    for (int op = 0; op < 3000; ++op) {
      const uint64_t r = rng() % 100;
      if (r < 50) {
        // Mostly aligned offsets; a few off the granule or past the end.
        uint64_t offset = (rng() % (kGranules + 4)) * kGranule;
        if (rng() % 16 == 0) offset += 1 + rng() % (kGranule - 1);
        const uint64_t size = rng() % 8 == 0 ? rng() % 3 : 1 + rng() % (8 * kGranule);
        bool expect = size != 0 && offset % kGranule == 0 && offset < kCap &&
                      a.ReservedBytes(size) <= kCap - offset;
        for (uint64_t g = offset / kGranule; expect && g * kGranule < offset + size; ++g) {
          expect = !used[g];
        }
        const std::optional<Allocation> c = a.Claim(offset, size);
        ASSERT_EQ(c.has_value(), expect) << "op " << op << " offset " << offset << " size " << size;
        if (c) {
          ASSERT_EQ(c->offset, offset);
          mark(*c, true);
          live.push_back(*c);
          ++claims;
        }
      } else if (r < 65) {
        if (std::optional<Allocation> x = a.allocate(1 + rng() % (4 * kGranule), kGranule)) {
          mark(*x, true);
          live.push_back(*x);
        }
      } else if (!live.empty()) {
        const size_t i = rng() % live.size();
        mark(live[i], false);
        a.free(live[i]);
        live[i] = live.back();
        live.pop_back();
      }
      a.CheckInvariants();
      const uint64_t used_granules =
          static_cast<uint64_t>(std::count(used.begin(), used.end(), true));
      ASSERT_EQ(a.stats().free_bytes, kCap - used_granules * kGranule);
      ASSERT_EQ(a.stats().live_allocations, live.size());
    }
    EXPECT_GT(claims, 100);
    for (const Allocation& x : live) a.free(x);
    EXPECT_TRUE(a.allocate(kCap, 1).has_value());
  }
}

TEST(TlsfAllocatorTest, ClaimedAllocationsHandleGoesStaleAfterFree) {
  if (!AssertEnabled(AssertLevel::kDebug)) GTEST_SKIP();
  testing::FLAGS_gtest_death_test_style = "threadsafe";
  TlsfAllocator a({.capacity_bytes = 1 << 16, .granularity_bytes = 64});
  const std::optional<Allocation> c = a.Claim(4096, 64);
  ASSERT_TRUE(c.has_value());
  a.free(*c);
  const std::optional<Allocation> again = a.Claim(4096, 64);
  ASSERT_TRUE(again.has_value());
  EXPECT_DEATH(a.free(*c), "double free or stale handle");
  a.free(*again);
  a.CheckInvariants();
}

}  // namespace
}  // namespace mooncake::alloc
