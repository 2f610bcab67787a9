// elastic_bench's skew scenario: do hot-object replicas spread a Zipf read
// load over the workers' links?
//
// Each worker runs in its own network namespace behind a veth whose worker
// side sends through `tc tbf` at `link_rate` (NetnsHosts), so a worker's
// link, not the 2-core machine's CPU, bounds what it serves. For each variant
// (hot replicas off: --hot_reads=0; on: --hot_reads=N) a fresh cluster gets
// `objects` objects of `object_bytes`, then `threads` threads (one client
// each, metadata cache per `cache`) each GET `batch` Zipf(`zipf`)-chosen
// objects per BatchGetInto for `warmup_s` unmeasured and `seconds` measured
// (P50/P99 are of those calls). Each object's first 8 KiB are checked against
// its bytes. The links' byte counters give each worker's share of what was
// sent while measuring: the busiest link's share bounds the throughput.
//
// Thread-safety: RunSkew is called by one thread (it starts its own).
#ifndef MOONCAKE_TOOLS_ELASTIC_BENCH_SKEW_H_
#define MOONCAKE_TOOLS_ELASTIC_BENCH_SKEW_H_

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/status_macros.h"
#include "tools/bench/text_query.h"
#include "tools/elastic_bench/cluster.h"
#include "tools/elastic_bench/common.h"
#include "tools/elastic_bench/netns.h"

namespace mooncake::elastic_bench {

struct SkewConfig {
  int objects = 256;
  int64_t object_bytes = 1 << 20;
  int threads = 8;
  int batch = 4;  // objects per BatchGetInto (an engine loads a request's blocks together)
  double zipf = 1.1;
  double seconds = 10;
  double warmup_s = 8;
  int hot_reads = 4;
  int64_t hot_window_ms = 1000;
  int hot_max_replicas = 4;  // one on every worker
  double hot_max_fraction = 0.5;
  bool cache = true;
  std::string link_rate = "400mbit";
};

struct SkewRun {
  double gets_per_s = 0, gb_per_s = 0, p50_us = NAN, p99_us = NAN;
  uint64_t failed = 0;
  double hot_extra_bytes = 0, hot_copies_ok = 0, hot_copies_failed = 0;
  // Each worker's share of the bytes sent over the links while measuring
  // (its link's counter); the largest bounds what the pool can serve.
  std::vector<double> link_share;
  // What the links carried while measuring (frames, headers included) over
  // what `links x link_rate` can: how busy they were on average.
  double link_use = NAN;
  // Of the bytes on the links, the share that was object bytes (the rest:
  // headers, requests of other kinds).
  double payload_share = NAN;
  double MaxShare() const {
    return link_share.empty() ? NAN : *std::max_element(link_share.begin(), link_share.end());
  }
};

inline constexpr size_t kSkewCheckBytes = 8192;

// A tc rate ("400mbit", "1gbit", "800kbit", "5000bit") in bytes per second;
// nullopt if it is not one of those forms.
inline std::optional<double> TcRateBytesPerSec(std::string_view rate) {
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}};
  for (const auto& [suffix, scale] : kUnits) {
    if (rate.size() <= suffix.size() || !rate.ends_with(suffix)) continue;
    double v = 0;
    if (!absl::SimpleAtod(AbslView(rate.substr(0, rate.size() - suffix.size())), &v) || !(v > 0)) {
      return std::nullopt;
    }
    return v * scale / 8;
  }
  return std::nullopt;
}

// Object ids by Zipf(s) over [0, n): the inverse of the cumulative weights.
class ZipfSampler {
 public:
  ZipfSampler(int n, double s) {
    double sum = 0;
    for (int k = 1; k <= n; ++k) cdf_.push_back(sum += 1.0 / std::pow(k, s));
    for (double& c : cdf_) c /= sum;
  }
  int Next(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return static_cast<int>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
  }

 private:
  std::vector<double> cdf_;
};

