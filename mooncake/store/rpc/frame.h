// The RPC wire frame: a fixed 32-byte header followed by a payload (a
// serialized protobuf message, or an error message in a failed response).
// docs/rpc_frame_format.md is the normative description, with test vectors.
//
//   offset size field
//   0      4    magic            "MCRP" (0x4D 0x43 0x52 0x50)
//   4      1    version          1
//   5      1    flags            bit 0: response; bits 1..7 must be 0
//   6      2    method id        nonzero
//   8      8    request id       nonzero, except 0 in a connection error
//   16     4    aux              request: timeout in us (0 = none)
//                                response: absl::StatusCode (0..16)
//   20     4    payload length   <= the receiver's limit (<= kMaxPayloadBytesCeiling)
//   24     4    payload checksum low 32 bits of XXH3-64(payload)
//   28     4    header checksum  low 32 bits of XXH3-64(bytes 0..27)
// All integers little-endian.
//
// A response with request id 0 is a connection error: the sender closes the
// connection right after it; its status and message say why.
//
// Decoding errors (every one is fatal for the stream: after one, the framing
// is lost and the connection must be closed):
//   INVALID_ARGUMENT    bad magic, reserved flag bits set, method id 0,
//                       request id 0 in a request, status code out of range
//   UNIMPLEMENTED       a version this decoder does not speak
//   DATA_LOSS           header or payload checksum mismatch
//   RESOURCE_EXHAUSTED  payload length over the limit
//   OUT_OF_RANGE        (DecodeFrame on a whole buffer only) truncated frame
//
// Thread-safety: the free functions are pure; a FrameDecoder is
// thread-compatible (one reader at a time).
#ifndef MOONCAKE_STORE_RPC_FRAME_H_
#define MOONCAKE_STORE_RPC_FRAME_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/hash.h"

namespace mooncake::rpc {

inline constexpr uint32_t kFrameMagic = 0x5052434D;  // bytes "MCRP" read little-endian
inline constexpr uint8_t kFrameVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 32;
inline constexpr uint8_t kFlagResponse = 0x01;
inline constexpr uint32_t kMaxStatusCode = 16;  // absl::StatusCode::kUnauthenticated
// No receiver accepts more than this, whatever it is configured with.
inline constexpr uint32_t kMaxPayloadBytesCeiling = uint32_t{256} << 20;
inline constexpr uint32_t kDefaultMaxPayloadBytes = uint32_t{16} << 20;
// Error messages carried in responses are cut to this many bytes.
inline constexpr size_t kMaxErrorMessageBytes = 4096;

enum class FrameKind : uint8_t { kRequest, kResponse };

struct FrameHeader {
  FrameKind kind = FrameKind::kRequest;
  uint16_t method_id = 0;
  uint64_t request_id = 0;
  uint32_t timeout_us = 0;                        // requests only
  absl::StatusCode code = absl::StatusCode::kOk;  // responses only
  uint32_t payload_bytes = 0;                     // filled by the encoder
  uint32_t payload_checksum = 0;                  // filled by the encoder

  friend bool operator==(const FrameHeader&, const FrameHeader&) = default;
};

struct Frame {
  FrameHeader header;
  std::string_view payload;  // points into the decoder's buffer
};

}  // namespace mooncake::rpc

