// elastic_bench's crash scenario: with replica_count 2, does a worker killed
// outright (SIGKILL) cost any read, and how long until every object has two
// replicas again?
//
// A fresh 1 master (--replicas=2, --repair_within_ms) + 4 worker cluster; N
// objects are put; reader threads (each its own client, metadata cache on)
// read random objects in a loop and check every byte; worker 1 is killed.
// The master's /metrics are polled: "declared dead" is mooncake_master_workers
// dropping to 3 (its heartbeat timeout, 10 s, is not a flag of the store
// binary); "re-replicated" is, after that, mooncake_master_repair_backlog 0
// and mooncake_master_used_bytes back to its value before the kill (every
// lost replica allocated again and committed; the same sizes allocate the
// same bytes). At the end every object is read once more by a fresh client.
//
// Thread-safety: RunCrash is called by one thread (it starts its own).
#ifndef MOONCAKE_TOOLS_ELASTIC_BENCH_CRASH_H_
#define MOONCAKE_TOOLS_ELASTIC_BENCH_CRASH_H_

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "tools/bench/text_query.h"
#include "tools/elastic_bench/cluster.h"
#include "tools/elastic_bench/common.h"

namespace mooncake::elastic_bench {

struct CrashConfig {
  int objects = 2000;
  int64_t object_bytes = 65536;
  int readers = 2;
  int64_t repair_within_ms = 10'000;
  int64_t timeout_ms = 90'000;
};

struct CrashRun {
  uint64_t reads = 0, failed = 0, final_unreadable = 0;
  std::string first_failure;
  double dead_ms = NAN;      // kill to the master counting 3 workers
  double repaired_ms = NAN;  // declared dead to re-replicated
  double used_before = 0, used_dead = 0, used_after = 0, repair_copies_ok = 0,
         repair_copies_failed = 0;
  bool repaired = false;
};

class VerifyingReaders {
 public:
  VerifyingReaders(const std::string& master, const CrashConfig& c) : master_(master), c_(c) {}
  ~VerifyingReaders() { Stop(); }

  absl::Status Start() {
    for (int t = 0; t < c_.readers; ++t) {
      ASSIGN_OR_RETURN(auto conn, Connect(master_, /*cache=*/true));
      conns_.push_back(std::move(conn));
    }
    for (int t = 0; t < c_.readers; ++t) {
      threads_.emplace_back([this, t] { Loop(*conns_[t]->client, t); });
    }
    return absl::OkStatus();
  }
  void Stop() {
    stop_.store(true, std::memory_order_relaxed);
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }
  uint64_t reads() const { return reads_.load(); }
  uint64_t failed() const { return failed_.load(); }
  std::string first_failure() {
    MutexLock l(&mu_);
    return first_failure_;
  }

 private:
  void Loop(Client& c, int t) {
    std::mt19937_64 rng(1234 + t);
    std::vector<char> buf(static_cast<size_t>(c_.object_bytes));
    std::string scratch;
    while (!stop_.load(std::memory_order_relaxed)) {
      const uint64_t id = rng() % static_cast<uint64_t>(c_.objects);
      absl::StatusOr<size_t> n = c.GetInto(absl::StrCat("c", id), buf.data(), buf.size());
      reads_.fetch_add(1, std::memory_order_relaxed);
      if (n.ok() && *n == buf.size() && CheckValue(id, buf.data(), *n, scratch)) continue;
      failed_.fetch_add(1, std::memory_order_relaxed);
      MutexLock l(&mu_);
      if (first_failure_.empty()) {
        first_failure_ =
            absl::StrCat("c", id, ": ", n.ok() ? "wrong bytes" : n.status().ToString());
      }
    }
  }

