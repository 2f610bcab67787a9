// MetadataCache: what the client remembers about objects it read, so a get
// of a hot key needs no master RPC while the master's read lease is valid.
//
// An entry is the master's answer to GetReplicas (object info with version
// and checksum, the complete replicas) plus the lease that came with it and
// the end of that lease on this client's clock. The end is computed from the
// time the request was *sent*, so it is never later than the master's own
// expiry (the master counts from receipt; clock rates are assumed equal over
// a lease's few seconds, and lease_margin covers drift and the read itself).
//
// Why a cached entry is safe to read (the argument docs/client.md expands):
//   - The master never reuses a leased object's space before the lease ends
//     (master.proto, Lease), and never evicts a leased object. So while the
//     lease is valid, the bytes at the cached replica are the bytes of the
//     cached version: never another object's bytes and never torn.
//   - Versions are immutable: a key's bytes change only through a new commit
//     (Remove + Put, or a replacing Put, master.proto PutOptions.replace),
//     which yields a new version in new space; the old version's space is not
//     reused while leased.
//   - This client's own Remove and Put erase the entry first, so it always
//     reads its own writes. Another client's Remove becomes visible here when
//     the lease ends (at most lease_ms); GetOptions::bypass_cache reads
//     through the master for callers that need that ordering.
//   - Every read verifies the XXH3-64 checksum of the cached version (unless
//     disabled), which also catches a worker that lost its memory.
//   - A read that fails on every cached replica drops the entry and asks the
//     master once.
//
// Bounded: at most `max_entries` entries; the least recently used goes first.
// Entries whose lease ended are dropped when met.
//
// Thread-safety: every method may be called concurrently (one mutex).
#ifndef MOONCAKE_STORE_CLIENT_METADATA_CACHE_H_
#define MOONCAKE_STORE_CLIENT_METADATA_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/rpc/master.pb.h"

namespace mooncake::client {

// An object's complete replicas, nearest first, in the order one read tries
// them. The replicas are shared: copying the list (a cache hit) copies a
// pointer, and each read orders its own copy (Rotate) without touching the
// cached one's.
class ReplicaOrder {
 public:
  ReplicaOrder() = default;
  explicit ReplicaOrder(std::vector<store::proto::Replica> all)
      : all_(all.empty()
                 ? nullptr
                 : std::make_shared<const std::vector<store::proto::Replica>>(std::move(all))) {}

  size_t size() const { return all_ == nullptr ? 0 : all_->size(); }
  bool empty() const { return size() == 0; }
  // The replica read k-th.
  const store::proto::Replica& operator[](size_t k) const {
    MC_DASSERT(k < size(), "replica index out of range");
    return (*all_)[k < n_ ? (k + pick_) % n_ : k];
  }

  // What std::rotate(begin, begin + pick, begin + n) does to the order:
  // the pick-th first, the rest of the first n after it in turn. Rotations
  // compose; an object's reads always rotate the same first n (its nearest).
  // REQUIRES: pick < n <= size(), and n as in any earlier Rotate.
  void Rotate(size_t pick, size_t n) {
    MC_ASSERT(pick < n && n <= size() && (n_ == 0 || n_ == n), "rotation out of range");
    pick_ = static_cast<uint32_t>((pick_ + pick) % n);
    n_ = static_cast<uint32_t>(n);
  }

 private:
  std::shared_ptr<const std::vector<store::proto::Replica>> all_;
  uint32_t pick_ = 0;  // with n_: the first n_ read from the pick_-th on, wrapping
  uint32_t n_ = 0;     // 0: the shared order as it is
};

struct CachedObject {
  uint64_t size_bytes = 0;
  uint64_t checksum = 0;
  uint32_t checksum_format = 0;  // store::proto::ChecksumFormat
  uint64_t version = 0;
  ReplicaOrder replicas;        // complete, nearest first
  uint32_t local_replicas = 0;  // how many of the first are on this client's host
  // The object's TensorMeta (null: the writer gave none); shared, not copied,
  // by every read the entry serves.
  std::shared_ptr<const store::proto::TensorMeta> tensor;
  uint64_t lease_id = 0;
  int64_t lease_end_ns = 0;  // this client's clock; reads must end before it
  // Reads served from this entry (the master counts them when it is next asked).
  uint32_t cached_reads = 0;
};

class MetadataCache {
 public:
  // `clock` must outlive the cache.
  MetadataCache(size_t max_entries, Clock* clock) : max_entries_(max_entries), clock_(clock) {
    MC_ASSERT(max_entries > 0, "a cache holds at least one entry");
    MC_ASSERT(clock != nullptr, "a cache needs a clock");
  }
  MetadataCache(const MetadataCache&) = delete;
  MetadataCache& operator=(const MetadataCache&) = delete;

