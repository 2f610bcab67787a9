// Copies between workers: CopySync (a worker's reports and its long poll for
// copy tasks) and the three planners that
// start copies on their own — drain (a worker leaving), repair (a worker
// lost) and hot replicas (an object read often) — plus the user tasks of
// CreateCopyTask / CreateMoveTask / QueryTask. docs/elasticity.md.
//
// One copy's start and end are in copy_path.h.
// Planners run under ReplicationState::plan_mu (one at a time) and take
// shard locks one at a time.
#ifndef MOONCAKE_STORE_MASTER_INTERNAL_REPLICATION_PATH_H_
#define MOONCAKE_STORE_MASTER_INTERNAL_REPLICATION_PATH_H_

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
#include "mooncake/store/master/internal/copy_path.h"
#include "mooncake/store/master/internal/master_state.h"
#include "mooncake/store/rpc/master_methods.h"

namespace mooncake::master_internal {

namespace proto = ::mooncake::store::proto;

// ---- Planners ---------------------------------------------------------------------

// Objects with a complete replica on `segments`, hottest first.
template <typename A, typename P>
std::deque<std::string> ObjectsOn(MasterState<A, P>& s, const std::vector<uint64_t>& segments,
                                  int64_t now) {
  const absl::flat_hash_set<uint64_t> on(segments.begin(), segments.end());
  const int64_t window_ns = s.repl.options.hot_window_ms * kNsPerMs;
  std::vector<std::tuple<std::pair<uint64_t, int64_t>, std::string>> found;
  s.table.ForEach([&](ObjectTable::Shard& sh) {
    for (const auto& [key, m] : sh.objects) {
      if (!m.committed()) continue;
      for (const Replica& r : m.replicas) {
        if (r.state == master::ReplicaState::kComplete && on.contains(r.segment_id)) {
          found.emplace_back(Heat(m, now, window_ns), key);
          break;
        }
      }
    }
  });
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return std::get<0>(a) > std::get<0>(b); });
  std::deque<std::string> out;
  for (auto& [heat, key] : found) out.push_back(std::move(key));
  return out;
}

// For a drain: what to do with `key`'s replica on the job's segments.
enum class DrainStep : uint8_t { kGone, kDrop, kCopy };

template <typename A, typename P>
DrainStep DrainOne(MasterState<A, P>& s, DrainJob& job, const std::string& key, int64_t now,
                   uint64_t* src_segment, uint64_t* size) {
  ReplicaList to_free;
  uint64_t released = 0;
  std::string tenant;
  PinLevel pin = PinLevel::kNone;
  DrainStep step = DrainStep::kGone;
  s.table.With(key, [&](ObjectTable::Shard& sh) {
    ObjectMeta* m = sh.Find(key);
    if (m == nullptr || !m->committed()) return;
    const Replica* here = nullptr;
    size_t elsewhere = 0;
    for (const Replica& r : m->replicas) {
      if (r.state != master::ReplicaState::kComplete) continue;
      const bool on_job =
          std::find(job.segments.begin(), job.segments.end(), r.segment_id) != job.segments.end();
      if (on_job && here == nullptr) here = &r;
      if (!on_job && !s.pool.IsDraining(r.segment_id)) ++elsewhere;
    }
    if (here == nullptr) return;
    *size = m->size_bytes;
    const size_t want = std::max<size_t>(1, m->replica_target);
    if (elsewhere >= want) {
      // Enough copies elsewhere: this one just goes.
      if (DropReplicaLocked(sh, key, *m, here->segment_id, now, s.ids.Next(), to_free,
                            s.deferred_entries)) {
        released = m->size_bytes;
        tenant = m->tenant;
        pin = m->pin;
        s.LogSet(key, *m, now);
      }
      step = DrainStep::kDrop;
      return;
    }
    *src_segment = here->segment_id;
    step = DrainStep::kCopy;
  });
  s.FreeReplicas(to_free);
  s.ReleaseCharge(tenant, pin, released);
  return step;
}

// When an object was last used, for a drain: now while a read lease is out
// (a client reads it from its metadata cache, which the master does not see
// read by read), else its last read or commit.
inline int64_t LastUse(const ObjectMeta& m, int64_t now) {
  return m.Leased(now) ? now : m.last_used_ns;
}

