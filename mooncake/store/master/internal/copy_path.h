// One copy between workers (docs/elasticity.md): counting reads toward
// hotness, choosing a destination, starting a copy and ending it with the
// worker's result. The planners that start copies and the RPCs are in
// replication_path.h.
//
// One copy: the master reserves a range on a destination worker and adds it
// to the object as a kCopying replica (never readable), charges the tenant,
// and queues a CopyTask for the worker holding the source replica. On the
// worker's OK the replica becomes kComplete; a move (drain, CreateMoveTask)
// then drops the source replica (its space is freed once the object's read
// leases end). Invariants, kept under the object's shard lock:
//   - a kCopying replica belongs to its task: only the task's end frees its
//     range (a timed-out task's range is never reused: the worker may still
//     be writing it; it is quarantined until its segment is unmounted);
//   - a copy is committed only if the object still has the version it had
//     when the copy began, so a replaced or re-put key never gets old bytes.
#ifndef MOONCAKE_STORE_MASTER_INTERNAL_COPY_PATH_H_
#define MOONCAKE_STORE_MASTER_INTERNAL_COPY_PATH_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/master/internal/master_state.h"
#include "mooncake/store/rpc/master_methods.h"

namespace mooncake::master_internal {

namespace proto = ::mooncake::store::proto;

// What one copy should do.
struct CopyPlan {
  master::CopyKind kind = master::CopyKind::kUser;
  uint64_t src_segment_id = 0;   // 0: any complete replica (the first not draining)
  bool drop_source = false;      // a move: drop the source replica once copied
  std::string_view target_name;  // "": any segment; else a segment of that name
  uint64_t user_task_id = 0;
};

// ---- Reads feed the hot planner ----------------------------------------------

// Under the shard lock of a committed object just read: counts the read in
// its window and, the moment it crosses the hot threshold, hands the key to
// the hot planner.
template <typename A, typename P>
void NoteRead(MasterState<A, P>& s, const std::string& key, ObjectMeta& m, int64_t now,
              uint32_t reads = 1) {
  m.last_used_ns = now;
  const master::ReplicationOptions& o = s.repl.options;
  const int64_t window_ns = o.hot_window_ms * kNsPerMs;
  if (now - m.window_start_ns >= window_ns) {
    m.window_start_ns = now;
    m.window_reads = 0;
  }
  const uint32_t before = m.window_reads;
  m.window_reads =
      static_cast<uint16_t>(before + std::min(reads, master::kMaxWindowReads - before));
  // The moment the window crosses the threshold (once per window).
  if (o.hot_reads == 0 || before >= o.hot_reads || m.window_reads < o.hot_reads) return;
  if (m.replicas.size() >= o.hot_max_replicas) return;
  MutexLock lock(&s.repl.inbox_mu);
  if (s.repl.hot_inbox.size() < 4096) s.repl.hot_inbox.push_back(key);
  s.repl.inbox_dirty.store(true, std::memory_order_relaxed);
}

// How hot an object is now, for "hottest first": reads in its current window
// (0 once the window is over), then how recently it was read.
inline std::pair<uint64_t, int64_t> Heat(const ObjectMeta& m, int64_t now, int64_t window_ns) {
  const uint64_t reads = now - m.window_start_ns < 2 * window_ns ? m.window_reads : 0;
  return {reads, m.last_used_ns};
}

// ---- One copy -------------------------------------------------------------------

// A range for `size` bytes on a placement candidate (mounted, not draining)
// whose worker is not in `busy_workers`, of name `name` if given; least
// loaded first. nullopt: none has room.
template <typename A, typename P>
std::optional<Replica> AllocateDestination(MasterState<A, P>& s, uint64_t size,
                                           const std::vector<std::string>& busy_workers,
                                           std::string_view name) {
  const std::shared_ptr<const master::SegmentTable> table = s.pool.Candidates();
  std::vector<std::pair<double, size_t>> order;
  for (size_t i = 0; i < table->segments.size(); ++i) {
    const master::SegmentTable::Entry& e = table->segments[i];
    if (e.capacity_bytes < size) continue;
    if (!name.empty() && table->names[e.name] != name) continue;
    const std::string_view w = table->worker_ids[e.worker];
    if (std::find(busy_workers.begin(), busy_workers.end(), w) != busy_workers.end()) continue;
    const double load = static_cast<double>(e.used_bytes->load(std::memory_order_relaxed)) /
                        static_cast<double>(e.capacity_bytes);
    order.emplace_back(load, i);
  }
  std::sort(order.begin(), order.end());
  for (const auto& [load, i] : order) {
    const master::SegmentTable::Entry& e = table->segments[i];
    if (auto a = s.pool.Allocate(e.id, size, s.options.alignment_bytes); a.has_value()) {
      return Replica{e.id, table->worker_ids[e.worker], table->host_ids[e.host], *a,
                     master::ReplicaState::kCopying};
    }
  }
  return std::nullopt;
}

// Starts one copy of `key`. Errors: NOT_FOUND (no such committed object, or
// no complete replica where the plan says), FAILED_PRECONDITION (every
// worker already holds a replica), RESOURCE_EXHAUSTED (no room, the tenant's
// quota, the worker's task queue), UNAVAILABLE (the destination serves no
// transport router).
template <typename A, typename P>
absl::Status StartCopy(MasterState<A, P>& s, const std::string& key, const CopyPlan& plan) {
  uint64_t size = 0, version = 0;
  std::string tenant;
  PinLevel pin = PinLevel::kNone;
  Replica src;
  std::vector<std::string> busy;
  absl::Status why = absl::NotFoundError(absl::StrCat("key '", absl::CEscape(key), "' not found"));
  const bool found = s.table.With(key, [&](ObjectTable::Shard& sh) {
    ObjectMeta* m = sh.Find(key);
    if (m == nullptr || !m->Visible(s.Now())) return false;
    const Replica* from = nullptr;
    for (const Replica& r : m->replicas) {
      busy.push_back(r.worker_id);
      if (r.state != master::ReplicaState::kComplete || from != nullptr) continue;
      if (plan.src_segment_id != 0 ? r.segment_id == plan.src_segment_id
                                   : !s.pool.IsDraining(r.segment_id)) {
        from = &r;
      }
    }
    if (from == nullptr && plan.src_segment_id == 0) {
      for (const Replica& r : m->replicas) {
        if (r.state == master::ReplicaState::kComplete) from = &r;  // all draining: any
      }
    }
    if (from == nullptr) {
      why = absl::NotFoundError(absl::StrCat("key '", absl::CEscape(key),
                                             "' has no complete replica on the source segment"));
      return false;
    }
    src = *from;
    size = m->size_bytes;
    version = m->version;
    tenant = m->tenant;
    pin = m->pin;
    return true;
  });
  if (!found) return why;
  RETURN_IF_ERROR(s.AdmitCharge(tenant, pin, size));
  std::optional<Replica> dst = AllocateDestination(s, size, busy, plan.target_name);
  if (!dst.has_value() &&
      (plan.kind == master::CopyKind::kDrain || plan.kind == master::CopyKind::kRepair)) {
    // A drain or a repair keeps what is hot: the pool's least recently used
    // objects on workers that could take this copy make room (a hot extra
    // never evicts anything). Objects elsewhere keep their place in the
    // eviction order.
    s.EvictWhere(size, s.Now(), /*max_victims=*/64, {}, [&](const ObjectMeta& m) {
      return std::any_of(m.replicas.begin(), m.replicas.end(), [&](const Replica& r) {
        return r.state == master::ReplicaState::kComplete && !s.pool.IsDraining(r.segment_id) &&
               std::find(busy.begin(), busy.end(), r.worker_id) == busy.end();
      });
    });
    dst = AllocateDestination(s, size, busy, plan.target_name);
  }
  if (!dst.has_value()) {
    s.ReleaseCharge(tenant, pin, size);
    if (!plan.target_name.empty()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("no room for ", size, " bytes of '", absl::CEscape(key), "' on segment '",
                       AbslView(plan.target_name),
                       "' (or it is not mounted, draining, or on a worker holding a replica)"));
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "no worker without a replica of '", absl::CEscape(key), "' has room for ", size, " bytes"));
  }
  std::optional<proto::SegmentDescriptor> desc = s.pool.Descriptor(dst->segment_id);
  if (!desc.has_value() || desc->endpoint().router_endpoint().empty()) {
    s.pool.Free(dst->segment_id, dst->allocation);
    s.ReleaseCharge(tenant, pin, size);
    return absl::UnavailableError(
        absl::StrCat("segment ", dst->segment_id, " serves no transport router to copy into"));
  }
  absl::Status st = absl::OkStatus();
  s.table.With(key, [&](ObjectTable::Shard& sh) {
    ObjectMeta* m = sh.Find(key);
    const bool same = m != nullptr && m->version == version &&
                      std::any_of(m->replicas.begin(), m->replicas.end(), [&](const Replica& r) {
                        return r.segment_id == src.segment_id &&
                               r.allocation.offset == src.allocation.offset &&
                               r.state == master::ReplicaState::kComplete;
                      });
    if (!same) {
      st = absl::NotFoundError(
          absl::StrCat("key '", absl::CEscape(key), "' changed while its copy was planned"));
      return;
    }
    proto::CopyTask t;
    t.set_key(key);
    t.set_version(version);
    t.set_src_segment_id(src.segment_id);
    t.set_src_offset(src.allocation.offset);
    t.set_length(size);
    t.set_dst_segment_id(dst->segment_id);
    t.set_dst_router_endpoint(desc->endpoint().router_endpoint());
    t.set_dst_router_segment_id(desc->endpoint().router_segment_id());
    t.set_dst_offset(dst->allocation.offset);
    t.set_checksum(m->checksum);
    t.set_checksum_format(static_cast<proto::ChecksumFormat>(m->checksum_format));
    const bool queued =
        s.repl.copies
            .Enqueue(master::CopyRecord{.task = std::move(t),
                                        .key = key,
                                        .worker_id = src.worker_id,
                                        .dst_segment_id = dst->segment_id,
                                        .dst_range = dst->allocation,
                                        .kind = plan.kind,
                                        .user_task_id = plan.user_task_id,
                                        .drop_segment_id = plan.drop_source ? src.segment_id : 0,
                                        .bytes = size})
            .has_value();
    if (!queued) {
      st = absl::ResourceExhaustedError(
          absl::StrCat("worker '", src.worker_id.str(), "' has too many copy tasks queued; retry"));
      return;
    }
    dst->hot_extra = plan.kind == master::CopyKind::kHot;
    m->replicas.push_back(*dst);
  });
  if (!st.ok()) {
    s.pool.Free(dst->segment_id, dst->allocation);
    s.ReleaseCharge(tenant, pin, size);
    return st;
  }
  return absl::OkStatus();
}

