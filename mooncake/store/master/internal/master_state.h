// MasterState<A, P>: the pieces one master is made of, and the few steps
// every operation shares (tenants and charges, retiring an object, lease
// release, deferred frees, eviction). The operations themselves are in
// put_path.h, read_path.h and membership_path.h; master.h is the facade.
//
// Lock order: evictor -> shard -> segment (and the lease table, the worker
// registry, the quotas and the rate limits are leaves: nothing is locked while
// calling them except, for quotas and rate limits, nothing at all).
#ifndef MOONCAKE_STORE_MASTER_INTERNAL_MASTER_STATE_H_
#define MOONCAKE_STORE_MASTER_INTERNAL_MASTER_STATE_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/mutex.h"
#include "mooncake/qos/tenant_quota.h"
#include "mooncake/qos/tenant_rate_limit.h"
#include "mooncake/store/master/evictor.h"
#include "mooncake/store/master/internal/deadline_queue.h"
#include "mooncake/store/master/internal/relocation_state.h"
#include "mooncake/store/master/internal/replication_state.h"
#include "mooncake/store/master/internal/write_windows.h"
#include "mooncake/store/master/lease_table.h"
#include "mooncake/store/master/master_metrics.h"
#include "mooncake/store/master/master_options.h"
#include "mooncake/store/master/membership.h"
#include "mooncake/store/master/mutation_log.h"
#include "mooncake/store/master/object_group.h"
#include "mooncake/store/master/object_meta.h"
#include "mooncake/store/master/object_table.h"
#include "mooncake/store/master/segment_pool.h"
#include "mooncake/store/master/tier_registry.h"

namespace mooncake::master_internal {

using master::ObjectMeta;
using master::ObjectTable;
using master::PinLevel;
using master::Replica;
using master::ReplicaList;

inline constexpr int64_t kNsPerMs = 1'000'000;
// A write capability's expiry is the put's deadline on the issuing clock,
// rounded to a second (auth::QuantizedExpiry): a window is held this much
// past the master's deadline for the put.
inline constexpr int64_t kWriteWindowSlackNs = 1'000 * kNsPerMs;

// An SSD copy to delete once the shard lock is released.
struct SsdDrop {
  std::string worker_id;
  uint64_t version = 0;
  uint64_t bytes = 0;  // reserved on the tier
};

// What RetireLocked took out of the table, to finish outside the shard lock.
struct Retired {
  ReplicaList to_free;  // empty when the free was deferred
  std::string tenant;
  PinLevel pin = PinLevel::kNone;
  uint64_t charge = 0;
  bool was_committed = false;
  std::optional<SsdDrop> ssd_drop;
};

// Committed objects and their bytes per TensorMeta model (the usage by model
// in /metrics). Objects without a model are not counted.
class ModelUsage {
 public:
  void Add(const ObjectMeta& m, int64_t sign) {
    if (m.tensor() == nullptr || m.tensor()->model().empty()) return;
    MutexLock lock(&mu_);
    auto [it, fresh] = by_model_.try_emplace(m.tensor()->model());
    it->second.first += sign;
    it->second.second += sign * static_cast<int64_t>(m.size_bytes);
    if (it->second.first <= 0) by_model_.erase(it);
  }
  // (model, objects, bytes), unordered.
  std::vector<std::tuple<std::string, int64_t, int64_t>> Snapshot() const {
    std::vector<std::tuple<std::string, int64_t, int64_t>> out;
    MutexLock lock(&mu_);
    for (const auto& [model, u] : by_model_) out.emplace_back(model, u.first, u.second);
    return out;
  }

