// Where a benchmark phase's CPU went: the server process, the benchmark's own
// process (its client threads), and the machine's idle and stolen time, from
// /proc (Linux).
//
// On a small machine the systems compared share their cores with the
// clients that drive them, so a throughput figure alone does not say whether
// a system ran out of CPU (both cores busy), left cores idle (a single thread
// or a wake-up chain was the limit), or lost time to the hypervisor (steal).
// mooncake_bench samples these at the start and end of every phase and
// reports the difference as cores in use over the phase's wall time, and CPU
// microseconds per item moved (server plus clients).
//
//   CpuSample a = CpuSample::Take(server_pid);
//   ... the phase ...
//   CpuUsage u = CpuUsage::Between(a, CpuSample::Take(server_pid));
//
// The counters are clock ticks (sysconf(_SC_CLK_TCK), 100 per second on
// Linux), so a phase shorter than a few hundred milliseconds reads coarse.
// A counter that cannot be read (no /proc, the server already gone) leaves
// its figure unset rather than zero.
//
// Thread-safety: plain values; Take reads /proc and may run on any thread.
#ifndef MOONCAKE_TOOLS_BENCH_CPU_USAGE_H_
#define MOONCAKE_TOOLS_BENCH_CPU_USAGE_H_

#include <sys/types.h>
#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/clock.h"

namespace mooncake::bench {

// The machine's CPU time, all CPUs together, in clock ticks.
struct MachineTicks {
  uint64_t total = 0;  // user + nice + system + idle + iowait + irq + softirq + steal
  uint64_t idle = 0;   // idle + iowait
  uint64_t steal = 0;
};

namespace cpu_internal {

// Parses an unsigned decimal at the start of `s` (after spaces) and advances
// past it; false if there is none or it overflows.
inline bool TakeNumber(std::string_view& s, uint64_t& out) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || end == s.data()) return false;
  s.remove_prefix(static_cast<size_t>(end - s.data()));
  return true;
}

// The same for a signed decimal (tty_nr and tpgid are -1 without a
// controlling terminal).
inline bool TakeSigned(std::string_view& s, int64_t& out) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || end == s.data()) return false;
  s.remove_prefix(static_cast<size_t>(end - s.data()));
  return true;
}

// Reads a small /proc file whole; empty if it cannot be opened.
inline std::string ReadProcFile(const std::string& path) {
  std::string text;
  if (std::FILE* f = std::fopen(path.c_str(), "re")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0 && text.size() < (size_t{1} << 20)) {
      text.append(buf, n);
    }
    std::fclose(f);
  }
  return text;
}

}  // namespace cpu_internal

// The aggregate "cpu " line of /proc/stat's text: its first eight counters
// (user nice system idle iowait irq softirq steal; guest time is already in
// user). Kernels older than 2.6.11 have fewer columns: the missing ones read
// as zero, but the first four are required.
inline absl::StatusOr<MachineTicks> ParseProcStat(std::string_view text) {
  if (!text.starts_with("cpu ")) {
    return absl::InvalidArgumentError("/proc/stat does not start with the aggregate cpu line");
  }
  std::string_view line = text.substr(4);
  line = line.substr(0, line.find('\n'));
  uint64_t v[8] = {};
  int n = 0;
  for (; n < 8; ++n) {
    if (!cpu_internal::TakeNumber(line, v[n])) break;
  }
  if (n < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("/proc/stat's cpu line has ", n, " counters, need at least 4"));
  }
  MachineTicks t;
  for (int i = 0; i < 8; ++i) {
    if (t.total > UINT64_MAX - v[i]) return absl::InvalidArgumentError("/proc/stat overflows");
    t.total += v[i];
  }
  t.idle = v[3] + v[4];
  t.steal = v[7];
  return t;
}

