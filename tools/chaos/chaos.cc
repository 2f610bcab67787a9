// The chaos campaign: a store cluster in network namespaces (cluster.h,
// netlab.h), verifying clients (clients.h) writing a history (history.h), and
// a seeded schedule of faults, one at a time; at the end every fault is
// healed, every key read once more, and the history checked.
//
//   bazel build -c opt //tools/chaos:chaos
//   sudo bazel-bin/tools/chaos/chaos --seed=7 --minutes=10 --ha --history=/tmp/h.jsonl
//
// Exit: 0 passed, 1 the checker failed (or a process could not be restarted,
// or keys could not be read back), 2 bad flags or no cluster, 130 passed but
// interrupted (SIGINT/SIGTERM: every fault healed, everything removed).
//
// The model (docs/chaos.md): replicas=2 and at most one worker lost at a time
// (a worker kill waits until the previous one's objects were re-replicated);
// stops and network faults last less than the master's heartbeat timeout;
// the working set stays far under the pool so nothing is evicted (checked:
// the masters' mooncake_master_evictions_total must stay 0). A single
// master's SIGKILL loses its metadata: that fault is recorded with
// loses_data=1 and the checker counts what it took as GONE, with the cause.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tools/bench/servers.h"
#include "tools/chaos/clients.h"
#include "tools/chaos/cluster.h"
#include "tools/chaos/disklab.h"
#include "tools/chaos/history.h"
#include "tools/chaos/netlab.h"
#include "tools/chaos/report.h"

ABSL_FLAG(uint64_t, seed, 1, "seeds the fault schedule and the clients' operations");
ABSL_FLAG(int32_t, seconds, 0, "campaign length in seconds (overrides --minutes)");
ABSL_FLAG(int32_t, minutes, 1, "campaign length in minutes");
ABSL_FLAG(std::string, faults, "kill,stop,partition,delay,loss,reorder,disk_full,slow_disk",
          "fault kinds to inject");