 private:
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, std::pair<int64_t, int64_t>> by_model_ ABSL_GUARDED_BY(mu_);
};

static_assert(master::kMaxTenantRateBytesPerSec == qos::TenantRateLimit::kMaxRateBytesPerSec);

template <alloc::Allocator A, master::ObjectEvictionPolicy P>
struct MasterState {
  MasterState(const master::MasterOptions& o, Clock* c, MetricsRegistry* registry,
              typename master::SegmentPool<A>::Factory factory, P policy)
      : options(o),
        clock(c),
        table(o.shard_count),
        pool(std::move(factory)),
        evictor(std::move(policy)),
        rates(c),
        workers(o.membership),
        tiers(o.tier),
        metrics(registry),
        repl(o.replication),
        write_hold_floor_ns(
            o.hold_write_windows ? c->NowNs() + (o.put_timeout_ms + 1'000) * kNsPerMs : 0) {}

  const master::MasterOptions options;
  Clock* const clock;
  ObjectTable table;
  master::SegmentPool<A> pool;
  master::LeaseTable leases;
  master::Evictor<P> evictor;
  qos::TenantRateLimit rates;  // put bytes per second per tenant (PutStart)
  master::WorkerRegistry workers;
  master::TierRegistry tiers;
  qos::TenantQuota quota;
  qos::TenantQuota pinned_quota;
  master::MasterMetrics metrics;
  ReplicationState repl;  // copies between workers (replication_path.h)
  RelocationState reloc;  // compaction of fragmented segments (relocation_path.h)
  master::IdSource ids;
  master::GroupTable groups;  // object groups (object_group.h, group_path.h)
  ModelUsage models;
  DeadlineQueue put_deadlines;
  DeadlineQueue ttl_deadlines;
  // options.hold_write_windows: committed tenant objects' write windows, and
  // until when every tenant object's space is held after this state began.
  WriteWindows write_windows;
  const int64_t write_hold_floor_ns;
  // relaxed counters: statistics only.
  std::atomic<int64_t> objects{0};
  std::atomic<int64_t> object_bytes{0};
  std::atomic<int64_t> pending_puts{0};
  std::atomic<uint64_t> offloading_bytes{0};  // DRAM bytes an OFFLOAD in flight will free
  // Entries of every shard's `deferred`, changed under the shard lock with its
  // map (Stats' deferred_frees; SweepDeferred skips the walk at 0).
  std::atomic<uint64_t> deferred_entries{0};
  std::atomic<int64_t> ssd_objects{0};  // objects whose SSD copy is kStored
  // Where changes of the durable state are reported (mutation_log.h); null:
  // nowhere. Set before the master serves, never changed while it does.
  master::MutationLog* log = nullptr;

  int64_t Now() const { return clock->NowNs(); }

  // ---- Tenants ---------------------------------------------------------------

  absl::Status SetTenant(std::string_view name, uint64_t capacity, uint64_t pinned_capacity) {
    if (absl::Status s = quota.SetCapacity(name, capacity); !s.ok()) return s;
    absl::Status s =
        pinned_quota.SetCapacity(name, pinned_capacity == 0 ? capacity : pinned_capacity);
    if (s.ok() && log != nullptr) log->TenantSet(name, capacity, pinned_capacity);
    return s;
  }

  // 0: not limited. Not in the mutation log: a standby takes its rates from
  // its own options, as the leader did.
  absl::Status SetTenantRate(std::string_view name, uint64_t bytes_per_sec) {
    if (!quota.Usage(name).has_value()) {
      return absl::NotFoundError(
          absl::StrCat("unknown tenant '", AbslView(name), "': SetTenant first"));
    }
    return rates.SetRate(name, bytes_per_sec);
  }

  // Under the shard lock of `key`, after `m` changed.
  void LogSet(std::string_view key, const ObjectMeta& m, int64_t now) {
    if (log != nullptr) log->ObjectSet(key, m, now);
  }

  // The tenant a request names ("" = the default one). The view lives as long
  // as `requested` and the options.
  absl::StatusOr<std::string_view> ResolveTenant(std::string_view requested) const {
    if (requested.empty() || requested == options.default_tenant) return options.default_tenant;
    if (!quota.Usage(requested).has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown tenant '", AbslView(requested),
                       "': configure it (MasterOptions.tenants or Master::SetTenant)"));
    }
    return requested;
  }

