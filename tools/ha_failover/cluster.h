// HaCluster: a whole metadata-HA store on one machine for the failover
// campaign (ha_failover.cc): its own etcd (ha::EtcdProcess), N HA masters
// (`mooncake_store --role=master --ha_etcd=...`) and M workers that follow the
// leader (`--role=worker --master=etcd://...`), every one on free loopback
// ports, each process's output in <dir>/<name>.log.
//
// Masters are addressed by index; KillMaster/RestartMaster replace one
// process at that index with a new one of the same flags (a new standby).
// The leader is whatever etcd's leader key names (ha::ReadLeader).
//
// Children are tools/bench's ChildProcess (PR_SET_PDEATHSIG(SIGKILL), so a
// campaign that dies leaves nothing behind); the destructor SIGKILLs and reaps
// every child (etcd last), stopped ones included.
//
// Thread-safety: one owning thread.
#ifndef MOONCAKE_TOOLS_HA_FAILOVER_CLUSTER_H_
#define MOONCAKE_TOOLS_HA_FAILOVER_CLUSTER_H_

#include <signal.h>

#include <cstdint>
#include <memory>
#include <optional>
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
#include "mooncake/store/ha/election.h"
#include "mooncake/store/ha/etcd_client.h"
#include "mooncake/store/ha/testing/etcd_process.h"
#include "tools/bench/child_process.h"
#include "tools/bench/servers.h"
#include "tools/bench/text_query.h"

namespace mooncake::ha_failover {

struct ClusterOptions {
  std::string store_binary;  // tools/mooncake_store
  std::string dir;           // logs and ready files; must exist
  std::string cluster = "ha_failover";
  int masters = 3;
  int workers = 3;
  int64_t lease_ttl_ms = 1000;
  std::string segment_bytes = "64M";
  absl::Duration start_timeout = absl::Seconds(30);
};

class HaCluster {
 public:
  HaCluster(const HaCluster&) = delete;
  HaCluster& operator=(const HaCluster&) = delete;
  ~HaCluster() {
    for (auto& n : workers_) n->node.process.Kill();
    for (auto& n : masters_) n->node.process.Kill();
    workers_.clear();
    masters_.clear();
    etcd_.reset();
  }

  static absl::StatusOr<std::unique_ptr<HaCluster>> Start(ClusterOptions options) {
    MC_ASSERT(options.masters >= 1 && options.workers >= 1, "a cluster needs both roles");
    std::unique_ptr<HaCluster> c(new HaCluster(std::move(options)));
    ASSIGN_OR_RETURN(c->etcd_, ha::EtcdProcess::Start());
    ASSIGN_OR_RETURN(
        ha::EtcdClient etcd,
        ha::EtcdClient::Create(c->etcd_->endpoint(), {.timeout = absl::Milliseconds(500)}));
    c->etcd_client_.emplace(std::move(etcd));
    for (int i = 0; i < c->options_.masters; ++i) {
      c->masters_.push_back(std::make_unique<Node>());
      RETURN_IF_ERROR(c->StartMaster(i));
    }
    RETURN_IF_ERROR(c->WaitLeader(-1, absl::Seconds(15)).status());
    for (int i = 0; i < c->options_.workers; ++i) {
      c->workers_.push_back(std::make_unique<Node>());
      RETURN_IF_ERROR(c->StartWorker(i));
    }
    return c;
  }

  std::string etcd_endpoint() const { return etcd_->endpoint(); }
  const ha::EtcdClient& etcd() const { return *etcd_client_; }
  const std::string& cluster() const { return options_.cluster; }
  int masters() const { return options_.masters; }

  // The index of the master etcd names leader; -1 when none is named or the
  // named address is none of the running masters'.
  absl::StatusOr<int> LeaderIndex() {
    ASSIGN_OR_RETURN(std::optional<ha::LeaderInfo> l, ha::ReadLeader(*etcd_client_, cluster()));
    if (!l.has_value()) return -1;
    for (int i = 0; i < masters(); ++i) {
      if (masters_[i]->node.rpc == l->id && masters_[i]->node.process.Running()) return i;
    }
    return -1;
  }