// For a drain of `segments`: the objects the pool keeps. If everything
// stored fits below the other workers' high watermark, all of them
// (INT64_MIN). Else the most recently used objects (LastUse) that fit there,
// as the reference LRU policy would keep them: the time from which on an
// object stays (objects used at that very time stay too). One
// walk of the object table and a sort of (time, bytes) pairs: O(n log n),
// 16 bytes per object while it runs.
template <typename A, typename P>
int64_t KeepSince(MasterState<A, P>& s, const std::vector<uint64_t>& segments, int64_t now) {
  double room = 0, stored = 0;
  for (const master::SegmentView& v : s.pool.Snapshot()) {
    stored += static_cast<double>(v.used_bytes);
    const bool on_job = std::find(segments.begin(), segments.end(), v.id) != segments.end();
    if (!on_job && !s.pool.IsDraining(v.id)) {
      room += static_cast<double>(v.capacity_bytes) * s.options.high_watermark;
    }
  }
  if (stored <= room) return INT64_MIN;
  std::vector<std::pair<int64_t, uint64_t>> all;  // (last used, segment bytes held)
  s.table.ForEach([&](ObjectTable::Shard& sh) {
    for (const auto& [key, m] : sh.objects) {
      if (!m.committed()) continue;
      uint64_t n = 0;
      for (const Replica& r : m.replicas) n += r.state == master::ReplicaState::kComplete;
      if (n > 0) all.emplace_back(LastUse(m, now), m.size_bytes * n);
    }
  });
  std::sort(all.begin(), all.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  double used = 0;
  for (const auto& [since, bytes] : all) {
    used += static_cast<double>(bytes);
    if (used > room) return since;
  }
  return INT64_MIN;
}

// At a drain's start: the objects the pool would not keep (KeepSince; not
// pinned ones) are evicted now rather than copied, so they never push
// objects the pool keeps out of the other workers, and the destinations'
// evictions meet their own least recently used objects first. A leased one
// stays readable until the worker leaves.
template <typename A, typename P>
void DropUnkept(MasterState<A, P>& s, DrainJob& job, int64_t since, int64_t now) {
  if (since == INT64_MIN) return;
  std::deque<std::string> todo;
  for (std::string& key : job.todo) {
    const bool keep = s.table.With(key, [&](ObjectTable::Shard& sh) {
      const ObjectMeta* m = sh.Find(key);
      return m == nullptr || LastUse(*m, now) >= since || m->EffectivePin(now) != PinLevel::kNone;
    });
    if (keep) {
      todo.push_back(std::move(key));
      continue;
    }
    // Its key stays in the policy until a scan meets it (the evictor's
    // contract for gone objects): erasing it here could race a new put of
    // the same key.
    s.EvictOne(key, now, /*soft=*/false, job.worker_id);
    job.status.set_objects_dropped(job.status.objects_dropped() + 1);
  }
  job.todo = std::move(todo);
}

// The bytes of the objects `items` name (key_of(item); those gone count 0),
// summed until past `cap`.
template <typename A, typename P, typename Items, typename KeyOf>
uint64_t BytesOf(MasterState<A, P>& s, const Items& items, KeyOf key_of,
                 uint64_t cap = UINT64_MAX) {
  uint64_t n = 0;
  for (const auto& item : items) {
    const std::string& key = key_of(item);
    n += s.table.With(key, [&](ObjectTable::Shard& sh) -> uint64_t {
      const ObjectMeta* m = sh.Find(key);
      return m == nullptr ? 0 : m->size_bytes;
    });
    if (n > cap) break;
  }
  return n;
}
inline const std::string& KeyItself(const std::string& key) { return key; }

// A paced drain's rate at `now`: what moves job.bytes_left by its pace end
// (as fast as allowed once that has passed), within [drain_min_bandwidth,
// drain_bandwidth] (a drain_bandwidth of 0 sets no ceiling).
inline uint64_t PacedRate(const master::ReplicationOptions& o, const DrainJob& job, int64_t now) {
  const double left_s =
      static_cast<double>(std::max<int64_t>(job.pace_end_ns - now, kNsPerMs)) / 1e9;
  const double want = std::max(static_cast<double>(job.bytes_left) / left_s,
                               static_cast<double>(o.drain_min_bandwidth));
  if (o.drain_bandwidth == 0) return static_cast<uint64_t>(std::min(want, 1e18));
  return static_cast<uint64_t>(std::min(want, static_cast<double>(o.drain_bandwidth)));
}

// Moves one running drain on as far as its budget allows. REQUIRES plan_mu.
template <typename A, typename P>
void AdvanceDrain(MasterState<A, P>& s, DrainJob& job, int64_t now)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.repl.plan_mu) {
  proto::DrainStatus& st = job.status;
  if (st.state() != proto::DRAIN_RUNNING) return;
  st.set_elapsed_ms(static_cast<uint64_t>((now - job.started_ns) / kNsPerMs));
  if (now >= job.deadline_ns) {
    st.set_state(proto::DRAIN_DEADLINE);
    st.set_objects_left(job.todo.size() + job.in_flight);
    return;
  }
  if (job.paced) job.bucket.rate = PacedRate(s.repl.options, job, now);
  job.bucket.Refill(now);
  const size_t max_in_flight = s.repl.options.max_in_flight_per_worker;
  // A paced drain on pace starts its copies max_in_flight at a time, once the
  // last batch is done (the bucket going into debt for the batch): the
  // worker's CopySync then carries them together, a round trip and a few
  // wake-ups per batch instead of per copy. Past its pace end (behind), a
  // slow copy must not hold the others back: each slot is refilled at once.
  size_t batch = 0;  // copies started by this call
  const auto may_start = [&] {
    if (!job.paced || now >= job.pace_end_ns) return job.bucket.CanSpend();
    return batch > 0 || (job.in_flight == 0 && job.bucket.CanSpend());
  };
  while (job.in_flight < max_in_flight && may_start()) {
    if (job.todo.empty()) {
      if (job.in_flight > 0) break;
      // Objects committed here since the list was made (puts in flight then).
      if (!job.rescanned) {
        job.rescanned = true;
        job.todo = ObjectsOn(s, job.segments, now);
        job.bytes_left = BytesOf(s, job.todo, KeyItself);
        if (!job.todo.empty()) continue;
      }
      st.set_state(proto::DRAIN_DONE);
      st.set_objects_left(0);
      return;
    }
    std::string key = std::move(job.todo.front());
    job.todo.pop_front();
    uint64_t src = 0, size = 0;
    const DrainStep step = DrainOne(s, job, key, now, &src, &size);
    job.bytes_left -= std::min(job.bytes_left, size);
    switch (step) {
      case DrainStep::kGone:
        st.set_objects_gone(st.objects_gone() + 1);
        continue;
      case DrainStep::kDrop:
        st.set_objects_dropped(st.objects_dropped() + 1);
        continue;
      case DrainStep::kCopy:
        break;
    }
    const absl::Status started = StartCopy(
        s, key,
        CopyPlan{.kind = master::CopyKind::kDrain, .src_segment_id = src, .drop_source = true});
    if (started.ok()) {
      ++job.in_flight;
      ++batch;
      job.bucket.Spend(size);
    } else if (absl::IsNotFound(started)) {
      st.set_objects_gone(st.objects_gone() + 1);
    } else {
      st.set_copies_failed(st.copies_failed() + 1);
      st.set_objects_left(st.objects_left() + 1);
    }
  }
  if (job.todo.empty() && job.in_flight == 0 && job.rescanned) {
    st.set_state(proto::DRAIN_DONE);
    st.set_objects_left(0);
  }
}

