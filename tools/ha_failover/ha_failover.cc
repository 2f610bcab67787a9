// ha_failover: a failover campaign against the store's metadata HA.
//
// Starts its own etcd, 3 HA masters and 3 workers (tools/mooncake_store),
// runs client threads that put / get / remove and check every answer against
// what was acknowledged (workload.h), and meanwhile:
//   --mode=kill     SIGKILLs the leader --kills times; after each kill waits
//                   until a new leader is in etcd and every client completed
//                   a call it started after the kill, then restarts the
//                   killed master as a new standby. RTO of a kill = from the
//                   kill to the end of the last client's first such call.
//   --mode=rolling  SIGTERMs each master in turn, leader last, restarting
//                   each (--rounds times); target: no failed client call.
//   --mode=cold     SIGKILLs every master while the workers stay up and
//                   starts new ones (--rounds times); every acknowledged
//                   object must still be readable.
//   --mode=isolate  cuts the leader off with SIGSTOP for --pause_ms (longer
//                   than the lease TTL) and then SIGCONTs it, --kills times.
//                   A standby must take over and serve (RTO as for kill;
//                   clients whose call was queued at the stopped leader wait
//                   for SIGCONT or their deadline), and the resumed old
//                   leader must step down within --step_down_timeout_ms of
//                   SIGCONT (etcd names another leader and its /metrics say
//                   mooncake_ha_leader 0) and then follow: its
//                   mooncake_ha_applied_seq reaches the leader's.
// At the end every key is read once more and checked, and the oplog still
// in etcd is checked for fencing (fencing.h: contiguous seqs, epochs that
// never go back). Prints a summary (and
// --json=FILE); exits 1 when an acknowledged object was lost or read wrong,
// 2 when the campaign itself could not run (a process did not start, the
// cluster did not recover within --settle_timeout). The RTO target (P99 <=
// 2 s) is reported, not asserted: timing on a shared machine is noisy.
//
//   bazel build -c opt //tools/ha_failover:ha_failover
//   bazel-bin/tools/ha_failover/ha_failover --kills=20 --json=/tmp/ha.json
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/status_macros.h"
#include "tools/ha_failover/cluster.h"
#include "tools/ha_failover/fencing.h"
#include "tools/ha_failover/workload.h"

ABSL_FLAG(std::string, mode, "kill",
          "kill (SIGKILL the leader), rolling (SIGTERM each master), "
          "cold (SIGKILL every master at once) or isolate (SIGSTOP the leader, then SIGCONT)");
ABSL_FLAG(int32_t, kills, 20,
          "--mode=kill and isolate: how many times the leader is killed or isolated");
ABSL_FLAG(int64_t, pause_ms, 3000,
          "--mode=isolate: how long the leader stays stopped (more than --lease_ttl_ms)");
ABSL_FLAG(int64_t, step_down_timeout_ms, 5000,
          "--mode=isolate: longest wait from SIGCONT until the old leader says it is not leader");
