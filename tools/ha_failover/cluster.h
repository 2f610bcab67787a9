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
// Every child gets PR_SET_PDEATHSIG(SIGKILL), so a campaign that dies leaves
// nothing behind; the destructor kills and reaps every child (etcd last).
//
// Thread-safety: one owning thread.
#ifndef MOONCAKE_TOOLS_HA_FAILOVER_CLUSTER_H_
#define MOONCAKE_TOOLS_HA_FAILOVER_CLUSTER_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
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

namespace mooncake::ha_failover {

// One child process with its output in a log file. tools/bench/child_process.h
// has the same shape but is visible to //tools only.
class Child {
 public:
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() { Kill(SIGKILL); }

  absl::Status Spawn(const std::vector<std::string>& argv, const std::string& log) {
    MC_ASSERT(pid_ <= 0, "Spawn over a running child");
    MC_ASSERT(!argv.empty(), "a child needs a program");
    if (access(argv[0].c_str(), X_OK) != 0) {
      return absl::NotFoundError(absl::StrCat(argv[0], " is not an executable file"));
    }
    log_ = log;
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
    if (pid == 0) Exec(argv, log, parent);  // never returns
    pid_ = pid;
    return absl::OkStatus();
  }

  pid_t pid() const { return pid_; }

  // False once it has exited (reaps it).
  bool Running() {
    if (pid_ <= 0) return false;
    if (waitpid(pid_, &status_, WNOHANG) == pid_) pid_ = -1;
    return pid_ > 0;
  }

  // Sends `sig`; with SIGKILL also reaps (the process is gone on return).
  void Kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    if (sig == SIGKILL) {
      while (waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
    }
  }

  // Waits for the exit; false (still running) after `timeout`.
  bool WaitExit(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (Running()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return true;
  }

  int exit_status() const { return status_; }

  std::string LogTail(size_t max_bytes = 1500) const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    return s.size() > max_bytes ? s.substr(s.size() - max_bytes) : s;
  }

 private:
  [[noreturn]] static void Exec(const std::vector<std::string>& argv, const std::string& log,
                                pid_t parent) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);  // the parent died before prctl
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }

  pid_t pid_ = -1;
  int status_ = 0;
  std::string log_;
};

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
  const std::string& cluster() const { return options_.cluster; }
  int masters() const { return options_.masters; }

  // The index of the master etcd names leader; -1 when none is named or the
  // named address is none of the running masters'.
  absl::StatusOr<int> LeaderIndex() {
    ASSIGN_OR_RETURN(std::optional<ha::LeaderInfo> l, ha::ReadLeader(*etcd_client_, cluster()));
    if (!l.has_value()) return -1;
    for (int i = 0; i < masters(); ++i) {
      if (masters_[i]->rpc == l->id && masters_[i]->child.Running()) return i;
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

  // Signals master `i`; SIGKILL also reaps it.
  void SignalMaster(int i, int sig) { masters_[i]->child.Kill(sig); }
  bool WaitMasterExit(int i, absl::Duration timeout) {
    return masters_[i]->child.WaitExit(timeout);
  }
  int MasterExitStatus(int i) const { return masters_[i]->child.exit_status(); }

  // Starts master `i` again (same flags; a new standby, or the leader if none
  // is left); returns once it is serving (its ready file is written).
  absl::Status RestartMaster(int i) {
    MC_ASSERT(!masters_[i]->child.Running(), "restart of a running master");
    return StartMaster(i);
  }

  // Every process that should be running is; else a message naming the dead.
  absl::Status CheckAlive() {
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (!workers_[i]->child.Running()) {
        return absl::InternalError(absl::StrCat("worker ", i, " exited (status ",
                                                workers_[i]->child.exit_status(), "):\n",
                                                workers_[i]->child.LogTail()));
      }
    }
    return absl::OkStatus();
  }

  std::string MasterLogTail(int i) const { return masters_[i]->child.LogTail(); }

 private:
  struct Node {
    Child child;
    std::string rpc;  // the master's RPC address (empty for a worker)
    int generation = 0;
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
    const std::string ready = absl::StrCat(options_.dir, "/", name, ".ready");
    std::remove(ready.c_str());
    std::vector<std::string> argv = {options_.store_binary, "--http=127.0.0.1:0",
                                     "--status_interval=0", absl::StrCat("--ready_file=", ready)};
    argv.insert(argv.end(), flags.begin(), flags.end());
    RETURN_IF_ERROR(n.child.Spawn(argv, absl::StrCat(options_.dir, "/", name, ".log")));
    const absl::Time deadline = absl::Now() + options_.start_timeout;
    while (absl::Now() < deadline) {
      if (!n.child.Running()) {
        return absl::UnavailableError(absl::StrCat(name, " exited (status ", n.child.exit_status(),
                                                   "):\n", n.child.LogTail()));
      }
      std::map<std::string, std::string> kv = ReadReadyFile(ready);
      if (kv.contains("pid")) {
        n.rpc = kv["rpc"];
        return absl::OkStatus();
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return absl::DeadlineExceededError(absl::StrCat(name, " wrote no ready file in ",
                                                    absl::FormatDuration(options_.start_timeout),
                                                    ":\n", n.child.LogTail()));
  }

  // The "key=value" lines of a store's ready file (written atomically).
  static std::map<std::string, std::string> ReadReadyFile(const std::string& path) {
    std::ifstream in(path);
    std::map<std::string, std::string> kv;
    for (std::string line; std::getline(in, line);) {
      const size_t eq = line.find('=');
      if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return kv;
  }

  ClusterOptions options_;
  std::unique_ptr<ha::EtcdProcess> etcd_;
  std::optional<ha::EtcdClient> etcd_client_;
  std::vector<std::unique_ptr<Node>> masters_;
  std::vector<std::unique_ptr<Node>> workers_;
};

}  // namespace mooncake::ha_failover

#endif  // MOONCAKE_TOOLS_HA_FAILOVER_CLUSTER_H_
