#include "tools/bench/child_process.h"

#include <csignal>
#include <string>

#include "gtest/gtest.h"

namespace mooncake::bench {
namespace {

std::string Log(const char* name) { return ::testing::TempDir() + "/" + name; }

TEST(ChildProcessTest, MissingProgramIsNotFound) {
  auto c = ChildProcess::Spawn({"/nonexistent/server"}, Log("missing.log"));
  EXPECT_TRUE(absl::IsNotFound(c.status())) << c.status();
}

TEST(ChildProcessTest, ExitStatusAndLogAreDescribed) {
  auto c = ChildProcess::Spawn({"/bin/sh", "-c", "echo starting up; exit 3"}, Log("exit.log"));
  ASSERT_TRUE(c.ok()) << c.status();
  while (c->Running()) absl::SleepFor(absl::Milliseconds(5));
  const std::string d = c->Describe();
  EXPECT_NE(d.find("exited with status 3"), std::string::npos) << d;
  EXPECT_NE(d.find("starting up"), std::string::npos) << d;
}

TEST(ChildProcessTest, StopEndsARunningChild) {
  auto c = ChildProcess::Spawn({"sleep", "100"}, Log("sleep.log"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->Running());
  EXPECT_TRUE(c->Stop().ok());
  EXPECT_FALSE(c->Running());
  EXPECT_TRUE(c->Stop().ok());  // twice is fine
}

TEST(ChildProcessTest, ChildIgnoringSigtermIsKilled) {
  auto c = ChildProcess::Spawn({"/bin/sh", "-c", "trap '' TERM; echo ready; sleep 100"},
                               Log("stubborn.log"));
  ASSERT_TRUE(c.ok());
  while (c->LogTail().find("ready") == std::string::npos) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE(absl::IsDeadlineExceeded(c->Stop(absl::Milliseconds(100))));
  EXPECT_FALSE(c->Running());
}

TEST(ChildProcessTest, KillSkipsSigterm) {
  auto c = ChildProcess::Spawn(
      {"/bin/sh", "-c", "trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 1; done"},
      Log("kill.log"));
  ASSERT_TRUE(c.ok()) << c.status();
  while (c->LogTail().find("ready") == std::string::npos) absl::SleepFor(absl::Milliseconds(5));
  c->Kill();
  EXPECT_FALSE(c->Running());
  const std::string d = c->Describe();
  EXPECT_NE(d.find("killed by signal 9"), std::string::npos) << d;
  EXPECT_EQ(c->LogTail().find("got TERM"), std::string::npos) << d;
  c->Kill();  // twice is fine
}

TEST(ChildProcessTest, SignalThenWaitExitReapsTheChild) {
  auto c = ChildProcess::Spawn({"sleep", "100"}, Log("signal.log"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->WaitExit(absl::Milliseconds(20)));  // still running
  c->Signal(SIGTERM);
  EXPECT_TRUE(c->WaitExit(absl::Seconds(10)));
  EXPECT_FALSE(c->Running());
  const std::string d = c->Describe();
  EXPECT_NE(d.find("killed by signal 15"), std::string::npos) << d;
}

TEST(ChildProcessTest, WaitForPortFailsWhenTheServerDies) {
  auto port = FreeLoopbackPort();
  ASSERT_TRUE(port.ok());
  auto c = ChildProcess::Spawn({"/bin/sh", "-c", "echo bad config >&2; exit 1"}, Log("dies.log"));
  ASSERT_TRUE(c.ok());
  const absl::Status s = WaitForPort(*c, *port, absl::Seconds(10));
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(s.message().find("bad config"), std::string::npos) << s;
}

TEST(ChildProcessTest, FreePortIsFreeAndNotAccepting) {
  auto port = FreeLoopbackPort();
  ASSERT_TRUE(port.ok());
  EXPECT_GT(*port, 0);
  EXPECT_FALSE(LoopbackPortAccepts(*port));
}

}  // namespace
}  // namespace mooncake::bench
