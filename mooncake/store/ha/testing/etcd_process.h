// EtcdProcess: a real single-member etcd for tests, on two free loopback
// ports (client and peer) with a fresh data directory.
//
//   absl::StatusOr<std::unique_ptr<EtcdProcess>> etcd = EtcdProcess::Start();
//   if (absl::IsFailedPrecondition(etcd.status())) GTEST_SKIP() << etcd.status();
//   ASSERT_TRUE(etcd.ok()) << etcd.status();
//   ... EtcdClient::Create((*etcd)->endpoint()) ...
//
// etcd runs with --election-timeout=500 --heartbeat-interval=100, so its
// minimum lease TTL (1.5 x election timeout) is 1 s. Start and Restart return
// once a Range through the JSON gateway succeeds (at most 10 s). The child
// gets PR_SET_PDEATHSIG(SIGKILL), so a test that dies leaves no etcd behind;
// the destructor SIGKILLs it, reaps it and removes the directory.
//
// Errors: FAILED_PRECONDITION when no etcd binary exists (PATH, /usr/bin/etcd):
// tests skip with that message. UNAVAILABLE (with etcd's log tail) when etcd
// exits or does not answer in time.
//
// The free port is found by binding port 0 and closing it (base's ListenTcp),
// so another process may take it before etcd binds: Start retries 3 times.
// tools/bench/child_process.h has a general ChildProcess, but it is private to
// //tools; this is the small fork/exec etcd needs.
//
// Thread-safety: one owning thread; endpoint() from any thread.
#ifndef MOONCAKE_STORE_HA_TESTING_ETCD_PROCESS_H_
#define MOONCAKE_STORE_HA_TESTING_ETCD_PROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/tcp_listen.h"
#include "mooncake/store/ha/etcd_client.h"

namespace mooncake::ha {

class EtcdProcess {
 public:
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;
  ~EtcdProcess() {
    Kill();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  static absl::StatusOr<std::unique_ptr<EtcdProcess>> Start() {
    absl::StatusOr<std::string> binary = FindEtcd();
    if (!binary.ok()) return binary.status();
    absl::Status last;
    for (int attempt = 0; attempt < 3; ++attempt) {
      std::unique_ptr<EtcdProcess> p(new EtcdProcess());
      p->binary_ = *binary;
      RETURN_IF_ERROR(p->MakeDir());
      absl::StatusOr<uint16_t> client = FreePort();
      absl::StatusOr<uint16_t> peer = FreePort();
      if (!client.ok()) return client.status();
      if (!peer.ok()) return peer.status();
      if (*client == *peer) continue;
      p->client_port_ = *client;
      p->peer_port_ = *peer;
      last = p->Launch();
      if (last.ok()) return p;
    }
    return last;
  }

  // "http://127.0.0.1:PORT", the client URL.
  std::string endpoint() const { return absl::StrCat("http://127.0.0.1:", client_port_); }
  uint16_t client_port() const { return client_port_; }
  pid_t pid() const { return pid_; }

  // SIGKILL and reap; the data directory stays for Restart.
  void Stop() { Kill(); }
  // SIGSTOP / SIGCONT: the ports stay open but nothing answers. Pause returns
  // once every thread has stopped (kill() only queues the signal; a thread on
  // another CPU could still answer a request sent right after it).
  void Pause() {
    MC_ASSERT(pid_ > 0, "Pause needs a running etcd");
    ::kill(pid_, SIGSTOP);
    int status = 0;
    pid_t r;
    do {
      r = ::waitpid(pid_, &status, WUNTRACED);
    } while (r < 0 && errno == EINTR);
    MC_ASSERT(r == pid_ && WIFSTOPPED(status), "etcd did not stop on SIGSTOP");
  }
  void Resume() {
    MC_ASSERT(pid_ > 0, "Resume needs a running etcd");
    ::kill(pid_, SIGCONT);
  }
  // Stop, then start again on the same ports and data directory.
  absl::Status Restart() {
    Kill();
    return Launch();
  }

  std::string LogTail(size_t max_bytes = 2000) const {
    std::ifstream in(log_path());
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    return s.size() > max_bytes ? s.substr(s.size() - max_bytes) : s;
  }

 private:
  EtcdProcess() = default;

  static absl::StatusOr<std::string> FindEtcd() {
    std::vector<std::string> dirs;
    if (const char* path = getenv("PATH"); path != nullptr) {
      dirs = absl::StrSplit(path, ':', absl::SkipEmpty());
    }
    dirs.push_back("/usr/bin");
    for (const std::string& d : dirs) {
      const std::string candidate = absl::StrCat(d, "/etcd");
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    return absl::FailedPreconditionError(
        "no etcd binary on PATH or at /usr/bin/etcd (Debian: apt-get install etcd-server)");
  }

  static absl::StatusOr<uint16_t> FreePort() {
    absl::StatusOr<TcpListener> l = ListenTcp({"127.0.0.1", 0});
    if (!l.ok()) return l.status();
    return l->port;  // closed on return
  }

  absl::Status MakeDir() {
    const char* tmp = getenv("TEST_TMPDIR");
    std::string pattern = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/etcd_process.XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("mkdtemp ", pattern, ": ", strerror(errno)));
    }
    dir_ = pattern;
    return absl::OkStatus();
  }

  std::string log_path() const { return absl::StrCat(dir_, "/etcd.log"); }

  absl::Status Launch() {
    MC_ASSERT(pid_ <= 0, "Launch over a running etcd");
    const std::string client = endpoint();
    const std::string peer = absl::StrCat("http://127.0.0.1:", peer_port_);
    const std::vector<std::string> argv = {
        binary_,
        "--name=default",
        absl::StrCat("--data-dir=", dir_, "/data"),
        absl::StrCat("--listen-client-urls=", client),
        absl::StrCat("--advertise-client-urls=", client),
        absl::StrCat("--listen-peer-urls=", peer),
        absl::StrCat("--initial-advertise-peer-urls=", peer),
        absl::StrCat("--initial-cluster=default=", peer),
        "--election-timeout=500",
        "--heartbeat-interval=100",
    };
    const std::string log = log_path();
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
    if (pid == 0) Exec(argv, log, parent);  // never returns
    pid_ = pid;
    return WaitReady();
  }

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
    std::fprintf(stderr, "exec %s: %s\n", args[0], strerror(errno));
    _exit(127);
  }

  absl::Status WaitReady() {
    absl::StatusOr<EtcdClient> c =
        EtcdClient::Create(endpoint(), {.timeout = absl::Milliseconds(500)});
    MC_ASSERT(c.ok(), "our own endpoint parses");
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    absl::Status last;
    while (absl::Now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return absl::UnavailableError(
            absl::StrCat("etcd exited (status ", status, "); log:\n", LogTail()));
      }
      absl::StatusOr<EtcdRange> r = c->Range("/etcd_process/probe");
      if (r.ok()) return absl::OkStatus();
      last = r.status();
      absl::SleepFor(absl::Milliseconds(20));
    }
    Kill();
    return absl::UnavailableError(
        absl::StrCat("etcd did not answer in 10 s (", last.ToString(), "); log:\n", LogTail()));
  }

  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

  std::string binary_;
  std::string dir_;
  uint16_t client_port_ = 0;
  uint16_t peer_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace mooncake::ha

#endif  // MOONCAKE_STORE_HA_TESTING_ETCD_PROCESS_H_
