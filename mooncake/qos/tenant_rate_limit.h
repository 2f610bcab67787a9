// TenantRateLimit: per-tenant limits on the bytes admitted per second, one
// TokenBucket per limited tenant.
//
// The store's master asks Admit(tenant, bytes) at each put's start (bytes =
// size x replicas, what the put charges to the tenant's quota) and refunds
// them (Refund) when that put is refused further on, so only the bytes of
// puts that got their space count against the rate. A tenant over its rate
// is refused with RESOURCE_EXHAUSTED naming the tenant, its rate and how long
// until the same request would be admitted ("retry in N ms"); the caller
// waits and retries. Refusing, rather than waiting, keeps the caller's thread
// (the master's RPC I/O thread) free for other tenants' calls.
//
// Each bucket's burst is one second of its rate: a tenant idle for a second
// may put that many bytes at once; a single request above the burst is
// admitted when the bucket is full and leaves it in debt (TokenBucket), so a
// large object is slowed, never refused forever.
//
// A tenant without a rate (never set, or set to 0) is not limited; Admit of
// such a tenant, or while no tenant is limited, takes no lock beyond a
// relaxed load (no limited tenant) or a shared lock and one lookup.
//
// Thread-safe: every method may be called concurrently. SetRate and
// RemoveTenant take the table exclusively; Admit, Refund and the readers take
// it shared, then the tenant's bucket (its own mutex). Both are leaves: the
// caller may hold no lock that Admit's caller might wait on (the master calls
// it with no lock held).
#ifndef MOONCAKE_QOS_TENANT_RATE_LIMIT_H_
#define MOONCAKE_QOS_TENANT_RATE_LIMIT_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/qos/token_bucket.h"

namespace mooncake::qos {

class TenantRateLimit {
 public:
  static constexpr uint64_t kMaxRateBytesPerSec = TokenBucket::kMaxRatePerSec;

  // `clock` (null: MonotonicClock::Get()) must outlive this.
  explicit TenantRateLimit(const Clock* clock = nullptr)
      : clock_(clock != nullptr ? clock : &MonotonicClock::Get()) {}

  TenantRateLimit(const TenantRateLimit&) = delete;
  TenantRateLimit& operator=(const TenantRateLimit&) = delete;

