// The Allocator conformance kit: a typed gtest suite every model passes.
//
// A model joins with a factory and one line:
//
//   struct TlsfFactory {
//     using Allocator = TlsfAllocator;
//     // A fresh allocator over [0, capacity_bytes); capacity is a multiple of 64 KiB.
//     static Allocator Make(uint64_t capacity_bytes);
//     // A size the model serves, drawn from rng; at most capacity_bytes / 8.
//     static uint64_t RandomSize(std::mt19937_64& rng, uint64_t capacity_bytes);
//     // True when allocate(size, alignment) must succeed while the largest gap
//     // between live allocations is largest_gap_bytes (return false to promise
//     // nothing beyond "an empty allocator serves any size it serves").
//     static bool MustFit(uint64_t size, uint64_t alignment, uint64_t largest_gap_bytes);
//     // True when an empty allocator serves one allocation of the whole range.
//     static constexpr bool kServesWholeRange = true;
//   };
//   INSTANTIATE_TYPED_TEST_SUITE_P(Tlsf, AllocatorConformanceTest, TlsfFactory);
//
// What it checks, against a reference model (an interval set of live
// allocations): every allocation lies inside the range, is aligned and
// overlaps no other live one; Allocation::size is the request; stats agree
// with the reference (used bytes, live count, bounds on free and largest
// free); a failed allocation is one the model's MustFit allows; bad requests
// (size 0, size > capacity, alignment not a power of two) return nothing and
// change nothing; exhaustion returns nothing, never crashes, and recovers
// after a free; freeing everything restores the empty stats with a largest
// free extent equal to the capacity; double frees and allocations from
// another allocator die on an assertion (debug builds).
#ifndef MOONCAKE_ALLOC_ALLOCATOR_TESTING_H_
#define MOONCAKE_ALLOC_ALLOCATOR_TESTING_H_

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/alloc/allocator.h"
#include "mooncake/base/assert.h"

