// The fill-past-capacity run: put more than a system can hold, with eviction
// active, and measure how full it stays while evicting, which puts fail, and
// how many of the keys a read-back still finds.
//
//   Put:       fill_factor x capacity of values, keys in order, split
//              round-robin over the clients (harness RunPuts).
//   Sample:    meanwhile a sampler thread reads used/capacity from the
//              system's own accounting every sample_interval; samples taken
//              after the first eviction (the system's eviction counter > 0)
//              give the median and minimum utilisation.
//   Read-back: every key once, verified. hit_rate = hits / keys put;
//              hit_ceiling = capacity / bytes put (no system with only
//              that memory can beat it; store+ssd has an SSD tier too).
// Failed puts are counted by status code. No object is pinned or leased
// while the puts run, so any put that fails for lack of space is one that
// eviction could have served.
//
// Thread-safety: RunFill starts and joins its own threads.
#ifndef MOONCAKE_TOOLS_BENCH_FILL_H_
#define MOONCAKE_TOOLS_BENCH_FILL_H_

#include <atomic>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "tools/bench/harness.h"
#include "tools/bench/json_writer.h"
#include "tools/bench/report.h"

namespace mooncake::bench {

// How full a system is, from its own accounting.
struct Utilisation {
  double used_bytes = 0;
  double capacity_bytes = 0;
  double evictions = 0;  // cumulative
};
using UtilisationProbe = std::function<absl::StatusOr<Utilisation>()>;

struct FillResult {
  std::string system;
  uint64_t capacity_bytes = 0;  // what the run configured
  size_t value_bytes = 0;
  PhaseResult puts;    // failed puts are puts.errors (+ misses, which no put returns)
  size_t samples = 0;  // utilisation samples after the first eviction
  double util_median = 0, util_min = 0;
  std::string probe_error;  // the first failed probe, if any
  uint64_t readback_hits = 0, readback_keys = 0, readback_bad = 0;
  std::string readback_error;  // the first read-back error or verify failure
  double hit_rate = 0, hit_ceiling = 0;
};

namespace bench_internal {

// Samples `probe` every `interval` until `stop`; keeps used/capacity of the
// samples taken once evictions > 0.
class UtilisationSampler {
 public:
  UtilisationSampler(UtilisationProbe probe, absl::Duration interval)
      : probe_(std::move(probe)), thread_([this, interval] { Loop(interval); }) {}
  ~UtilisationSampler() { Stop(); }

  void Stop() {
    stop_.store(true, std::memory_order_relaxed);  // the join orders everything after
    if (thread_.joinable()) thread_.join();
  }
  const std::vector<double>& samples() const { return samples_; }
  const std::string& error() const { return error_; }

 private:
  // Samples until told to stop, and once more after (the state the puts left).
  void Loop(absl::Duration interval) {
    for (bool last = false; !last;) {
      last = stop_.load(std::memory_order_relaxed);
      absl::StatusOr<Utilisation> u = probe_();
      if (!u.ok()) {
        if (error_.empty()) error_ = u.status().ToString();
      } else if (u->evictions > 0 && u->capacity_bytes > 0) {
        samples_.push_back(u->used_bytes / u->capacity_bytes);
      }
      if (!last) absl::SleepFor(interval);
    }
  }

