// Mooncake Store's integer return codes (the numbers its Python API returns),
// and the one mapping from this project's absl::Status to them.
//
// Table (absl code -> Mooncake code), applied by ToMooncakeCode:
//   OK                    0     kOk
//   NOT_FOUND            -704   kObjectNotFound
//   ALREADY_EXISTS       -705   kObjectAlreadyExists
//   ABORTED              -706   kObjectHasLease (a remove met a live read lease)
//   FAILED_PRECONDITION  -706   kObjectHasLease (a remove of a pinned object)
//   RESOURCE_EXHAUSTED   -200   kNoAvailableHandle (no space after eviction)
//   OUT_OF_RANGE         -10    kBufferOverflow (a buffer smaller than the object)
//   INVALID_ARGUMENT     -600   kInvalidParams
//   DATA_LOSS            -801   kChecksumMismatch (every replica failed its checksum)
//   UNAVAILABLE          -900   kRpcFail (master unreachable or gone)
//   DEADLINE_EXCEEDED    -900   kRpcFail (master or transfer took past its deadline)
//   anything else        -1     kInternalError
// Key problems (empty, over rpc::kMaxKeyBytes, a reserved 0x00 first byte)
// are found before any call and return kInvalidKey (-400); transfer failures
// the client reports as UNAVAILABLE from a worker are kTransferFail (-800)
// where the caller can tell (ToMooncakeCode's `transfer` argument).
//
// Thread-safety: constants and pure functions.
#ifndef MOONCAKE_STORE_COMPAT_RETURN_CODES_H_
#define MOONCAKE_STORE_COMPAT_RETURN_CODES_H_

#include <string_view>

#include "absl/status/status.h"

namespace mooncake::compat {

inline constexpr int kOk = 0;
inline constexpr int kInternalError = -1;
inline constexpr int kBufferOverflow = -10;
inline constexpr int kNoAvailableHandle = -200;
inline constexpr int kInvalidKey = -400;
inline constexpr int kInvalidParams = -600;
inline constexpr int kObjectNotFound = -704;
inline constexpr int kObjectAlreadyExists = -705;
inline constexpr int kObjectHasLease = -706;
inline constexpr int kTransferFail = -800;
inline constexpr int kChecksumMismatch = -801;
inline constexpr int kRpcFail = -900;

// `transfer`: the status came from moving bytes (not from the master), so
// UNAVAILABLE means the worker holding the bytes, not the master.
inline int ToMooncakeCode(const absl::Status& s, bool transfer = false) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return kOk;
    case absl::StatusCode::kNotFound:
      return kObjectNotFound;
    case absl::StatusCode::kAlreadyExists:
      return kObjectAlreadyExists;
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kFailedPrecondition:
      return kObjectHasLease;
    case absl::StatusCode::kResourceExhausted:
      return kNoAvailableHandle;
    case absl::StatusCode::kOutOfRange:
      return kBufferOverflow;
    case absl::StatusCode::kInvalidArgument:
      return kInvalidParams;
    case absl::StatusCode::kDataLoss:
      return kChecksumMismatch;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return transfer ? kTransferFail : kRpcFail;
    default:
      return kInternalError;
  }
}

// The name Mooncake gives each code (for messages and docs).
inline std::string_view MooncakeCodeName(int code) {
  switch (code) {
    case kOk:
      return "OK";
    case kInternalError:
      return "INTERNAL_ERROR";
    case kBufferOverflow:
      return "BUFFER_OVERFLOW";
    case kNoAvailableHandle:
      return "NO_AVAILABLE_HANDLE";
    case kInvalidKey:
      return "INVALID_KEY";
    case kInvalidParams:
      return "INVALID_PARAMS";
    case kObjectNotFound:
      return "OBJECT_NOT_FOUND";
    case kObjectAlreadyExists:
      return "OBJECT_ALREADY_EXISTS";
    case kObjectHasLease:
      return "OBJECT_HAS_LEASE";
    case kTransferFail:
      return "TRANSFER_FAIL";
    case kChecksumMismatch:
      return "CHECKSUM_MISMATCH";
    case kRpcFail:
      return "RPC_FAIL";
    default:
      return "UNKNOWN";
  }
}

}  // namespace mooncake::compat

#endif  // MOONCAKE_STORE_COMPAT_RETURN_CODES_H_
