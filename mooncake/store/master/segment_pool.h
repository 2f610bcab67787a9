// SegmentPool<A>: the mounted segments, each carved by its own Allocator A.
//
// The master never touches segment bytes: a segment is a size, an owner
// (worker, host) and an endpoint, and A hands out [offset, size) ranges of it.
// Segment ids are assigned here, start at 1 and are never reused in a pool's
// life, so an allocation of an unmounted segment can never be freed into a
// newer one: Free of an unknown segment id is a no-op that returns false.
// A standby master rebuilding the pool after a failover restores each
// segment under the id the previous master gave it (MountWithId, in any
// order) and each live replica's range in it (Claim); later Mounts assign ids
// above every restored one.
//
// A is built per segment by a factory (capacity -> StatusOr<A>); the default
// comes from SegmentAllocatorTraits<A> (defined for TlsfAllocator; give the
// factory explicitly for other models, e.g. a KvAllocator with block classes).
//
// Candidates() hands placement an immutable SegmentTable: the mounted segments
// with their worker, host and name interned as small integers, built at most
// once per Mount/Unmount (lazily, on the first call after one) and shared by
// every put until the next, so a put copies no string and allocates nothing
// per segment; loads are read live from the segments' atomics.
//
// Thread-safety: every method may run concurrently. The segment map is under a
// shared mutex (Mount/Unmount exclusive, the rest shared); each segment's
// allocator under its own mutex, so allocations in different segments run in
// parallel. used_bytes/capacity_bytes are lock-free atomics. A SegmentTable
// is immutable and keeps its segments' descriptors and counters alive, so it
// may be read with no lock after the segment was unmounted (its allocations
// then fail).
#ifndef MOONCAKE_STORE_MASTER_SEGMENT_POOL_H_
#define MOONCAKE_STORE_MASTER_SEGMENT_POOL_H_

#include <algorithm>
#include <atomic>
#include <concepts>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/alloc/allocator.h"
#include "mooncake/alloc/tlsf_allocator.h"
#include "mooncake/alloc/variant_allocator.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/interned_string.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/rpc/master.pb.h"

namespace mooncake::master {

// How the pool builds an allocator for a segment when no factory is given.
template <typename A>
struct SegmentAllocatorTraits;

template <>
struct SegmentAllocatorTraits<alloc::TlsfAllocator> {
  static constexpr uint64_t kGranularityBytes = 64;
  static absl::StatusOr<alloc::TlsfAllocator> Make(uint64_t capacity_bytes) {
    // The tail past the last granule is not handed out.
    return alloc::TlsfAllocator::Create(
        {.capacity_bytes = capacity_bytes / kGranularityBytes * kGranularityBytes,
         .granularity_bytes = kGranularityBytes});
  }
};

template <typename A>
concept HasSegmentAllocatorTraits = requires(uint64_t c) {
  { SegmentAllocatorTraits<A>::Make(c) } -> std::same_as<absl::StatusOr<A>>;
};

// A segment as placement and metrics see it (a copy).
struct SegmentView {
  uint64_t id = 0;
  std::string worker_id;
  std::string host_id;
  std::string name;
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
};

// The mounted segments as one put's placement reads them: immutable, shared.
// Invariants: `segments` is sorted by id; each entry's worker/host/name index
// is < worker_ids/host_ids/names.size(); the string_views and `used_bytes`
// point into segments that `owners` keeps alive.
struct SegmentTable {
  struct Entry {
    uint64_t id = 0;
    uint64_t capacity_bytes = 0;
    const std::atomic<uint64_t>* used_bytes = nullptr;  // live; relaxed reads
    uint32_t worker = 0;                                // into worker_ids
    uint32_t host = 0;                                  // into host_ids
    uint32_t name = 0;                                  // into names
  };
  static constexpr uint32_t kNoIndex = UINT32_MAX;

