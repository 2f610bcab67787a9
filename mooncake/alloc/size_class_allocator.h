// SizeClassAllocator: a slab allocator for the few sizes a model's KV blocks
// take, carving pages on demand out of a backing Allocator.
//
// Each configured size class owns pages; a page is one backing allocation of
// n equal slots (n = page_bytes / slot, at least 1, halved down to 1 while the
// backing cannot supply a full page). A request is served by the smallest
// class that holds it and whose slots are aligned enough; larger requests and
// alignments no class provides get std::nullopt. When a page's last slot is
// freed the page goes straight back to the backing allocator, so freed
// memory is never stranded in one class, which is the weakness of
// CacheLib-style slab pools that keep pages per class forever.
//
// Slots come from the first page on the class's list of pages with free
// slots: fresh pages join the front (fill them first), pages that regain a
// slot join the back, so lightly used pages tend to drain and be returned.
//
// Complexity: allocate and free are O(1) plus at most log2(slots per page)+1
// backing calls when a page is created; O(number of classes) to pick a
// class (at most kMaxClasses). stats() is O(number of classes) plus one
// backing stats() call.
//
// Slot alignment: slot i of a page sits at page_offset + i * slot_bytes, so
// its alignment is min(page_alignment, lowest set bit of slot_bytes).
//
// stats() describes the backing's whole range: capacity and free bytes are
// the backing's, plus free slots of this allocator's pages; used bytes and
// live allocations count this allocator's slots only.
//
// Thread-safety: none (see allocator.h). The backing is owned and reached
// through backing(); a composition (KvAllocator) uses it for other sizes.
#ifndef MOONCAKE_ALLOC_SIZE_CLASS_ALLOCATOR_H_
#define MOONCAKE_ALLOC_SIZE_CLASS_ALLOCATOR_H_

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/alloc/allocator.h"
#include "mooncake/alloc/internal/archetype.h"
#include "mooncake/alloc/internal/handle.h"
#include "mooncake/base/assert.h"

namespace mooncake::alloc {

struct SizeClassOptions {
  // Slot sizes, distinct and > 0; at most SizeClassAllocator::kMaxClasses.
  std::vector<uint64_t> class_bytes;
  // Target page size; a page holds max(1, page_bytes / slot) slots. 0: auto,
  // capacity / 1024 clamped to [64 KiB, 4 MiB], so that the partly used
  // pages of each class strand about 0.1% of the range at most.
  uint64_t page_bytes = 0;
  // Power of two; pages are requested from the backing with this alignment.
  uint64_t page_alignment = 4096;
};

template <Allocator Backing>
class SizeClassAllocator {
 public:
  static constexpr size_t kMaxClasses = 32;
  static constexpr uint32_t kMaxSlotsPerPage = uint32_t{1} << 16;
  static constexpr uint64_t kAutoPageMinBytes = uint64_t{64} << 10;
  static constexpr uint64_t kAutoPageMaxBytes = uint64_t{4} << 20;

  static absl::Status ValidateOptions(const SizeClassOptions& options) {
    if (options.class_bytes.empty() || options.class_bytes.size() > kMaxClasses) {
      return absl::InvalidArgumentError(absl::StrCat("SizeClassOptions.class_bytes must list 1 to ",
                                                     kMaxClasses, " sizes, got ",
                                                     options.class_bytes.size()));
    }
    std::vector<uint64_t> sorted = options.class_bytes;
    std::sort(sorted.begin(), sorted.end());
    if (sorted.front() == 0 || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      return absl::InvalidArgumentError(
          "SizeClassOptions.class_bytes must be distinct and greater than zero");
    }
    if (!IsValidAlignment(options.page_alignment)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SizeClassOptions.page_alignment must be a power of two, got ", options.page_alignment));
    }
    return absl::OkStatus();
  }

  static absl::StatusOr<SizeClassAllocator> Create(Backing backing, SizeClassOptions options) {
    if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
    return SizeClassAllocator(std::move(backing), std::move(options));
  }

  // REQUIRES: ValidateOptions(options).ok() (use Create for untrusted input).
  SizeClassAllocator(Backing backing, SizeClassOptions options)
      : backing_(std::move(backing)),
        page_alignment_(options.page_alignment),
        owner_tag_(alloc_internal::NewOwnerTag()) {
    MC_ASSERT(ValidateOptions(options).ok(), "invalid SizeClassOptions; use Create");
    std::sort(options.class_bytes.begin(), options.class_bytes.end());
    const uint64_t page_bytes = options.page_bytes != 0
                                    ? options.page_bytes
                                    : std::clamp<uint64_t>(backing_.stats().capacity_bytes / 1024,
                                                           kAutoPageMinBytes, kAutoPageMaxBytes);
    for (const uint64_t slot : options.class_bytes) {
      const uint64_t slots = std::clamp<uint64_t>(page_bytes / slot, 1, kMaxSlotsPerPage);
      classes_.push_back(Class{.slot_bytes = slot,
                               .slot_alignment = std::min(page_alignment_, slot & (~slot + 1)),
                               .slots_per_page = static_cast<uint32_t>(slots)});
    }
  }