inline absl::StatusOr<SkewRun> RunSkewOnce(const Env& env, const SkewConfig& k,
                                           const NetnsHosts& hosts, bool hot, int rep) {
  const int64_t segment = 4 * k.objects * k.object_bytes / kWorkers;
  std::vector<std::string> mf = {absl::StrCat("--hot_reads=", hot ? k.hot_reads : 0)};
  if (hot) {
    mf.push_back(absl::StrCat("--hot_window_ms=", k.hot_window_ms));
    mf.push_back(absl::StrCat("--hot_max_replicas=", k.hot_max_replicas));
    mf.push_back(absl::StrCat("--hot_max_fraction=", k.hot_max_fraction));
  }
  ASSIGN_OR_RETURN(auto cl, StoreCluster::Start({.store_binary = env.store_binary,
                                                 .dir = env.dir,
                                                 .name = absl::StrCat("skew_", hot, "_", rep),
                                                 .workers = kWorkers,
                                                 .segment_bytes = absl::StrCat(segment),
                                                 .master_flags = mf,
                                                 .hosts = &hosts.hosts()}));
  std::vector<std::unique_ptr<Connection>> conns;
  for (int t = 0; t < k.threads; ++t) {
    ASSIGN_OR_RETURN(auto c, Connect(cl->master_rpc(), k.cache));
    conns.push_back(std::move(c));
  }
  std::vector<char> val(static_cast<size_t>(k.object_bytes));
  for (int i = 0; i < k.objects; ++i) {
    FillValue(static_cast<uint64_t>(i), val.data(), val.size());
    RETURN_IF_ERROR(
        conns[0]->client->Put(absl::StrCat("z", i), std::string_view(val.data(), val.size())));
  }
  const ZipfSampler zipf(k.objects, k.zipf);
  std::atomic<bool> measuring{false}, stop{false};
  std::vector<std::vector<double>> lat(k.threads);
  std::vector<uint64_t> failed(k.threads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < k.threads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(99 + t);
      const size_t ob = static_cast<size_t>(k.object_bytes);
      std::vector<char> buf(ob * static_cast<size_t>(k.batch));
      std::vector<int> ids(static_cast<size_t>(k.batch));
      std::vector<std::string> keys(ids.size());
      std::vector<client::GetIntoItem> items(ids.size());
      std::string scratch;
      while (!stop.load(std::memory_order_relaxed)) {
        for (size_t j = 0; j < ids.size(); ++j) {
          ids[j] = zipf.Next(rng);
          keys[j] = absl::StrCat("z", ids[j]);
          items[j] = {keys[j], buf.data() + j * ob, ob};
        }
        const absl::Time t0 = absl::Now();
        const std::vector<absl::StatusOr<size_t>> n = conns[t]->client->BatchGetInto(items);
        const double us = absl::ToDoubleMicroseconds(absl::Now() - t0);
        const size_t check = std::min(kSkewCheckBytes, ob);
        for (size_t j = 0; j < ids.size(); ++j) {
          if (!n[j].ok() || *n[j] != ob ||
              !CheckValue(static_cast<uint64_t>(ids[j]), buf.data() + j * ob, check, scratch)) {
            ++failed[t];
          } else if (measuring.load(std::memory_order_relaxed)) {
            lat[t].push_back(us);
          }
        }
      }
    });
  }
  absl::SleepFor(absl::Seconds(k.warmup_s));
  std::vector<int64_t> sent0(kWorkers);
  for (int w = 0; w < kWorkers; ++w) sent0[w] = hosts.SentBytes(w);
  measuring.store(true);
  const absl::Time t0 = absl::Now();
  absl::SleepFor(absl::Seconds(k.seconds));
  measuring.store(false);
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - t0);
  std::vector<double> sent(kWorkers);
  double sent_sum = 0;
  for (int w = 0; w < kWorkers; ++w) {
    sent[w] = static_cast<double>(hosts.SentBytes(w) - sent0[w]);
    sent_sum += sent[w];
  }
  stop.store(true);
  for (std::thread& t : threads) t.join();
  SkewRun r;
  if (sent_sum > 0) {
    for (double b : sent) r.link_share.push_back(b / sent_sum);
  }
  if (const std::optional<double> rate = TcRateBytesPerSec(k.link_rate); rate.has_value()) {
    r.link_use = sent_sum / elapsed / (*rate * kWorkers);
  }
  std::vector<double> all;
  for (int t = 0; t < k.threads; ++t) {
    all.insert(all.end(), lat[t].begin(), lat[t].end());
    r.failed += failed[t];
  }
  r.gets_per_s = static_cast<double>(all.size()) / elapsed;
  r.gb_per_s = r.gets_per_s * static_cast<double>(k.object_bytes) / 1e9;
  if (sent_sum > 0) r.payload_share = r.gb_per_s * 1e9 * elapsed / sent_sum;
  r.p50_us = Percentile(all, 0.5);
  r.p99_us = Percentile(all, 0.99);
  ASSIGN_OR_RETURN(std::string m, cl->MasterMetrics());
  r.hot_extra_bytes = bench::PrometheusValue(m, "mooncake_master_hot_extra_bytes").value_or(0);
  r.hot_copies_ok =
      bench::PrometheusValue(m, "mooncake_master_copies_total", {"kind=\"hot\"", "result=\"ok\""})
          .value_or(0);
  r.hot_copies_failed = bench::PrometheusValue(m, "mooncake_master_copies_total",
                                               {"kind=\"hot\"", "result=\"failed\""})
                            .value_or(0);
  return r;
}