// Under the shard lock: takes the complete replica on `segment` out of `m`;
// its space is returned in `to_free`, or parked while `m` is leased.
inline bool DropReplicaLocked(ObjectTable::Shard& sh, const std::string& key, ObjectMeta& m,
                              uint64_t segment, int64_t now, uint64_t park_id, ReplicaList& to_free,
                              std::atomic<uint64_t>& deferred) {
  auto it = std::find_if(m.replicas.begin(), m.replicas.end(), [&](const Replica& r) {
    return r.segment_id == segment && r.state == master::ReplicaState::kComplete;
  });
  if (it == m.replicas.end()) return false;
  Replica r = std::move(*it);
  m.replicas.erase(it);
  if (m.Leased(now)) {
    // Freed when the object's last lease would have ended; the lease table
    // drops references by the object's version, not this record's id.
    if (sh.deferred
            .emplace(
                park_id,
                master::DeferredFree{key, {std::move(r)}, 0, m.lease_until_ns, m.lease_until_ns})
            .second) {
      deferred.fetch_add(1, std::memory_order_relaxed);
    }
  } else {
    to_free.push_back(std::move(r));
  }
  return true;
}

template <typename A, typename P>
void NoteCopyEnded(MasterState<A, P>& s, const master::CopyRecord& rec, const absl::Status& st);
template <typename A, typename P>
void FinishRelocationCopy(MasterState<A, P>& s, const master::CopyRecord& rec,
                          const absl::Status& st, bool timed_out);

