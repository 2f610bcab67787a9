// ChaosCluster: the store the chaos campaign attacks. Every store process
// (tools/mooncake_store) runs in a network namespace of its own (NetLab), so
// its links can be cut or degraded; etcd (with --ha) and the campaign's
// clients run in the root namespace, on the bridge's address.
//
// - One master (`--role=master`), or with `ha` 3 masters on an etcd the
//   cluster starts (`--ha_etcd`, the leader named in etcd).
// - `workers` workers (`--role=worker`), each with its own --host_id (so the
//   clients read over TCP, through the faults, never over SHM); worker 0's
//   SSD tier file lives on DiskLab's filesystem when one is given.
// - Every node listens on fixed ports of its namespace's address (RPC 7000,
//   HTTP 7001), so a restarted master is found where it was.
// - Masters default to `replicas` copies per object and repair within
//   `repair_within_ms` (the campaign's model, docs/chaos.md).
//
// Children are tools/bench's ChildProcess (PR_SET_PDEATHSIG(SIGKILL)); the
// destructor SIGKILLs and reaps every child, stopped ones too (SIGCONT first).
//
// Thread-safety: one owning thread.
#ifndef MOONCAKE_TOOLS_CHAOS_CLUSTER_H_
#define MOONCAKE_TOOLS_CHAOS_CLUSTER_H_

#include <signal.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/status_macros.h"
#include "tools/bench/child_process.h"
#include "tools/bench/servers.h"
#include "tools/bench/text_query.h"
#include "tools/chaos/netlab.h"

namespace mooncake::chaos {

inline constexpr int kRpcPort = 7000;
inline constexpr int kHttpPort = 7001;

struct ClusterOptions {
  std::string store_binary;
  std::string dir;  // logs, ready files, etcd's data
  bool ha = false;
  int workers = 3;
  int replicas = 2;
  int64_t repair_within_ms = 3000;
  std::string segment_bytes = "64M";
  std::string ssd_dir;  // worker 0's tier lives here; "" = no tier
  std::string ssd_bytes = "64M";
};

// One store process: its place in the NetLab and its current incarnation.
struct Proc {
  std::string name;  // "master0", "worker2"
  bool master = false;
  int net = 0;  // NetLab node index
  int generation = 0;
  bool stopped = false;
  bench::StoreNode node;
  bool Running() { return node.process.Running(); }
  pid_t pid() const { return node.process.pid(); }
};

class ChaosCluster {
 public:
  ChaosCluster(const ChaosCluster&) = delete;
  ChaosCluster& operator=(const ChaosCluster&) = delete;
  ~ChaosCluster() {
    for (auto& p : procs_) Kill(*p);
    if (etcd_.pid() > 0) {
      etcd_.Signal(SIGCONT);
      etcd_.Kill();
    }
  }

  static absl::StatusOr<std::unique_ptr<ChaosCluster>> Start(ClusterOptions o, NetLab* net) {
    MC_ASSERT(o.workers >= 1, "a cluster needs workers");
    std::unique_ptr<ChaosCluster> c(new ChaosCluster(std::move(o), net));
    const int masters = c->options_.ha ? 3 : 1;
    if (c->options_.ha) RETURN_IF_ERROR(c->StartEtcd());
    for (int i = 0; i < masters + c->options_.workers; ++i) {
      auto p = std::make_unique<Proc>();
      p->master = i < masters;
      p->name = p->master ? absl::StrCat("master", i) : absl::StrCat("worker", i - masters);
      p->net = i;
      c->procs_.push_back(std::move(p));
    }
    for (auto& p : c->procs_) {
      RETURN_IF_ERROR(c->Launch(*p));
      if (p->master && c->options_.ha && p->net == 0) {
        absl::SleepFor(absl::Milliseconds(500));  // the first master leads: faster start
      }
    }
    return c;
  }

  std::vector<std::unique_ptr<Proc>>& procs() { return procs_; }
  Proc& worker(int i) { return *procs_[masters() + i]; }
  int masters() const { return options_.ha ? 3 : 1; }
  bool ha() const { return options_.ha; }
  bench::ChildProcess& etcd() { return etcd_; }
  std::string etcd_endpoint() const {
    return absl::StrCat("http://", net_->RootAddress(), ":", etcd_port_);
  }
  static constexpr const char* kCluster = "chaos";
  // The single master's RPC address (without --ha).
  std::string master_rpc() const { return absl::StrCat(net_->Address(0), ":", kRpcPort); }
  std::string Address(const Proc& p) const { return net_->Address(p.net); }

  void Kill(Proc& p) {
    if (p.pid() > 0) ::kill(p.pid(), SIGCONT);
    p.node.process.Kill();
    p.stopped = false;
  }
  void Stop(Proc& p) {
    if (p.pid() > 0) ::kill(p.pid(), SIGSTOP);
    p.stopped = true;
  }
  void Cont(Proc& p) {
    if (p.pid() > 0) ::kill(p.pid(), SIGCONT);
    p.stopped = false;
  }
  // Starts `p` again (same flags and addresses); it must not be running.
  absl::Status Restart(Proc& p) {
    MC_ASSERT(!p.Running(), "restart of a running process");
    return Launch(p);
  }