namespace mooncake::alloc {

// The reference model: live allocations as an interval set.
class IntervalSetReference {
 public:
  explicit IntervalSetReference(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // Records `a`; a gtest failure if it leaves the range, is misaligned, has
  // the wrong size or overlaps a live allocation.
  void Insert(const Allocation& a, uint64_t requested_size, uint64_t alignment) {
    EXPECT_EQ(a.size, requested_size);
    EXPECT_EQ(a.offset % alignment, 0u) << "offset " << a.offset << " alignment " << alignment;
    ASSERT_LE(a.offset, capacity_);
    ASSERT_LE(a.size, capacity_ - a.offset) << "allocation leaves the range";
    auto next = live_.lower_bound(a.offset);
    if (next != live_.end()) {
      ASSERT_GE(next->first, a.offset + a.size) << "overlaps the allocation at " << next->first;
    }
    if (next != live_.begin()) {
      auto prev = std::prev(next);
      ASSERT_LE(prev->second, a.offset) << "overlaps the allocation at " << prev->first;
    }
    live_[a.offset] = a.offset + a.size;
    used_ += a.size;
  }

  void Erase(const Allocation& a) {
    ASSERT_EQ(live_.erase(a.offset), 1u);
    used_ -= a.size;
  }

  // The largest stretch of the range no live allocation covers.
  uint64_t LargestGap() const {
    uint64_t largest = 0, cursor = 0;
    for (const auto& [start, end] : live_) {
      largest = std::max(largest, start - cursor);
      cursor = end;
    }
    return std::max(largest, capacity_ - cursor);
  }

  uint64_t used_bytes() const { return used_; }
  uint64_t live_count() const { return live_.size(); }

 private:
  uint64_t capacity_;
  std::map<uint64_t, uint64_t> live_;  // offset -> end
  uint64_t used_ = 0;
};

// Relocation check for models with AllocateRelocating(size, alignment,
// options, relocate): a seeded random walk near full over a shadow copy of
// the range. Every allocation's bytes are stamped with its id; each
// Relocation must name a live allocation, move it to a range no live
// allocation covers, and is answered with a real copy; after every step
// every live allocation still holds its own stamp at its (new) offset, is
// aligned as requested (up to options.max_alignment) and the stats agree.
// `next_request(rng)` returns {size, alignment}. Returns the relocations seen.
template <typename A, typename NextRequest>
uint64_t ExpectRelocationKeepsBytes(A& allocator, uint64_t capacity_bytes, NextRequest next_request,
                                    uint64_t seed, int steps,
                                    const RelocationOptions& options = {}) {
  struct Live {
    Allocation a;
    uint64_t alignment;
    uint8_t stamp;
  };
  std::vector<uint8_t> bytes(capacity_bytes, 0);
  std::vector<Live> live;
  std::mt19937_64 rng(seed);
  uint64_t relocations = 0, used = 0, calls_moved = 0;
  auto find = [&](uint64_t offset) {
    return std::find_if(live.begin(), live.end(),
                        [&](const Live& l) { return l.a.offset == offset; });
  };
  auto covered = [&](uint64_t offset, uint64_t size) {
    return std::any_of(live.begin(), live.end(), [&](const Live& l) {
      return l.a.offset < offset + size && offset < l.a.offset + l.a.size;
    });
  };
  auto relocate = [&](const Relocation& r) {
    const auto it = find(r.from_offset);
    ASSERT_NE(it, live.end()) << "relocation of an offset nobody holds: " << r.from_offset;
    const uint64_t size = it->a.size;
    ASSERT_LE(r.to_offset + size, capacity_bytes);
    ASSERT_FALSE(covered(r.to_offset, size)) << "relocated onto a live allocation";
    std::copy_n(bytes.begin() + static_cast<std::ptrdiff_t>(r.from_offset), size,
                bytes.begin() + static_cast<std::ptrdiff_t>(r.to_offset));
    std::fill_n(bytes.begin() + static_cast<std::ptrdiff_t>(r.from_offset), size, 0);
    it->a.offset = r.to_offset;
    it->a.handle = r.handle;
    calls_moved += size;
    ++relocations;
  };
  auto check = [&]() {
    for (const Live& l : live) {
      EXPECT_EQ(l.a.offset % std::min(l.alignment, options.max_alignment), 0u);
      const auto begin = bytes.begin() + static_cast<std::ptrdiff_t>(l.a.offset);
      ASSERT_TRUE(std::all_of(begin, begin + static_cast<std::ptrdiff_t>(l.a.size),
                              [&](uint8_t b) { return b == l.stamp; }))
          << "allocation at " << l.a.offset << " lost its bytes";
    }
    const AllocatorStats s = allocator.stats();
    EXPECT_EQ(s.used_bytes, used);
    EXPECT_EQ(s.live_allocations, live.size());
  };
  uint8_t next_stamp = 1;
  for (int step = 0; step < steps && !testing::Test::HasFatalFailure(); ++step) {
    // Mostly allocate: the walk lives near full, where relocation happens.
    if (live.empty() || rng() % 100 < 55) {
      const auto [size, alignment] = next_request(rng);
      calls_moved = 0;
      const std::optional<Allocation> a =
          allocator.AllocateRelocating(size, alignment, options, relocate);
      if (options.max_moved_bytes != 0) {
        EXPECT_LE(calls_moved, options.max_moved_bytes);
      }
      if (!a.has_value()) continue;
      EXPECT_EQ(a->offset % alignment, 0u);
      EXPECT_FALSE(covered(a->offset, a->size)) << "new allocation overlaps a live one";
      const uint8_t stamp = next_stamp;
      next_stamp = static_cast<uint8_t>(next_stamp % 255 + 1);
      std::fill_n(bytes.begin() + static_cast<std::ptrdiff_t>(a->offset), a->size, stamp);
      live.push_back(Live{*a, alignment, stamp});
      used += a->size;
    } else {
      const size_t i = rng() % live.size();
      allocator.free(live[i].a);
      std::fill_n(bytes.begin() + static_cast<std::ptrdiff_t>(live[i].a.offset), live[i].a.size, 0);
      used -= live[i].a.size;
      live[i] = live.back();
      live.pop_back();
    }
    if (step % 16 == 0) check();
  }
  check();
  for (const Live& l : live) allocator.free(l.a);
  const AllocatorStats s = allocator.stats();
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.largest_free_bytes, capacity_bytes);
  return relocations;
}

template <typename Factory>
class AllocatorConformanceTest : public testing::Test {
 protected:
  using A = typename Factory::Allocator;
  static constexpr uint64_t kCapacity = uint64_t{4} << 20;

  static void ExpectEmpty(const A& a) {
    const AllocatorStats s = a.stats();
    EXPECT_EQ(s.capacity_bytes, kCapacity);
    EXPECT_EQ(s.used_bytes, 0u);
    EXPECT_EQ(s.free_bytes, kCapacity);
    EXPECT_EQ(s.largest_free_bytes, kCapacity);
    EXPECT_EQ(s.live_allocations, 0u);
    EXPECT_EQ(s.ExternalFragmentation(), 0.0);
  }

