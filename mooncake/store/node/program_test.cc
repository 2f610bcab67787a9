#include "mooncake/store/node/program.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

ABSL_FLAG(int32_t, program_test_count, 1, "a flag for PrecheckFlags");
ABSL_FLAG(bool, program_test_switch, false, "a boolean flag for PrecheckFlags");

namespace mooncake::node {
namespace {

constexpr RefusedFlag kRefused[] = {{"enable_ha", "run one master"}};
constexpr std::string_view kBuiltins[] = {"help", "version"};

void Precheck(std::vector<std::string> args, OtherBuiltins others = OtherBuiltins::kUnknown) {
  std::vector<char*> argv;
  static char program[] = "program_test";
  argv.push_back(program);
  for (std::string& a : args) argv.push_back(a.data());
  PrecheckFlags("program_test", static_cast<int>(argv.size()), argv.data(), kRefused, kBuiltins,
                others);
}

TEST(PrecheckFlags, PassesDefinedFlagsAndNamedBuiltins) {
  Precheck({"--program_test_count=3", "--program_test_count", "4", "--program_test_switch",
            "--noprogram_test_switch", "--help", "--version"});
}

TEST(PrecheckFlagsDeathTest, BadFlagsExitTwoWithAMessage) {
  const auto exit2 = testing::ExitedWithCode(kExitBadFlags);
  EXPECT_EXIT(Precheck({"--enable_ha=true"}), exit2,
              "program_test: --enable_ha is a Mooncake flag this program does not implement: "
              "run one master");
  EXPECT_EXIT(Precheck({"--noenable_ha"}), exit2, "--enable_ha is a Mooncake flag");
  EXPECT_EXIT(Precheck({"--bogus"}), exit2, "unknown flag --bogus");
  EXPECT_EXIT(Precheck({"--noprogram_test_count"}), exit2, "unknown flag --noprogram_test_count");
  EXPECT_EXIT(Precheck({"--program_test_count=x"}), exit2, "--program_test_count=x: ");
  EXPECT_EXIT(Precheck({"--program_test_count"}), exit2, "--program_test_count needs a value");
  EXPECT_EXIT(Precheck({"positional"}), exit2, "unexpected argument \"positional\"");
  EXPECT_EXIT(Precheck({"--", "x"}), exit2, "unexpected arguments after --");
}

TEST(PrecheckFlagsDeathTest, OtherAbseilBuiltinsAreUnknownOrCheckedAsFlags) {
  // Referenced so that abseil's parser, which defines --flagfile, is linked.
  ASSERT_NE(&absl::ParseCommandLine, nullptr);
  ASSERT_NE(absl::FindCommandLineFlag("flagfile"), nullptr);
  EXPECT_EXIT(Precheck({"--flagfile=/dev/null"}), testing::ExitedWithCode(kExitBadFlags),
              "unknown flag --flagfile");
  Precheck({"--flagfile=/dev/null"}, OtherBuiltins::kChecked);
  EXPECT_EXIT(Precheck({"--noflagfile"}, OtherBuiltins::kChecked),
              testing::ExitedWithCode(kExitBadFlags), "unknown flag --noflagfile");
}

TEST(LogLine, StampsLinesUnlessTurnedOff) {
  testing::internal::CaptureStdout();
  LogLine("serving");
  SetLogTimestamps(false);
  LogLine("stopped");
  SetLogTimestamps(true);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_TRUE(testing::internal::RE::PartialMatch(
      out, testing::internal::RE("^[0-9-]+T[0-9:.]+Z serving\nstopped\n$")))
      << out;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ReadyFile, WrittenWholeAndRemoved) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/program_test.ready");
  const ReadyFile ready(path);
  ASSERT_TRUE(ready.Write("rpc=127.0.0.1:1\npid=2\n").ok());
  EXPECT_EQ(Slurp(path), "rpc=127.0.0.1:1\npid=2\n");
  ready.Remove();
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
}

TEST(ReadyFile, EmptyPathIsNoFile) {
  const ReadyFile none("");
  EXPECT_TRUE(none.Write("x").ok());
  none.Remove();
}

TEST(ReadyFile, UnwritableDirectoryIsPermissionDenied) {
  const ReadyFile ready("/nonexistent-dir/program_test.ready");
  const absl::Status s = ready.Write("x");
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
}

TEST(StopSignalsDeathTest, WaitReturnsTheSignalAndASecondOneExits) {
  EXPECT_EXIT(
      {
        StopSignals signals;
        if (signals.Wait(absl::Milliseconds(1)) != 0) std::_Exit(3);
        ::kill(::getpid(), SIGTERM);
        if (signals.Wait(absl::Seconds(10)) != SIGTERM) std::_Exit(4);
        signals.ExitOnSecondSignal([] { std::fputs("before exit\n", stderr); });
        ::kill(::getpid(), SIGTERM);
        ::sleep(10);
        std::_Exit(5);
      },
      testing::ExitedWithCode(128 + SIGTERM), "before exit");
}

TEST(StopSignalsDeathTest, ASignalAfterDoneKeepsTheCleanExit) {
  EXPECT_EXIT(
      {
        StopSignals signals;
        signals.ExitOnSecondSignal(nullptr);
        signals.Done();
        ::kill(::getpid(), SIGTERM);
        ::usleep(200 * 1000);
        std::_Exit(0);
      },
      testing::ExitedWithCode(0), "");
}

TEST(StopSignalsDeathTest, ASecondSignalDuringRunShutdownRemovesTheReadyFile) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/run_shutdown.ready");
  EXPECT_EXIT(
      {
        StopSignals signals;
        const ReadyFile ready(path);
        if (!ready.Write("pid=1\n").ok()) std::_Exit(3);
        RunShutdown(signals, ready, [] {
          ::kill(::getpid(), SIGINT);
          ::sleep(10);
        });
        std::_Exit(4);
      },
      testing::ExitedWithCode(128 + SIGINT), "");
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
}

TEST(RunShutdown, RunsTheShutdownThenRemovesTheReadyFile) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/run_shutdown_clean.ready");
  StopSignals signals;
  const ReadyFile ready(path);
  ASSERT_TRUE(ready.Write("pid=1\n").ok());
  bool ran = false;
  RunShutdown(signals, ready, [&] {
    ran = true;
    EXPECT_EQ(::access(path.c_str(), F_OK), 0) << "removed before the shutdown ran";
  });
  EXPECT_TRUE(ran);
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
}

}  // namespace
}  // namespace mooncake::node
