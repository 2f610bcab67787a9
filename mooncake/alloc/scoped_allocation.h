// ScopedAllocation<A>: an RAII owner of one Allocation that frees it on
// destruction, for callers who prefer that to calling free() themselves.
//
//   std::optional<ScopedAllocation<TlsfAllocator>> block =
//       AllocateScoped(tlsf, 4096, 64);
//   if (!block) return absl::ResourceExhaustedError("segment full");
//   Use(base + block->offset(), block->size());
//   // freed when `block` goes out of scope, unless release()d.
//
// Move-only; a moved-from or default-constructed object holds nothing.
// REQUIRES: the allocator outlives every ScopedAllocation drawn from it.
// Thread-safety: like any value; freeing goes through the allocator, so a
// shared allocator must itself be safe to share (LockedAllocator).
#ifndef MOONCAKE_ALLOC_SCOPED_ALLOCATION_H_
#define MOONCAKE_ALLOC_SCOPED_ALLOCATION_H_

#include <cstdint>
#include <optional>
#include <utility>

#include "mooncake/alloc/allocator.h"
#include "mooncake/base/assert.h"

namespace mooncake::alloc {

template <Allocator A>
class ScopedAllocation {
 public:
  ScopedAllocation() = default;
  // Takes ownership of `allocation`, which came from `*allocator`.
  ScopedAllocation(A* allocator, const Allocation& allocation)
      : allocator_(allocator), allocation_(allocation) {
    MC_ASSERT(allocator != nullptr, "ScopedAllocation needs its allocator");
  }

  ScopedAllocation(ScopedAllocation&& other) noexcept
      : allocator_(std::exchange(other.allocator_, nullptr)), allocation_(other.allocation_) {}
  ScopedAllocation& operator=(ScopedAllocation&& other) noexcept {
    if (this != &other) {
      reset();
      allocator_ = std::exchange(other.allocator_, nullptr);
      allocation_ = other.allocation_;
    }
    return *this;
  }
  ScopedAllocation(const ScopedAllocation&) = delete;
  ScopedAllocation& operator=(const ScopedAllocation&) = delete;

  ~ScopedAllocation() { reset(); }

  // True while it owns an allocation.
  explicit operator bool() const { return allocator_ != nullptr; }

  // REQUIRES: *this owns an allocation.
  const Allocation& get() const {
    MC_DASSERT(allocator_ != nullptr, "ScopedAllocation is empty");
    return allocation_;
  }
  uint64_t offset() const { return get().offset; }
  uint64_t size() const { return get().size; }

  // Gives up ownership without freeing. REQUIRES: *this owns an allocation.
  [[nodiscard]] Allocation release() {
    MC_ASSERT(allocator_ != nullptr, "release() on an empty ScopedAllocation");
    allocator_ = nullptr;
    return allocation_;
  }

  // Frees the allocation now, if any.
  void reset() {
    if (allocator_ != nullptr) std::exchange(allocator_, nullptr)->free(allocation_);
  }

 private:
  A* allocator_ = nullptr;
  Allocation allocation_;
};

// allocate() wrapped in a ScopedAllocation; nullopt exactly when allocate()
// returns nullopt.
template <Allocator A>
[[nodiscard]] std::optional<ScopedAllocation<A>> AllocateScoped(A& allocator, uint64_t size,
                                                                uint64_t alignment) {
  std::optional<Allocation> a = allocator.allocate(size, alignment);
  if (!a.has_value()) return std::nullopt;
  return ScopedAllocation<A>(&allocator, *a);
}

}  // namespace mooncake::alloc

#endif  // MOONCAKE_ALLOC_SCOPED_ALLOCATION_H_