  // Stats must agree with the reference wherever the contract pins them.
  static void ExpectStatsAgree(const A& a, const IntervalSetReference& ref) {
    const AllocatorStats s = a.stats();
    EXPECT_EQ(s.capacity_bytes, kCapacity);
    EXPECT_EQ(s.used_bytes, ref.used_bytes());
    EXPECT_EQ(s.live_allocations, ref.live_count());
    EXPECT_LE(s.used_bytes + s.free_bytes, kCapacity);
    EXPECT_LE(s.largest_free_bytes, s.free_bytes);
    EXPECT_LE(s.largest_free_bytes, ref.LargestGap());
  }

  static uint64_t RandomAlignment(std::mt19937_64& rng) {
    static constexpr uint64_t kAlignments[] = {1, 1, 8, 64, 256, 4096, 65536};
    return kAlignments[std::uniform_int_distribution<size_t>(0, std::size(kAlignments) - 1)(rng)];
  }
};

TYPED_TEST_SUITE_P(AllocatorConformanceTest);

TYPED_TEST_P(AllocatorConformanceTest, StartsEmpty) {
  auto a = TypeParam::Make(TestFixture::kCapacity);
  TestFixture::ExpectEmpty(a);
}

TYPED_TEST_P(AllocatorConformanceTest, BadRequestsReturnNothingAndChangeNothing) {
  auto a = TypeParam::Make(TestFixture::kCapacity);
  std::mt19937_64 rng(7);
  const auto held = a.allocate(TypeParam::RandomSize(rng, TestFixture::kCapacity), 1);
  ASSERT_TRUE(held.has_value());
  const AllocatorStats before = a.stats();
  const uint64_t cap = TestFixture::kCapacity;
  for (const auto& [size, alignment] :
       std::vector<std::pair<uint64_t, uint64_t>>{{0, 1},
                                                  {0, 64},
                                                  {cap + 1, 1},
                                                  {~uint64_t{0}, 1},
                                                  {~uint64_t{0}, 4096},
                                                  {64, 0},
                                                  {64, 3},
                                                  {64, 6},
                                                  {64, 96},
                                                  {64, (uint64_t{1} << 63) + 1},
                                                  {64, ~uint64_t{0}}}) {
    EXPECT_FALSE(a.allocate(size, alignment).has_value()) << size << " / " << alignment;
  }
  EXPECT_EQ(a.stats(), before);
  a.free(*held);
  TestFixture::ExpectEmpty(a);
}

TYPED_TEST_P(AllocatorConformanceTest, RandomSequencesAgreeWithIntervalSetReference) {
  const uint64_t cap = TestFixture::kCapacity;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    auto a = TypeParam::Make(cap);
    IntervalSetReference ref(cap);
    std::vector<Allocation> live;
    std::mt19937_64 rng(seed);
    // Phases: grow toward exhaustion, then churn, then drain.
    for (int op = 0; op < 3000; ++op) {
      const double p_alloc = op < 1000 ? 0.8 : op < 2000 ? 0.5 : 0.2;
      if (live.empty() || std::uniform_real_distribution<double>(0, 1)(rng) < p_alloc) {
        const uint64_t size = TypeParam::RandomSize(rng, cap);
        const uint64_t alignment = TestFixture::RandomAlignment(rng);
        const uint64_t gap = ref.LargestGap();
        std::optional<Allocation> got = a.allocate(size, alignment);
        if (!got.has_value()) {
          EXPECT_FALSE(TypeParam::MustFit(size, alignment, gap))
              << "allocate(" << size << ", " << alignment << ") failed with a free gap of " << gap;
          continue;
        }
        ref.Insert(*got, size, alignment);
        if (testing::Test::HasFatalFailure()) return;
        live.push_back(*got);
      } else {
        const size_t i = std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng);
        a.free(live[i]);
        ref.Erase(live[i]);
        live[i] = live.back();
        live.pop_back();
      }
      if (op % 16 == 0) TestFixture::ExpectStatsAgree(a, ref);
    }
    TestFixture::ExpectStatsAgree(a, ref);
    for (const Allocation& x : live) a.free(x);
    TestFixture::ExpectEmpty(a);
  }
}