  SizeClassAllocator(SizeClassAllocator&&) = default;
  SizeClassAllocator& operator=(SizeClassAllocator&&) = default;
  SizeClassAllocator(const SizeClassAllocator&) = delete;
  SizeClassAllocator& operator=(const SizeClassAllocator&) = delete;

  ~SizeClassAllocator() {
    // Pages still held (live slots) go back so the backing is left consistent.
    for (Page& page : pages_) {
      if (page.in_use) backing_.free(page.extent);
    }
  }

  [[nodiscard]] std::optional<Allocation> allocate(uint64_t size, uint64_t alignment) {
    const std::optional<uint32_t> c = ClassFor(size, alignment);
    if (!c.has_value()) return std::nullopt;
    return AllocateInClass(*c, size);
  }

  void free(const Allocation& allocation) {
    const uint32_t index = alloc_internal::HandleIndex(allocation.handle);
    MC_ASSERT(alloc_internal::HandleOwnerTag(allocation.handle) == owner_tag_,
              "SizeClassAllocator::free: the allocation belongs to another allocator");
    MC_ASSERT(index < pages_.size(), "SizeClassAllocator::free: corrupt handle");
    Page& page = pages_[index];
    MC_ASSERT(page.in_use && page.generation == alloc_internal::HandleGeneration(allocation.handle),
              "SizeClassAllocator::free: double free or stale handle");
    Class& cls = classes_[page.class_index];
    const uint64_t relative = allocation.offset - page.extent.offset;
    MC_ASSERT(allocation.offset >= page.extent.offset && relative < page.extent.size &&
                  relative % cls.slot_bytes == 0,
              "SizeClassAllocator::free: offset is not a slot of the handle's page");
    MC_DASSERT(allocation.size <= cls.slot_bytes, "SizeClassAllocator::free: size was modified");
    const uint32_t slot = static_cast<uint32_t>(relative / cls.slot_bytes);
    uint64_t& word = page.live_bits[slot / 64];
    const uint64_t bit = uint64_t{1} << (slot % 64);
    MC_ASSERT((word & bit) != 0, "SizeClassAllocator::free: double free");
    word &= ~bit;
    page.next_free_slot[slot] = page.free_head;
    page.free_head = slot;
    --page.live;
    used_bytes_ -= allocation.size;
    free_slot_bytes_ += cls.slot_bytes;
    --live_;
    if (page.live == 0) {
      ReleasePage(index);
    } else if (!page.in_partial) {
      LinkPartial(index, /*front=*/false);
    }
  }

  AllocatorStats stats() const {
    const AllocatorStats backing = backing_.stats();
    uint64_t largest = backing.largest_free_bytes;
    for (const Class& cls : classes_) {
      if (cls.partial_head != kNone) largest = std::max(largest, cls.slot_bytes);
    }
    return AllocatorStats{.capacity_bytes = backing.capacity_bytes,
                          .used_bytes = used_bytes_,
                          .free_bytes = backing.free_bytes + free_slot_bytes_,
                          .largest_free_bytes = largest,
                          .live_allocations = live_};
  }

  // The class that serves (size, alignment): the smallest slot >= size whose
  // slots are aligned to `alignment`; nullopt if none (or bad arguments).
  std::optional<uint32_t> ClassFor(uint64_t size, uint64_t alignment) const {
    if (size == 0 || !IsValidAlignment(alignment)) return std::nullopt;
    for (uint32_t c = 0; c < classes_.size(); ++c) {
      if (classes_[c].slot_bytes >= size && classes_[c].slot_alignment >= alignment) return c;
    }
    return std::nullopt;
  }