namespace mooncake::rpc_internal {

inline void StoreLe16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void StoreLe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void StoreLe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t LoadLe16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t LoadLe32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t LoadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace mooncake::rpc_internal

namespace mooncake::rpc {

inline uint32_t FrameChecksum(const void* data, size_t size) {
  return static_cast<uint32_t>(StableHash64(data, size));
}

// Writes the 32 header bytes for `header` (its payload_bytes and
// payload_checksum as given) into `out`, header checksum included.
inline void EncodeHeader(const FrameHeader& header, uint8_t* out) {
  using rpc_internal::StoreLe16;
  using rpc_internal::StoreLe32;
  using rpc_internal::StoreLe64;
  MC_DASSERT(header.payload_bytes <= kMaxPayloadBytesCeiling, "payload over the format's ceiling");
  StoreLe32(out, kFrameMagic);
  out[4] = kFrameVersion;
  out[5] = header.kind == FrameKind::kResponse ? kFlagResponse : 0;
  StoreLe16(out + 6, header.method_id);
  StoreLe64(out + 8, header.request_id);
  StoreLe32(out + 16, header.kind == FrameKind::kResponse ? static_cast<uint32_t>(header.code)
                                                          : header.timeout_us);
  StoreLe32(out + 20, header.payload_bytes);
  StoreLe32(out + 24, header.payload_checksum);
  StoreLe32(out + 28, FrameChecksum(out, 28));
}

// Appends one frame (header + payload) to `out`, computing the payload's
// length and checksum. REQUIRES: payload.size() <= kMaxPayloadBytesCeiling.
inline void AppendFrame(FrameHeader header, std::string_view payload, std::string* out) {
  MC_ASSERT(payload.size() <= kMaxPayloadBytesCeiling, "frame payload over the format's ceiling");
  header.payload_bytes = static_cast<uint32_t>(payload.size());
  header.payload_checksum = FrameChecksum(payload.data(), payload.size());
  const size_t at = out->size();
  out->resize(at + kFrameHeaderBytes + payload.size());
  auto* p = reinterpret_cast<uint8_t*>(out->data() + at);
  EncodeHeader(header, p);
  if (!payload.empty()) std::memcpy(p + kFrameHeaderBytes, payload.data(), payload.size());
}

inline std::string EncodeFrame(const FrameHeader& header, std::string_view payload) {
  std::string out;
  AppendFrame(header, payload, &out);
  return out;
}

// Parses and validates 32 header bytes. The payload checksum is checked
// later, by the caller that has the payload (FrameDecoder does).
inline absl::StatusOr<FrameHeader> DecodeHeader(const uint8_t* p, uint32_t max_payload_bytes) {
  using rpc_internal::LoadLe16;
  using rpc_internal::LoadLe32;
  using rpc_internal::LoadLe64;
  MC_DASSERT(max_payload_bytes <= kMaxPayloadBytesCeiling, "limit over the format's ceiling");
  const uint32_t magic = LoadLe32(p);
  if (magic != kFrameMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a mooncake RPC frame: magic 0x", absl::Hex(magic, absl::kZeroPad8),
                     ", expected 0x", absl::Hex(kFrameMagic, absl::kZeroPad8), " (\"MCRP\")"));
  }
  if (const uint32_t want = LoadLe32(p + 28), got = FrameChecksum(p, 28); want != got) {
    return absl::DataLossError(absl::StrCat("frame header checksum mismatch: header says 0x",
                                            absl::Hex(want, absl::kZeroPad8), ", computed 0x",
                                            absl::Hex(got, absl::kZeroPad8)));
  }
  if (p[4] != kFrameVersion) {
    return absl::UnimplementedError(absl::StrCat("unsupported RPC frame version ", p[4],
                                                 "; this peer speaks version ", kFrameVersion));
  }
  if ((p[5] & ~kFlagResponse) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("reserved frame flag bits set: 0x", absl::Hex(p[5], absl::kZeroPad2)));
  }
  FrameHeader h;
  h.kind = (p[5] & kFlagResponse) != 0 ? FrameKind::kResponse : FrameKind::kRequest;
  h.method_id = LoadLe16(p + 6);
  h.request_id = LoadLe64(p + 8);
  const uint32_t aux = LoadLe32(p + 16);
  h.payload_bytes = LoadLe32(p + 20);
  h.payload_checksum = LoadLe32(p + 24);
  if (h.kind == FrameKind::kRequest) {
    if (h.method_id == 0) return absl::InvalidArgumentError("request frame with method id 0");
    if (h.request_id == 0) return absl::InvalidArgumentError("request frame with request id 0");
    h.timeout_us = aux;
  } else {
    if (aux > kMaxStatusCode) {
      return absl::InvalidArgumentError(absl::StrCat("response frame with unknown status code ",
                                                     aux, " (max ", kMaxStatusCode, ")"));
    }
    h.code = static_cast<absl::StatusCode>(aux);
  }
  if (h.payload_bytes > max_payload_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("frame payload of ", h.payload_bytes,
                                                     " bytes exceeds the limit of ",
                                                     max_payload_bytes, " bytes"));
  }
  return h;
}

inline absl::Status CheckPayload(const FrameHeader& h, std::string_view payload) {
  MC_DASSERT(payload.size() == h.payload_bytes, "payload length differs from the header");
  if (const uint32_t got = FrameChecksum(payload.data(), payload.size());
      got != h.payload_checksum) {
    return absl::DataLossError(absl::StrCat(
        "frame payload checksum mismatch (request id ", h.request_id, ", ", payload.size(),
        " bytes): header says 0x", absl::Hex(h.payload_checksum, absl::kZeroPad8), ", computed 0x",
        absl::Hex(got, absl::kZeroPad8)));
  }
  return absl::OkStatus();
}