  // The entry for (tenant, key) if its lease has at least `min_remaining_ns`
  // left (counting a read of it); an entry with less is dropped (its lease is
  // ending anyway), and `*reads_served` (if not null) says how many reads it
  // served, for the caller's next ask of the master.
  std::optional<CachedObject> Lookup(std::string_view tenant, std::string_view key,
                                     int64_t min_remaining_ns, uint32_t* reads_served = nullptr) {
    const KeyView k{tenant, key};
    const int64_t now = clock_->NowNs();
    MutexLock lock(&mu_);
    auto it = map_.find(k);
    if (it == map_.end()) return std::nullopt;
    if (it->second->second.lease_end_ns - now < min_remaining_ns) {
      if (reads_served != nullptr) *reads_served = it->second->second.cached_reads;
      lru_.erase(it->second);
      map_.erase(it);
      return std::nullopt;
    }
    lru_.splice(lru_.begin(), lru_, it->second);  // most recent first
    CachedObject& o = it->second->second;
    if (o.cached_reads < UINT32_MAX) ++o.cached_reads;
    return o;
  }

  // Caches `object`. Returns the leases of entries it displaced (a replaced
  // entry, the least recently used past the bound) that are still live: the
  // caller releases them with the master.
  [[nodiscard]] std::vector<uint64_t> Insert(std::string_view tenant, std::string_view key,
                                             CachedObject object) {
    MC_DASSERT(object.lease_id != 0, "only leased answers are cached");
    OwnedKey k{std::string(tenant), std::string(key)};
    const int64_t now = clock_->NowNs();
    std::vector<uint64_t> release;
    MutexLock lock(&mu_);
    if (auto it = map_.find(k); it != map_.end()) {
      Drop(it->second, now, &release);
      map_.erase(it);
    }
    lru_.emplace_front(k, std::move(object));
    map_.emplace(std::move(k), lru_.begin());
    while (map_.size() > max_entries_) {
      auto last = std::prev(lru_.end());
      map_.erase(last->first);
      Drop(last, now, &release);
    }
    MC_DASSERT(map_.size() == lru_.size(), "index and list disagree");
    return release;
  }

  // Forgets (tenant, key); returns its lease if still live.
  [[nodiscard]] std::optional<uint64_t> Erase(std::string_view tenant, std::string_view key) {
    const KeyView k{tenant, key};
    const int64_t now = clock_->NowNs();
    MutexLock lock(&mu_);
    auto it = map_.find(k);
    if (it == map_.end()) return std::nullopt;
    std::vector<uint64_t> release;
    Drop(it->second, now, &release);
    map_.erase(it);
    if (release.empty()) return std::nullopt;
    return release.front();
  }

  // Forgets everything; returns the live leases.
  [[nodiscard]] std::vector<uint64_t> Clear() {
    const int64_t now = clock_->NowNs();
    std::vector<uint64_t> release;
    MutexLock lock(&mu_);
    while (!lru_.empty()) Drop(lru_.begin(), now, &release);
    map_.clear();
    return release;
  }

  size_t size() const {
    MutexLock lock(&mu_);
    return map_.size();
  }

 private:
  // (tenant, key): looked up as views, so a hit builds no string.
  struct KeyView {
    std::string_view tenant;
    std::string_view key;
  };
  struct OwnedKey {
    std::string tenant;
    std::string key;
    KeyView view() const { return {tenant, key}; }
  };
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(const KeyView& k) const {
      return absl::HashOf(AbslView(k.tenant), AbslView(k.key));
    }
    size_t operator()(const OwnedKey& k) const { return (*this)(k.view()); }
  };
  struct KeyEq {
    using is_transparent = void;
    static KeyView View(const KeyView& k) { return k; }
    static KeyView View(const OwnedKey& k) { return k.view(); }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      const KeyView x = View(a), y = View(b);
      return x.tenant == y.tenant && x.key == y.key;
    }
  };
  using Entry = std::pair<OwnedKey, CachedObject>;
  using List = std::list<Entry>;

  void Drop(List::iterator it, int64_t now, std::vector<uint64_t>* release)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (it->second.lease_end_ns > now) release->push_back(it->second.lease_id);
    lru_.erase(it);
  }

  const size_t max_entries_;
  Clock* const clock_;
  mutable Mutex mu_;
  List lru_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<OwnedKey, List::iterator, KeyHash, KeyEq> map_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::client

#endif  // MOONCAKE_STORE_CLIENT_METADATA_CACHE_H_
