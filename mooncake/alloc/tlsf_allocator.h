// TlsfAllocator: a two-level segregated fit allocator (Masmano et al., "TLSF:
// a new dynamic memory allocator for real-time systems", ECRTS 2004) over an
// abstract range, with all metadata outside the range.
//
// Free extents sit in size bins shaped like floating-point numbers: the first
// level is the position of the size's top bit (the exponent), the second
// splits each power-of-two range into 32 equal steps (5 bits of mantissa), so
// a bin's sizes differ by at most 1/32. Two bitmaps (one word for the first
// level, one 32-bit word per first-level bin) find the smallest non-empty bin
// at or above a size with two count-trailing-zeros instructions.
//
// allocate(size, alignment), good fit:
//   1. the head of the request's own bin, if it is large enough;
//   2. else the head of the first non-empty bin whose every block is large
//      enough (size + worst-case alignment padding, rounded up to a bin);
//   3. else, close to exhaustion, at most kFitScanMax blocks of the bins in
//      between, so that a request fails only when nothing close fits.
// The chosen extent is split: alignment padding and the remainder go back to
// the bins as free extents. allocate() cuts from the extent's low end (with a
// single free extent: the lowest aligned offset, which SsdTier's recovery
// relies on); Allocate(size, alignment, CarveEnd::kHigh) cuts from its high
// end, for compositions that keep two families of sizes apart. free() merges the extent with
// its free physical neighbours (found through an address-ordered neighbour
// list) before binning it, so no two free extents are ever adjacent.
//
// Speed: record 0 is a sentinel (no bounds tests on links or neighbours),
// each free record caches its bin, and the cold paths (record growth, step
// 3, front padding) are out of line; see docs/alloc.md for the figures.
//
// Complexity: allocate and free are O(1): bin lookups are bit scans, step 3
// is bounded by a constant, and metadata records come from a free list (the
// record array grows geometrically; reserve records up front with
// TlsfOptions::reserve_records for a strict bound). stats() is O(k), k = the
// number of free extents in the highest non-empty bin.
//
// Every offset and every reserved size is a multiple of
// TlsfOptions::granularity_bytes; an allocation reserves its size rounded up
// to it. Alignments up to the granularity cost nothing.
//
// Thread-safety: none (see allocator.h); wrap in LockedAllocator to share.
// Invariants (checked by CheckInvariants()): the records in physical order
// tile [0, capacity) exactly; no two free records are adjacent; each free
// record is in the bin of its size and each non-empty bin has its bitmap bits
// set.
#ifndef MOONCAKE_ALLOC_TLSF_ALLOCATOR_H_
#define MOONCAKE_ALLOC_TLSF_ALLOCATOR_H_

#include <algorithm>
#include <array>
#include <bit>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/alloc/allocator.h"
#include "mooncake/alloc/internal/handle.h"
#include "mooncake/base/assert.h"

namespace mooncake::alloc {

// Which end of a free extent an allocation is cut from (TlsfAllocator::Allocate).
enum class CarveEnd : uint8_t { kLow, kHigh };

// One extent TlsfAllocator::AllocateRelocating moves (see Relocation in
// allocator.h): the record's whole reserved extent, with the handle it had
// (no longer valid once the callback returns) and the one it has now.
struct RecordMove {
  uint64_t from_offset = 0;
  uint64_t to_offset = 0;
  uint64_t bytes = 0;  // reserved bytes: the size rounded up to the granule
  AllocationHandle from_handle;
  AllocationHandle to_handle;
};

struct TlsfOptions {
  // Size of the managed range; a multiple of granularity_bytes, <= 2^62.
  uint64_t capacity_bytes = 0;
  // Power of two; offsets and reserved sizes are multiples of it.
  uint64_t granularity_bytes = 64;
  // Metadata records to preallocate (about two per live allocation).
  uint32_t reserve_records = 0;
};

class TlsfAllocator {
 public:
  static constexpr uint64_t kMaxCapacityBytes = uint64_t{1} << 62;
  // Blocks examined in step 3 of allocate(); bounds its worst case.
  static constexpr uint32_t kFitScanMax = 64;