// Decodes exactly one frame that fills `bytes` entirely.
inline absl::StatusOr<Frame> DecodeFrame(std::string_view bytes,
                                         uint32_t max_payload_bytes = kDefaultMaxPayloadBytes) {
  if (bytes.size() < kFrameHeaderBytes) {
    return absl::OutOfRangeError(absl::StrCat("truncated frame: ", bytes.size(),
                                              " bytes, a header alone is ", kFrameHeaderBytes));
  }
  auto header = DecodeHeader(reinterpret_cast<const uint8_t*>(bytes.data()), max_payload_bytes);
  if (!header.ok()) return header.status();
  const size_t total = kFrameHeaderBytes + header->payload_bytes;
  if (bytes.size() != total) {
    return absl::OutOfRangeError(absl::StrCat(bytes.size() < total ? "truncated" : "trailing bytes",
                                              " in frame: ", bytes.size(), " bytes, header says ",
                                              total));
  }
  Frame frame{*header, bytes.substr(kFrameHeaderBytes)};
  if (absl::Status s = CheckPayload(frame.header, frame.payload); !s.ok()) return s;
  return frame;
}

// Incremental decoder for a byte stream: the reader writes into
// WritableSpan(), Commit()s what it read, then calls Next() until it returns
// nullopt (more bytes needed). An error is sticky: every later Next() returns
// it again. Frames returned by Next() stay valid until the next
// WritableSpan() or Append(); Next() itself never moves bytes.
//
// Memory: the buffer holds at most one frame plus one read chunk, so it is
// bounded by kFrameHeaderBytes + max_payload_bytes + the largest min_bytes.
class FrameDecoder {
 public:
  explicit FrameDecoder(uint32_t max_payload_bytes = kDefaultMaxPayloadBytes)
      : max_payload_bytes_(max_payload_bytes) {
    MC_ASSERT(max_payload_bytes <= kMaxPayloadBytesCeiling, "limit over the format's ceiling");
  }

  // At least `min_bytes` writable bytes at the end of the buffered data.
  std::span<uint8_t> WritableSpan(size_t min_bytes) {
    if (begin_ == end_) begin_ = end_ = 0;
    if (buf_.size() - end_ < min_bytes && begin_ > 0) {
      std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (buf_.size() - end_ < min_bytes) buf_.resize(end_ + std::max(min_bytes, buf_.size()));
    return {buf_.data() + end_, buf_.size() - end_};
  }

  // REQUIRES: n <= the size of the last WritableSpan().
  void Commit(size_t n) {
    MC_ASSERT(end_ + n <= buf_.size(), "commit past the writable span");
    end_ += n;
  }

  void Append(std::string_view bytes) {
    std::span<uint8_t> dst = WritableSpan(bytes.size());
    if (!bytes.empty()) std::memcpy(dst.data(), bytes.data(), bytes.size());
    Commit(bytes.size());
  }

  absl::StatusOr<std::optional<Frame>> Next() {
    if (!error_.ok()) return error_;
    const size_t avail = end_ - begin_;
    if (avail < kFrameHeaderBytes) return std::optional<Frame>();
    const uint8_t* p = buf_.data() + begin_;
    auto header = DecodeHeader(p, max_payload_bytes_);
    if (!header.ok()) return error_ = header.status();
    const size_t total = kFrameHeaderBytes + header->payload_bytes;
    if (avail < total) return std::optional<Frame>();
    Frame frame{*header, std::string_view(reinterpret_cast<const char*>(p) + kFrameHeaderBytes,
                                          header->payload_bytes)};
    if (absl::Status s = CheckPayload(frame.header, frame.payload); !s.ok()) return error_ = s;
    begin_ += total;
    MC_DASSERT(begin_ <= end_, "decoder consumed past its data");
    return std::optional<Frame>(frame);
  }

  // Bytes of a frame still missing, given what is buffered (0 when a whole
  // frame or nothing is buffered); lets a reader size its next read.
  size_t MissingBytes() const {
    const size_t avail = end_ - begin_;
    if (avail < kFrameHeaderBytes) return avail == 0 ? 0 : kFrameHeaderBytes - avail;
    // Clamped: the length is not validated yet, and a reader must never size
    // a buffer by an unchecked length.
    const size_t total =
        kFrameHeaderBytes +
        std::min(rpc_internal::LoadLe32(buf_.data() + begin_ + 20), max_payload_bytes_);
    return total > avail ? total - avail : 0;
  }

  size_t BufferedBytes() const { return end_ - begin_; }
  size_t CapacityBytes() const { return buf_.size(); }
  const absl::Status& error() const { return error_; }
  uint32_t max_payload_bytes() const { return max_payload_bytes_; }

 private:
  uint32_t max_payload_bytes_;
  std::vector<uint8_t> buf_;
  size_t begin_ = 0;  // first unconsumed byte
  size_t end_ = 0;    // one past the last committed byte
  absl::Status error_;
};

}  // namespace mooncake::rpc

#endif  // MOONCAKE_STORE_RPC_FRAME_H_