  // Sets `tenant`'s rate in bytes per second (burst: one second of it); 0
  // removes its limit. A tenant whose rate changes keeps its bucket (tokens
  // clamped to the new burst) and its refusal count. INVALID_ARGUMENT: an
  // empty name or a rate above kMaxRateBytesPerSec.
  absl::Status SetRate(std::string_view tenant, uint64_t bytes_per_sec) {
    if (tenant.empty()) return absl::InvalidArgumentError("tenant name must not be empty");
    if (bytes_per_sec > kMaxRateBytesPerSec) {
      return absl::InvalidArgumentError(absl::StrCat("tenant '", AbslView(tenant), "': rate ",
                                                     bytes_per_sec, " B/s exceeds the limit of ",
                                                     kMaxRateBytesPerSec));
    }
    const TokenBucketOptions o{.bytes_per_sec = bytes_per_sec, .burst_bytes = bytes_per_sec};
    std::unique_lock<std::shared_mutex> lock(mu_);
    auto it = tenants_.find(AbslView(tenant));
    if (it == tenants_.end()) {
      if (bytes_per_sec == 0) return absl::OkStatus();
      auto t = std::make_unique<Tenant>(o, clock_);
      t->rate.store(bytes_per_sec, std::memory_order_relaxed);
      tenants_.emplace(std::string(tenant), std::move(t));
      // relaxed: a hint for Admit's fast path; the table lock orders the rest.
      limited_.fetch_add(1, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    Tenant& t = *it->second;
    const bool was_limited = t.rate.load(std::memory_order_relaxed) != 0;
    absl::Status s = t.bucket.SetOptions(o);
    MC_ASSERT(s.ok(), "TenantRateLimit: bucket options were validated");
    t.rate.store(bytes_per_sec, std::memory_order_relaxed);
    if (was_limited && bytes_per_sec == 0) limited_.fetch_sub(1, std::memory_order_relaxed);
    if (!was_limited && bytes_per_sec != 0) limited_.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  // Forgets `tenant` (its limit and its refusal count).
  void RemoveTenant(std::string_view tenant) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    auto it = tenants_.find(AbslView(tenant));
    if (it == tenants_.end()) return;
    if (it->second->rate.load(std::memory_order_relaxed) != 0) {
      limited_.fetch_sub(1, std::memory_order_relaxed);
    }
    tenants_.erase(it);
  }

  // Takes `bytes` of `tenant`'s rate, or refuses with RESOURCE_EXHAUSTED
  // (taking nothing). OK for a tenant without a limit.
  absl::Status Admit(std::string_view tenant, uint64_t bytes) {
    if (limited_.load(std::memory_order_relaxed) == 0) return absl::OkStatus();
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = tenants_.find(AbslView(tenant));
    if (it == tenants_.end()) return absl::OkStatus();
    Tenant& t = *it->second;
    const uint64_t rate = t.rate.load(std::memory_order_relaxed);
    if (rate == 0 || t.bucket.TryAcquire(bytes)) return absl::OkStatus();
    // relaxed: a statistic.
    t.refused.fetch_add(1, std::memory_order_relaxed);
    const int64_t wait_ns = t.bucket.WaitNs(bytes);
    const int64_t wait_ms = wait_ns / 1'000'000 + (wait_ns % 1'000'000 != 0 ? 1 : 0);
    return absl::ResourceExhaustedError(absl::StrCat(
        "tenant '", AbslView(tenant), "' over its put rate of ", rate, " bytes/s: admitting ",
        bytes, " bytes now would exceed it; retry in ", std::max<int64_t>(wait_ms, 1), " ms"));
  }

  // Gives back `bytes` that Admit(tenant, bytes) took for a request that was
  // then refused for another reason. No-op for a tenant without a limit.
  void Refund(std::string_view tenant, uint64_t bytes) {
    if (limited_.load(std::memory_order_relaxed) == 0) return;
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = tenants_.find(AbslView(tenant));
    if (it == tenants_.end() || it->second->rate.load(std::memory_order_relaxed) == 0) return;
    it->second->bucket.Refund(bytes);
  }

  // `tenant`'s rate in bytes per second (0: not limited).
  uint64_t Rate(std::string_view tenant) const {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = tenants_.find(AbslView(tenant));
    return it == tenants_.end() ? 0 : it->second->rate.load(std::memory_order_relaxed);
  }

  // Admits `tenant` refused for its rate since its first SetRate.
  uint64_t Refused(std::string_view tenant) const {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = tenants_.find(AbslView(tenant));
    return it == tenants_.end() ? 0 : it->second->refused.load(std::memory_order_relaxed);
  }

 private:
  struct Tenant {
    Tenant(const TokenBucketOptions& o, const Clock* clock) : bucket(o, clock) {}
    TokenBucket bucket;
    // Atomics so readers under the shared lock see SetRate's writes, which
    // happen under the exclusive lock (relaxed: the lock orders them).
    std::atomic<uint64_t> rate{0};
    std::atomic<uint64_t> refused{0};
  };

  const Clock* const clock_;
  // std::shared_mutex, not absl::Mutex: see the qos docs (TSAN).
  mutable std::shared_mutex mu_;
  // unique_ptr: a bucket holds a mutex and must not move on rehash.
  absl::flat_hash_map<std::string, std::unique_ptr<Tenant>> tenants_ ABSL_GUARDED_BY(mu_);
  // Tenants with a rate > 0, changed under mu_ exclusively.
  std::atomic<size_t> limited_{0};
};

}  // namespace mooncake::qos

#endif  // MOONCAKE_QOS_TENANT_RATE_LIMIT_H_
