// FileSpace: which extents of the SSD tier's files are free. One TlsfAllocator
// per file (4 KiB granularity), offsets counted from the end of the file's
// header block; new records go to the files in turn.
//
// Thread-safety: every call may run concurrently; one lock (mu_) over all the
// allocators, held only for the allocator call. A leaf in SsdTier's lock order
// (ssd_tier.h): it calls nothing that locks.
//
// Complexity: Allocate O(files) worst case (O(1) per allocator), Free O(1),
// Rebuild O(records of the file).
#ifndef MOONCAKE_TIER_INTERNAL_FILE_SPACE_H_
#define MOONCAKE_TIER_INTERNAL_FILE_SPACE_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/alloc/tlsf_allocator.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"
#include "mooncake/tier/internal/ssd_format.h"

namespace mooncake::tier_internal {

class FileSpace {
 public:
  FileSpace() = default;
  FileSpace(const FileSpace&) = delete;
  FileSpace& operator=(const FileSpace&) = delete;

  // (Re)creates file `file`'s allocator over `capacity_bytes` (the usable bytes, after the
  // header block) with the extents [offsets[k], +sizes[k]) taken, and returns them, in the
  // order given. REQUIRES: offsets ascending, extents disjoint, 4 KiB multiples.
  //
  // The Allocator concept has no "reserve this offset" call, so the layout is rebuilt
  // through a property of a fresh TLSF allocator: with a single free extent, allocate()
  // carves from its start. Gaps are allocated as fillers and freed at the end; every offset
  // is checked (Internal if one comes out elsewhere).
  absl::StatusOr<std::vector<alloc::Allocation>> Rebuild(uint32_t file, uint64_t capacity_bytes,
                                                         const std::vector<uint64_t>& offsets,
                                                         const std::vector<uint64_t>& sizes) {
    MC_ASSERT(offsets.size() == sizes.size(), "one size per offset");
    MutexLock lock(&mu_);
    if (files_.size() <= file) files_.resize(file + 1);
    files_[file].emplace(
        alloc::TlsfOptions{.capacity_bytes = capacity_bytes, .granularity_bytes = kBlockBytes});
    alloc::TlsfAllocator& a = *files_[file];
    std::vector<alloc::Allocation> extents, fillers;
    absl::Status status;
    auto take = [&](uint64_t at, uint64_t size, std::vector<alloc::Allocation>& into) {
      std::optional<alloc::Allocation> got = a.allocate(size, kBlockBytes);
      if (got && got->offset == at) {
        into.push_back(*got);
        return true;
      }
      status = absl::InternalError(absl::StrCat("SsdTier recovery: allocator could not reserve [",
                                                at, ", +", size, ") of file ", file));
      return false;
    };
    uint64_t cursor = 0;
    for (size_t k = 0; k < offsets.size(); ++k) {
      if (offsets[k] > cursor && !take(cursor, offsets[k] - cursor, fillers)) return status;
      if (!take(offsets[k], sizes[k], extents)) return status;
      cursor = offsets[k] + sizes[k];
    }
    for (const alloc::Allocation& f : fillers) a.free(f);
    return extents;
  }

  // A free extent of `bytes` in some file (the files in turn), or nullopt when none has one.
  std::optional<std::pair<uint32_t, alloc::Allocation>> Allocate(uint64_t bytes) {
    MutexLock lock(&mu_);
    const uint32_t n = static_cast<uint32_t>(files_.size());
    MC_ASSERT(n > 0, "FileSpace::Allocate before Rebuild");
    // Relaxed: only spreads records over the files; nothing is published through it.
    const uint32_t start = next_file_.fetch_add(1, std::memory_order_relaxed) % n;
    for (uint32_t k = 0; k < n; ++k) {
      const uint32_t f = (start + k) % n;
      if (std::optional<alloc::Allocation> a = files_[f]->allocate(bytes, kBlockBytes)) {
        return std::make_pair(f, *a);
      }
    }
    return std::nullopt;
  }
  // A free extent of `bytes` in file `file` (the device probe's scratch space).
  std::optional<alloc::Allocation> AllocateIn(uint32_t file, uint64_t bytes) {
    MutexLock lock(&mu_);
    MC_ASSERT(file < files_.size(), "file index");
    return files_[file]->allocate(bytes, kBlockBytes);
  }
  void Free(uint32_t file, const alloc::Allocation& extent) {
    MutexLock lock(&mu_);
    MC_ASSERT(file < files_.size(), "file index");
    files_[file]->free(extent);
  }
  uint64_t LargestFreeBytes(uint32_t file) const {
    MutexLock lock(&mu_);
    MC_ASSERT(file < files_.size(), "file index");
    return files_[file]->stats().largest_free_bytes;
  }

 private:
  std::atomic<uint32_t> next_file_{0};
  mutable Mutex mu_;
  std::vector<std::optional<alloc::TlsfAllocator>> files_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::tier_internal

#endif  // MOONCAKE_TIER_INTERNAL_FILE_SPACE_H_
