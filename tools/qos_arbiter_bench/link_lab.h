// LinkLab: two network namespaces joined by one or more veth pairs (links)
// whose both ends are shaped with `tc` (htb or tbf), so traffic between them
// crosses links of a known rate; each link has its own /24 and an address on
// each end. Plus the small process helpers the benchmarks need (run a
// command, start one inside a namespace and collect its stdout). Used by
// qos_arbiter_bench (one link) and link_aggregation_bench (several).
//
// Needs root (ip netns, tc). Names carry the creating pid, so concurrent
// labs do not collide; the destructor deletes both namespaces, which
// removes the veth pair and its qdiscs with them.
//
// Thread-safety: used by the benchmark's main thread only.
#ifndef MOONCAKE_TOOLS_QOS_ARBITER_BENCH_LINK_LAB_H_
#define MOONCAKE_TOOLS_QOS_ARBITER_BENCH_LINK_LAB_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mooncake/base/errno_status.h"

namespace mooncake::qos_bench {

// A child whose stdout (and stderr) we read through a pipe.
class Child {
 public:
  Child() = default;
  Child(Child&& o) noexcept
      : pid_(std::exchange(o.pid_, -1)), out_fd_(std::exchange(o.out_fd_, -1)) {}
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) ::close(out_fd_);
  }

  // Starts argv[0] (searched on PATH) with `argv`; it dies with us.
  static absl::StatusOr<Child> Start(const std::vector<std::string>& argv) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe2");
    const pid_t pid = ::fork();
    if (pid < 0) return ErrnoToStatus(errno, "fork");
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::dup2(fds[1], STDOUT_FILENO);
      ::dup2(fds[1], STDERR_FILENO);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      std::fprintf(stderr, "exec %s failed: %s\n", args[0], strerror(errno));
      ::_exit(127);
    }
    ::close(fds[1]);
    Child c;
    c.pid_ = pid;
    c.out_fd_ = fds[0];
    return c;
  }

  // Reads its output to EOF and reaps it: (exit status, output).
  std::pair<int, std::string> Finish() {
    std::string out;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(out_fd_, buf, sizeof(buf));
      if (n > 0) {
        out.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        break;
      }
    }
    int status = 0;
    ::waitpid(std::exchange(pid_, -1), &status, 0);
    const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return {rc, out};
  }

  void Terminate() {
    if (pid_ > 0) ::kill(pid_, SIGTERM);
  }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
};

// Runs a command to completion; its output is quoted when it fails.
inline absl::Status Run(const std::vector<std::string>& argv) {
  absl::StatusOr<Child> c = Child::Start(argv);
  if (!c.ok()) return c.status();
  auto [rc, out] = c->Finish();
  if (rc == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("`", absl::StrJoin(argv, " "), "` exited with ", rc, ": ", out));
}

struct LinkLabOptions {
  int rate_mbit = 1000;
  // "htb" (default: a single class at the rate), or "tbf". On a 2-vCPU VM
  // tbf with a burst below one read showed ~4 ms tail outliers even with no
  // load; htb did not.
  std::string shaper = "htb";
  std::string burst = "16kb";    // bucket: about 11 full-size packets
  std::string latency = "20ms";  // tbf only: queue bound (bytes = rate x latency)
  int links = 1;                 // veth pairs, in [1, 8]
};

