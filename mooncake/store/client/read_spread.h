// ReadSpread: which of an object's replicas a client reads, when several are
// equally near (docs/client.md, "Which replica a get reads").
//
// The master lists an answer's remote replicas least loaded first, but a
// client that caches the answer does not ask again until the lease ends, and
// the master's view counts only the reads it was asked about. So the client
// keeps its own view, two measures per worker:
//   - the bytes that reads of this process have in flight to it now
//     (InFlightReads, shared by every client of the process by default: they
//     share the host's links), counted by the get path from the moment a
//     batch is submitted until it settles;
//   - the bytes this client read from it lately, decayed exponentially with
//     time constant `tau_ns` (default 1 s).
// A read goes to the replica, among the nearest ones, whose worker has the
// fewest bytes in flight; among equal ones, the one this client loaded least
// lately; ties go to the next replica in turn. Reads in flight are a
// worker's queue: choosing the shortest keeps every worker's link busy while
// the reads that had no choice pile up on a few (a hot object's extra
// replicas, docs/elasticity.md, take the load the cold objects left
// uneven). The decayed load spreads the reads of one batch, which choose
// before any of them is in flight, and a client's reads when nothing is.
//
// Bounded: at most `kMaxWorkers` workers are remembered; past that, the ones
// whose load has decayed the most are forgotten. InFlightReads holds only the
// workers with reads in flight.
//
// Thread-safety: every method of both classes may be called concurrently
// (a mutex each; Choose takes them one after the other, never both).
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
#include "absl/container/inlined_vector.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"

namespace mooncake::client {

// Bytes of reads in flight per worker. One per process by default
// (Process()); a test makes its own.
class InFlightReads {
 public:
  struct Read {
    std::string_view worker;
    uint64_t bytes = 0;
  };

  InFlightReads() = default;
  InFlightReads(const InFlightReads&) = delete;
  InFlightReads& operator=(const InFlightReads&) = delete;

  // The process's table (never destroyed: clients may outlive statics).
  static InFlightReads& Process() {
    static InFlightReads* const table = new InFlightReads();
    return *table;
  }

  void Add(std::span<const Read> reads) {
    if (reads.empty()) return;
    MutexLock lock(&mu_);
    for (const Read& r : reads) map_[AbslView(r.worker)] += r.bytes;
  }
  // REQUIRES: each read was Added and not yet removed.
  void Remove(std::span<const Read> reads) {
    if (reads.empty()) return;
    MutexLock lock(&mu_);
    for (const Read& r : reads) {
      auto it = map_.find(AbslView(r.worker));
      MC_ASSERT(it != map_.end() && it->second >= r.bytes,
                "InFlightReads::Remove: a read that was not added");
      it->second -= r.bytes;
      if (it->second == 0) map_.erase(it);
    }
  }
  uint64_t Bytes(std::string_view worker) const {
    MutexLock lock(&mu_);
    auto it = map_.find(AbslView(worker));
    return it == map_.end() ? 0 : it->second;
  }
  // Workers with reads in flight (for tests).
  size_t size() const {
    MutexLock lock(&mu_);
    return map_.size();
  }

 private:
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, uint64_t> map_ ABSL_GUARDED_BY(mu_);
};

// Counts `reads` in flight from construction to destruction.
class InFlightScope {
 public:
  InFlightScope(InFlightReads* table, std::span<const InFlightReads::Read> reads)
      : table_(table), reads_(reads) {
    table_->Add(reads_);
  }
  ~InFlightScope() { table_->Remove(reads_); }
  InFlightScope(const InFlightScope&) = delete;
  InFlightScope& operator=(const InFlightScope&) = delete;

 private:
  InFlightReads* const table_;
  const std::span<const InFlightReads::Read> reads_;
};

class ReadSpread {
 public:
  static constexpr size_t kMaxWorkers = 4096;

  explicit ReadSpread(int64_t tau_ns = 1'000'000'000,
                      InFlightReads* in_flight = &InFlightReads::Process())
      : tau_ns_(tau_ns), in_flight_(in_flight) {
    MC_ASSERT(tau_ns > 0, "ReadSpread: the time constant must be positive");
    MC_ASSERT(in_flight != nullptr, "ReadSpread: needs an in-flight table");
  }
  ReadSpread(const ReadSpread&) = delete;
  ReadSpread& operator=(const ReadSpread&) = delete;

  // Of workers[0, n), the index whose worker has the fewest bytes in flight;
  // among equal ones, the one this client loaded least at `now_ns`; among
  // those, the first at or after `turn % n` (cyclic). Counts `bytes` against
  // the chosen worker's decayed load (the caller counts the read in flight
  // when it submits it). n >= 1.
  size_t Choose(std::span<const std::string_view> workers, uint64_t turn, uint64_t bytes,
                int64_t now_ns) {
    MC_ASSERT(!workers.empty(), "ReadSpread::Choose: no candidate");
    const size_t n = workers.size();
    absl::InlinedVector<uint64_t, 4> queued(n, 0);
    if (n > 1) {
      for (size_t i = 0; i < n; ++i) queued[i] = in_flight_->Bytes(workers[i]);
    }
    MutexLock lock(&mu_);
    size_t best = 0;
    std::pair<uint64_t, double> best_key{UINT64_MAX, INFINITY};
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (turn + k) % n;
      const std::pair<uint64_t, double> key{queued[i], LoadLocked(workers[i], now_ns)};
      if (key < best_key) {
        best_key = key;
        best = i;
      }
    }
    Entry& e = map_[AbslView(workers[best])];
    e.bytes = Decayed(e, now_ns) + static_cast<double>(bytes);
    e.at_ns = now_ns;
    if (map_.size() > kMaxWorkers) ForgetColdestLocked(now_ns);
    return best;
  }

  InFlightReads& in_flight() const { return *in_flight_; }

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
  InFlightReads* const in_flight_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, Entry> map_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::client

#endif  // MOONCAKE_STORE_CLIENT_READ_SPREAD_H_