// Ends one copy task with the worker's result (or a timeout: `timed_out`
// true when the worker took it and may still be writing).
template <typename A, typename P>
void FinishCopy(MasterState<A, P>& s, master::CopyRecord& rec, absl::Status st, bool timed_out) {
  if (rec.kind == master::CopyKind::kRelocate) {  // a move within a segment (relocation_path.h)
    FinishRelocationCopy(s, rec, st, timed_out);
    return;
  }
  const int64_t now = s.Now();
  bool free_range = true;
  uint64_t released = 0;
  std::string tenant;
  PinLevel pin = PinLevel::kNone;
  ReplicaList to_free;
  std::optional<Retired> retired;
  s.table.With(rec.key, [&](ObjectTable::Shard& sh) {
    auto it = sh.objects.find(rec.key);
    if (it == sh.objects.end() || it->second.version != rec.task.version()) {
      if (st.ok()) st = absl::NotFoundError("the object was removed or replaced during its copy");
      return;
    }
    ObjectMeta& m = it->second;
    auto rep = std::find_if(m.replicas.begin(), m.replicas.end(), [&](const Replica& x) {
      return x.state == master::ReplicaState::kCopying && x.segment_id == rec.dst_segment_id &&
             x.allocation.offset == rec.dst_range.offset;
    });
    if (rep == m.replicas.end()) {  // its segment went away meanwhile (charge released then)
      free_range = false;
      if (st.ok()) st = absl::UnavailableError("the destination segment was unmounted");
      return;
    }
    tenant = m.tenant;
    pin = m.pin;
    if (st.ok()) {
      rep->state = master::ReplicaState::kComplete;
      free_range = false;
      if (rec.drop_segment_id != 0) {
        if (DropReplicaLocked(sh, rec.key, m, rec.drop_segment_id, now, s.ids.Next(), to_free,
                              s.deferred_entries)) {
          released = m.size_bytes;
        }
      }
      s.LogSet(rec.key, m, now);
      return;
    }
    m.replicas.erase(rep);
    released = m.size_bytes;
    if (m.replicas.empty() && m.ssd == master::SsdState::kNone) {
      retired = s.RetireLocked(sh, it, now, 0);
    }
  });
  if (timed_out && !st.ok()) {
    free_range = false;  // the worker may still write it
    s.metrics.tier_quarantined_bytes->Increment(rec.dst_range.size);
  }
  if (free_range) s.pool.Free(rec.dst_segment_id, rec.dst_range);
  s.FreeReplicas(to_free);
  s.ReleaseCharge(tenant, pin, released);
  if (retired.has_value()) s.FinishRetired(*retired, rec.key, /*erase_from_evictor=*/true);
  const auto k = static_cast<size_t>(rec.kind);
  (st.ok() ? s.metrics.copies_ok[k] : s.metrics.copies_failed[k])->Increment();
  if (st.ok()) s.metrics.copied_bytes->Increment(rec.bytes);
  s.repl.copies.EndUserPart(rec.user_task_id, st);
  NoteCopyEnded(s, rec, st);
}

}  // namespace mooncake::master_internal

#endif  // MOONCAKE_STORE_MASTER_INTERNAL_COPY_PATH_H_