class LinkLab {
 public:
  static absl::StatusOr<std::unique_ptr<LinkLab>> Create(const LinkLabOptions& o) {
    if (::geteuid() != 0) {
      return absl::PermissionDeniedError(
          "LinkLab must run as root: it creates network namespaces, veth pairs and tc qdiscs");
    }
    if (o.links < 1 || o.links > 8) return absl::InvalidArgumentError("links in [1, 8]");
    const int id = static_cast<int>(::getpid() % 100000);
    std::unique_ptr<LinkLab> lab(new LinkLab(id));
    std::vector<std::vector<std::string>> all = {
        {"ip", "netns", "add", lab->server_ns_},
        {"ip", "netns", "add", lab->client_ns_},
        {"ip", "-n", lab->server_ns_, "link", "set", "lo", "up"},
        {"ip", "-n", lab->client_ns_, "link", "set", "lo", "up"},
    };
    for (int i = 0; i < o.links; ++i) {
      // Link 0 keeps the names and subnet a one-link lab always had.
      const std::string suffix = i == 0 ? "" : absl::StrCat("l", i);
      const std::string subnet = absl::StrCat("10.", 213 + i, ".", id % 250, ".");
      const std::string vs = absl::StrCat("mcqs", id, suffix),
                        vc = absl::StrCat("mcqc", id, suffix);
      lab->server_ips_.push_back(subnet + "1");
      lab->client_ips_.push_back(subnet + "2");
      lab->server_devs_.push_back(vs);
      lab->client_devs_.push_back(vc);
      const std::vector<std::vector<std::string>> steps = {
          {"ip", "link", "add", vs, "netns", lab->server_ns_, "type", "veth", "peer", "name", vc,
           "netns", lab->client_ns_},
          {"ip", "-n", lab->server_ns_, "addr", "add", subnet + "1/24", "dev", vs},
          {"ip", "-n", lab->client_ns_, "addr", "add", subnet + "2/24", "dev", vc},
          {"ip", "-n", lab->server_ns_, "link", "set", vs, "up"},
          {"ip", "-n", lab->client_ns_, "link", "set", vc, "up"},
      };
      all.insert(all.end(), steps.begin(), steps.end());
      for (auto [ns, dev] : {std::pair(lab->server_ns_, vs), std::pair(lab->client_ns_, vc)}) {
        for (auto& c : Shape(ns, dev, o)) all.push_back(std::move(c));
      }
    }
    for (const auto& step : all) {
      if (absl::Status s = Run(step); !s.ok()) return s;
    }
    return lab;
  }

  LinkLab(const LinkLab&) = delete;
  LinkLab& operator=(const LinkLab&) = delete;
  ~LinkLab() {
    (void)Run({"ip", "netns", "del", server_ns_});
    (void)Run({"ip", "netns", "del", client_ns_});
  }

  // The commands that shape `dev`'s egress.
  static std::vector<std::vector<std::string>> Shape(const std::string& ns, const std::string& dev,
                                                     const LinkLabOptions& o) {
    const std::vector<std::string> tc = {"ip", "netns", "exec", ns, "tc"};
    auto cmd = [&](std::vector<std::string> rest) {
      std::vector<std::string> argv = tc;
      argv.insert(argv.end(), rest.begin(), rest.end());
      return argv;
    };
    const std::string rate = absl::StrCat(o.rate_mbit, "mbit");
    if (o.shaper == "tbf") {
      return {cmd({"qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", o.burst,
                   "latency", o.latency})};
    }
    // htb: one class holding all traffic; r2q keeps the quantum sane at
    // Gbit rates.
    return {cmd({"qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1", "r2q",
                 "1000"}),
            cmd({"class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", rate,
                 "burst", o.burst, "cburst", o.burst})};
  }

  // argv prefixed to run a command inside a namespace, at niceness `nice`
  // (negative: ahead of other work on the host, which on a small shared VM
  // is what makes tail latencies repeatable).
  static std::vector<std::string> In(const std::string& ns, std::vector<std::string> argv,
                                     int nice = 0) {
    std::vector<std::string> full = {"ip", "netns", "exec", ns, "nice", "-n", absl::StrCat(nice)};
    full.insert(full.end(), argv.begin(), argv.end());
    return full;
  }

  const std::string& server_ns() const { return server_ns_; }
  const std::string& client_ns() const { return client_ns_; }
  const std::string& server_ip() const { return server_ips_.front(); }
  // Per link: each end's address and interface.
  const std::vector<std::string>& server_ips() const { return server_ips_; }
  const std::vector<std::string>& client_ips() const { return client_ips_; }
  const std::vector<std::string>& server_devs() const { return server_devs_; }
  const std::vector<std::string>& client_devs() const { return client_devs_; }

 private:
  explicit LinkLab(int id)
      : server_ns_(absl::StrCat("mcqos_s", id)), client_ns_(absl::StrCat("mcqos_c", id)) {}

  std::string server_ns_, client_ns_;
  std::vector<std::string> server_ips_, client_ips_, server_devs_, client_devs_;
};

}  // namespace mooncake::qos_bench

#endif  // MOONCAKE_TOOLS_QOS_ARBITER_BENCH_LINK_LAB_H_
