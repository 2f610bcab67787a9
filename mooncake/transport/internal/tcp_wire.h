// TcpTransport's frame header: encoding and the validating decoder.
// The format is specified, with test vectors, in docs/tcp_wire_format.md.
//
// Every frame is a 48-byte little-endian header, optionally followed by
// `length` payload bytes (READ_DATA, WRITE, ERROR and the AUTH_* frames only):
//
//   off size field
//     0    4 magic      0x3154434D ("MCT1" in memory order)
//     4    1 version    1
//     5    1 type       FrameType
//     6    2 code       absl::StatusCode of a response (0 = OK); 0 in requests
//     8    8 tag        requester-chosen; a response echoes its request's tag
//    16    8 segment    segment id
//    24    8 offset     byte offset in the segment (OPEN_OK: segment length)
//    32    4 length     READ: bytes asked; READ_DATA/WRITE/ERROR/AUTH_*: payload bytes
//    36    4 aux        OPEN_OK: location kind | (device + 1) << 8; READ/WRITE:
//                       kAuxCapability when a capability follows; else 0
//    40    4 reserved   0
//    44    4 check      low 32 bits of StableHash64(bytes 0..43)
#ifndef MOONCAKE_TRANSPORT_INTERNAL_TCP_WIRE_H_
#define MOONCAKE_TRANSPORT_INTERNAL_TCP_WIRE_H_

#include <array>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/hash.h"

namespace mooncake::transport_internal {

inline constexpr uint32_t kWireMagic = 0x3154434D;
inline constexpr uint8_t kWireVersion = 1;
inline constexpr size_t kHeaderBytes = 48;
// The largest payload of one frame (a slice); bounds every receive buffer.
inline constexpr uint32_t kMaxSliceBytes = 16u << 20;
// The largest ERROR message.
inline constexpr uint32_t kMaxErrorBytes = 1024;
// The largest AUTH_HELLO payload (mooncake/base/auth.h's HELLO: 2 bytes, a
// principal of at most 128 bytes, a 32-byte nonce) and the smallest (a
// one-byte principal). AUTH_CHALLENGE, AUTH_PROOF and AUTH_OK carry exactly
// kAuthTokenBytes (a nonce or an HMAC-SHA256).
inline constexpr uint32_t kMaxAuthHelloBytes = 256;
inline constexpr uint32_t kMinAuthHelloBytes = 2 + 1 + 32;
inline constexpr uint32_t kAuthTokenBytes = 32;
// READ and WRITE frames with aux == kAuxCapability carry a range capability
// (base/capability.h) of kWireCapabilityBytes right after the header (before
// a WRITE's payload; not counted in `length`).
inline constexpr uint32_t kAuxCapability = 1;
inline constexpr uint32_t kWireCapabilityBytes = 64;

enum class FrameType : uint8_t {
  kOpen = 1,      // request: segment -> OPEN_OK or ERROR
  kOpenOk = 2,    // response: offset = segment length, aux = location
  kRead = 3,      // request: segment, offset, length -> READ_DATA or ERROR
  kReadData = 4,  // response: `length` bytes follow
  kWrite = 5,     // request: segment, offset, `length` bytes follow -> WRITE_ACK or ERROR
  kWriteAck = 6,  // response
  kError = 7,     // response: code != 0, `length` bytes of message follow
  // The authentication handshake (docs/tcp_wire_format.md, "Authentication"):
  // the first frames of a connection to an owner that has an auth token file.
  kAuthHello = 8,      // request: HELLO payload -> AUTH_CHALLENGE or ERROR
  kAuthChallenge = 9,  // response: the server nonce
  kAuthProof = 10,     // request: the client's proof -> AUTH_OK or ERROR
  kAuthOk = 11,        // response: the server's proof
};
inline constexpr uint8_t kMaxFrameType = 11;

struct FrameHeader {
  FrameType type = FrameType::kRead;
  uint16_t code = 0;
  uint64_t tag = 0;
  uint64_t segment = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
  uint32_t aux = 0;

