#include "tools/bench/servers.h"

#include <sys/stat.h>

#include <fstream>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace mooncake::bench {
namespace {

std::string Path(const std::string& name) { return ::testing::TempDir() + "/" + name; }

// A stand-in for tools/mooncake_store: prints its arguments, then runs
// `body` with $READY set to its --ready_file.
std::string FakeStore(const std::string& name, const std::string& body) {
  const std::string path = Path(name);
  std::ofstream(path) << "#!/bin/sh\n"
                         "echo \"args: $*\"\n"
                         "for a in \"$@\"; do case \"$a\" in --ready_file=*) READY=\"${a#*=}\";; "
                         "esac; done\n"
                      << body << "\n";
  ::chmod(path.c_str(), 0755);
  return path;
}

constexpr char kWritesReadyFile[] =
    "printf 'rpc=127.0.0.1:4001\\nhttp=127.0.0.1:4002\\n' > \"$READY.tmp\"\n"
    "echo \"pid=$$\" >> \"$READY.tmp\"\n"
    "mv \"$READY.tmp\" \"$READY\"\n"
    "exec sleep 100";

StoreNodeConfig Config(const std::string& name, const std::string& binary) {
  return {.binary = binary,
          .flags = {"--role=worker", "--segment_bytes=64M"},
          .ready_file = Path(name + ".ready"),
          .log = Path(name + ".log"),
          .name = name,
          .timeout = absl::Seconds(20)};
}

TEST(StartStoreNodeTest, ReturnsTheRunningNodeAndTheAddressesItsReadyFileNames) {
  StoreNodeConfig c = Config("ready", FakeStore("ready.sh", kWritesReadyFile));
  absl::StatusOr<StoreNode> n = StartStoreNode(c);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_TRUE(n->process.Running());
  EXPECT_EQ(n->rpc, "127.0.0.1:4001");
  EXPECT_EQ(n->http, "127.0.0.1:4002");
  const std::string log = n->process.LogTail();
  for (const char* flag : {"--http=127.0.0.1:0", "--demo=false", "--status_interval=0",
                           "--role=worker", "--segment_bytes=64M"}) {
    EXPECT_NE(log.find(flag), std::string::npos) << flag << " missing from: " << log;
  }
  // The caller's flags come after the common ones, so they can override them.
  EXPECT_LT(log.find("--http=127.0.0.1:0"), log.find("--role=worker")) << log;
  EXPECT_TRUE(n->process.Stop().ok());
}

TEST(StartStoreNodeTest, RunsUnderAPrefix) {
  StoreNodeConfig c = Config("prefixed", FakeStore("prefixed.sh", kWritesReadyFile));
  c.prefix = {"/usr/bin/env", "MOONCAKE_PREFIX_TEST=1"};
  absl::StatusOr<StoreNode> n = StartStoreNode(c);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_NE(n->process.command().find("/usr/bin/env MOONCAKE_PREFIX_TEST=1 "), std::string::npos)
      << n->process.command();
}

TEST(StartStoreNodeTest, ANodeThatExitsFirstIsUnavailableWithItsLog) {
  StoreNodeConfig c = Config("exits", FakeStore("exits.sh", "echo cannot bind; exit 3"));
  absl::StatusOr<StoreNode> n = StartStoreNode(c);
  ASSERT_TRUE(absl::IsUnavailable(n.status())) << n.status();
  const std::string m(n.status().message());
  EXPECT_NE(m.find("exits exited"), std::string::npos) << m;
  EXPECT_NE(m.find("exited with status 3"), std::string::npos) << m;
  EXPECT_NE(m.find("cannot bind"), std::string::npos) << m;
}

TEST(StartStoreNodeTest, AStaleReadyFileIsNotTakenForReadiness) {
  StoreNodeConfig c = Config("stale", FakeStore("stale.sh", "exec sleep 100"));
  c.timeout = absl::Milliseconds(300);
  std::ofstream(c.ready_file) << "rpc=127.0.0.1:1\nhttp=127.0.0.1:2\npid=1\n";
  const absl::Time start = absl::Now();
  absl::StatusOr<StoreNode> n = StartStoreNode(c);
  ASSERT_TRUE(absl::IsDeadlineExceeded(n.status())) << n.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  const std::string m(n.status().message());
  EXPECT_NE(m.find("stale wrote no ready file"), std::string::npos) << m;
}

TEST(StartStoreNodeTest, AMissingBinaryIsNotFound) {
  absl::StatusOr<StoreNode> n = StartStoreNode(Config("missing", "/nonexistent/mooncake_store"));
  EXPECT_TRUE(absl::IsNotFound(n.status())) << n.status();
}

}  // namespace
}  // namespace mooncake::bench
