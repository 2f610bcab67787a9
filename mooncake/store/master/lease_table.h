// LeaseTable: read leases by id. A lease names the objects it covers (key and
// version); the object side keeps a count (ObjectMeta::lease_refs) that the
// master decrements when a lease is released or swept here at expiry.
//
//   uint64_t id = leases.Grant(now + ttl, {{key, version}});
//   std::optional<std::vector<LeasedObject>> objs = leases.Take(id);  // release
//   for (auto& lease : leases.TakeExpired(now, 4096)) { ... }        // Tick
//
// Ids are never reused (a counter); 0 is never issued. Take of an unknown,
// already released or already expired id returns nullopt (not an error: a
// client may release late).
//
// Thread-safety: every method may run concurrently; the table is sharded by
// id, each shard one mutex. Bounds: one heap entry per granted lease until
// its expiry passes (released leases leave the map at once and the heap at
// their expiry), so memory is O(grant rate x max lease duration).
#ifndef MOONCAKE_STORE_MASTER_LEASE_TABLE_H_
#define MOONCAKE_STORE_MASTER_LEASE_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"

namespace mooncake::master {

struct LeasedObject {
  std::string key;
  uint64_t version = 0;
};

class LeaseTable {
 public:
  static constexpr size_t kShards = 16;

  // `tenant`: whose read it is (Take may insist on it).
  uint64_t Grant(int64_t expires_ns, std::vector<LeasedObject> objects,
                 std::string_view tenant = {}) {
    MC_DASSERT(!objects.empty(), "a lease covers at least one object");
    // relaxed: ids need only be unique.
    const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
    Shard& s = shards_[id % kShards];
    MutexLock lock(&s.mu);
    s.leases.emplace(id, Lease{expires_ns, std::string(tenant), std::move(objects)});
    s.expiry.emplace(expires_ns, id);
    // relaxed: a statistic.
    live_.fetch_add(1, std::memory_order_relaxed);
    return id;
  }

  // Ends lease `id` now; the objects it covered, or nullopt if it is unknown
  // (or, with `tenant`, granted to another tenant: left as it is).
  std::optional<std::vector<LeasedObject>> Take(uint64_t id,
                                                const std::string_view* tenant = nullptr) {
    Shard& s = shards_[id % kShards];
    MutexLock lock(&s.mu);
    auto it = s.leases.find(id);
    if (it == s.leases.end()) return std::nullopt;
    if (tenant != nullptr && it->second.tenant != *tenant) return std::nullopt;
    std::vector<LeasedObject> objects = std::move(it->second.objects);
    s.leases.erase(it);
    live_.fetch_sub(1, std::memory_order_relaxed);
    return objects;
  }

  // Ends and returns up to `max` leases whose expiry is <= now_ns.
  std::vector<std::vector<LeasedObject>> TakeExpired(int64_t now_ns, size_t max) {
    std::vector<std::vector<LeasedObject>> out;
    for (Shard& s : shards_) {
      MutexLock lock(&s.mu);
      while (!s.expiry.empty() && s.expiry.top().first <= now_ns && out.size() < max) {
        const uint64_t id = s.expiry.top().second;
        s.expiry.pop();
        auto it = s.leases.find(id);
        if (it == s.leases.end()) continue;  // released before it expired
        out.push_back(std::move(it->second.objects));
        s.leases.erase(it);
        live_.fetch_sub(1, std::memory_order_relaxed);
      }
    }
    return out;
  }

  // Leases granted and not yet released or swept.
  uint64_t live() const { return live_.load(std::memory_order_relaxed); }

 private:
  struct Lease {
    int64_t expires_ns = 0;
    std::string tenant;
    std::vector<LeasedObject> objects;
  };
  using ExpiryEntry = std::pair<int64_t, uint64_t>;  // (expires_ns, id)
  struct Shard {
    Mutex mu;
    absl::flat_hash_map<uint64_t, Lease> leases ABSL_GUARDED_BY(mu);
    std::priority_queue<ExpiryEntry, std::vector<ExpiryEntry>, std::greater<ExpiryEntry>> expiry
        ABSL_GUARDED_BY(mu);
  };

  std::atomic<uint64_t> next_id_{1};
  std::atomic<uint64_t> live_{0};
  Shard shards_[kShards];
};

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_LEASE_TABLE_H_
