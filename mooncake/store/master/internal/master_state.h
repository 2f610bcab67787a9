// MasterState<A, P>: the pieces one master is made of, and the few steps
// every operation shares (tenants and charges, retiring an object, lease
// release, deferred frees, eviction). The operations themselves are in
// put_path.h, read_path.h and membership_path.h; master.h is the facade.
//
// Lock order: evictor -> shard -> segment (and the lease table, the worker
// registry and the quotas are leaves: nothing is locked while calling them
// except, for quotas, nothing at all).
#ifndef MOONCAKE_STORE_MASTER_INTERNAL_MASTER_STATE_H_
#define MOONCAKE_STORE_MASTER_INTERNAL_MASTER_STATE_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/qos/tenant_quota.h"
#include "mooncake/store/master/evictor.h"
#include "mooncake/store/master/internal/deadline_queue.h"
#include "mooncake/store/master/lease_table.h"
#include "mooncake/store/master/master_metrics.h"
#include "mooncake/store/master/master_options.h"
#include "mooncake/store/master/membership.h"
#include "mooncake/store/master/object_meta.h"
#include "mooncake/store/master/object_table.h"
#include "mooncake/store/master/segment_pool.h"

namespace mooncake::master_internal {

using master::ObjectMeta;
using master::ObjectTable;
using master::PinLevel;
using master::Replica;

inline constexpr int64_t kNsPerMs = 1'000'000;

// What RetireLocked took out of the table, to finish outside the shard lock.
struct Retired {
  std::vector<Replica> to_free;  // empty when the free was deferred
  std::string tenant;
  PinLevel pin = PinLevel::kNone;
  uint64_t charge = 0;
  bool was_committed = false;
};

template <alloc::Allocator A, master::ObjectEvictionPolicy P>
struct MasterState {
  MasterState(const master::MasterOptions& o, Clock* c, MetricsRegistry* registry,
              typename master::SegmentPool<A>::Factory factory, P policy)
      : options(o),
        clock(c),
        table(o.shard_count),
        pool(std::move(factory)),
        evictor(std::move(policy)),
        workers(o.membership),
        metrics(registry) {}

  const master::MasterOptions options;
  Clock* const clock;
  ObjectTable table;
  master::SegmentPool<A> pool;
  master::LeaseTable leases;
  master::Evictor<P> evictor;
  master::WorkerRegistry workers;
  qos::TenantQuota quota;
  qos::TenantQuota pinned_quota;
  master::MasterMetrics metrics;
  master::IdSource ids;
  DeadlineQueue put_deadlines;
  DeadlineQueue ttl_deadlines;
  // relaxed counters: statistics only.
  std::atomic<int64_t> objects{0};
  std::atomic<int64_t> object_bytes{0};
  std::atomic<int64_t> pending_puts{0};

  int64_t Now() const { return clock->NowNs(); }

  // ---- Tenants ---------------------------------------------------------------

