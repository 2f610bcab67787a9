// Rows of mooncake_bench's results: medians over repetitions, the store's
// ratios to memcached and Redis measured in the same run, the tables printed
// to stdout and the JSON written for plotting.
//
// Medians: each repetition is one put or get phase (harness.h); a row's
// throughput and each latency percentile are the medians over its
// repetitions (the lower middle for an even count). Error counts are sums.
//
// Thread-safety: plain values; no shared state.
#ifndef MOONCAKE_TOOLS_BENCH_REPORT_H_
#define MOONCAKE_TOOLS_BENCH_REPORT_H_

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mooncake/base/assert.h"
#include "tools/bench/harness.h"
#include "tools/bench/json_writer.h"

namespace mooncake::bench {

struct Row {
  std::string system;  // "memcached", "redis", "store-tcp", "store-shm"
  Op op = Op::kGet;
  size_t value_bytes = 0;
  size_t clients = 0;
  size_t batch = 1;
  std::vector<PhaseResult> reps;
  // Medians over reps.
  double items_per_s = 0, gb_per_s = 0, p50_us = 0, p99_us = 0, p999_us = 0;
  uint64_t errors = 0, misses = 0, verify_failures = 0;
  std::string first_error;
  // Medians over the reps that read them (PhaseResult::cpu); unset if none did.
  std::optional<double> server_cores, client_cores, idle_cores, steal_cores, cpu_us_per_item;
  // Store rows: this row's items_per_s over the baseline's, same cell.
  std::optional<double> vs_memcached, vs_redis;

  bool SameCell(const Row& o) const {
    return op == o.op && value_bytes == o.value_bytes && clients == o.clients && batch == o.batch;
  }
  bool IsStore() const { return system.starts_with("store"); }
};

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

// The median of the values present; unset if none is.
inline std::optional<double> MedianOfPresent(const std::vector<std::optional<double>>& v) {
  std::vector<double> present;
  for (const std::optional<double>& x : v) {
    if (x.has_value()) present.push_back(*x);
  }
  if (present.empty()) return std::nullopt;
  return Median(std::move(present));
}

// Fills the medians and sums from row.reps.
inline void Summarize(Row& row) {
  MC_ASSERT(!row.reps.empty(), "a row without repetitions");
  auto median_of = [&](auto field) {
    std::vector<double> v;
    for (const PhaseResult& r : row.reps) v.push_back(field(r));
    return Median(std::move(v));
  };
  row.items_per_s = median_of([](const PhaseResult& r) { return r.items_per_s(); });
  row.gb_per_s = median_of([](const PhaseResult& r) { return r.gb_per_s(); });
  row.p50_us = median_of([](const PhaseResult& r) { return r.p50_us; });
  row.p99_us = median_of([](const PhaseResult& r) { return r.p99_us; });
  row.p999_us = median_of([](const PhaseResult& r) { return r.p999_us; });
  auto cpu_median = [&](auto field) {
    std::vector<std::optional<double>> v;
    for (const PhaseResult& r : row.reps) v.push_back(field(r));
    return MedianOfPresent(v);
  };
  row.server_cores = cpu_median([](const PhaseResult& r) { return r.cpu.server_cores; });
  row.client_cores = cpu_median([](const PhaseResult& r) { return r.cpu.client_cores; });
  row.idle_cores = cpu_median([](const PhaseResult& r) { return r.cpu.idle_cores; });
  row.steal_cores = cpu_median([](const PhaseResult& r) { return r.cpu.steal_cores; });
  row.cpu_us_per_item =
      cpu_median([](const PhaseResult& r) { return r.cpu.CpuUsPerItem(r.items); });
  row.errors = row.misses = row.verify_failures = 0;
  for (const PhaseResult& r : row.reps) {
    row.errors += r.errors;
    row.misses += r.misses;
    row.verify_failures += r.verify_failures;
    if (row.first_error.empty()) row.first_error = r.first_error;
  }
}

// The baseline row of `system` for `row`'s cell, or null.
inline const Row* FindRow(const std::vector<Row>& rows, const Row& cell, std::string_view system) {
  for (const Row& r : rows) {
    if (r.system == system && r.SameCell(cell)) return &r;
  }
  return nullptr;
}

// The best memcached row (ascii or binary protocol) of `cell`, or null: the
// store is compared with the faster variant measured.
inline const Row* BestMemcached(const std::vector<Row>& rows, const Row& cell) {
  const Row* best = nullptr;
  for (const Row& r : rows) {
    if (r.system.starts_with("memcached") && r.SameCell(cell) &&
        (best == nullptr || r.items_per_s > best->items_per_s)) {
      best = &r;
    }
  }
  return best;
}

// `store`'s throughput over `baseline`'s. Paired: the median over
// repetitions of repetition k's ratio (the systems of a repetition run back
// to back, so the machine's drift between repetitions cancels), when both
// rows have the same number of repetitions and every baseline repetition
// moved something; else the ratio of the medians. None if the baseline moved
// nothing.
inline std::optional<double> ThroughputRatio(const Row& store, const Row& baseline) {
  if (store.reps.size() == baseline.reps.size() && !store.reps.empty()) {
    std::vector<double> ratios;
    for (size_t k = 0; k < store.reps.size(); ++k) {
      const double b = baseline.reps[k].items_per_s();
      if (b <= 0) break;
      ratios.push_back(store.reps[k].items_per_s() / b);
    }
    if (ratios.size() == store.reps.size()) return Median(std::move(ratios));
  }
  if (baseline.items_per_s <= 0) return std::nullopt;
  return store.items_per_s / baseline.items_per_s;
}

// Store rows get their ratios to the memcached and Redis rows of their cell
// (after Summarize; ThroughputRatio). A baseline that moved nothing gives no
// ratio.
inline void ComputeRatios(std::vector<Row>& rows) {
  for (Row& r : rows) {
    if (!r.IsStore()) continue;
    const Row* m = BestMemcached(rows, r);
    const Row* d = FindRow(rows, r, "redis");
    r.vs_memcached.reset();
    r.vs_redis.reset();
    if (m != nullptr) r.vs_memcached = ThroughputRatio(r, *m);
    if (d != nullptr) r.vs_redis = ThroughputRatio(r, *d);
  }
}

inline std::string SizeName(size_t bytes) {
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) {
    return absl::StrCat(bytes >> 20, " MiB");
  }
  if (bytes >= 1024 && bytes % 1024 == 0) return absl::StrCat(bytes >> 10, " KiB");
  return absl::StrCat(bytes, " B");
}

