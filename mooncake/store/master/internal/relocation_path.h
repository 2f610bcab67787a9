// Compaction of fragmented segments by relocation (docs/alloc.md,
// "Relocation"; MasterOptions::relocation).
//
// When a put falls short on a segment whose free bytes would hold it but no
// free extent does, and the segment's allocator relocates (TlsfAllocator,
// KvAllocator), the put asks for a compaction of that segment and comes back
// later (PutStartResponse.retry, as when SSD offloads are in flight) instead
// of evicting. Tick starts it:
//   1. The objects that may move are listed, one shard at a time: committed,
//      in no group, with a complete replica on the segment that no task reads
//      or writes (not copying, loading or offloading) and no live lease.
//      Anything else (a put being written, a clone's shared range) stays.
//   2. SegmentPool::Compact runs the allocator's AllocateRelocating over
//      those only (and only if no allocation came since the list was made):
//      each moved replica keeps its old Allocation as its name, and reads
//      keep going to the old offset; the pool frees the new range when the
//      old name is freed. The request is carved from the old extents and held
//      as a placeholder, so no put gets them while copies run.
//   3. Each move is a copy task (CopyKind::kRelocate) for the segment's
//      worker, from the old offset to the new one in the same segment, on the
//      worker's CopySync long poll (the worker writes into its own segment
//      through its router; the two ranges never overlap).
//   4. A copy that succeeds switches the replica to the new range (if the
//      object still has that version and replica; otherwise the old name
//      stays with whoever holds it). One that fails or times out drops the
//      replica as if evicted (the object too when it was the last); after a
//      timeout the new range is never reused (the worker may still write).
//   5. When every move ended and every lease taken on an old offset is over,
//      the placeholder is freed: one contiguous extent for the next put.
// With an HA master (a mutation log) nothing is compacted: a copy's target
// range is not in the oplog (docs/elasticity.md; copies are refused there for
// the same reason).
//
// Locks: shard -> segment, as everywhere; RelocationState::mu is a leaf but
// for SegmentPool::Contains (the pool's map lock, itself a leaf).
#ifndef MOONCAKE_STORE_MASTER_INTERNAL_RELOCATION_PATH_H_
#define MOONCAKE_STORE_MASTER_INTERNAL_RELOCATION_PATH_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "mooncake/alloc/allocator.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/master/copy_registry.h"
#include "mooncake/store/master/internal/master_state.h"
#include "mooncake/store/master/placement.h"

