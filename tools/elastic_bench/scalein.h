// elastic_bench's scalein scenario: does a worker leaving with a drain keep
// the pool's prefix hits, and what does the drain cost readers?
//
// Each variant starts a fresh 1 master + 4 worker cluster sized to
// `pool_tokens` worth of blocks (eviction pressure), replays the first `warm`
// trace requests as a prefix cache (BatchExists the chain; the leading
// existing blocks are hits, read back and checked; the missing blocks are
// put), then:
//   stayed   nothing leaves
//   drain    POST /drain?deadline_ms=N on worker 0 (copies its replicas away,
//            answers the drain status, unmounts), then SIGTERM
//   nodrain  SIGTERM on worker 0 without --drain_deadline_ms (unmounts at once)
//   three    a reference: a pool of 3 workers from the start (the capacity the
//            others have after the removal), nothing removed
// and replays the next `next` requests; their block hit rate (hit blocks /
// requested blocks, a request stops at its first miss) is the figure. In the
// drain variant a reader thread (its own client, metadata cache off so every
// GET asks the master) GETs `probe_keys` objects in a loop from `probe_ms`
// before the drain to its end; its latencies are split by phase.
//
// Thread-safety: RunScalein is called by one thread (it starts its own).
#ifndef MOONCAKE_TOOLS_ELASTIC_BENCH_SCALEIN_H_
#define MOONCAKE_TOOLS_ELASTIC_BENCH_SCALEIN_H_

#include <signal.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/index/mooncake_trace.h"
#include "tools/bench/text_query.h"
#include "tools/elastic_bench/cluster.h"
#include "tools/elastic_bench/common.h"

namespace mooncake::elastic_bench {

struct ScaleinConfig {
  std::string trace;
  int warm = 6000;
  int next = 2000;
  int64_t block_bytes = 16384;
  int64_t pool_tokens = 6'000'000;
  int64_t block_tokens = 512;
  int64_t drain_deadline_ms = 30'000;
  int64_t drain_bandwidth = 0;  // bytes/s; 0: the master's default
  double drain_pace = -1;       // the master's --drain_pace; negative: its default
  bool cache = true;            // the replaying client's metadata cache
  int64_t report_ms = -1;       // its cached_read_report_ms (negative: the default)
  int probe_keys = 64;
  int64_t probe_ms = 24'000;  // as long as the drain: P99s of equal windows
};

struct ReplayCounts {
  uint64_t requested = 0;   // blocks asked for
  uint64_t hits = 0;        // leading blocks found and read back intact
  uint64_t corrupt = 0;     // reads that returned other bytes (must be 0)
  uint64_t put_failed = 0;  // puts refused (not ALREADY_EXISTS)
  double HitRate() const { return requested > 0 ? double(hits) / double(requested) : 0; }
};

struct ScaleinVariant {
  std::string name;
  ReplayCounts warm, next;
  // drain only
  std::string drain_json;
  double drain_ms = NAN;  // POST /drain sent to answered
  int64_t objects_moved = -1, objects_total = -1, bytes_moved = -1, objects_left = -1;
  std::vector<double> get_before_us, get_drain_us;
  uint64_t probe_failed = 0;
  double remove_ms = NAN;  // removal started to the master counting 3 workers
  absl::Time remove_start;
};

// Replays trace[begin, end) against `c` as a prefix cache.
inline absl::Status ReplayRange(Client& c, const std::vector<index::TraceRequest>& trace,
                                size_t begin, size_t end, int64_t block_bytes, ReplayCounts& out) {
  const size_t bb = static_cast<size_t>(block_bytes);
  std::vector<std::string> keys;
  std::vector<std::string_view> views;
  std::vector<char> buf, vals;
  std::string scratch;
  for (size_t r = begin; r < end && r < trace.size(); ++r) {
    const std::vector<uint64_t>& ids = trace[r].hash_ids;
    if (ids.empty()) continue;
    keys.clear();
    views.clear();
    for (uint64_t id : ids) keys.push_back(absl::StrCat("b", id));
    for (const std::string& k : keys) views.push_back(k);
    ASSIGN_OR_RETURN(std::vector<bool> exists, c.BatchExists(views));
    size_t lead = 0;
    while (lead < ids.size() && exists[lead]) ++lead;
    size_t hits = 0;
    if (lead > 0) {
      buf.resize(lead * bb);
      std::vector<client::GetIntoItem> items(lead);
      for (size_t i = 0; i < lead; ++i) items[i] = {views[i], buf.data() + i * bb, bb};
      std::vector<absl::StatusOr<size_t>> got = c.BatchGetInto(items);
      for (; hits < lead && got[hits].ok(); ++hits) {
        if (*got[hits] != bb || !CheckValue(ids[hits], buf.data() + hits * bb, bb, scratch)) {
          ++out.corrupt;
          break;
        }
      }
    }
    out.requested += ids.size();
    out.hits += hits;
    std::vector<client::PutItem> puts;
    vals.resize(ids.size() * bb);
    for (size_t i = hits; i < ids.size(); ++i) {
      if (i >= lead && exists[i]) continue;
      FillValue(ids[i], vals.data() + i * bb, bb);
      puts.push_back({views[i], std::string_view(vals.data() + i * bb, bb)});
    }
    if (puts.empty()) continue;
    for (const absl::Status& s : c.BatchPut(puts)) {
      if (!s.ok() && !absl::IsAlreadyExists(s)) ++out.put_failed;
    }
  }
  return absl::OkStatus();
}

// GETs the probe objects in a loop until `stop`, latency by `phase` (0 before
// the drain, 1 during it; 2: not recorded).
class ProbeReader {
 public:
  ProbeReader(Client& c, int keys, int64_t bytes) : client_(c), keys_(keys), bytes_(bytes) {
    MC_ASSERT(keys > 0 && bytes > 0, "probe shape");
  }
  ~ProbeReader() { Stop(); }

