// FirstFitAllocator: the plain baseline every benchmark measures in the same
// run. An address-ordered map of free extents; allocate() walks it from the
// start and takes the first extent that fits (O(free extents)); free()
// re-inserts the extent and merges it with its neighbours (O(log n)).
//
// It models Allocator and passes the conformance kit, so the figures it
// produces are those of a correct allocator. Test and benchmark use only.
#ifndef MOONCAKE_ALLOC_INTERNAL_FIRST_FIT_ALLOCATOR_H_
#define MOONCAKE_ALLOC_INTERNAL_FIRST_FIT_ALLOCATOR_H_

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>

#include "mooncake/alloc/allocator.h"
#include "mooncake/alloc/internal/handle.h"
#include "mooncake/base/assert.h"

namespace mooncake::alloc_internal {

class FirstFitAllocator {
 public:
  explicit FirstFitAllocator(uint64_t capacity_bytes)
      : capacity_(capacity_bytes), owner_tag_(NewOwnerTag()) {
    MC_ASSERT(capacity_bytes > 0 && capacity_bytes <= (uint64_t{1} << 62), "bad capacity");
    free_[0] = capacity_;
  }

  FirstFitAllocator(FirstFitAllocator&&) = default;
  FirstFitAllocator& operator=(FirstFitAllocator&&) = default;

  [[nodiscard]] std::optional<alloc::Allocation> allocate(uint64_t size, uint64_t alignment) {
    if (size == 0 || size > capacity_ || !alloc::IsValidAlignment(alignment)) return std::nullopt;
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      const uint64_t start = it->first, length = it->second;
      // start < 2^62 and mask < 2^63, so the sum cannot overflow.
      const uint64_t mask = alignment - 1;
      const uint64_t aligned = (start + mask) & ~mask;
      if (aligned - start > length || length - (aligned - start) < size) continue;
      free_.erase(it);
      if (aligned > start) free_[start] = aligned - start;
      if (aligned + size < start + length) free_[aligned + size] = start + length - aligned - size;
      used_ += size;
      ++live_;
      return alloc::Allocation{aligned, size, PackHandle(owner_tag_, 0, 1)};
    }
    return std::nullopt;
  }

  void free(const alloc::Allocation& allocation) {
    MC_ASSERT(HandleOwnerTag(allocation.handle) == owner_tag_,
              "FirstFitAllocator::free: the allocation belongs to another allocator");
    uint64_t start = allocation.offset, end = allocation.offset + allocation.size;
    MC_ASSERT(allocation.size > 0 && end <= capacity_, "FirstFitAllocator::free: bad extent");
    auto next = free_.lower_bound(start);
    MC_ASSERT(next == free_.end() || next->first >= end, "FirstFitAllocator::free: double free");
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      MC_ASSERT(prev->first + prev->second <= start, "FirstFitAllocator::free: double free");
      if (prev->first + prev->second == start) {
        start = prev->first;
        free_.erase(prev);
      }
    }
    if (next != free_.end() && next->first == end) {
      end += next->second;
      free_.erase(next);
    }
    free_[start] = end - start;
    used_ -= allocation.size;
    --live_;
  }

  alloc::AllocatorStats stats() const {
    uint64_t largest = 0;
    for (const auto& [start, length] : free_) largest = std::max(largest, length);
    return alloc::AllocatorStats{.capacity_bytes = capacity_,
                                 .used_bytes = used_,
                                 .free_bytes = capacity_ - used_,
                                 .largest_free_bytes = largest,
                                 .live_allocations = live_};
  }

 private:
  uint64_t capacity_;
  uint16_t owner_tag_;
  std::map<uint64_t, uint64_t> free_;  // start -> length, never adjacent
  uint64_t used_ = 0;
  uint64_t live_ = 0;
};

static_assert(alloc::Allocator<FirstFitAllocator>);

}  // namespace mooncake::alloc_internal

#endif  // MOONCAKE_ALLOC_INTERNAL_FIRST_FIT_ALLOCATOR_H_
