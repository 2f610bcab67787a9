// The SSD tier's object-level steps: TierSync (a worker's reports and its
// long poll for tasks), loading an object that is only on SSD back into
// DRAM, ending OFFLOAD / LOAD / DROP tasks, and forgetting a worker's tier.
// The queueing and space accounting are in tier_registry.h; what starts an
// OFFLOAD is eviction (MasterState::EvictOne). docs/master.md, "SSD tier".
//
// Invariants, kept under the object's shard lock:
//   - ssd == kStored: the worker's tier acknowledged a record of this version
//     (durably); the object may then have no DRAM replica at all;
//   - ssd == kOffloading: an OFFLOAD task is queued or in flight; the DRAM
//     replicas stay readable and the object is not evictable;
//   - a kAllocated replica of a committed object: a LOAD task is filling it;
//     it is never readable and never freed by anyone but the task's end.
// A task that ends after its object changed (removed, another version) cleans
// up only its own part: an unwanted record is dropped, a load range freed.
#ifndef MOONCAKE_STORE_MASTER_INTERNAL_TIER_PATH_H_
#define MOONCAKE_STORE_MASTER_INTERNAL_TIER_PATH_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

// `stored_bytes`: the record's size on the tier as the worker reported it (0:
// unknown). The tier is then charged that, at most the raw record size reserved.
template <typename A, typename P>
void FinishOffload(MasterState<A, P>& s, master::TierTaskRecord& rec, const absl::Status& st,
                   uint64_t stored_bytes) {
  // A report below the smallest record there is (one block and a header) is not
  // believed either.
  const uint64_t charged =
      stored_bytes > 0
          ? std::clamp(stored_bytes, std::min(s.tiers.ChargeFor(1), rec.tier_bytes), rec.tier_bytes)
          : rec.tier_bytes;
  const int64_t now = s.Now();
  s.offloading_bytes.fetch_sub(rec.dram_bytes, std::memory_order_relaxed);
  bool unwanted = false;  // the object changed: this record serves nobody
  ReplicaList to_free;
  uint64_t freed = 0, readmit = 0;
  std::string tenant;
  PinLevel pin = PinLevel::kNone;
  std::optional<Retired> r;
  s.table.With(rec.key, [&](ObjectTable::Shard& sh) {
    auto it = sh.objects.find(rec.key);
    if (it == sh.objects.end() || it->second.version != rec.task.version() ||
        it->second.ssd != master::SsdState::kOffloading ||
        it->second.ssd_worker_id() != rec.worker_id) {
      unwanted = true;
      return;
    }
    ObjectMeta& m = it->second;
    if (st.ok()) {
      m.ssd = master::SsdState::kStored;
      m.extras.mut().ssd_bytes = charged;
      s.tiers.Stored(rec.worker_id, rec.key, rec.tier_bytes, charged);
      s.ssd_objects.fetch_add(1, std::memory_order_relaxed);  // last: tests wait on it
      // It was chosen for eviction: its DRAM goes now unless a read leased it
      // meanwhile (then a later eviction frees it at once, no write needed).
      if (!m.Leased(now) && m.pin != PinLevel::kHard && !m.Loading()) {
        freed = m.ChargeBytes();
        to_free = std::move(m.replicas);
        m.replicas.clear();
        s.LogSet(rec.key, m, now);
        tenant = m.tenant;
        pin = m.pin;
      } else {
        readmit = m.ChargeBytes();
      }
      return;
    }
    m.ForgetSsdCopy();
    // The tier refused or failed: evict as if it had none (retrying a broken
    // tier would only fail again). With no replica left (its segment went
    // meanwhile) the object is gone whatever leases it has.
    if (m.replicas.empty() || MasterState<A, P>::Evictable(m, now, /*allow_soft_pinned=*/true)) {
      r = s.RetireLocked(sh, it, now, 0);
    } else {
      readmit = m.ChargeBytes();
    }
  });
  if (unwanted) {
    if (st.ok()) {
      // Not the key's LRU entry: that belongs to whatever version is stored.
      s.DropSsdCopy(SsdDrop{rec.worker_id, rec.task.version(), rec.tier_bytes}, rec.key,
                    /*resident=*/false);
    } else {
      s.tiers.Unreserve(rec.worker_id, rec.tier_bytes);
    }
  } else if (!st.ok()) {
    s.tiers.Unreserve(rec.worker_id, rec.tier_bytes);
    // Refused for space although the charges said it fits: fragmentation.
    if (absl::IsResourceExhausted(st)) s.tiers.NoteRefused(rec.worker_id, rec.tier_bytes);
  }
  if (!to_free.empty()) {
    s.FreeReplicas(to_free);
    s.ReleaseCharge(tenant, pin, freed);
  }
  if (r.has_value()) s.FinishRetired(*r, rec.key, /*erase_from_evictor=*/true);
  if (readmit > 0) s.evictor.Admit(rec.key, readmit);
  (st.ok() ? s.metrics.tier_offloads : s.metrics.tier_offload_failures)->Increment();
}

