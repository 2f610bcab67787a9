// Master<A, P>: the store's metadata server, composed of separate pieces:
//
//   ObjectTable    (object_table.h)   key -> ObjectMeta, sharded
//   SegmentPool<A> (segment_pool.h)   one Allocator A per mounted segment
//   placement      (placement.h)      which segments get the replicas
//   LeaseTable     (lease_table.h)    read leases by id
//   Evictor<P>     (evictor.h)        a mooncake/index EvictionPolicy P
//   WorkerRegistry (membership.h)     workers, heartbeats, expiry
//   TenantQuota    (mooncake/qos)     per-tenant byte quotas (and pinned bytes)
//   MasterMetrics  (master_metrics.h) counters and gauges
//
// Every RPC of master.proto is a method here taking the request message and
// returning StatusOr<response> (MasterService binds them to the RPC layer).
// The protocol, its timeouts and error codes are in docs/master.md; the put
// rules are in internal/put_path.h, visibility rules in internal/read_path.h.
//
// Time comes from the Clock given to Create (a FakeClock in tests). Nothing
// runs on its own: Tick() expires leases, puts, TTLs and silent workers,
// frees deferred space, evicts down to the low watermark and refreshes the
// gauges (once use passes the high watermark, each Tick evicts at most two
// rounds of max_evictions_per_round objects, and the following Ticks go on
// until use is down to the low watermark or nothing more can be evicted);
// MasterService calls it on a timer. Reads and puts never wait for a Tick (a
// stale pending put or expired object is handled on the spot).
//
// Template arguments: A, an alloc::Allocator (TlsfAllocator, with
// SegmentAllocatorTraits, is the reference; others need a factory), and P,
// an index::EvictionPolicy over std::string keys (LruPolicy is the reference).
//
// Thread-safety: every method may be called concurrently from any thread.
#ifndef MOONCAKE_STORE_MASTER_MASTER_H_
#define MOONCAKE_STORE_MASTER_MASTER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mooncake/alloc/tlsf_allocator.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/mutex.h"
#include "mooncake/index/lru_policy.h"
#include "mooncake/store/master/evictor.h"
#include "mooncake/store/master/internal/batch_path.h"
#include "mooncake/store/master/internal/group_path.h"
#include "mooncake/store/master/internal/master_state.h"
#include "mooncake/store/master/internal/membership_path.h"
#include "mooncake/store/master/internal/put_path.h"
#include "mooncake/store/master/internal/read_path.h"
#include "mooncake/store/master/internal/relocation_path.h"
#include "mooncake/store/master/internal/replication_path.h"
#include "mooncake/store/master/internal/restore_path.h"
#include "mooncake/store/master/internal/tier_path.h"
#include "mooncake/store/master/master_options.h"
#include "mooncake/store/master/mutation_log.h"
#include "mooncake/store/rpc/master.pb.h"

namespace mooncake::master {

namespace proto = ::mooncake::store::proto;

using ReferenceEvictionPolicy = index::LruPolicy<ObjectKey, ObjectKeyHash>;
static_assert(ObjectEvictionPolicy<ReferenceEvictionPolicy>);

// What one Tick() did.
struct TickReport {
  uint64_t leases_expired = 0;
  uint64_t puts_timed_out = 0;
  uint64_t objects_expired = 0;
  uint64_t deferred_freed = 0;
  uint64_t workers_expired = 0;
  uint64_t replicas_dropped = 0;
  uint64_t evicted_objects = 0;
  uint64_t evicted_bytes = 0;
  uint64_t tier_tasks_timed_out = 0;
  uint64_t copy_tasks_timed_out = 0;
  uint64_t hot_bytes_dropped = 0;  // hot extra replicas given back for space
  uint64_t groups_expired = 0;     // open object groups not committed in time
};

struct MasterStats {
  int64_t objects = 0;
  int64_t object_bytes = 0;
  int64_t pending_puts = 0;
  uint64_t leases = 0;
  uint64_t used_bytes = 0;
  uint64_t capacity_bytes = 0;
  size_t workers = 0;
  size_t segments = 0;
  size_t deferred_frees = 0;
  int64_t ssd_objects = 0;          // objects with a stored SSD copy
  uint64_t offloading_bytes = 0;    // DRAM bytes offloads in flight will free
  size_t tier_tasks = 0;            // queued or in flight
  size_t copy_tasks = 0;            // copies between workers queued or in flight
  size_t put_deadline_entries = 0;  // about the puts still pending (ended ones leave)
};

template <alloc::Allocator A = alloc::TlsfAllocator,
          ObjectEvictionPolicy P = ReferenceEvictionPolicy>
class Master {
 public:
  using Allocator = A;
  using Policy = P;
  using AllocatorFactory = typename SegmentPool<A>::Factory;