// Prints SKIPPED (and returns false) when network namespaces are unusable.
inline absl::StatusOr<bool> RunSkew(const Env& env, const SkewConfig& k, JsonFields& json) {
  absl::StatusOr<std::unique_ptr<NetnsHosts>> hosts =
      NetnsHosts::Create(kWorkers, {.rate = k.link_rate});
  if (!hosts.ok()) {
    std::printf("\n== skew: SKIPPED: %s ==\n", std::string(hosts.status().message()).c_str());
    json.Str("skipped", std::string(hosts.status().message()));
    return false;
  }
  std::vector<SkewRun> runs[2];
  for (int rep = 0; rep < env.reps; ++rep) {
    for (int hot = 0; hot < 2; ++hot) {
      std::fprintf(stderr, "skew: rep %d hot %s...\n", rep, hot ? "on" : "off");
      ASSIGN_OR_RETURN(SkewRun r, RunSkewOnce(env, k, **hosts, hot == 1, rep));
      runs[hot].push_back(r);
    }
  }
  auto med = [&](int hot, double SkewRun::*f) {
    std::vector<double> v;
    for (const SkewRun& r : runs[hot]) v.push_back(r.*f);
    return Median(v);
  };
  std::printf(
      "\n== skew: Zipf(%.2f) GETs of %d x %lld B objects, %d threads x batches of %d, %.0f s "
      "(+%.0f s warm-up), each worker behind its own %s tbf veth, client metadata cache %s; %d "
      "rep(s), medians ==\n",
      k.zipf, k.objects, (long long)k.object_bytes, k.threads, k.batch, k.seconds, k.warmup_s,
      k.link_rate.c_str(), k.cache ? "on" : "off", env.reps);
  std::printf("%-24s %10s %8s %10s %10s %8s %14s %10s %10s %9s  %s\n", "variant", "GETs/s", "GB/s",
              "P50_us", "P99_us", "failed", "hot_extra_MB", "hot_copies", "hot_failed", "max_link",
              "link shares (last rep)");
  uint64_t failed = 0;
  for (int hot = 0; hot < 2; ++hot) {
    for (const SkewRun& r : runs[hot]) failed += r.failed;
    const std::string name =
        hot ? absl::StrCat("hot on (hot_reads=", k.hot_reads, ")") : "hot off (hot_reads=0)";
    std::vector<double> max_share;
    for (const SkewRun& r : runs[hot]) max_share.push_back(r.MaxShare());
    std::vector<std::string> shares;
    for (double x : runs[hot].back().link_share) shares.push_back(absl::StrFormat("%.3f", x));
    std::printf("%-24s %10.1f %8.3f %10.0f %10.0f %8llu %14.1f %10.0f %10.0f %9.3f  %s\n",
                name.c_str(), med(hot, &SkewRun::gets_per_s), med(hot, &SkewRun::gb_per_s),
                med(hot, &SkewRun::p50_us), med(hot, &SkewRun::p99_us),
                (unsigned long long)runs[hot].back().failed,
                med(hot, &SkewRun::hot_extra_bytes) / 1e6, med(hot, &SkewRun::hot_copies_ok),
                med(hot, &SkewRun::hot_copies_failed), Median(max_share),
                absl::StrJoin(shares, " ").c_str());
  }
  const double ratio = Ratio(med(1, &SkewRun::gets_per_s), med(0, &SkewRun::gets_per_s));
  const bool met = ratio >= 1.5 && failed == 0;
  std::printf("ratio on/off: throughput %.3f, P99 %.3f\n", ratio,
              Ratio(med(1, &SkewRun::p99_us), med(0, &SkewRun::p99_us)));
  std::vector<double> off_max;
  for (const SkewRun& r : runs[0]) off_max.push_back(r.MaxShare());
  std::printf(
      "bound: with hot replicas off the busiest link carries %.3f of the bytes; an even spread "
      "over %d links could give at most %.2fx\n",
      Median(off_max), kWorkers, Median(off_max) * kWorkers);
  // Each run's busiest link: its share of the bytes x all links' use x links.
  std::vector<double> off_busiest;
  for (const SkewRun& r : runs[0]) off_busiest.push_back(r.MaxShare() * r.link_use * kWorkers);
  std::printf(
      "links (frames over %d x %s): hot on kept them %.1f%% busy, hot off its busiest one %.1f%%; "
      "object bytes were %.1f%% of what they carried\n",
      kWorkers, k.link_rate.c_str(), 100 * med(1, &SkewRun::link_use), 100 * Median(off_busiest),
      100 * med(1, &SkewRun::payload_share));
  std::printf(
      "hot on: --hot_reads=%d --hot_max_replicas=%d; a read takes the replica whose worker has "
      "the fewest bytes in flight (client::ReadSpread)\n",
      k.hot_reads, k.hot_max_replicas);
  std::printf("target throughput(on) >= 1.5 x throughput(off), 0 failed GETs: %s\n", Met(met));
  for (int hot = 0; hot < 2; ++hot) {
    const std::string p = hot ? "on_" : "off_";
    json.Num(p + "gets_per_s", med(hot, &SkewRun::gets_per_s));
    json.Num(p + "gb_per_s", med(hot, &SkewRun::gb_per_s));
    json.Num(p + "p50_us", med(hot, &SkewRun::p50_us));
    json.Num(p + "p99_us", med(hot, &SkewRun::p99_us));
    json.Num(p + "hot_extra_bytes", med(hot, &SkewRun::hot_extra_bytes));
  }
  json.Num("failed_gets", double(failed));
  json.Num("throughput_ratio", ratio);
  json.Num("off_max_link_share", Median(off_max));
  json.Num("on_link_use", med(1, &SkewRun::link_use));
  json.Num("off_busiest_link_use", Median(off_busiest));
  json.Bool("cache", k.cache);
  json.Num("hot_max_replicas", k.hot_max_replicas);
  json.Bool("target_met", met);
  return met;
}

}  // namespace mooncake::elastic_bench

#endif  // MOONCAKE_TOOLS_ELASTIC_BENCH_SKEW_H_
