#include "mooncake/store/node/process_stats.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake::node {
namespace {

TEST(ProcessStats, ReadsThisProcess) {
  const ProcessStats before = ReadProcessStats();
  EXPECT_GT(before.resident_bytes, 0u);
  EXPECT_GE(before.virtual_bytes, before.resident_bytes);
  EXPECT_GE(before.threads, 1u);
  EXPECT_GT(before.max_fds, 0u);
  EXPECT_GE(before.open_fds, 3u) << "stdin, stdout, stderr at least";
  std::vector<int> fds;
  for (int i = 0; i < 10; ++i) fds.push_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  std::vector<char> touched(64 << 20, 1);  // 64 MiB made resident
  std::thread t([&] {
    const ProcessStats during = ReadProcessStats();
    EXPECT_EQ(during.open_fds, before.open_fds + 10);
    EXPECT_GE(during.threads, before.threads + 1);
    EXPECT_GE(during.resident_bytes, before.resident_bytes + (32u << 20));
  });
  t.join();
  for (int fd : fds) ::close(fd);
  EXPECT_EQ(ReadProcessStats().open_fds, before.open_fds);
  EXPECT_EQ(touched[touched.size() / 2], 1);
}

TEST(ProcessStats, MaxFdsIsTheSoftLimit) {
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(ReadProcessStats().max_fds, static_cast<uint64_t>(saved.rlim_cur));
  // Lowering the soft limit needs no privilege; the figure follows it.
  rlimit lower = saved;
  lower.rlim_cur = std::min<rlim_t>(200, saved.rlim_max);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lower), 0);
  EXPECT_EQ(ReadProcessStats().max_fds, static_cast<uint64_t>(lower.rlim_cur));
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
}

}  // namespace
}  // namespace mooncake::node
