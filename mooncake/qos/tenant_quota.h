// TenantQuota: per-tenant byte capacity with admit / release accounting.
//
// The store asks Admit(tenant, bytes) before it places an object and calls
// Release(tenant, bytes) when the object goes away. A tenant never holds more
// than its capacity: Admit refuses with RESOURCE_EXHAUSTED, naming the
// tenant, the request, the bytes in use and the capacity, so the caller (or
// its user) can act on it.
//
// Tenants are created by SetCapacity, or on first Admit when a default
// capacity is configured; otherwise an unknown tenant gets NOT_FOUND.
// Capacities change at run time: SetCapacity is serialized against admits (it
// waits for admits in flight), so every admit that completes after it
// returns sees the new capacity. Lowering a capacity below the bytes in use
// evicts nothing; new admits are refused until releases bring use below it.
//
// Thread-safe: every method may be called concurrently. Admit and Release of
// known tenants run in parallel (a shared lock on the tenant table and one
// compare-and-swap on the tenant's counter); SetCapacity, RemoveTenant and the
// first Admit of a defaulted tenant take the table exclusively.
// Invariant (checked under concurrency by tenant_quota_test): for every
// tenant, used_bytes <= capacity_bytes at every admit, and used_bytes equals
// admitted minus released bytes.
#ifndef MOONCAKE_QOS_TENANT_QUOTA_H_
#define MOONCAKE_QOS_TENANT_QUOTA_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
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

namespace mooncake::qos {

struct TenantUsage {
  uint64_t used_bytes = 0;
  uint64_t capacity_bytes = 0;
  uint64_t admitted_requests = 0;
  uint64_t refused_requests = 0;
};

struct TenantQuotaOptions {
  // Capacity given to a tenant on its first Admit; nullopt: unknown tenants
  // are refused with NOT_FOUND.
  std::optional<uint64_t> default_capacity_bytes;
  size_t max_tenants = 65536;  // bound on the table; >= 1
};

class TenantQuota {
 public:
  static constexpr size_t kMaxTenantNameBytes = 256;
  using Options = TenantQuotaOptions;

  TenantQuota() : TenantQuota(Options{}) {}
  explicit TenantQuota(const Options& options) : options_(options) {
    MC_ASSERT(options.max_tenants >= 1, "max_tenants must be at least 1");
  }

  TenantQuota(const TenantQuota&) = delete;
  TenantQuota& operator=(const TenantQuota&) = delete;