  // Metric `name` on `p`'s /metrics.
  absl::StatusOr<double> Metric(const Proc& p, std::string_view name) const {
    ASSIGN_OR_RETURN(std::string text, bench::HttpGet(p.node.http, "/metrics"));
    return bench::PrometheusValue(text, name);
  }

 private:
  ChaosCluster(ClusterOptions o, NetLab* net) : options_(std::move(o)), net_(net) {}

  absl::Status StartEtcd() {
    const std::string host = net_->RootAddress();
    absl::Status last;
    for (int attempt = 0; attempt < bench::kStartAttempts; ++attempt) {
      ASSIGN_OR_RETURN(etcd_port_, bench::FreeLoopbackPort());
      ASSIGN_OR_RETURN(int peer_port, bench::FreeLoopbackPort());
      const std::string client = absl::StrCat("http://", host, ":", etcd_port_);
      const std::string peer = absl::StrCat("http://127.0.0.1:", peer_port);
      ASSIGN_OR_RETURN(etcd_, bench::ChildProcess::Spawn(
                                  {"etcd", "--name=chaos",
                                   absl::StrCat("--data-dir=", options_.dir, "/etcd.", attempt),
                                   absl::StrCat("--listen-client-urls=", client),
                                   absl::StrCat("--advertise-client-urls=", client),
                                   absl::StrCat("--listen-peer-urls=", peer),
                                   absl::StrCat("--initial-advertise-peer-urls=", peer),
                                   absl::StrCat("--initial-cluster=chaos=", peer),
                                   "--election-timeout=500", "--heartbeat-interval=100",
                                   // etcd keeps the raft entries since its last snapshot in
                                   // memory (default 100,000: oplog batches of KiBs each
                                   // reach ~500 MiB in 20 minutes); snapshot every 10,000.
                                   "--snapshot-count=10000"},
                                  options_.dir + "/etcd.log"));
      const absl::Time deadline = absl::Now() + absl::Seconds(20);
      while (absl::Now() < deadline && etcd_.Running()) {
        absl::StatusOr<std::string> h =
            bench::HttpGet(absl::StrCat(host, ":", etcd_port_), "/health");
        if (h.ok() && h->find("true") != std::string::npos) return absl::OkStatus();
        absl::SleepFor(absl::Milliseconds(50));
      }
      last = absl::UnavailableError(absl::StrCat("etcd did not start: ", etcd_.Describe()));
      etcd_.Kill();
    }
    return last;
  }

  std::vector<std::string> Flags(const Proc& p) const {
    const std::string addr = net_->Address(p.net);
    std::vector<std::string> f = {absl::StrCat("--http=", addr, ":", kHttpPort),
                                  "--log_timestamps=true"};
    const std::string leader =
        absl::StrCat("etcd://", net_->RootAddress(), ":", etcd_port_, "/", kCluster);
    if (p.master) {
      f.push_back("--role=master");
      f.push_back(absl::StrCat("--listen=", addr, ":", kRpcPort));
      f.push_back(absl::StrCat("--replicas=", options_.replicas));
      f.push_back(absl::StrCat("--repair_within_ms=", options_.repair_within_ms));
      if (options_.ha) {
        f.push_back(absl::StrCat("--ha_etcd=", etcd_endpoint()));
        f.push_back(absl::StrCat("--ha_cluster=", kCluster));
        f.push_back("--ha_lease_ttl_ms=1000");
      }
      return f;
    }
    f.push_back("--role=worker");
    f.push_back(absl::StrCat("--master=", options_.ha ? leader : master_rpc()));
    f.push_back(absl::StrCat("--segment_bytes=", options_.segment_bytes));
    f.push_back("--reserve_memory=false");
    f.push_back(absl::StrCat("--worker_host=", addr));
    f.push_back(absl::StrCat("--host_id=chaos-", p.name));
    if (p.name == "worker0" && !options_.ssd_dir.empty()) {
      f.push_back(absl::StrCat("--ssd_path=", options_.ssd_dir, "/tier"));
      f.push_back(absl::StrCat("--ssd_bytes=", options_.ssd_bytes));
    }
    return f;
  }

  absl::Status Launch(Proc& p) {
    const std::string base = absl::StrCat(options_.dir, "/", p.name, ".", p.generation++);
    ASSIGN_OR_RETURN(p.node, bench::StartStoreNode({.binary = options_.store_binary,
                                                    .flags = Flags(p),
                                                    .ready_file = base + ".ready",
                                                    .log = base + ".log",
                                                    .name = p.name,
                                                    .prefix = net_->ExecPrefix(p.net),
                                                    .timeout = absl::Seconds(30)}));
    p.stopped = false;
    return absl::OkStatus();
  }

  ClusterOptions options_;
  NetLab* net_;
  bench::ChildProcess etcd_;
  int etcd_port_ = 0;
  std::vector<std::unique_ptr<Proc>> procs_;
};

}  // namespace mooncake::chaos

#endif  // MOONCAKE_TOOLS_CHAOS_CLUSTER_H_
