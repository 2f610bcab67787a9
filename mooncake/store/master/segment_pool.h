// SegmentPool<A>: the mounted segments, each carved by its own Allocator A.
//
// The master never touches segment bytes: a segment is a size, an owner
// (worker, host) and an endpoint, and A hands out [offset, size) ranges of it.
// Segment ids are assigned here, start at 1 and are never reused in a pool's
// life, so an allocation of an unmounted segment can never be freed into a
// newer one: Free of an unknown segment id is a no-op that returns false.
//
// A is built per segment by a factory (capacity -> StatusOr<A>); the default
// comes from SegmentAllocatorTraits<A> (defined for TlsfAllocator; give the
// factory explicitly for other models, e.g. a KvAllocator with block classes).
//
// Thread-safety: every method may run concurrently. The segment map is under a
// shared mutex (Mount/Unmount exclusive, the rest shared); each segment's
// allocator under its own mutex, so allocations in different segments run in
// parallel. used_bytes/capacity_bytes are lock-free atomics.
#ifndef MOONCAKE_STORE_MASTER_SEGMENT_POOL_H_
#define MOONCAKE_STORE_MASTER_SEGMENT_POOL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "mooncake/alloc/allocator.h"
#include "mooncake/alloc/tlsf_allocator.h"
#include "mooncake/base/assert.h"
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
    std::unique_lock lock(map_mu_);
    for (const auto& [id, s] : segments_) {
      if (s->desc.worker_id() == desc.worker_id() && s->desc.name() == desc.name()) {
        return absl::AlreadyExistsError(absl::StrCat("worker '", desc.worker_id(),
                                                     "' already mounted segment '", desc.name(),
                                                     "' as id ", id));
      }
    }
    const uint64_t id = next_id_++;
    seg->id = id;
    capacity_bytes_.fetch_add(seg->capacity_bytes, std::memory_order_relaxed);
    segments_.emplace(id, std::move(seg));
    return id;
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
    }
    // A call that fetched `s` before the erase sees `dead` under s->mu and
    // leaves the totals alone, so they are subtracted exactly once.
    absl::MutexLock lock(&s->mu);
    s->dead = true;
    capacity_bytes_.fetch_sub(s->capacity_bytes, std::memory_order_relaxed);
    used_bytes_.fetch_sub(s->used_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return absl::OkStatus();
  }

  // nullopt if the segment is gone or A cannot serve the request.
  std::optional<alloc::Allocation> Allocate(uint64_t id, uint64_t size, uint64_t alignment) {
    std::shared_ptr<Segment> s = Get(id);
    if (s == nullptr) return std::nullopt;
    absl::MutexLock lock(&s->mu);
    if (s->dead) return std::nullopt;
    std::optional<alloc::Allocation> a = s->allocator.allocate(size, alignment);
    if (a.has_value()) {
      // relaxed: statistics; the allocator's state is under s->mu.
      s->used_bytes.fetch_add(a->size, std::memory_order_relaxed);
      used_bytes_.fetch_add(a->size, std::memory_order_relaxed);
    }
    return a;
  }

  // Returns `a` to segment `id`; false (nothing done) if it was unmounted.
  // REQUIRES: `a` came from Allocate(id, ...) and is live.
  bool Free(uint64_t id, const alloc::Allocation& a) {
    std::shared_ptr<Segment> s = Get(id);
    if (s == nullptr) return false;
    absl::MutexLock lock(&s->mu);
    if (s->dead) return false;
    s->allocator.free(a);
    s->used_bytes.fetch_sub(a.size, std::memory_order_relaxed);
    used_bytes_.fetch_sub(a.size, std::memory_order_relaxed);
    return true;
  }

  bool Contains(uint64_t id) const {
    std::shared_lock lock(map_mu_);
    return segments_.contains(id);
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

  std::optional<alloc::AllocatorStats> Stats(uint64_t id) const {
    std::shared_ptr<Segment> s = Get(id);
    if (s == nullptr) return std::nullopt;
    absl::MutexLock lock(&s->mu);
    return s->allocator.stats();
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
    return {id != 0 && id < next_id_ ? IdState::kUnmounted : IdState::kUnknown, std::nullopt};
  }

  uint64_t used_bytes() const { return used_bytes_.load(std::memory_order_relaxed); }
  uint64_t capacity_bytes() const { return capacity_bytes_.load(std::memory_order_relaxed); }
  size_t size() const {
    std::shared_lock lock(map_mu_);
    return segments_.size();
  }

 private:
  struct Segment {
    explicit Segment(A a) : allocator(std::move(a)) {}
    uint64_t id = 0;
    store::proto::SegmentDescriptor desc;  // immutable after Mount
    uint64_t capacity_bytes = 0;
    absl::Mutex mu;
    A allocator ABSL_GUARDED_BY(mu);
    bool dead ABSL_GUARDED_BY(mu) = false;  // unmounted; allocator no longer used
    std::atomic<uint64_t> used_bytes{0};
  };

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
  std::atomic<uint64_t> used_bytes_{0};
  std::atomic<uint64_t> capacity_bytes_{0};
};

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_SEGMENT_POOL_H_