  // Creates `tenant` or changes its capacity.
  absl::Status SetCapacity(std::string_view tenant, uint64_t capacity_bytes) {
    if (absl::Status s = ValidateName(tenant); !s.ok()) return s;
    std::unique_lock<std::shared_mutex> lock(mu_);
    auto it = tenants_.find(AbslView(tenant));
    if (it == tenants_.end()) {
      if (absl::Status s = CheckRoomLocked(tenant); !s.ok()) return s;
      it = tenants_.emplace(std::string(tenant), std::make_unique<Account>()).first;
    }
    // relaxed: writers of capacity hold mu_ exclusively and readers hold it
    // shared, so the mutex already orders them.
    it->second->capacity_bytes.store(capacity_bytes, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  // Charges `bytes` to `tenant` if it stays within capacity.
  absl::Status Admit(std::string_view tenant, uint64_t bytes) {
    if (absl::Status s = ValidateName(tenant); !s.ok()) return s;
    {
      std::shared_lock<std::shared_mutex> lock(mu_);
      if (auto it = tenants_.find(AbslView(tenant)); it != tenants_.end()) {
        return AdmitLocked(tenant, *it->second, bytes);
      }
    }
    if (!options_.default_capacity_bytes.has_value()) {
      return absl::NotFoundError(
          absl::StrCat("tenant '", AbslView(tenant), "' has no quota; call SetCapacity first"));
    }
    std::unique_lock<std::shared_mutex> lock(mu_);
    auto it = tenants_.find(AbslView(tenant));
    if (it == tenants_.end()) {
      if (absl::Status s = CheckRoomLocked(tenant); !s.ok()) return s;
      auto account = std::make_unique<Account>();
      account->capacity_bytes.store(*options_.default_capacity_bytes, std::memory_order_relaxed);
      it = tenants_.emplace(std::string(tenant), std::move(account)).first;
    }
    return AdmitLocked(tenant, *it->second, bytes);
  }

  // Returns `bytes` that an earlier Admit charged to `tenant`.
  absl::Status Release(std::string_view tenant, uint64_t bytes) {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = tenants_.find(AbslView(tenant));
    if (it == tenants_.end()) {
      return absl::NotFoundError(
          absl::StrCat("release for unknown tenant '", AbslView(tenant), "'"));
    }
    Account& a = *it->second;
    // relaxed: the counter is the only state; nothing is published through it.
    uint64_t used = a.used_bytes.load(std::memory_order_relaxed);
    do {
      if (bytes > used) {
        return absl::FailedPreconditionError(
            absl::StrCat("tenant '", AbslView(tenant), "': releasing ", bytes, " bytes but only ",
                         used, " are in use (double release?)"));
      }
    } while (!a.used_bytes.compare_exchange_weak(used, used - bytes, std::memory_order_relaxed));
    return absl::OkStatus();
  }

  // Forgets a tenant that holds nothing.
  absl::Status RemoveTenant(std::string_view tenant) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    auto it = tenants_.find(AbslView(tenant));
    if (it == tenants_.end()) {
      return absl::NotFoundError(absl::StrCat("no tenant '", AbslView(tenant), "'"));
    }
    const uint64_t used = it->second->used_bytes.load(std::memory_order_relaxed);
    if (used != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tenant '", AbslView(tenant), "' still holds ", used, " bytes; release them first"));
    }
    tenants_.erase(it);
    return absl::OkStatus();
  }

  std::optional<TenantUsage> Usage(std::string_view tenant) const {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = tenants_.find(AbslView(tenant));
    if (it == tenants_.end()) return std::nullopt;
    const Account& a = *it->second;
    return TenantUsage{a.used_bytes.load(std::memory_order_relaxed),
                       a.capacity_bytes.load(std::memory_order_relaxed),
                       a.admitted.load(std::memory_order_relaxed),
                       a.refused.load(std::memory_order_relaxed)};
  }

  // Every tenant's usage (for metrics), in no particular order.
  std::vector<std::pair<std::string, TenantUsage>> Snapshot() const {
    std::shared_lock<std::shared_mutex> lock(mu_);
    std::vector<std::pair<std::string, TenantUsage>> out;
    out.reserve(tenants_.size());
    for (const auto& [name, a] : tenants_) {
      out.emplace_back(std::string(name),
                       TenantUsage{a->used_bytes.load(std::memory_order_relaxed),
                                   a->capacity_bytes.load(std::memory_order_relaxed),
                                   a->admitted.load(std::memory_order_relaxed),
                                   a->refused.load(std::memory_order_relaxed)});
    }
    return out;
  }

  size_t TenantCount() const {
    std::shared_lock<std::shared_mutex> lock(mu_);
    return tenants_.size();
  }

 private:
  // Atomics because Admit and Release update them under a shared lock.
  struct Account {
    std::atomic<uint64_t> used_bytes{0};
    std::atomic<uint64_t> capacity_bytes{0};
    std::atomic<uint64_t> admitted{0};
    std::atomic<uint64_t> refused{0};
  };

  static absl::Status ValidateName(std::string_view tenant) {
    if (tenant.empty() || tenant.size() > kMaxTenantNameBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tenant name has ", tenant.size(), " bytes; it must have 1 to ", kMaxTenantNameBytes));
    }
    return absl::OkStatus();
  }

  absl::Status CheckRoomLocked(std::string_view tenant) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (tenants_.size() >= options_.max_tenants) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot add tenant '", AbslView(tenant),
                                                       "': the table is full (",
                                                       options_.max_tenants, " tenants)"));
    }
    return absl::OkStatus();
  }

  // Caller holds mu_ (shared or exclusive), which keeps `a` alive and its
  // capacity fixed for the duration.
  absl::Status AdmitLocked(std::string_view tenant, Account& a, uint64_t bytes) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    const uint64_t capacity = a.capacity_bytes.load(std::memory_order_relaxed);
    // relaxed: the CAS on the counter alone decides admission; no other memory
    // is published through it.
    uint64_t used = a.used_bytes.load(std::memory_order_relaxed);
    do {
      if (bytes > capacity || used > capacity - bytes) {
        a.refused.fetch_add(1, std::memory_order_relaxed);
        return absl::ResourceExhaustedError(
            absl::StrCat("tenant '", AbslView(tenant), "' over quota: admitting ", bytes,
                         " bytes with ", used, " in use would exceed its capacity of ", capacity,
                         " bytes (", used < capacity ? capacity - used : 0, " free)"));
      }
    } while (!a.used_bytes.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    a.admitted.fetch_add(1, std::memory_order_relaxed);
    MC_DASSERT(used + bytes <= capacity, "admitted past capacity");
    return absl::OkStatus();
  }

  const Options options_;
  // std::shared_mutex, not absl::Mutex: see locked_scheduler.h.
  mutable std::shared_mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Account>> tenants_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::qos

#endif  // MOONCAKE_QOS_TENANT_QUOTA_H_
