// CachedReadReports: the reads a client served from its metadata cache, held
// until they are due and handed out as TouchObjects requests
// (ClientOptions::cached_read_report_ms, docs/client.md "Metadata cache").
//
// A read served from the cache never reaches the master, so without these
// reports the master would see an object in use only when the client's lease
// on it ends and it asks again: its LRU order, a drain's "hottest first" and
// hot-object replicas would run up to a lease (5 s) behind. Reports are due
// once the oldest pending read is `interval_ns` old, or once
// rpc::kMaxBatchItems distinct keys are pending; a key read several times
// meanwhile is reported once with its count.
//
// Thread-safety: every method may be called concurrently (one mutex).
#ifndef MOONCAKE_STORE_CLIENT_READ_REPORTS_H_
#define MOONCAKE_STORE_CLIENT_READ_REPORTS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/rpc/master.pb.h"
#include "mooncake/store/rpc/master_methods.h"

namespace mooncake::client {

class CachedReadReports {
 public:
  explicit CachedReadReports(int64_t interval_ns) : interval_ns_(interval_ns) {
    MC_ASSERT(interval_ns > 0, "a report interval is positive");
  }
  CachedReadReports(const CachedReadReports&) = delete;
  CachedReadReports& operator=(const CachedReadReports&) = delete;

  // Counts a read of (tenant, key) served at now_ns. Returns the requests to
  // send when reports are due (everything pending), else none.
  std::vector<store::proto::TouchObjectsRequest> Add(std::string_view tenant, std::string_view key,
                                                     int64_t now_ns) {
    MutexLock lock(&mu_);
    if (keys_ == 0) first_ns_ = now_ns;
    auto [it, fresh] = pending_[AbslView(tenant)].try_emplace(AbslView(key), 0);
    if (fresh) ++keys_;
    it->second = std::min(it->second + 1, rpc::kMaxCachedReads);
    if (keys_ < rpc::kMaxBatchItems && now_ns - first_ns_ < interval_ns_) return {};
    return TakeLocked();
  }

  // Everything pending (a closing client).
  std::vector<store::proto::TouchObjectsRequest> TakeAll() {
    MutexLock lock(&mu_);
    return TakeLocked();
  }

  size_t pending_keys() const {
    MutexLock lock(&mu_);
    return keys_;
  }

 private:
  // One request per tenant and kMaxBatchItems keys.
  std::vector<store::proto::TouchObjectsRequest> TakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<store::proto::TouchObjectsRequest> out;
    for (auto& [tenant, reads] : pending_) {
      for (auto& [key, n] : reads) {
        if (out.empty() || out.back().tenant() != tenant ||
            static_cast<size_t>(out.back().keys_size()) >= rpc::kMaxBatchItems) {
          out.emplace_back().set_tenant(tenant);
        }
        out.back().add_keys(key);
        out.back().add_reads(n);
      }
    }
    pending_.clear();
    keys_ = 0;
    return out;
  }

  const int64_t interval_ns_;
  mutable Mutex mu_;
  // tenant -> key -> reads not reported yet
  absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, uint32_t>> pending_
      ABSL_GUARDED_BY(mu_);
  size_t keys_ ABSL_GUARDED_BY(mu_) = 0;  // distinct (tenant, key) in pending_
  int64_t first_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mooncake::client

#endif  // MOONCAKE_STORE_CLIENT_READ_REPORTS_H_