// utime + stime (all threads of the process) from /proc/<pid>/stat's text.
// The command name (field 2) is in parentheses and may itself hold spaces
// and parentheses, so the fields are counted from the last ')'.
inline absl::StatusOr<uint64_t> ParsePidStat(std::string_view text) {
  const size_t close = text.rfind(')');
  if (close == std::string_view::npos || text.find('(') == std::string_view::npos ||
      text.find('(') > close) {
    return absl::InvalidArgumentError("a /proc/<pid>/stat without a (comm) field");
  }
  std::string_view rest = text.substr(close + 1);
  // Fields 3 (state) .. 15 (stime): state is one character, then 10 signed
  // or unsigned numbers (ppid .. cmajflt; tty_nr and tpgid may be -1), then
  // utime and stime, unsigned.
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  if (rest.size() < 2 || rest[1] != ' ') {
    return absl::InvalidArgumentError("a /proc/<pid>/stat without a state field");
  }
  rest.remove_prefix(1);
  int64_t skipped = 0;
  for (int i = 4; i <= 13; ++i) {
    if (!cpu_internal::TakeSigned(rest, skipped)) {
      return absl::InvalidArgumentError(
          absl::StrCat("/proc/<pid>/stat: field ", i, " is not a number"));
    }
  }
  uint64_t utime = 0, stime = 0;
  if (!cpu_internal::TakeNumber(rest, utime) || !cpu_internal::TakeNumber(rest, stime)) {
    return absl::InvalidArgumentError("/proc/<pid>/stat: utime or stime is not a number");
  }
  if (utime > UINT64_MAX - stime) return absl::InvalidArgumentError("/proc/<pid>/stat overflows");
  return utime + stime;
}

// One reading of the counters.
struct CpuSample {
  int64_t wall_ns = 0;
  std::optional<MachineTicks> machine;
  std::optional<uint64_t> server_ticks;  // unset when there is no server pid
  std::optional<uint64_t> self_ticks;

  // server_pid <= 0: no server (an embedded system); its figure stays unset.
  static CpuSample Take(pid_t server_pid) {
    CpuSample s;
    s.wall_ns = MonotonicClock::Get().NowNs();
    if (auto m = ParseProcStat(cpu_internal::ReadProcFile("/proc/stat")); m.ok()) {
      s.machine = *m;
    }
    if (server_pid > 0) {
      if (auto t =
              ParsePidStat(cpu_internal::ReadProcFile(absl::StrCat("/proc/", server_pid, "/stat")));
          t.ok()) {
        s.server_ticks = *t;
      }
    }
    if (auto t = ParsePidStat(cpu_internal::ReadProcFile("/proc/self/stat")); t.ok()) {
      s.self_ticks = *t;
    }
    return s;
  }
};

// The shortest window CpuUsage reports on, in clock ticks (sysconf
// _SC_CLK_TCK, 100 on Linux): the counters move in whole ticks, so a window
// of N ticks reads each figure to +-1/N; below 50 ticks (0.5 s) the figures
// are left unset rather than printed as noise (a --quick phase is shorter).
inline constexpr double kMinCpuWindowTicks = 50;

// Cores in use between two samples (1.0 = one CPU busy the whole time).
struct CpuUsage {
  std::optional<double> server_cores, client_cores, idle_cores, steal_cores;
  double cpus = 0;     // the machine's CPUs (from the /proc/stat ticks), 0 if unknown
  double seconds = 0;  // between the two samples

  // Server plus client CPU microseconds per item, if both were read and
  // items > 0. A system without a server process (none here) would count
  // its clients only.
  std::optional<double> CpuUsPerItem(uint64_t items) const {
    if (!server_cores || !client_cores || items == 0 || seconds <= 0) return std::nullopt;
    return (*server_cores + *client_cores) * seconds * 1e6 / static_cast<double>(items);
  }

  static CpuUsage Between(const CpuSample& a, const CpuSample& b) {
    CpuUsage u;
    const double seconds = static_cast<double>(b.wall_ns - a.wall_ns) / 1e9;
    if (seconds <= 0) return u;
    u.seconds = seconds;
    static const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
    if (hz <= 0 || seconds * hz < kMinCpuWindowTicks) return u;
    auto cores = [&](uint64_t from, uint64_t to) -> std::optional<double> {
      if (to < from) return std::nullopt;  // a pid reused, a counter reset
      return static_cast<double>(to - from) / hz / seconds;
    };
    if (a.server_ticks && b.server_ticks) u.server_cores = cores(*a.server_ticks, *b.server_ticks);
    if (a.self_ticks && b.self_ticks) u.client_cores = cores(*a.self_ticks, *b.self_ticks);
    if (a.machine && b.machine && b.machine->total > a.machine->total) {
      u.idle_cores = cores(a.machine->idle, b.machine->idle);
      u.steal_cores = cores(a.machine->steal, b.machine->steal);
      u.cpus = static_cast<double>(b.machine->total - a.machine->total) / hz / seconds;
    }
    return u;
  }
};

}  // namespace mooncake::bench

#endif  // MOONCAKE_TOOLS_BENCH_CPU_USAGE_H_