ABSL_FLAG(int32_t, rounds, 1, "--mode=rolling and cold: how many rounds");
ABSL_FLAG(int32_t, clients, 8, "client threads, each with its own channel and client");
ABSL_FLAG(int32_t, keys_per_client, 32, "keys each client writes (no key has two writers)");
ABSL_FLAG(uint64_t, seed, 1, "seed of the clients' operation mix");
ABSL_FLAG(int64_t, op_timeout_ms, 10'000, "deadline of each client RPC");
ABSL_FLAG(int64_t, failover_retry_ms, 50, "TcpChannelOptions::failover_retry_ns, in ms");
ABSL_FLAG(int64_t, lease_ttl_ms, 1000, "the masters' --ha_lease_ttl_ms");
ABSL_FLAG(int64_t, warmup_ms, 1000, "load before the first event");
ABSL_FLAG(int64_t, interval_ms, 300, "load between a recovery (and restart) and the next event");
ABSL_FLAG(int64_t, settle_timeout_s, 30, "longest wait for the cluster to recover from an event");
ABSL_FLAG(std::string, store_binary, "",
          "tools/mooncake_store; empty: the one in this program's runfiles or beside it");
ABSL_FLAG(std::string, json, "", "also write the figures here as JSON");
ABSL_FLAG(bool, keep_logs, false, "keep the processes' logs (always kept on failure)");

namespace mooncake::ha_failover {
namespace {

constexpr double kRtoTargetP99Seconds = 2.0;

int64_t NowNs() { return MonotonicClock::Get().NowNs(); }
double Seconds(int64_t ns) { return static_cast<double>(ns) / 1e9; }

struct Event {
  std::string what;  // "SIGKILL master1"
  int new_leader = -1;
  int64_t leader_ns = 0;    // from the event to a new leader in etcd
  int64_t recovery_ns = 0;  // the RTO: to every client's first success
  // --mode=isolate: from SIGCONT until the old leader's mooncake_ha_leader is
  // 0, and until its mooncake_ha_applied_seq reached the leader's.
  int64_t step_down_ns = -1;
  int64_t follow_ns = -1;
  uint64_t followed_to_seq = 0;
};

struct Report {
  std::string mode;
  std::vector<Event> events;
  Totals totals;
  uint64_t failed_during_events = 0;  // rolling: its target is 0
  uint64_t keys_checked = 0;
  uint64_t unreadable = 0;
  std::string fencing;            // the fencing check's summary line
  std::string fencing_violation;  // what the fencing check found wrong
  std::string error;              // the campaign could not finish
};

absl::StatusOr<std::string> MakeWorkDir() {
  const char* tmp = getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/ha_failover.XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", pattern, ": ", std::strerror(errno)));
  }
  return pattern;
}

// Waits until a running master other than `not_this` leads and every client
// completed a call started after `workload.BeginEvent()`; fills the timings.
// `on_tick` (if any) runs on every poll.
absl::Status AwaitRecovery(HaCluster& cluster, Workload& workload, int not_this, int64_t start_ns,
                           Event& e, const std::function<void()>& on_tick = {}) {
  const absl::Time deadline = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_settle_timeout_s));
  while (e.new_leader < 0 || e.recovery_ns == 0) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          e.what, ": not recovered within ", absl::GetFlag(FLAGS_settle_timeout_s),
          " s (new leader: ", e.new_leader < 0 ? "none" : absl::StrCat("master", e.new_leader),
          "; every client succeeded since: ", e.recovery_ns != 0 ? "yes" : "no", ")"));
    }
    if (on_tick) on_tick();
    RETURN_IF_ERROR(cluster.CheckAlive());
    if (e.new_leader < 0) {
      absl::StatusOr<int> l = cluster.LeaderIndex();
      if (l.ok() && *l >= 0 && *l != not_this) {
        e.new_leader = *l;
        e.leader_ns = NowNs() - start_ns;
      }
    }
    if (std::optional<int64_t> r = workload.Recovered(); r.has_value() && e.recovery_ns == 0) {
      e.recovery_ns = *r - start_ns;
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
  return absl::OkStatus();
}

void Pause(int64_t ms) { absl::SleepFor(absl::Milliseconds(ms)); }

absl::Status RunKills(HaCluster& cluster, Workload& workload, Report& report) {
  for (int k = 0; k < absl::GetFlag(FLAGS_kills); ++k) {
    ASSIGN_OR_RETURN(int leader, cluster.WaitLeader(-1, absl::Seconds(15)));
    Event e{.what = absl::StrCat("SIGKILL leader master", leader)};
    const int64_t start = NowNs();
    cluster.SignalMaster(leader, SIGKILL);  // reaped on return: it is gone
    workload.BeginEvent();
    RETURN_IF_ERROR(AwaitRecovery(cluster, workload, leader, start, e));
    report.events.push_back(e);
    RETURN_IF_ERROR(cluster.RestartMaster(leader));
    Pause(absl::GetFlag(FLAGS_interval_ms));
  }
  return absl::OkStatus();
}