// Copies back replicas lost with a worker, hottest first, at the rate that
// ends the backlog within repair_within_ms. REQUIRES plan_mu.
template <typename A, typename P>
void AdvanceRepairs(MasterState<A, P>& s, int64_t now)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.repl.plan_mu) {
  ReplicationState& r = s.repl;
  const master::ReplicationOptions& o = r.options;
  std::vector<RepairItem> inbox;
  {
    MutexLock lock(&r.inbox_mu);
    inbox.swap(r.repair_inbox);
  }
  if (!inbox.empty()) {
    // Hottest first within what arrived together (one worker's loss).
    const int64_t window_ns = o.hot_window_ms * kNsPerMs;
    std::vector<std::pair<std::pair<uint64_t, int64_t>, size_t>> heat;
    for (size_t i = 0; i < inbox.size(); ++i) {
      const auto h = s.table.With(inbox[i].key, [&](ObjectTable::Shard& sh) {
        const ObjectMeta* m = sh.Find(inbox[i].key);
        return m == nullptr ? std::pair<uint64_t, int64_t>{0, 0} : Heat(*m, now, window_ns);
      });
      heat.emplace_back(h, i);
    }
    std::sort(heat.begin(), heat.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& [h, i] : heat) r.repairs.push_back(std::move(inbox[i]));
  }
  s.metrics.repair_backlog->Set(static_cast<double>(r.repairs.size()));
  if (r.repairs.empty()) return;
  // The rate that finishes the backlog by the oldest loss's bound.
  const int64_t left_ns =
      std::max<int64_t>(r.repairs.front().lost_ns + o.repair_within_ms * kNsPerMs - now, kNsPerMs);
  const uint64_t backlog_bytes = BytesOf(
      s, r.repairs, [](const RepairItem& it) -> const std::string& { return it.key; },
      uint64_t{1} << 40);
  r.repair_bucket.rate = std::max<uint64_t>(
      o.repair_min_bandwidth, static_cast<uint64_t>(static_cast<double>(backlog_bytes) * 1e9 /
                                                    static_cast<double>(left_ns)));
  r.repair_bucket.Refill(now);
  const size_t max_in_flight = o.max_in_flight_per_worker * std::max<size_t>(1, s.workers.size());
  while (!r.repairs.empty() && r.repairs_in_flight < max_in_flight && r.repair_bucket.CanSpend()) {
    RepairItem item = std::move(r.repairs.front());
    r.repairs.pop_front();
    uint64_t size = 0;
    const bool needed = s.table.With(item.key, [&](ObjectTable::Shard& sh) {
      const ObjectMeta* m = sh.Find(item.key);
      if (m == nullptr || !m->committed() || !m->HasComplete()) return false;
      size = m->size_bytes;
      return m->replicas.size() < m->replica_target;  // copying ones count: already coming
    });
    if (!needed) continue;
    const absl::Status st = StartCopy(s, item.key, CopyPlan{.kind = master::CopyKind::kRepair});
    if (st.ok()) {
      ++r.repairs_in_flight;
      r.repair_bucket.Spend(size);
    } else if (absl::IsResourceExhausted(st) &&
               now - item.lost_ns < 10 * o.repair_within_ms * kNsPerMs) {
      r.repairs.push_back(std::move(item));  // no room now: again later, behind the rest
      break;
    }
  }
  s.metrics.repair_backlog->Set(static_cast<double>(r.repairs.size()));
}