ABSL_FLAG(bool, ha, true, "3 masters on etcd (metadata HA); false: one master");
ABSL_FLAG(int32_t, workers, 3, "workers (at least 3: replicas=2 with one worker down)");
ABSL_FLAG(int32_t, clients, 8, "verifying client threads");
ABSL_FLAG(std::string, history, "", "history file (JSON lines); default <dir>/history.jsonl");
ABSL_FLAG(std::string, dir, "", "logs and state; default a new directory under $TMPDIR");
ABSL_FLAG(std::string, store_binary, "", "tools/mooncake_store; default from the runfiles");
ABSL_FLAG(int64_t, op_deadline_ms, 30'000, "an operation pending longer is a hang");
ABSL_FLAG(int64_t, worker_rss_bound_mb, 320, "a worker's peak RSS bound (64 MiB segment + ...)");
ABSL_FLAG(int64_t, master_rss_bound_mb, 256, "a master's peak RSS bound");
ABSL_FLAG(int64_t, etcd_rss_bound_mb, 512, "etcd's peak RSS bound");
ABSL_FLAG(int64_t, campaign_rss_bound_mb, 1024, "this process's (the clients') peak RSS bound");

namespace mooncake::chaos {
namespace {

std::atomic<bool> g_interrupted{false};
void OnSignal(int) { g_interrupted.store(true); }

struct Peak {
  int64_t peak_kb = 0;
  int64_t bound_kb = 0;
};

int64_t ReadHwmKb(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  int64_t hwm = 0, rss = 0;
  for (std::string line; std::getline(in, line);) {
    int64_t v = 0;
    if (std::sscanf(line.c_str(), "VmHWM: %ld", &v) == 1) hwm = v;
    if (std::sscanf(line.c_str(), "VmRSS: %ld", &v) == 1) rss = v;
  }
  return std::max(hwm, rss);
}

class Campaign {
 public:
  Campaign(ChaosCluster* cluster, NetLab* net, DiskLab* disk, HistoryWriter* h, uint64_t seed)
      : c_(cluster), net_(net), disk_(disk), h_(h), rng_(seed) {}

  std::map<std::string, Peak>& peaks() { return peaks_; }
  uint64_t evictions() const {
    uint64_t sum = 0;
    for (const auto& [k, v] : evictions_) sum += v;
    return sum;
  }

  // Sleeps `d`, sampling memory every 250 ms and evictions every 2 s.
  void Pause(absl::Duration d) {
    const absl::Time end = absl::Now() + d;
    while (absl::Now() < end && !g_interrupted.load()) {
      Sample();
      absl::SleepFor(std::min(absl::Milliseconds(250), end - absl::Now()));
    }
  }

  void Sample() {
    auto note = [&](const std::string& name, pid_t pid, int64_t bound_mb) {
      if (pid <= 0) return;
      Peak& p = peaks_[name];
      p.peak_kb = std::max(p.peak_kb, ReadHwmKb(pid));
      p.bound_kb = bound_mb * 1024;
    };
    for (auto& p : c_->procs()) {
      note(p->name, p->pid(),
           p->master ? absl::GetFlag(FLAGS_master_rss_bound_mb)
                     : absl::GetFlag(FLAGS_worker_rss_bound_mb));
    }
    note("etcd", c_->etcd().pid(), absl::GetFlag(FLAGS_etcd_rss_bound_mb));
    note("campaign", getpid(), absl::GetFlag(FLAGS_campaign_rss_bound_mb));
    if (absl::Now() < next_metrics_) return;
    next_metrics_ = absl::Now() + absl::Seconds(2);
    for (auto& p : c_->procs()) {
      if (!p->master || p->stopped || p->pid() <= 0) continue;
      absl::StatusOr<double> e = c_->Metric(*p, "mooncake_master_evictions_total");
      if (!e.ok()) continue;
      uint64_t& seen = evictions_[absl::StrCat(p->name, ".", p->generation)];
      seen = std::max<uint64_t>(seen, static_cast<uint64_t>(*e));
    }
  }

  // Injects one fault of `kind` (chosen by the seeded schedule), holds it,
  // heals it and records it. FAILED_PRECONDITION: not now (the model's
  // constraints); other errors end the campaign.
  absl::Status Inject(const std::string& kind) {
    Record f = {{"t", "fault"}, {"kind", kind}, {"start_ns", absl::StrCat(NowNs())}};
    absl::Status s;
    if (kind == "kill") {
      s = Kill(f);
    } else if (kind == "stop") {
      s = StopCont(f);
    } else if (kind == "disk_full") {
      s = DiskFull(f);
    } else if (kind == "slow_disk") {
      s = SlowDisk(f);
    } else {
      s = Network(kind, f);
    }
    if (!s.ok()) return s;
    f["end_ns"] = absl::StrCat(NowNs());
    h_->Append(f);
    std::printf("  %8.1fs %-10s %s %s\n", absl::ToDoubleSeconds(absl::Now() - start_), kind.c_str(),
                f["target"].c_str(), f["peer"].c_str());
    std::fflush(stdout);
    return absl::OkStatus();
  }

  absl::Time start_ = absl::Now();

 private:
  // Durations in ms, uniform in [lo, hi].
  absl::Duration Ms(int lo, int hi) {
    return absl::Milliseconds(lo + static_cast<int>(rng_() % (hi - lo + 1)));
  }
  Proc& AnyProc() { return *c_->procs()[rng_() % c_->procs().size()]; }

  absl::Status Restart(Proc& p) {
    absl::Status s;
    for (int attempt = 0; attempt < 5 && !g_interrupted.load(); ++attempt) {
      s = c_->Restart(p);
      if (s.ok()) return s;
      Pause(absl::Seconds(1));
    }
    return absl::InternalError(absl::StrCat("cannot restart ", p.name, ": ", s.message()));
  }

  bool WorkerKillAllowed() const { return absl::Now() >= worker_kill_ok_at_; }
  // A killed worker's segments expire after the heartbeat timeout (10 s);
  // its objects are then re-replicated within --repair_within_ms (3 s).
  void AfterWorkerKill() { worker_kill_ok_at_ = absl::Now() + absl::Seconds(18); }

  absl::Status Kill(Record& f) {
    Proc& p = AnyProc();
    if (!p.master && !WorkerKillAllowed()) return absl::FailedPreconditionError("repairing");
    f["target"] = p.name;
    f["loses_data"] = (p.master && !c_->ha()) ? "1" : "0";
    c_->Kill(p);
    Pause(Ms(200, 2000));
    if (!p.master) AfterWorkerKill();
    return Restart(p);
  }

  absl::Status StopCont(Record& f) {
    // etcd too: shorter than the masters' lease. A pid of -1 (reaped) would
    // signal every process on the machine, so it is checked.
    if (const pid_t etcd = c_->etcd().pid(); c_->ha() && etcd > 0 && rng_() % 8 == 0) {
      f["target"] = "etcd";
      ::kill(etcd, SIGSTOP);
      Pause(Ms(200, 1500));
      ::kill(etcd, SIGCONT);
      return absl::OkStatus();
    }
    Proc& p = AnyProc();
    f["target"] = p.name;
    c_->Stop(p);
    Pause(Ms(300, 4000));
    c_->Cont(p);
    return absl::OkStatus();
  }

  absl::Status Network(const std::string& kind, Record& f) {
    static const std::map<std::string, std::string> kNetem = {
        {"partition", "loss 100%"},
        {"delay", "delay 80ms 40ms"},
        {"loss", "loss 15%"},
        {"reorder", "delay 10ms reorder 50% 50%"}};
    Proc& p = AnyProc();
    std::string peer, peer_name = "all";
    const uint64_t d = rng_() % 10;
    if (d >= 4 && d < 7) {
      peer = net_->RootAddress();
      peer_name = c_->ha() ? "clients+etcd" : "clients";
    } else if (d >= 7) {
      Proc& q = AnyProc();
      if (&q != &p) {
        peer = c_->Address(q);
        peer_name = q.name;
      }
    }
    f["target"] = p.name;
    f["peer"] = peer_name;
    if (kind == "partition") {
      std::vector<std::string> peers = {peer};
      if (peer.empty()) {
        peers = {net_->RootAddress()};
        for (auto& q : c_->procs()) {
          if (q.get() != &p) peers.push_back(c_->Address(*q));
        }
      }
      RETURN_IF_ERROR(net_->Partition(p.net, peers));
    } else {
      RETURN_IF_ERROR(net_->Impair(p.net, peer, kNetem.at(kind)));
    }
    Pause(Ms(1000, 4000));
    if (const std::string packets = net_->ImpairedPackets(p.net); !packets.empty()) {
      f["packets"] = packets;
    }
    net_->Heal(p.net);
    return absl::OkStatus();
  }

  // Fills worker 0's tier filesystem; when the model allows a worker kill,
  // also restarts worker 0 into the full disk (its start creates a new tier
  // file: it must either start or fail cleanly, and start once healed).
  absl::Status DiskFull(Record& f) {
    Proc& w = c_->worker(0);
    f["target"] = w.name;
    RETURN_IF_ERROR(disk_->Fill());
    const bool restart = WorkerKillAllowed() && rng_() % 2 == 0;
    std::string detail = absl::StrCat("free_after_fill=", disk_->free_after_fill_bytes());
    if (restart) {
      c_->Kill(w);
      AfterWorkerKill();
      const absl::Status s = c_->Restart(w);
      absl::StrAppend(&detail, " restart_while_full=", s.ok() ? "started" : "refused");
      if (!s.ok()) {
        std::printf("  (worker0 did not start on a full disk: %s)\n",
                    std::string(s.message().substr(0, 200)).c_str());
      }
    }
    Pause(Ms(2000, 5000));
    disk_->Unfill();
    f["peer"] = detail;
    if (!w.Running()) return Restart(w);
    return absl::OkStatus();
  }

  absl::Status SlowDisk(Record& f) {
    Proc& w = c_->worker(0);
    f["target"] = w.name;
    RETURN_IF_ERROR(disk_->Slow(w.pid(), 256 << 10));
    Pause(Ms(2000, 6000));
    disk_->Unslow();
    return absl::OkStatus();
  }

  ChaosCluster* c_;
  NetLab* net_;
  DiskLab* disk_;
  HistoryWriter* h_;
  std::mt19937_64 rng_;
  absl::Time worker_kill_ok_at_ = absl::InfinitePast();
  absl::Time next_metrics_ = absl::InfinitePast();
  std::map<std::string, Peak> peaks_;
  std::map<std::string, uint64_t> evictions_;  // per master incarnation
};

std::string MakeDir() {
  std::string d = absl::GetFlag(FLAGS_dir);
  if (!d.empty()) {
    ::mkdir(d.c_str(), 0755);
    return d;
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/chaos.XXXXXX");
  return mkdtemp(pattern.data()) == nullptr ? "/tmp" : pattern;
}

int Main() {
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const int64_t seconds = absl::GetFlag(FLAGS_seconds) > 0 ? absl::GetFlag(FLAGS_seconds)
                                                           : 60 * absl::GetFlag(FLAGS_minutes);
  std::set<std::string> kinds;
  for (absl::string_view k : absl::StrSplit(absl::GetFlag(FLAGS_faults), ',', absl::SkipEmpty())) {
    kinds.insert(std::string(k));
  }
  for (const std::string& k : kinds) {
    static const std::set<std::string> kKnown = {"kill", "stop",    "partition", "delay",
                                                 "loss", "reorder", "disk_full", "slow_disk"};
    if (!kKnown.contains(k)) {
      std::fprintf(stderr, "chaos: unknown fault kind '%s'\n", k.c_str());
      return 2;
    }
  }
  if (absl::GetFlag(FLAGS_workers) < 3) {
    std::fprintf(stderr, "chaos: --workers must be at least 3 (replicas=2, one down)\n");
    return 2;
  }
  if (geteuid() != 0) {
    std::fprintf(stderr, "chaos: needs root (network namespaces, tc, mounts)\n");
    return 2;
  }
  absl::StatusOr<std::string> binary = bench::FindStoreBinary(absl::GetFlag(FLAGS_store_binary));
  if (!binary.ok()) {
    std::fprintf(stderr, "chaos: %s\n", std::string(binary.status().message()).c_str());
    return 2;
  }
  const std::string dir = MakeDir();
  const std::string history_path =
      absl::GetFlag(FLAGS_history).empty() ? dir + "/history.jsonl" : absl::GetFlag(FLAGS_history);
  const bool ha = absl::GetFlag(FLAGS_ha);
  std::printf("chaos: seed %lu, %ld s, %s, %d workers, %d clients, faults %s\n  dir %s\n",
              static_cast<unsigned long>(seed), static_cast<long>(seconds),
              ha ? "3 HA masters on etcd" : "1 master", absl::GetFlag(FLAGS_workers),
              absl::GetFlag(FLAGS_clients), absl::StrJoin(kinds, ",").c_str(), dir.c_str());

  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  if (kinds.contains("disk_full") || kinds.contains("slow_disk")) {
    if (absl::Status s = DiskLab::EnterPrivateMountNamespace(); !s.ok()) {
      std::printf(
          "  note: the tier filesystem is mounted on the host (%s); a killed campaign "
          "leaves it mounted\n",
          std::string(s.message()).c_str());
    }
  }
  NetLab::SweepStale();
  DiskLab::SweepStale();
  const int masters = ha ? 3 : 1;
  absl::StatusOr<std::unique_ptr<NetLab>> net =
      NetLab::Create(masters + absl::GetFlag(FLAGS_workers));
  if (!net.ok()) {
    std::fprintf(stderr, "chaos: %s\n", net.status().ToString().c_str());
    return 2;
  }
  for (const char* k : {"delay", "loss", "reorder"}) {
    if (kinds.contains(k) && !(*net)->impairment().ok()) {
      std::printf("  SKIP %s: %s\n", k, std::string((*net)->impairment().message()).c_str());
      kinds.erase(k);
    }
  }
  if ((*net)->impairment().ok()) {
    std::printf("  delay, loss and reordering through %s\n", (*net)->impairer().c_str());
  }
  std::unique_ptr<DiskLab> disk;
  if (kinds.contains("disk_full") || kinds.contains("slow_disk")) {
    absl::StatusOr<std::unique_ptr<DiskLab>> d = DiskLab::Create(dir, 96 << 20);
    if (d.ok()) {
      disk = *std::move(d);
      if (kinds.contains("slow_disk")) {
        if (absl::Status s = disk->CanSlow(); !s.ok()) {
          std::printf("  SKIP slow_disk: %s\n", std::string(s.message()).c_str());
          kinds.erase("slow_disk");
        }
      }
    } else {
      std::printf("  SKIP disk_full, slow_disk: no tier filesystem: %s\n",
                  d.status().ToString().c_str());
      kinds.erase("disk_full");
      kinds.erase("slow_disk");
    }
  }
  absl::StatusOr<std::unique_ptr<HistoryWriter>> history = HistoryWriter::Open(history_path);
  if (!history.ok()) {
    std::fprintf(stderr, "chaos: %s\n", history.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<ChaosCluster>> cluster =
      ChaosCluster::Start({.store_binary = *binary,
                           .dir = dir,
                           .ha = ha,
                           .workers = absl::GetFlag(FLAGS_workers),
                           .ssd_dir = disk ? disk->mount() : ""},
                          net->get());
  if (!cluster.ok()) {
    std::fprintf(stderr, "chaos: cluster did not start: %s\n", cluster.status().ToString().c_str());
    return 2;
  }
  ChaosCluster& c = **cluster;
  const int64_t start_ns = NowNs();
  ChaosClients clients({.master = ha ? "" : c.master_rpc(),
                        .etcd = ha ? c.etcd_endpoint() : "",
                        .cluster = ChaosCluster::kCluster,
                        .clients = absl::GetFlag(FLAGS_clients),
                        .seed = seed},
                       history->get());
  if (absl::Status s = clients.Start(); !s.ok()) {
    std::fprintf(stderr, "chaos: clients: %s\n", s.ToString().c_str());
    return 2;
  }
  Campaign campaign(&c, net->get(), disk.get(), history->get(), seed);
  const std::vector<std::string> order(kinds.begin(), kinds.end());
  std::mt19937_64 schedule(seed ^ 0x5eed);
  const absl::Time end = absl::Now() + absl::Seconds(seconds);
  std::printf("faults:\n");
  absl::Status failure;
  campaign.Pause(absl::Seconds(2));
  while (!order.empty() && absl::Now() < end && !g_interrupted.load()) {
    const std::string& kind = order[schedule() % order.size()];
    absl::Status s = campaign.Inject(kind);
    if (!s.ok() && !absl::IsFailedPrecondition(s)) {
      failure = s;
      break;
    }
    campaign.Pause(absl::Milliseconds(300 + schedule() % 1700));
  }
  if (order.empty()) campaign.Pause(absl::Seconds(seconds));
  // Settle: every fault healed; let repair finish, then stop and verify.
  campaign.Pause(absl::Seconds(g_interrupted.load() ? 0 : 3));
  clients.RequestStop();
  const absl::Time give_up = absl::Now() + absl::Milliseconds(absl::GetFlag(FLAGS_op_deadline_ms));
  while (!clients.AllIdle() && absl::Now() < give_up) campaign.Pause(absl::Milliseconds(50));
  const int pending = clients.RecordPending();
  int unverified = 0;
  if (pending == 0 && failure.ok() && !g_interrupted.load()) {
    clients.Join();
    unverified = clients.Verify(absl::Now() + absl::Seconds(60));
  }
  campaign.Sample();
  const int64_t end_ns = NowNs();
  for (const auto& [name, p] : campaign.peaks()) {
    (*history)->Append({{"t", "rss"},
                        {"proc", name},
                        {"peak_kb", absl::StrCat(p.peak_kb)},
                        {"bound_kb", absl::StrCat(p.bound_kb)}});
  }
  (*history)->Append({{"t", "meta"},
                      {"seed", absl::StrCat(seed)},
                      {"deadline_ms", absl::StrCat(absl::GetFlag(FLAGS_op_deadline_ms))},
                      {"start_ns", absl::StrCat(start_ns)},
                      {"end_ns", absl::StrCat(end_ns)},
                      {"evictions", absl::StrCat(campaign.evictions())}});
  cluster->reset();  // kills every store process: a hung client's call fails now
  clients.Join();
  absl::StatusOr<std::vector<Record>> records = ReadHistory(history_path);
  if (!records.ok()) {
    std::fprintf(stderr, "chaos: %s\n", records.status().ToString().c_str());
    return 2;
  }
  const CheckReport report = CheckHistory(*records);
  std::printf("%s", FormatReport(report).c_str());
  std::printf(
      "history: %s\nreplay: chaos --seed=%lu --seconds=%ld --faults=%s --ha=%s "
      "--workers=%d --clients=%d\n",
      history_path.c_str(), static_cast<unsigned long>(seed), static_cast<long>(seconds),
      absl::GetFlag(FLAGS_faults).c_str(), ha ? "true" : "false", absl::GetFlag(FLAGS_workers),
      absl::GetFlag(FLAGS_clients));
  if (unverified > 0) {
    std::printf("FAIL: %d keys were not read back within 60 s after the campaign\n", unverified);
    return 1;
  }
  if (!failure.ok()) {
    std::printf("FAIL: the campaign stopped early: %s\n", failure.ToString().c_str());
    return 1;
  }
  std::printf("%s\n", report.Passed() ? "PASS" : "FAIL");
  if (report.Passed() && g_interrupted.load()) {
    std::printf("(interrupted: cleaned up; exit 130)\n");
    return 130;  // a cut-short campaign is no pass
  }
  return report.Passed() ? 0 : 1;
}

}  // namespace
}  // namespace mooncake::chaos

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return mooncake::chaos::Main();
}