TYPED_TEST_P(AllocatorConformanceTest, AnEmptyAllocatorServesTheWholeRange) {
  if (!TypeParam::kServesWholeRange) GTEST_SKIP() << "the model does not serve sizes this large";
  auto a = TypeParam::Make(TestFixture::kCapacity);
  std::optional<Allocation> all = a.allocate(TestFixture::kCapacity, 1);
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->offset, 0u);
  EXPECT_FALSE(a.allocate(1, 1).has_value());
  a.free(*all);
  TestFixture::ExpectEmpty(a);
}

TYPED_TEST_P(AllocatorConformanceTest, ExhaustionReturnsNothingAndRecoversAfterAFree) {
  const uint64_t cap = TestFixture::kCapacity;
  std::mt19937_64 rng(11);
  for (int round = 0; round < 4; ++round) {
    auto a = TypeParam::Make(cap);
    IntervalSetReference ref(cap);
    const uint64_t size = TypeParam::RandomSize(rng, cap);
    std::vector<Allocation> live;
    while (std::optional<Allocation> got = a.allocate(size, 1)) {
      ref.Insert(*got, size, 1);
      live.push_back(*got);
      ASSERT_LE(live.size(), cap / size) << "more allocations than the range holds";
    }
    ASSERT_FALSE(live.empty()) << "an empty allocator refused size " << size;
    const AllocatorStats full = a.stats();
    for (int i = 0; i < 8; ++i) EXPECT_FALSE(a.allocate(size, 1).has_value());
    EXPECT_EQ(a.stats(), full);
    // Freeing one allocation makes room for exactly that request again.
    const size_t victim = std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng);
    a.free(live[victim]);
    ref.Erase(live[victim]);
    std::optional<Allocation> again = a.allocate(size, 1);
    ASSERT_TRUE(again.has_value()) << "size " << size << " after freeing one of that size";
    ref.Insert(*again, size, 1);
    live[victim] = *again;
    TestFixture::ExpectStatsAgree(a, ref);
    for (const Allocation& x : live) a.free(x);
    TestFixture::ExpectEmpty(a);
  }
}

TYPED_TEST_P(AllocatorConformanceTest, DoubleFreeDies) {
  if (!AssertEnabled(AssertLevel::kDebug)) GTEST_SKIP() << "debug assertions are off";
  testing::FLAGS_gtest_death_test_style = "threadsafe";
  auto a = TypeParam::Make(TestFixture::kCapacity);
  std::mt19937_64 rng(3);
  const uint64_t size = TypeParam::RandomSize(rng, TestFixture::kCapacity);
  const std::optional<Allocation> keep = a.allocate(size, 1);  // keeps pages alive
  const std::optional<Allocation> x = a.allocate(size, 1);
  ASSERT_TRUE(keep.has_value() && x.has_value());
  a.free(*x);
  EXPECT_DEATH(a.free(*x), "free");
  a.free(*keep);
  TestFixture::ExpectEmpty(a);
}

TYPED_TEST_P(AllocatorConformanceTest, FreeOfAnotherAllocatorsAllocationDies) {
  if (!AssertEnabled(AssertLevel::kDebug)) GTEST_SKIP() << "debug assertions are off";
  testing::FLAGS_gtest_death_test_style = "threadsafe";
  auto a = TypeParam::Make(TestFixture::kCapacity);
  auto b = TypeParam::Make(TestFixture::kCapacity);
  std::mt19937_64 rng(5);
  const uint64_t size = TypeParam::RandomSize(rng, TestFixture::kCapacity);
  const std::optional<Allocation> mine = a.allocate(size, 1);
  const std::optional<Allocation> theirs = b.allocate(size, 1);
  ASSERT_TRUE(mine.has_value() && theirs.has_value());
  EXPECT_DEATH(a.free(*theirs), "another allocator");
  a.free(*mine);
  b.free(*theirs);
  TestFixture::ExpectEmpty(a);
}

REGISTER_TYPED_TEST_SUITE_P(AllocatorConformanceTest, StartsEmpty,
                            BadRequestsReturnNothingAndChangeNothing,
                            RandomSequencesAgreeWithIntervalSetReference,
                            AnEmptyAllocatorServesTheWholeRange,
                            ExhaustionReturnsNothingAndRecoversAfterAFree, DoubleFreeDies,
                            FreeOfAnotherAllocatorsAllocationDies);

}  // namespace mooncake::alloc

#endif  // MOONCAKE_ALLOC_ALLOCATOR_TESTING_H_
