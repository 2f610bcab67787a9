// MasterMetrics: the master's counters and gauges in a MetricsRegistry
// (rendered as Prometheus text by the registry's owner).
//
// Counters move on every operation (lock-free atomics). Gauges of state
// (objects, bytes, leases, per-worker usage, per-segment fragmentation) are
// set by Master::RefreshMetrics(), which Tick() calls, so reads never pay for
// them.
//
// Families (prefix mooncake_master_):
//   objects, object_bytes, pending_puts, leases, deferred_frees, workers,
//   segments, used_bytes, capacity_bytes                      gauges
//   puts_total{result=started|committed|revoked|timed_out|failed}
//   gets_total{result=hit|miss}, prefix_queries_total, prefix_blocks_matched_total,
//   evictions_total, evicted_bytes_total, removes_total, expired_total
//   worker_used_bytes{worker}, segment_fragmentation{segment} gauges
//   tenant_used_bytes{tenant}, tenant_capacity_bytes{tenant} gauges,
//   tenant_refused_total{tenant}, tenant_rate_limited_total{tenant}
//   copies_total{kind=user|drain|repair|hot|relocate, result=ok|failed}, copied_bytes_total,
//   hot_replicas_dropped_total, repair_backlog, hot_extra_bytes   (replication)
//   relocations_total, relocated_bytes_total, relocations_failed_total,
//   compactions_total{outcome=started|no_window|done|failed}      (compaction)
//   clones_total, cloned_bytes_total (bytes referred to, none copied),
//   shared_bytes (gauge), groups_committed_total, group_members_retired_total,
//   groups (gauge), model_objects{model}, model_bytes{model} gauges
//
// Thread-safety: pointers are set once in the constructor; the series are
// atomics; PerWorker/PerSegment take the registry's mutex (Tick only). A
// worker's and a segment's series exist while it is mounted: RefreshMetrics
// drops them when it leaves (unmounted or expired).
#ifndef MOONCAKE_STORE_MASTER_MASTER_METRICS_H_
#define MOONCAKE_STORE_MASTER_MASTER_METRICS_H_

#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/metrics.h"

namespace mooncake::master {

class MasterMetrics {
 public:
  // `registry` null: a private one. It must outlive this.
  explicit MasterMetrics(MetricsRegistry* registry) {
    if (registry == nullptr) {
      own_ = std::make_unique<MetricsRegistry>();
      registry = own_.get();
    }
    registry_ = registry;
    objects = G("objects", "Committed objects.");
    object_bytes = G("object_bytes", "Sum of committed object sizes (one replica each).");
    pending_puts = G("pending_puts", "Puts started and not yet ended.");
    leases = G("leases", "Read leases live.");
    deferred_frees = G("deferred_frees", "Removed objects whose space waits for leases.");
    workers = G("workers", "Live workers.");
    segments = G("segments", "Mounted segments.");
    used_bytes = G("used_bytes", "Segment bytes allocated.");
    capacity_bytes = G("capacity_bytes", "Segment bytes mounted.");
    puts_started = Put("started");
    puts_committed = Put("committed");
    puts_revoked = Put("revoked");
    puts_timed_out = Put("timed_out");
    puts_failed = Put("failed");
    gets_hit = Get("hit");
    gets_miss = Get("miss");
    prefix_queries = C("prefix_queries_total", "PrefixQuery calls.", {});
    prefix_blocks_matched = C("prefix_blocks_matched_total", "Blocks PrefixQuery found.", {});
    evictions = C("evictions_total", "Objects evicted.", {});
    evicted_bytes = C("evicted_bytes_total", "Replica bytes freed by eviction.", {});
    removes = C("removes_total", "Objects removed by Remove.", {});
    expired = C("expired_total", "Objects removed at their TTL.", {});
    tier_offloads = Tier("offload", "ok");
    tier_offload_failures = Tier("offload", "failed");
    tier_loads = Tier("load", "ok");
    tier_load_failures = Tier("load", "failed");
    tier_drops = Tier("drop", "ok");
    tier_drop_failures = Tier("drop", "failed");
    tier_ssd_evictions =
        C("tier_ssd_evictions_total", "SSD copies dropped to make room for newer ones.", {});
    tier_quarantined_bytes =
        C("tier_quarantined_bytes_total", "DRAM bytes of timed-out loads kept out of use.", {});
    tier_objects = G("tier_objects", "Objects with a copy on a worker's SSD tier.");
    tier_capacity_bytes = G("tier_capacity_bytes", "SSD tier bytes the workers reported.");
    tier_reserved_bytes =
        G("tier_reserved_bytes", "Bytes charged for SSD copies, stored or storing.");
    tier_shortfall_bytes = G("tier_shortfall_bytes",
                             "SSD tier capacity not counted on after tiers refused records for "
                             "space (fragmentation).");
    static constexpr const char* kKinds[] = {"user", "drain", "repair", "hot", "relocate"};
    for (int k = 0; k < 5; ++k) {
      copies_ok[k] = Copy(kKinds[k], "ok");
      copies_failed[k] = Copy(kKinds[k], "failed");
    }
    copied_bytes = C("copied_bytes_total", "Replica bytes copied between workers.", {});
    relocations = C("relocations_total", "Replicas moved within their segment by compaction.", {});
    relocated_bytes = C("relocated_bytes_total", "Bytes moved within segments by compaction.", {});
    relocations_failed =
        C("relocations_failed_total",
          "Compaction moves that failed or timed out (their replica dropped).", {});
    compactions_started = Compaction("started");
    compactions_no_window = Compaction("no_window");
    compactions_done = Compaction("done");
    compactions_failed = Compaction("failed");
    hot_dropped =
        C("hot_replicas_dropped_total", "Hot-object extra replicas dropped for space.", {});
    repair_backlog = G("repair_backlog", "Objects waiting for re-replication.");
    hot_extra_bytes = G("hot_extra_bytes", "Segment bytes held by hot-object extra replicas.");
    clones = C("clones_total", "Keys made by Clone.", {});
    cloned_bytes = C("cloned_bytes_total",
                     "Replica bytes clones refer to (shared with their sources, none copied).", {});
    shared_bytes =
        G("shared_bytes", "Segment bytes referred to by more than one key, counted per extra key.");
    groups_committed = C("groups_committed_total", "Object groups made visible.", {});
    group_members_retired =
        C("group_members_retired_total", "Members retired because their group ended.", {});
    groups = G("groups", "Object groups open, visible or ending.");
  }

