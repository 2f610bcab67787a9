// The benchmark's workload loop: one thread per client, each with its own
// driver (connection), running the same puts and gets against any KvDriver.
//
//   Put phase: the key space's keys are split round-robin over the clients;
//              each client puts its keys once, in order. Work-bound: the
//              phase ends when the last client is done.
//   Get phase: each client walks the whole key space in its own shuffled
//              order, `batch` keys per request (one BatchGet, or one Get when
//              batch is 1), until `duration` has passed. Every value returned
//              is verified (value_pool.h) outside the latency timer but
//              inside the throughput clock.
//
// Latency is per request (a batch is one request), in nanoseconds, recorded
// in one LatencyHistogram per client and merged. Throughput counts items
// (keys) that succeeded and were verified; misses, errors and verify
// failures are counted apart and never add to throughput.
//
// Thread-safety: the Run* functions start and join their own threads; the
// caller's `progress` counter is bumped with relaxed atomics by all of them.
#ifndef MOONCAKE_TOOLS_BENCH_HARNESS_H_
#define MOONCAKE_TOOLS_BENCH_HARNESS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <latch>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/histogram.h"
#include "tools/bench/cpu_usage.h"
#include "tools/bench/kv_driver.h"
#include "tools/bench/value_pool.h"

namespace mooncake::bench {

enum class Op { kPut, kGet };

inline std::string_view OpName(Op op) { return op == Op::kPut ? "put" : "get"; }

// Keys "<prefix>/<i>" for i in [0, count).
struct KeySpace {
  std::string prefix;
  size_t count = 0;
  std::string Key(size_t i) const { return absl::StrCat(prefix, "/", i); }
};

// What one phase of one system measured.
struct PhaseResult {
  uint64_t items = 0;     // keys put or got successfully (and verified)
  uint64_t requests = 0;  // calls made (a batch is one)
  uint64_t bytes = 0;     // value bytes of `items`
  double seconds = 0;
  uint64_t misses = 0;           // NOT_FOUND items
  uint64_t errors = 0;           // other failed items
  uint64_t verify_failures = 0;  // items whose bytes were wrong
  std::string first_error;       // the first error or verify failure, for the log
  double p50_us = 0, p99_us = 0, p999_us = 0;
  CpuUsage cpu;  // from the clients' release to the last one's end (cpu_usage.h)

  double items_per_s() const { return seconds > 0 ? static_cast<double>(items) / seconds : 0; }
  double gb_per_s() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0; }
};

namespace bench_internal {

// One client thread's counters; merged into a PhaseResult after the join.
struct ClientTally {
  PhaseResult r;
  std::unique_ptr<LatencyHistogram> latency = std::make_unique<LatencyHistogram>();

  void Fail(const absl::Status& s, bool verify = false) {
    if (verify) {
      ++r.verify_failures;
    } else if (absl::IsNotFound(s)) {
      ++r.misses;
      return;
    } else {
      ++r.errors;
    }
    if (r.first_error.empty()) r.first_error = s.ToString();
  }
};

inline PhaseResult Merge(std::vector<ClientTally>& tallies, double seconds) {
  PhaseResult out;
  LatencyHistogram all;
  for (ClientTally& t : tallies) {
    out.items += t.r.items;
    out.requests += t.r.requests;
    out.bytes += t.r.bytes;
    out.misses += t.r.misses;
    out.errors += t.r.errors;
    out.verify_failures += t.r.verify_failures;
    if (out.first_error.empty()) out.first_error = t.r.first_error;
    all.Merge(*t.latency);
  }
  out.seconds = seconds;
  if (all.Count() > 0) {
    out.p50_us = static_cast<double>(all.P50()) / 1e3;
    out.p99_us = static_cast<double>(all.P99()) / 1e3;
    out.p999_us = static_cast<double>(all.P999()) / 1e3;
  }
  return out;
}

// Runs body(client_index, tally) on one thread per driver, all released at
// once; returns the merged tallies, the wall time from release to the last
// thread's end, and the CPU used meanwhile by `server_pid` (<= 0: none), by
// this process and by nobody (idle).
template <typename Body>
PhaseResult RunClients(size_t clients, Body body, pid_t server_pid = 0) {
  MC_ASSERT(clients > 0, "no clients");
  std::vector<ClientTally> tallies(clients);
  std::latch ready(static_cast<std::ptrdiff_t>(clients) + 1);
  std::vector<std::thread> threads;
  threads.reserve(clients);
  for (size_t c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      ready.arrive_and_wait();
      body(c, tallies[c]);
    });
  }
  const CpuSample before = CpuSample::Take(server_pid);
  const int64_t t0 = MonotonicClock::Get().NowNs();
  ready.arrive_and_wait();
  for (std::thread& t : threads) t.join();
  const double seconds = static_cast<double>(MonotonicClock::Get().NowNs() - t0) / 1e9;
  PhaseResult out = Merge(tallies, seconds);
  out.cpu = CpuUsage::Between(before, CpuSample::Take(server_pid));
  return out;
}

}  // namespace bench_internal