// Gives hot objects an extra replica within the hot budget. REQUIRES plan_mu.
template <typename A, typename P>
void AdvanceHot(MasterState<A, P>& s, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.repl.plan_mu) {
  ReplicationState& r = s.repl;
  std::vector<std::string> inbox;
  {
    MutexLock lock(&r.inbox_mu);
    inbox.swap(r.hot_inbox);
  }
  // What the hot extras hold now (objects removed or evicted since took theirs along).
  uint64_t held = 0;
  for (auto it = r.hot_keys.begin(); it != r.hot_keys.end();) {
    const uint64_t bytes = s.table.With(*it, [&](ObjectTable::Shard& sh) -> uint64_t {
      const ObjectMeta* m = sh.Find(*it);
      if (m == nullptr) return 0;
      uint64_t b = 0;
      for (const Replica& rep : m->replicas) b += rep.hot_extra ? m->size_bytes : 0;
      return b;
    });
    held += bytes;
    if (bytes == 0) {
      r.hot_keys.erase(it++);
    } else {
      ++it;
    }
  }
  r.hot_extra_bytes.store(held, std::memory_order_relaxed);
  const double budget = r.options.hot_max_fraction * static_cast<double>(s.pool.capacity_bytes());
  for (std::string& key : inbox) {
    if (static_cast<double>(r.hot_extra_bytes.load(std::memory_order_relaxed)) >= budget) break;
    const bool wanted = s.table.With(key, [&](ObjectTable::Shard& sh) {
      const ObjectMeta* m = sh.Find(key);
      return m != nullptr && m->Visible(now) && !m->Copying() &&
             m->replicas.size() < r.options.hot_max_replicas;
    });
    if (!wanted) continue;
    uint64_t size = 0;
    s.table.With(key, [&](ObjectTable::Shard& sh) {
      const ObjectMeta* m = sh.Find(key);
      size = m == nullptr ? 0 : m->size_bytes;
    });
    if (StartCopy(s, key, CopyPlan{.kind = master::CopyKind::kHot}).ok()) {
      ++r.hot_in_flight;
      r.hot_extra_bytes.fetch_add(size, std::memory_order_relaxed);
      r.hot_keys.insert(std::move(key));
    }
  }
  s.metrics.hot_extra_bytes->Set(static_cast<double>(r.hot_extra_bytes.load()));
}

