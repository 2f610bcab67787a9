#include "mooncake/tier/internal/io_lane.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/tier/internal/ssd_format.h"

namespace mooncake::tier_internal {
namespace {

struct TestIo {
  uint32_t file = 0;
  std::byte* data = nullptr;
  uint32_t bytes = 0;
  uint64_t offset = 0;
  bool fixed = false;
};

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/io_lane_" + name;
}

class IoLaneTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    fd_ = ::open(TempPath("f").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd_, 0);
    ASSERT_EQ(::ftruncate(fd_, 1 << 20), 0);
  }
  void TearDown() override { ::close(fd_); }
  // Waits for one completion: its user data and result.
  std::pair<void*, int> Reap() {
    io_uring_cqe* cqe = lane_.WaitCqe();
    std::pair<void*, int> r{IoLane::Data(cqe), cqe->res};
    lane_.Seen(cqe);
    return r;
  }

  int fd_ = -1;
  IoLane lane_;
};

TEST_P(IoLaneTest, WritesSyncsAndReadsBack) {
  const bool registered = GetParam();
  ASSERT_TRUE(lane_.Init(16, {fd_}).ok());
  AlignedBytes mem = AllocateAligned(4 * kBlockBytes, kBlockBytes);
  if (registered) {
    ASSERT_TRUE(lane_.RegisterFiles().ok());
    ASSERT_TRUE(lane_.RegisterBuffer(mem.get(), 4 * kBlockBytes).ok());
  }
  EXPECT_EQ(lane_.files_registered(), registered);
  EXPECT_EQ(lane_.buffer_registered(), registered);
  std::memset(mem.get(), 0x5a, 2 * kBlockBytes);
  TestIo w[2] = {{0, mem.get(), kBlockBytes, 0, true},
                 {0, mem.get() + kBlockBytes, kBlockBytes, 8 * kBlockBytes, true}};
  lane_.SubmitReadWrite(/*is_write=*/true, w, 2);
  for (int i = 0; i < 2; ++i) {
    auto [data, res] = Reap();
    EXPECT_TRUE(data == &w[0] || data == &w[1]);
    EXPECT_EQ(res, static_cast<int>(kBlockBytes));
  }
  int sync_tag = 0;
  lane_.SubmitSync(0, &sync_tag);
  EXPECT_EQ(Reap(), std::make_pair(static_cast<void*>(&sync_tag), 0));
  TestIo r{0, mem.get() + 2 * kBlockBytes, kBlockBytes, 8 * kBlockBytes, true};
  lane_.SubmitReadWrite(/*is_write=*/false, &r, 1);
  EXPECT_EQ(Reap(), std::make_pair(static_cast<void*>(&r), static_cast<int>(kBlockBytes)));
  EXPECT_EQ(std::memcmp(mem.get() + 2 * kBlockBytes, mem.get(), kBlockBytes), 0);
}

INSTANTIATE_TEST_SUITE_P(Registered, IoLaneTest, ::testing::Bool());

TEST(IoLaneMarkersTest, NopCarriesItsUserDataAndTimeoutsCancel) {
  IoLane lane;
  ASSERT_TRUE(lane.Init(8, {}).ok());
  int nop = 0, timer = 0, removal = 0;
  lane.SubmitNop(&nop);
  io_uring_cqe* cqe = lane.WaitCqe();
  EXPECT_EQ(IoLane::Data(cqe), &nop);
  lane.Seen(cqe);
  __kernel_timespec ts{.tv_sec = 60, .tv_nsec = 0};
  lane.SubmitTimeout(&ts, &timer);
  void* const targets[] = {&timer};
  lane.SubmitTimeoutRemoves(targets, &removal);
  bool timer_cancelled = false, removal_done = false;
  for (int i = 0; i < 2; ++i) {
    cqe = lane.WaitCqe();
    if (IoLane::Data(cqe) == &timer) timer_cancelled = cqe->res == -ECANCELED;
    if (IoLane::Data(cqe) == &removal) removal_done = cqe->res == 0;
    lane.Seen(cqe);
  }
  EXPECT_TRUE(timer_cancelled);
  EXPECT_TRUE(removal_done);
}

}  // namespace
}  // namespace mooncake::tier_internal