  // REQUIRES: c < class_count(), 0 < size <= class_bytes(c).
  [[nodiscard]] std::optional<Allocation> AllocateInClass(uint32_t c, uint64_t size) {
    MC_ASSERT(c < classes_.size() && size > 0 && size <= classes_[c].slot_bytes,
              "AllocateInClass: size does not fit the class");
    uint32_t index = classes_[c].partial_head;
    if (index == kNone) {
      index = NewPage(c);
      if (index == kNone) return std::nullopt;
    }
    Page& page = pages_[index];
    const Class& cls = classes_[c];
    uint32_t slot;
    if (page.free_head != kNone) {
      slot = page.free_head;
      page.free_head = page.next_free_slot[slot];
    } else {
      MC_DASSERT(page.bump < page.slot_count, "partial page without a free slot");
      slot = page.bump++;
    }
    page.live_bits[slot / 64] |= uint64_t{1} << (slot % 64);
    if (++page.live == page.slot_count) UnlinkPartial(index);
    used_bytes_ += size;
    free_slot_bytes_ -= cls.slot_bytes;
    ++live_;
    return Allocation{.offset = page.extent.offset + slot * cls.slot_bytes,
                      .size = size,
                      .handle = alloc_internal::PackHandle(owner_tag_, page.generation, index)};
  }

  // Relocation support (KvAllocator::AllocateRelocating): when the backing
  // moves the extent `from_handle` names and it is one of this allocator's
  // pages, the page now lives at `to` (offset and backing handle), and
  // `relocate(const Relocation&)` is called for each live slot (its handle is
  // unchanged, its offset shifts with the page). Returns false, calling
  // nothing, when the extent is not a page of this allocator. O(pages).
  template <typename Relocate>
  bool MovePage(AllocationHandle from_handle, uint64_t to_offset, AllocationHandle to_handle,
                Relocate& relocate) {
    for (uint32_t index = 0; index < pages_.size(); ++index) {
      Page& page = pages_[index];
      if (!page.in_use || page.extent.handle != from_handle) continue;
      const uint64_t from_offset = page.extent.offset;
      const uint64_t slot_bytes = classes_[page.class_index].slot_bytes;
      page.extent.offset = to_offset;
      page.extent.handle = to_handle;
      const AllocationHandle slot_handle =
          alloc_internal::PackHandle(owner_tag_, page.generation, index);
      for (uint32_t slot = 0; slot < page.slot_count; ++slot) {
        if ((page.live_bits[slot / 64] >> (slot % 64) & 1) == 0) continue;
        relocate(Relocation{.from_offset = from_offset + slot * slot_bytes,
                            .to_offset = to_offset + slot * slot_bytes,
                            .handle = slot_handle});
      }
      return true;
    }
    return false;
  }

  // Whether every live slot of the page the backing extent `handle` names
  // passes `movable(offset, slot handle)`; nullopt when the extent is not a
  // page of this allocator. O(pages + slots of the page).
  template <typename Movable>
  std::optional<bool> PageMovable(AllocationHandle handle, Movable& movable) const {
    for (uint32_t index = 0; index < pages_.size(); ++index) {
      const Page& page = pages_[index];
      if (!page.in_use || page.extent.handle != handle) continue;
      const uint64_t slot_bytes = classes_[page.class_index].slot_bytes;
      const AllocationHandle slot_handle =
          alloc_internal::PackHandle(owner_tag_, page.generation, index);
      for (uint32_t slot = 0; slot < page.slot_count; ++slot) {
        if ((page.live_bits[slot / 64] >> (slot % 64) & 1) == 0) continue;
        if (!movable(page.extent.offset + slot * slot_bytes, slot_handle)) return false;
      }
      return true;
    }
    return std::nullopt;
  }

  size_t class_count() const { return classes_.size(); }
  uint64_t class_bytes(uint32_t c) const { return classes_[c].slot_bytes; }
  uint32_t slots_per_page(uint32_t c) const { return classes_[c].slots_per_page; }
  // Pages currently held from the backing.
  size_t page_count() const { return pages_.size() - spare_pages_; }
  // True when the allocation's handle was issued by this object.
  bool Owns(const Allocation& allocation) const {
    return alloc_internal::HandleOwnerTag(allocation.handle) == owner_tag_;
  }
  Backing& backing() { return backing_; }
  const Backing& backing() const { return backing_; }

  // O(pages + slots) walk of every invariant; aborts on the first broken one.
  void CheckInvariants() const {
    uint64_t live = 0, free_slot_bytes = 0;
    for (uint32_t i = 0; i < pages_.size(); ++i) {
      const Page& page = pages_[i];
      if (!page.in_use) continue;
      const Class& cls = classes_[page.class_index];
      uint32_t bits = 0;
      for (const uint64_t w : page.live_bits) bits += static_cast<uint32_t>(std::popcount(w));
      MC_ASSERT(bits == page.live && page.live > 0, "page live count wrong (or empty page kept)");
      MC_ASSERT(page.in_partial == (page.live < page.slot_count), "partial list membership wrong");
      MC_ASSERT(page.extent.size == uint64_t{page.slot_count} * cls.slot_bytes, "page size wrong");
      live += page.live;
      free_slot_bytes += uint64_t{page.slot_count - page.live} * cls.slot_bytes;
    }
    MC_ASSERT(live == live_ && free_slot_bytes == free_slot_bytes_, "counters disagree");
  }