  uint64_t generation = 0;  // the pool's Mount/Unmount count when built
  std::vector<Entry> segments;
  std::vector<InternedString> worker_ids;  // interned: replicas copy them for free
  std::vector<InternedString> host_ids;
  std::vector<std::string_view> names;
  absl::flat_hash_map<std::string_view, uint32_t> host_index;
  absl::flat_hash_map<std::string_view, uint32_t> name_index;
  std::vector<std::shared_ptr<const void>> owners;

  // kNoIndex if no mounted segment is on that host / has that name. O(1).
  uint32_t HostIndex(std::string_view host_id) const {
    auto it = host_index.find(host_id);
    return it == host_index.end() ? kNoIndex : it->second;
  }
  uint32_t NameIndex(std::string_view name) const {
    auto it = name_index.find(name);
    return it == name_index.end() ? kNoIndex : it->second;
  }
};

template <alloc::Allocator A>
class SegmentPool {
 public:
  using Factory = std::function<absl::StatusOr<A>(uint64_t capacity_bytes)>;

  // `factory` null: SegmentAllocatorTraits<A>::Make (which must exist).
  explicit SegmentPool(Factory factory = nullptr) : factory_(std::move(factory)) {
    if (factory_ == nullptr) {
      if constexpr (HasSegmentAllocatorTraits<A>) {
        factory_ = [](uint64_t c) { return SegmentAllocatorTraits<A>::Make(c); };
      } else {
        MC_ASSERT(false, "this allocator has no SegmentAllocatorTraits: pass a factory");
      }
    }
  }
  SegmentPool(const SegmentPool&) = delete;
  SegmentPool& operator=(const SegmentPool&) = delete;

  // Mounts `desc` and returns its new id. Errors: INVALID_ARGUMENT (empty
  // worker id or name, size 0; or what the factory refuses), ALREADY_EXISTS
  // (this worker already mounted a segment of that name).
  absl::StatusOr<uint64_t> Mount(const store::proto::SegmentDescriptor& desc) {
    absl::StatusOr<std::shared_ptr<Segment>> seg = NewSegment(desc);
    if (!seg.ok()) return seg.status();
    std::unique_lock lock(map_mu_);
    if (absl::Status s = CheckNameFree(desc); !s.ok()) return s;
    const uint64_t id = next_id_++;
    Insert(id, std::move(*seg));
    return id;
  }

  // Mounts `desc` as segment `id`, an id a previous master assigned (a
  // standby restoring the pool after a failover; any order). Errors as
  // Mount's, plus INVALID_ARGUMENT for id 0 or UINT64_MAX and ALREADY_EXISTS
  // when `id` is mounted or was assigned by this pool before (ids are never
  // reused). Ids below `id` that no one was given stay free for MountWithId;
  // Mount assigns ids above every id restored.
  absl::Status MountWithId(uint64_t id, const store::proto::SegmentDescriptor& desc) {
    if (id == 0 || id == UINT64_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("segment id must be in [1, 2^64 - 1), got ", id));
    }
    absl::StatusOr<std::shared_ptr<Segment>> seg = NewSegment(desc);
    if (!seg.ok()) return seg.status();
    std::unique_lock lock(map_mu_);
    if (segments_.contains(id)) {
      return absl::AlreadyExistsError(absl::StrCat("segment id ", id, " is already mounted"));
    }
    if (!IsUnassigned(id)) {
      return absl::AlreadyExistsError(absl::StrCat(
          "segment id ", id, " was assigned before and unmounted; ids are not reused"));
    }
    if (absl::Status s = CheckNameFree(desc); !s.ok()) return s;
    MarkAssigned(id);
    Insert(id, std::move(*seg));
    MC_DASSERT(next_id_ > id, "Mount must never assign a restored id");
    return absl::OkStatus();
  }

