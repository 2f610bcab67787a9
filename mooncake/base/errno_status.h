// ErrnoToStatus: the one mapping from a POSIX errno to an absl::Status, so the
// same failure carries the same canonical code whichever package saw it.
//
//   ErrnoToStatus(ECONNREFUSED, "connect to 10.0.0.2:50051")
//     -> UNAVAILABLE "connect to 10.0.0.2:50051: Connection refused"
//
// The table (errno -> code: why):
//   ECONNREFUSED ECONNRESET ECONNABORTED EPIPE ENOTCONN ENETDOWN ENETUNREACH
//   EHOSTDOWN EHOSTUNREACH EADDRNOTAVAIL ENODEV ENXIO EIO
//                              -> UNAVAILABLE: the peer, the path to it or the
//                                 device is gone or failing; trying again
//                                 (later, or elsewhere) may succeed.
//   ETIMEDOUT EAGAIN/EWOULDBLOCK
//                              -> DEADLINE_EXCEEDED: a timeout ran out. EAGAIN
//                                 reaches this table only from a blocking call
//                                 whose SO_RCVTIMEO / SO_SNDTIMEO passed; code
//                                 that polls non-blocking fds, or takes a
//                                 flock with LOCK_NB, handles EAGAIN itself.
//   EMFILE ENFILE ENOBUFS ENOMEM ENOSPC EDQUOT EFBIG
//                              -> RESOURCE_EXHAUSTED: a limit (fds, memory,
//                                 disk, quota, file size); freeing or raising
//                                 it helps, retrying as is does not.
//   EADDRINUSE EEXIST          -> ALREADY_EXISTS: the name (port, file) is
//                                 taken by someone else.
//   EACCES EPERM               -> PERMISSION_DENIED.
//   ENOENT                     -> NOT_FOUND: the named file or directory does
//                                 not exist. A caller for whom a missing
//                                 socket path means "the peer is not there"
//                                 (UNAVAILABLE by its contract) says so itself.
//   EINVAL                     -> INVALID_ARGUMENT.
//   anything else              -> INTERNAL: an errno these calls should not
//                                 produce; the message names it.
//
// The message is "<what>: <strerror(err)>"; `what` names the call and its
// object ("bind 0.0.0.0:80", "open /data/kv.bin") so a user can act on it.
//
// An err of 0 (a caller that read errno after something reset it) gives
// INTERNAL "<what>: errno 0", never an OK status.
// Thread-safety: pure functions (strerrordesc_np reads a constant table,
// unlike strerror's shared buffer for unknown values).
#ifndef MOONCAKE_BASE_ERRNO_STATUS_H_
#define MOONCAKE_BASE_ERRNO_STATUS_H_

#include <errno.h>
#include <string.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"

namespace mooncake {

// The canonical code of `err` by the table above.
inline absl::StatusCode ErrnoToStatusCode(int err) {
  switch (err) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case ENOTCONN:
    case ENETDOWN:
    case ENETUNREACH:
    case EHOSTDOWN:
    case EHOSTUNREACH:
    case EADDRNOTAVAIL:
    case ENODEV:
    case ENXIO:
    case EIO:
      return absl::StatusCode::kUnavailable;
    case ETIMEDOUT:
    case EAGAIN:
#if EWOULDBLOCK != EAGAIN
    case EWOULDBLOCK:
#endif
      return absl::StatusCode::kDeadlineExceeded;
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM:
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return absl::StatusCode::kResourceExhausted;
    case EADDRINUSE:
    case EEXIST:
      return absl::StatusCode::kAlreadyExists;
    case EACCES:
    case EPERM:
      return absl::StatusCode::kPermissionDenied;
    case ENOENT:
      return absl::StatusCode::kNotFound;
    case EINVAL:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

// "<what>: <description of err>" with ErrnoToStatusCode(err).
inline absl::Status ErrnoToStatus(int err, std::string_view what) {
  const char* text = err != 0 ? ::strerrordesc_np(err) : nullptr;
  const std::string msg = text != nullptr ? absl::StrCat(AbslView(what), ": ", text)
                                          : absl::StrCat(AbslView(what), ": errno ", err);
  return absl::Status(ErrnoToStatusCode(err), msg);
}

}  // namespace mooncake

#endif  // MOONCAKE_BASE_ERRNO_STATUS_H_
