// MasterOptions: every knob of the master, with the defaults the reference
// binary uses. Master::Create validates them (INVALID_ARGUMENT naming the
// field).
#ifndef MOONCAKE_STORE_MASTER_MASTER_OPTIONS_H_
#define MOONCAKE_STORE_MASTER_MASTER_OPTIONS_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/store/master/copy_registry.h"
#include "mooncake/store/master/membership.h"
#include "mooncake/store/master/placement.h"
#include "mooncake/store/master/tier_registry.h"

namespace mooncake::master {

struct TenantConfig {
  std::string name;
  uint64_t capacity_bytes = 0;         // segment bytes (size x replicas) it may hold
  uint64_t pinned_capacity_bytes = 0;  // of which PIN_HARD; 0: same as capacity_bytes
  // Bytes per second of puts admitted (size x replicas, at PutStart; burst:
  // one second of it); 0: not limited. Over it, PutStart answers
  // RESOURCE_EXHAUSTED with a retry hint (qos/tenant_rate_limit.h).
  uint64_t rate_bytes_per_sec = 0;
};

// The highest TenantConfig::rate_bytes_per_sec (qos::TokenBucket's limit, 1 PB/s).
inline constexpr uint64_t kMaxTenantRateBytesPerSec = uint64_t{1} << 50;

// Compaction of fragmented segments by relocation (internal/relocation_path.h,
// docs/alloc.md "Relocation"): when a put finds a segment with enough free
// bytes but no extent that fits, the master moves a few objects within that
// segment (copies by the segment's worker, as copy tasks) so that a later put
// of that size fits without evicting. Needs an allocator that relocates
// (TlsfAllocator, KvAllocator) and workers that serve a transport router.
struct SegmentRelocationOptions {
  bool enabled = false;
  // Most bytes one compaction moves, as a multiple of the request (the
  // allocator's RelocationOptions::max_moved_bytes).
  uint32_t max_moved_factor = 2;
  // A segment is compacted at most once per this interval (a compaction that
  // found no window is not tried again sooner either).
  int64_t min_interval_ms = 100;
  // Segments compacting at once.
  size_t max_in_flight = 16;
};

struct MasterOptions {
  size_t shard_count = 64;  // power of two
  uint64_t max_object_bytes = uint64_t{1} << 32;
  uint32_t default_replica_count = 1;
  uint32_t max_replica_count = 8;
  uint64_t alignment_bytes = 64;  // replica offsets are multiples of it
  PlacementStrategy placement = PlacementStrategy::kClientLocalFirst;

  int64_t put_timeout_ms = 30'000;  // PutStart -> PutEnd; later the master revokes
  // A put revoked by timeout keeps its space this long more: its writer may
  // still be writing (explicit PutRevoke frees at once: the writer says it
  // stopped).
  int64_t timed_out_put_hold_ms = 10'000;
  // For a master that gives tenants write capabilities (tenant_guard.h;
  // docs/security.md): such a capability lasts until its put's deadline, even
  // after the put ended. On: the space of a tenant's object (one not of
  // default_tenant) that leaves the table before its put's deadline + 1 s is
  // held until then, not reused; and a master that starts (or a standby that
  // takes over) holds such space until put_timeout_ms + 1 s after its start,
  // since the master before it may have issued capabilities still live.
  bool hold_write_windows = false;

  int64_t default_lease_ms = 5'000;  // GetReplicas/PrefixQuery lease_ms == 0
  int64_t max_lease_ms = 60'000;

  MembershipOptions membership;

  // Tick() evicts down to low_watermark once use passes high_watermark.
  double high_watermark = 0.95;
  double low_watermark = 0.85;
  uint32_t put_eviction_rounds = 4;  // evict-and-retry rounds before RESOURCE_EXHAUSTED
  uint64_t max_evictions_per_round = 4096;
  // PutStart on an RPC I/O thread (TryPutStartInline) evicts at most this many
  // objects; a put that needs more moves to the handler pool. 0: every put
  // that must evict moves.
  uint64_t inline_put_evictions = 64;

  // Tenants. The default tenant (requests with tenant "") always exists with
  // default_tenant_capacity_bytes; other names must be configured here or by
  // Master::SetTenant, else requests naming them fail with INVALID_ARGUMENT.
  std::string default_tenant = "default";
  uint64_t default_tenant_capacity_bytes = std::numeric_limits<uint64_t>::max();
  std::vector<TenantConfig> tenants;