// Drops every hot extra replica (use passed the high watermark): they are
// the first space to give back. Returns the bytes freed.
template <typename A, typename P>
uint64_t DropHotExtras(MasterState<A, P>& s) {
  std::vector<std::string> keys;
  {
    MutexLock lock(&s.repl.plan_mu);
    keys.assign(s.repl.hot_keys.begin(), s.repl.hot_keys.end());
    s.repl.hot_keys.clear();
  }
  const int64_t now = s.Now();
  uint64_t freed = 0;
  for (const std::string& key : keys) {
    ReplicaList to_free;
    std::string tenant;
    PinLevel pin = PinLevel::kNone;
    uint64_t released = 0;
    s.table.With(key, [&](ObjectTable::Shard& sh) {
      ObjectMeta* m = sh.Find(key);
      if (m == nullptr) return;
      std::vector<uint64_t> extras;
      for (const Replica& rep : m->replicas) {
        if (rep.hot_extra && rep.state == master::ReplicaState::kComplete &&
            m->CompleteCount() > 1) {
          extras.push_back(rep.segment_id);
        }
      }
      for (uint64_t seg : extras) {
        if (m->CompleteCount() <= 1) break;
        if (DropReplicaLocked(sh, key, *m, seg, now, s.ids.Next(), to_free, s.deferred_entries)) {
          released += m->size_bytes;
        }
      }
      if (released > 0) {
        tenant = m->tenant;
        pin = m->pin;
        s.LogSet(key, *m, now);
      }
    });
    s.FreeReplicas(to_free);
    s.ReleaseCharge(tenant, pin, released);
    if (released > 0) {
      freed += released;
      s.metrics.hot_dropped->Increment();
    }
  }
  s.repl.hot_extra_bytes.store(0, std::memory_order_relaxed);
  return freed;
}

template <typename A, typename P>
void NoteCopyEnded(MasterState<A, P>& s, const master::CopyRecord& rec, const absl::Status& st) {
  if (rec.kind == master::CopyKind::kUser) return;
  MutexLock lock(&s.repl.plan_mu);
  switch (rec.kind) {
    case master::CopyKind::kDrain: {
      auto it = s.repl.drains.find(rec.worker_id);
      if (it == s.repl.drains.end()) return;
      DrainJob& job = it->second;
      if (job.in_flight > 0) --job.in_flight;
      proto::DrainStatus& ds = job.status;
      if (st.ok()) {
        ds.set_objects_moved(ds.objects_moved() + 1);
        ds.set_bytes_moved(ds.bytes_moved() + rec.bytes);
      } else if (absl::IsNotFound(st)) {
        ds.set_objects_gone(ds.objects_gone() + 1);
      } else {
        ds.set_copies_failed(ds.copies_failed() + 1);
        // Tried again while the deadline allows (another destination).
        if (s.Now() < job.deadline_ns) job.todo.push_back(rec.key);
      }
      return;
    }
    case master::CopyKind::kRepair:
      if (s.repl.repairs_in_flight > 0) --s.repl.repairs_in_flight;
      return;
    case master::CopyKind::kHot:
      if (s.repl.hot_in_flight > 0) --s.repl.hot_in_flight;
      return;
    case master::CopyKind::kUser:
    case master::CopyKind::kRelocate:
      return;
  }
}

