// Placement: which segments receive an object's replicas.
//
// OrderCandidates ranks the mounted segments for one put (a pure function of
// a snapshot, so it is tested without a pool); PlaceReplicas walks the same
// order over the pool's shared SegmentTable, sorting only as far as it reads,
// and allocates one replica per worker (replicas always land on distinct
// workers) until it has `replica_count`, or frees what it took and fails.
// Loads are read once per put, when it begins.
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
#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
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

// A candidate's place in a put's order: ascending (rank, key, id).
// rank 0: the preferred segment; 1: on the client's host (kClientLocalFirst);
// 2: the rest. key: kRandom's hash, or the load used / capacity of the other
// strategies as its IEEE bits (a load is a finite double >= +0, and those
// order as their bits do). Ids are unique, so the order is total.
struct CandidateRank {
  uint32_t rank = 2;
  uint32_t index = 0;  // the candidate's position in its table or span
  uint64_t key = 0;
  uint64_t id = 0;

  bool operator<(const CandidateRank& o) const {
    if (rank != o.rank) return rank < o.rank;
    if (key != o.key) return key < o.key;
    return id < o.id;
  }
};

// REQUIRES: capacity_bytes > 0.
inline CandidateRank RankCandidate(const PlacementRequest& req, PlacementStrategy strategy,
                                   uint64_t id, bool on_client_host, uint64_t used_bytes,
                                   uint64_t capacity_bytes, size_t index) {
  CandidateRank r{.index = static_cast<uint32_t>(index), .id = id};
  if (req.preferred_segment_id != 0 && id == req.preferred_segment_id) {
    r.rank = 0;
  } else if (strategy == PlacementStrategy::kClientLocalFirst && on_client_host) {
    r.rank = 1;
  }
  if (strategy == PlacementStrategy::kRandom) {
    uint64_t words[2] = {id, req.seed};
    r.key = StableHash64(words, sizeof(words));
  } else {
    const double load = static_cast<double>(used_bytes) / static_cast<double>(capacity_bytes);
    MC_DASSERT(load >= 0.0 && !std::signbit(load), "a load orders as its bits");
    r.key = std::bit_cast<uint64_t>(load);
  }
  return r;
}

