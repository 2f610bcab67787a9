// Restore: fills a fresh master with the durable state another master
// reported to its MutationLog (mutation_log.h) and a standby replayed: the
// segments with their ids, the objects with their replicas' exact ranges,
// and the id counter. A new leader calls it once, before it serves.
//
// What comes back and what does not:
//   - segments: mounted under their old ids; their workers count as alive
//     from now (a worker that died meanwhile expires after the usual
//     heartbeat timeout);
//   - committed objects: in the table, charged to their tenants, admitted to
//     the eviction policy in the order given (a replayer gives them oldest
//     change first), with their TTL and soft-pin deadlines;
//   - pending puts: in the table with a fresh put deadline, so the writer's
//     PutEnd (retried against the new leader) commits them, and a writer that
//     is gone is timed out as usual (its space reclaimed);
//   - held ranges: space the old leader kept out of puts because a tenant's
//     write capability for it may still be live (hold_write_windows), parked
//     as deferred frees until their end (a range a restored object holds, or
//     that is not free, is skipped and counted);
//   - leases, heartbeat sequences, SSD-tier state: soft state, not restored.
// A replica whose segment is unknown, or whose range is outside the segment
// or overlaps another, is dropped (counted); an object left without a
// replica, or whose tenant is unknown or over quota, is dropped (counted).
//
// Needs a SegmentPool whose allocator has Claim (TlsfAllocator).
#ifndef MOONCAKE_STORE_MASTER_INTERNAL_RESTORE_PATH_H_
#define MOONCAKE_STORE_MASTER_INTERNAL_RESTORE_PATH_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/store/master/internal/master_state.h"

namespace mooncake::master {

struct RestoredSegment {
  uint64_t id = 0;
  store::proto::SegmentDescriptor desc;
};

// `meta`'s replicas carry the segment id, worker, host and their range
// (allocation.offset, allocation.size); handles are ignored. Deadlines
// (expire_at_ns, pin_until_ns) are in the restoring master's clock.
struct RestoredObject {
  std::string key;
  ObjectMeta meta;
};

// A range held until until_ns (the restoring master's clock).
struct RestoredHold {
  uint64_t segment_id = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  int64_t until_ns = 0;
};

struct RestoreReport {
  uint64_t segments = 0;
  uint64_t objects = 0;  // committed
  uint64_t pending = 0;
  uint64_t dropped_replicas = 0;
  uint64_t dropped_objects = 0;
  uint64_t held_ranges = 0;
  uint64_t dropped_holds = 0;  // already over, not free, or on an unknown segment
};

}  // namespace mooncake::master

