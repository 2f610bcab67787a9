// Mooncake Transfer Engine's integer return codes (the numbers its C++ and
// Python APIs return; Mooncake's include/error.h), for the compat engine.
//
// Mooncake's Python TransferEngine returns -1 for any failed transfer,
// initialize or handshake, whatever the cause; the finer codes below come
// only from memory registration (ERR_ADDRESS_OVERLAPPED for an overlap,
// ERR_ADDRESS_NOT_REGISTERED for an unknown address). Note that
// ERR_INVALID_ARGUMENT is -1 too, so "-1" reads as either.
//
// Thread-safety: constants.
#ifndef MOONCAKE_TRANSPORT_COMPAT_RETURN_CODES_H_
#define MOONCAKE_TRANSPORT_COMPAT_RETURN_CODES_H_

namespace mooncake::transport::compat {

inline constexpr int kOk = 0;
inline constexpr int kFailed = -1;  // Mooncake's generic failure of the Python API
inline constexpr int kErrInvalidArgument = -1;
inline constexpr int kErrTooManyRequests = -2;
inline constexpr int kErrAddressNotRegistered = -3;
inline constexpr int kErrBatchBusy = -4;
inline constexpr int kErrDeviceNotFound = -6;
inline constexpr int kErrAddressOverlapped = -7;
inline constexpr int kErrDns = -101;
inline constexpr int kErrSocket = -102;
inline constexpr int kErrMalformedJson = -103;
inline constexpr int kErrRejectHandshake = -104;
inline constexpr int kErrMetadata = -200;
inline constexpr int kErrMemory = -302;
inline constexpr int kErrNotImplemented = -303;

// transfer_check_status's answers (Mooncake's Python API).
inline constexpr int kStatusCompleted = 1;
inline constexpr int kStatusPending = 0;
inline constexpr int kStatusFailed = -1;
inline constexpr int kStatusTimeout = -2;

}  // namespace mooncake::transport::compat

#endif  // MOONCAKE_TRANSPORT_COMPAT_RETURN_CODES_H_