  // `clock` and `metrics` (null: a private registry) must outlive the master.
  // `factory` null: SegmentAllocatorTraits<A>. Errors: INVALID_ARGUMENT (bad
  // options or tenant configuration).
  static absl::StatusOr<std::unique_ptr<Master>> Create(MasterOptions options,
                                                        Clock* clock = &MonotonicClock::Get(),
                                                        MetricsRegistry* metrics = nullptr,
                                                        AllocatorFactory factory = nullptr,
                                                        P policy = P()) {
    if (absl::Status s = ValidateMasterOptions(options); !s.ok()) return s;
    if constexpr (!HasSegmentAllocatorTraits<A>) {
      if (factory == nullptr) {
        return absl::InvalidArgumentError("this Allocator needs an AllocatorFactory");
      }
    }
    auto m = std::unique_ptr<Master>(
        new Master(options, clock, metrics, std::move(factory), std::move(policy)));
    absl::Status s =
        m->s_.SetTenant(options.default_tenant, options.default_tenant_capacity_bytes, 0);
    for (const TenantConfig& t : options.tenants) {
      if (!s.ok()) break;
      s = m->s_.SetTenant(t.name, t.capacity_bytes, t.pinned_capacity_bytes);
      if (s.ok()) s = m->s_.SetTenantRate(t.name, t.rate_bytes_per_sec);
    }
    if (!s.ok()) return s;
    return m;
  }

  Master(const Master&) = delete;
  Master& operator=(const Master&) = delete;

  // Adds a tenant or changes its capacities (pinned 0: = capacity).
  absl::Status SetTenant(std::string_view name, uint64_t capacity_bytes,
                         uint64_t pinned_capacity_bytes = 0) {
    return s_.SetTenant(name, capacity_bytes, pinned_capacity_bytes);
  }

  // Limits the bytes per second of puts admitted for a configured tenant
  // (TenantConfig::rate_bytes_per_sec; 0: not limited). NOT_FOUND: an
  // unknown tenant; INVALID_ARGUMENT: above kMaxTenantRateBytesPerSec.
  absl::Status SetTenantRate(std::string_view name, uint64_t bytes_per_sec) {
    return s_.SetTenantRate(name.empty() ? std::string_view(s_.options.default_tenant) : name,
                            bytes_per_sec);
  }

