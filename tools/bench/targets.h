// Issue #9's targets, checked against the rows of one run (medians, baselines
// from the same run):
//   GET 1 MiB and 4 MiB, 8 clients, TCP:  >= 1.25x memcached, >= 2x Redis,
//                                         P99 <= memcached's P99
//   GET 1 MiB, 8 clients, SHM:            >= 3x memcached
//   PUT 1 MiB, 8 clients, TCP:            >= 1x memcached
//   fill past capacity (store):           used/capacity >= 0.95 while
//                                         evicting (minimum sample), no
//                                         failed put
// Issue #41's small-object targets (CheckSmallObjectTargets):
//   GET 64 KiB, 8 clients, batches of 16, TCP: >= 1.5x memcached's mget
//   GET 64 KiB single >= 1x memcached; PUT 64 KiB >= 1.25x memcached
//   CPU us per single 64 KiB GET <= memcached's
//   GET 64 KiB / 1 MiB / 4 MiB, batches of 16: >= the store's single GETs
//                                         (bytes/s), >= 1.5x memcached's mget
// "memcached" is the faster protocol variant measured in that cell. A target
// whose rows are missing from the run (other sizes or clients chosen) is
// reported as not measured.
//
// Thread-safety: plain values.
#ifndef MOONCAKE_TOOLS_BENCH_TARGETS_H_
#define MOONCAKE_TOOLS_BENCH_TARGETS_H_

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mooncake/base/absl_compat.h"
#include "tools/bench/fill.h"
#include "tools/bench/json_writer.h"
#include "tools/bench/report.h"

namespace mooncake::bench {

struct TargetCheck {
  std::string name;
  std::optional<double> measured;  // store figure
  std::optional<double> baseline;  // same-run baseline figure
  double required = 0;             // ratio (or, for fill, utilisation) needed
  std::optional<double> achieved;  // ratio (or utilisation) reached
  bool lower_is_better = false;    // latency: achieved = store / baseline <= required
  std::string unit;
  std::string detail;  // overrides "measured vs baseline unit" in the table