// Indexes into `segments`, best first. Segments smaller than the object are
// left out. O(n log n); PlaceReplicas gets the same order lazily.
inline std::vector<size_t> OrderCandidates(std::span<const SegmentView> segments,
                                           const PlacementRequest& req,
                                           PlacementStrategy strategy) {
  std::vector<CandidateRank> ranked;
  ranked.reserve(segments.size());
  for (size_t i = 0; i < segments.size(); ++i) {
    const SegmentView& s = segments[i];
    if (s.capacity_bytes >= req.size_bytes && !Excluded(req, s.id)) {
      const bool local = !req.client_host_id.empty() && s.host_id == req.client_host_id;
      ranked.push_back(
          RankCandidate(req, strategy, s.id, local, s.used_bytes, s.capacity_bytes, i));
    }
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<size_t> order;
  order.reserve(ranked.size());
  for (const CandidateRank& r : ranked) order.push_back(r.index);
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

namespace placement_internal {

// Yields `ranked` (or those of its entries that `keep` accepts) in ascending
// order, sorting only as far as the caller reads: each refill takes the best
// `chunk` entries above the last one yielded in one pass, doubling `chunk`.
// A put that reads k entries costs O(n + k log k) when k stays within the
// first chunk, O(n log(k / chunk)) passes in all otherwise.
class LazyOrder {
 public:
  // `ranked` must outlive this and not change once Next() was called.
  LazyOrder(const std::vector<CandidateRank>* ranked, size_t first_chunk)
      : ranked_(ranked), chunk_(std::max<size_t>(first_chunk, 1)) {
    best_.reserve(chunk_);
  }

  // Optional: the first chunk taken while `ranked` is being filled, saving
  // that pass. Offer every entry appended to it, then EndOffers().
  void Offer(const CandidateRank& r) {
    ++offered_;
    if (best_.size() == chunk_) {
      if (!(r < best_.back())) return;
      best_.pop_back();
    }
    best_.insert(std::upper_bound(best_.begin(), best_.end(), r), r);
  }
  void EndOffers() {
    MC_DASSERT(offered_ == ranked_->size(), "every entry was offered");
    MC_DASSERT(chunk_ <= kInsertionChunkMax, "offers insert into a small chunk");
    done_ = offered_ <= chunk_;
    chunk_ *= 2;
  }

  template <typename Keep>
  const CandidateRank* Next(Keep keep) {
    if (pos_ == best_.size()) {
      if (done_) return nullptr;
      Refill(keep);
      if (best_.empty()) return nullptr;
    }
    return &best_[pos_++];
  }

 private:
  template <typename Keep>
  void Refill(Keep keep) {
    const bool has_last = !best_.empty();
    const CandidateRank last = has_last ? best_.back() : CandidateRank{};
    best_.clear();
    pos_ = 0;
    size_t left = 0;  // entries above `last` that `keep` accepts
    if (chunk_ <= kInsertionChunkMax) {
      // One comparison for most entries: only those better than the chunk's worst move.
      for (const CandidateRank& r : *ranked_) {
        if ((has_last && !(last < r)) || !keep(r)) continue;
        ++left;
        if (best_.size() == chunk_) {
          if (!(r < best_.back())) continue;
          best_.pop_back();
        }
        best_.insert(std::upper_bound(best_.begin(), best_.end(), r), r);
      }
    } else {
      for (const CandidateRank& r : *ranked_) {
        if ((!has_last || last < r) && keep(r)) best_.push_back(r);
      }
      left = best_.size();
      if (best_.size() > chunk_) {
        std::nth_element(best_.begin(), best_.begin() + static_cast<std::ptrdiff_t>(chunk_),
                         best_.end());
        best_.resize(chunk_);
      }
      std::sort(best_.begin(), best_.end());
    }
    done_ = left <= chunk_;
    MC_DASSERT(std::is_sorted(best_.begin(), best_.end()), "a chunk is in order");
    MC_DASSERT(best_.size() == std::min(left, chunk_), "the chunk holds the best `chunk_`");
    chunk_ *= 2;
  }

  static constexpr size_t kInsertionChunkMax = 32;
  const std::vector<CandidateRank>* ranked_;
  size_t chunk_;
  size_t offered_ = 0;
  std::vector<CandidateRank> best_;
  size_t pos_ = 0;
  bool done_ = false;
};

}  // namespace placement_internal

// Allocates `req.replica_count` replicas on distinct workers. On failure
// nothing stays allocated. O(segments + k log k) for a put that tries k
// segments; no per-segment string copy or allocation (SegmentPool::Candidates).
template <alloc::Allocator A>
absl::StatusOr<ReplicaList> PlaceReplicas(SegmentPool<A>& pool, const PlacementRequest& req,
                                          PlacementStrategy strategy, bool* space_shortfall) {
  MC_DASSERT(req.replica_count >= 1 && req.size_bytes >= 1, "validated by the caller");
  *space_shortfall = false;
  const std::shared_ptr<const SegmentTable> table = pool.Candidates();
  if (table->segments.empty()) {
    return absl::UnavailableError("no segment is mounted: start a worker first");
  }
  const uint32_t client_host =
      strategy == PlacementStrategy::kClientLocalFirst && !req.client_host_id.empty()
          ? table->HostIndex(req.client_host_id)
          : SegmentTable::kNoIndex;
  // Enough for the usual put: every replica placed at its first try, plus spares.
  const size_t first_chunk = std::min<size_t>(2 * static_cast<size_t>(req.replica_count) + 6, 32);
  std::vector<CandidateRank> ranked;
  ranked.reserve(table->segments.size());
  placement_internal::LazyOrder order(&ranked, first_chunk);
  // One pass: the candidates in id order with their rank, the first chunk of
  // the order, and the distinct workers among them, counted only up to
  // replica_count (all that the check below needs).
  absl::InlinedVector<uint32_t, 8> fit_workers;
  for (size_t i = 0; i < table->segments.size(); ++i) {
    const SegmentTable::Entry& e = table->segments[i];
    if (e.capacity_bytes < req.size_bytes || Excluded(req, e.id)) continue;
    // relaxed: a load estimate; a stale one only changes which segment is tried first.
    const uint64_t used = e.used_bytes->load(std::memory_order_relaxed);
    order.Offer(ranked.emplace_back(RankCandidate(
        req, strategy, e.id, client_host != SegmentTable::kNoIndex && e.host == client_host, used,
        e.capacity_bytes, i)));
    if (fit_workers.size() < req.replica_count &&
        std::find(fit_workers.begin(), fit_workers.end(), e.worker) == fit_workers.end()) {
      fit_workers.push_back(e.worker);
    }
  }
  order.EndOffers();
  if (const size_t fit = fit_workers.size(); fit < req.replica_count) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot place ", req.replica_count, " replicas of ", req.size_bytes, " bytes: only ", fit,
        " worker(s) have a segment that large (replicas go to distinct workers)"));
  }
  ReplicaList placed;
  absl::InlinedVector<uint32_t, 8> used_workers;
  auto try_place = [&](const CandidateRank& r) {
    const SegmentTable::Entry& e = table->segments[r.index];
    if (std::find(used_workers.begin(), used_workers.end(), e.worker) != used_workers.end()) {
      return false;
    }
    std::optional<alloc::Allocation> a = pool.Allocate(e.id, req.size_bytes, req.alignment_bytes);
    if (!a.has_value()) return false;
    used_workers.push_back(e.worker);
    placed.push_back(Replica{e.id, table->worker_ids[e.worker], table->host_ids[e.host], *a,
                             ReplicaState::kAllocated});
    return true;
  };
  // O(names x segments): both are bounded (kMaxPreferredSegmentNames).
  for (size_t n = 0; n < req.preferred_segment_names.size() && placed.empty(); ++n) {
    const uint32_t name = table->NameIndex(req.preferred_segment_names[n]);
    if (name == SegmentTable::kNoIndex) continue;
    auto named = [&](const CandidateRank& r) { return table->segments[r.index].name == name; };
    placement_internal::LazyOrder named_order(&ranked, first_chunk);
    while (const CandidateRank* r = named_order.Next(named)) {
      if (try_place(*r)) break;
    }
  }
  auto any = [](const CandidateRank&) { return true; };
  while (placed.size() < req.replica_count) {
    const CandidateRank* r = order.Next(any);
    if (r == nullptr) break;
    try_place(*r);
  }
  MC_DASSERT(placed.size() <= req.replica_count, "never more replicas than asked");
  if (placed.size() == req.replica_count) return placed;
  for (const Replica& r : placed) pool.Free(r.segment_id, r.allocation);
  *space_shortfall = true;
  return absl::ResourceExhaustedError(absl::StrCat(
      "no space for ", req.replica_count, " replica(s) of ", req.size_bytes, " bytes: got ",
      placed.size(), " (", pool.used_bytes(), " of ", pool.capacity_bytes(), " bytes in use)"));
}

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_PLACEMENT_H_