  absl::Status AdmitCharge(std::string_view tenant, PinLevel pin, uint64_t bytes) {
    absl::Status s = quota.Admit(tenant, bytes);
    if (absl::IsNotFound(s)) return absl::InvalidArgumentError(s.message());
    if (!s.ok()) return s;
    if (pin == PinLevel::kHard) {
      absl::Status p = pinned_quota.Admit(tenant, bytes);
      if (!p.ok()) {
        ReleaseQuota(quota, tenant, bytes);
        return absl::Status(p.code(), absl::StrCat("pinned quota: ", p.message()));
      }
    }
    return absl::OkStatus();
  }

  void ReleaseCharge(std::string_view tenant, PinLevel pin, uint64_t bytes) {
    if (bytes == 0) return;
    ReleaseQuota(quota, tenant, bytes);
    if (pin == PinLevel::kHard) ReleaseQuota(pinned_quota, tenant, bytes);
  }

  // ---- Retiring objects -----------------------------------------------------

  // Takes `it` out of `shard`. Its space is returned in Retired::to_free, or
  // parked in shard.deferred while it is leased or until hold_until_ns.
  // `logged` false: the caller reports the change itself (a replace's commit).
  Retired RetireLocked(ObjectTable::Shard& shard, decltype(shard.objects.begin()) it, int64_t now,
                       int64_t hold_until_ns, bool logged = true) {
    ObjectMeta& m = it->second;
    // now == 0: a lost worker's objects, whose replicas are gone already.
    if (options.hold_write_windows && m.tenant != options.default_tenant && now > 0) {
      // Its writer's capability may outlive it (WriteWindows).
      const int64_t window_end = m.committed()
                                     ? write_windows.Take(m.version, now)
                                     : m.pending_put.get().put_deadline_ns + kWriteWindowSlackNs;
      hold_until_ns = std::max({hold_until_ns, window_end, write_hold_floor_ns});
    }
    Retired r{.tenant = std::move(m.tenant),
              .pin = m.pin,
              .charge = m.ChargeBytes(),
              .was_committed = m.committed()};
    if (m.group() != nullptr) LeaveGroupLocked(it->first, m);
    if (m.committed()) {
      objects.fetch_sub(1, std::memory_order_relaxed);
      object_bytes.fetch_sub(static_cast<int64_t>(m.size_bytes), std::memory_order_relaxed);
      models.Add(m, -1);
      // A replica being loaded (or copied) belongs to its LOAD (copy) task
      // until the task ends (a worker may still be writing it): the task
      // frees it then.
      master::EraseReplicasIf(m.replicas, [](const Replica& rep) {
        return rep.state != master::ReplicaState::kComplete;
      });
      r.ssd_drop = TakeSsdCopyLocked(m);
    } else {
      pending_puts.fetch_sub(1, std::memory_order_relaxed);
    }
    if (!m.replicas.empty() && (m.Leased(now) || hold_until_ns > now)) {
      const uint64_t id = m.committed() ? m.version : m.put_id;
      const bool parked =
          shard.deferred
              .emplace(id, master::DeferredFree{it->first.str(), std::move(m.replicas),
                                                m.lease_refs, m.lease_until_ns, hold_until_ns})
              .second;
      if (parked) deferred_entries.fetch_add(1, std::memory_order_relaxed);
    } else {
      r.to_free = std::move(m.replicas);
    }
    if (log != nullptr && logged) log->ObjectErased(it->first);
    shard.objects.erase(it);
    return r;
  }

  // Outside the shard lock. `key` leaves the policy unless the evictor is the
  // caller (it took the key out of the policy already, in its batch).
  // Returns the bytes of the other members of a group this retirement ended
  // (they leave with it: ReapDeadGroups).
  uint64_t FinishRetired(Retired& r, const std::string& key, bool erase_from_evictor) {
    FreeReplicas(r.to_free);
    ReleaseCharge(r.tenant, r.pin, r.charge);
    if (r.ssd_drop.has_value()) DropSsdCopy(*r.ssd_drop, key);
    if (r.was_committed && erase_from_evictor) evictor.Erase(key);
    return ReapDeadGroups();
  }

  // ---- Object groups -----------------------------------------------------------