// After SIGCONT of the old leader `old`: waits until etcd names another
// running master and `old`'s /metrics say it is not leader (else the old
// leader still serves: an error), then until its applied seq reaches what
// the leader had applied by then.
absl::Status AwaitStepDownAndFollow(HaCluster& cluster, int old, int64_t cont_ns, Event& e) {
  const int64_t step_down_timeout_ms = absl::GetFlag(FLAGS_step_down_timeout_ms);
  const absl::Time step_down_deadline = absl::Now() + absl::Milliseconds(step_down_timeout_ms);
  absl::StatusOr<double> is_leader = -1.0;
  absl::StatusOr<int> leader = -1;
  while (true) {
    leader = cluster.LeaderIndex();
    is_leader = cluster.MasterMetric(old, "mooncake_ha_leader");
    if (leader.ok() && *leader >= 0 && *leader != old && is_leader.ok() && *is_leader == 0) break;
    if (absl::Now() > step_down_deadline) {
      return absl::FailedPreconditionError(
          absl::StrCat(e.what, ": the old leader master", old, " did not step down within ",
                       step_down_timeout_ms, " ms of SIGCONT (etcd's leader: ",
                       leader.ok() ? absl::StrCat("master", *leader) : leader.status().ToString(),
                       "; its mooncake_ha_leader: ",
                       is_leader.ok() ? absl::StrCat(*is_leader) : is_leader.status().ToString(),
                       ")\n", cluster.MasterLogTail(old)));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  e.step_down_ns = NowNs() - cont_ns;
  ASSIGN_OR_RETURN(const double target, cluster.MasterMetric(*leader, "mooncake_ha_applied_seq"));
  const absl::Time follow_deadline =
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_settle_timeout_s));
  absl::StatusOr<double> applied = 0.0;
  while (true) {
    applied = cluster.MasterMetric(old, "mooncake_ha_applied_seq");
    if (applied.ok() && *applied >= target) break;
    if (absl::Now() > follow_deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(e.what, ": the old leader master", old, " did not follow: applied seq ",
                       applied.ok() ? absl::StrCat(*applied) : applied.status().ToString(),
                       ", the leader's was ", target, " ", absl::GetFlag(FLAGS_settle_timeout_s),
                       " s before\n", cluster.MasterLogTail(old)));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  e.follow_ns = NowNs() - cont_ns;
  e.followed_to_seq = static_cast<uint64_t>(*applied);
  return absl::OkStatus();
}

absl::Status RunIsolate(HaCluster& cluster, Workload& workload, Report& report) {
  const int64_t pause_ns = absl::GetFlag(FLAGS_pause_ms) * 1'000'000;
  for (int k = 0; k < absl::GetFlag(FLAGS_kills); ++k) {
    ASSIGN_OR_RETURN(int leader, cluster.WaitLeader(-1, absl::Seconds(15)));
    Event e{.what = absl::StrCat("SIGSTOP leader master", leader)};
    const int64_t start = NowNs();
    cluster.SignalMaster(leader, SIGSTOP);
    workload.BeginEvent();
    int64_t cont_ns = 0;
    auto resume_when_due = [&] {
      if (cont_ns == 0 && NowNs() - start >= pause_ns) {
        cluster.SignalMaster(leader, SIGCONT);
        cont_ns = NowNs();
      }
    };
    absl::Status recovered = AwaitRecovery(cluster, workload, leader, start, e, resume_when_due);
    if (!recovered.ok()) {
      cluster.SignalMaster(leader, SIGCONT);
      return recovered;
    }
    while (cont_ns == 0) {
      absl::SleepFor(absl::Milliseconds(1));
      resume_when_due();
    }
    RETURN_IF_ERROR(AwaitStepDownAndFollow(cluster, leader, cont_ns, e));
    report.events.push_back(e);
    Pause(absl::GetFlag(FLAGS_interval_ms));
  }
  return absl::OkStatus();
}

absl::Status RunRolling(HaCluster& cluster, Workload& workload, Report& report) {
  const uint64_t failed_before = workload.totals().failed;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    ASSIGN_OR_RETURN(int leader, cluster.WaitLeader(-1, absl::Seconds(15)));
    std::vector<int> order;
    for (int i = 0; i < cluster.masters(); ++i) {
      if (i != leader) order.push_back(i);
    }
    order.push_back(leader);
    for (int i : order) {
      Event e{.what = absl::StrCat("SIGTERM ", i == leader ? "leader" : "standby", " master", i)};
      const int64_t start = NowNs();
      cluster.SignalMaster(i, SIGTERM);
      if (!cluster.WaitMasterExit(i, absl::Seconds(15))) {
        cluster.SignalMaster(i, SIGKILL);
        return absl::DeadlineExceededError(absl::StrCat(
            "master", i, " still running 15 s after SIGTERM:\n", cluster.MasterLogTail(i)));
      }
      workload.BeginEvent();
      RETURN_IF_ERROR(cluster.RestartMaster(i));
      RETURN_IF_ERROR(AwaitRecovery(cluster, workload, -1, start, e));
      report.events.push_back(e);
      Pause(absl::GetFlag(FLAGS_interval_ms));
    }
  }
  report.failed_during_events = workload.totals().failed - failed_before;
  return absl::OkStatus();
}

