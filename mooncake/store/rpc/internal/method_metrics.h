// Per-method RPC metrics on a MetricsRegistry: calls, errors by code and a
// latency summary, one series per method (label `method`).
//
//   <prefix>_calls_total{method}          calls finished (OK or not)
//   <prefix>_errors_total{method,code}    calls finished with a non-OK code
//   <prefix>_latency_seconds{method}      time from receipt (server) or send
//                                         (client) to completion
//
// Thread-safety: every method may be called concurrently. ForMethod is one
// atomic load for method ids < 256 once seen (a writer lock the first time).
#ifndef MOONCAKE_STORE_RPC_INTERNAL_METHOD_METRICS_H_
#define MOONCAKE_STORE_RPC_INTERNAL_METHOD_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/histogram.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/rpc/frame.h"

namespace mooncake::rpc_internal {

class MethodMetrics {
 public:
  MethodMetrics(MetricsRegistry* registry, std::string prefix, std::string method)
      : registry_(registry), prefix_(std::move(prefix)), method_(std::move(method)) {
    MC_ASSERT(registry_ != nullptr, "metrics need a registry");
    calls_ = Must(registry_->GetCounter(absl::StrCat(prefix_, "_calls_total"),
                                        "RPC calls finished, by method.", {{"method", method_}}));
    latency_ =
        Must(registry_->GetHistogram(absl::StrCat(prefix_, "_latency_seconds"),
                                     "RPC call latency, by method.", {{"method", method_}}, 1e9));
    for (auto& e : errors_) e.store(nullptr, std::memory_order_relaxed);
  }

  void Record(absl::StatusCode code, uint64_t latency_ns) {
    calls_->Increment();
    latency_->Record(latency_ns);
    if (code != absl::StatusCode::kOk) ErrorCounter(code)->Increment();
  }

  const std::string& method() const { return method_; }

 private:
  template <typename T>
  static T Must(absl::StatusOr<T> v) {
    // Names here are fixed literals; a failure is a programmer error (e.g. a
    // registry that already has the family with other labels).
    MC_ASSERT(v.ok(), "RPC metric registration failed");
    return *v;
  }

  Counter* ErrorCounter(absl::StatusCode code) {
    const auto i = static_cast<size_t>(code);
    MC_DASSERT(i <= rpc::kMaxStatusCode, "status code out of range");
    // acquire: pairs with the release below so the Counter is seen built.
    Counter* c = errors_[i].load(std::memory_order_acquire);
    if (c != nullptr) return c;
    c = Must(registry_->GetCounter(
        absl::StrCat(prefix_, "_errors_total"), "RPC calls that failed, by method and code.",
        {{"method", method_}, {"code", absl::StatusCodeToString(code)}}));
    errors_[i].store(c, std::memory_order_release);  // the registry returns the same pointer
    return c;
  }

  MetricsRegistry* registry_;
  std::string prefix_;
  std::string method_;
  Counter* calls_;
  LatencyHistogram* latency_;
  std::array<std::atomic<Counter*>, rpc::kMaxStatusCode + 1> errors_;
};

// Method id -> MethodMetrics, created on first use.
class MetricsTable {
 public:
  // `registry` may be null: the table then owns a private registry.
  MetricsTable(MetricsRegistry* registry, std::string prefix)
      : owned_(registry == nullptr ? std::make_unique<MetricsRegistry>() : nullptr),
        registry_(registry == nullptr ? owned_.get() : registry),
        prefix_(std::move(prefix)) {}

  MethodMetrics* ForMethod(uint16_t method_id, std::string_view name) {
    // acquire: pairs with the release below, so the MethodMetrics is seen
    // built. Ids past the array take the lock.
    if (method_id < fast_.size()) {
      if (MethodMetrics* m = fast_[method_id].load(std::memory_order_acquire)) return m;
    }
    MethodMetrics* m = Slow(method_id, name);
    if (method_id < fast_.size()) fast_[method_id].store(m, std::memory_order_release);
    return m;
  }

  MetricsRegistry* registry() const { return registry_; }
  const std::string& prefix() const { return prefix_; }

 private:
  MethodMetrics* Slow(uint16_t method_id, std::string_view name) {
    {
      ReaderMutexLock lock(&mu_);
      if (auto it = by_id_.find(method_id); it != by_id_.end()) return it->second.get();
    }
    WriterMutexLock lock(&mu_);
    auto& slot = by_id_[method_id];
    if (slot == nullptr) {
      slot = std::make_unique<MethodMetrics>(
          registry_, prefix_,
          name.empty() ? absl::StrCat("method_", method_id) : std::string(name));
    }
    return slot.get();
  }

  std::unique_ptr<MetricsRegistry> owned_;
  MetricsRegistry* registry_;
  std::string prefix_;
  SharedMutex mu_;
  absl::flat_hash_map<uint16_t, std::unique_ptr<MethodMetrics>> by_id_ ABSL_GUARDED_BY(mu_);
  // Lock-free lookups for small ids (every method id in use); entries are
  // never removed, so a pointer once stored stays valid.
  std::array<std::atomic<MethodMetrics*>, 256> fast_{};
};

}  // namespace mooncake::rpc_internal

#endif  // MOONCAKE_STORE_RPC_INTERNAL_METHOD_METRICS_H_
