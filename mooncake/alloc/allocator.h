// The Allocator concept: hands out [offset, offset + size) ranges of an
// abstract address range [0, capacity).
//
// An allocator never reads or writes the bytes it manages and keeps all of
// its metadata outside the range, so one model can carve host DRAM, a memfd
// shared segment, GPU memory or an RDMA-registered buffer alike. Offsets are
// relative to the start of the range; the caller adds its base address.
//
// Semantics of the three calls every model provides:
//
//   std::optional<Allocation> allocate(uint64_t size, uint64_t alignment)
//     Reserves `size` bytes starting at an offset that is a multiple of
//     `alignment`. Returns std::nullopt, with no side effect and no crash, when
//     the request cannot be served: size == 0, size > capacity, alignment not a
//     power of two (0 included), a size the model does not serve, or no free
//     extent fits (exhaustion or fragmentation). Allocation::size is the
//     requested size; a model may reserve more internally (rounding, slab
//     slack), which shows up in stats() as neither used nor free.
//
//   void free(const Allocation& allocation)
//     REQUIRES: `allocation` was returned by allocate() on this very object
//     (copied unchanged) and has not been freed since. Violations (double
//     free, a handle from another allocator, an edited offset) are programmer
//     errors caught by debug assertions (MC_DASSERT); in -c opt builds they
//     are undefined behaviour of the allocator's metadata, never of the
//     managed bytes, which the allocator does not touch.
//
//   AllocatorStats stats() const
//     A snapshot; see AllocatorStats for each figure.
//
// Thread-safety: models are single-threaded cores (no internal locking, like
// std containers): concurrent calls on one object need external
// synchronisation, for example LockedAllocator<A> (locked_allocator.h).
// const calls may run concurrently with each other.
//
// Complexity: each model states its own; the TLSF model is O(1) for
// allocate and free.
#ifndef MOONCAKE_ALLOC_ALLOCATOR_H_
#define MOONCAKE_ALLOC_ALLOCATOR_H_

#include <concepts>
#include <cstdint>
#include <optional>

namespace mooncake::alloc {

// Opaque to callers: each model packs what it needs to find the allocation's
// metadata in O(1) (see internal/handle.h). The zero value is never issued.
struct AllocationHandle {
  uint64_t bits = 0;

  friend bool operator==(AllocationHandle, AllocationHandle) = default;
};

// One live allocation: the range [offset, offset + size) of the managed range.
struct Allocation {
  uint64_t offset = 0;
  uint64_t size = 0;  // as requested, > 0
  AllocationHandle handle;

  friend bool operator==(const Allocation&, const Allocation&) = default;
};

// A snapshot of an allocator. Invariant: used_bytes + free_bytes <=
// capacity_bytes; the difference is reserved but unusable overhead (size
// rounding to a granule or a larger size class, tails of slab pages).
struct AllocatorStats {
  uint64_t capacity_bytes = 0;
  // Sum of Allocation::size over live allocations.
  uint64_t used_bytes = 0;
  // Bytes not reserved by any live allocation. For slab models this includes
  // free slots of partly used pages: free, but only for that slot size.
  uint64_t free_bytes = 0;
  // The largest contiguous free extent: an upper bound on the largest
  // allocate() that can succeed with alignment 1.
  uint64_t largest_free_bytes = 0;
  uint64_t live_allocations = 0;

  // 1 - largest_free / free: 0 when all free bytes form one extent (or none
  // are free), close to 1 when free space is shattered into small pieces.
  double ExternalFragmentation() const {
    if (free_bytes == 0) return 0.0;
    return 1.0 - static_cast<double>(largest_free_bytes) / static_cast<double>(free_bytes);
  }

  friend bool operator==(const AllocatorStats&, const AllocatorStats&) = default;
};

// Relocation (compaction by the owner of the bytes). An allocator never
// touches the bytes it manages, so it cannot move an allocation itself; a model
// that supports relocation (TlsfAllocator, KvAllocator: AllocateRelocating)
// picks the allocations to move and a new place for each, and asks the owner to
// move them through a callback, one Relocation per allocation:
//   copy the allocation's bytes from from_offset to to_offset (the two ranges
//   never overlap), then set the Allocation's offset to to_offset and its handle
//   to `handle`; its size is unchanged.
// The callback runs inside the allocator call and must not call the allocator.
struct Relocation {
  uint64_t from_offset = 0;
  uint64_t to_offset = 0;
  AllocationHandle handle;
};

struct RelocationOptions {
  // Most bytes one call may move (sum of the moved extents); 0 means twice the
  // request. The cost of a relocating allocation is this copy.
  uint64_t max_moved_bytes = 0;
  // A moved allocation is placed at an offset aligned to min(max_alignment,
  // the largest power of two dividing its old offset), so an allocation keeps
  // any alignment up to this one it was given. A power of two.
  uint64_t max_alignment = 4096;
  // Candidate ranges tried (cheapest first) before giving up.
  uint32_t max_windows = 32;
};

// Requirements, one per line.
template <typename A>
concept Allocator = requires(A& a, const A& ca, uint64_t size, uint64_t alignment,
                             const Allocation& allocation) {
  // Never throws, never crashes on bad sizes or alignments (returns nullopt).
  { a.allocate(size, alignment) } -> std::same_as<std::optional<Allocation>>;
  // REQUIRES: allocation is live and came from this object.
  { a.free(allocation) } -> std::same_as<void>;
  // A snapshot; cheap (each model states its cost), callable through const.
  { ca.stats() } -> std::same_as<AllocatorStats>;
};

// True when `x` is a power of two (and not zero): the alignments allocate()
// accepts.
constexpr bool IsValidAlignment(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace mooncake::alloc

#endif  // MOONCAKE_ALLOC_ALLOCATOR_H_