  // Under the shard lock of `key`, as `m` leaves the table: a pending member
  // (its put revoked or timed out) just leaves its open group; a committed
  // one ends the group, whose other members ReapDeadGroups retires.
  void LeaveGroupLocked(std::string_view key, ObjectMeta& m) {
    std::shared_ptr<master::ObjectGroup> g = std::move(m.extras.mut().group);
    m.extras.mut().group = nullptr;
    if (!m.committed() && g->Phase() == master::GroupPhase::kOpen) {
      MutexLock lock(&g->mu);
      g->members.erase(AbslView(key));
      if (g->pending > 0) --g->pending;
      return;
    }
    groups.Kill(g);
  }

  // Retires the remaining members of every group that died; returns the
  // bytes they held. Shard locks are taken one at a time.
  uint64_t ReapDeadGroups() {
    uint64_t bytes = 0;
    for (const std::shared_ptr<master::ObjectGroup>& g : groups.TakeDead()) {
      absl::flat_hash_set<std::string> members;
      {
        MutexLock lock(&g->mu);
        members.swap(g->members);
      }
      const int64_t now = Now();
      for (const std::string& key : members) {
        std::optional<Retired> r;
        table.With(key, [&](ObjectTable::Shard& sh) {
          auto it = sh.objects.find(key);
          if (it == sh.objects.end() || it->second.group() != g) return;
          r = RetireLocked(sh, it, now, 0);
        });
        if (!r.has_value()) continue;
        bytes += r->charge;
        FinishRetired(*r, key, /*erase_from_evictor=*/true);
        metrics.group_members_retired->Increment();
      }
    }
    return bytes;
  }

  // ---- SSD copies --------------------------------------------------------------

  // Under the shard lock: detaches a stored SSD copy from `m` (kOffloading is
  // left alone: its task's end finds the object changed and drops the record).
  std::optional<SsdDrop> TakeSsdCopyLocked(ObjectMeta& m) {
    if (m.ssd != master::SsdState::kStored) return std::nullopt;
    master::ObjectExtras& x = m.extras.mut();
    SsdDrop d{std::move(x.ssd_worker_id), m.version,
              x.ssd_bytes > 0 ? x.ssd_bytes : tiers.ChargeFor(m.size_bytes)};
    x.ssd_bytes = 0;
    m.ssd = master::SsdState::kNone;
    x.ssd_worker_id.clear();
    ssd_objects.fetch_sub(1, std::memory_order_relaxed);
    return d;
  }

  // Outside shard locks: gives the copy's space back and queues the DROP.
  // `resident`: the copy is the key's entry in the worker's LRU (a stored
  // copy); an unwanted record of an older version is not.
  void DropSsdCopy(const SsdDrop& d, const std::string& key, bool resident = true) {
    if (resident) tiers.EraseResident(d.worker_id, key);
    tiers.Unreserve(d.worker_id, d.bytes);
    store::proto::TierTask t;
    t.set_kind(store::proto::TIER_DROP);
    t.set_version(d.version);
    // Refused only when the worker's tier is gone (then so is the record) or
    // its queue is full (the record stays until the worker restarts).
    static_cast<void>(
        tiers.Enqueue(master::TierTaskRecord{.task = std::move(t), .worker_id = d.worker_id}));
  }

  void FreeReplicas(const ReplicaList& replicas) {
    for (const Replica& rep : replicas) pool.Free(rep.segment_id, rep.allocation);
  }

  // ---- Leases ----------------------------------------------------------------

  void DropLeaseRef(const master::LeasedObject& obj, int64_t now) {
    ReplicaList to_free;
    table.With(obj.key, [&](ObjectTable::Shard& s) {
      if (ObjectMeta* m = s.Find(obj.key); m != nullptr && m->version == obj.version) {
        if (m->lease_refs > 0) --m->lease_refs;
        return;
      }
      auto d = s.deferred.find(obj.version);
      if (d == s.deferred.end()) return;
      if (d->second.lease_refs > 0) --d->second.lease_refs;
      if (d->second.Due(now)) {
        to_free = std::move(d->second.replicas);
        s.deferred.erase(d);
        deferred_entries.fetch_sub(1, std::memory_order_relaxed);
      }
    });
    FreeReplicas(to_free);
  }

