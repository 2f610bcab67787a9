// ReadSpread: which of an object's replicas a client reads, when several are
// equally near (docs/client.md, "Which replica a get reads").
//
// The master lists an answer's remote replicas least loaded first, but a
// client that caches the answer does not ask again until the lease ends, and
// the master's view counts only the reads it was asked about. So the client
// also keeps its own view: the bytes it read from each worker lately, decayed
// exponentially with time constant `tau_ns` (default 1 s). A cached read goes
// to the replica, among the nearest ones, whose worker this client loaded
// least; ties go to the next replica in turn. Every client balancing its own
// reads balances their sum, so a hot object's extra replicas
// (docs/elasticity.md) share its load, and a worker holding several hot
// objects gets fewer of the reads that have a choice.
//
// Bounded: at most `kMaxWorkers` workers are remembered; past that, the ones
// whose load has decayed the most are forgotten.
//
// Thread-safety: every method may be called concurrently (one mutex).
#ifndef MOONCAKE_STORE_CLIENT_READ_SPREAD_H_
#define MOONCAKE_STORE_CLIENT_READ_SPREAD_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"

namespace mooncake::client {

class ReadSpread {
 public:
  static constexpr size_t kMaxWorkers = 4096;

  explicit ReadSpread(int64_t tau_ns = 1'000'000'000) : tau_ns_(tau_ns) {
    MC_ASSERT(tau_ns > 0, "ReadSpread: the time constant must be positive");
  }
  ReadSpread(const ReadSpread&) = delete;
  ReadSpread& operator=(const ReadSpread&) = delete;

  // Of workers[0, n), the index whose worker this client loaded least at
  // `now_ns`; among equal ones, the first at or after `turn % n` (cyclic).
  // Counts `bytes` against the chosen worker. n >= 1.
  size_t Choose(std::span<const std::string_view> workers, uint64_t turn, uint64_t bytes,
                int64_t now_ns) {
    MC_ASSERT(!workers.empty(), "ReadSpread::Choose: no candidate");
    const size_t n = workers.size();
    MutexLock lock(&mu_);
    size_t best = 0;
    double best_load = INFINITY;
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (turn + k) % n;
      const double load = LoadLocked(workers[i], now_ns);
      if (load < best_load) {
        best_load = load;
        best = i;
      }
    }
    Entry& e = map_[AbslView(workers[best])];
    e.bytes = Decayed(e, now_ns) + static_cast<double>(bytes);
    e.at_ns = now_ns;
    if (map_.size() > kMaxWorkers) ForgetColdestLocked(now_ns);
    return best;
  }

  // This client's decayed byte count for `worker` (for tests and metrics).
  double Load(std::string_view worker, int64_t now_ns) const {
    MutexLock lock(&mu_);
    return LoadLocked(worker, now_ns);
  }

 private:
  struct Entry {
    double bytes = 0;
    int64_t at_ns = 0;
  };

  double Decayed(const Entry& e, int64_t now_ns) const {
    if (e.bytes == 0 || now_ns <= e.at_ns) return e.bytes;
    return e.bytes *
           std::exp(-static_cast<double>(now_ns - e.at_ns) / static_cast<double>(tau_ns_));
  }
  double LoadLocked(std::string_view worker, int64_t now_ns) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = map_.find(AbslView(worker));
    return it == map_.end() ? 0.0 : Decayed(it->second, now_ns);
  }
  // Drops the half of the entries with the least decayed load.
  void ForgetColdestLocked(int64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::pair<double, std::string>> all;
    all.reserve(map_.size());
    for (const auto& [w, e] : map_) all.emplace_back(Decayed(e, now_ns), w);
    std::nth_element(all.begin(), all.begin() + static_cast<ptrdiff_t>(all.size() / 2), all.end());
    for (size_t i = 0; i < all.size() / 2; ++i) map_.erase(all[i].second);
  }

  const int64_t tau_ns_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, Entry> map_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::client

#endif  // MOONCAKE_STORE_CLIENT_READ_SPREAD_H_
