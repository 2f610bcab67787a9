#include "mooncake/alloc/internal/first_fit_allocator.h"

#include <cstdint>
#include <random>

#include "gtest/gtest.h"
#include "mooncake/alloc/allocator_testing.h"

namespace mooncake::alloc {
namespace {

// The benchmarks' baseline must itself be a correct allocator.
struct FirstFitFactory {
  using Allocator = alloc_internal::FirstFitAllocator;
  static constexpr bool kServesWholeRange = true;
  static Allocator Make(uint64_t capacity_bytes) { return Allocator(capacity_bytes); }
  static uint64_t RandomSize(std::mt19937_64& rng, uint64_t capacity_bytes) {
    return std::uniform_int_distribution<uint64_t>(1, capacity_bytes / 64)(rng);
  }
  // First fit looks at every extent, so any gap holding size + padding fits.
  static bool MustFit(uint64_t size, uint64_t alignment, uint64_t gap) {
    return gap >= size + alignment - 1;
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(FirstFit, AllocatorConformanceTest, FirstFitFactory);

}  // namespace
}  // namespace mooncake::alloc