  // ---- The RPCs of master.proto ----------------------------------------------
  absl::StatusOr<proto::MountSegmentResponse> MountSegment(const proto::MountSegmentRequest& r) {
    return master_internal::MountSegment(s_, r);
  }
  absl::StatusOr<proto::UnmountSegmentResponse> UnmountSegment(
      const proto::UnmountSegmentRequest& r) {
    return master_internal::UnmountSegment(s_, r);
  }
  absl::StatusOr<proto::HeartbeatResponse> Heartbeat(const proto::HeartbeatRequest& r) {
    return master_internal::Heartbeat(s_, r);
  }
  absl::StatusOr<proto::PutStartResponse> PutStart(const proto::PutStartRequest& r) {
    return master_internal::PutStart(s_, r);
  }
  // PutStart for a thread that must not stall (an RPC I/O thread): evicts at
  // most options().inline_put_evictions objects, and sweeps deferred frees
  // only while at most 1024 are parked. A put that needs more returns
  // nullopt, having left no trace but those evictions: call PutStart for it
  // on a thread that may take longer.
  std::optional<absl::StatusOr<proto::PutStartResponse>> TryPutStartInline(
      const proto::PutStartRequest& r) {
    return master_internal::PutStartWithin(s_, r, master_internal::InlineBudget(s_.options));
  }
  absl::StatusOr<proto::PutEndResponse> PutEnd(const proto::PutEndRequest& r) {
    return master_internal::PutEnd(s_, r);
  }
  absl::StatusOr<proto::PutRevokeResponse> PutRevoke(const proto::PutRevokeRequest& r) {
    return master_internal::PutRevoke(s_, r);
  }
  absl::StatusOr<proto::GetReplicasResponse> GetReplicas(const proto::GetReplicasRequest& r) {
    return master_internal::GetReplicas(s_, r);
  }
  absl::StatusOr<proto::ReleaseLeasesResponse> ReleaseLeases(const proto::ReleaseLeasesRequest& r) {
    return master_internal::ReleaseLeases(s_, r);
  }
  absl::StatusOr<proto::TouchObjectsResponse> TouchObjects(const proto::TouchObjectsRequest& r) {
    return master_internal::TouchObjects(s_, r);
  }
  absl::StatusOr<proto::RemoveResponse> Remove(const proto::RemoveRequest& r) {
    return master_internal::Remove(s_, r);
  }
  // Walks shards under their locks one at a time: bind it to a handler thread.
  absl::StatusOr<proto::RemoveAllResponse> RemoveAll(const proto::RemoveAllRequest& r) {
    return master_internal::RemoveAll(s_, r);
  }
  absl::StatusOr<proto::ExistsResponse> Exists(const proto::ExistsRequest& r) {
    return master_internal::Exists(s_, r);
  }
  absl::StatusOr<proto::BatchExistsResponse> BatchExists(const proto::BatchExistsRequest& r) {
    return master_internal::BatchExists(s_, r);
  }
  absl::StatusOr<proto::PrefixQueryResponse> PrefixQuery(const proto::PrefixQueryRequest& r) {
    return master_internal::PrefixQuery(s_, r);
  }
  absl::StatusOr<proto::DescribeSegmentsResponse> DescribeSegments(
      const proto::DescribeSegmentsRequest& r) {
    return master_internal::DescribeSegments(s_, r);
  }
  // May wait up to r.wait_ms (a long poll): bind it to a handler thread.
  absl::StatusOr<proto::TierSyncResponse> TierSync(const proto::TierSyncRequest& r) {
    return master_internal::TierSync(s_, r);
  }
  absl::StatusOr<proto::TierReportResponse> TierReport(const proto::TierReportRequest& r) {
    return master_internal::TierReport(s_, r);
  }
  // May wait up to r.wait_ms (a long poll): bind it to a handler thread.
  absl::StatusOr<proto::CopySyncResponse> CopySync(const proto::CopySyncRequest& r) {
    return master_internal::CopySync(s_, r);
  }
  // Walks every shard once (the worker's objects, hottest first).
  absl::StatusOr<proto::DrainWorkerResponse> DrainWorker(const proto::DrainWorkerRequest& r) {
    return master_internal::DrainWorker(s_, r);
  }
  absl::StatusOr<proto::DrainStatusResponse> DrainStatus(const proto::DrainStatusRequest& r) {
    return master_internal::GetDrainStatus(s_, r);
  }
  absl::StatusOr<proto::CreateCopyTaskResponse> CreateCopyTask(
      const proto::CreateCopyTaskRequest& r) {
    return master_internal::CreateCopyTask(s_, r);
  }
  absl::StatusOr<proto::CreateMoveTaskResponse> CreateMoveTask(
      const proto::CreateMoveTaskRequest& r) {
    return master_internal::CreateMoveTask(s_, r);
  }
  absl::StatusOr<proto::QueryTaskResponse> QueryTask(const proto::QueryTaskRequest& r) {
    return master_internal::QueryTask(s_, r);
  }
  // Clones and groups: internal/group_path.h (docs/agents.md).
  absl::StatusOr<proto::CloneResponse> Clone(const proto::CloneRequest& r) {
    return master_internal::Clone(s_, r);
  }
  absl::StatusOr<proto::CommitGroupResponse> CommitGroup(const proto::CommitGroupRequest& r) {
    return master_internal::CommitGroup(s_, r);
  }
  absl::StatusOr<proto::RemoveGroupResponse> RemoveGroup(const proto::RemoveGroupRequest& r) {
    return master_internal::RemoveGroup(s_, r);
  }
  // Walks every shard: bind it to a handler thread.
  absl::StatusOr<proto::QueryObjectsResponse> QueryObjects(const proto::QueryObjectsRequest& r) {
    return master_internal::QueryObjects(s_, r);
  }
  // The batched forms: every item as its single-item RPC (internal/batch_path.h).
  absl::StatusOr<proto::BatchGetReplicasResponse> BatchGetReplicas(
      const proto::BatchGetReplicasRequest& r) {
    return master_internal::ForEachItem<proto::BatchGetReplicasResponse>(
        r, "BatchGetReplicas",
        [this](const proto::GetReplicasRequest& item) { return GetReplicas(item); });
  }
  // May evict as much as its items need: bind it to a handler thread.
  absl::StatusOr<proto::BatchPutStartResponse> BatchPutStart(const proto::BatchPutStartRequest& r) {
    return master_internal::ForEachItem<proto::BatchPutStartResponse>(
        r, "BatchPutStart", [this](const proto::PutStartRequest& item) { return PutStart(item); });
  }
  absl::StatusOr<proto::BatchPutEndResponse> BatchPutEnd(const proto::BatchPutEndRequest& r) {
    return master_internal::ForEachItem<proto::BatchPutEndResponse>(
        r, "BatchPutEnd", [this](const proto::PutEndRequest& item) { return PutEnd(item); });
  }

