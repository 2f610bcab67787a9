#include "mooncake/base/errno_status.h"

#include <errno.h>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace mooncake {
namespace {

TEST(ErrnoToStatusTest, MessageNamesTheCallAndTheError) {
  const absl::Status s = ErrnoToStatus(ECONNREFUSED, "connect to 10.0.0.2:50051");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "connect to 10.0.0.2:50051: Connection refused");
}

TEST(ErrnoToStatusTest, FollowsTheDocumentedTable) {
  struct Row {
    int err;
    absl::StatusCode code;
  };
  const Row rows[] = {
      {ECONNREFUSED, absl::StatusCode::kUnavailable},
      {ECONNRESET, absl::StatusCode::kUnavailable},
      {ECONNABORTED, absl::StatusCode::kUnavailable},
      {EPIPE, absl::StatusCode::kUnavailable},
      {ENOTCONN, absl::StatusCode::kUnavailable},
      {ENETUNREACH, absl::StatusCode::kUnavailable},
      {EHOSTUNREACH, absl::StatusCode::kUnavailable},
      {EADDRNOTAVAIL, absl::StatusCode::kUnavailable},
      {ENODEV, absl::StatusCode::kUnavailable},
      {EIO, absl::StatusCode::kUnavailable},
      {ETIMEDOUT, absl::StatusCode::kDeadlineExceeded},
      {EAGAIN, absl::StatusCode::kDeadlineExceeded},
      {EWOULDBLOCK, absl::StatusCode::kDeadlineExceeded},
      {EMFILE, absl::StatusCode::kResourceExhausted},
      {ENFILE, absl::StatusCode::kResourceExhausted},
      {ENOBUFS, absl::StatusCode::kResourceExhausted},
      {ENOMEM, absl::StatusCode::kResourceExhausted},
      {ENOSPC, absl::StatusCode::kResourceExhausted},
      {EDQUOT, absl::StatusCode::kResourceExhausted},
      {EFBIG, absl::StatusCode::kResourceExhausted},
      {EADDRINUSE, absl::StatusCode::kAlreadyExists},
      {EEXIST, absl::StatusCode::kAlreadyExists},
      {EACCES, absl::StatusCode::kPermissionDenied},
      {EPERM, absl::StatusCode::kPermissionDenied},
      {ENOENT, absl::StatusCode::kNotFound},
      {EINVAL, absl::StatusCode::kInvalidArgument},
      {EBADF, absl::StatusCode::kInternal},
      {ENOTSOCK, absl::StatusCode::kInternal},
  };
  for (const Row& row : rows) {
    EXPECT_EQ(ErrnoToStatusCode(row.err), row.code) << "errno " << row.err;
    EXPECT_EQ(ErrnoToStatus(row.err, "call").code(), row.code) << "errno " << row.err;
  }
}

// ENOENT once meant UNAVAILABLE in the transport and NOT_FOUND in the SSD
// tier; the table gives it one code everywhere.
TEST(ErrnoToStatusTest, EnoentIsNotFoundEverywhere) {
  EXPECT_TRUE(absl::IsNotFound(ErrnoToStatus(ENOENT, "open /data/kv.bin")));
}

TEST(ErrnoToStatusTest, ZeroErrnoIsNeverOk) {
  const absl::Status s = ErrnoToStatus(0, "recv");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(), "recv: errno 0");
}

TEST(ErrnoToStatusTest, UnknownErrnoKeepsItsNumber) {
  const absl::Status s = ErrnoToStatus(99999, "ioctl");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(), "ioctl: errno 99999");
}

}  // namespace
}  // namespace mooncake