  const std::string master_;
  const CrashConfig c_;
  std::vector<std::unique_ptr<Connection>> conns_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> reads_{0}, failed_{0};
  Mutex mu_;
  std::string first_failure_ ABSL_GUARDED_BY(mu_);
};

inline absl::Status PutCrashObjects(Client& c, const CrashConfig& k) {
  const size_t bytes = static_cast<size_t>(k.object_bytes);
  constexpr int kBatch = 64;
  std::vector<char> vals(kBatch * bytes);
  std::vector<std::string> keys(kBatch);
  for (int begin = 0; begin < k.objects; begin += kBatch) {
    std::vector<client::PutItem> items;
    for (int i = begin; i < std::min(k.objects, begin + kBatch); ++i) {
      char* v = vals.data() + static_cast<size_t>(i - begin) * bytes;
      FillValue(static_cast<uint64_t>(i), v, bytes);
      keys[i - begin] = absl::StrCat("c", i);
      items.push_back({keys[i - begin], std::string_view(v, bytes)});
    }
    for (const absl::Status& s : c.BatchPut(items, {.replica_count = 2})) RETURN_IF_ERROR(s);
  }
  return absl::OkStatus();
}

// Polls the master from the kill until re-replicated or the timeout.
inline absl::Status WatchRepair(StoreCluster& cl, const CrashConfig& k, absl::Time kill,
                                CrashRun& r) {
  const absl::Time deadline = kill + absl::Milliseconds(k.timeout_ms);
  absl::Time dead = absl::InfiniteFuture();
  while (absl::Now() < deadline) {
    absl::StatusOr<std::string> m = cl.MasterMetrics();
    const absl::Time now = absl::Now();
    if (!m.ok()) return m.status();
    if (dead == absl::InfiniteFuture() &&
        bench::PrometheusValue(*m, "mooncake_master_workers").value_or(0) == 3) {
      dead = now;
      r.dead_ms = absl::ToDoubleMilliseconds(now - kill);
      r.used_dead = bench::PrometheusValue(*m, "mooncake_master_used_bytes").value_or(0);
    }
    r.used_after = bench::PrometheusValue(*m, "mooncake_master_used_bytes").value_or(0);
    r.repair_copies_ok = bench::PrometheusValue(*m, "mooncake_master_copies_total",
                                                {"kind=\"repair\"", "result=\"ok\""})
                             .value_or(0);
    r.repair_copies_failed = bench::PrometheusValue(*m, "mooncake_master_copies_total",
                                                    {"kind=\"repair\"", "result=\"failed\""})
                                 .value_or(0);
    if (dead != absl::InfiniteFuture() &&
        bench::PrometheusValue(*m, "mooncake_master_repair_backlog").value_or(0) == 0 &&
        r.used_after >= r.used_before) {
      r.repaired = true;
      r.repaired_ms = absl::ToDoubleMilliseconds(now - dead);
      return absl::OkStatus();
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

inline absl::StatusOr<CrashRun> RunCrashOnce(const Env& env, const CrashConfig& k, int rep) {
  const int64_t segment = 2 * k.objects * k.object_bytes;  // 4 workers: half the pool free
  ASSIGN_OR_RETURN(
      auto cl,
      StoreCluster::Start({.store_binary = env.store_binary,
                           .dir = env.dir,
                           .name = absl::StrCat("crash", rep),
                           .workers = kWorkers,
                           .segment_bytes = absl::StrCat(std::max<int64_t>(segment, 16 << 20)),
                           .master_flags = {"--replicas=2", absl::StrCat("--repair_within_ms=",
                                                                         k.repair_within_ms)}}));
  ASSIGN_OR_RETURN(auto conn, Connect(cl->master_rpc(), /*cache=*/true));
  RETURN_IF_ERROR(PutCrashObjects(*conn->client, k));
  CrashRun r;
  ASSIGN_OR_RETURN(std::string m, cl->MasterMetrics());
  r.used_before = bench::PrometheusValue(m, "mooncake_master_used_bytes").value_or(0);
  VerifyingReaders readers(cl->master_rpc(), k);
  RETURN_IF_ERROR(readers.Start());
  absl::SleepFor(absl::Milliseconds(500));
  const absl::Time kill = absl::Now();
  cl->worker(1).Kill();
  RETURN_IF_ERROR(WatchRepair(*cl, k, kill, r));
  absl::SleepFor(absl::Milliseconds(500));  // reads after the repair too
  readers.Stop();
  r.reads = readers.reads();
  r.failed = readers.failed();
  r.first_failure = readers.first_failure();
  ASSIGN_OR_RETURN(auto fresh, Connect(cl->master_rpc(), /*cache=*/false));
  std::vector<char> buf(static_cast<size_t>(k.object_bytes));
  std::string scratch;
  for (int i = 0; i < k.objects; ++i) {
    absl::StatusOr<size_t> n = fresh->client->GetInto(absl::StrCat("c", i), buf.data(), buf.size());
    if (!n.ok() || !CheckValue(static_cast<uint64_t>(i), buf.data(), *n, scratch)) {
      ++r.final_unreadable;
    }
  }
  return r;
}

inline absl::StatusOr<bool> RunCrash(const Env& env, const CrashConfig& k, JsonFields& json) {
  std::vector<CrashRun> runs;
  for (int rep = 0; rep < env.reps; ++rep) {
    std::fprintf(stderr, "crash: rep %d...\n", rep);
    ASSIGN_OR_RETURN(CrashRun r, RunCrashOnce(env, k, rep));
    runs.push_back(std::move(r));
  }
  std::vector<double> dead, repaired;
  uint64_t reads = 0, failed = 0, unreadable = 0;
  bool all_repaired = true;
  for (const CrashRun& r : runs) {
    dead.push_back(r.dead_ms);
    repaired.push_back(r.repaired ? r.repaired_ms : INFINITY);
    reads += r.reads;
    failed += r.failed;
    unreadable += r.final_unreadable;
    all_repaired = all_repaired && r.repaired;
  }
  const double med_repaired = Median(repaired);
  const bool met = failed == 0 && unreadable == 0 && all_repaired &&
                   med_repaired <= static_cast<double>(k.repair_within_ms);
  std::printf(
      "\n== crash: 1 master (--replicas=2 --repair_within_ms=%lld) + 4 workers, %d x %lld B "
      "objects, %d verifying readers, SIGKILL worker 1; %d rep(s), medians ==\n",
      (long long)k.repair_within_ms, k.objects, (long long)k.object_bytes, k.readers, env.reps);
  std::printf("%-4s %10s %8s %10s %14s %18s %12s %12s %12s\n", "rep", "reads", "failed",
              "final_bad", "dead_after_ms", "repaired_after_ms", "repair_ok", "repair_fail",
              "used_MB b/d/a");
  for (size_t i = 0; i < runs.size(); ++i) {
    const CrashRun& r = runs[i];
    std::printf("%-4zu %10llu %8llu %10llu %14.0f %18.0f %12.0f %12.0f %4.0f/%.0f/%.0f\n", i,
                (unsigned long long)r.reads, (unsigned long long)r.failed,
                (unsigned long long)r.final_unreadable, r.dead_ms, r.repaired ? r.repaired_ms : NAN,
                r.repair_copies_ok, r.repair_copies_failed, r.used_before / 1e6, r.used_dead / 1e6,
                r.used_after / 1e6);
    if (!r.first_failure.empty())
      std::printf("     first failed read: %s\n", r.first_failure.c_str());
  }
  std::printf(
      "median: declared dead %.0f ms after the kill (heartbeat timeout); fully "
      "re-replicated %.0f ms after that (bound %lld ms); total %.0f ms\n",
      Median(dead), med_repaired, (long long)k.repair_within_ms, Median(dead) + med_repaired);
  std::printf("target 0 failed reads, replicas restored within the bound: %s\n", Met(met));
  json.Num("reads", double(reads));
  json.Num("failed_reads", double(failed));
  json.Num("final_unreadable", double(unreadable));
  json.Num("dead_after_kill_ms", Median(dead));
  json.Num("repaired_after_dead_ms", med_repaired);
  json.Num("repair_copies_ok", runs.back().repair_copies_ok);
  json.Bool("repaired", all_repaired);
  json.Bool("target_met", met);
  return met;
}

}  // namespace mooncake::elastic_bench

#endif  // MOONCAKE_TOOLS_ELASTIC_BENCH_CRASH_H_