// Runs every planner once (Tick, and after each CopySync report). Skips when
// another thread is planning.
template <typename A, typename P>
void AdvanceReplication(MasterState<A, P>& s) {
  if (!s.repl.plan_mu.TryLock()) return;
  const int64_t now = s.Now();
  for (auto& [worker, job] : s.repl.drains) AdvanceDrain(s, job, now);
  if (s.repl.options.repair) AdvanceRepairs(s, now);
  if (s.repl.options.hot_reads > 0) AdvanceHot(s, now);
  s.repl.plan_mu.Unlock();
}

// Called by DropSegments under a shard lock for each object that lost
// replicas and still has one: queued for repair when below its put's count.
template <typename A, typename P>
void NoteUnderReplicated(MasterState<A, P>& s, std::string_view key, const ObjectMeta& m,
                         int64_t now) {
  if (!s.repl.options.repair || !m.committed() || m.replicas.empty() ||
      m.replicas.size() >= m.replica_target) {
    return;
  }
  MutexLock lock(&s.repl.inbox_mu);
  s.repl.repair_inbox.push_back(RepairItem{std::string(key), now});
  s.repl.inbox_dirty.store(true, std::memory_order_relaxed);
}

// ---- RPCs -------------------------------------------------------------------------

// Ends every copy task of a worker that left (its sources are gone).
template <typename A, typename P>
void DropCopyWorker(MasterState<A, P>& s, const std::string& worker) {
  for (master::CopyRecord& rec : s.repl.copies.RemoveWorker(worker)) {
    FinishCopy(s, rec, absl::UnavailableError("the source worker left"), /*timed_out=*/false);
  }
  MutexLock lock(&s.repl.plan_mu);
  s.repl.drains.erase(worker);
}