inline std::string RatioText(const std::optional<double>& r) {
  return r.has_value() ? absl::StrFormat("%.2fx", *r) : std::string("-");
}

// One table per (op, size, clients, batch) cell, systems side by side.
inline void PrintTable(std::FILE* out, const std::vector<Row>& rows) {
  std::fprintf(out, "%-4s %-8s %4s %5s  %-14s %10s %7s %9s %9s %9s %8s %8s %s\n", "op", "value",
               "cli", "batch", "system", "items/s", "GB/s", "P50 us", "P99 us", "P99.9 us", "vs mc",
               "vs redis", "errors");
  const Row* prev = nullptr;
  for (const Row& r : rows) {
    if (prev != nullptr && !prev->SameCell(r)) std::fprintf(out, "\n");
    prev = &r;
    std::string errors =
        r.errors + r.misses + r.verify_failures == 0
            ? std::string("0")
            : absl::StrCat(r.errors, " err ", r.misses, " miss ", r.verify_failures, " bad");
    std::fprintf(out, "%-4s %-8s %4zu %5zu  %-14s %10.0f %7.2f %9.1f %9.1f %9.1f %8s %8s %s\n",
                 std::string(OpName(r.op)).c_str(), SizeName(r.value_bytes).c_str(), r.clients,
                 r.batch, r.system.c_str(), r.items_per_s, r.gb_per_s, r.p50_us, r.p99_us,
                 r.p999_us, RatioText(r.vs_memcached).c_str(), RatioText(r.vs_redis).c_str(),
                 errors.c_str());
  }
}

