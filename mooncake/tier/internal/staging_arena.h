// StagingArena: one I/O lane's bounce memory. Staging for a record (a write's
// header block and payload, a read that cannot land in the caller's buffer)
// is a 4 KiB-aligned slice of the arena, carved by a TlsfAllocator; when the
// arena is full, or has no memory (bytes < 4 KiB), it comes from the heap.
// The arena is one block, so an io_uring can register it as a fixed buffer
// (IoLane::RegisterBuffer): a slice is then `in_arena()`.
//
// Thread-safety: Acquire and Release may run concurrently (writers acquire,
// reapers release); one lock (mu_) over the allocator, held for its call only.
// A leaf in SsdTier's lock order (ssd_tier.h). Init runs before any of them.
//
// Complexity: O(1) (plus the heap's allocation on fallback).
#ifndef MOONCAKE_TIER_INTERNAL_STAGING_ARENA_H_
#define MOONCAKE_TIER_INTERNAL_STAGING_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "mooncake/alloc/tlsf_allocator.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"
#include "mooncake/tier/internal/ssd_format.h"
#include "mooncake/tier/internal/uring.h"

namespace mooncake::tier_internal {

// Aligned staging memory: a slice of a lane's arena or a heap block.
struct Staging {
  std::byte* data = nullptr;
  std::optional<alloc::Allocation> slot;  // set when the memory is the arena's
  AlignedBytes heap;
  bool in_arena() const { return slot.has_value(); }
};

class StagingArena {
 public:
  StagingArena() = default;
  StagingArena(const StagingArena&) = delete;
  StagingArena& operator=(const StagingArena&) = delete;

  // Gives the arena `bytes` of memory (rounded down to 4 KiB; under 4 KiB: none, every
  // staging comes from the heap). REQUIRES: called once, before any Acquire.
  void Init(uint64_t bytes) {
    MC_ASSERT(bytes_ == 0, "StagingArena::Init twice");
    if (bytes < kBlockBytes) return;
    bytes_ = bytes / kBlockBytes * kBlockBytes;
    memory_ = AllocateAligned(bytes_, kBlockBytes);
    MutexLock lock(&mu_);
    alloc_.emplace(alloc::TlsfOptions{.capacity_bytes = bytes_, .granularity_bytes = kBlockBytes});
  }
  std::byte* base() const { return memory_.get(); }  // null without memory
  uint64_t bytes() const { return bytes_; }

  // At least `bytes` of 4 KiB-aligned memory (contents undefined).
  Staging Acquire(uint64_t bytes) {
    Staging s;
    if (bytes_ != 0) {
      MutexLock lock(&mu_);
      s.slot = alloc_->allocate(RoundUpToBlock(bytes), kBlockBytes);
    }
    if (s.slot) {
      s.data = memory_.get() + s.slot->offset;
    } else {
      s.heap = AllocateAligned(bytes, kBlockBytes, /*zero=*/false);
      s.data = s.heap.get();
    }
    MC_DASSERT(reinterpret_cast<uintptr_t>(s.data) % kBlockBytes == 0, "aligned staging");
    return s;
  }
  // Gives `staging` back (empty afterwards; an empty one is a no-op).
  void Release(Staging& staging) {
    if (staging.slot) {
      MutexLock lock(&mu_);
      alloc_->free(*staging.slot);
      staging.slot.reset();
    }
    staging.heap.reset();
    staging.data = nullptr;
  }
  // Bytes of the arena in use (tests, diagnostics).
  uint64_t used_bytes() const {
    if (bytes_ == 0) return 0;
    MutexLock lock(&mu_);
    return alloc_->stats().used_bytes;
  }

 private:
  AlignedBytes memory_;  // fixed after Init
  uint64_t bytes_ = 0;   // fixed after Init
  mutable Mutex mu_;
  std::optional<alloc::TlsfAllocator> alloc_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::tier_internal

#endif  // MOONCAKE_TIER_INTERNAL_STAGING_ARENA_H_