template <typename A, typename P>
absl::StatusOr<proto::CopySyncResponse> CopySync(MasterState<A, P>& s,
                                                 const proto::CopySyncRequest& req) {
  if (req.worker_id().empty()) return absl::InvalidArgumentError("CopySync without worker_id");
  if (static_cast<size_t>(req.results_size()) > rpc::kMaxCopyTasks ||
      req.max_tasks() > rpc::kMaxCopyTasks) {
    return absl::InvalidArgumentError(
        absl::StrCat("at most ", rpc::kMaxCopyTasks, " copy results and tasks per call"));
  }
  proto::CopySyncResponse resp;
  if (!s.workers.Contains(req.worker_id())) {
    DropCopyWorker(s, req.worker_id());
    resp.set_remount_required(true);
    return resp;
  }
  for (const proto::CopyTaskResult& res : req.results()) {
    std::optional<master::CopyRecord> rec = s.repl.copies.Complete(res.task_id(), req.worker_id());
    if (!rec.has_value()) continue;  // timed out or unknown: already ended
    const auto code = res.code() > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)
                          ? absl::StatusCode::kUnknown
                          : static_cast<absl::StatusCode>(res.code());
    FinishCopy(s, *rec,
               code == absl::StatusCode::kOk ? absl::OkStatus() : absl::Status(code, res.message()),
               /*timed_out=*/false);
  }
  if (req.results_size() > 0) AdvanceReplication(s);
  const absl::Duration wait =
      absl::Milliseconds(static_cast<int64_t>(std::min<uint64_t>(req.wait_ms(), 60'000)));
  for (proto::CopyTask& t : s.repl.copies.Take(req.worker_id(), req.max_tasks(), wait, s.Now())) {
    *resp.add_tasks() = std::move(t);
  }
  return resp;
}

// Tick: copies not finished in time end as failed; the planners run.
template <typename A, typename P>
uint64_t ExpireCopyTasks(MasterState<A, P>& s, int64_t now) {
  std::vector<master::CopyRecord> late = s.repl.copies.TakeTimedOut(now);
  for (master::CopyRecord& rec : late) {
    FinishCopy(s, rec, absl::DeadlineExceededError("copy task timed out"),
               /*timed_out=*/rec.issued);
  }
  AdvanceReplication(s);
  return late.size();
}

template <typename A, typename P>
absl::StatusOr<proto::DrainWorkerResponse> DrainWorker(MasterState<A, P>& s,
                                                       const proto::DrainWorkerRequest& req) {
  if (req.worker_id().empty()) return absl::InvalidArgumentError("DrainWorker without worker_id");
  std::vector<uint64_t> segments;
  for (const master::SegmentView& v : s.pool.Snapshot()) {
    if (v.worker_id == req.worker_id()) segments.push_back(v.id);
  }
  const int64_t now = s.Now();
  proto::DrainWorkerResponse resp;
  if (req.cancel()) {
    for (uint64_t id : segments) s.pool.SetDraining(id, false);
    MutexLock lock(&s.repl.plan_mu);
    auto it = s.repl.drains.find(req.worker_id());
    if (it == s.repl.drains.end()) return resp;
    if (it->second.status.state() == proto::DRAIN_RUNNING) {
      it->second.status.set_state(proto::DRAIN_CANCELLED);
    }
    *resp.mutable_status() = it->second.status;
    return resp;
  }
  if (segments.empty()) {
    return absl::NotFoundError(
        absl::StrCat("worker '", req.worker_id(), "' has no mounted segment to drain"));
  }
  if (req.deadline_ms() == 0 || req.deadline_ms() > 24ull * 3600 * 1000) {
    return absl::InvalidArgumentError("DrainWorker deadline_ms must be in [1, 86400000]");
  }
  {
    MutexLock lock(&s.repl.plan_mu);
    auto it = s.repl.drains.find(req.worker_id());
    if (it != s.repl.drains.end() && it->second.status.state() == proto::DRAIN_RUNNING) {
      *resp.mutable_status() = it->second.status;
      return resp;
    }
  }
  for (uint64_t id : segments) s.pool.SetDraining(id, true);  // no new put lands here
  DrainJob job;
  job.worker_id = req.worker_id();
  job.segments = segments;
  job.started_ns = now;
  job.deadline_ns = now + static_cast<int64_t>(req.deadline_ms()) * kNsPerMs;
  job.bucket.rate = req.bandwidth_bytes_per_sec() != 0 ? req.bandwidth_bytes_per_sec()
                                                       : s.repl.options.drain_bandwidth;
  job.todo = ObjectsOn(s, segments, now);
  job.status.set_state(proto::DRAIN_RUNNING);
  job.status.set_objects_total(job.todo.size());
  DropUnkept(s, job, KeepSince(s, segments, now), now);
  const double pace = s.repl.options.drain_pace;
  if (req.bandwidth_bytes_per_sec() == 0 && !req.urgent() && pace > 0) {
    job.paced = true;
    job.pace_end_ns = now + static_cast<int64_t>(static_cast<double>(req.deadline_ms()) * pace *
                                                 static_cast<double>(kNsPerMs));
    job.bytes_left = BytesOf(s, job.todo, KeyItself);
  }
  job.status.set_deadline_ms(req.deadline_ms());
  {
    MutexLock lock(&s.repl.plan_mu);
    DrainJob& j = s.repl.drains[req.worker_id()] = std::move(job);
    AdvanceDrain(s, j, now);
    *resp.mutable_status() = j.status;
  }
  return resp;
}

template <typename A, typename P>
absl::StatusOr<proto::DrainStatusResponse> GetDrainStatus(MasterState<A, P>& s,
                                                          const proto::DrainStatusRequest& req) {
  proto::DrainStatusResponse resp;
  MutexLock lock(&s.repl.plan_mu);
  auto it = s.repl.drains.find(req.worker_id());
  if (it == s.repl.drains.end()) return resp;  // DRAIN_STATE_NONE
  DrainJob& job = it->second;
  if (job.status.state() == proto::DRAIN_RUNNING) {
    job.status.set_elapsed_ms(static_cast<uint64_t>((s.Now() - job.started_ns) / kNsPerMs));
  }
  *resp.mutable_status() = job.status;
  return resp;
}

// The segment of name `name` holding a complete replica of `key` (a move's
// source), with its worker.
template <typename A, typename P>
std::optional<std::pair<uint64_t, std::string>> ReplicaOnNamed(MasterState<A, P>& s,
                                                               const std::string& key,
                                                               std::string_view name) {
  std::vector<std::pair<uint64_t, std::string>> on;
  s.table.With(key, [&](ObjectTable::Shard& sh) {
    const ObjectMeta* m = sh.Find(key);
    if (m == nullptr) return;
    for (const Replica& r : m->replicas) {
      if (r.state == master::ReplicaState::kComplete) on.emplace_back(r.segment_id, r.worker_id);
    }
  });
  for (auto& [id, worker] : on) {
    std::optional<proto::SegmentDescriptor> d = s.pool.Descriptor(id);
    if (d.has_value() && d->name() == name) return std::make_pair(id, std::move(worker));
  }
  return std::nullopt;
}

template <typename A, typename P>
absl::StatusOr<std::string_view> CheckTaskKey(MasterState<A, P>& s, const std::string& key,
                                              const std::string& tenant) {
  RETURN_IF_ERROR(rpc::ValidateObjectKey(key));
  ASSIGN_OR_RETURN(const std::string_view t, s.ResolveTenant(tenant));
  const bool visible = s.table.With(key, [&](ObjectTable::Shard& sh) {
    const ObjectMeta* m = sh.Find(key);
    return m != nullptr && m->Visible(s.Now()) && m->tenant == t && m->HasComplete();
  });
  if (!visible) {
    return absl::NotFoundError(
        absl::StrCat("key '", absl::CEscape(key), "' not found (or only on an SSD tier)"));
  }
  return t;
}

template <typename A, typename P>
absl::StatusOr<proto::CreateCopyTaskResponse> CreateCopyTask(
    MasterState<A, P>& s, const proto::CreateCopyTaskRequest& req) {
  if (req.targets().empty() || static_cast<size_t>(req.targets_size()) > rpc::kMaxCopyTargets) {
    return absl::InvalidArgumentError(
        absl::StrCat("CreateCopyTask needs 1..", rpc::kMaxCopyTargets, " target segment names"));
  }
  for (const std::string& t : req.targets()) {
    if (t.empty()) return absl::InvalidArgumentError("CreateCopyTask: empty target segment name");
  }
  RETURN_IF_ERROR(CheckTaskKey(s, req.key(), req.tenant()).status());
  const uint64_t id = s.repl.copies.NewUserTask(proto::REPLICA_COPY, "", req.targets_size());
  for (const std::string& t : req.targets()) {
    const absl::Status st =
        StartCopy(s, req.key(),
                  CopyPlan{.kind = master::CopyKind::kUser, .target_name = t, .user_task_id = id});
    if (!st.ok()) s.repl.copies.EndUserPart(id, st);
  }
  proto::CreateCopyTaskResponse resp;
  resp.set_task_id(id);
  return resp;
}

template <typename A, typename P>
absl::StatusOr<proto::CreateMoveTaskResponse> CreateMoveTask(
    MasterState<A, P>& s, const proto::CreateMoveTaskRequest& req) {
  if (req.source().empty() || req.target().empty()) {
    return absl::InvalidArgumentError("CreateMoveTask needs a source and a target segment name");
  }
  if (req.source() == req.target()) {
    return absl::InvalidArgumentError("CreateMoveTask: source and target are the same segment");
  }
  RETURN_IF_ERROR(CheckTaskKey(s, req.key(), req.tenant()).status());
  auto src = ReplicaOnNamed(s, req.key(), req.source());
  if (!src.has_value()) {
    return absl::NotFoundError(absl::StrCat("key '", absl::CEscape(req.key()),
                                            "' has no complete replica on segment '", req.source(),
                                            "'"));
  }
  const uint64_t id = s.repl.copies.NewUserTask(proto::REPLICA_MOVE, src->second, 1);
  const absl::Status st = StartCopy(s, req.key(),
                                    CopyPlan{.kind = master::CopyKind::kUser,
                                             .src_segment_id = src->first,
                                             .drop_source = true,
                                             .target_name = req.target(),
                                             .user_task_id = id});
  if (!st.ok()) s.repl.copies.EndUserPart(id, st);
  proto::CreateMoveTaskResponse resp;
  resp.set_task_id(id);
  return resp;
}

template <typename A, typename P>
absl::StatusOr<proto::QueryTaskResponse> QueryTask(MasterState<A, P>& s,
                                                   const proto::QueryTaskRequest& req) {
  std::optional<proto::QueryTaskResponse> t = s.repl.copies.Query(req.task_id());
  if (!t.has_value()) {
    return absl::NotFoundError(absl::StrCat(
        "no task ", req.task_id(), " (unknown, or finished long enough ago to be forgotten)"));
  }
  return *t;
}

}  // namespace mooncake::master_internal

#endif  // MOONCAKE_STORE_MASTER_INTERNAL_REPLICATION_PATH_H_