// `timed_out`: the worker may still be writing the range, so it is never
// reused (quarantined until its segment is unmounted).
template <typename A, typename P>
void FinishLoad(MasterState<A, P>& s, master::TierTaskRecord& rec, const absl::Status& st,
                bool timed_out) {
  const int64_t now = s.Now();
  const uint64_t segment = rec.task.segment_id();
  bool free_range = true;
  uint64_t admit = 0, released = 0;
  std::string tenant;
  PinLevel pin = PinLevel::kNone;
  std::optional<SsdDrop> drop;
  std::optional<Retired> r;
  s.table.With(rec.key, [&](ObjectTable::Shard& sh) {
    auto it = sh.objects.find(rec.key);
    if (it == sh.objects.end() || it->second.version != rec.task.version()) return;
    ObjectMeta& m = it->second;
    auto rep = std::find_if(m.replicas.begin(), m.replicas.end(), [&](const Replica& x) {
      return x.state == master::ReplicaState::kAllocated && x.segment_id == segment &&
             x.allocation.offset == rec.load_range.offset;
    });
    if (rep == m.replicas.end()) return;  // its segment went away meanwhile
    if (st.ok()) {
      rep->state = master::ReplicaState::kComplete;
      free_range = false;
      admit = m.ChargeBytes();
      s.LogSet(rec.key, m, now);
      return;
    }
    m.replicas.erase(rep);
    released = m.size_bytes;
    tenant = m.tenant;
    pin = m.pin;
    // The record is gone or corrupt (the tier never serves wrong bytes): the
    // copy is lost, and with it the object if it has nothing else.
    if ((absl::IsNotFound(st) || absl::IsDataLoss(st)) && m.ssd == master::SsdState::kStored &&
        m.ssd_worker_id() == rec.worker_id) {
      drop = s.TakeSsdCopyLocked(m);
    }
    if (m.replicas.empty() && m.ssd == master::SsdState::kNone) {
      r = s.RetireLocked(sh, it, now, 0);
    } else {
      s.LogSet(rec.key, m, now);
    }
  });
  if (timed_out && !st.ok()) {
    free_range = false;
    s.metrics.tier_quarantined_bytes->Increment(rec.load_range.size);
  }
  if (free_range) s.pool.Free(segment, rec.load_range);
  s.ReleaseCharge(tenant, pin, released);
  if (drop.has_value()) s.DropSsdCopy(*drop, rec.key);
  if (r.has_value()) s.FinishRetired(*r, rec.key, /*erase_from_evictor=*/true);
  if (admit > 0) {
    s.evictor.Admit(rec.key, admit);
    s.tiers.TouchResident(rec.worker_id, rec.key);
  }
  (st.ok() ? s.metrics.tier_loads : s.metrics.tier_load_failures)->Increment();
}

template <typename A, typename P>
void FinishTierTask(MasterState<A, P>& s, master::TierTaskRecord& rec, const absl::Status& st,
                    bool timed_out = false, uint64_t stored_bytes = 0) {
  switch (rec.task.kind()) {
    case proto::TIER_OFFLOAD:
      FinishOffload(s, rec, st, stored_bytes);
      return;
    case proto::TIER_LOAD:
      FinishLoad(s, rec, st, timed_out);
      return;
    default:
      (st.ok() || absl::IsNotFound(st) ? s.metrics.tier_drops : s.metrics.tier_drop_failures)
          ->Increment();
      return;
  }
}