  void ReleaseLeaseObjects(const std::vector<master::LeasedObject>& objs, int64_t now) {
    for (const master::LeasedObject& o : objs) DropLeaseRef(o, now);
  }

  // Frees every deferred space that is due; returns how many records went.
  // O(shards + deferred entries); nothing when none is parked.
  uint64_t SweepDeferred(int64_t now) {
    if (deferred_entries.load(std::memory_order_relaxed) == 0) return 0;
    ReplicaList to_free;
    uint64_t n = 0;
    table.ForEach([&](ObjectTable::Shard& s) {
      for (auto it = s.deferred.begin(); it != s.deferred.end();) {
        if (it->second.Due(now)) {
          for (Replica& r : it->second.replicas) to_free.push_back(std::move(r));
          s.deferred.erase(it++);
          deferred_entries.fetch_sub(1, std::memory_order_relaxed);
          ++n;
        } else {
          ++it;
        }
      }
    });
    FreeReplicas(to_free);
    return n;
  }

  // ---- Eviction --------------------------------------------------------------

  static bool Evictable(const ObjectMeta& m, int64_t now, bool allow_soft_pinned) {
    if (!m.committed() || m.Leased(now)) return false;
    // A member of a group not committed yet (ended ones are retired anyway).
    if (m.group() != nullptr && m.group()->Phase() == master::GroupPhase::kOpen) return false;
    // Busy with the SSD tier: an OFFLOAD or a LOAD is in flight.
    if (m.ssd == master::SsdState::kOffloading || m.Loading()) return false;
    // A copy task is filling a replica: it ends (or times out) first.
    if (m.Copying()) return false;
    if (m.Expired(now)) return true;
    const PinLevel pin = m.EffectivePin(now);  // a lapsed soft pin evicts like none
    return pin == PinLevel::kNone || (allow_soft_pinned && pin == PinLevel::kSoft);
  }

  // Frees at least `target_bytes` of replica space if it can: unpinned
  // objects first, soft-pinned ones only when those are not enough. Never
  // touches leased, hard-pinned or pending objects.
  // `only_worker` non-empty: only objects with a replica on that worker go
  // (room for a load into that worker's DRAM). At most `max_victims` objects
  // go (and max_evictions_per_round per pass).
  master::EvictionResult Evict(uint64_t target_bytes, int64_t now,
                               std::string_view only_worker = {},
                               uint64_t max_victims = std::numeric_limits<uint64_t>::max()) {
    return EvictWhere(target_bytes, now, max_victims, only_worker,
                      [&](const ObjectMeta& m) { return OnWorker(m, only_worker); });
  }

  // Evict, of the objects `may_go(meta)` accepts (called under their shard
  // lock). The others keep their place in the policy's order
  // (index::EvictVerdict::kSkip), so room made on some workers leaves the
  // recency of the rest as it was. `only_worker` as Evict's, re-checked when
  // a victim is removed.
  template <typename MayGo>
  master::EvictionResult EvictWhere(uint64_t target_bytes, int64_t now, uint64_t max_victims,
                                    std::string_view only_worker, MayGo&& may_go) {
    master::EvictionResult total;
    for (int pass = 0; pass < 2 && total.freed_bytes < target_bytes && total.victims < max_victims;
         ++pass) {
      const bool soft = pass == 1;
      auto can_evict = [&](const master::ObjectKey& key) -> index::EvictVerdict {
        return table.With(key, [&](ObjectTable::Shard& s) -> index::EvictVerdict {
          const ObjectMeta* m = s.Find(key);
          if (m == nullptr) return index::EvictVerdict::kEvict;
          if (!may_go(*m)) return index::EvictVerdict::kSkip;
          return Evictable(*m, now, soft);
        });
      };
      auto remove = [&](const master::ObjectKey& key) -> std::optional<uint64_t> {
        return EvictOne(key.str(), now, soft, only_worker);
      };
      const master::EvictionResult got =
          evictor.EvictUntil(target_bytes - total.freed_bytes,
                             std::min(options.max_evictions_per_round, max_victims - total.victims),
                             can_evict, remove);
      total.freed_bytes += got.freed_bytes;
      total.victims += got.victims;
    }
    return total;
  }