  // ---- High availability (mooncake/store/ha) ----------------------------------

  // Reports every later change of the durable state to `log` (mutation_log.h);
  // null: none. `log` must outlive the master. Call before the master serves.
  void SetMutationLog(MutationLog* log) { s_.log = log; }

  // Fills this fresh master with another master's durable state (see
  // internal/restore_path.h for what comes back). Errors: FAILED_PRECONDITION
  // (not fresh), those of mounting a segment under its id.
  absl::StatusOr<RestoreReport> Restore(std::vector<RestoredSegment> segments,
                                        std::vector<RestoredObject> objects, uint64_t next_id,
                                        std::vector<RestoredHold> holds = {}) requires
      requires(SegmentPool<A>& p, uint64_t v) {
    p.Claim(v, v, v);
  }
  {
    return master_internal::Restore(s_, std::move(segments), std::move(objects), next_id,
                                    std::move(holds));
  }

  // The next put id or version this master would hand out.
  uint64_t NextId() const { return s_.ids.Peek(); }

  // ---- Housekeeping ------------------------------------------------------------

  TickReport Tick() {
    const int64_t now = s_.Now();
    TickReport r;
    r.leases_expired = master_internal::ExpireLeases(s_, now);
    r.puts_timed_out = master_internal::TimeOutPuts(s_, now);
    r.objects_expired = master_internal::ExpireObjects(s_, now);
    r.groups_expired = master_internal::ExpireGroups(s_, now);
    r.deferred_freed = s_.SweepDeferred(now);
    std::tie(r.workers_expired, r.replicas_dropped) = master_internal::ExpireWorkers(s_, now);
    r.tier_tasks_timed_out = master_internal::ExpireTierTasks(s_, now);
    r.copy_tasks_timed_out = master_internal::ExpireCopyTasks(s_, now);  // and plans copies
    master_internal::AdvanceRelocation(s_, now);  // compactions of fragmented segments
    s_.pool.DecayReads();
    // Offloads in flight free their DRAM when the tier acknowledges: count
    // them as freed already, so one round does not offload twice as much.
    const double used = static_cast<double>(s_.pool.used_bytes()) -
                        static_cast<double>(s_.offloading_bytes.load(std::memory_order_relaxed));
    const double cap = static_cast<double>(s_.pool.capacity_bytes());
    if (WatermarkEvicting(used, cap)) {
      // Hot extra replicas are the first space to give back.
      r.hot_bytes_dropped = master_internal::DropHotExtras(s_);
      const auto target = static_cast<uint64_t>(used - s_.options.low_watermark * cap);
      const EvictionResult e = s_.Evict(target, now);
      r.evicted_objects = e.victims;
      r.evicted_bytes = e.freed_bytes;
      // Nothing more can go (the rest is leased, pinned or being put): stop
      // trying until use passes the high watermark again.
      if (e.freed_bytes == 0) evicting_.store(false, std::memory_order_relaxed);
    }
    RefreshMetrics();
    return r;
  }

  // Evicts at least `bytes` if it can (the watermark logic of Tick, by hand).
  EvictionResult EvictBytes(uint64_t bytes) { return s_.Evict(bytes, s_.Now()); }

