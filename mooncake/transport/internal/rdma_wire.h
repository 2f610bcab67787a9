// The RDMA transport's out-of-band control messages (over TCP).
//
// Frame: a 12-byte header then the body, all little-endian:
//   u32 magic 0x4452434D ("MCRD")  u16 version (2)  u16 type  u32 body_bytes
// Bodies (fixed layout; `status` bodies end with a length-prefixed message):
//   kConnectRequest  QpInfo, u8 path             requester -> owner
//   kConnectReply    u32 code, QpInfo, msg       owner -> requester
//   kOpenRequest     u64 segment_id              requester -> owner
//   kOpenReply       u32 code, u64 segment_id, u64 addr, u32 rkey,
//                    u64 length, u8 kind, i32 device, msg
//   kAuthHello       blob (base/auth.h's HELLO)    requester -> owner
//   kAuthChallenge   u32 code, blob (nonce), msg   owner -> requester
//   kAuthProof       blob (the client proof)       requester -> owner
//   kAuthOk          u32 code, blob (server proof), msg   owner -> requester
//   QpInfo = u32 qpn, u32 psn, u16 lid, u8 mtu, u8 use_gid, 16 B gid
//   blob   = u16 bytes, then that many bytes (<= kMaxAuthBlobBytes)
//   msg    = u16 bytes, then that many bytes (<= kMaxMessageBytes)
// `path` is the requester's local path (RdmaOptions::paths) the queue pair
// runs on; the owner answers on its own path `path % its path count`, so
// rails pair up (version 1 had no path: one port a side).
// `code` is an absl::StatusCode. The decoder accepts exactly these layouts
// and rejects anything else with InvalidArgument/DataLoss (it is fuzzed:
// rdma_wire_fuzz.cc).
#ifndef MOONCAKE_TRANSPORT_INTERNAL_RDMA_WIRE_H_
#define MOONCAKE_TRANSPORT_INTERNAL_RDMA_WIRE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/transport/internal/rdma_verbs.h"
#include "mooncake/transport/transport.h"

namespace mooncake::transport_internal {

inline constexpr uint32_t kRdmaWireMagic = 0x4452434D;
inline constexpr uint16_t kRdmaWireVersion = 2;
inline constexpr size_t kRdmaHeaderBytes = 12;
inline constexpr size_t kMaxMessageBytes = 512;
inline constexpr size_t kMaxAuthBlobBytes = 256;
inline constexpr size_t kRdmaBodyBytesMax = 64 + kMaxAuthBlobBytes + kMaxMessageBytes;

enum class RdmaMsgType : uint16_t {
  kConnectRequest = 1,
  kConnectReply = 2,
  kOpenRequest = 3,
  kOpenReply = 4,
  // The authentication handshake (base/auth.h), first on a control
  // connection to an owner with an auth token file.
  kAuthHello = 5,
  kAuthChallenge = 6,
  kAuthProof = 7,
  kAuthOk = 8,
};
inline constexpr uint16_t kRdmaMsgTypeMax = 8;

struct QpInfo {
  uint32_t qpn = 0;
  uint32_t psn = 0;  // 24 bits
  uint16_t lid = 0;
  uint8_t mtu = 0;  // enum ibv_mtu, 1..5
  bool use_gid = false;
  Gid gid{};
  friend bool operator==(const QpInfo&, const QpInfo&) = default;
};

struct SegmentInfo {
  transport::SegmentId id = 0;
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint64_t length = 0;
  transport::MemoryLocation location;
  friend bool operator==(const SegmentInfo&, const SegmentInfo&) = default;
};

// One decoded message; which fields are meaningful depends on `type`.
struct RdmaMessage {
  RdmaMsgType type = RdmaMsgType::kConnectRequest;
  absl::Status status;  // replies
  QpInfo qp;            // connect request / reply
  uint8_t path = 0;     // connect request: the requester's path index
  SegmentInfo segment;  // open request (id only) / reply
  std::string auth;     // the AUTH_* messages' blob
};

namespace rdma_wire {

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(v); }
  void U16(uint16_t v) { Le(v, 2); }
  void U32(uint32_t v) { Le(v, 4); }
  void U64(uint64_t v) { Le(v, 8); }
  void Bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  std::vector<uint8_t>& out() { return out_; }