  // Per TensorMeta model: committed objects and their bytes (value sizes).
  std::pair<Gauge*, Gauge*> PerModel(std::string_view model) {
    const MetricLabels l = {{"model", std::string(model)}};
    auto objects = registry_->GetGauge("mooncake_master_model_objects",
                                       "Committed objects whose TensorMeta names this model.", l);
    auto bytes = registry_->GetGauge("mooncake_master_model_bytes",
                                     "Value bytes of those objects (replicas not counted).", l);
    MC_ASSERT(objects.ok() && bytes.ok(), "metric registration failed");
    return {*objects, *bytes};
  }
  void ForgetModel(std::string_view model) {
    const MetricLabels l = {{"model", std::string(model)}};
    registry_->RemoveSeries("mooncake_master_model_objects", l);
    registry_->RemoveSeries("mooncake_master_model_bytes", l);
  }

  Gauge* PerWorker(std::string_view worker_id) {
    auto g = registry_->GetGauge("mooncake_master_worker_used_bytes",
                                 "Bytes allocated in a worker's segments.",
                                 {{"worker", std::string(worker_id)}});
    MC_ASSERT(g.ok(), "metric registration failed");
    return *g;
  }
  // Per tenant: bytes charged and its capacity (gauges), puts refused for its
  // quota and for its put rate (counters). The default tenant's unlimited
  // capacity reads 1.8e19.
  struct TenantSeries {
    Gauge* used_bytes;
    Gauge* capacity_bytes;
    Counter* refused;
    Counter* rate_limited;
  };
  TenantSeries PerTenant(std::string_view tenant) {
    const MetricLabels l = {{"tenant", std::string(tenant)}};
    auto used = registry_->GetGauge("mooncake_master_tenant_used_bytes",
                                    "Segment bytes charged to a tenant (size x replicas).", l);
    auto cap = registry_->GetGauge("mooncake_master_tenant_capacity_bytes",
                                   "A tenant's quota in segment bytes.", l);
    auto refused = registry_->GetCounter("mooncake_master_tenant_refused_total",
                                         "Requests refused for a tenant's quota.", l);
    auto limited = registry_->GetCounter("mooncake_master_tenant_rate_limited_total",
                                         "PutStarts refused for a tenant's put rate.", l);
    MC_ASSERT(used.ok() && cap.ok() && refused.ok() && limited.ok(), "metric registration failed");
    return {*used, *cap, *refused, *limited};
  }
  void ForgetTenant(std::string_view tenant) {
    const MetricLabels l = {{"tenant", std::string(tenant)}};
    registry_->RemoveSeries("mooncake_master_tenant_used_bytes", l);
    registry_->RemoveSeries("mooncake_master_tenant_capacity_bytes", l);
    registry_->RemoveSeries("mooncake_master_tenant_refused_total", l);
    registry_->RemoveSeries("mooncake_master_tenant_rate_limited_total", l);
  }

