// StoreCluster: one master and N workers of tools/mooncake_store, each its own
// process with its output in <dir>/<name>.log, for elastic_bench's scenarios.
//
// Workers run on loopback, or each in a network namespace of NetnsHosts (the
// master then listens on 0.0.0.0 and worker i joins it through its veth's
// root-side address, advertising its namespace address). Start returns once
// the master counts every worker live (mooncake_master_workers).
//
// Thread-safety: one owning thread; MasterMetrics may be called from any.
#ifndef MOONCAKE_TOOLS_ELASTIC_BENCH_CLUSTER_H_
#define MOONCAKE_TOOLS_ELASTIC_BENCH_CLUSTER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/status_macros.h"
#include "tools/bench/child_process.h"
#include "tools/bench/servers.h"
#include "tools/bench/text_query.h"
#include "tools/elastic_bench/netns.h"

namespace mooncake::elastic_bench {

struct ClusterOptions {
  std::string store_binary;  // tools/mooncake_store
  std::string dir;           // logs and ready files; must exist
  std::string name;          // prefix of the log names
  int workers = 4;
  std::string segment_bytes = "256M";
  std::vector<std::string> master_flags;        // appended to the master's
  std::vector<std::string> worker_flags;        // appended to every worker's
  const std::vector<NetHost>* hosts = nullptr;  // non-null: worker i in hosts[i]
  absl::Duration start_timeout = absl::Seconds(30);
};

class StoreCluster {
 public:
  StoreCluster(const StoreCluster&) = delete;
  StoreCluster& operator=(const StoreCluster&) = delete;
  ~StoreCluster() {
    for (bench::StoreNode& w : workers_) w.process.Kill();
    master_.process.Kill();
  }

  static absl::StatusOr<std::unique_ptr<StoreCluster>> Start(ClusterOptions options) {
    MC_ASSERT(options.workers >= 1, "a cluster needs workers");
    MC_ASSERT(
        options.hosts == nullptr || static_cast<int>(options.hosts->size()) >= options.workers,
        "a host per worker");
    std::unique_ptr<StoreCluster> c(new StoreCluster(std::move(options)));
    const ClusterOptions& o = c->options_;
    std::vector<std::string> m = {
        "--role=master", o.hosts != nullptr ? "--listen=0.0.0.0:0" : "--listen=127.0.0.1:0"};
    m.insert(m.end(), o.master_flags.begin(), o.master_flags.end());
    RETURN_IF_ERROR(c->StartNode(c->master_, "master", {}, std::move(m)));
    const std::optional<HostPortText> split = SplitHostPort(c->master_.rpc);
    if (!split) return absl::InternalError(absl::StrCat("master rpc ", c->master_.rpc));
    c->master_port_ = std::string(split->port);
    c->workers_.resize(o.workers);
    for (int i = 0; i < o.workers; ++i) RETURN_IF_ERROR(c->StartWorker(i));
    RETURN_IF_ERROR(c->WaitWorkers(o.workers, o.start_timeout));
    return c;
  }

  // Where a client in the root namespace reaches the master.
  std::string master_rpc() const { return absl::StrCat("127.0.0.1:", master_port_); }

  absl::StatusOr<std::string> MasterMetrics() const {
    return bench::HttpGet(master_.http, "/metrics");
  }

  // Waits until the master counts exactly `n` live workers.
  absl::Status WaitWorkers(int n, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      absl::StatusOr<std::string> text = MasterMetrics();
      if (text.ok() && bench::PrometheusValue(*text, "mooncake_master_workers").value_or(0) == n)
        return absl::OkStatus();
      if (!master_.process.Running()) {
        return absl::UnavailableError(absl::StrCat("master exited: ", master_.process.Describe()));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return absl::DeadlineExceededError(absl::StrCat("the master did not count ", n, " workers in ",
                                                    absl::FormatDuration(timeout),
                                                    "; master log:\n", master_.process.LogTail()));
  }

  bench::ChildProcess& worker(int i) { return workers_[i].process; }
  const std::string& worker_http(int i) const { return workers_[i].http; }
  int workers() const { return static_cast<int>(workers_.size()); }
  std::string WorkerLogTail(int i) const { return workers_[i].process.LogTail(); }

 private:
  explicit StoreCluster(ClusterOptions options) : options_(std::move(options)) {}

  absl::Status StartWorker(int i) {
    const ClusterOptions& o = options_;
    std::vector<std::string> prefix;
    std::vector<std::string> flags = {"--role=worker",
                                      absl::StrCat("--segment_bytes=", o.segment_bytes),
                                      "--reserve_memory=false"};
    if (o.hosts != nullptr) {
      const NetHost& h = (*o.hosts)[i];
      prefix = {"ip", "netns", "exec", h.ns};
      flags.push_back(absl::StrCat("--master=", h.root_addr, ":", master_port_));
      flags.push_back(absl::StrCat("--worker_host=", h.addr));
      flags.push_back(absl::StrCat("--host_id=", h.ns));
    } else {
      flags.push_back(absl::StrCat("--master=", master_rpc()));
      flags.push_back(absl::StrCat("--host_id=", o.name, "_w", i));
    }
    flags.insert(flags.end(), o.worker_flags.begin(), o.worker_flags.end());
    return StartNode(workers_[i], absl::StrCat("worker", i), std::move(prefix), std::move(flags));
  }

  absl::Status StartNode(bench::StoreNode& n, const std::string& role,
                         std::vector<std::string> prefix, std::vector<std::string> flags) {
    const std::string base = absl::StrCat(options_.dir, "/", options_.name, ".", role);
    ASSIGN_OR_RETURN(n, bench::StartStoreNode({.binary = options_.store_binary,
                                               .flags = std::move(flags),
                                               .ready_file = base + ".ready",
                                               .log = base + ".log",
                                               .name = role,
                                               .prefix = std::move(prefix),
                                               .timeout = options_.start_timeout}));
    return absl::OkStatus();
  }

  ClusterOptions options_;
  bench::StoreNode master_;
  std::string master_port_;
  std::vector<bench::StoreNode> workers_;
};

}  // namespace mooncake::elastic_bench

#endif  // MOONCAKE_TOOLS_ELASTIC_BENCH_CLUSTER_H_