// Starts loading `key` (version `version`, only on the SSD of its
// ssd_worker_id) into a DRAM range on the same worker. OK also when another
// read started the load first or the object changed meanwhile: the caller
// reports "loading" and the client asks again. RESOURCE_EXHAUSTED: the
// tenant's quota; UNAVAILABLE: no DRAM room on that worker yet (eviction was
// started: offloads free DRAM when the tier acknowledges them), or its task
// queue is full. Readers treat UNAVAILABLE as "still loading".
template <typename A, typename P>
absl::Status StartLoad(MasterState<A, P>& s, const std::string& key, uint64_t version) {
  uint64_t size = 0;
  std::string tenant, worker;
  PinLevel pin = PinLevel::kNone;
  const bool wanted = s.table.With(key, [&](ObjectTable::Shard& sh) {
    const ObjectMeta* m = sh.Find(key);
    if (m == nullptr || m->version != version || m->ssd != master::SsdState::kStored ||
        m->Loading()) {
      return false;
    }
    size = m->size_bytes;
    tenant = m->tenant;
    pin = m->pin;
    worker = m->ssd_worker_id();
    return true;
  });
  if (!wanted) return absl::OkStatus();
  if (absl::Status st = s.AdmitCharge(tenant, pin, size); !st.ok()) return st;
  std::optional<master::Replica> dest;
  for (int attempt = 0; attempt < 2 && !dest.has_value(); ++attempt) {
    // Make room on that worker, unless offloads in flight will free enough
    // (the client asks again: evicting once per ask would empty the store).
    if (attempt == 1) {
      if (s.offloading_bytes.load(std::memory_order_relaxed) >= size) break;
      s.Evict(size, s.Now(), worker);
    }
    for (const master::SegmentView& v : s.pool.Snapshot()) {
      if (v.worker_id != worker) continue;
      if (auto a = s.pool.Allocate(v.id, size, s.options.alignment_bytes); a.has_value()) {
        dest = master::Replica{v.id, v.worker_id, v.host_id, *a, master::ReplicaState::kAllocated};
        break;
      }
    }
  }
  if (!dest.has_value()) {
    s.ReleaseCharge(tenant, pin, size);
    return absl::UnavailableError(absl::StrCat(
        "no DRAM room on worker '", AbslView(worker), "' to load '", absl::CEscape(key), "' (",
        size, " bytes) from its SSD tier; retry after eviction frees space"));
  }
  bool queued = false, raced = false;
  s.table.With(key, [&](ObjectTable::Shard& sh) {
    ObjectMeta* m = sh.Find(key);
    if (m == nullptr || m->version != version || m->ssd != master::SsdState::kStored ||
        m->ssd_worker_id() != worker || m->Loading()) {
      raced = true;
      return;
    }
    proto::TierTask t;
    t.set_kind(proto::TIER_LOAD);
    t.set_version(version);
    t.set_segment_id(dest->segment_id);
    t.set_offset(dest->allocation.offset);
    t.set_length(size);
    t.set_checksum(m->checksum);
    t.set_checksum_format(static_cast<proto::ChecksumFormat>(m->checksum_format));
    if (m->tensor() != nullptr) t.set_dtype(m->tensor()->dtype());
    queued = s.tiers
                 .Enqueue(master::TierTaskRecord{.task = std::move(t),
                                                 .key = key,
                                                 .worker_id = worker,
                                                 .load_range = dest->allocation})
                 .has_value();
    if (queued) m->replicas.push_back(*dest);
  });
  if (queued) return absl::OkStatus();
  s.pool.Free(dest->segment_id, dest->allocation);
  s.ReleaseCharge(tenant, pin, size);
  if (raced) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("worker '", AbslView(worker), "' has too many SSD tier tasks queued; retry"));
}