namespace mooncake::master_internal {

namespace reloc_internal {

// An object compaction may move: its replica on the segment, by offset.
struct MovableReplica {
  std::string key;
  uint64_t version = 0;
  alloc::AllocationHandle handle;
  uint64_t size = 0;
  uint64_t checksum = 0;
  uint32_t checksum_format = 0;
};

template <typename A, typename P>
bool Enabled(const MasterState<A, P>& s) {
  return s.options.relocation.enabled && s.log == nullptr;
}

// Step 1: the complete replicas on `segment` that may move, by offset.
template <typename A, typename P>
absl::flat_hash_map<uint64_t, MovableReplica> MovableOn(MasterState<A, P>& s, uint64_t segment,
                                                        int64_t now) {
  absl::flat_hash_map<uint64_t, MovableReplica> out;
  s.table.ForEach([&](ObjectTable::Shard& sh) {
    for (const auto& [key, m] : sh.objects) {
      if (!m.committed() || m.group() != nullptr || m.Copying() || m.Loading() ||
          m.ssd == master::SsdState::kOffloading || m.Leased(now)) {
        continue;
      }
      for (const Replica& r : m.replicas) {
        if (r.segment_id != segment || r.state != master::ReplicaState::kComplete) continue;
        out.emplace(r.allocation.offset,
                    MovableReplica{key.str(), m.version, r.allocation.handle, m.size_bytes,
                                   m.checksum, m.checksum_format});
      }
    }
  });
  return out;
}

// Step 5 for `job` once it has no move left: true when its placeholder may go.
inline bool Releasable(const CompactionJob& job, int64_t now) {
  return job.moves_left == 0 && now >= job.hold_until_ns;
}

template <typename A, typename P>
void ReleaseJob(MasterState<A, P>& s, const CompactionJob& job) {
  s.pool.FreePlaceholder(job.segment_id, job.placeholder);
  (job.failed ? s.metrics.compactions_failed : s.metrics.compactions_done)->Increment();
}

// One move ended (step 4): switches or drops the replica, then counts the
// move off its job (freeing the placeholder when it was the last and no
// lease is left on an old offset).
template <typename A, typename P>
void EndMove(MasterState<A, P>& s, uint64_t segment, const std::string& key, uint64_t version,
             uint64_t from_offset, uint64_t size, typename master::SegmentPool<A>::MoveEnd end) {
  using MoveEnd = typename master::SegmentPool<A>::MoveEnd;
  const int64_t now = s.Now();
  int64_t hold = 0;
  ReplicaList to_free;
  std::optional<Retired> retired;
  std::string tenant;
  PinLevel pin = PinLevel::kNone;
  uint64_t released = 0;
  s.table.With(key, [&](ObjectTable::Shard& sh) {
    auto it = sh.objects.find(key);
    Replica* rep = nullptr;
    if (it != sh.objects.end() && it->second.version == version) {
      for (Replica& r : it->second.replicas) {
        if (r.segment_id == segment && r.allocation.offset == from_offset &&
            r.state == master::ReplicaState::kComplete) {
          rep = &r;
        }
      }
    }
    if (rep == nullptr) {
      // Removed, replaced or dropped meanwhile: whoever holds the old name
      // (a deferred free) frees the new range through it. Its readers'
      // leases end by the parked entry's (or the object's) lease end.
      s.pool.EndMove(segment, from_offset, size, end, /*settle=*/false);
      if (it != sh.objects.end() && it->second.version == version) {
        if (it->second.Leased(now)) hold = it->second.lease_until_ns;
      } else if (auto d = sh.deferred.find(version); d != sh.deferred.end()) {
        if (d->second.lease_refs > 0) hold = d->second.lease_until_ns;
      }
      return;
    }
    ObjectMeta& m = it->second;
    // Leases taken before the switch read the old offset.
    if (m.Leased(now)) hold = m.lease_until_ns;
    if (m.Copying() || m.ssd == master::SsdState::kOffloading) {
      // A copy or an offload that began meanwhile reads the old offset.
      hold = std::max(hold, now + std::max(s.options.replication.task_timeout_ms,
                                           s.options.tier.task_timeout_ms) *
                                      kNsPerMs);
    }
    if (end == MoveEnd::kCopied) {
      if (std::optional<alloc::Allocation> to =
              s.pool.EndMove(segment, from_offset, size, end, /*settle=*/true)) {
        rep->allocation = *to;
        s.LogSet(key, m, now);
      }
      return;
    }
    // Failed: the replica goes as if evicted; freeing its old name frees the
    // new range (or, after a timeout, keeps it out of use).
    s.pool.EndMove(segment, from_offset, size, end, /*settle=*/false);
    to_free.push_back(*rep);
    m.replicas.erase(m.replicas.begin() + (rep - m.replicas.data()));
    tenant = m.tenant;
    pin = m.pin;
    released = m.size_bytes;
    if (m.replicas.empty() && m.ssd == master::SsdState::kNone) {
      retired = s.RetireLocked(sh, it, now, 0);
    } else {
      s.LogSet(key, m, now);
    }
  });
  s.FreeReplicas(to_free);
  s.ReleaseCharge(tenant, pin, released);
  if (retired.has_value()) s.FinishRetired(*retired, key, /*erase_from_evictor=*/true);
  if (end == MoveEnd::kCopied) {
    s.metrics.relocations->Increment();
    s.metrics.relocated_bytes->Increment(size);
  } else {
    s.metrics.relocations_failed->Increment();
  }
  std::optional<CompactionJob> done;
  {
    MutexLock lock(&s.reloc.mu);
    auto j = s.reloc.jobs.find(segment);
    if (j == s.reloc.jobs.end()) return;
    CompactionJob& job = j->second;
    MC_ASSERT(job.moves_left > 0, "a compaction ended more moves than it started");
    --job.moves_left;
    job.hold_until_ns = std::max(job.hold_until_ns, hold);
    job.failed = job.failed || end != MoveEnd::kCopied;
    if (Releasable(job, now)) {
      done = job;
      s.reloc.jobs.erase(j);
    }
  }
  if (done.has_value()) ReleaseJob(s, *done);
}

// Steps 1-3 for `segment` and a request of `size` bytes.
template <typename A, typename P>
void StartCompaction(MasterState<A, P>& s, uint64_t segment, uint64_t size, int64_t now) {
  const std::optional<store::proto::SegmentDescriptor> desc = s.pool.Descriptor(segment);
  if (!desc.has_value() || desc->endpoint().router_endpoint().empty() ||
      !s.pool.SupportsRelocation(segment)) {
    return;
  }
  const uint64_t seq = s.pool.AllocationSeq(segment);
  const absl::flat_hash_map<uint64_t, MovableReplica> movable = MovableOn(s, segment, now);
  const alloc::RelocationOptions ro{
      .max_moved_bytes = size * s.options.relocation.max_moved_factor,
      .max_alignment = std::max<uint64_t>(4096, s.options.alignment_bytes)};
  std::optional<typename master::SegmentPool<A>::Compaction> c =
      s.pool.Compact(segment, size, s.options.alignment_bytes, ro, seq,
                     [&](uint64_t offset, alloc::AllocationHandle handle) {
                       auto it = movable.find(offset);
                       return it != movable.end() && it->second.handle == handle;
                     });
  if (!c.has_value()) {
    s.metrics.compactions_no_window->Increment();
    return;
  }
  s.metrics.compactions_started->Increment();
  if (c->moves.empty()) {  // room came meanwhile: nothing to move
    s.pool.FreePlaceholder(segment, c->placeholder);
    s.metrics.compactions_done->Increment();
    return;
  }
  {
    MutexLock lock(&s.reloc.mu);
    s.reloc.jobs[segment] = CompactionJob{.segment_id = segment,
                                          .placeholder = c->placeholder,
                                          .moves_left = c->moves.size(),
                                          .started_ns = now};
  }
  using MoveEnd = typename master::SegmentPool<A>::MoveEnd;
  for (const auto& mv : c->moves) {
    auto it = movable.find(mv.from_offset);
    MC_ASSERT(it != movable.end(), "compaction moved a range it was not allowed to");
    const MovableReplica& r = it->second;
    store::proto::CopyTask t;
    t.set_key(r.key);
    t.set_version(r.version);
    t.set_src_segment_id(segment);
    t.set_src_offset(mv.from_offset);
    t.set_length(r.size);
    t.set_dst_segment_id(segment);
    t.set_dst_router_endpoint(desc->endpoint().router_endpoint());
    t.set_dst_router_segment_id(desc->endpoint().router_segment_id());
    t.set_dst_offset(mv.to_offset);
    t.set_checksum(r.checksum);
    t.set_checksum_format(static_cast<store::proto::ChecksumFormat>(r.checksum_format));
    const bool queued =
        s.repl.copies
            .Enqueue(master::CopyRecord{.task = std::move(t),
                                        .key = r.key,
                                        .worker_id = desc->worker_id(),
                                        .dst_segment_id = segment,
                                        .dst_range = {.offset = mv.to_offset, .size = r.size},
                                        .kind = master::CopyKind::kRelocate,
                                        .bytes = r.size})
            .has_value();
    if (!queued) EndMove(s, segment, r.key, r.version, mv.from_offset, r.size, MoveEnd::kFailed);
  }
}

}  // namespace reloc_internal

// From a put whose placement fell short (PlaceWithEviction): true when a
// compaction of a candidate segment that would make room is asked for or
// running, so the put should come back instead of evicting. O(segments).
template <typename A, typename P>
bool NoteFragmentedPut(MasterState<A, P>& s, const master::PlacementRequest& req) {
  if (!reloc_internal::Enabled(s)) return false;
  const std::shared_ptr<const master::SegmentTable> table = s.pool.Candidates();
  std::vector<uint64_t> fragmented;
  for (const master::SegmentTable::Entry& e : table->segments) {
    if (e.capacity_bytes < req.size_bytes || master::Excluded(req, e.id)) continue;
    const std::optional<alloc::AllocatorStats> st = s.pool.Stats(e.id);
    if (!st.has_value() || st->free_bytes < req.size_bytes ||
        st->largest_free_bytes >= req.size_bytes + req.alignment_bytes) {
      continue;
    }
    if (s.pool.SupportsRelocation(e.id)) fragmented.push_back(e.id);
  }
  if (fragmented.empty()) return false;
  const int64_t now = s.Now();
  const int64_t interval_ns = s.options.relocation.min_interval_ms * kNsPerMs;
  MutexLock lock(&s.reloc.mu);
  bool asked = false;
  for (const uint64_t id : fragmented) {
    if (auto j = s.reloc.jobs.find(id); j != s.reloc.jobs.end()) {
      asked = asked || j->second.placeholder.size >= req.size_bytes;
      continue;
    }
    if (auto r = s.reloc.requests.find(id); r != s.reloc.requests.end()) {
      r->second = std::max(r->second, req.size_bytes);
      asked = true;
      continue;
    }
    auto t = s.reloc.last_try_ns.find(id);
    if (t != s.reloc.last_try_ns.end() && now - t->second < interval_ns) continue;
    if (s.reloc.jobs.size() + s.reloc.requests.size() >= s.options.relocation.max_in_flight) {
      continue;
    }
    s.reloc.requests[id] = req.size_bytes;
    asked = true;
  }
  return asked;
}

// Tick: starts the compactions puts asked for, frees the placeholders of
// ended ones whose old offsets no lease reads any more, and forgets the
// compactions of unmounted segments.
template <typename A, typename P>
void AdvanceRelocation(MasterState<A, P>& s, int64_t now) {
  if (!reloc_internal::Enabled(s)) return;
  absl::flat_hash_map<uint64_t, uint64_t> requests;
  std::vector<CompactionJob> done;
  {
    MutexLock lock(&s.reloc.mu);
    requests.swap(s.reloc.requests);
    for (const auto& [id, size] : requests) s.reloc.last_try_ns[id] = now;
    for (auto it = s.reloc.jobs.begin(); it != s.reloc.jobs.end();) {
      if (reloc_internal::Releasable(it->second, now) || !s.pool.Contains(it->first)) {
        done.push_back(it->second);
        s.reloc.jobs.erase(it++);
      } else {
        ++it;
      }
    }
    absl::erase_if(s.reloc.last_try_ns, [&](const auto& e) {
      return now - e.second >= s.options.relocation.min_interval_ms * kNsPerMs;
    });
  }
  for (const CompactionJob& j : done) reloc_internal::ReleaseJob(s, j);
  for (const auto& [id, size] : requests) reloc_internal::StartCompaction(s, id, size, now);
}

// Ends a kRelocate copy task (from FinishCopy): `timed_out` when the worker
// took it and may still be writing.
template <typename A, typename P>
void FinishRelocationCopy(MasterState<A, P>& s, const master::CopyRecord& rec,
                          const absl::Status& st, bool timed_out) {
  using MoveEnd = typename master::SegmentPool<A>::MoveEnd;
  const MoveEnd end = st.ok()     ? MoveEnd::kCopied
                      : timed_out ? MoveEnd::kTimedOut
                                  : MoveEnd::kFailed;
  reloc_internal::EndMove(s, rec.dst_segment_id, rec.key, rec.task.version(), rec.task.src_offset(),
                          rec.bytes, end);
  const auto k = static_cast<size_t>(master::CopyKind::kRelocate);
  (st.ok() ? s.metrics.copies_ok[k] : s.metrics.copies_failed[k])->Increment();
}

}  // namespace mooncake::master_internal

#endif  // MOONCAKE_STORE_MASTER_INTERNAL_RELOCATION_PATH_H_
