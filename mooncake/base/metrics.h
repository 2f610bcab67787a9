// MetricsRegistry: counters, gauges and latency histograms with labels,
// rendered in the Prometheus text exposition format (version 0.0.4).
//
//   MetricsRegistry registry;
//   ASSIGN_OR_RETURN(Counter* puts, registry.GetCounter(
//       "mooncake_puts_total", "Objects put.", {{"tenant", "a"}}));
//   puts->Increment();
//   std::string text = registry.RenderPrometheus();  // serve at /metrics
//
// A metric family is a name with one help text, one type and one set of label
// names; each distinct set of label values is a series. Get* returns the
// series, creating it on first use; the pointer stays valid for the
// registry's lifetime, so hot paths look it up once and keep it. Errors
// (InvalidArgument): a bad metric or label name, a name reused with another
// type, or a label-name set that differs from the family's.
//
// Histograms are rendered as Prometheus histograms: cumulative _bucket{le="B"}
// series for the family's bounds (by default kLatencyBoundsSeconds, 10 us to
// 10 s) and +Inf, then _sum and _count; values are divided by the family's
// `divisor` (record nanoseconds, pass divisor 1e9, name the family *_seconds).
// So a scraper can compute recent quantiles (histogram_quantile over rate())
// and add series up across processes. The log-linear histogram underneath has
// 3776 buckets; a bound's count leaves out only the one fine bucket that
// straddles it (values within 0.79% of the bound).
//
// Output is deterministic: families sorted by name, series by label values.
//
// Thread-safety: every method may be called concurrently. Registration and
// rendering take a mutex; updates to a Counter, Gauge or LatencyHistogram are
// lock-free atomics.
#ifndef MOONCAKE_BASE_METRICS_H_
#define MOONCAKE_BASE_METRICS_H_

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/histogram.h"

namespace mooncake {

// Label name/value pairs. Order does not matter; names must be unique.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void Increment(uint64_t n = 1) {
    // relaxed: a counter publishes nothing but itself.
    value_.fetch_add(n, std::memory_order_relaxed);
  }
  uint64_t Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

namespace base_internal {

inline bool IsValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

inline bool IsValidLabelName(std::string_view name) {
  if (name.empty() || name.starts_with("__")) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// Label values escape backslash, double quote and newline; HELP text escapes
// backslash and newline (exposition format 0.0.4).
inline std::string EscapeText(std::string_view s, bool quote) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

// Integers print exactly; other values in the shortest form that reads back
// as the same double.
inline std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::trunc(v) && std::fabs(v) < 9007199254740992.0) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round trip
  return std::string(buf, end);
}

}  // namespace base_internal

class MetricsRegistry {
 public:
  enum class Type { kCounter, kGauge, kHistogram };

  // Default histogram bounds, in the rendered unit (seconds for a divisor of 1e9).
  static constexpr double kLatencyBoundsSeconds[] = {
      0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
      0.025,   0.05,     0.1,     0.25,   0.5,     1,      2.5,   5,      10};

  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  absl::StatusOr<Counter*> GetCounter(std::string_view name, std::string_view help,
                                      const MetricLabels& labels = {}) {
    return GetSeries<Counter>(name, help, labels, Type::kCounter, 1.0);
  }

  absl::StatusOr<Gauge*> GetGauge(std::string_view name, std::string_view help,
                                  const MetricLabels& labels = {}) {
    return GetSeries<Gauge>(name, help, labels, Type::kGauge, 1.0);
  }