  UtilisationProbe probe_;
  std::atomic<bool> stop_{false};
  std::vector<double> samples_;  // written by the thread; read after Stop()
  std::string error_;
  std::thread thread_;  // last: starts after the members it uses exist
};

}  // namespace bench_internal

template <KvDriver D>
FillResult RunFill(std::span<const std::unique_ptr<D>> drivers, const ValuePool& pool,
                   const KeySpace& keys, size_t value_bytes, uint64_t capacity_bytes,
                   UtilisationProbe probe, absl::Duration interval,
                   std::atomic<uint64_t>* progress) {
  MC_ASSERT(!drivers.empty() && keys.count > 0 && capacity_bytes > 0, "nothing to fill");
  FillResult f;
  f.system = std::string(drivers[0]->system());
  f.capacity_bytes = capacity_bytes;
  f.value_bytes = value_bytes;
  {
    bench_internal::UtilisationSampler sampler(std::move(probe), interval);
    f.puts = RunPuts(drivers, pool, keys, value_bytes, progress);
    sampler.Stop();
    std::vector<double> s = sampler.samples();
    f.samples = s.size();
    f.probe_error = sampler.error();
    if (!s.empty()) {
      f.util_min = *std::min_element(s.begin(), s.end());
      f.util_median = Median(std::move(s));
    }
  }
  const size_t clients = drivers.size();
  PhaseResult rb =
      bench_internal::RunClients(clients, [&](size_t c, bench_internal::ClientTally& t) {
        for (size_t i = c; i < keys.count; i += clients) {
          const std::string key = keys.Key(i);
          absl::StatusOr<std::string_view> v = drivers[c]->Get(key);
          if (!v.ok()) {
            t.Fail(v.status());
          } else if (absl::Status s = pool.Verify(key, value_bytes, *v, VerifyMode::kSampled, i);
                     !s.ok()) {
            t.Fail(s, /*verify=*/true);
          } else {
            ++t.r.items;
          }
        }
      });
  f.readback_keys = keys.count;
  f.readback_hits = rb.items;
  f.readback_bad = rb.verify_failures + rb.errors;
  f.readback_error = rb.first_error;
  f.hit_rate = static_cast<double>(rb.items) / static_cast<double>(keys.count);
  f.hit_ceiling = std::min(
      1.0, static_cast<double>(capacity_bytes) / (static_cast<double>(keys.count) * value_bytes));
  return f;
}

inline void PrintFill(std::FILE* out, const std::vector<FillResult>& fills) {
  std::fprintf(out, "%-14s %9s %7s %7s %8s %9s %9s %9s %8s %8s  %s\n", "system", "capacity", "puts",
               "failed", "put GB/s", "samples", "util med", "util min", "hit rate", "ceiling",
               "note");
  for (const FillResult& f : fills) {
    std::string note = f.puts.first_error;
    if (!f.probe_error.empty()) note += " probe: " + f.probe_error;
    if (f.readback_bad > 0) {
      note +=
          absl::StrCat(" read-back errors: ", f.readback_bad, " (first: ", f.readback_error, ")");
    }
    std::fprintf(out, "%-14s %9s %7llu %7llu %8.2f %9zu %9.3f %9.3f %8.3f %8.3f  %s\n",
                 f.system.c_str(), SizeName(f.capacity_bytes).c_str(),
                 static_cast<unsigned long long>(f.puts.requests),
                 static_cast<unsigned long long>(f.puts.errors), f.puts.gb_per_s(), f.samples,
                 f.util_median, f.util_min, f.hit_rate, f.hit_ceiling, note.c_str());
  }
}

inline void WriteFillJson(JsonWriter& w, const FillResult& f) {
  w.BeginObject();
  w.Field("system", f.system);
  w.Field("capacity_bytes", f.capacity_bytes);
  w.Field("value_bytes", static_cast<uint64_t>(f.value_bytes));
  w.Field("puts", f.puts.requests);
  w.Field("failed_puts", f.puts.errors);
  w.Field("first_error", f.puts.first_error);
  w.Field("put_gb_per_s", f.puts.gb_per_s());
  w.Field("util_samples", static_cast<uint64_t>(f.samples));
  w.Field("util_median", f.util_median);
  w.Field("util_min", f.util_min);
  w.Field("readback_keys", f.readback_keys);
  w.Field("readback_hits", f.readback_hits);
  w.Field("readback_bad", f.readback_bad);
  w.Field("readback_error", f.readback_error);
  w.Field("hit_rate", f.hit_rate);
  w.Field("hit_ceiling", f.hit_ceiling);
  w.Field("probe_error", f.probe_error);
  w.EndObject();
}

}  // namespace mooncake::bench

#endif  // MOONCAKE_TOOLS_BENCH_FILL_H_