// Puts every key of `keys` once, spread over the drivers, `batch` keys per
// request (1: Put, else BatchPut); latency is per request.
template <KvDriver D>
PhaseResult RunPuts(std::span<const std::unique_ptr<D>> drivers, const ValuePool& pool,
                    const KeySpace& keys, size_t value_bytes, std::atomic<uint64_t>* progress,
                    pid_t server_pid = 0, size_t batch = 1) {
  MC_ASSERT(!drivers.empty() && keys.count > 0, "nothing to run");
  MC_ASSERT(batch >= 1 && batch <= kMaxBatchKeys, "batch size out of range");
  const size_t clients = drivers.size();
  return bench_internal::RunClients(
      clients,
      [&](size_t c, bench_internal::ClientTally& t) {
        D& d = *drivers[c];
        std::vector<std::string> names;
        std::vector<std::string_view> key_views, values;
        std::vector<absl::Status> out;
        for (size_t i = c; i < keys.count;) {
          names.clear();
          for (; i < keys.count && names.size() < batch; i += clients) names.push_back(keys.Key(i));
          key_views.assign(names.begin(), names.end());
          values.clear();
          for (const std::string& k : names) values.push_back(pool.Value(k, value_bytes));
          const int64_t start = MonotonicClock::Get().NowNs();
          if (batch == 1) {
            out.assign(1, d.Put(key_views[0], values[0]));
          } else {
            d.BatchPut(key_views, values, out);
          }
          t.latency->Record(static_cast<uint64_t>(MonotonicClock::Get().NowNs() - start));
          ++t.r.requests;
          for (const absl::Status& s : out) {
            if (s.ok()) {
              ++t.r.items;
              t.r.bytes += value_bytes;
            } else {
              t.Fail(s);
            }
          }
          if (progress != nullptr) {
            progress->fetch_add(out.size(), std::memory_order_relaxed);  // display only
          }
        }
      },
      server_pid);
}

struct GetSpec {
  size_t value_bytes = 0;
  size_t batch = 1;  // keys per request, <= kMaxBatchKeys
  absl::Duration duration = absl::Seconds(1);
  VerifyMode verify = VerifyMode::kSampled;
  uint64_t seed = 1;     // per-client key orders derive from it
  pid_t server_pid = 0;  // whose CPU the phase reports (PhaseResult::cpu); <= 0: none
};

template <KvDriver D>
PhaseResult RunGets(std::span<const std::unique_ptr<D>> drivers, const ValuePool& pool,
                    const KeySpace& keys, const GetSpec& spec, std::atomic<uint64_t>* progress) {
  MC_ASSERT(!drivers.empty() && keys.count > 0, "nothing to run");
  MC_ASSERT(spec.batch >= 1 && spec.batch <= kMaxBatchKeys, "batch size out of range");
  const int64_t duration_ns = absl::ToInt64Nanoseconds(spec.duration);
  // Key orders are built before the clock starts.
  std::vector<std::vector<std::string>> orders(drivers.size());
  for (size_t c = 0; c < drivers.size(); ++c) {
    orders[c].resize(keys.count);
    for (size_t i = 0; i < keys.count; ++i) orders[c][i] = keys.Key(i);
    std::shuffle(orders[c].begin(), orders[c].end(), std::mt19937_64(spec.seed * 1000003 + c));
  }
  return bench_internal::RunClients(
      drivers.size(),
      [&](size_t c, bench_internal::ClientTally& t) {
        D& d = *drivers[c];
        const std::vector<std::string>& order = orders[c];
        std::vector<std::string_view> batch(std::min(spec.batch, keys.count));
        std::vector<absl::StatusOr<std::string_view>> out;
        const int64_t end = MonotonicClock::Get().NowNs() + duration_ns;
        size_t next = 0;
        uint64_t salt = c << 40;
        while (MonotonicClock::Get().NowNs() < end) {
          for (std::string_view& k : batch) k = order[next++ % order.size()];
          const int64_t start = MonotonicClock::Get().NowNs();
          if (batch.size() == 1) {
            out.clear();
            out.push_back(d.Get(batch[0]));
          } else {
            d.BatchGet(batch, out);
          }
          t.latency->Record(static_cast<uint64_t>(MonotonicClock::Get().NowNs() - start));
          ++t.r.requests;
          MC_ASSERT(out.size() == batch.size(), "a driver answered a different number of keys");
          for (size_t i = 0; i < batch.size(); ++i) {
            if (!out[i].ok()) {
              t.Fail(out[i].status());
              continue;
            }
            if (absl::Status v =
                    pool.Verify(batch[i], spec.value_bytes, *out[i], spec.verify, ++salt);
                !v.ok()) {
              t.Fail(v, /*verify=*/true);
              continue;
            }
            ++t.r.items;
            t.r.bytes += spec.value_bytes;
          }
          if (progress != nullptr) progress->fetch_add(batch.size(), std::memory_order_relaxed);
        }
      },
      spec.server_pid);
}

// Removes every key of `keys` (NOT_FOUND is fine); the first other error.
template <KvDriver D>
absl::Status RemoveAll(std::span<const std::unique_ptr<D>> drivers, const KeySpace& keys) {
  MC_ASSERT(!drivers.empty(), "no drivers");
  const size_t clients = drivers.size();
  PhaseResult r =
      bench_internal::RunClients(clients, [&](size_t c, bench_internal::ClientTally& t) {
        for (size_t i = c; i < keys.count; i += clients) {
          const absl::Status s = drivers[c]->Remove(keys.Key(i));
          if (!s.ok()) t.Fail(s);
        }
      });
  if (r.errors == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(r.errors, " removes failed; first: ", r.first_error));
}

}  // namespace mooncake::bench

#endif  // MOONCAKE_TOOLS_BENCH_HARNESS_H_