namespace mooncake::master_internal {

template <typename A, typename P>
absl::StatusOr<master::RestoreReport> Restore(MasterState<A, P>& s,
                                              std::vector<master::RestoredSegment> segments,
                                              std::vector<master::RestoredObject> objects,
                                              uint64_t next_id,
                                              std::vector<master::RestoredHold> holds = {}) {
  if (s.pool.size() != 0 || s.objects.load() != 0 || s.pending_puts.load() != 0) {
    return absl::FailedPreconditionError("Restore needs a fresh master (no segment, no object)");
  }
  master::RestoreReport report;
  const int64_t now = s.Now();
  for (master::RestoredSegment& seg : segments) {
    if (absl::Status st = s.pool.MountWithId(seg.id, seg.desc); !st.ok()) {
      return absl::Status(st.code(),
                          absl::StrCat("restoring segment ", seg.id, ": ", st.message()));
    }
    s.workers.AddSegment(seg.desc.worker_id(), seg.id, now);
    ++report.segments;
  }
  // Claims in ascending offset per segment (each claim O(1) then).
  std::vector<std::tuple<uint64_t, uint64_t, size_t, size_t>> claims;  // seg, offset, obj, rep
  for (size_t i = 0; i < objects.size(); ++i) {
    const ReplicaList& reps = objects[i].meta.replicas;
    for (size_t j = 0; j < reps.size(); ++j) {
      claims.emplace_back(reps[j].segment_id, reps[j].allocation.offset, i, j);
    }
  }
  std::sort(claims.begin(), claims.end());
  std::vector<std::vector<bool>> kept(objects.size());
  for (size_t i = 0; i < objects.size(); ++i)
    kept[i].assign(objects[i].meta.replicas.size(), false);
  for (const auto& [seg, offset, i, j] : claims) {
    Replica& r = objects[i].meta.replicas[j];
    std::optional<alloc::Allocation> a = s.pool.Claim(seg, offset, r.allocation.size);
    if (!a.has_value()) {
      ++report.dropped_replicas;
      continue;
    }
    r.allocation = *a;
    kept[i][j] = true;
  }
  uint64_t max_id = next_id;
  for (size_t i = 0; i < objects.size(); ++i) {
    master::RestoredObject& o = objects[i];
    ObjectMeta& m = o.meta;
    ReplicaList live;
    for (size_t j = 0; j < m.replicas.size(); ++j) {
      if (kept[i][j]) live.push_back(std::move(m.replicas[j]));
    }
    m.replicas = std::move(live);
    max_id = std::max({max_id, m.put_id + 1, m.version + 1});
    m.lease_refs = 0;
    m.lease_until_ns = 0;
    m.ForgetSsdCopy();
    const bool usable = !m.replicas.empty() && s.ResolveTenant(m.tenant).ok() &&
                        s.AdmitCharge(m.tenant, m.pin, m.ChargeBytes()).ok();
    if (!usable) {
      s.FreeReplicas(m.replicas);
      ++report.dropped_objects;
      continue;
    }
    const uint64_t charge = m.ChargeBytes();
    const uint64_t size = m.size_bytes;
    const bool committed = m.committed();
    if (committed) s.models.Add(m, +1);  // before the move; undone below if not inserted
    if (!committed) m.pending_put.mut().put_deadline_ns = now + s.options.put_timeout_ms * kNsPerMs;
    const int64_t deadline = committed ? m.expire_at_ns() : m.pending_put.get().put_deadline_ns;
    const uint64_t id = committed ? m.version : m.put_id;
    const bool inserted = s.table.With(o.key, [&](ObjectTable::Shard& sh) {
      return sh.objects.try_emplace(o.key, std::move(m)).second;  // no move when taken
    });
    if (!inserted) {  // the same key twice: keep the first
      if (committed) s.models.Add(m, -1);
      s.FreeReplicas(m.replicas);
      s.ReleaseCharge(m.tenant, m.pin, charge);
      ++report.dropped_objects;
      continue;
    }
    if (committed) {
      s.objects.fetch_add(1, std::memory_order_relaxed);
      s.object_bytes.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
      s.evictor.Admit(o.key, charge);
      if (deadline != 0) s.ttl_deadlines.Push(deadline, id, o.key);
      ++report.objects;
    } else {
      s.pending_puts.fetch_add(1, std::memory_order_relaxed);
      s.put_deadlines.Push(deadline, id, o.key);
      ++report.pending;
    }
  }
  s.ids.AdvanceTo(max_id);
  // After the objects: a range one of them holds stays theirs.
  std::sort(holds.begin(), holds.end(), [](const auto& a, const auto& b) {
    return std::tie(a.segment_id, a.offset) < std::tie(b.segment_id, b.offset);
  });
  absl::flat_hash_map<uint64_t, const std::string*> worker_of;  // segment id -> its worker
  if (!holds.empty()) {
    for (const master::RestoredSegment& seg : segments) worker_of[seg.id] = &seg.desc.worker_id();
  }
  for (const master::RestoredHold& h : holds) {
    const auto seg = worker_of.find(h.segment_id);
    std::optional<alloc::Allocation> a;
    if (h.until_ns > now && h.length > 0 && seg != worker_of.end()) {
      a = s.pool.Claim(h.segment_id, h.offset, h.length);
    }
    if (!a.has_value()) {
      ++report.dropped_holds;
      continue;
    }
    Replica rep;
    rep.segment_id = h.segment_id;
    rep.worker_id = *seg->second;
    rep.allocation = *a;
    rep.state = master::ReplicaState::kComplete;
    const uint64_t id = s.ids.Next();
    // Parked under a key no client can name (keys are never empty).
    const bool parked = s.table.With("", [&](ObjectTable::Shard& sh) {
      ReplicaList reps;
      reps.push_back(std::move(rep));
      return sh.deferred.emplace(id, master::DeferredFree{"", std::move(reps), 0, 0, h.until_ns})
          .second;
    });
    if (parked) {
      s.deferred_entries.fetch_add(1, std::memory_order_relaxed);
      ++report.held_ranges;
    } else {
      s.pool.Free(h.segment_id, *a);
      ++report.dropped_holds;
    }
  }
  return report;
}

}  // namespace mooncake::master_internal

#endif  // MOONCAKE_STORE_MASTER_INTERNAL_RESTORE_PATH_H_