  static uint64_t ProbeId(int i) { return (uint64_t{1} << 40) + static_cast<uint64_t>(i); }
  static std::string ProbeKey(int i) { return absl::StrCat("probe", i); }

  void Start() {
    thread_ = std::thread([this] { Loop(); });
  }
  void SetPhase(int p) { phase_.store(p, std::memory_order_relaxed); }  // a label, no data
  void Stop() {
    stop_.store(true, std::memory_order_relaxed);
    if (thread_.joinable()) thread_.join();
  }
  std::vector<double> lat_us[2];
  uint64_t failed = 0;

 private:
  void Loop() {
    std::vector<char> buf(static_cast<size_t>(bytes_));
    std::string scratch;
    for (int i = 0; !stop_.load(std::memory_order_relaxed); i = (i + 1) % keys_) {
      const int phase = phase_.load(std::memory_order_relaxed);
      const absl::Time t0 = absl::Now();
      absl::StatusOr<size_t> n = client_.GetInto(ProbeKey(i), buf.data(), buf.size());
      const double us = absl::ToDoubleMicroseconds(absl::Now() - t0);
      if (!n.ok() || !CheckValue(ProbeId(i), buf.data(), *n, scratch)) {
        ++failed;
        continue;
      }
      if (phase < 2) lat_us[phase].push_back(us);
    }
  }