absl::Status RunCold(HaCluster& cluster, Workload& workload, Report& report) {
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    Event e{.what = "SIGKILL every master"};
    const int64_t start = NowNs();
    for (int i = 0; i < cluster.masters(); ++i) cluster.SignalMaster(i, SIGKILL);
    workload.BeginEvent();
    for (int i = 0; i < cluster.masters(); ++i) RETURN_IF_ERROR(cluster.RestartMaster(i));
    RETURN_IF_ERROR(AwaitRecovery(cluster, workload, -1, start, e));
    report.events.push_back(e);
    Pause(absl::GetFlag(FLAGS_interval_ms));
  }
  return absl::OkStatus();
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

struct Rto {
  double median = 0, p99 = 0, max = 0;
};

Rto RtoOf(const Report& r) {
  std::vector<double> s;
  for (const Event& e : r.events) s.push_back(Seconds(e.recovery_ns));
  return {Percentile(s, 0.5), Percentile(s, 0.99), s.empty() ? 0 : Percentile(s, 1.0)};
}

bool Passed(const Report& r) {
  return r.error.empty() && r.fencing_violation.empty() && r.totals.lost == 0 &&
         r.totals.wrong == 0;
}

void PrintSummary(const Report& r) {
  std::printf("\n  %-5s %-28s %-10s %-13s %s\n", "event", "what", "leader", "leader after",
              "all clients after (RTO)");
  for (size_t i = 0; i < r.events.size(); ++i) {
    const Event& e = r.events[i];
    std::printf("  %-5zu %-28s master%-4d %8.3f s    %8.3f s\n", i + 1, e.what.c_str(),
                e.new_leader, Seconds(e.leader_ns), Seconds(e.recovery_ns));
    if (e.step_down_ns >= 0) {
      std::printf(
          "        old leader after SIGCONT: not leader in %.3f s, applied seq %llu in "
          "%.3f s\n",
          Seconds(e.step_down_ns), static_cast<unsigned long long>(e.followed_to_seq),
          Seconds(e.follow_ns));
    }
  }
  const Rto rto = RtoOf(r);
  std::printf("\n  %-24s %s\n", "mode", r.mode.c_str());
  std::printf("  %-24s %zu\n", "events", r.events.size());
  std::printf("  %-24s %llu\n", "client ops ok", static_cast<unsigned long long>(r.totals.ok));
  std::printf("  %-24s %llu\n", "client ops failed",
              static_cast<unsigned long long>(r.totals.failed));
  if (r.mode == "rolling") {
    std::printf("  %-24s %llu (target 0: %s)\n", "failed during rolling",
                static_cast<unsigned long long>(r.failed_during_events),
                r.failed_during_events == 0 ? "met" : "MISSED");
  }
  std::printf("  %-24s %llu\n", "lost", static_cast<unsigned long long>(r.totals.lost));
  std::printf("  %-24s %llu\n", "wrong", static_cast<unsigned long long>(r.totals.wrong));
  std::printf("  %-24s %.3f s\n", "RTO median", rto.median);
  std::printf("  %-24s %.3f s\n", "RTO P99", rto.p99);
  std::printf("  %-24s %.3f s\n", "RTO max", rto.max);
  std::printf("  %-24s %s (reported, not asserted)\n", "RTO target P99 <= 2 s",
              rto.p99 <= kRtoTargetP99Seconds ? "met" : "MISSED");
  std::printf("  %-24s %llu keys, %llu unreadable\n", "final check",
              static_cast<unsigned long long>(r.keys_checked),
              static_cast<unsigned long long>(r.unreadable));
  if (!r.fencing.empty()) std::printf("  %-24s %s\n", "fencing", r.fencing.c_str());
  if (!r.fencing_violation.empty()) {
    std::printf("  %-24s FAILED: %s\n", "fencing", r.fencing_violation.c_str());
  }
  for (const std::string& a : r.totals.anomalies) std::printf("  ! %s\n", a.c_str());
  for (const std::string& f : r.totals.failures) std::printf("  failed call: %s\n", f.c_str());
  if (!r.error.empty()) std::printf("  campaign error: %s\n", r.error.c_str());
  std::printf("  %-24s %s\n", "result", Passed(r) ? "PASS" : "FAIL");
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

absl::Status WriteJson(const std::string& path, const Report& r) {
  const Rto rto = RtoOf(r);
  std::string events;
  for (const Event& e : r.events) {
    absl::StrAppendFormat(&events, "%s{\"what\": %s, \"leader_s\": %.4f, \"rto_s\": %.4f",
                          events.empty() ? "" : ", ", JsonString(e.what), Seconds(e.leader_ns),
                          Seconds(e.recovery_ns));
    if (e.step_down_ns >= 0) {
      absl::StrAppendFormat(&events, ", \"step_down_s\": %.4f, \"follow_s\": %.4f",
                            Seconds(e.step_down_ns), Seconds(e.follow_ns));
    }
    events += "}";
  }
  const std::string json = absl::StrFormat(
      "{\n  \"mode\": %s,\n  \"events\": %d,\n  \"ops_ok\": %d,\n  \"ops_failed\": %d,\n"
      "  \"failed_during_events\": %d,\n  \"lost\": %d,\n  \"wrong\": %d,\n"
      "  \"rto_median_s\": %.4f,\n  \"rto_p99_s\": %.4f,\n  \"rto_max_s\": %.4f,\n"
      "  \"rto_target_p99_s\": %.1f,\n  \"rto_target_met\": %s,\n  \"keys_checked\": %d,\n"
      "  \"unreadable\": %d,\n  \"fencing\": %s,\n  \"fencing_violation\": %s,\n  \"error\": %s,\n "
      " \"passed\": %s,\n  \"per_event\": [%s]\n}\n",
      JsonString(r.mode), r.events.size(), r.totals.ok, r.totals.failed, r.failed_during_events,
      r.totals.lost, r.totals.wrong, rto.median, rto.p99, rto.max, kRtoTargetP99Seconds,
      rto.p99 <= kRtoTargetP99Seconds ? "true" : "false", r.keys_checked, r.unreadable,
      JsonString(r.fencing), JsonString(r.fencing_violation), JsonString(r.error),
      Passed(r) ? "true" : "false", events);
  std::ofstream out(path);
  out << json;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("writing ", path, " failed"));
  return absl::OkStatus();
}