  // Forgets segment `id`; its live allocations are dropped, not freed.
  // NOT_FOUND if it is not mounted.
  absl::Status Unmount(uint64_t id) {
    std::shared_ptr<Segment> s;
    {
      std::unique_lock lock(map_mu_);
      auto it = segments_.find(id);
      if (it == segments_.end()) {
        return absl::NotFoundError(absl::StrCat("segment ", id, " is not mounted"));
      }
      s = std::move(it->second);
      segments_.erase(it);
      ++generation_;
      table_ = nullptr;
    }
    // A call that fetched `s` before the erase sees `dead` under s->mu and
    // leaves the totals alone, so they are subtracted exactly once.
    MutexLock lock(&s->mu);
    s->dead = true;
    capacity_bytes_.fetch_sub(s->capacity_bytes, std::memory_order_relaxed);
    used_bytes_.fetch_sub(s->used_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
    for (const auto& [offset, r] : s->shared) {
      shared_bytes_.fetch_sub(r.refs * r.size, std::memory_order_relaxed);
    }
    s->shared.clear();
    return absl::OkStatus();
  }

  // nullopt if the segment is gone or A cannot serve the request.
  std::optional<alloc::Allocation> Allocate(uint64_t id, uint64_t size, uint64_t alignment) {
    std::shared_ptr<Segment> s = Get(id);
    if (s == nullptr) return std::nullopt;
    MutexLock lock(&s->mu);
    if (s->dead) return std::nullopt;
    std::optional<alloc::Allocation> a = s->allocator.allocate(size, alignment);
    if (a.has_value()) {
      ++s->alloc_seq;
      // relaxed: statistics; the allocator's state is under s->mu.
      s->used_bytes.fetch_add(a->size, std::memory_order_relaxed);
      used_bytes_.fetch_add(a->size, std::memory_order_relaxed);
    }
    return a;
  }

  // Reserves exactly [offset, offset + size rounded up to A's granule) of
  // segment `id` (a live replica the previous master placed there), counted
  // in used_bytes as an Allocate is; free it with Free. nullopt if the segment
  // is gone or A refuses (any byte taken, misaligned, out of range; see
  // alloc::ClaimableAllocator, spelled out here because this target does not
  // depend on locked_allocator).
  std::optional<alloc::Allocation> Claim(uint64_t id, uint64_t offset, uint64_t size) requires
      requires(A& a, uint64_t o, uint64_t n) {
    { a.Claim(o, n) } -> std::same_as<std::optional<alloc::Allocation>>;
  }
  {
    std::shared_ptr<Segment> s = Get(id);
    if (s == nullptr) return std::nullopt;
    MutexLock lock(&s->mu);
    if (s->dead) return std::nullopt;
    std::optional<alloc::Allocation> a = s->allocator.Claim(offset, size);
    if (a.has_value()) {
      ++s->alloc_seq;
      MC_DASSERT(a->offset == offset && a->size == size, "Claim returned another range");
      // relaxed: statistics; the allocator's state is under s->mu.
      s->used_bytes.fetch_add(a->size, std::memory_order_relaxed);
      used_bytes_.fetch_add(a->size, std::memory_order_relaxed);
    }
    return a;
  }

  // Returns `a` to segment `id`; false (nothing done) if it was unmounted.
  // A range shared by clones (Share) only loses one reference; the last
  // Free returns it.
  // REQUIRES: `a` came from Allocate(id, ...) or Claim(id, ...) and is live.
  bool Free(uint64_t id, const alloc::Allocation& a) {
    std::shared_ptr<Segment> s = Get(id);
    if (s == nullptr) return false;
    MutexLock lock(&s->mu);
    if (s->dead) return false;
    if (auto it = s->shared.find(a.offset); it != s->shared.end()) {
      if (--it->second.refs == 0) s->shared.erase(it);
      shared_bytes_.fetch_sub(a.size, std::memory_order_relaxed);
      return true;
    }
    if (!s->relocated.empty()) {
      if (auto it = s->relocated.find(a.offset);
          it != s->relocated.end() && it->second.from_handle == a.handle) {
        it->second.to.size = a.size;  // the owner's size, as the old Allocation's
        return FreeRelocatedLocked(*s, it);
      }
    }
    FreeLocked(*s, a);
    return true;
  }

  // One more reference to the live range `a` of segment `id` (a clone): it
  // takes one more Free to return it. False (nothing done) if the segment
  // was unmounted.
  bool Share(uint64_t id, const alloc::Allocation& a) {
    std::shared_ptr<Segment> s = Get(id);
    if (s == nullptr) return false;
    MutexLock lock(&s->mu);
    if (s->dead) return false;
    typename Segment::SharedRange& r = s->shared[a.offset];
    ++r.refs;
    r.size = a.size;
    shared_bytes_.fetch_add(a.size, std::memory_order_relaxed);
    return true;
  }
  // Whether a Free of `a` would only drop a reference (clones share it).
  bool Shared(uint64_t id, const alloc::Allocation& a) const {
    std::shared_ptr<Segment> s = Get(id);
    if (s == nullptr) return false;
    MutexLock lock(&s->mu);
    return s->shared.contains(a.offset);
  }
  // Bytes of the references beyond the first to shared ranges: what clones
  // would have allocated had they copied.
  uint64_t shared_bytes() const { return shared_bytes_.load(std::memory_order_relaxed); }

  // ---- Relocation (internal/relocation_path.h, docs/alloc.md) ----------------
  //
  // Compact moves allocations of a segment in the allocator only: each moved
  // range keeps its old Allocation as its name (the owner's replica still
  // reads the old offset) while the allocator now holds a new one; Free of
  // the old Allocation frees the new one. The request is carved from the old
  // extents and returned as a placeholder that FreePlaceholder returns.
  // EndMove settles a move once the owner copied the bytes (or gave up).

  // Whether segment `id`'s allocator can relocate (false: not mounted).
  bool SupportsRelocation(uint64_t id) const {
    std::shared_ptr<Segment> s = Get(id);
    if (s == nullptr) return false;
    MutexLock lock(&s->mu);
    return !s->dead && RelocatingLocked(*s);
  }

  // Allocations made in segment `id` so far (0: not mounted): a Compact
  // given the count its caller saw refuses to run if any came since.
  uint64_t AllocationSeq(uint64_t id) const {
    std::shared_ptr<Segment> s = Get(id);
    if (s == nullptr) return 0;
    MutexLock lock(&s->mu);
    return s->alloc_seq;
  }

  struct MovedRange {
    uint64_t from_offset = 0;
    uint64_t to_offset = 0;
  };
  struct Compaction {
    alloc::Allocation placeholder;
    std::vector<MovedRange> moves;
  };

  // Carves `size` bytes from segment `id` by moving allocations that
  // `movable(offset, handle)` accepts (called under the segment lock; it must
  // not call the pool). nullopt, nothing changed: the segment is gone, its
  // allocator cannot relocate, allocations came since `seq`
  // (AllocationSeq), or no window works. Ranges shared by clones and ranges
  // already moved are never moved. The placeholder counts as used.
  template <typename Movable>
  std::optional<Compaction> Compact(uint64_t id, uint64_t size, uint64_t alignment,
                                    const alloc::RelocationOptions& options, uint64_t seq,
                                    Movable&& movable) {
    std::shared_ptr<Segment> s = Get(id);
    if (s == nullptr) return std::nullopt;
    MutexLock lock(&s->mu);
    if (s->dead || s->alloc_seq != seq) return std::nullopt;
    if constexpr (requires(bool (*m)(uint64_t, alloc::AllocationHandle),
                           void (*r)(const alloc::Relocation&)) {
                    s->allocator.AllocateRelocating(size, alignment, options, m, r);
                  }) {
      Compaction c;
      Segment& seg = *s;
      // The handle each accepted range had: a Free must name it to be redirected.
      absl::flat_hash_map<uint64_t, alloc::AllocationHandle> accepted;
      auto may_move = [&](uint64_t offset, alloc::AllocationHandle handle) {
        if (seg.shared.contains(offset) || seg.relocated.contains(offset) ||
            !movable(offset, handle)) {
          return false;
        }
        accepted[offset] = handle;
        return true;
      };
      std::vector<alloc::Relocation> moves;
      auto relocate = [&](const alloc::Relocation& r) {
        c.moves.push_back(MovedRange{r.from_offset, r.to_offset});
        moves.push_back(r);
      };
      std::optional<alloc::Allocation> a =
          seg.allocator.AllocateRelocating(size, alignment, options, may_move, relocate);
      if (!a.has_value()) {
        MC_ASSERT(moves.empty(), "a failed relocation moved something");
        return std::nullopt;
      }
      ++seg.alloc_seq;
      for (const alloc::Relocation& r : moves) {
        // The size is the owner's; the allocator only needs offset and handle.
        MC_ASSERT(accepted.contains(r.from_offset), "moved a range the filter did not accept");
        seg.relocated[r.from_offset] = Relocated{.from_handle = accepted[r.from_offset],
                                                 .to = {.offset = r.to_offset, .handle = r.handle}};
      }
      s->used_bytes.fetch_add(a->size, std::memory_order_relaxed);
      used_bytes_.fetch_add(a->size, std::memory_order_relaxed);
      c.placeholder = *a;
      return c;
    } else {
      static_cast<void>(movable);
      return std::nullopt;
    }
  }

  // How a moved range's copy ended (EndMove).
  enum class MoveEnd : uint8_t { kCopied, kFailed, kTimedOut };

  // The owner's copy of the range moved from `from_offset` ended. `settle`
  // (kCopied, the owner's replica still names the old range): the new
  // Allocation (with `size`) is returned and the old name forgotten; the
  // owner reads the new offset from now on. Otherwise the old name stays:
  // a later Free of it frees the new range, or (kTimedOut: the worker may
  // still write it) keeps it out of use. A range its owner freed while the
  // copy ran is freed now (kept out of use after kTimedOut). nullopt: not
  // settled.
  std::optional<alloc::Allocation> EndMove(uint64_t id, uint64_t from_offset, uint64_t size,
                                           MoveEnd end, bool settle) {
    std::shared_ptr<Segment> s = Get(id);
    if (s == nullptr) return std::nullopt;
    MutexLock lock(&s->mu);
    if (s->dead) return std::nullopt;
    auto it = s->relocated.find(from_offset);
    if (it == s->relocated.end()) return std::nullopt;
    Relocated& r = it->second;
    r.to.size = size;
    r.copying = false;
    if (end == MoveEnd::kTimedOut) r.quarantined = true;
    if (r.owner_freed) {
      FreeRelocatedLocked(*s, it);
      return std::nullopt;
    }
    if (end != MoveEnd::kCopied || !settle) return std::nullopt;
    const alloc::Allocation to = r.to;
    s->relocated.erase(it);
    return to;
  }

  // Returns a placeholder Compact made; false if the segment is gone.
  bool FreePlaceholder(uint64_t id, const alloc::Allocation& a) {
    std::shared_ptr<Segment> s = Get(id);
    if (s == nullptr) return false;
    MutexLock lock(&s->mu);
    if (s->dead) return false;
    FreeLocked(*s, a);
    return true;
  }

  // Moved ranges of segment `id` whose old name is still in use.
  size_t RelocatedRanges(uint64_t id) const {
    std::shared_ptr<Segment> s = Get(id);
    if (s == nullptr) return 0;
    MutexLock lock(&s->mu);
    return s->relocated.size();
  }

  bool Contains(uint64_t id) const {
    std::shared_lock lock(map_mu_);
    return segments_.contains(id);
  }

  // The reads the master has sent to segment `id` lately (0: not mounted),
  // counting this one when `count` (relaxed: a load estimate).
  uint64_t ReadLoad(uint64_t id, bool count) const {
    std::shared_lock lock(map_mu_);
    auto it = segments_.find(id);
    if (it == segments_.end()) return 0;
    return count ? it->second->recent_reads.fetch_add(1, std::memory_order_relaxed) + 1
                 : it->second->recent_reads.load(std::memory_order_relaxed);
  }
  // Halves every segment's recent reads (the master's Tick): a load that
  // fades over a few seconds.
  void DecayReads() {
    std::shared_lock lock(map_mu_);
    for (const auto& [id, s] : segments_) {
      s->recent_reads.store(s->recent_reads.load(std::memory_order_relaxed) / 2,
                            std::memory_order_relaxed);
    }
  }

  // Every mounted segment, by id.
  std::vector<SegmentView> Snapshot() const {
    std::vector<SegmentView> out;
    std::shared_lock lock(map_mu_);
    out.reserve(segments_.size());
    for (const auto& [id, s] : segments_) {
      out.push_back(SegmentView{id, s->desc.worker_id(), s->desc.endpoint().host_id(),
                                s->desc.name(), s->capacity_bytes,
                                s->used_bytes.load(std::memory_order_relaxed)});
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    return out;
  }

  // The mounted segments for placement. O(1) and allocation-free, except the
  // first call after a Mount/Unmount, which builds the table: O(segments).
  std::shared_ptr<const SegmentTable> Candidates() const {
    {
      std::shared_lock lock(map_mu_);
      if (table_ != nullptr) return table_;
    }
    std::unique_lock lock(map_mu_);
    if (table_ == nullptr) table_ = BuildTable();
    return table_;
  }

  std::optional<alloc::AllocatorStats> Stats(uint64_t id) const {
    std::shared_ptr<Segment> s = Get(id);
    if (s == nullptr) return std::nullopt;
    MutexLock lock(&s->mu);
    return s->allocator.stats();
  }

  // Calls `read(const A&)` under segment `id`'s lock (inspection: which model
  // a VariantAllocator holds, a slab's pages); false if it is not mounted.
  // `read` must not call back into the pool.
  template <typename Read>
  bool ReadAllocator(uint64_t id, Read&& read) const {
    std::shared_ptr<Segment> s = Get(id);
    if (s == nullptr) return false;
    MutexLock lock(&s->mu);
    read(static_cast<const A&>(s->allocator));
    return true;
  }

  std::optional<store::proto::SegmentDescriptor> Descriptor(uint64_t id) const {
    std::shared_ptr<Segment> s = Get(id);
    if (s == nullptr) return std::nullopt;
    return s->desc;
  }

  // Mounted: its descriptor. Unmounted: an id this pool assigned once (ids
  // are never reused, so it never comes back). Unknown: never assigned.
  enum class IdState : uint8_t { kMounted, kUnmounted, kUnknown };
  std::pair<IdState, std::optional<store::proto::SegmentDescriptor>> Describe(uint64_t id) const {
    std::shared_lock lock(map_mu_);
    if (auto it = segments_.find(id); it != segments_.end()) {
      return {IdState::kMounted, it->second->desc};  // desc is immutable after Mount
    }
    return {id != 0 && !IsUnassigned(id) ? IdState::kUnmounted : IdState::kUnknown, std::nullopt};
  }

  // The id the next Mount assigns: above every id assigned or restored so far.
  uint64_t next_id() const {
    std::shared_lock lock(map_mu_);
    return next_id_;
  }

  uint64_t used_bytes() const { return used_bytes_.load(std::memory_order_relaxed); }
  uint64_t capacity_bytes() const { return capacity_bytes_.load(std::memory_order_relaxed); }
  size_t size() const {
    std::shared_lock lock(map_mu_);
    return segments_.size();
  }

  // A draining segment stays mounted and readable, and keeps its
  // allocations, but is no placement candidate (Candidates() leaves it out):
  // no new put lands there. False: `id` is not mounted.
  bool SetDraining(uint64_t id, bool draining) {
    std::unique_lock lock(map_mu_);
    auto it = segments_.find(id);
    if (it == segments_.end()) return false;
    if (it->second->draining != draining) {
      it->second->draining = draining;
      ++generation_;
      table_ = nullptr;
    }
    return true;
  }
  bool IsDraining(uint64_t id) const {
    std::shared_lock lock(map_mu_);
    auto it = segments_.find(id);
    return it != segments_.end() && it->second->draining;
  }

 private:
  // A range Compact moved whose owner still names it by its old offset.
  struct Relocated {
    alloc::AllocationHandle from_handle;  // the old name's handle (stale in the allocator)
    alloc::Allocation to;                 // what the allocator holds now (size set by EndMove)
    bool copying = true;                  // the owner's copy has not ended
    bool owner_freed = false;             // freed by its owner while copying: freed at EndMove
    bool quarantined = false;             // the copy timed out: the range is never reused
  };
  using RelocatedMap = absl::flat_hash_map<uint64_t, Relocated>;  // by the old offset

  struct Segment {
    explicit Segment(A a) : allocator(std::move(a)) {}
    uint64_t id = 0;
    store::proto::SegmentDescriptor desc;  // immutable after Mount
    uint64_t capacity_bytes = 0;
    Mutex mu;
    A allocator ABSL_GUARDED_BY(mu);
    bool dead ABSL_GUARDED_BY(mu) = false;  // unmounted; allocator no longer used
    // Ranges shared by clones (Share): offset -> references beyond the first.
    struct SharedRange {
      uint32_t refs = 0;
      uint64_t size = 0;
    };
    absl::flat_hash_map<uint64_t, SharedRange> shared ABSL_GUARDED_BY(mu);
    // Moved ranges by old offset (Compact).
    RelocatedMap relocated ABSL_GUARDED_BY(mu);
    uint64_t alloc_seq ABSL_GUARDED_BY(mu) = 0;  // allocations so far (AllocationSeq)
    std::atomic<uint64_t> used_bytes{0};
    // Reads the master sent here lately (ReadLoad), halved by DecayReads.
    std::atomic<uint64_t> recent_reads{0};
    bool draining = false;  // under the pool's map_mu_: not a placement candidate
  };

  static bool RelocatingLocked(const Segment& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    if constexpr (requires(const A& a) {
                    { a.SupportsRelocation() } -> std::same_as<bool>;
                  }) {
      return s.allocator.SupportsRelocation();
    } else {
      return alloc::RelocatingModel<A>;
    }
  }

  void FreeLocked(Segment& s, const alloc::Allocation& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    s.allocator.free(a);
    s.used_bytes.fetch_sub(a.size, std::memory_order_relaxed);
    used_bytes_.fetch_sub(a.size, std::memory_order_relaxed);
  }

  // The owner freed a moved range by its old name: the new range goes now,
  // unless its copy still runs (then at EndMove) or timed out (never).
  bool FreeRelocatedLocked(Segment& s, typename RelocatedMap::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    Relocated& r = it->second;
    if (r.copying) {
      r.owner_freed = true;
      return true;
    }
    MC_DASSERT(r.to.size > 0, "a moved range is sized when its copy ends");
    if (!r.quarantined) FreeLocked(s, r.to);
    s.relocated.erase(it);
    return true;
  }

  // Validates `desc` and builds its segment (not yet in the map).
  absl::StatusOr<std::shared_ptr<Segment>> NewSegment(
      const store::proto::SegmentDescriptor& desc) const {
    if (desc.worker_id().empty() || desc.name().empty() || desc.size_bytes() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "segment needs a worker_id, a name and size_bytes > 0 (worker '", desc.worker_id(),
          "', name '", desc.name(), "', size ", desc.size_bytes(), ")"));
    }
    absl::StatusOr<A> allocator = factory_(desc.size_bytes());
    if (!allocator.ok()) return allocator.status();
    auto seg = std::make_shared<Segment>(std::move(*allocator));
    seg->desc = desc;
    seg->capacity_bytes = seg->allocator.stats().capacity_bytes;
    return seg;
  }

