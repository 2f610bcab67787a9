// Placement: which segments receive an object's replicas.
//
// OrderCandidates ranks the mounted segments for one put (a pure function of
// a snapshot, so it is tested without a pool); PlaceReplicas walks that order
// and allocates one replica per worker (replicas always land on distinct
// workers) until it has `replica_count`, or frees what it took and fails.
//
// Strategies:
//   kRandom           a random order (a seeded hash of segment id and seed:
//                     reproducible in tests, spread across puts);
//   kLeastLoaded      ascending used/capacity, ties by id;
//   kClientLocalFirst segments on the client's host first, then least-loaded.
// A preferred segment, if given and mounted, goes first under every strategy.
// Preferred segment names come before that: the first replica goes to the
// first name with a mounted segment (any of that name, in the strategy's
// order) that has room; the other replicas follow the strategy's order.
//
// Errors: UNAVAILABLE (nothing mounted), RESOURCE_EXHAUSTED (fewer distinct
// workers with a segment large enough than replicas asked: eviction cannot
// help; or no space in enough of them now: eviction may help; the message
// says which, and PlaceReplicas sets `*space_shortfall` for the latter).
//
// Thread-safety: PlaceReplicas uses the pool's own locking; a concurrent
// put may take space between the snapshot and the allocation, which only
// makes an allocation fail and the walk move on.
#ifndef MOONCAKE_STORE_MASTER_PLACEMENT_H_
#define MOONCAKE_STORE_MASTER_PLACEMENT_H_

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/hash.h"
#include "mooncake/store/master/object_meta.h"
#include "mooncake/store/master/segment_pool.h"

namespace mooncake::master {

enum class PlacementStrategy : uint8_t { kRandom, kLeastLoaded, kClientLocalFirst };

struct PlacementRequest {
  uint64_t size_bytes = 0;
  uint32_t replica_count = 1;
  uint64_t alignment_bytes = 64;
  uint64_t preferred_segment_id = 0;                          // 0: none
  std::span<const std::string_view> preferred_segment_names;  // the first replica's, in order
  std::string_view client_host_id;                            // empty: unknown
  std::span<const uint64_t> excluded_segment_ids;             // never used
  uint64_t seed = 0;                                          // kRandom's order
};

// O(excluded): bounded by rpc::kMaxExcludedSegments.
inline bool Excluded(const PlacementRequest& req, uint64_t segment_id) {
  return std::find(req.excluded_segment_ids.begin(), req.excluded_segment_ids.end(), segment_id) !=
         req.excluded_segment_ids.end();
}

// Indexes into `segments`, best first. Segments smaller than the object are
// left out.
inline std::vector<size_t> OrderCandidates(std::span<const SegmentView> segments,
                                           const PlacementRequest& req,
                                           PlacementStrategy strategy) {
  std::vector<size_t> order;
  order.reserve(segments.size());
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].capacity_bytes >= req.size_bytes && !Excluded(req, segments[i].id)) {
      order.push_back(i);
    }
  }
  auto load = [&](size_t i) {
    const SegmentView& s = segments[i];
    return static_cast<double>(s.used_bytes) / static_cast<double>(s.capacity_bytes);
  };
  auto rank = [&](size_t i) -> int {
    if (req.preferred_segment_id != 0 && segments[i].id == req.preferred_segment_id) return 0;
    if (strategy == PlacementStrategy::kClientLocalFirst && !req.client_host_id.empty() &&
        segments[i].host_id == req.client_host_id) {
      return 1;
    }
    return 2;
  };
  if (strategy == PlacementStrategy::kRandom) {
    auto key = [&](size_t i) {
      uint64_t words[2] = {segments[i].id, req.seed};
      return StableHash64(words, sizeof(words));
    };
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return std::pair(rank(a), key(a)) < std::pair(rank(b), key(b));
    });
  } else {
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (rank(a) != rank(b)) return rank(a) < rank(b);
      if (load(a) != load(b)) return load(a) < load(b);
      return segments[a].id < segments[b].id;
    });
  }
  return order;
}

// Distinct workers owning at least one segment, not excluded, that could hold the object.
inline size_t WorkersThatFit(std::span<const SegmentView> segments, const PlacementRequest& req) {
  absl::flat_hash_set<std::string_view> workers;
  for (const SegmentView& s : segments) {
    if (s.capacity_bytes >= req.size_bytes && !Excluded(req, s.id)) {
      workers.insert(std::string_view(s.worker_id));
    }
  }
  return workers.size();
}

// Allocates `req.replica_count` replicas on distinct workers. On failure
// nothing stays allocated.
template <alloc::Allocator A>
absl::StatusOr<std::vector<Replica>> PlaceReplicas(SegmentPool<A>& pool,
                                                   const PlacementRequest& req,
                                                   PlacementStrategy strategy,
                                                   bool* space_shortfall) {
  MC_DASSERT(req.replica_count >= 1 && req.size_bytes >= 1, "validated by the caller");
  *space_shortfall = false;
  const std::vector<SegmentView> segments = pool.Snapshot();
  if (segments.empty()) {
    return absl::UnavailableError("no segment is mounted: start a worker first");
  }
  if (const size_t fit = WorkersThatFit(segments, req); fit < req.replica_count) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot place ", req.replica_count, " replicas of ", req.size_bytes, " bytes: only ", fit,
        " worker(s) have a segment that large (replicas go to distinct workers)"));
  }
  std::vector<Replica> placed;
  absl::flat_hash_set<std::string_view> used_workers;
  auto try_place = [&](const SegmentView& s) {
    if (used_workers.contains(std::string_view(s.worker_id))) return false;
    std::optional<alloc::Allocation> a = pool.Allocate(s.id, req.size_bytes, req.alignment_bytes);
    if (!a.has_value()) return false;
    used_workers.insert(std::string_view(s.worker_id));
    placed.push_back(Replica{s.id, s.worker_id, s.host_id, *a, ReplicaState::kAllocated});
    return true;
  };
  const std::vector<size_t> order = OrderCandidates(segments, req, strategy);
  // O(names x segments): both are bounded (kMaxPreferredSegmentNames).
  for (size_t n = 0; n < req.preferred_segment_names.size() && placed.empty(); ++n) {
    for (size_t i : order) {
      if (segments[i].name == req.preferred_segment_names[n] && try_place(segments[i])) break;
    }
  }
  for (size_t i : order) {
    if (placed.size() == req.replica_count) break;
    try_place(segments[i]);
  }
  if (placed.size() == req.replica_count) return placed;
  for (const Replica& r : placed) pool.Free(r.segment_id, r.allocation);
  *space_shortfall = true;
  return absl::ResourceExhaustedError(absl::StrCat(
      "no space for ", req.replica_count, " replica(s) of ", req.size_bytes, " bytes: got ",
      placed.size(), " (", pool.used_bytes(), " of ", pool.capacity_bytes(), " bytes in use)"));
}

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_PLACEMENT_H_