// Forgets `worker`'s tier (it left, expired, or says it has none): ends its
// tasks as failed and clears every SSD copy on it; an object left with no
// copy at all is gone. Returns the objects lost.
template <typename A, typename P>
uint64_t DropTierWorker(MasterState<A, P>& s, const std::string& worker) {
  if (!s.tiers.HasTier(worker)) return 0;
  // A LOAD may still be writing its range (the worker can be alive, e.g. it
  // only reported no tier): such ranges are quarantined, never reused.
  for (master::TierTaskRecord& rec : s.tiers.RemoveWorker(worker)) {
    FinishTierTask(s, rec, absl::UnavailableError("the worker's SSD tier is gone"),
                   /*timed_out=*/rec.issued);
  }
  std::vector<std::pair<std::string, Retired>> lost;
  const int64_t now = s.Now();
  s.table.ForEach([&](ObjectTable::Shard& sh) {
    for (auto it = sh.objects.begin(); it != sh.objects.end();) {
      ObjectMeta& m = it->second;
      if (m.ssd == master::SsdState::kNone || m.ssd_worker_id() != worker) {
        ++it;
        continue;
      }
      if (m.ssd == master::SsdState::kStored) s.ssd_objects.fetch_sub(1, std::memory_order_relaxed);
      m.ForgetSsdCopy();
      if (m.committed() && m.replicas.empty()) {
        std::string key = it->first.str();
        lost.emplace_back(std::move(key), s.RetireLocked(sh, it++, now, 0));
        continue;
      }
      ++it;
    }
  });
  for (auto& [key, r] : lost) s.FinishRetired(r, key, /*erase_from_evictor=*/true);
  return lost.size();
}

// TierSync and TierReport: registers the tier (capacity 0 forgets it), ends
// the reported tasks, then hands out up to max_tasks queued ones, waiting up
// to `wait` for the first (TierReport never waits).
template <typename A, typename P, typename Response, typename Request>
absl::StatusOr<Response> ReportAndTake(MasterState<A, P>& s, const Request& req,
                                       absl::Duration wait) {
  if (req.worker_id().empty()) return absl::InvalidArgumentError("tier call without worker_id");
  if (static_cast<size_t>(req.results_size()) > rpc::kMaxTierTasks ||
      req.max_tasks() > rpc::kMaxTierTasks) {
    return absl::InvalidArgumentError(
        absl::StrCat("at most ", rpc::kMaxTierTasks, " tier task results and tasks per call"));
  }
  Response resp;
  if (!s.workers.Contains(req.worker_id())) {
    DropTierWorker(s, req.worker_id());
    resp.set_remount_required(true);
    return resp;
  }
  if (req.capacity_bytes() == 0) {
    DropTierWorker(s, req.worker_id());
    return resp;
  }
  s.tiers.Report(req.worker_id(), req.capacity_bytes(), req.used_bytes());
  for (const proto::TierTaskResult& res : req.results()) {
    std::optional<master::TierTaskRecord> rec = s.tiers.Complete(res.task_id(), req.worker_id());
    if (!rec.has_value()) continue;  // timed out or unknown: already ended
    // A code from the wire: anything outside absl's range reads as UNKNOWN.
    const auto code = res.code() > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)
                          ? absl::StatusCode::kUnknown
                          : static_cast<absl::StatusCode>(res.code());
    FinishTierTask(
        s, *rec,
        code == absl::StatusCode::kOk ? absl::OkStatus() : absl::Status(code, res.message()),
        /*timed_out=*/false, res.stored_bytes());
  }
  for (proto::TierTask& t : s.tiers.Take(req.worker_id(), req.max_tasks(), wait, s.Now())) {
    *resp.add_tasks() = std::move(t);
  }
  return resp;
}

template <typename A, typename P>
absl::StatusOr<proto::TierReportResponse> TierReport(MasterState<A, P>& s,
                                                     const proto::TierReportRequest& req) {
  return ReportAndTake<A, P, proto::TierReportResponse>(s, req, absl::ZeroDuration());
}

// The wait is clamped to TierOptions::max_wait_ms (in TierRegistry::Take).
template <typename A, typename P>
absl::StatusOr<proto::TierSyncResponse> TierSync(MasterState<A, P>& s,
                                                 const proto::TierSyncRequest& req) {
  return ReportAndTake<A, P, proto::TierSyncResponse>(
      s, req, absl::Milliseconds(static_cast<int64_t>(std::min<uint64_t>(req.wait_ms(), 60'000))));
}

// Tick: tasks the workers did not finish in time end as failed.
template <typename A, typename P>
uint64_t ExpireTierTasks(MasterState<A, P>& s, int64_t now) {
  std::vector<master::TierTaskRecord> late = s.tiers.TakeTimedOut(now);
  for (master::TierTaskRecord& rec : late) {
    // Only a LOAD the worker took may still be writing its range.
    FinishTierTask(s, rec, absl::DeadlineExceededError("SSD tier task timed out"),
                   /*timed_out=*/rec.issued);
  }
  return late.size();
}

}  // namespace mooncake::master_internal

#endif  // MOONCAKE_STORE_MASTER_INTERNAL_TIER_PATH_H_