 private:
  void Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  bool U8(uint8_t* v) { return Le(v, 1); }
  bool U16(uint16_t* v) { return Le(v, 2); }
  bool U32(uint32_t* v) { return Le(v, 4); }
  bool U64(uint64_t* v) { return Le(v, 8); }
  bool Bytes(void* p, size_t n) {
    if (in_.size() - pos_ < n) return false;
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool AtEnd() const { return pos_ == in_.size(); }

 private:
  template <typename T>
  bool Le(T* v, size_t n) {
    if (in_.size() - pos_ < n) return false;
    uint64_t x = 0;
    for (size_t i = 0; i < n; ++i) x |= uint64_t{in_[pos_ + i]} << (8 * i);
    pos_ += n;
    *v = static_cast<T>(x);
    return true;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

inline void PutQp(Writer& w, const QpInfo& qp) {
  w.U32(qp.qpn);
  w.U32(qp.psn);
  w.U16(qp.lid);
  w.U8(qp.mtu);
  w.U8(qp.use_gid ? 1 : 0);
  w.Bytes(qp.gid.data(), qp.gid.size());
}

inline bool GetQp(Reader& r, QpInfo* qp) {
  uint8_t use_gid = 0;
  if (!r.U32(&qp->qpn) || !r.U32(&qp->psn) || !r.U16(&qp->lid) || !r.U8(&qp->mtu) ||
      !r.U8(&use_gid) || !r.Bytes(qp->gid.data(), qp->gid.size())) {
    return false;
  }
  qp->use_gid = use_gid == 1;
  return use_gid <= 1 && qp->psn < (1u << 24) && qp->qpn < (1u << 24) && qp->mtu >= 1 &&
         qp->mtu <= 5;
}

inline void PutStatus(Writer& w, const absl::Status& s) { w.U32(static_cast<uint32_t>(s.code())); }

inline void PutText(Writer& w, const absl::Status& s) {
  std::string_view text(s.message().data(), s.message().size());
  if (s.ok()) text = {};
  if (!s.ok() && text.empty()) text = "(no message)";
  const size_t n = std::min(text.size(), kMaxMessageBytes);
  w.U16(static_cast<uint16_t>(n));
  w.Bytes(text.data(), n);
}

inline void PutBlob(Writer& w, std::string_view b) {
  const size_t n = std::min(b.size(), kMaxAuthBlobBytes);
  w.U16(static_cast<uint16_t>(n));
  w.Bytes(b.data(), n);
}

inline bool GetBlob(Reader& r, std::string* b) {
  uint16_t n = 0;
  if (!r.U16(&n) || n > kMaxAuthBlobBytes) return false;
  b->assign(n, '\0');
  return r.Bytes(b->data(), n);
}

inline bool GetStatus(Reader& r, uint32_t code, absl::Status* s) {
  uint16_t n = 0;
  if (code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated) || !r.U16(&n) ||
      n > kMaxMessageBytes) {
    return false;
  }
  std::string text(n, '\0');
  if (!r.Bytes(text.data(), n)) return false;
  *s = absl::Status(static_cast<absl::StatusCode>(code), text);
  // An OK status carries no message; a non-OK one must say something.
  return s->ok() == (code == 0) && (code == 0 || n > 0);
}

}  // namespace rdma_wire

// Encodes a whole frame (header + body).
inline std::vector<uint8_t> EncodeRdmaMessage(const RdmaMessage& m) {
  rdma_wire::Writer body;
  switch (m.type) {
    case RdmaMsgType::kConnectRequest:
      rdma_wire::PutQp(body, m.qp);
      body.U8(m.path);
      break;
    case RdmaMsgType::kConnectReply:
      rdma_wire::PutStatus(body, m.status);
      rdma_wire::PutQp(body, m.qp);
      rdma_wire::PutText(body, m.status);
      break;
    case RdmaMsgType::kOpenRequest:
      body.U64(m.segment.id);
      break;
    case RdmaMsgType::kOpenReply:
      rdma_wire::PutStatus(body, m.status);
      body.U64(m.segment.id);
      body.U64(m.segment.addr);
      body.U32(m.segment.rkey);
      body.U64(m.segment.length);
      body.U8(static_cast<uint8_t>(m.segment.location.kind));
      body.U32(static_cast<uint32_t>(m.segment.location.device));
      rdma_wire::PutText(body, m.status);
      break;
    case RdmaMsgType::kAuthHello:
    case RdmaMsgType::kAuthProof:
      rdma_wire::PutBlob(body, m.auth);
      break;
    case RdmaMsgType::kAuthChallenge:
    case RdmaMsgType::kAuthOk:
      rdma_wire::PutStatus(body, m.status);
      rdma_wire::PutBlob(body, m.auth);
      rdma_wire::PutText(body, m.status);
      break;
  }
  rdma_wire::Writer frame;
  frame.U32(kRdmaWireMagic);
  frame.U16(kRdmaWireVersion);
  frame.U16(static_cast<uint16_t>(m.type));
  frame.U32(static_cast<uint32_t>(body.out().size()));
  frame.Bytes(body.out().data(), body.out().size());
  return std::move(frame.out());
}

struct RdmaHeader {
  RdmaMsgType type;
  uint32_t body_bytes;
};

inline absl::StatusOr<RdmaHeader> DecodeRdmaHeader(std::span<const uint8_t> bytes) {
  rdma_wire::Reader r(bytes);
  uint32_t magic = 0, body_bytes = 0;
  uint16_t version = 0, type = 0;
  if (!r.U32(&magic) || !r.U16(&version) || !r.U16(&type) || !r.U32(&body_bytes)) {
    return absl::InvalidArgumentError("RDMA control header truncated");
  }
  if (magic != kRdmaWireMagic) {
    return absl::DataLossError(
        "RDMA control frame has a bad magic: peer is not a mooncake RDMA "
        "transport");
  }
  if (version != kRdmaWireVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("RDMA control protocol version ", version, ", expected ", kRdmaWireVersion));
  }
  if (type < 1 || type > kRdmaMsgTypeMax) {
    return absl::DataLossError(absl::StrCat("unknown RDMA message ", type));
  }
  if (body_bytes > kRdmaBodyBytesMax) {
    return absl::DataLossError(
        absl::StrCat("RDMA control body of ", body_bytes, " bytes exceeds ", kRdmaBodyBytesMax));
  }
  return RdmaHeader{static_cast<RdmaMsgType>(type), body_bytes};
}