  // `divisor` divides the rendered bounds' values and the sum (e.g. 1e9 to render
  // nanoseconds as seconds); `bounds` are the buckets' upper bounds in the rendered unit,
  // strictly increasing and positive (empty: kLatencyBoundsSeconds). The first
  // registration fixes both. REQUIRES: divisor > 0.
  absl::StatusOr<LatencyHistogram*> GetHistogram(std::string_view name, std::string_view help,
                                                 const MetricLabels& labels = {},
                                                 double divisor = 1.0,
                                                 std::vector<double> bounds = {}) {
    MC_ASSERT(divisor > 0, "histogram divisor must be positive");
    if (bounds.empty()) {
      bounds.assign(std::begin(kLatencyBoundsSeconds), std::end(kLatencyBoundsSeconds));
    }
    for (size_t i = 0; i < bounds.size(); ++i) {
      if (!(bounds[i] > 0) || !std::isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "histogram ", AbslView(name), ": bounds must be finite, positive and increasing"));
      }
    }
    return GetSeries<LatencyHistogram>(name, help, labels, Type::kHistogram, divisor,
                                       std::move(bounds));
  }

  // Drops one series (a departed worker's, an unmounted segment's), so a
  // long-lived process does not keep a series per peer it ever saw. Returns
  // whether it existed. The family stays (its HELP/TYPE keep rendering).
  // REQUIRES: nobody uses a pointer to that series any more.
  bool RemoveSeries(std::string_view name, const MetricLabels& labels) {
    MetricLabels sorted = labels;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::string> values;
    values.reserve(sorted.size());
    for (const auto& [k, v] : sorted) values.push_back(v);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = families_.find(std::string(name));
    if (it == families_.end()) return false;
    auto sit = it->second.series.find(values);
    if (sit == it->second.series.end() || sit->second.labels != sorted) return false;
    it->second.series.erase(sit);
    return true;
  }

  std::string RenderPrometheus() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (const auto& [name, family] : families_) {
      absl::StrAppend(&out, "# HELP ", name, " ", base_internal::EscapeText(family.help, false),
                      "\n# TYPE ", name, " ", TypeName(family.type), "\n");
      for (const auto& [key, series] : family.series) {
        RenderSeries(name, family, series, &out);
      }
    }
    return out;
  }

 private:
  using Metric = std::variant<std::unique_ptr<Counter>, std::unique_ptr<Gauge>,
                              std::unique_ptr<LatencyHistogram>>;

  struct Series {
    MetricLabels labels;  // sorted by name
    Metric metric;
  };

  struct Family {
    std::string help;
    Type type;
    double divisor;
    std::vector<double> bounds;            // histograms: the le bounds, in the rendered unit
    std::vector<std::string> label_names;  // sorted
    std::map<std::vector<std::string>, Series> series;  // key: label values
  };

  static const char* TypeName(Type t) {
    switch (t) {
      case Type::kCounter:
        return "counter";
      case Type::kGauge:
        return "gauge";
      case Type::kHistogram:
        return "histogram";
    }
    return "untyped";
  }

  template <typename M>
  absl::StatusOr<M*> GetSeries(std::string_view name, std::string_view help,
                               const MetricLabels& labels, Type type, double divisor,
                               std::vector<double> bounds = {}) {
    if (!base_internal::IsValidMetricName(name)) {
      return absl::InvalidArgumentError(absl::StrCat("invalid metric name \"", AbslView(name),
                                                     "\": use [a-zA-Z_:][a-zA-Z0-9_:]*"));
    }
    MetricLabels sorted = labels;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::string> names;
    std::vector<std::string> values;
    for (size_t i = 0; i < sorted.size(); ++i) {
      const std::string& label = sorted[i].first;
      if (!base_internal::IsValidLabelName(label) || label == "le") {
        return absl::InvalidArgumentError(
            absl::StrCat("invalid label name \"", label, "\" on metric ", AbslView(name)));
      }
      if (i > 0 && sorted[i - 1].first == label) {
        return absl::InvalidArgumentError(
            absl::StrCat("duplicate label \"", label, "\" on metric ", AbslView(name)));
      }
      names.push_back(label);
      values.push_back(sorted[i].second);
    }

    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = families_.try_emplace(std::string(name));
    Family& family = it->second;
    if (inserted) {
      family.help = std::string(help);
      family.type = type;
      family.divisor = divisor;
      family.bounds = std::move(bounds);
      family.label_names = names;
    } else if (family.type != type) {
      return absl::InvalidArgumentError(absl::StrCat("metric ", AbslView(name), " is already a ",
                                                     TypeName(family.type), ", not a ",
                                                     TypeName(type)));
    } else if (family.label_names != names) {
      return absl::InvalidArgumentError(
          absl::StrCat("metric ", AbslView(name), " was registered with other label names"));
    }
    auto [sit, created] = family.series.try_emplace(values);
    if (created) {
      sit->second.labels = std::move(sorted);
      sit->second.metric = std::make_unique<M>();
    }
    return std::get<std::unique_ptr<M>>(sit->second.metric).get();
  }

  static std::string LabelText(const MetricLabels& labels, const char* extra_name = nullptr,
                               const char* extra_value = nullptr) {
    if (labels.empty() && extra_name == nullptr) return "";
    std::string out = "{";
    bool first = true;
    for (const auto& [k, v] : labels) {
      absl::StrAppend(&out, first ? "" : ",", k, "=\"", base_internal::EscapeText(v, true), "\"");
      first = false;
    }
    if (extra_name != nullptr) {
      absl::StrAppend(&out, first ? "" : ",", extra_name, "=\"", extra_value, "\"");
    }
    out += "}";
    return out;
  }

  static void RenderSeries(const std::string& name, const Family& family, const Series& series,
                           std::string* out) {
    using base_internal::FormatValue;
    if (const auto* c = std::get_if<std::unique_ptr<Counter>>(&series.metric)) {
      absl::StrAppend(out, name, LabelText(series.labels), " ", (*c)->Value(), "\n");
    } else if (const auto* g = std::get_if<std::unique_ptr<Gauge>>(&series.metric)) {
      absl::StrAppend(out, name, LabelText(series.labels), " ", FormatValue((*g)->Value()), "\n");
    } else {
      const LatencyHistogram& h = *std::get<std::unique_ptr<LatencyHistogram>>(series.metric);
      // Writers update a bucket before the count: read the count first, so that +Inf (the
      // larger of the two) is never below a finite bucket in a scrape racing writers.
      uint64_t total = h.Count();
      std::vector<uint64_t> raw(family.bounds.size()), counts(family.bounds.size());
      for (size_t k = 0; k < raw.size(); ++k) {
        const double v = std::floor(family.bounds[k] * family.divisor);
        raw[k] = v >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(v);
      }
      h.CountsAtOrBelow(raw, counts);
      for (size_t k = 0; k < raw.size(); ++k) {
        const std::string le = absl::StrCat(family.bounds[k]);  // %g, as Go's clients write le
        absl::StrAppend(out, name, "_bucket", LabelText(series.labels, "le", le.c_str()), " ",
                        counts[k], "\n");
      }
      if (!counts.empty()) total = std::max(total, counts.back());
      absl::StrAppend(out, name, "_bucket", LabelText(series.labels, "le", "+Inf"), " ", total,
                      "\n");
      absl::StrAppend(out, name, "_sum", LabelText(series.labels), " ",
                      FormatValue(static_cast<double>(h.Sum()) / family.divisor), "\n");
      absl::StrAppend(out, name, "_count", LabelText(series.labels), " ", total, "\n");
    }
  }

  // std::mutex rather than absl::Mutex: Debian's abseil is not built with
  // ThreadSanitizer, which then cannot see absl::Mutex and reports false races.
  mutable std::mutex mu_;
  std::map<std::string, Family> families_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake

#endif  // MOONCAKE_BASE_METRICS_H_