  static absl::Status ValidateOptions(const TlsfOptions& options) {
    if (options.granularity_bytes == 0 ||
        (options.granularity_bytes & (options.granularity_bytes - 1)) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("TlsfOptions.granularity_bytes must be a ",
                                                     "power of two, got ",
                                                     options.granularity_bytes));
    }
    if (options.capacity_bytes == 0 || options.capacity_bytes > kMaxCapacityBytes ||
        options.capacity_bytes % options.granularity_bytes != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TlsfOptions.capacity_bytes must be a positive multiple of ", "granularity_bytes (",
          options.granularity_bytes, ") and at most 2^62, got ", options.capacity_bytes));
    }
    return absl::OkStatus();
  }

  static absl::StatusOr<TlsfAllocator> Create(const TlsfOptions& options) {
    if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
    return TlsfAllocator(options);
  }

  // REQUIRES: ValidateOptions(options).ok() (use Create for untrusted input).
  explicit TlsfAllocator(const TlsfOptions& options)
      : capacity_(options.capacity_bytes),
        granule_(options.granularity_bytes),
        alignment_cap_(std::bit_ceil(options.capacity_bytes)),
        owner_tag_(alloc_internal::NewOwnerTag()) {
    MC_ASSERT(ValidateOptions(options).ok(), "invalid TlsfOptions; use TlsfAllocator::Create");
    heads_.fill(kNone);
    sl_bitmap_.fill(0);
    nodes_.reserve(std::max<uint32_t>(options.reserve_records, 1) + 1);
    nodes_.push_back(Node{.state = State::kSentinel});
    const uint32_t first = NewRecord();
    nodes_[first] = Node{.offset = 0, .size = capacity_};
    nodes_[kNone].next_phys = first;
    nodes_[kNone].prev_phys = first;
    InsertFree(first);
  }

  TlsfAllocator(TlsfAllocator&&) = default;
  TlsfAllocator& operator=(TlsfAllocator&&) = default;
  // Copies would share handles (the owner tag), so there are none.
  TlsfAllocator(const TlsfAllocator&) = delete;
  TlsfAllocator& operator=(const TlsfAllocator&) = delete;

  [[nodiscard]] std::optional<Allocation> allocate(uint64_t size, uint64_t alignment) {
    return Allocate(size, alignment, CarveEnd::kLow);
  }

  // allocate() with a choice of which end of the chosen free extent the
  // allocation is cut from. The extent is chosen the same way; kLow is what
  // allocate() does (with one free extent, the lowest aligned offset).
  // Cutting two families of sizes from opposite ends keeps each family's
  // leftovers next to its own kind (KvAllocator: odd sizes kHigh).
  [[nodiscard]] std::optional<Allocation> Allocate(uint64_t size, uint64_t alignment,
                                                   CarveEnd end) {
    if (size == 0 || size > capacity_ || !IsValidAlignment(alignment)) return std::nullopt;
    // Past the capacity only offset 0 is aligned, as it is for bit_ceil(capacity);
    // clamping keeps size + padding far from overflow.
    alignment = std::min(alignment, alignment_cap_);
    const uint64_t reserved = RoundUp(size, granule_);
    if (!HasSpareRecords()) return std::nullopt;
    const uint32_t index = FindFit(reserved, alignment);
    if (index == kNone) return std::nullopt;
    const Node& node = nodes_[index];
    const uint64_t at = end == CarveEnd::kLow
                            ? RoundUp(node.offset, alignment)
                            : (node.offset + node.size - reserved) & ~(alignment - 1);
    return Carve(index, size, reserved, at);
  }

  // Allocate(), and when no free extent fits although enough bytes are free,
  // relocation: the cheapest window of neighbouring records that would hold
  // the request (fewest live bytes inside, at most options.max_moved_bytes)
  // has its live records moved to free extents outside it, so that the window
  // becomes one free extent the request is cut from. `move(const RecordMove&)`
  // is called once per moved record, after every new place was found and
  // before the old extent is freed; an owner of plain allocations answers it
  // by copying the bytes and replacing its Allocation's offset and handle
  // (Relocation in allocator.h). Nothing is moved and `move` is not called
  // when no window works: the result is then std::nullopt, as allocate()'s.
  //
  // Cost: O(records) to rank the windows and O(records) per window tried (at
  // most options.max_windows), plus the owner's copies. It is the cold path of
  // a full range; allocate() is unchanged. Moved records keep their reserved
  // size and are placed with TLSF's good fit at the low end of an extent.
  template <typename Move>
  [[nodiscard]] std::optional<Allocation> AllocateRelocating(uint64_t size, uint64_t alignment,
                                                             CarveEnd end,
                                                             const RelocationOptions& options,
                                                             Move&& move) {
    return AllocateRelocating(
        size, alignment, end, options, [](const RecordMove&) { return true; }, move);
  }

  // The same, moving only records `movable(const RecordMove&)` accepts (it
  // sees from_offset, bytes and from_handle; to_* are not chosen yet): a
  // window holding any other live record is skipped. For an owner whose
  // allocations are not all free to move (a range being written, or shared).
  template <typename Movable, typename Move>
  requires std::predicate<Movable&, const RecordMove&>
  [[nodiscard]] std::optional<Allocation> AllocateRelocating(uint64_t size, uint64_t alignment,
                                                             CarveEnd end,
                                                             const RelocationOptions& options,
                                                             Movable&& movable, Move&& move) {
    if (!IsValidAlignment(options.max_alignment)) return std::nullopt;
    if (std::optional<Allocation> a = Allocate(size, alignment, end)) return a;
    if (size == 0 || size > capacity_ || !IsValidAlignment(alignment)) return std::nullopt;
    alignment = std::min(alignment, alignment_cap_);
    const uint64_t reserved = RoundUp(size, granule_);
    if (capacity_ - reserved_bytes_ < reserved) return std::nullopt;
    const uint64_t budget = options.max_moved_bytes != 0 ? options.max_moved_bytes : 2 * reserved;
    for (const Window& w : RankWindows(reserved, alignment, budget, options.max_windows)) {
      if (std::optional<Allocation> a =
              TryWindow(w, size, reserved, alignment, end, options.max_alignment, movable, move)) {
        return a;
      }
    }
    return std::nullopt;
  }

  // The same for an owner of plain allocations: cut from the low end, and
  // `relocate(const Relocation&)` per moved allocation.
  template <typename Relocate>
  requires std::invocable<Relocate&, const Relocation&>
  [[nodiscard]] std::optional<Allocation> AllocateRelocating(uint64_t size, uint64_t alignment,
                                                             const RelocationOptions& options,
                                                             Relocate&& relocate) {
    return AllocateRelocating(size, alignment, CarveEnd::kLow, options, [&](const RecordMove& m) {
      relocate(Relocation{
          .from_offset = m.from_offset, .to_offset = m.to_offset, .handle = m.to_handle});
    });
  }

  // The same, moving only allocations `movable(offset, handle)` accepts (a
  // window holding another live allocation is skipped).
  template <typename Movable, typename Relocate>
  requires std::predicate<Movable&, uint64_t, AllocationHandle> &&
      std::invocable<Relocate&, const Relocation&>
  [[nodiscard]] std::optional<Allocation> AllocateRelocating(uint64_t size, uint64_t alignment,
                                                             const RelocationOptions& options,
                                                             Movable&& movable,
                                                             Relocate&& relocate) {
    return AllocateRelocating(
        size, alignment, CarveEnd::kLow, options,
        [&](const RecordMove& m) { return movable(m.from_offset, m.from_handle); },
        [&](const RecordMove& m) {
          relocate(Relocation{
              .from_offset = m.from_offset, .to_offset = m.to_offset, .handle = m.to_handle});
        });
  }

  // Reserves exactly [offset, offset + ReservedBytes(size)) if every byte of
  // it is free, returning an Allocation that free() and stats() treat as one
  // allocate() returned; for rebuilding a known layout (a standby master
  // replaying (offset, size) records). std::nullopt, with nothing changed,
  // when size is 0, offset is not a multiple of the granule, the range runs
  // past the capacity, or any byte of it is reserved.
  //
  // Complexity: O(1) when the range lies in the free extent left after the
  // previous Claim or in the last extent of the range (so claims in ascending
  // offset order are O(1) each); otherwise an O(records) walk.
  [[nodiscard]] std::optional<Allocation> Claim(uint64_t offset, uint64_t size) {
    if (size == 0 || size > capacity_ || offset % granule_ != 0) return std::nullopt;
    const uint64_t reserved = RoundUp(size, granule_);
    if (offset >= capacity_ || reserved > capacity_ - offset) return std::nullopt;
    if (!HasSpareRecords()) return std::nullopt;
    const uint32_t index = FindRecordAt(offset);
    MC_ASSERT(index != kNone, "TlsfAllocator::Claim: the records do not cover the offset");
    // Free extents are never adjacent, so a range past this one's end
    // reaches a reserved byte.
    if (nodes_[index].state != State::kFree || EndOf(index) - offset < reserved) {
      return std::nullopt;
    }
    const Allocation a = Carve(index, size, reserved, offset);
    // The free remainder after the claim, where an ascending claim lands next.
    claim_hint_ = nodes_[alloc_internal::HandleIndex(a.handle)].next_phys;
    MC_DASSERT(a.offset == offset && nodes_[alloc_internal::HandleIndex(a.handle)].size == reserved,
               "Claim reserved the wrong extent");
    return a;
  }

  void free(const Allocation& allocation) {
    const uint32_t index = alloc_internal::HandleIndex(allocation.handle);
    MC_ASSERT(alloc_internal::HandleOwnerTag(allocation.handle) == owner_tag_,
              "TlsfAllocator::free: the allocation belongs to another allocator");
    MC_ASSERT(index < nodes_.size(), "TlsfAllocator::free: corrupt handle");
    Node& node = nodes_[index];
    MC_ASSERT(node.state == State::kUsed &&
                  node.generation == alloc_internal::HandleGeneration(allocation.handle),
              "TlsfAllocator::free: double free or stale handle");
    MC_DASSERT(node.offset == allocation.offset && node.size == RoundUp(allocation.size, granule_),
               "TlsfAllocator::free: the allocation's offset or size was modified");
    used_bytes_ -= allocation.size;
    reserved_bytes_ -= node.size;
    --live_;
    node.state = State::kFree;
    InsertFree(Coalesce(index));
  }

  AllocatorStats stats() const {
    return AllocatorStats{.capacity_bytes = capacity_,
                          .used_bytes = used_bytes_,
                          .free_bytes = capacity_ - reserved_bytes_,
                          .largest_free_bytes = LargestFreeBytes(),
                          .live_allocations = live_};
  }

  uint64_t capacity_bytes() const { return capacity_; }
  uint64_t granularity_bytes() const { return granule_; }
  // Bytes a live allocation of `size` holds (size rounded up to the granule).
  uint64_t ReservedBytes(uint64_t size) const { return RoundUp(size, granule_); }
  // True when the allocation's handle was issued by this object (live or not).
  bool Owns(const Allocation& allocation) const {
    return alloc_internal::HandleOwnerTag(allocation.handle) == owner_tag_;
  }

  // O(records) walk of every invariant; aborts on the first broken one.
  void CheckInvariants() const;

 private:
  // Record 0 is a sentinel: "no record" in every link, and the head of the
  // circular physical list. Links are written through it without a test
  // (its free-list links are scratch), and its state is never kFree, so
  // coalescing needs no bounds test either.
  static constexpr uint32_t kNone = 0;
  static constexpr uint32_t kNoBin = std::numeric_limits<uint32_t>::max();
  static constexpr uint64_t kMaxRecords = uint64_t{1} << 32;
  static constexpr uint32_t kSlLog2 = 5;
  static constexpr uint32_t kSlCount = 1u << kSlLog2;
  static constexpr uint32_t kFlCount = 64;
  static constexpr uint32_t kBinCount = kFlCount * kSlCount;

  enum class State : uint8_t { kSpare, kFree, kUsed, kSentinel };

  // One extent of the range, or a spare record on the spare list.
  struct Node {
    uint64_t offset = 0;
    uint64_t size = 0;
    uint32_t prev_phys = kNone;  // address-ordered neighbours
    uint32_t next_phys = kNone;
    uint32_t prev_free = kNone;  // bin list when kFree; spare list when kSpare
    uint32_t next_free = kNone;
    uint16_t generation = 0;  // bumped each time the record becomes kUsed
    uint16_t bin = 0;         // the bin it sits in while kFree
    State state = State::kFree;
  };

  static constexpr uint64_t RoundUp(uint64_t x, uint64_t pow2) {
    return (x + pow2 - 1) & ~(pow2 - 1);
  }

  // The bin holding extents of exactly `size` bytes (size >= 1), as a linear
  // index fl * kSlCount + sl that grows with size.
  static uint32_t BinOf(uint64_t size) {
    if (size < kSlCount) return static_cast<uint32_t>(size);
    const uint32_t shift = static_cast<uint32_t>(std::bit_width(size)) - 1 - kSlLog2;
    return ((shift + 1) << kSlLog2) | static_cast<uint32_t>((size >> shift) - kSlCount);
  }

  // The first bin whose every extent is >= size: BinOf(size), plus one when
  // size is not that bin's lower bound. (Linear bin indices make the step
  // from the last second-level bin to the next first level a plain +1.)
  static uint32_t BinAtLeast(uint64_t size) {
    if (size < kSlCount) return static_cast<uint32_t>(size);
    const uint32_t shift = static_cast<uint32_t>(std::bit_width(size)) - 1 - kSlLog2;
    const uint32_t bin =
        ((shift + 1) << kSlLog2) | static_cast<uint32_t>((size >> shift) - kSlCount);
    return bin + static_cast<uint32_t>((size & ((uint64_t{1} << shift) - 1)) != 0);
  }

  // The first non-empty bin at or after `bin`, or kNoBin.
  uint32_t FirstNonEmptyBin(uint32_t bin) const {
    uint32_t fl = bin >> kSlLog2;
    if (fl >= kFlCount) return kNoBin;
    const uint32_t sl_map = sl_bitmap_[fl] & (~0u << (bin & (kSlCount - 1)));
    if (sl_map != 0) return (fl << kSlLog2) | static_cast<uint32_t>(std::countr_zero(sl_map));
    const uint64_t fl_map = fl + 1 < kFlCount ? fl_bitmap_ & (~uint64_t{0} << (fl + 1)) : 0;
    if (fl_map == 0) return kNoBin;
    fl = static_cast<uint32_t>(std::countr_zero(fl_map));
    MC_DASSERT(sl_bitmap_[fl] != 0, "first-level bit set over an empty second level");
    return (fl << kSlLog2) | static_cast<uint32_t>(std::countr_zero(sl_bitmap_[fl]));
  }

  // Whether an aligned `reserved` bytes fit anywhere in the extent; the same
  // answer for both carve ends (an aligned offset in [start, end - reserved]).
  bool Fits(const Node& node, uint64_t reserved, uint64_t alignment) const {
    const uint64_t padding = RoundUp(node.offset, alignment) - node.offset;
    return node.size >= reserved && node.size - reserved >= padding;
  }

  uint32_t FindFit(uint64_t reserved, uint64_t alignment) const {
    const uint32_t own = BinOf(reserved);
    if (const uint32_t head = heads_[own];
        head != kNone && Fits(nodes_[head], reserved, alignment)) {
      return head;
    }
    const uint64_t padding_max = alignment > granule_ ? alignment - granule_ : 0;
    const uint32_t sure = BinAtLeast(reserved + padding_max);
    if (const uint32_t bin = FirstNonEmptyBin(sure); bin != kNoBin) {
      MC_DASSERT(Fits(nodes_[heads_[bin]], reserved, alignment), "bin rounding broke the fit");
      return heads_[bin];
    }
    return ScanForFit(own, sure, reserved, alignment);
  }

  // Step 3 of allocate(), near exhaustion: at most kFitScanMax blocks of the
  // bins in [own, sure). Out of line: it is the cold path.
  [[gnu::noinline]] uint32_t ScanForFit(uint32_t own, uint32_t sure, uint64_t reserved,
                                        uint64_t alignment) const {
    uint32_t budget = kFitScanMax;
    for (uint32_t bin = FirstNonEmptyBin(own); bin != kNoBin && bin < sure && budget > 0;
         bin = FirstNonEmptyBin(bin + 1)) {
      for (uint32_t i = heads_[bin]; i != kNone && budget > 0; i = nodes_[i].next_free, --budget) {
        if (Fits(nodes_[i], reserved, alignment)) return i;
      }
    }
    return kNone;
  }

  // Turns [aligned, aligned + reserved) of free record `index` into the
  // allocation; the free bytes before and after become free records.
  [[gnu::always_inline]] Allocation Carve(uint32_t index, uint64_t size, uint64_t reserved,
                                          uint64_t aligned) {
    RemoveFree(index);
    const uint64_t start = nodes_[index].offset;
    MC_DASSERT(aligned >= start && aligned + reserved <= start + nodes_[index].size,
               "carve outside the chosen extent");
    if (aligned > start) SplitFront(index, aligned - start);
    if (nodes_[index].size > reserved) SplitBack(index, reserved);
    Node& node = nodes_[index];
    MC_DASSERT(node.offset == aligned && node.size == reserved, "carve produced the wrong extent");
    node.state = State::kUsed;
    ++node.generation;
    used_bytes_ += size;
    reserved_bytes_ += reserved;
    ++live_;
    return Allocation{.offset = aligned,
                      .size = size,
                      .handle = alloc_internal::PackHandle(owner_tag_, node.generation, index)};
  }

  // A run of neighbouring records [first_offset, end_offset) and the live
  // bytes inside it.
  struct Window {
    uint32_t first_record = kNone;  // valid while it still starts at first_offset
    uint64_t first_offset = 0;
    uint64_t end_offset = 0;
    uint64_t live_bytes = 0;
  };

  // Every window that starts at a record, ends at the first record that lets
  // an aligned `reserved` fit, and holds at most `budget` live bytes; the
  // `count` cheapest, cheapest first. Two pointers over the physical list.
  [[gnu::noinline]] std::vector<Window> RankWindows(uint64_t reserved, uint64_t alignment,
                                                    uint64_t budget, uint32_t count) const {
    std::vector<uint32_t> records;
    for (uint32_t i = nodes_[kNone].next_phys; i != kNone; i = nodes_[i].next_phys) {
      records.push_back(i);
    }
    std::vector<Window> windows;
    uint64_t live = 0;  // live bytes in records [left, right)
    size_t right = 0;
    for (size_t left = 0; left < records.size(); ++left) {
      const uint64_t start = RoundUp(nodes_[records[left]].offset, alignment);
      if (right < left) {
        right = left;
        live = 0;
      }
      while (right < records.size() && (right == left || EndOf(records[right - 1]) < start ||
                                        EndOf(records[right - 1]) - start < reserved)) {
        if (nodes_[records[right]].state == State::kUsed) live += nodes_[records[right]].size;
        ++right;
      }
      const uint64_t end = EndOf(records[right - 1]);
      if (end < start || end - start < reserved) break;  // no later start fits either
      if (live <= budget) {
        windows.push_back(Window{.first_record = records[left],
                                 .first_offset = nodes_[records[left]].offset,
                                 .end_offset = end,
                                 .live_bytes = live});
      }
      if (nodes_[records[left]].state == State::kUsed) live -= nodes_[records[left]].size;
    }
    const size_t keep = std::min<size_t>(count, windows.size());
    std::partial_sort(windows.begin(), windows.begin() + static_cast<std::ptrdiff_t>(keep),
                      windows.end(),
                      [](const Window& a, const Window& b) { return a.live_bytes < b.live_bytes; });
    windows.resize(keep);
    return windows;
  }

  uint64_t EndOf(uint32_t index) const { return nodes_[index].offset + nodes_[index].size; }

  bool Covers(uint32_t index, uint64_t offset) const {
    const Node& node = nodes_[index];
    return (node.state == State::kFree || node.state == State::kUsed) && node.offset <= offset &&
           offset - node.offset < node.size;
  }

  // The record whose extent holds `offset` (< capacity_): the Claim hint or
  // the last record when either covers it (O(1)), else a walk in physical
  // order (O(records)). A stale hint is harmless: any record covering the
  // offset is the one, as the records tile the range.
  uint32_t FindRecordAt(uint64_t offset) const {
    if (Covers(claim_hint_, offset)) return claim_hint_;
    if (const uint32_t last = nodes_[kNone].prev_phys; Covers(last, offset)) return last;
    return FindRecordAtSlow(offset);
  }

  [[gnu::noinline]] uint32_t FindRecordAtSlow(uint64_t offset) const {
    for (uint32_t i = nodes_[kNone].next_phys; i != kNone; i = nodes_[i].next_phys) {
      if (offset - nodes_[i].offset < nodes_[i].size) return i;
    }
    return kNone;
  }

  // Marks used record `index` unused again (a fence, a moved-away record, or a
  // rolled-back new place) without touching used_bytes_; returns the record
  // that now holds its bytes.
  uint32_t Unreserve(uint32_t index) {
    reserved_bytes_ -= nodes_[index].size;
    --live_;
    nodes_[index].state = State::kFree;
    const uint32_t survivor = Coalesce(index);
    InsertFree(survivor);
    return survivor;
  }

  // One relocation attempt on window `w` (see AllocateRelocating).
  template <typename Movable, typename Move>
  [[gnu::noinline]] std::optional<Allocation> TryWindow(const Window& w, uint64_t size,
                                                        uint64_t reserved, uint64_t alignment,
                                                        CarveEnd end, uint64_t max_alignment,
                                                        Movable& movable, Move& move) {
    // An earlier window's rollback keeps every extent but may renumber free
    // records; records tile the range, so a live record at the offset is it.
    uint32_t first = w.first_record;
    if (nodes_[first].state == State::kSpare || nodes_[first].offset != w.first_offset) {
      first = nodes_[kNone].next_phys;
      while (first != kNone && nodes_[first].offset != w.first_offset) {
        first = nodes_[first].next_phys;
      }
    }
    MC_ASSERT(first != kNone, "relocation window lost its first record");
    // A window with a record the owner cannot move is skipped, nothing changed.
    for (uint32_t i = first; i != kNone && nodes_[i].offset < w.end_offset;
         i = nodes_[i].next_phys) {
      if (nodes_[i].state != State::kUsed) continue;
      const RecordMove probe{
          .from_offset = nodes_[i].offset,
          .to_offset = 0,
          .bytes = nodes_[i].size,
          .from_handle = alloc_internal::PackHandle(owner_tag_, nodes_[i].generation, i),
          .to_handle = {}};
      if (!movable(probe)) return std::nullopt;
    }
    // Fence the window: its free records become used so that no new place
    // lands inside it. `window` lists every record of it in physical order.
    std::vector<uint32_t> window, fences, movers, places;
    for (uint32_t i = first; i != kNone && nodes_[i].offset < w.end_offset;
         i = nodes_[i].next_phys) {
      window.push_back(i);
      if (nodes_[i].state == State::kFree) {
        RemoveFree(i);
        nodes_[i].state = State::kUsed;
        reserved_bytes_ += nodes_[i].size;
        ++live_;
        fences.push_back(i);
      } else {
        movers.push_back(i);
      }
    }
    // New places, all found before anything moves.
    for (const uint32_t i : movers) {
      const uint64_t offset = nodes_[i].offset;
      const uint64_t align =
          std::min({max_alignment, alignment_cap_,
                    offset == 0 ? max_alignment : uint64_t{1} << std::countr_zero(offset)});
      const uint32_t fit = HasSpareRecords() ? FindFit(nodes_[i].size, align) : kNone;
      if (fit == kNone) {
        for (const uint32_t p : places) Unreserve(p);
        for (const uint32_t f : fences) Unreserve(f);
        return std::nullopt;
      }
      const Allocation place = Carve(fit, 0, nodes_[i].size, RoundUp(nodes_[fit].offset, align));
      places.push_back(alloc_internal::HandleIndex(place.handle));
    }
    for (size_t k = 0; k < movers.size(); ++k) {
      Node& from = nodes_[movers[k]];
      const Node& to = nodes_[places[k]];
      move(RecordMove{
          .from_offset = from.offset,
          .to_offset = to.offset,
          .bytes = from.size,
          .from_handle = alloc_internal::PackHandle(owner_tag_, from.generation, movers[k]),
          .to_handle = alloc_internal::PackHandle(owner_tag_, to.generation, places[k])});
      ++from.generation;  // the old handle is stale from now on
    }
    // The window's records, freed in physical order, coalesce into the first.
    uint32_t survivor = kNone;
    for (const uint32_t i : window) {
      const uint32_t s = Unreserve(i);
      if (survivor == kNone) survivor = s;
    }
    const Node& node = nodes_[survivor];
    MC_ASSERT(Fits(node, reserved, alignment), "relocation window does not hold the request");
    const uint64_t at = end == CarveEnd::kLow
                            ? RoundUp(node.offset, alignment)
                            : (node.offset + node.size - reserved) & ~(alignment - 1);
    return Carve(survivor, size, reserved, at);
  }

  // Splits the first `bytes` of record `index` off into a new free record.
  [[gnu::noinline]] void SplitFront(uint32_t index, uint64_t bytes) {
    const uint32_t front = NewRecord();
    Node& node = nodes_[index];
    nodes_[front] = Node{.offset = node.offset,
                         .size = bytes,
                         .prev_phys = node.prev_phys,
                         .next_phys = index,
                         .state = State::kFree};
    nodes_[node.prev_phys].next_phys = front;  // the sentinel when first
    node.prev_phys = front;
    node.offset += bytes;
    node.size -= bytes;
    InsertFree(front);
  }

  // Keeps the first `keep` bytes of record `index`; the rest becomes a new
  // free record.
  void SplitBack(uint32_t index, uint64_t keep) {
    const uint32_t back = NewRecord();
    Node& node = nodes_[index];
    nodes_[back] = Node{.offset = node.offset + keep,
                        .size = node.size - keep,
                        .prev_phys = index,
                        .next_phys = node.next_phys,
                        .state = State::kFree};
    nodes_[node.next_phys].prev_phys = back;  // the sentinel when last
    node.next_phys = back;
    node.size = keep;
    InsertFree(back);
  }

  // Merges free record `index` with free physical neighbours; returns the
  // surviving record (not yet in a bin).
  uint32_t Coalesce(uint32_t index) {
    // Both neighbours' states are loaded before either merge, so the two
    // loads overlap instead of waiting on each other.
    const uint32_t prev = nodes_[index].prev_phys, next = nodes_[index].next_phys;
    const bool prev_free = nodes_[prev].state == State::kFree;
    if (nodes_[next].state == State::kFree) {
      RemoveFree(next);
      Absorb(index, next);
    }
    if (prev_free) {
      RemoveFree(prev);
      Absorb(prev, index);
      index = prev;
    }
    return index;
  }

  // Appends record `victim` (the physical successor of `keeper`) to keeper.
  void Absorb(uint32_t keeper, uint32_t victim) {
    Node& k = nodes_[keeper];
    const Node& v = nodes_[victim];
    MC_DASSERT(k.next_phys == victim && k.offset + k.size == v.offset, "absorbing a non-neighbour");
    k.size += v.size;
    k.next_phys = v.next_phys;
    nodes_[v.next_phys].prev_phys = keeper;
    ReleaseRecord(victim);
  }

  void InsertFree(uint32_t index) {
    Node& node = nodes_[index];
    const uint32_t bin = BinOf(node.size);
    const uint32_t head = heads_[bin];
    node.state = State::kFree;
    node.bin = static_cast<uint16_t>(bin);
    node.prev_free = kNone;
    node.next_free = head;
    nodes_[head].prev_free = index;
    heads_[bin] = index;
    sl_bitmap_[bin >> kSlLog2] |= 1u << (bin & (kSlCount - 1));
    fl_bitmap_ |= uint64_t{1} << (bin >> kSlLog2);
  }

  // Branch-free but for the select: the unlink goes through the sentinel or
  // the bin head, and the bitmap bits are cleared only if the bin emptied.
  void RemoveFree(uint32_t index) {
    const Node& node = nodes_[index];
    MC_DASSERT(node.state == State::kFree, "removing a record that is not free");
    const uint32_t prev = node.prev_free, next = node.next_free, bin = node.bin;
    MC_DASSERT(prev != kNone || heads_[bin] == index, "free record missing from its bin");
    nodes_[next].prev_free = prev;
    *(prev != kNone ? &nodes_[prev].next_free : &heads_[bin]) = next;
    // The bin emptied iff the record was its only one (kNone is 0).
    const uint32_t emptied = (prev | next) == kNone;
    const uint32_t fl = bin >> kSlLog2;
    const uint32_t sl_map = sl_bitmap_[fl] & ~(emptied << (bin & (kSlCount - 1)));
    sl_bitmap_[fl] = sl_map;
    fl_bitmap_ &= ~(uint64_t{sl_map == 0} << fl);
  }

  bool HasSpareRecords() const {
    // A carve needs at most two new records; indices must fit 32 bits.
    return spare_head_ != kNone || nodes_.size() + 2 <= kMaxRecords;
  }

  uint32_t NewRecord() {
    if (spare_head_ != kNone) [[likely]] {
      const uint32_t index = spare_head_;
      spare_head_ = nodes_[index].next_free;
      return index;
    }
    return GrowRecords();
  }

  // The slow path of NewRecord, kept out of line so the fast path inlines.
  [[gnu::noinline]] uint32_t GrowRecords() {
    MC_ASSERT(nodes_.size() < kMaxRecords, "TLSF record index space exhausted");
    nodes_.emplace_back();
    return static_cast<uint32_t>(nodes_.size() - 1);
  }

  void ReleaseRecord(uint32_t index) {
    Node& node = nodes_[index];
    node.state = State::kSpare;
    node.next_free = spare_head_;
    spare_head_ = index;
  }

  uint64_t LargestFreeBytes() const {
    if (fl_bitmap_ == 0) return 0;
    const uint32_t fl = static_cast<uint32_t>(std::bit_width(fl_bitmap_)) - 1;
    const uint32_t sl = static_cast<uint32_t>(std::bit_width(sl_bitmap_[fl])) - 1;
    uint64_t largest = 0;
    for (uint32_t i = heads_[(fl << kSlLog2) | sl]; i != kNone; i = nodes_[i].next_free) {
      largest = std::max(largest, nodes_[i].size);
    }
    return largest;
  }

  uint64_t capacity_;
  uint64_t granule_;
  uint64_t alignment_cap_;
  uint16_t owner_tag_;
  uint64_t used_bytes_ = 0;
  uint64_t reserved_bytes_ = 0;
  uint64_t live_ = 0;
  uint32_t spare_head_ = kNone;
  uint32_t claim_hint_ = kNone;  // a record near the last Claim; may be stale
  uint64_t fl_bitmap_ = 0;
  std::array<uint32_t, kFlCount> sl_bitmap_;
  std::array<uint32_t, kBinCount> heads_;
  std::vector<Node> nodes_;
};