inline absl::StatusOr<RdmaMessage> DecodeRdmaBody(RdmaMsgType type, std::span<const uint8_t> body) {
  rdma_wire::Reader r(body);
  RdmaMessage m;
  m.type = type;
  uint32_t code = 0;
  bool ok = false;
  switch (type) {
    case RdmaMsgType::kConnectRequest:
      ok = rdma_wire::GetQp(r, &m.qp) && r.U8(&m.path);
      break;
    case RdmaMsgType::kConnectReply:
      ok = r.U32(&code) && rdma_wire::GetQp(r, &m.qp) && rdma_wire::GetStatus(r, code, &m.status);
      break;
    case RdmaMsgType::kOpenRequest:
      ok = r.U64(&m.segment.id) && m.segment.id != 0;
      break;
    case RdmaMsgType::kOpenReply: {
      uint8_t kind = 0;
      uint32_t device = 0;
      ok = r.U32(&code) && r.U64(&m.segment.id) && r.U64(&m.segment.addr) &&
           r.U32(&m.segment.rkey) && r.U64(&m.segment.length) && r.U8(&kind) && r.U32(&device) &&
           rdma_wire::GetStatus(r, code, &m.status) && kind <= 2;
      m.segment.location.kind = static_cast<transport::MemoryKind>(kind);
      m.segment.location.device = static_cast<int32_t>(device);
      // A usable segment must not wrap the address space.
      ok = ok && (!m.status.ok() ||
                  (m.segment.length > 0 && m.segment.addr + m.segment.length > m.segment.addr));
      break;
    }
    case RdmaMsgType::kAuthHello:
    case RdmaMsgType::kAuthProof:
      ok = rdma_wire::GetBlob(r, &m.auth);
      break;
    case RdmaMsgType::kAuthChallenge:
    case RdmaMsgType::kAuthOk:
      ok = r.U32(&code) && rdma_wire::GetBlob(r, &m.auth) &&
           rdma_wire::GetStatus(r, code, &m.status);
      break;
  }
  if (!ok || !r.AtEnd()) {
    return absl::DataLossError("malformed RDMA control message body");
  }
  return m;
}

// Decodes one whole frame (header + body, nothing after it).
inline absl::StatusOr<RdmaMessage> DecodeRdmaMessage(std::span<const uint8_t> frame) {
  if (frame.size() < kRdmaHeaderBytes) {
    return absl::InvalidArgumentError("RDMA control frame truncated");
  }
  auto header = DecodeRdmaHeader(frame.first(kRdmaHeaderBytes));
  if (!header.ok()) return header.status();
  if (frame.size() - kRdmaHeaderBytes != header->body_bytes) {
    return absl::DataLossError("RDMA control frame length does not match its header");
  }
  return DecodeRdmaBody(header->type, frame.subspan(kRdmaHeaderBytes));
}

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_RDMA_WIRE_H_