  // Waits until a running master other than `not_this` (-1: any) leads.
  absl::StatusOr<int> WaitLeader(int not_this, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    absl::Status last;
    while (absl::Now() < deadline) {
      absl::StatusOr<int> i = LeaderIndex();
      if (i.ok() && *i >= 0 && *i != not_this) return *i;
      if (!i.ok()) last = i.status();
      absl::SleepFor(absl::Milliseconds(5));
    }
    return absl::DeadlineExceededError(absl::StrCat("no new leader of HA cluster '", cluster(),
                                                    "' within ", absl::FormatDuration(timeout),
                                                    " (last etcd error: ", last.ToString(), ")"));
  }

  // Signals master `i` (SIGSTOP and SIGCONT too); SIGKILL also reaps it.
  void SignalMaster(int i, int sig) {
    bench::ChildProcess& c = masters_[i]->node.process;
    if (sig == SIGKILL) {
      c.Kill();  // a stopped process too
    } else if (c.pid() > 0) {
      ::kill(c.pid(), sig);
    }
  }
  bool WaitMasterExit(int i, absl::Duration timeout) {
    return masters_[i]->node.process.WaitExit(timeout);
  }

  // The RPC address master `i` advertises (its candidate id in etcd).
  const std::string& MasterRpc(int i) const { return masters_[i]->node.rpc; }

  // Metric `name` on master `i`'s /metrics (its http address from its ready
  // file); UNAVAILABLE or DEADLINE_EXCEEDED when it does not answer.
  absl::StatusOr<double> MasterMetric(int i, std::string_view name) const {
    ASSIGN_OR_RETURN(std::string text, bench::HttpGet(masters_[i]->node.http, "/metrics"));
    return bench::PrometheusValue(text, name);
  }

  // Starts master `i` again (same flags; a new standby, or the leader if none
  // is left); returns once it is serving (its ready file is written).
  absl::Status RestartMaster(int i) {
    MC_ASSERT(!masters_[i]->node.process.Running(), "restart of a running master");
    return StartMaster(i);
  }

  // Every process that should be running is; else a message naming the dead.
  absl::Status CheckAlive() {
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (!workers_[i]->node.process.Running()) {
        return absl::InternalError(
            absl::StrCat("worker ", i, " exited: ", workers_[i]->node.process.Describe()));
      }
    }
    return absl::OkStatus();
  }

  std::string MasterLogTail(int i) const { return masters_[i]->node.process.LogTail(); }

 private:
  struct Node {
    bench::StoreNode node;  // its process, and its rpc and http addresses
    int generation = 0;     // restarts so far (names its log and ready file)
  };

  explicit HaCluster(ClusterOptions options) : options_(std::move(options)) {}

  absl::Status StartMaster(int i) {
    Node& n = *masters_[i];
    const std::string name = absl::StrCat("master", i, ".", n.generation++);
    return StartNode(
        n, name,
        {"--role=master", "--listen=127.0.0.1:0", absl::StrCat("--ha_etcd=", etcd_->endpoint()),
         absl::StrCat("--ha_cluster=", cluster()),
         absl::StrCat("--ha_lease_ttl_ms=", options_.lease_ttl_ms)});
  }

  absl::Status StartWorker(int i) {
    Node& n = *workers_[i];
    return StartNode(
        n, absl::StrCat("worker", i),
        {"--role=worker",
         absl::StrCat("--master=etcd://127.0.0.1:", etcd_->client_port(), "/", cluster()),
         absl::StrCat("--segment_bytes=", options_.segment_bytes), "--reserve_memory=false"});
  }

  absl::Status StartNode(Node& n, const std::string& name, std::vector<std::string> flags) {
    const std::string base = absl::StrCat(options_.dir, "/", name);
    ASSIGN_OR_RETURN(n.node, bench::StartStoreNode({.binary = options_.store_binary,
                                                    .flags = std::move(flags),
                                                    .ready_file = base + ".ready",
                                                    .log = base + ".log",
                                                    .name = name,
                                                    .timeout = options_.start_timeout}));
    return absl::OkStatus();
  }

  ClusterOptions options_;
  std::unique_ptr<ha::EtcdProcess> etcd_;
  std::optional<ha::EtcdClient> etcd_client_;
  std::vector<std::unique_ptr<Node>> masters_;
  std::vector<std::unique_ptr<Node>> workers_;
};

}  // namespace mooncake::ha_failover

#endif  // MOONCAKE_TOOLS_HA_FAILOVER_CLUSTER_H_