inline std::string CoresText(const std::optional<double>& c) {
  return c.has_value() ? absl::StrFormat("%.2f", *c) : std::string("-");
}

// Where each row's CPU went (medians over its repetitions): cores in use by
// the server process, by the benchmark's client threads, idle and stolen, and
// server plus client CPU microseconds per item. A server near 1.00 core with
// idle left is single-thread bound; idle near 0 means the machine was full.
inline void PrintCpuTable(std::FILE* out, const std::vector<Row>& rows) {
  std::fprintf(out, "%-4s %-8s %4s %5s  %-14s %8s %8s %8s %8s %12s\n", "op", "value", "cli",
               "batch", "system", "server", "clients", "idle", "steal", "cpu us/item");
  const Row* prev = nullptr;
  for (const Row& r : rows) {
    if (prev != nullptr && !prev->SameCell(r)) std::fprintf(out, "\n");
    prev = &r;
    std::fprintf(out, "%-4s %-8s %4zu %5zu  %-14s %8s %8s %8s %8s %12s\n",
                 std::string(OpName(r.op)).c_str(), SizeName(r.value_bytes).c_str(), r.clients,
                 r.batch, r.system.c_str(), CoresText(r.server_cores).c_str(),
                 CoresText(r.client_cores).c_str(), CoresText(r.idle_cores).c_str(),
                 CoresText(r.steal_cores).c_str(),
                 r.cpu_us_per_item ? absl::StrFormat("%.1f", *r.cpu_us_per_item).c_str() : "-");
  }
}

inline void WriteOptionalField(JsonWriter& w, std::string_view key,
                               const std::optional<double>& v) {
  w.Key(key);
  v ? w.Double(*v) : w.Null();
}

inline void WriteRowJson(JsonWriter& w, const Row& r) {
  w.BeginObject();
  w.Field("system", r.system);
  w.Field("op", OpName(r.op));
  w.Field("value_bytes", static_cast<uint64_t>(r.value_bytes));
  w.Field("clients", static_cast<uint64_t>(r.clients));
  w.Field("batch", static_cast<uint64_t>(r.batch));
  w.Field("items_per_s", r.items_per_s);
  w.Field("gb_per_s", r.gb_per_s);
  w.Field("p50_us", r.p50_us);
  w.Field("p99_us", r.p99_us);
  w.Field("p999_us", r.p999_us);
  w.Key("vs_memcached");
  r.vs_memcached ? w.Double(*r.vs_memcached) : w.Null();
  w.Key("vs_redis");
  r.vs_redis ? w.Double(*r.vs_redis) : w.Null();
  w.Field("errors", r.errors);
  w.Field("misses", r.misses);
  w.Field("verify_failures", r.verify_failures);
  w.Field("first_error", r.first_error);
  WriteOptionalField(w, "server_cores", r.server_cores);
  WriteOptionalField(w, "client_cores", r.client_cores);
  WriteOptionalField(w, "idle_cores", r.idle_cores);
  WriteOptionalField(w, "steal_cores", r.steal_cores);
  WriteOptionalField(w, "cpu_us_per_item", r.cpu_us_per_item);
  w.Key("reps");
  w.BeginArray();
  for (const PhaseResult& p : r.reps) {
    w.BeginObject();
    w.Field("items", p.items);
    w.Field("requests", p.requests);
    w.Field("bytes", p.bytes);
    w.Field("seconds", p.seconds);
    w.Field("items_per_s", p.items_per_s());
    w.Field("p50_us", p.p50_us);
    w.Field("p99_us", p.p99_us);
    w.Field("p999_us", p.p999_us);
    WriteOptionalField(w, "server_cores", p.cpu.server_cores);
    WriteOptionalField(w, "client_cores", p.cpu.client_cores);
    WriteOptionalField(w, "idle_cores", p.cpu.idle_cores);
    WriteOptionalField(w, "steal_cores", p.cpu.steal_cores);
    WriteOptionalField(w, "cpu_us_per_item", p.cpu.CpuUsPerItem(p.items));
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
}

}  // namespace mooncake::bench

#endif  // MOONCAKE_TOOLS_BENCH_REPORT_H_