// Runs the load and the chosen events; an error means the campaign itself
// could not go on (the figures gathered so far still count).
absl::Status Campaign(HaCluster& cluster, Workload& workload, Report& report) {
  RETURN_IF_ERROR(workload.Start());
  Pause(absl::GetFlag(FLAGS_warmup_ms));
  if (report.mode == "kill") return RunKills(cluster, workload, report);
  if (report.mode == "rolling") return RunRolling(cluster, workload, report);
  if (report.mode == "isolate") return RunIsolate(cluster, workload, report);
  return RunCold(cluster, workload, report);
}

int Main() {
  Report report{.mode = absl::GetFlag(FLAGS_mode)};
  if (report.mode != "kill" && report.mode != "rolling" && report.mode != "cold" &&
      report.mode != "isolate") {
    std::fprintf(stderr, "ha_failover: --mode must be kill, rolling, cold or isolate\n");
    return 2;
  }
  absl::StatusOr<std::string> binary = bench::FindStoreBinary(absl::GetFlag(FLAGS_store_binary));
  absl::StatusOr<std::string> dir = MakeWorkDir();
  if (!binary.ok() || !dir.ok()) {
    std::fprintf(stderr, "ha_failover: %s\n",
                 (!binary.ok() ? binary.status() : dir.status()).ToString().c_str());
    return 2;
  }
  ClusterOptions co{.store_binary = *binary, .dir = *dir};
  co.lease_ttl_ms = absl::GetFlag(FLAGS_lease_ttl_ms);
  std::printf(
      "ha_failover: mode %s, %d masters + %d workers, %d clients x %d keys, lease TTL "
      "%lld ms, seed %llu, logs in %s\n",
      report.mode.c_str(), co.masters, co.workers, absl::GetFlag(FLAGS_clients),
      absl::GetFlag(FLAGS_keys_per_client), static_cast<long long>(co.lease_ttl_ms),
      static_cast<unsigned long long>(absl::GetFlag(FLAGS_seed)), dir->c_str());
  std::fflush(stdout);
  absl::StatusOr<std::unique_ptr<HaCluster>> cluster = HaCluster::Start(co);
  if (!cluster.ok()) {
    std::fprintf(stderr, "ha_failover: starting the cluster: %s\n",
                 cluster.status().ToString().c_str());
    return 2;
  }
  Workload workload({.etcd = (*cluster)->etcd_endpoint(),
                     .cluster = (*cluster)->cluster(),
                     .clients = absl::GetFlag(FLAGS_clients),
                     .keys_per_client = absl::GetFlag(FLAGS_keys_per_client),
                     .seed = absl::GetFlag(FLAGS_seed),
                     .op_timeout_ms = absl::GetFlag(FLAGS_op_timeout_ms),
                     .failover_retry_ms = absl::GetFlag(FLAGS_failover_retry_ms)});
  if (absl::Status s = Campaign(**cluster, workload, report); !s.ok()) report.error = s.ToString();
  workload.Stop();
  if (report.error.empty()) {
    absl::StatusOr<uint64_t> unreadable = workload.Verify(&report.keys_checked);
    if (unreadable.ok()) {
      report.unreadable = *unreadable;
    } else {
      report.error = absl::StrCat("final check: ", unreadable.status().ToString());
    }
  }
  if (report.error.empty()) {
    absl::StatusOr<FencingReport> f = CheckFencing((*cluster)->etcd(), (*cluster)->cluster());
    if (f.ok()) {
      report.fencing =
          absl::StrCat(f->batches, " batches from ", f->epochs.size(),
                       " epochs, epochs never go back (seq ", f->first_seq, "..", f->last_seq, ")");
    } else if (absl::IsDataLoss(f.status())) {
      report.fencing_violation = f.status().ToString();
    } else {
      report.error = absl::StrCat("fencing check: ", f.status().ToString());
    }
  }
  report.totals = workload.totals();
  PrintSummary(report);
  if (const std::string json = absl::GetFlag(FLAGS_json); !json.empty()) {
    if (absl::Status s = WriteJson(json, report); !s.ok()) {
      std::fprintf(stderr, "ha_failover: %s\n", s.ToString().c_str());
    }
  }
  cluster->reset();
  if (Passed(report) && !absl::GetFlag(FLAGS_keep_logs)) {
    std::error_code ignored;
    std::filesystem::remove_all(*dir, ignored);
  } else {
    std::printf("  logs kept in %s\n", dir->c_str());
  }
  if (!report.error.empty()) return 2;
  return Passed(report) ? 0 : 1;
}

}  // namespace
}  // namespace mooncake::ha_failover

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return mooncake::ha_failover::Main();
}