  absl::Status SetTenant(std::string_view name, uint64_t capacity, uint64_t pinned_capacity) {
    if (absl::Status s = quota.SetCapacity(name, capacity); !s.ok()) return s;
    return pinned_quota.SetCapacity(name, pinned_capacity == 0 ? capacity : pinned_capacity);
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
  Retired RetireLocked(ObjectTable::Shard& shard, decltype(shard.objects.begin()) it, int64_t now,
                       int64_t hold_until_ns) {
    ObjectMeta& m = it->second;
    Retired r{.tenant = std::move(m.tenant),
              .pin = m.pin,
              .charge = m.ChargeBytes(),
              .was_committed = m.committed()};
    if (m.committed()) {
      objects.fetch_sub(1, std::memory_order_relaxed);
      object_bytes.fetch_sub(static_cast<int64_t>(m.size_bytes), std::memory_order_relaxed);
    } else {
      pending_puts.fetch_sub(1, std::memory_order_relaxed);
    }
    if (!m.replicas.empty() && (m.Leased(now) || hold_until_ns > now)) {
      const uint64_t id = m.committed() ? m.version : m.put_id;
      shard.deferred.emplace(
          id, master::DeferredFree{it->first, std::move(m.replicas), m.lease_refs, m.lease_until_ns,
                                   hold_until_ns});
    } else {
      r.to_free = std::move(m.replicas);
    }
    shard.objects.erase(it);
    return r;
  }

  // Outside the shard lock. `key` leaves the policy unless the evictor is the
  // caller (it dropped the key already and holds its own lock).
  void FinishRetired(Retired& r, const std::string& key, bool erase_from_evictor) {
    FreeReplicas(r.to_free);
    ReleaseCharge(r.tenant, r.pin, r.charge);
    if (r.was_committed && erase_from_evictor) evictor.Erase(key);
  }

  void FreeReplicas(const std::vector<Replica>& replicas) {
    for (const Replica& rep : replicas) pool.Free(rep.segment_id, rep.allocation);
  }

  // ---- Leases ----------------------------------------------------------------

  void DropLeaseRef(const master::LeasedObject& obj, int64_t now) {
    std::vector<Replica> to_free;
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
      }
    });
    FreeReplicas(to_free);
  }

  void ReleaseLeaseObjects(const std::vector<master::LeasedObject>& objs, int64_t now) {
    for (const master::LeasedObject& o : objs) DropLeaseRef(o, now);
  }

  // Frees every deferred space that is due; returns how many records went.
  uint64_t SweepDeferred(int64_t now) {
    std::vector<Replica> to_free;
    uint64_t n = 0;
    table.ForEach([&](ObjectTable::Shard& s) {
      for (auto it = s.deferred.begin(); it != s.deferred.end();) {
        if (it->second.Due(now)) {
          for (Replica& r : it->second.replicas) to_free.push_back(std::move(r));
          s.deferred.erase(it++);
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
    if (m.Expired(now)) return true;
    return m.pin == PinLevel::kNone || (allow_soft_pinned && m.pin == PinLevel::kSoft);
  }

  // Frees at least `target_bytes` of replica space if it can: unpinned
  // objects first, soft-pinned ones only when those are not enough. Never
  // touches leased, hard-pinned or pending objects.
  master::EvictionResult Evict(uint64_t target_bytes, int64_t now) {
    master::EvictionResult total;
    for (int pass = 0; pass < 2 && total.freed_bytes < target_bytes; ++pass) {
      const bool soft = pass == 1;
      auto can_evict = [&](const std::string& key) {
        return table.With(key, [&](ObjectTable::Shard& s) {
          const ObjectMeta* m = s.Find(key);
          return m == nullptr || Evictable(*m, now, soft);
        });
      };
      auto remove = [&](const std::string& key) -> std::optional<uint64_t> {
        std::optional<Retired> r;
        const bool evictable = table.With(key, [&](ObjectTable::Shard& s) {
          auto it = s.objects.find(key);
          if (it == s.objects.end()) return true;  // already gone: frees nothing
          if (!Evictable(it->second, now, soft)) return false;
          r = RetireLocked(s, it, now, 0);
          return true;
        });
        if (!evictable) return std::nullopt;
        if (!r.has_value()) return 0;
        const uint64_t freed = r->charge;
        FinishRetired(*r, key, /*erase_from_evictor=*/false);
        metrics.evictions->Increment();
        metrics.evicted_bytes->Increment(freed);
        return freed;
      };
      const master::EvictionResult got = evictor.EvictUntil(
          target_bytes - total.freed_bytes, options.max_evictions_per_round, can_evict, remove);
      total.freed_bytes += got.freed_bytes;
      total.victims += got.victims;
    }
    return total;
  }

 private:
  static void ReleaseQuota(qos::TenantQuota& q, std::string_view tenant, uint64_t bytes) {
    const absl::Status s = q.Release(tenant, bytes);
    MC_ASSERT(s.ok(), "quota release of bytes the master never admitted");
  }
};

}  // namespace mooncake::master_internal

#endif  // MOONCAKE_STORE_MASTER_INTERNAL_MASTER_STATE_H_