  // Drops a departed worker's / an unmounted segment's series.
  void ForgetWorker(std::string_view worker_id) {
    registry_->RemoveSeries("mooncake_master_worker_used_bytes",
                            {{"worker", std::string(worker_id)}});
  }
  void ForgetSegment(uint64_t segment_id) {
    registry_->RemoveSeries("mooncake_master_segment_fragmentation",
                            {{"segment", std::to_string(segment_id)}});
  }
  Gauge* PerSegment(uint64_t segment_id) {
    auto g = registry_->GetGauge("mooncake_master_segment_fragmentation",
                                 "1 - largest free extent / free bytes, per segment.",
                                 {{"segment", std::to_string(segment_id)}});
    MC_ASSERT(g.ok(), "metric registration failed");
    return *g;
  }

  MetricsRegistry* registry() const { return registry_; }

  Gauge *objects, *object_bytes, *pending_puts, *leases, *deferred_frees, *workers, *segments,
      *used_bytes, *capacity_bytes;
  Counter *puts_started, *puts_committed, *puts_revoked, *puts_timed_out, *puts_failed;
  Counter *gets_hit, *gets_miss, *prefix_queries, *prefix_blocks_matched;
  Counter *evictions, *evicted_bytes, *removes, *expired;
  Counter *tier_offloads, *tier_offload_failures, *tier_loads, *tier_load_failures, *tier_drops,
      *tier_drop_failures, *tier_ssd_evictions, *tier_quarantined_bytes;
  Gauge *tier_objects, *tier_capacity_bytes, *tier_reserved_bytes, *tier_shortfall_bytes;
  // Indexed by master::CopyKind.
  Counter* copies_ok[5];
  Counter* copies_failed[5];
  // Compaction by relocation (internal/relocation_path.h).
  Counter *relocations, *relocated_bytes, *relocations_failed;
  Counter *compactions_started, *compactions_no_window, *compactions_done, *compactions_failed;
  Counter *copied_bytes, *hot_dropped;
  Gauge *repair_backlog, *hot_extra_bytes;
  Counter *clones, *cloned_bytes, *groups_committed, *group_members_retired;
  Gauge *shared_bytes, *groups;

 private:
  Gauge* G(std::string_view name, std::string_view help) {
    auto g = registry_->GetGauge(std::string("mooncake_master_") + std::string(name), help);
    MC_ASSERT(g.ok(), "metric registration failed");
    return *g;
  }
  Counter* C(std::string_view name, std::string_view help, const MetricLabels& labels) {
    auto c =
        registry_->GetCounter(std::string("mooncake_master_") + std::string(name), help, labels);
    MC_ASSERT(c.ok(), "metric registration failed");
    return *c;
  }
  Counter* Put(std::string_view result) {
    return C("puts_total", "Two-phase puts by outcome.", {{"result", std::string(result)}});
  }
  Counter* Get(std::string_view result) {
    return C("gets_total", "GetReplicas calls by outcome.", {{"result", std::string(result)}});
  }

  Counter* Tier(std::string_view kind, std::string_view result) {
    return C("tier_tasks_total", "SSD tier tasks the workers finished, by kind and outcome.",
             {{"kind", std::string(kind)}, {"result", std::string(result)}});
  }

  Counter* Compaction(std::string_view outcome) {
    return C("compactions_total",
             "Segment compactions by outcome: started; no_window (nothing could be moved); done "
             "(every move copied); failed (a move failed or timed out).",
             {{"outcome", std::string(outcome)}});
  }

  Counter* Copy(std::string_view kind, std::string_view result) {
    return C("copies_total", "Copy tasks ended, by why they ran and outcome.",
             {{"kind", std::string(kind)}, {"result", std::string(result)}});
  }

  std::unique_ptr<MetricsRegistry> own_;
  MetricsRegistry* registry_ = nullptr;
};

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_MASTER_METRICS_H_