  // Bound on the work one Tick() does per kind (leases, puts, TTLs).
  size_t tick_batch_max = 65536;

  // Workers' SSD tiers (tier_registry.h): used once a worker reports one.
  TierOptions tier;

  // Copies between workers: drain, re-replication, hot-object replicas and
  // copy / move tasks (copy_registry.h, docs/elasticity.md).
  ReplicationOptions replication;

  // Compaction of fragmented segments (off by default; docs/alloc.md).
  SegmentRelocationOptions relocation;
};

inline absl::Status ValidateMasterOptions(const MasterOptions& o) {
  auto bad = [](std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("MasterOptions: ", AbslView(what)));
  };
  if (o.shard_count == 0 || o.shard_count > 4096 || (o.shard_count & (o.shard_count - 1)) != 0) {
    return bad("shard_count must be a power of two in [1, 4096]");
  }
  if (o.max_object_bytes == 0) return bad("max_object_bytes must be > 0");
  if (o.max_replica_count == 0 || o.max_replica_count > 255) {
    return bad("max_replica_count must be in [1, 255]");
  }
  if (o.default_replica_count == 0 || o.default_replica_count > o.max_replica_count) {
    return bad("default_replica_count must be in [1, max_replica_count]");
  }
  if (!alloc::IsValidAlignment(o.alignment_bytes)) return bad("alignment_bytes: power of two");
  if (o.put_timeout_ms <= 0 || o.timed_out_put_hold_ms < 0) return bad("put timeouts");
  if (o.default_lease_ms <= 0 || o.max_lease_ms < o.default_lease_ms) {
    return bad("leases: 0 < default_lease_ms <= max_lease_ms");
  }
  if (o.membership.heartbeat_interval_ms <= 0 ||
      o.membership.heartbeat_timeout_ms <= o.membership.heartbeat_interval_ms) {
    return bad("membership: 0 < heartbeat_interval_ms < heartbeat_timeout_ms");
  }
  if (!(o.low_watermark > 0 && o.low_watermark < o.high_watermark && o.high_watermark <= 1.0)) {
    return bad("watermarks: 0 < low_watermark < high_watermark <= 1");
  }
  if (o.default_tenant.empty()) return bad("default_tenant must not be empty");
  for (const TenantConfig& t : o.tenants) {
    if (t.rate_bytes_per_sec > kMaxTenantRateBytesPerSec) {
      return bad(absl::StrCat("tenant '", t.name, "': rate_bytes_per_sec exceeds ",
                              kMaxTenantRateBytesPerSec));
    }
  }
  if (o.tick_batch_max == 0 || o.max_evictions_per_round == 0) return bad("batch bounds > 0");
  if (o.tier.task_timeout_ms <= 0 || o.tier.max_wait_ms < 0 || o.tier.max_queued_tasks == 0) {
    return bad("tier: task_timeout_ms > 0, max_wait_ms >= 0, max_queued_tasks > 0");
  }
  const ReplicationOptions& r = o.replication;
  if (r.task_timeout_ms <= 0 || r.max_wait_ms < 0 || r.max_queued_tasks == 0 ||
      r.max_in_flight_per_worker == 0 || r.repair_within_ms <= 0 || r.hot_window_ms <= 0 ||
      !(r.drain_pace >= 0 && r.drain_pace <= 1) ||
      !(r.hot_max_fraction >= 0 && r.hot_max_fraction <= 1) || r.hot_max_replicas == 0) {
    return bad(
        "replication: task_timeout_ms, repair_within_ms, hot_window_ms > 0; max_wait_ms >= 0; "
        "max_queued_tasks, max_in_flight_per_worker, hot_max_replicas > 0; hot_max_fraction and "
        "drain_pace in [0, 1]");
  }
  if (r.hot_reads > kMaxWindowReads) {
    return bad(absl::StrCat("replication: hot_reads at most ", kMaxWindowReads,
                            " (an object's window counts that many reads)"));
  }
  if (o.relocation.max_moved_factor == 0 || o.relocation.min_interval_ms < 0 ||
      o.relocation.max_in_flight == 0) {
    return bad("relocation: max_moved_factor, max_in_flight > 0; min_interval_ms >= 0");
  }
  return absl::OkStatus();
}

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_MASTER_OPTIONS_H_