  Client& client_;
  const int keys_;
  const int64_t bytes_;
  std::atomic<int> phase_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Worker 0 leaves with a drain: POST /drain, then SIGTERM.
// The master's flags a scalein config asks for.
inline std::vector<std::string> MasterFlags(const ScaleinConfig& s) {
  if (s.drain_pace < 0) return {};
  return {absl::StrCat("--drain_pace=", s.drain_pace)};
}

inline absl::Status DrainWorker0(StoreCluster& cl, Client& probe_client, const ScaleinConfig& s,
                                 ScaleinVariant& v) {
  std::vector<char> val(static_cast<size_t>(s.block_bytes));
  for (int i = 0; i < s.probe_keys; ++i) {
    FillValue(ProbeReader::ProbeId(i), val.data(), val.size());
    const absl::Status st =
        probe_client.Put(ProbeReader::ProbeKey(i), std::string_view(val.data(), val.size()));
    if (!st.ok() && !absl::IsAlreadyExists(st)) return st;
  }
  ProbeReader reader(probe_client, s.probe_keys, s.block_bytes);
  reader.Start();
  absl::SleepFor(absl::Milliseconds(s.probe_ms));
  reader.SetPhase(1);
  const absl::Time t0 = absl::Now();
  v.remove_start = t0;
  absl::StatusOr<std::string> answer = bench::HttpCall(
      "POST", cl.worker_http(0),
      absl::StrCat("/drain?deadline_ms=", s.drain_deadline_ms,
                   s.drain_bandwidth > 0 ? absl::StrCat("&bandwidth=", s.drain_bandwidth) : ""),
      static_cast<int>(s.drain_deadline_ms + 15'000));
  v.drain_ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
  reader.SetPhase(2);
  reader.Stop();
  RETURN_IF_ERROR(answer.status());
  v.drain_json = *answer;
  while (!v.drain_json.empty() && v.drain_json.back() == '\n') v.drain_json.pop_back();
  v.objects_moved = bench::JsonIntField(*answer, "objects_moved").value_or(-1);
  v.objects_total = bench::JsonIntField(*answer, "objects_total").value_or(-1);
  v.objects_left = bench::JsonIntField(*answer, "objects_left").value_or(-1);
  v.bytes_moved = bench::JsonIntField(*answer, "bytes_moved").value_or(-1);
  v.get_before_us = std::move(reader.lat_us[0]);
  v.get_drain_us = std::move(reader.lat_us[1]);
  v.probe_failed = reader.failed;
  cl.worker(0).Signal(SIGTERM);
  if (!cl.worker(0).WaitExit(absl::Seconds(30))) return absl::DeadlineExceededError("worker 0");
  return absl::OkStatus();
}

inline absl::StatusOr<ScaleinVariant> RunScaleinVariant(
    const Env& env, const ScaleinConfig& s, const std::vector<index::TraceRequest>& trace,
    const std::string& name) {
  ScaleinVariant v;
  v.name = name;
  const int64_t blocks = s.pool_tokens / s.block_tokens;
  const int64_t segment = blocks * s.block_bytes / kWorkers;
  ASSIGN_OR_RETURN(auto cl, StoreCluster::Start({.store_binary = env.store_binary,
                                                 .dir = env.dir,
                                                 .name = absl::StrCat("scalein_", name),
                                                 .workers = name == "three" ? 3 : kWorkers,
                                                 .segment_bytes = absl::StrCat(segment),
                                                 .master_flags = MasterFlags(s)}));
  ASSIGN_OR_RETURN(auto conn, Connect(cl->master_rpc(), s.cache, s.report_ms));
  const size_t warm = static_cast<size_t>(s.warm);
  RETURN_IF_ERROR(ReplayRange(*conn->client, trace, 0, warm, s.block_bytes, v.warm));
  v.remove_start = absl::Now();
  if (name == "drain") {
    ASSIGN_OR_RETURN(auto probe, Connect(cl->master_rpc(), /*cache=*/false));
    RETURN_IF_ERROR(DrainWorker0(*cl, *probe->client, s, v));
  } else if (name == "nodrain") {
    cl->worker(0).Signal(SIGTERM);
    if (!cl->worker(0).WaitExit(absl::Seconds(30))) return absl::DeadlineExceededError("worker 0");
  }
  if (name == "drain" || name == "nodrain") {
    RETURN_IF_ERROR(cl->WaitWorkers(kWorkers - 1, absl::Seconds(30)));
    v.remove_ms = absl::ToDoubleMilliseconds(absl::Now() - v.remove_start);
  }
  RETURN_IF_ERROR(ReplayRange(*conn->client, trace, warm, warm + static_cast<size_t>(s.next),
                              s.block_bytes, v.next));
  return v;
}

struct ScaleinResult {
  std::vector<ScaleinVariant> variants;  // stayed, drain, nodrain, three
  bool hit_met = false, p99_met = false;
};

inline absl::StatusOr<ScaleinResult> RunScalein(const Env& env, const ScaleinConfig& s,
                                                JsonFields& json) {
  ASSIGN_OR_RETURN(std::vector<index::TraceRequest> trace, index::ReadTraceFile(s.trace));
  if (trace.size() < static_cast<size_t>(s.warm + s.next)) {
    return absl::InvalidArgumentError(absl::StrCat("trace has ", trace.size(), " requests"));
  }
  ScaleinResult r;
  for (const char* name : {"stayed", "drain", "nodrain", "three"}) {
    std::fprintf(stderr, "scalein: variant %s...\n", name);
    ASSIGN_OR_RETURN(ScaleinVariant v, RunScaleinVariant(env, s, trace, name));
    r.variants.push_back(std::move(v));
  }
  const ScaleinVariant &st = r.variants[0], &dr = r.variants[1], &nd = r.variants[2];
  const double p99_before = Percentile(dr.get_before_us, 0.99);
  const double p99_drain = Percentile(dr.get_drain_us, 0.99);
  r.hit_met = dr.next.HitRate() >= 0.9 * st.next.HitRate();
  r.p99_met = p99_drain <= 1.2 * p99_before;
  std::printf(
      "\n== scalein: 1 master + 4 workers, pool %lld tokens (%lld blocks of %lld B), "
      "warm %d requests, then %d ==\n",
      (long long)s.pool_tokens, (long long)(s.pool_tokens / s.block_tokens),
      (long long)s.block_bytes, s.warm, s.next);
  std::printf("%-8s %12s %12s %10s %8s %10s %12s\n", "variant", "warm_hit", "next_hit", "vs_stayed",
              "corrupt", "put_fail", "remove_ms");
  for (const ScaleinVariant& v : r.variants) {
    std::printf("%-8s %12.4f %12.4f %10.3f %8llu %10llu %12.0f\n", v.name.c_str(), v.warm.HitRate(),
                v.next.HitRate(), Ratio(v.next.HitRate(), st.next.HitRate()),
                (unsigned long long)(v.warm.corrupt + v.next.corrupt),
                (unsigned long long)(v.warm.put_failed + v.next.put_failed), v.remove_ms);
  }
  std::printf("drain: %.0f ms, %lld of %lld objects moved, %lld bytes moved, %lld left\n",
              dr.drain_ms, (long long)dr.objects_moved, (long long)dr.objects_total,
              (long long)dr.bytes_moved, (long long)dr.objects_left);
  std::printf("drain status: %s\n", dr.drain_json.c_str());
  std::printf(
      "probe GET (16 KiB, cache off) before drain: n=%zu P50 %.0f us P99 %.0f us; "
      "during drain: n=%zu P50 %.0f us P99 %.0f us; P99 ratio %.3f; failed %llu\n",
      dr.get_before_us.size(), Percentile(dr.get_before_us, 0.5), p99_before,
      dr.get_drain_us.size(), Percentile(dr.get_drain_us, 0.5), p99_drain,
      Ratio(p99_drain, p99_before), (unsigned long long)dr.probe_failed);
  std::printf(
      "(worker 0 held a quarter of the pool: after it leaves, 3 workers' capacity "
      "holds what 4 held, so drain and nodrain also lose what no longer fits; 'three' is a "
      "pool of 3 workers from the start)\n");
  std::printf("target hit(drain) >= 0.9 x hit(stayed): %.3f -> %s\n",
              Ratio(dr.next.HitRate(), st.next.HitRate()), Met(r.hit_met));
  std::printf("target GET P99 during drain <= 1.2 x before: %.3f -> %s\n",
              Ratio(p99_drain, p99_before), Met(r.p99_met));
  for (const ScaleinVariant& v : r.variants) {
    json.Num(absl::StrCat(v.name, "_next_hit_rate"), v.next.HitRate());
    json.Num(absl::StrCat(v.name, "_warm_hit_rate"), v.warm.HitRate());
    json.Num(absl::StrCat(v.name, "_corrupt"), double(v.warm.corrupt + v.next.corrupt));
  }
  json.Num("drain_vs_stayed", Ratio(dr.next.HitRate(), st.next.HitRate()));
  json.Num("nodrain_vs_stayed", Ratio(nd.next.HitRate(), st.next.HitRate()));
  json.Num("three_vs_stayed", Ratio(r.variants[3].next.HitRate(), st.next.HitRate()));
  json.Num("drain_ms", dr.drain_ms);
  json.Num("objects_moved", double(dr.objects_moved));
  json.Num("bytes_moved", double(dr.bytes_moved));
  json.Num("get_p99_before_us", p99_before);
  json.Num("get_p99_drain_us", p99_drain);
  json.Num("probe_failed", double(dr.probe_failed));
  json.Bool("hit_target_met", r.hit_met);
  json.Bool("p99_target_met", r.p99_met);
  return r;
}

}  // namespace mooncake::elastic_bench

#endif  // MOONCAKE_TOOLS_ELASTIC_BENCH_SCALEIN_H_
