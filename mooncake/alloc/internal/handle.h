// The bit layout shared by every model's AllocationHandle, and owner tags.
//
//   bits 63..48  owner tag: unique per allocator object (0 = no allocator)
//   bits 47..32  generation of the metadata record, bumped on each reuse
//   bits 31..0   index of the metadata record (node, page)
//
// The owner tag lets a model (and a composition routing a free to one of its
// parts) recognise its own handles; the generation catches stale handles
// whose record has since been reused. Tags come from a process-wide counter
// and wrap after 65535 allocator objects, so foreign-handle detection is
// best effort past that, never a correctness requirement.
#ifndef MOONCAKE_ALLOC_INTERNAL_HANDLE_H_
#define MOONCAKE_ALLOC_INTERNAL_HANDLE_H_

#include <atomic>
#include <cstdint>

#include "mooncake/alloc/allocator.h"

namespace mooncake::alloc_internal {

inline uint16_t NewOwnerTag() {
  // Relaxed: the counter only needs distinct values, no ordering with
  // other memory.
  static std::atomic<uint32_t> next{1};
  uint16_t tag = 0;
  while (tag == 0) tag = static_cast<uint16_t>(next.fetch_add(1, std::memory_order_relaxed));
  return tag;
}

constexpr alloc::AllocationHandle PackHandle(uint16_t owner_tag, uint16_t generation,
                                             uint32_t index) {
  return alloc::AllocationHandle{(uint64_t{owner_tag} << 48) | (uint64_t{generation} << 32) |
                                 uint64_t{index}};
}

constexpr uint16_t HandleOwnerTag(alloc::AllocationHandle h) {
  return static_cast<uint16_t>(h.bits >> 48);
}

constexpr uint16_t HandleGeneration(alloc::AllocationHandle h) {
  return static_cast<uint16_t>(h.bits >> 32);
}

constexpr uint32_t HandleIndex(alloc::AllocationHandle h) { return static_cast<uint32_t>(h.bits); }

}  // namespace mooncake::alloc_internal

#endif  // MOONCAKE_ALLOC_INTERNAL_HANDLE_H_