static_assert(Allocator<TlsfAllocator>);

inline void TlsfAllocator::CheckInvariants() const {
  uint64_t expect_offset = 0, reserved = 0, live = 0, free_records = 0;
  bool prev_free = false;
  uint32_t prev = kNone;
  MC_ASSERT(nodes_[kNone].state == State::kSentinel, "sentinel record overwritten");
  for (uint32_t i = nodes_[kNone].next_phys; i != kNone; prev = i, i = nodes_[i].next_phys) {
    const Node& node = nodes_[i];
    MC_ASSERT(node.prev_phys == prev, "broken physical back link");
    MC_ASSERT(node.offset == expect_offset && node.size > 0, "records do not tile the range");
    MC_ASSERT(node.offset % granule_ == 0 && node.size % granule_ == 0, "record off granule");
    MC_ASSERT(node.state != State::kSpare, "spare record in the physical list");
    const bool is_free = node.state == State::kFree;
    MC_ASSERT(!(is_free && prev_free), "two adjacent free records were not coalesced");
    if (is_free) {
      ++free_records;
    } else {
      reserved += node.size;
      ++live;
    }
    prev_free = is_free;
    expect_offset += node.size;
  }
  MC_ASSERT(expect_offset == capacity_, "records do not cover the range");
  MC_ASSERT(nodes_[kNone].prev_phys == prev, "sentinel does not close the physical list");
  MC_ASSERT(reserved == reserved_bytes_ && live == live_, "counters disagree with the records");
  uint64_t binned = 0;
  for (uint32_t bin = 0; bin < kBinCount; ++bin) {
    const bool bit = (sl_bitmap_[bin >> kSlLog2] >> (bin & (kSlCount - 1))) & 1u;
    MC_ASSERT(bit == (heads_[bin] != kNone), "bitmap disagrees with bin list");
    for (uint32_t i = heads_[bin], p = kNone; i != kNone; p = i, i = nodes_[i].next_free) {
      MC_ASSERT(
          nodes_[i].state == State::kFree && BinOf(nodes_[i].size) == bin && nodes_[i].bin == bin,
          "record in the wrong bin");
      MC_ASSERT(nodes_[i].prev_free == p, "broken bin back link");
      ++binned;
    }
  }
  for (uint32_t fl = 0; fl < kFlCount; ++fl) {
    MC_ASSERT(((fl_bitmap_ >> fl) & 1u) == (sl_bitmap_[fl] != 0), "first-level bitmap wrong");
  }
  MC_ASSERT(binned == free_records, "a free record is missing from the bins");
}

}  // namespace mooncake::alloc

#endif  // MOONCAKE_ALLOC_TLSF_ALLOCATOR_H_