  bool measured_ok() const { return achieved.has_value(); }
  bool met() const {
    if (!achieved) return false;
    return lower_is_better ? *achieved <= required : *achieved >= required;
  }
};

inline TargetCheck ThroughputTarget(const std::vector<Row>& rows, Op op, size_t size,
                                    std::string_view store, std::string_view baseline,
                                    double required, size_t batch = 1) {
  Row cell;
  cell.op = op;
  cell.value_bytes = size;
  cell.clients = 8;
  cell.batch = batch;
  TargetCheck t;
  t.name = absl::StrCat(AbslView(OpName(op)), " ", SizeName(size), " x8 ",
                        batch > 1 ? absl::StrCat("b", batch, " ") : std::string(), AbslView(store),
                        " vs ", AbslView(baseline));
  t.required = required;
  t.unit = "items/s";
  const Row* s = FindRow(rows, cell, store);
  const Row* b =
      baseline == "memcached" ? BestMemcached(rows, cell) : FindRow(rows, cell, baseline);
  if (s == nullptr || b == nullptr) return t;
  t.measured = s->items_per_s;
  t.baseline = b->items_per_s;
  t.achieved = ThroughputRatio(*s, *b);  // the paired median when it can be had
  return t;
}

// A figure of the store's single GETs (8 clients) where lower is better,
// against the best memcached variant's in the same cell; `value` reads it
// from a row (nullopt or <= 0 for the baseline: not measured).
template <typename Value>
TargetCheck LowerIsBetterTarget(const std::vector<Row>& rows, size_t size, std::string name,
                                std::string unit, Value value) {
  Row cell;
  cell.op = Op::kGet;
  cell.value_bytes = size;
  cell.clients = 8;
  cell.batch = 1;
  TargetCheck t;
  t.name = std::move(name);
  t.required = 1.0;
  t.lower_is_better = true;
  t.unit = std::move(unit);
  const Row* s = FindRow(rows, cell, "store-tcp");
  const Row* b = BestMemcached(rows, cell);
  if (s == nullptr || b == nullptr) return t;
  const std::optional<double> sv = value(*s), bv = value(*b);
  if (!sv || !bv || *bv <= 0) return t;
  t.measured = *sv;
  t.baseline = *bv;
  t.achieved = *sv / *bv;
  return t;
}

inline TargetCheck P99Target(const std::vector<Row>& rows, size_t size) {
  return LowerIsBetterTarget(rows, size,
                             absl::StrCat("get ", SizeName(size), " x8 store-tcp P99 vs memcached"),
                             "us", [](const Row& r) { return std::optional<double>(r.p99_us); });
}

inline std::vector<TargetCheck> CheckTargets(const std::vector<Row>& rows,
                                             const std::vector<FillResult>& fills) {
  constexpr size_t kMiB = size_t{1} << 20;
  std::vector<TargetCheck> out;
  for (size_t size : {kMiB, 4 * kMiB}) {
    out.push_back(ThroughputTarget(rows, Op::kGet, size, "store-tcp", "memcached", 1.25));
    out.push_back(ThroughputTarget(rows, Op::kGet, size, "store-tcp", "redis", 2.0));
    out.push_back(P99Target(rows, size));
  }
  out.push_back(ThroughputTarget(rows, Op::kGet, kMiB, "store-shm", "memcached", 3.0));
  out.push_back(ThroughputTarget(rows, Op::kPut, kMiB, "store-tcp", "memcached", 1.0));
  TargetCheck fill;
  fill.name = "fill: store used/capacity while evicting (min), no failed put";
  fill.required = 0.95;
  fill.unit = "util";
  for (const FillResult& f : fills) {
    // The DRAM-only store (store+ssd, when run, keeps more than its DRAM).
    if (!f.system.starts_with("store") || f.system == "store+ssd" || f.samples == 0) continue;
    fill.measured = f.util_min;
    fill.detail = absl::StrFormat("min %.3f median %.3f, %d failed puts", f.util_min, f.util_median,
                                  f.puts.errors);
    // A failed put fails the target whatever the utilisation.
    fill.achieved = f.puts.errors == 0 ? f.util_min : 0.0;
  }
  out.push_back(fill);
  return out;
}

// The store's batches of `batch` GETs against its single GETs, same size, in bytes/s.
inline TargetCheck BatchVsSingleTarget(const std::vector<Row>& rows, size_t size, size_t batch) {
  Row cell;
  cell.op = Op::kGet;
  cell.value_bytes = size;
  cell.clients = 8;
  cell.batch = batch;
  Row single = cell;
  single.batch = 1;
  TargetCheck t;
  t.name = absl::StrCat("get ", SizeName(size), " x8 store-tcp b", batch, " vs b1");
  t.required = 1.0;
  t.unit = "GB/s";
  const Row* s = FindRow(rows, cell, "store-tcp");
  const Row* b = FindRow(rows, single, "store-tcp");
  if (s == nullptr || b == nullptr || b->gb_per_s <= 0) return t;
  t.measured = s->gb_per_s;
  t.baseline = b->gb_per_s;
  t.achieved = s->gb_per_s / b->gb_per_s;
  return t;
}

// CPU per item (server + clients) of the store's single GETs against memcached's.
inline TargetCheck CpuPerGetTarget(const std::vector<Row>& rows, size_t size) {
  return LowerIsBetterTarget(
      rows, size, absl::StrCat("get ", SizeName(size), " x8 store-tcp CPU us/item vs memcached"),
      "us", [](const Row& r) { return r.cpu_us_per_item; });
}

inline std::vector<TargetCheck> CheckSmallObjectTargets(const std::vector<Row>& rows) {
  constexpr size_t kKiB = size_t{1} << 10, kMiB = size_t{1} << 20;
  std::vector<TargetCheck> out;
  out.push_back(ThroughputTarget(rows, Op::kGet, 64 * kKiB, "store-tcp", "memcached", 1.5, 16));
  out.push_back(ThroughputTarget(rows, Op::kGet, 64 * kKiB, "store-tcp", "memcached", 1.0));
  out.push_back(ThroughputTarget(rows, Op::kPut, 64 * kKiB, "store-tcp", "memcached", 1.25));
  out.push_back(CpuPerGetTarget(rows, 64 * kKiB));
  for (size_t size : {64 * kKiB, kMiB, 4 * kMiB}) {
    out.push_back(BatchVsSingleTarget(rows, size, 16));
    if (size != 64 * kKiB) {
      out.push_back(ThroughputTarget(rows, Op::kGet, size, "store-tcp", "memcached", 1.5, 16));
    }
  }
  return out;
}

inline void PrintTargets(std::FILE* out, const std::vector<TargetCheck>& targets) {
  for (const TargetCheck& t : targets) {
    const std::string figures =
        !t.detail.empty() ? t.detail
        : t.measured && t.baseline
            ? absl::StrFormat("%.4g vs %.4g %s", *t.measured, *t.baseline, t.unit)
            : std::string("-");
    const std::string got = t.achieved ? absl::StrFormat("%.3f", *t.achieved) : std::string("-");
    std::fprintf(out, "%-58s %-32s %7s %s %-5.2f  %s\n", t.name.c_str(), figures.c_str(),
                 got.c_str(), t.lower_is_better ? "<=" : ">=", t.required,
                 !t.measured_ok() ? "NOT MEASURED" : (t.met() ? "met" : "MISSED"));
  }
}

inline void WriteTargetJson(JsonWriter& w, const TargetCheck& t) {
  w.BeginObject();
  w.Field("name", t.name);
  w.Key("measured");
  t.measured ? w.Double(*t.measured) : w.Null();
  w.Key("baseline");
  t.baseline ? w.Double(*t.baseline) : w.Null();
  w.Key("achieved");
  t.achieved ? w.Double(*t.achieved) : w.Null();
  w.Field("required", t.required);
  w.Field("lower_is_better", t.lower_is_better);
  w.Field("met", t.met());
  w.EndObject();
}

}  // namespace mooncake::bench

#endif  // MOONCAKE_TOOLS_BENCH_TARGETS_H_