  absl::Status CheckNameFree(const store::proto::SegmentDescriptor& desc) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(map_mu_) {
    for (const auto& [id, s] : segments_) {
      if (s->desc.worker_id() == desc.worker_id() && s->desc.name() == desc.name()) {
        return absl::AlreadyExistsError(absl::StrCat("worker '", desc.worker_id(),
                                                     "' already mounted segment '", desc.name(),
                                                     "' as id ", id));
      }
    }
    return absl::OkStatus();
  }

  void Insert(uint64_t id, std::shared_ptr<Segment> seg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(map_mu_) {
    MC_ASSERT(id != 0 && id < next_id_ && !segments_.contains(id), "segment id not free");
    seg->id = id;
    capacity_bytes_.fetch_add(seg->capacity_bytes, std::memory_order_relaxed);
    segments_.emplace(id, std::move(seg));
    ++generation_;
    table_ = nullptr;
  }

  // True if no one was ever given `id`: at or above next_id_, or in a range
  // a MountWithId skipped.
  bool IsUnassigned(uint64_t id) const ABSL_SHARED_LOCKS_REQUIRED(map_mu_) {
    if (id >= next_id_) return true;
    auto it = skipped_ids_.upper_bound(id);
    if (it == skipped_ids_.begin()) return false;
    --it;
    return id < it->second;  // it->first <= id
  }

  // REQUIRES: IsUnassigned(id).
  void MarkAssigned(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(map_mu_) {
    MC_DASSERT(IsUnassigned(id), "marking an assigned id");
    if (id >= next_id_) {
      if (id > next_id_) skipped_ids_.emplace(next_id_, id);
      next_id_ = id + 1;
      return;
    }
    auto it = std::prev(skipped_ids_.upper_bound(id));
    const auto [lo, hi] = *it;
    skipped_ids_.erase(it);
    if (lo < id) skipped_ids_.emplace(lo, id);
    if (id + 1 < hi) skipped_ids_.emplace(id + 1, hi);
  }

  std::shared_ptr<const SegmentTable> BuildTable() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(map_mu_) {
    auto t = std::make_shared<SegmentTable>();
    t->generation = generation_;
    t->segments.reserve(segments_.size());
    t->owners.reserve(segments_.size());
    absl::flat_hash_map<std::string_view, uint32_t> worker_index;
    auto intern = [](absl::flat_hash_map<std::string_view, uint32_t>& index, auto& values,
                     std::string_view v) {
      auto [it, inserted] = index.try_emplace(v, static_cast<uint32_t>(values.size()));
      if (inserted) values.push_back(v);
      return it->second;
    };
    for (const auto& [id, s] : segments_) {
      if (s->draining) continue;  // still owned by `segments_`; only placement skips it
      t->segments.push_back(SegmentTable::Entry{
          .id = id,
          .capacity_bytes = s->capacity_bytes,
          .used_bytes = &s->used_bytes,
          .worker = intern(worker_index, t->worker_ids, s->desc.worker_id()),
          .host = intern(t->host_index, t->host_ids, s->desc.endpoint().host_id()),
          .name = intern(t->name_index, t->names, s->desc.name())});
      t->owners.push_back(s);
    }
    std::sort(t->segments.begin(), t->segments.end(),
              [](const auto& a, const auto& b) { return a.id < b.id; });
    MC_ASSERT(t->worker_ids.size() < SegmentTable::kNoIndex, "worker count fits the index");
    MC_DASSERT(t->segments.size() <= segments_.size(), "one entry per mounted segment");
    return t;
  }

  std::shared_ptr<Segment> Get(uint64_t id) const {
    std::shared_lock lock(map_mu_);
    auto it = segments_.find(id);
    return it == segments_.end() ? nullptr : it->second;
  }

  Factory factory_;
  // std::shared_mutex: reads (every allocate/free) vastly outnumber mounts.
  mutable std::shared_mutex map_mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Segment>> segments_ ABSL_GUARDED_BY(map_mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(map_mu_) = 1;
  // Ids below next_id_ that MountWithId skipped and no one was given yet, as
  // disjoint [first, end) ranges keyed by first; at most one per MountWithId.
  std::map<uint64_t, uint64_t> skipped_ids_ ABSL_GUARDED_BY(map_mu_);
  uint64_t generation_ ABSL_GUARDED_BY(map_mu_) = 0;  // Mounts and Unmounts so far
  // Null after a Mount/Unmount until Candidates() rebuilds it. mutable: a cache.
  mutable std::shared_ptr<const SegmentTable> table_ ABSL_GUARDED_BY(map_mu_);
  std::atomic<uint64_t> used_bytes_{0};
  std::atomic<uint64_t> shared_bytes_{0};
  std::atomic<uint64_t> capacity_bytes_{0};
};

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_SEGMENT_POOL_H_
