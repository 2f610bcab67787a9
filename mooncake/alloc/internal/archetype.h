// AllocatorArchetype: the least a type must declare to model Allocator.
//
// Declarations only: class templates parameterised on an Allocator (a slab
// over a backing allocator, a locked wrapper) static_assert their own
// conformance against it right after their definition, independent of any
// concrete model.
#ifndef MOONCAKE_ALLOC_INTERNAL_ARCHETYPE_H_
#define MOONCAKE_ALLOC_INTERNAL_ARCHETYPE_H_

#include <cstdint>
#include <optional>

#include "mooncake/alloc/allocator.h"

namespace mooncake::alloc_internal {

struct AllocatorArchetype {
  std::optional<alloc::Allocation> allocate(uint64_t size, uint64_t alignment);
  void free(const alloc::Allocation& allocation);
  alloc::AllocatorStats stats() const;
};

static_assert(alloc::Allocator<AllocatorArchetype>);

}  // namespace mooncake::alloc_internal

#endif  // MOONCAKE_ALLOC_INTERNAL_ARCHETYPE_H_
