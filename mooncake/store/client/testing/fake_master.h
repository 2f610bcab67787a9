// FakeMaster: a small, single-lock implementation of master.proto for the
// worker's and client's unit tests (and the process tests' fallback master).
//
// It keeps the contract the client relies on: two-phase put (an object is
// visible only after PutEnd; a key committed or being put gives
// ALREADY_EXISTS), versions that bump on every commit, read leases that keep
// an object's space from reuse until they end (a removed or evicted leased
// object's space is freed when its last lease ends), tenants (unknown ->
// INVALID_ARGUMENT) with byte quotas (RESOURCE_EXHAUSTED), a size limit
// (INVALID_ARGUMENT), heartbeats (unknown worker -> remount_required) and
// worker expiry that drops replicas. Placement is first-fit over segments in
// id order with the client's host first; there is no eviction on its own:
// tests call Evict(key) (which refuses leased objects, like the master).
//
// Time is the Clock given at construction (a FakeClock in tests); expiry of
// leases, puts and workers happens lazily on each call.
//
// Thread-safety: every method may be called concurrently (one mutex).
#ifndef MOONCAKE_STORE_CLIENT_TESTING_FAKE_MASTER_H_
#define MOONCAKE_STORE_CLIENT_TESTING_FAKE_MASTER_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/service.h"

namespace mooncake::store_testing {

namespace proto = ::mooncake::store::proto;

struct FakeMasterOptions {
  uint64_t max_object_bytes = uint64_t{1} << 30;
  uint64_t default_lease_ms = 2'000;
  uint64_t max_lease_ms = 10'000;
  uint64_t heartbeat_interval_ms = 100;
  uint64_t heartbeat_timeout_ms = 1'000;
  uint64_t put_timeout_ms = 5'000;
  uint32_t default_replica_count = 1;
  // Tenant -> quota in bytes (size x replicas). "" is the default tenant.
  std::map<std::string, uint64_t> tenants = {{"", UINT64_MAX}};
};

class FakeMaster {
 public:
  explicit FakeMaster(FakeMasterOptions options = {}, Clock* clock = &MonotonicClock::Get())
      : options_(std::move(options)), clock_(clock) {}

  // Registers every master.proto method on `registry`.
  absl::Status RegisterOn(rpc::ServiceRegistry* registry);

  absl::StatusOr<proto::MountSegmentResponse> MountSegment(const proto::MountSegmentRequest& r);
  absl::StatusOr<proto::UnmountSegmentResponse> UnmountSegment(
      const proto::UnmountSegmentRequest& r);
  absl::StatusOr<proto::HeartbeatResponse> Heartbeat(const proto::HeartbeatRequest& r);
  absl::StatusOr<proto::PutStartResponse> PutStart(const proto::PutStartRequest& r);
  absl::StatusOr<proto::PutEndResponse> PutEnd(const proto::PutEndRequest& r);
  absl::StatusOr<proto::PutRevokeResponse> PutRevoke(const proto::PutRevokeRequest& r);
  absl::StatusOr<proto::GetReplicasResponse> GetReplicas(const proto::GetReplicasRequest& r);
  absl::StatusOr<proto::ReleaseLeasesResponse> ReleaseLeases(const proto::ReleaseLeasesRequest& r);
  absl::StatusOr<proto::RemoveResponse> Remove(const proto::RemoveRequest& r);
  absl::StatusOr<proto::ExistsResponse> Exists(const proto::ExistsRequest& r);
  absl::StatusOr<proto::BatchExistsResponse> BatchExists(const proto::BatchExistsRequest& r);
  absl::StatusOr<proto::PrefixQueryResponse> PrefixQuery(const proto::PrefixQueryRequest& r);
  absl::StatusOr<proto::DescribeSegmentsResponse> DescribeSegments(
      const proto::DescribeSegmentsRequest& r);
  // UNIMPLEMENTED here; so is PutStart with options.replace of a committed
  // key. Remove honours refuse_if_leased; no pins.
  absl::StatusOr<proto::RemoveAllResponse> RemoveAll(const proto::RemoveAllRequest& r);

  // Test hooks.
  // Evicts `key` (default tenant) like the master's evictor: refuses
  // (FAILED_PRECONDITION) while it is leased or pending.
  absl::Status Evict(const std::string& key, const std::string& tenant = "");
  // Forgets worker `worker_id` as an expiry would (its replicas dropped).
  void ExpireWorker(const std::string& worker_id);
  uint64_t calls(uint16_t method_id) const { return calls_[method_id].load(); }
  uint64_t total_calls() const {
    uint64_t n = 0;
    for (const auto& c : calls_) n += c.load();
    return n;
  }
  size_t live_leases() const {
    MutexLock lock(&mu_);
    return leases_.size();
  }
  uint64_t used_bytes() const {
    MutexLock lock(&mu_);
    uint64_t n = 0;
    for (const auto& [id, s] : segments_) n += s.used;
    return n;
  }

 private:
  struct Segment {
    std::string worker_id;
    std::string host_id;
    proto::SegmentDescriptor desc;  // as mounted (DescribeSegments)
    uint64_t size = 0;
    uint64_t used = 0;
    std::map<uint64_t, uint64_t> free;  // offset -> length
  };
  struct Object {
    std::string tenant;
    uint64_t size = 0;
    uint64_t checksum = 0;
    uint32_t checksum_format = 0;
    uint64_t version = 0;
    std::vector<proto::Replica> replicas;
    uint64_t put_id = 0;  // != 0 while pending
    int64_t put_deadline_ns = 0;
    uint32_t leases = 0;
    bool committed() const { return put_id == 0; }
  };
  struct Lease {
    std::vector<std::pair<std::string, uint64_t>> objects;  // (map key, version)
    int64_t until_ns = 0;
  };
  // Space of removed objects still covered by a lease.
  struct Retired {
    std::vector<proto::Replica> replicas;
    uint32_t leases = 0;
  };

  static std::string MapKey(const std::string& tenant, const std::string& key) {
    return absl::StrCat(tenant.size(), ":", tenant, key);
  }
  int64_t Now() const { return clock_->NowNs(); }
  void Count(uint16_t id) { calls_[id].fetch_add(1, std::memory_order_relaxed); }
  absl::Status CheckTenant(const std::string& tenant) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SweepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<uint64_t> AllocLocked(uint64_t segment_id, uint64_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeLocked(const proto::Replica& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RetireLocked(const std::string& map_key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropWorkerLocked(const std::string& worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t GrantLocked(std::vector<std::pair<std::string, uint64_t>> objs, uint64_t lease_ms,
                       proto::Lease* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndLeaseLocked(const Lease& l) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Describe(const Object& o, const std::string& host, proto::ObjectInfo* info,
                google::protobuf::RepeatedPtrField<proto::Replica>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const FakeMasterOptions options_;
  Clock* const clock_;
  std::atomic<uint64_t> calls_[32] = {};
  mutable Mutex mu_;
  uint64_t next_segment_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_put_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_lease_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_version_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Segment> segments_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int64_t> workers_ ABSL_GUARDED_BY(mu_);  // -> last beat
  absl::flat_hash_map<std::string, Object> objects_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Lease> leases_ ABSL_GUARDED_BY(mu_);
  // (map key, version) -> space of a retired object waiting for its leases.
  std::map<std::pair<std::string, uint64_t>, Retired> retired_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint64_t> tenant_used_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::store_testing

#include "mooncake/store/client/testing/fake_master_impl.h"  // IWYU pragma: export

#endif  // MOONCAKE_STORE_CLIENT_TESTING_FAKE_MASTER_H_