  MasterStats Stats() {
    return MasterStats{.objects = s_.objects.load(std::memory_order_relaxed),
                       .object_bytes = s_.object_bytes.load(std::memory_order_relaxed),
                       .pending_puts = s_.pending_puts.load(std::memory_order_relaxed),
                       .leases = s_.leases.live(),
                       .used_bytes = s_.pool.used_bytes(),
                       .capacity_bytes = s_.pool.capacity_bytes(),
                       .workers = s_.workers.size(),
                       .segments = s_.pool.size(),
                       .deferred_frees = s_.deferred_entries.load(std::memory_order_relaxed),
                       .ssd_objects = s_.ssd_objects.load(std::memory_order_relaxed),
                       .offloading_bytes = s_.offloading_bytes.load(std::memory_order_relaxed),
                       .tier_tasks = s_.tiers.tasks(),
                       .copy_tasks = s_.repl.copies.tasks(),
                       .put_deadline_entries = s_.put_deadlines.size()};
  }

  // Sets the gauges (Tick calls it): totals, per-worker usage, per-segment
  // fragmentation (1 - largest free extent / free bytes).
  void RefreshMetrics() {
    MutexLock lock(&refresh_mu_);
    const MasterStats st = Stats();
    MasterMetrics& m = s_.metrics;
    m.objects->Set(static_cast<double>(st.objects));
    m.object_bytes->Set(static_cast<double>(st.object_bytes));
    m.pending_puts->Set(static_cast<double>(st.pending_puts));
    m.leases->Set(static_cast<double>(st.leases));
    m.deferred_frees->Set(static_cast<double>(st.deferred_frees));
    m.workers->Set(static_cast<double>(st.workers));
    m.segments->Set(static_cast<double>(st.segments));
    m.used_bytes->Set(static_cast<double>(st.used_bytes));
    m.capacity_bytes->Set(static_cast<double>(st.capacity_bytes));
    m.tier_objects->Set(static_cast<double>(st.ssd_objects));
    m.shared_bytes->Set(static_cast<double>(s_.pool.shared_bytes()));
    m.groups->Set(static_cast<double>(s_.groups.size()));
    absl::flat_hash_set<std::string> models;
    for (const auto& [model, objects, bytes] : s_.models.Snapshot()) {
      models.insert(model);
      auto [it, fresh] = model_series_.try_emplace(model);
      if (fresh) it->second = m.PerModel(model);
      it->second.first->Set(static_cast<double>(objects));
      it->second.second->Set(static_cast<double>(bytes));
    }
    for (auto it = model_series_.begin(); it != model_series_.end();) {
      if (!models.contains(it->first)) {
        m.ForgetModel(it->first);
        model_series_.erase(it++);
      } else {
        ++it;
      }
    }
    double tier_capacity = 0, tier_reserved = 0, tier_shortfall = 0;
    for (const TierWorkerView& t : s_.tiers.Snapshot()) {
      tier_capacity += static_cast<double>(t.capacity_bytes);
      tier_reserved += static_cast<double>(t.reserved_bytes);
      tier_shortfall += static_cast<double>(t.shortfall_bytes);
    }
    m.tier_capacity_bytes->Set(tier_capacity);
    m.tier_reserved_bytes->Set(tier_reserved);
    m.tier_shortfall_bytes->Set(tier_shortfall);
    absl::flat_hash_map<std::string, double> per_worker;
    absl::flat_hash_set<uint64_t> segments;
    for (const SegmentView& v : s_.pool.Snapshot()) {
      per_worker[v.worker_id] += static_cast<double>(v.used_bytes);
      if (std::optional<alloc::AllocatorStats> a = s_.pool.Stats(v.id)) {
        m.PerSegment(v.id)->Set(a->ExternalFragmentation());
        segments.insert(v.id);
      }
    }
    // Series of segments and workers gone since the last refresh leave the
    // registry: a master outliving many worker restarts keeps none of theirs.
    for (auto it = segment_series_.begin(); it != segment_series_.end();) {
      if (!segments.contains(*it)) {
        m.ForgetSegment(*it);
        segment_series_.erase(it++);
      } else {
        ++it;
      }
    }
    segment_series_.insert(segments.begin(), segments.end());
    for (auto it = worker_gauges_.begin(); it != worker_gauges_.end();) {
      if (!per_worker.contains(it->first)) {
        m.ForgetWorker(it->first);
        worker_gauges_.erase(it++);
      } else {
        ++it;
      }
    }
    for (const auto& [worker, used] : per_worker) {
      auto [it, fresh] = worker_gauges_.try_emplace(worker, nullptr);
      if (fresh) it->second = m.PerWorker(worker);
      it->second->Set(used);
    }
    absl::flat_hash_set<std::string> tenants;
    for (const auto& [name, usage] : s_.quota.Snapshot()) {
      tenants.insert(name);
      auto [it, fresh] = tenant_series_.try_emplace(name);
      if (fresh) it->second = m.PerTenant(name);
      it->second.used_bytes->Set(static_cast<double>(usage.used_bytes));
      it->second.capacity_bytes->Set(static_cast<double>(usage.capacity_bytes));
      // The quota's total; the counter catches up by the difference.
      const uint64_t seen = it->second.refused->Value();
      if (usage.refused_requests > seen)
        it->second.refused->Increment(usage.refused_requests - seen);
      const uint64_t limited = s_.rates.Refused(name);
      const uint64_t limited_seen = it->second.rate_limited->Value();
      if (limited > limited_seen) it->second.rate_limited->Increment(limited - limited_seen);
    }
    for (auto it = tenant_series_.begin(); it != tenant_series_.end();) {
      if (!tenants.contains(it->first)) {
        m.ForgetTenant(it->first);
        tenant_series_.erase(it++);
      } else {
        ++it;
      }
    }
  }

