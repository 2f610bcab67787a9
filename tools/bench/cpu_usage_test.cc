#include "tools/bench/cpu_usage.h"

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace mooncake::bench {
namespace {

constexpr char kStatLine[] =
    "cpu  4705 150 1120 16250 520 30 40 7 100 0\n"
    "cpu0 2352 75 560 8125 260 15 20 3 50 0\n"
    "intr 12345\n";

TEST(ParseProcStat, SumsTheFirstEightCounters) {
  absl::StatusOr<MachineTicks> t = ParseProcStat(kStatLine);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->total, 4705u + 150 + 1120 + 16250 + 520 + 30 + 40 + 7);  // guest is in user
  EXPECT_EQ(t->idle, 16250u + 520);
  EXPECT_EQ(t->steal, 7u);
}

TEST(ParseProcStat, OldKernelsWithFourCountersParse) {
  absl::StatusOr<MachineTicks> t = ParseProcStat("cpu  10 0 5 85\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->total, 100u);
  EXPECT_EQ(t->idle, 85u);
  EXPECT_EQ(t->steal, 0u);
}

TEST(ParseProcStat, RejectsWhatIsNotTheAggregateLine) {
  EXPECT_FALSE(ParseProcStat("").ok());
  EXPECT_FALSE(ParseProcStat("cpu0 1 2 3 4\n").ok());
  EXPECT_FALSE(ParseProcStat("cpu  1 2 3\n").ok());             // too few counters
  EXPECT_FALSE(ParseProcStat("cpu  1 2 3\n4 5 6 7 8\n").ok());  // not from the next line
  EXPECT_FALSE(ParseProcStat("cpu  1 2 x 4\n").ok());
  EXPECT_FALSE(ParseProcStat("cpu  -1 2 3 4\n").ok());
  EXPECT_FALSE(ParseProcStat("cpu  99999999999999999999 2 3 4\n").ok());  // > 2^64
  EXPECT_FALSE(
      ParseProcStat("cpu  18446744073709551615 18446744073709551615 1 1\n").ok());  // sum wraps
}

TEST(ParsePidStat, AddsUtimeAndStime) {
  // Fields: pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
  // majflt cmajflt utime stime cutime ...
  // A daemon without a terminal: tty_nr 0, tpgid -1 (field 8, signed).
  absl::StatusOr<uint64_t> t =
      ParsePidStat("4242 (redis-server) S 1 4242 4242 0 -1 4194560 900 0 2 0 311 97 5 6 20 0\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, 311u + 97);
}

TEST(ParsePidStat, CommMayHoldSpacesAndParentheses) {
  absl::StatusOr<uint64_t> t = ParsePidStat("7 (a) (b c) d) R 1 7 7 0 0 0 0 0 0 0 12 3 0 0\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, 15u);
}

TEST(ParsePidStat, RejectsMalformedLines) {
  EXPECT_FALSE(ParsePidStat("").ok());
  EXPECT_FALSE(ParsePidStat("7 comm R 1 7 7 0 0 0 0 0 0 0 12 3").ok());  // no parentheses
  EXPECT_FALSE(ParsePidStat("7 )comm( R 1 7 7 0 0 0 0 0 0 0 12 3").ok());
  EXPECT_FALSE(ParsePidStat("7 (comm)").ok());  // no state
  EXPECT_FALSE(ParsePidStat("7 (comm) RR 1 7 7 0 0 0 0 0 0 0 12 3").ok());
  EXPECT_FALSE(ParsePidStat("7 (comm) R 1 7 7 0 0 0 0 0 0 0 12").ok());  // ends before stime
  EXPECT_FALSE(ParsePidStat("7 (comm) R 1 7 7 0 0 0 0 0 0 0 12 x").ok());
  EXPECT_FALSE(ParsePidStat("7 (comm) R 1 7 7 0 0 0 0 0 0 0 -12 3").ok());  // utime < 0
  EXPECT_FALSE(
      ParsePidStat("7 (c) R 1 7 7 0 0 0 0 0 0 0 18446744073709551615 18446744073709551615").ok());
}

// Neither parser may crash, read out of bounds or loop on any input (ASan
// builds check the bounds): random bytes, and valid lines with bytes
// overwritten, cut short or spliced.
TEST(CpuParsers, SurviveArbitraryInput) {
  const std::string pid_line = "4242 (x y) S 1 4242 4242 0 0 4194560 900 0 2 0 311 97 5 6 20 0\n";
  const std::string stat_line = kStatLine;
  std::mt19937_64 rng(7);
  const std::string alphabet = "0123456789 ()-\ncpuRSx";
  for (int i = 0; i < 20000; ++i) {
    std::string s = (i % 2 == 0) ? pid_line : stat_line;
    switch (i % 4) {
      case 0:
        s.resize(rng() % (s.size() + 1));
        break;
      case 1:
        for (int k = 0; k < 3; ++k) s[rng() % s.size()] = alphabet[rng() % alphabet.size()];
        break;
      case 2:
        s.clear();
        for (size_t k = rng() % 80; k > 0; --k) s.push_back(static_cast<char>(rng()));
        break;
      default:
        s.insert(rng() % s.size(), s.substr(rng() % s.size()));
        break;
    }
    (void)ParsePidStat(s);
    (void)ParseProcStat(s);
  }
}

// Burns `cpu_ns` of this process's CPU time (measured by the kernel, not by
// the wall clock, so a loaded machine only makes it take longer).
void BurnCpu(int64_t cpu_ns) {
  auto now = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  };
  const int64_t end = now() + cpu_ns;
  volatile uint64_t sink = 0;
  while (now() < end) {
    for (int i = 0; i < 10000; ++i) sink = sink + static_cast<uint64_t>(i);
  }
}

TEST(CpuSample, ReadsThisProcessAndTheMachine) {
  const CpuSample a = CpuSample::Take(getpid());
  ASSERT_TRUE(a.machine.has_value());
  ASSERT_TRUE(a.self_ticks.has_value());
  ASSERT_TRUE(a.server_ticks.has_value());
  BurnCpu(600'000'000);  // past the 0.5 s window floor whatever the load
  const CpuSample b = CpuSample::Take(getpid());
  const CpuUsage u = CpuUsage::Between(a, b);
  ASSERT_TRUE(u.client_cores.has_value());
  ASSERT_TRUE(u.server_cores.has_value());
  ASSERT_TRUE(u.idle_cores.has_value());
  ASSERT_TRUE(u.steal_cores.has_value());
  // 600 ms of CPU at 100 ticks/s is >= 59 ticks whatever the wall time was.
  EXPECT_GE(*u.client_cores * u.seconds, 0.58);
  EXPECT_GE(*u.server_cores * u.seconds, 0.58);  // the same process as the "server"
  EXPECT_GE(u.cpus, 0.9);
  EXPECT_GE(*u.idle_cores, 0.0);
  ASSERT_TRUE(u.CpuUsPerItem(1000).has_value());
  EXPECT_GE(*u.CpuUsPerItem(1000), 2 * 0.58e6 / 1000);
  EXPECT_FALSE(u.CpuUsPerItem(0).has_value());
}

TEST(CpuSample, AServerThatIsGoneLeavesItsFigureUnset) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // reaped: /proc/<child> is gone
  const CpuSample a = CpuSample::Take(child);
  EXPECT_FALSE(a.server_ticks.has_value());
  EXPECT_TRUE(a.self_ticks.has_value());
  CpuSample b = CpuSample::Take(child);
  b.wall_ns = a.wall_ns + 1'000'000'000;  // past the window floor
  const CpuUsage u = CpuUsage::Between(a, b);
  EXPECT_FALSE(u.server_cores.has_value());
  EXPECT_TRUE(u.client_cores.has_value());
  EXPECT_FALSE(u.CpuUsPerItem(10).has_value());
  EXPECT_FALSE(CpuSample::Take(0).server_ticks.has_value());
}

TEST(CpuUsage, AWindowTooShortToReadGivesNothing) {
  CpuSample a, b;
  a.wall_ns = 0;
  b.wall_ns = 100'000'000;  // 0.1 s: 10 ticks at 100 Hz, +-10%
  a.self_ticks = 0;
  b.self_ticks = 10;
  const CpuUsage u = CpuUsage::Between(a, b);
  EXPECT_FALSE(u.client_cores.has_value());
  EXPECT_FALSE(u.CpuUsPerItem(10).has_value());
  EXPECT_DOUBLE_EQ(u.seconds, 0.1);
  b.wall_ns = 1'000'000'000;
  EXPECT_TRUE(CpuUsage::Between(a, b).client_cores.has_value());
}

TEST(CpuUsage, CountersThatGoBackwardsGiveNothing) {
  CpuSample a, b;
  a.wall_ns = 0;
  b.wall_ns = 1'000'000'000;
  a.server_ticks = 500;
  b.server_ticks = 100;  // a reused pid
  a.self_ticks = 10;
  b.self_ticks = 60;
  const CpuUsage u = CpuUsage::Between(a, b);
  EXPECT_FALSE(u.server_cores.has_value());
  ASSERT_TRUE(u.client_cores.has_value());
  EXPECT_NEAR(*u.client_cores, 50.0 / static_cast<double>(sysconf(_SC_CLK_TCK)), 1e-9);
  EXPECT_FALSE(u.idle_cores.has_value());                          // no machine counters
  EXPECT_FALSE(CpuUsage::Between(b, a).client_cores.has_value());  // negative wall time
}

}  // namespace
}  // namespace mooncake::bench