  friend bool operator==(const FrameHeader&, const FrameHeader&) = default;
};

using WireHeader = std::array<uint8_t, kHeaderBytes>;

namespace wire_detail {
template <typename T>
inline void Put(uint8_t* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
template <typename T>
inline T Get(const uint8_t* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<T>(p[i]) << (8 * i));
  return v;
}
inline uint32_t Check(const uint8_t* p) { return static_cast<uint32_t>(StableHash64(p, 44)); }
}  // namespace wire_detail

inline WireHeader EncodeHeader(const FrameHeader& h) {
  WireHeader out{};
  uint8_t* p = out.data();
  wire_detail::Put<uint32_t>(p + 0, kWireMagic);
  p[4] = kWireVersion;
  p[5] = static_cast<uint8_t>(h.type);
  wire_detail::Put<uint16_t>(p + 6, h.code);
  wire_detail::Put<uint64_t>(p + 8, h.tag);
  wire_detail::Put<uint64_t>(p + 16, h.segment);
  wire_detail::Put<uint64_t>(p + 24, h.offset);
  wire_detail::Put<uint32_t>(p + 32, h.length);
  wire_detail::Put<uint32_t>(p + 36, h.aux);
  wire_detail::Put<uint32_t>(p + 40, 0);
  wire_detail::Put<uint32_t>(p + 44, wire_detail::Check(p));
  return out;
}

// Validates everything a header alone can show; DataLoss with the reason.
inline absl::StatusOr<FrameHeader> DecodeHeader(const uint8_t* p) {
  using wire_detail::Get;
  if (Get<uint32_t>(p) != kWireMagic) return absl::DataLossError("bad frame magic");
  if (p[4] != kWireVersion) {
    return absl::DataLossError(absl::StrCat("unsupported wire version ", p[4]));
  }
  if (Get<uint32_t>(p + 44) != wire_detail::Check(p)) {
    return absl::DataLossError("frame header checksum mismatch");
  }
  if (Get<uint32_t>(p + 40) != 0) return absl::DataLossError("reserved header bytes not zero");
  FrameHeader h;
  const uint8_t type = p[5];
  if (type < 1 || type > kMaxFrameType)
    return absl::DataLossError(absl::StrCat("bad frame type ", type));
  h.type = static_cast<FrameType>(type);
  h.code = Get<uint16_t>(p + 6);
  h.tag = Get<uint64_t>(p + 8);
  h.segment = Get<uint64_t>(p + 16);
  h.offset = Get<uint64_t>(p + 24);
  h.length = Get<uint32_t>(p + 32);
  h.aux = Get<uint32_t>(p + 36);
  if (h.code > 16) return absl::DataLossError(absl::StrCat("bad status code ", h.code));
  const bool is_error = h.type == FrameType::kError;
  if (is_error != (h.code != 0)) {
    return absl::DataLossError("status code and frame type disagree");
  }
  if (h.length > kMaxSliceBytes) {
    return absl::DataLossError(absl::StrCat("frame length ", h.length, " exceeds the limit"));
  }
  switch (h.type) {
    case FrameType::kRead:
    case FrameType::kWrite:
      if (h.aux != 0 && h.aux != kAuxCapability) {
        return absl::DataLossError(absl::StrCat("bad READ/WRITE aux ", h.aux));
      }
      [[fallthrough]];
    case FrameType::kReadData:
      if (h.length == 0) return absl::DataLossError("zero-length data frame");
      break;
    case FrameType::kError:
      if (h.length > kMaxErrorBytes) return absl::DataLossError("error message too long");
      break;
    case FrameType::kOpen:
    case FrameType::kWriteAck:
      if (h.length != 0) return absl::DataLossError("unexpected payload");
      break;
    case FrameType::kOpenOk:
      if (h.length != 0 || h.offset == 0 || (h.aux & 0xFF) > 2) {
        return absl::DataLossError("bad OPEN_OK frame");
      }
      break;
    case FrameType::kAuthHello:
    case FrameType::kAuthChallenge:
    case FrameType::kAuthProof:
    case FrameType::kAuthOk: {
      const bool hello = h.type == FrameType::kAuthHello;
      const bool length_ok = hello
                                 ? h.length >= kMinAuthHelloBytes && h.length <= kMaxAuthHelloBytes
                                 : h.length == kAuthTokenBytes;
      if (!length_ok || h.segment != 0 || h.offset != 0 || h.aux != 0) {
        return absl::DataLossError("bad authentication frame");
      }
      break;
    }
  }
  return h;
}

// The data requests an owner serves once a connection is authenticated (or
// needs none); AUTH_HELLO and AUTH_PROOF are handshake requests (IsAuthFrame).
inline bool IsRequest(FrameType t) {
  return t == FrameType::kOpen || t == FrameType::kRead || t == FrameType::kWrite;
}

inline bool IsAuthFrame(FrameType t) {
  return t == FrameType::kAuthHello || t == FrameType::kAuthChallenge ||
         t == FrameType::kAuthProof || t == FrameType::kAuthOk;
}

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_TCP_WIRE_H_