  MetricsRegistry* metrics() const { return s_.metrics.registry(); }
  std::vector<SegmentView> Segments() const { return s_.pool.Snapshot(); }
  // Segment `id`'s allocator's own accounting (nullopt: not mounted).
  std::optional<alloc::AllocatorStats> SegmentAllocatorStats(uint64_t id) const {
    return s_.pool.Stats(id);
  }
  // Calls `read(const A&)` with segment `id`'s allocator under its lock;
  // false if it is not mounted (SegmentPool::ReadAllocator).
  template <typename Read>
  bool ReadSegmentAllocator(uint64_t id, Read&& read) const {
    return s_.pool.ReadAllocator(id, std::forward<Read>(read));
  }
  // Bytes of references beyond the first to ranges clones share.
  uint64_t SharedBytes() const { return s_.pool.shared_bytes(); }
  std::vector<TierWorkerView> Tiers() const { return s_.tiers.Snapshot(); }
  // Wakes TierSync long polls and makes new ones answer at once (shutdown).
  void StopTierWaits() {
    s_.tiers.StopWaiting();
    s_.repl.copies.StopWaiting();
  }
  std::optional<qos::TenantUsage> TenantUsage(std::string_view tenant) const {
    return s_.quota.Usage(tenant.empty() ? std::string_view(s_.options.default_tenant) : tenant);
  }
  const MasterOptions& options() const { return s_.options; }

 private:
  Master(const MasterOptions& o, Clock* clock, MetricsRegistry* metrics, AllocatorFactory f,
         P policy)
      : s_(o, clock, metrics, std::move(f), std::move(policy)) {}

  // The watermark hysteresis: whether this Tick evicts. Evicting starts when
  // `used` passes the high watermark and lasts, over as many Ticks as its
  // bounded rounds need, until `used` is down to the low watermark.
  bool WatermarkEvicting(double used, double cap) {
    if (cap <= 0 || used <= s_.options.low_watermark * cap) {
      evicting_.store(false, std::memory_order_relaxed);
      return false;
    }
    if (used > s_.options.high_watermark * cap) {
      evicting_.store(true, std::memory_order_relaxed);
      return true;
    }
    return evicting_.load(std::memory_order_relaxed);
  }

  master_internal::MasterState<A, P> s_;
  // Set while Ticks evict from the high watermark down to the low one.
  // Relaxed: a hint between Ticks; a concurrent Tick that reads it stale
  // evicts one bounded round more or less.
  std::atomic<bool> evicting_{false};
  Mutex refresh_mu_;
  absl::flat_hash_map<std::string, Gauge*> worker_gauges_ ABSL_GUARDED_BY(refresh_mu_);
  absl::flat_hash_set<uint64_t> segment_series_ ABSL_GUARDED_BY(refresh_mu_);
  absl::flat_hash_map<std::string, MasterMetrics::TenantSeries> tenant_series_
      ABSL_GUARDED_BY(refresh_mu_);
  absl::flat_hash_map<std::string, std::pair<Gauge*, Gauge*>> model_series_
      ABSL_GUARDED_BY(refresh_mu_);
};

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_MASTER_H_
