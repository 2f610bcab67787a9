// FakeKvDriver: an in-process KvDriver over a shared map, for testing the
// harness, the fill run and the conformance kit without a server. The store
// can be told to hold at most `capacity_bytes` (evicting the oldest key) and
// to misbehave: return corrupted bytes or short values.
//
// Thread-safety: FakeKvStore is thread-safe (one mutex); each FakeKvDriver is
// used by one thread, like every KvDriver.
#ifndef MOONCAKE_TOOLS_BENCH_TESTING_FAKE_KV_DRIVER_H_
#define MOONCAKE_TOOLS_BENCH_TESTING_FAKE_KV_DRIVER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mooncake/base/mutex.h"
#include "tools/bench/kv_driver.h"

namespace mooncake::bench {

enum class FakeFault { kNone, kCorrupt, kTruncate };

class FakeKvStore {
 public:
  explicit FakeKvStore(uint64_t capacity_bytes = 0) : capacity_bytes_(capacity_bytes) {}

  absl::Status Put(std::string_view key, std::string_view value) {
    MutexLock lock(&mu_);
    if (capacity_bytes_ > 0 && value.size() > capacity_bytes_) {
      return absl::ResourceExhaustedError("value larger than the fake's capacity");
    }
    Erase(std::string(key));
    while (capacity_bytes_ > 0 && used_bytes_ + value.size() > capacity_bytes_) {
      Erase(std::string(order_.front()));
      ++evictions_;
    }
    map_[std::string(key)] = std::string(value);
    order_.emplace_back(key);
    used_bytes_ += value.size();
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Get(std::string_view key) {
    MutexLock lock(&mu_);
    auto it = map_.find(std::string(key));
    if (it == map_.end()) return absl::NotFoundError("fake: miss");
    std::string v = it->second;
    if (fault_ == FakeFault::kCorrupt && !v.empty()) v[v.size() / 2] ^= 1;
    if (fault_ == FakeFault::kTruncate && !v.empty()) v.pop_back();
    return v;
  }

  absl::Status Remove(std::string_view key) {
    MutexLock lock(&mu_);
    return Erase(std::string(key)) ? absl::OkStatus() : absl::NotFoundError("fake: miss");
  }

  void set_fault(FakeFault f) {
    MutexLock lock(&mu_);
    fault_ = f;
  }
  uint64_t used_bytes() {
    MutexLock lock(&mu_);
    return used_bytes_;
  }
  uint64_t evictions() {
    MutexLock lock(&mu_);
    return evictions_;
  }
  uint64_t capacity_bytes() const { return capacity_bytes_; }

 private:
  bool Erase(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    used_bytes_ -= it->second.size();
    map_.erase(it);
    for (auto o = order_.begin(); o != order_.end(); ++o) {
      if (*o == key) {
        order_.erase(o);
        break;
      }
    }
    return true;
  }

  const uint64_t capacity_bytes_;
  Mutex mu_;
  std::map<std::string, std::string> map_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);  // oldest first
  uint64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
  FakeFault fault_ ABSL_GUARDED_BY(mu_) = FakeFault::kNone;
};

class FakeKvDriver {
 public:
  explicit FakeKvDriver(FakeKvStore* store) : store_(store) {}

  std::string_view system() const { return "fake"; }
  absl::Status Put(std::string_view key, std::string_view value) { return store_->Put(key, value); }
  absl::StatusOr<std::string_view> Get(std::string_view key) {
    values_.resize(1);
    absl::StatusOr<std::string> v = store_->Get(key);
    if (!v.ok()) return v.status();
    values_[0] = std::move(*v);
    return std::string_view(values_[0]);
  }
  void BatchPut(std::span<const std::string_view> keys, std::span<const std::string_view> values,
                std::vector<absl::Status>& out) {
    out.clear();
    for (size_t i = 0; i < keys.size(); ++i) out.push_back(store_->Put(keys[i], values[i]));
  }
  void BatchGet(std::span<const std::string_view> keys,
                std::vector<absl::StatusOr<std::string_view>>& out) {
    values_.assign(keys.size(), std::string());
    out.clear();
    for (size_t i = 0; i < keys.size(); ++i) {
      absl::StatusOr<std::string> v = store_->Get(keys[i]);
      if (!v.ok()) {
        out.emplace_back(v.status());
        continue;
      }
      values_[i] = std::move(*v);
      out.emplace_back(std::string_view(values_[i]));
    }
  }
  absl::Status Remove(std::string_view key) { return store_->Remove(key); }

 private:
  FakeKvStore* store_;
  std::vector<std::string> values_;  // own the views handed out until the next call
};
static_assert(KvDriver<FakeKvDriver>);

}  // namespace mooncake::bench

#endif  // MOONCAKE_TOOLS_BENCH_TESTING_FAKE_KV_DRIVER_H_
