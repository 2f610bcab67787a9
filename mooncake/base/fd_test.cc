#include "mooncake/base/fd.h"

#include <fcntl.h>
#include <unistd.h>

#include <type_traits>
#include <utility>

#include "gtest/gtest.h"

namespace mooncake {
namespace {

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

static_assert(!std::is_copy_constructible_v<UniqueFd>);
static_assert(!std::is_copy_assignable_v<UniqueFd>);
static_assert(std::is_nothrow_move_constructible_v<UniqueFd>);

TEST(UniqueFdTest, ClosesOnDestruction) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  {
    UniqueFd r(fds[0]);
    UniqueFd w(fds[1]);
    EXPECT_TRUE(r.valid());
    EXPECT_EQ(r.get(), fds[0]);
  }
  EXPECT_FALSE(IsOpen(fds[0]));
  EXPECT_FALSE(IsOpen(fds[1]));
}

TEST(UniqueFdTest, MoveTransfersOwnershipAndClosesTheOldTarget) {
  int a[2];
  int b[2];
  ASSERT_EQ(::pipe(a), 0);
  ASSERT_EQ(::pipe(b), 0);
  UniqueFd keep_a(a[1]);
  UniqueFd keep_b(b[1]);
  UniqueFd x(a[0]);
  UniqueFd y(b[0]);
  y = std::move(x);
  EXPECT_FALSE(x.valid());
  EXPECT_EQ(y.get(), a[0]);
  EXPECT_FALSE(IsOpen(b[0]));  // y's old descriptor
  EXPECT_TRUE(IsOpen(a[0]));
  UniqueFd z(std::move(y));
  EXPECT_FALSE(y.valid());
  EXPECT_EQ(z.get(), a[0]);
}

TEST(UniqueFdTest, ReleaseKeepsTheDescriptorOpen) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  UniqueFd w(fds[1]);
  int raw;
  {
    UniqueFd r(fds[0]);
    raw = r.Release();
    EXPECT_FALSE(r.valid());
  }
  EXPECT_EQ(raw, fds[0]);
  EXPECT_TRUE(IsOpen(raw));
  ::close(raw);
}

TEST(UniqueFdTest, ResetClosesAndAFailedCallMakesAnEmptyOwner) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  UniqueFd w(fds[1]);
  UniqueFd r(fds[0]);
  r.Reset();
  EXPECT_FALSE(r.valid());
  EXPECT_FALSE(IsOpen(fds[0]));
  UniqueFd failed(::open("/nonexistent/mooncake", O_RDONLY));
  EXPECT_FALSE(failed.valid());
  EXPECT_EQ(failed.get(), -1);
}

}  // namespace
}  // namespace mooncake
