// elastic_bench: the store's elasticity (docs/elasticity.md) measured side by
// side in one run, each variant on a fresh cluster of tools/mooncake_store
// processes (1 master + 4 workers):
//
//   scalein  the conversation trace replayed as a prefix cache under eviction
//            pressure; worker 0 leaves with a drain, without one, or stays;
//            block hit rate of the next requests, GET P99 during the drain
//   crash    replica_num=2 objects under verifying readers; SIGKILL a
//            worker; failed reads, time to declared dead and to re-replicated
//   skew     Zipf GETs of 1 MiB objects from workers each behind its own
//            shaped veth link (network namespaces; root only), hot replicas
//            off vs on
//
//   bazel run -c opt //tools/elastic_bench -- --json=/tmp/elastic.json
//
// Each scenario prints a table with its baseline, the ratio, and whether the
// target of its issue is met.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/status_macros.h"
#include "tools/bench/servers.h"
#include "tools/elastic_bench/common.h"
#include "tools/elastic_bench/crash.h"
#include "tools/elastic_bench/scalein.h"
#include "tools/elastic_bench/skew.h"

ABSL_FLAG(std::string, store_binary, "",
          "tools/mooncake_store; empty: the one in this program's runfiles or beside it");
ABSL_FLAG(std::string, scenarios, "scalein,crash,skew", "which scenarios to run, comma-separated");
ABSL_FLAG(std::string, json, "", "also write the results here as JSON");
ABSL_FLAG(std::string, log_dir, "", "node logs; empty: a new directory under $TMPDIR or /tmp");
ABSL_FLAG(int32_t, reps, 1, "repetitions of each timing-based variant (medians reported)");
// scalein
ABSL_FLAG(std::string, trace, "/work/shared/traces/conversation_trace.jsonl",
          "Mooncake JSONL trace (hash_ids = prefix blocks)");