  // One eviction victim (called by the evictor with neither its lock nor a
  // shard lock held: it takes victims out of the policy in batches). An
  // object already on SSD leaves DRAM at once; one whose replica's worker has
  // a tier starts an OFFLOAD (its DRAM goes when the tier acknowledges, so
  // its bytes count as freed now and Tick subtracts offloading_bytes);
  // anything else is dropped. Returns the DRAM bytes freed (or to be freed),
  // 0 if the object is gone, nullopt if it is no longer evictable.
  static bool OnWorker(const ObjectMeta& m, std::string_view worker) {
    return worker.empty() || std::any_of(m.replicas.begin(), m.replicas.end(),
                                         [&](const Replica& r) { return r.worker_id == worker; });
  }

  std::optional<uint64_t> EvictOne(const std::string& key, int64_t now, bool soft,
                                   std::string_view only_worker = {}) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::optional<Retired> r;
      ReplicaList dram;  // freed while the object stays on SSD
      std::string tenant;
      PinLevel pin = PinLevel::kNone;
      std::string room_on;  // a worker whose tier must make room first
      uint64_t freed = 0;   // segment bytes given back (shared ranges: none)
      uint64_t charge = 0;  // what the tenant was charged
      const bool evictable = table.With(key, [&](ObjectTable::Shard& sh) {
        auto it = sh.objects.find(key);
        if (it == sh.objects.end()) return true;  // already gone: frees nothing
        ObjectMeta& m = it->second;
        if (!Evictable(m, now, soft) || !OnWorker(m, only_worker)) return false;
        charge = m.ChargeBytes();
        freed = UnsharedBytes(m);
        if (m.ssd == master::SsdState::kStored && !m.Expired(now)) {
          dram = std::move(m.replicas);
          m.replicas.clear();
          LogSet(key, m, now);
          tenant = m.tenant;
          pin = m.pin;
          return true;
        }
        const std::string* tier_worker = OffloadSource(m, now);
        if (tier_worker != nullptr) {
          if (tiers.Reserve(*tier_worker, tiers.ChargeFor(m.size_bytes))) {
            if (StartOffloadLocked(key, m, *tier_worker)) return true;
            r = RetireLocked(sh, it, now, 0);  // its queue is full: evict as without a tier
            return true;
          }
          if (attempt == 0) {
            room_on = *tier_worker;
            return true;
          }
        }
        r = RetireLocked(sh, it, now, 0);
        return true;
      });
      if (!evictable) return std::nullopt;
      if (!room_on.empty()) {
        MakeTierRoom(room_on, table.With(key, [&](ObjectTable::Shard& sh) -> uint64_t {
          const ObjectMeta* m = sh.Find(key);
          return m == nullptr ? 0 : tiers.ChargeFor(m->size_bytes);
        }));
        continue;
      }
      if (!dram.empty()) {
        FreeReplicas(dram);
        ReleaseCharge(tenant, pin, charge);
      } else if (r.has_value()) {
        freed += FinishRetired(*r, key, /*erase_from_evictor=*/false);
      } else if (freed == 0) {
        return 0;
      }
      metrics.evictions->Increment();
      metrics.evicted_bytes->Increment(freed);
      return freed;
    }
    return std::nullopt;  // not reached: attempt 1 never asks for room
  }

  // The segment bytes freeing `m`'s replicas gives back: ranges shared with
  // clones only lose a reference (eviction counts a shared range once).
  uint64_t UnsharedBytes(const ObjectMeta& m) const {
    // No clone anywhere (the common case): skip the per-segment lookups.
    if (pool.shared_bytes() == 0) return m.ChargeBytes();
    uint64_t bytes = 0;
    for (const Replica& rep : m.replicas) {
      if (!pool.Shared(rep.segment_id, rep.allocation)) bytes += m.size_bytes;
    }
    return bytes;
  }

  // The worker whose tier should take `m` on eviction, or null: the first
  // complete replica's worker, if it has a tier the object can fit in.
  const std::string* OffloadSource(const ObjectMeta& m, int64_t now) {
    if (m.ssd != master::SsdState::kNone || m.Expired(now)) return nullptr;
    if (m.size_bytes < options.tier.offload_min_bytes) return nullptr;  // the policy drops it
    const uint64_t charge = tiers.ChargeFor(m.size_bytes);
    for (const Replica& rep : m.replicas) {
      if (rep.state == master::ReplicaState::kComplete && tiers.CouldHold(rep.worker_id, charge)) {
        return &rep.worker_id.str();
      }
    }
    return nullptr;
  }

  // False (nothing reserved or changed) when the worker's task queue is full.
  bool StartOffloadLocked(const std::string& key, ObjectMeta& m, const std::string& worker) {
    const Replica* src = nullptr;
    for (const Replica& rep : m.replicas) {
      if (rep.worker_id == worker && rep.state == master::ReplicaState::kComplete) src = &rep;
    }
    MC_ASSERT(src != nullptr, "an offload reads a complete replica on the tier's worker");
    store::proto::TierTask t;
    t.set_kind(store::proto::TIER_OFFLOAD);
    t.set_version(m.version);
    t.set_segment_id(src->segment_id);
    t.set_offset(src->allocation.offset);
    t.set_length(m.size_bytes);
    t.set_checksum(m.checksum);
    t.set_checksum_format(static_cast<store::proto::ChecksumFormat>(m.checksum_format));
    // The dtype lets the tier compress float data; a value already stored
    // compressed (a codec frame) goes as bytes, since it would not shrink again.
    if (m.tensor() != nullptr && m.tensor()->codec() == 0) t.set_dtype(m.tensor()->dtype());
    const uint64_t charge = m.ChargeBytes();
    if (!tiers
             .Enqueue(master::TierTaskRecord{.task = std::move(t),
                                             .key = key,
                                             .worker_id = worker,
                                             .tier_bytes = tiers.ChargeFor(m.size_bytes),
                                             .dram_bytes = charge})
             .has_value()) {
      tiers.Unreserve(worker, tiers.ChargeFor(m.size_bytes));
      return false;
    }
    m.ssd = master::SsdState::kOffloading;
    m.extras.mut().ssd_worker_id = worker;
    offloading_bytes.fetch_add(charge, std::memory_order_relaxed);
    return true;
  }

  // Drops least recently used SSD copies on `worker` until `bytes` fit (or
  // none is left). Shard locks are taken one at a time.
  void MakeTierRoom(const std::string& worker, uint64_t bytes) {
    // Copies in flight are not in the LRU: drop nothing when even dropping
    // every stored copy would not make room.
    if (!tiers.CouldHold(worker, bytes)) return;
    for (size_t n = 0; n < options.max_evictions_per_round && tiers.Unreserved(worker) < bytes;
         ++n) {
      std::optional<std::string> key = tiers.PopOldestResident(worker);
      if (!key.has_value()) return;
      std::optional<SsdDrop> drop;
      std::optional<Retired> r;
      table.With(*key, [&](ObjectTable::Shard& sh) {
        auto it = sh.objects.find(*key);
        if (it == sh.objects.end() || it->second.ssd != master::SsdState::kStored ||
            it->second.ssd_worker_id() != worker) {
          return;
        }
        if (it->second.replicas.empty()) {
          r = RetireLocked(sh, it, Now(), 0);  // on SSD only: the object goes
        } else {
          drop = TakeSsdCopyLocked(it->second);
        }
      });
      // Not in the DRAM evictor when SSD-only; the caller may hold its lock.
      if (r.has_value()) FinishRetired(*r, *key, /*erase_from_evictor=*/false);
      if (drop.has_value()) DropSsdCopy(*drop, *key);
      metrics.tier_ssd_evictions->Increment();
    }
  }

 private:
  static void ReleaseQuota(qos::TenantQuota& q, std::string_view tenant, uint64_t bytes) {
    const absl::Status s = q.Release(tenant, bytes);
    MC_ASSERT(s.ok(), "quota release of bytes the master never admitted");
  }
};

}  // namespace mooncake::master_internal

#endif  // MOONCAKE_STORE_MASTER_INTERNAL_MASTER_STATE_H_
