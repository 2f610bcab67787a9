// ChildProcess: a server the benchmark starts (memcached, redis-server, the
// mooncake store) and stops, plus loopback port helpers.
//
// The child's stdout and stderr go to a log file whose tail is quoted when it
// fails to start. The child gets PR_SET_PDEATHSIG(SIGKILL), so a benchmark
// killed mid-run leaves no server behind.
//
// Thread-safety: a ChildProcess is used by one thread (the benchmark's main).
#ifndef MOONCAKE_TOOLS_BENCH_CHILD_PROCESS_H_
#define MOONCAKE_TOOLS_BENCH_CHILD_PROCESS_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"

namespace mooncake::bench {

class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(ChildProcess&& o) noexcept
      : pid_(std::exchange(o.pid_, -1)),
        exit_status_(o.exit_status_),
        argv_(std::move(o.argv_)),
        log_path_(std::move(o.log_path_)) {}
  ChildProcess& operator=(ChildProcess&& o) noexcept {
    if (this != &o) {
      (void)Stop();
      pid_ = std::exchange(o.pid_, -1);
      exit_status_ = o.exit_status_;
      argv_ = std::move(o.argv_);
      log_path_ = std::move(o.log_path_);
    }
    return *this;
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { (void)Stop(); }

  // Starts argv[0] (a path, or a name looked up in PATH) with output to
  // `log_path`. NOT_FOUND if the program does not exist.
  static absl::StatusOr<ChildProcess> Spawn(std::vector<std::string> argv,
                                            const std::string& log_path) {
    MC_ASSERT(!argv.empty(), "a child needs a program");
    if (argv[0].find('/') != std::string::npos && access(argv[0].c_str(), X_OK) != 0) {
      return absl::NotFoundError(absl::StrCat(argv[0], " is not an executable file"));
    }
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
    if (pid == 0) ExecChild(argv, log_path, parent);  // never returns
    ChildProcess c;
    c.pid_ = pid;
    c.argv_ = std::move(argv);
    c.log_path_ = log_path;
    return c;
  }

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  std::string command() const { return absl::StrJoin(argv_, " "); }

  // False once the child has exited (reaps it).
  bool Running() {
    if (pid_ <= 0) return false;
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      exit_status_ = status;
      return false;
    }
    return true;
  }

  // Sends `sig` to the child if it has not been reaped (e.g. SIGTERM to ask
  // it to exit gracefully, leaving the reaping to WaitExit or Running).
  void Signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }

  // True once the child has exited (reaped) within `timeout`.
  bool WaitExit(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (Running()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return true;
  }

  // SIGKILL now, with no SIGTERM first (a crash, as a test of what survives
  // one), and reap; a stopped child too.
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    if (waitpid(pid_, &status, 0) == pid_) exit_status_ = status;
    pid_ = -1;
  }

  // SIGTERM, then SIGKILL after `grace`. OK if it had already exited.
  absl::Status Stop(absl::Duration grace = absl::Seconds(5)) {
    if (pid_ <= 0) return absl::OkStatus();
    kill(pid_, SIGTERM);
    const absl::Time deadline = absl::Now() + grace;
    while (Running()) {
      if (absl::Now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        pid_ = -1;
        return absl::DeadlineExceededError(absl::StrCat(argv_[0], " ignored SIGTERM; killed"));
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return absl::OkStatus();
  }

  // The last `max_bytes` of the child's log, for error messages.
  std::string LogTail(size_t max_bytes = 2000) const {
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    return s.size() > max_bytes ? s.substr(s.size() - max_bytes) : s;
  }

  // A message naming the command, how it ended, and its log's tail.
  std::string Describe() const {
    std::string how = "running";
    if (pid_ <= 0 && WIFEXITED(exit_status_)) {
      how = absl::StrCat("exited with status ", WEXITSTATUS(exit_status_));
    } else if (pid_ <= 0 && WIFSIGNALED(exit_status_)) {
      how = absl::StrCat("killed by signal ", WTERMSIG(exit_status_));
    }
    return absl::StrCat("`", command(), "` ", how, "; log ", log_path_, ":\n", LogTail());
  }

 private:
  [[noreturn]] static void ExecChild(const std::vector<std::string>& argv,
                                     const std::string& log_path, pid_t parent) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);  // the parent died before prctl
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }

  pid_t pid_ = -1;
  int exit_status_ = 0;
  std::vector<std::string> argv_;
  std::string log_path_;
};

// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read
// it, close). Another process may take it before the server binds; callers
// retry on a failed start.
inline absl::StatusOr<int> FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("no free loopback port: ", std::strerror(err)));
  }
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

// True if something accepts TCP connections on 127.0.0.1:`port`.
inline bool LoopbackPortAccepts(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

// Waits until `child` accepts connections on `port`. UNAVAILABLE (with the
// child's log) if it exits first, DEADLINE_EXCEEDED after `timeout`.
inline absl::Status WaitForPort(ChildProcess& child, int port, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (!child.Running()) {
      return absl::UnavailableError(absl::StrCat("server exited: ", child.Describe()));
    }
    if (LoopbackPortAccepts(port)) return absl::OkStatus();
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("server did not listen on port ", port, ": ", child.Describe()));
}

}  // namespace mooncake::bench

#endif  // MOONCAKE_TOOLS_BENCH_CHILD_PROCESS_H_