ABSL_FLAG(int32_t, warm, 6000, "scalein: requests replayed before the worker leaves");
ABSL_FLAG(int32_t, next, 2000, "scalein: requests replayed after it left (the hit rate's)");
ABSL_FLAG(int64_t, block_bytes, 16384, "scalein: bytes per block object");
ABSL_FLAG(int64_t, pool_tokens, 6'000'000, "scalein: pool capacity in tokens (over 4 workers)");
ABSL_FLAG(int64_t, block_tokens, 512, "scalein: tokens per trace block");
ABSL_FLAG(int64_t, drain_deadline_ms, 30'000, "scalein: the drain's deadline");
ABSL_FLAG(bool, scalein_cache, true, "scalein: the replaying client's metadata cache");
ABSL_FLAG(int64_t, scalein_report_ms, -1,
          "scalein: the replaying client's ClientOptions::cached_read_report_ms (0: its cached "
          "reads reach the master only when their leases end; negative: the default, 100)");
ABSL_FLAG(int64_t, drain_bandwidth, 0,
          "scalein: the drain's bandwidth in bytes/s (0: the master's default)");
ABSL_FLAG(double, drain_pace, -1,
          "scalein: the master's --drain_pace (a paced drain aims to end by this fraction of "
          "its deadline; 0: unpaced; negative: the master's default, 0.8)");
ABSL_FLAG(int32_t, probe_keys, 64, "scalein: objects the latency reader GETs");
ABSL_FLAG(int64_t, probe_ms, 24'000,
          "scalein: the reader's window before the drain; as long as the drain (a drain paced "
          "over the default 30 s deadline takes about 24 s at the default pace, 0.8), so the "
          "two P99s are of windows of equal length");
// crash
ABSL_FLAG(int32_t, crash_objects, 2000, "crash: objects put with replica_count 2");
ABSL_FLAG(int64_t, crash_object_bytes, 65536, "crash: bytes per object");
ABSL_FLAG(int32_t, crash_readers, 2, "crash: verifying reader threads");
ABSL_FLAG(int64_t, repair_within_ms, 10'000, "crash: the master's --repair_within_ms");
ABSL_FLAG(int64_t, crash_timeout_ms, 90'000, "crash: give up waiting for re-replication");
// skew
ABSL_FLAG(int32_t, skew_objects, 256, "skew: objects");
ABSL_FLAG(int64_t, skew_object_bytes, 1 << 20, "skew: bytes per object");
ABSL_FLAG(int32_t, skew_threads, 8, "skew: reader threads (one client each)");
ABSL_FLAG(
    int32_t, skew_batch, 4,
    "skew: objects per BatchGetInto of a reader (an engine loads a request's blocks together)");
ABSL_FLAG(double, zipf, 1.1, "skew: Zipf exponent of the key popularity");
ABSL_FLAG(double, seconds, 10, "skew: measured seconds per variant");
ABSL_FLAG(
    double, skew_warmup_s, 8,
    "skew: unmeasured seconds first (hot replicas form; cached entries are refreshed once their "
    "5 s leases end)");
ABSL_FLAG(int32_t, hot_reads, 4, "skew: the 'on' variant's --hot_reads");
ABSL_FLAG(int64_t, hot_window_ms, 1000, "skew: the 'on' variant's --hot_window_ms");
ABSL_FLAG(double, hot_max_fraction, 0.5, "skew: the 'on' variant's --hot_max_fraction");
ABSL_FLAG(int32_t, hot_max_replicas, 4,
          "skew: the 'on' variant's --hot_max_replicas (4: a hot object may have a replica on "
          "every worker)");
ABSL_FLAG(bool, skew_cache, true, "skew: the clients' metadata cache (its default: on)");
ABSL_FLAG(std::string, link_rate, "400mbit",
          "skew: each worker's egress rate (tc tbf); low enough that four links, not the "
          "machine's CPU, bound what the pool serves");

namespace mooncake::elastic_bench {
namespace {

absl::StatusOr<std::string> MakeLogDir() {
  if (std::string d = absl::GetFlag(FLAGS_log_dir); !d.empty()) {
    std::filesystem::create_directories(d);
    return d;
  }
  const char* tmp = getenv("TEST_TMPDIR");
  if (tmp == nullptr) tmp = getenv("TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/elastic_bench.XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", pattern, ": ", std::strerror(errno)));
  }
  return pattern;
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<std::string> binary = bench::FindStoreBinary(absl::GetFlag(FLAGS_store_binary));
  absl::StatusOr<std::string> dir = MakeLogDir();
  if (!binary.ok() || !dir.ok()) {
    std::fprintf(stderr, "elastic_bench: %s\n",
                 (binary.ok() ? dir.status() : binary.status()).ToString().c_str());
    return 2;
  }
  const Env env{
      .store_binary = *binary, .dir = *dir, .reps = std::max(1, absl::GetFlag(FLAGS_reps))};
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::printf("elastic_bench on %s (%u CPUs), store %s, logs in %s\n", host,
              std::thread::hardware_concurrency(), env.store_binary.c_str(), env.dir.c_str());
  std::fflush(stdout);
  std::vector<std::string> json;
  bool failed = false;
  const std::vector<std::string> scenarios = absl::StrSplit(absl::GetFlag(FLAGS_scenarios), ',');
  for (const std::string& sc : scenarios) {
    JsonFields fields;
    absl::Status st;
    if (sc == "scalein") {
      const ScaleinConfig s{.trace = absl::GetFlag(FLAGS_trace),
                            .warm = absl::GetFlag(FLAGS_warm),
                            .next = absl::GetFlag(FLAGS_next),
                            .block_bytes = absl::GetFlag(FLAGS_block_bytes),
                            .pool_tokens = absl::GetFlag(FLAGS_pool_tokens),
                            .block_tokens = absl::GetFlag(FLAGS_block_tokens),
                            .drain_deadline_ms = absl::GetFlag(FLAGS_drain_deadline_ms),
                            .drain_bandwidth = absl::GetFlag(FLAGS_drain_bandwidth),
                            .drain_pace = absl::GetFlag(FLAGS_drain_pace),
                            .cache = absl::GetFlag(FLAGS_scalein_cache),
                            .report_ms = absl::GetFlag(FLAGS_scalein_report_ms),
                            .probe_keys = absl::GetFlag(FLAGS_probe_keys),
                            .probe_ms = absl::GetFlag(FLAGS_probe_ms)};
      st = RunScalein(env, s, fields).status();
    } else if (sc == "crash") {
      const CrashConfig k{.objects = absl::GetFlag(FLAGS_crash_objects),
                          .object_bytes = absl::GetFlag(FLAGS_crash_object_bytes),
                          .readers = absl::GetFlag(FLAGS_crash_readers),
                          .repair_within_ms = absl::GetFlag(FLAGS_repair_within_ms),
                          .timeout_ms = absl::GetFlag(FLAGS_crash_timeout_ms)};
      st = RunCrash(env, k, fields).status();
    } else if (sc == "skew") {
      const SkewConfig k{.objects = absl::GetFlag(FLAGS_skew_objects),
                         .object_bytes = absl::GetFlag(FLAGS_skew_object_bytes),
                         .threads = absl::GetFlag(FLAGS_skew_threads),
                         .batch = absl::GetFlag(FLAGS_skew_batch),
                         .zipf = absl::GetFlag(FLAGS_zipf),
                         .seconds = absl::GetFlag(FLAGS_seconds),
                         .warmup_s = absl::GetFlag(FLAGS_skew_warmup_s),
                         .hot_reads = absl::GetFlag(FLAGS_hot_reads),
                         .hot_window_ms = absl::GetFlag(FLAGS_hot_window_ms),
                         .hot_max_replicas = absl::GetFlag(FLAGS_hot_max_replicas),
                         .hot_max_fraction = absl::GetFlag(FLAGS_hot_max_fraction),
                         .cache = absl::GetFlag(FLAGS_skew_cache),
                         .link_rate = absl::GetFlag(FLAGS_link_rate)};
      st = RunSkew(env, k, fields).status();
    } else {
      std::fprintf(stderr, "elastic_bench: unknown scenario '%s'\n", sc.c_str());
      return 2;
    }
    std::fflush(stdout);
    if (!st.ok()) {
      std::printf("\n== %s: ERROR: %s ==\n", sc.c_str(), st.ToString().c_str());
      fields.Str("error", "see the output");
      failed = true;
    }
    json.push_back(absl::StrCat("\"", sc, "\":", fields.Object()));
  }
  if (std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream(path) << "{" << absl::StrJoin(json, ",") << "}\n";
  }
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace mooncake::elastic_bench

int main(int argc, char** argv) { return mooncake::elastic_bench::Main(argc, argv); }