 private:
  static constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

  struct Class {
    uint64_t slot_bytes = 0;
    uint64_t slot_alignment = 0;
    uint32_t slots_per_page = 0;
    uint32_t partial_head = kNone;  // pages with a free slot
    uint32_t partial_tail = kNone;
  };

  struct Page {
    Allocation extent;  // from the backing
    uint32_t class_index = 0;
    uint32_t slot_count = 0;
    uint32_t live = 0;
    uint32_t bump = 0;           // slots >= bump were never handed out
    uint32_t free_head = kNone;  // returned slots, LIFO
    uint32_t prev = kNone;       // partial list; `next` also links spare records
    uint32_t next = kNone;
    uint16_t generation = 0;
    bool in_use = false;
    bool in_partial = false;
    std::vector<uint32_t> next_free_slot;
    std::vector<uint64_t> live_bits;
  };

  // Gets a page for class c from the backing, shrinking it while the backing
  // is too full for the configured size; kNone when not even one slot fits.
  uint32_t NewPage(uint32_t c) {
    const Class& cls = classes_[c];
    std::optional<Allocation> extent;
    uint32_t slots = cls.slots_per_page;
    for (; slots > 0 && !extent.has_value(); slots /= 2) {
      extent = backing_.allocate(uint64_t{slots} * cls.slot_bytes, page_alignment_);
      if (extent.has_value()) break;
    }
    if (!extent.has_value()) return kNone;
    uint32_t index = spare_head_;
    if (index != kNone) {
      spare_head_ = pages_[index].next;
      --spare_pages_;
    } else {
      MC_ASSERT(pages_.size() < kNone, "page record index space exhausted");
      index = static_cast<uint32_t>(pages_.size());
      pages_.emplace_back();
    }
    Page& page = pages_[index];
    page.extent = *extent;
    page.class_index = c;
    page.slot_count = slots;
    page.live = 0;
    page.bump = 0;
    page.free_head = kNone;
    ++page.generation;
    page.in_use = true;
    page.next_free_slot.resize(slots);
    page.live_bits.assign((slots + 63) / 64, 0);
    free_slot_bytes_ += extent->size;
    LinkPartial(index, /*front=*/true);
    return index;
  }

  void ReleasePage(uint32_t index) {
    Page& page = pages_[index];
    MC_DASSERT(page.live == 0, "releasing a page with live slots");
    if (page.in_partial) UnlinkPartial(index);
    free_slot_bytes_ -= page.extent.size;
    backing_.free(page.extent);
    page.in_use = false;
    page.next = spare_head_;
    spare_head_ = index;
    ++spare_pages_;
  }

  void LinkPartial(uint32_t index, bool front) {
    Page& page = pages_[index];
    Class& cls = classes_[page.class_index];
    MC_DASSERT(!page.in_partial, "page already on the partial list");
    page.in_partial = true;
    if (front) {
      page.prev = kNone;
      page.next = cls.partial_head;
      (cls.partial_head != kNone ? pages_[cls.partial_head].prev : cls.partial_tail) = index;
      cls.partial_head = index;
    } else {
      page.next = kNone;
      page.prev = cls.partial_tail;
      (cls.partial_tail != kNone ? pages_[cls.partial_tail].next : cls.partial_head) = index;
      cls.partial_tail = index;
    }
  }

  void UnlinkPartial(uint32_t index) {
    Page& page = pages_[index];
    Class& cls = classes_[page.class_index];
    MC_DASSERT(page.in_partial, "page not on the partial list");
    (page.prev != kNone ? pages_[page.prev].next : cls.partial_head) = page.next;
    (page.next != kNone ? pages_[page.next].prev : cls.partial_tail) = page.prev;
    page.in_partial = false;
  }

  Backing backing_;
  uint64_t page_alignment_;
  uint16_t owner_tag_;
  std::vector<Class> classes_;
  std::vector<Page> pages_;
  uint32_t spare_head_ = kNone;
  size_t spare_pages_ = 0;
  uint64_t used_bytes_ = 0;
  uint64_t free_slot_bytes_ = 0;
  uint64_t live_ = 0;
};

static_assert(Allocator<SizeClassAllocator<alloc_internal::AllocatorArchetype>>);

}  // namespace mooncake::alloc

#endif  // MOONCAKE_ALLOC_SIZE_CLASS_ALLOCATOR_H_
