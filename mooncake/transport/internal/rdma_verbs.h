// The thin verbs interface the RDMA transport is written against.
//
// RdmaEngine (rdma_engine.h) never includes <infiniband/verbs.h>: every verbs
// call goes through a type modelling `RdmaVerbs` below. Two models exist:
//   - IbVerbs (ib_verbs.h, --config=rdma only): forwards to libibverbs.
//   - FakeVerbs (fake_verbs.h, tests): an in-process fabric that really moves
//     bytes between registered regions, enforces lkey/rkey bounds, access
//     flags, QP states, send-queue depth and max_sge, and can inject errors.
// So the whole transport logic (slicing, chaining, selective signalling, QP
// bring-up, out-of-band exchange, error completions) is tested without a NIC.
//
// The enums mirror libibverbs' numeric values (ib_verbs.h static_asserts
// each one), so the real adapter converts with a cast.
//
// Objects are named by opaque handles (the real adapter stores the verbs
// pointer). A handle is only meaningful to the Verbs object that made it.
//
// Thread-safety: a model's methods may be called concurrently (libibverbs
// is thread-safe; the fake locks its fabric).
#ifndef MOONCAKE_TRANSPORT_INTERNAL_RDMA_VERBS_H_
#define MOONCAKE_TRANSPORT_INTERNAL_RDMA_VERBS_H_

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mooncake::transport_internal {

enum class ContextHandle : uintptr_t {};
enum class PdHandle : uintptr_t {};
enum class CqHandle : uintptr_t {};
enum class QpHandle : uintptr_t {};
enum class MrHandle : uintptr_t {};

// enum ibv_wc_status.
enum class WcStatus : uint32_t {
  kSuccess = 0,
  kLocLenErr = 1,
  kLocQpOpErr = 2,
  kLocEecOpErr = 3,
  kLocProtErr = 4,
  kWrFlushErr = 5,
  kMwBindErr = 6,
  kBadRespErr = 7,
  kLocAccessErr = 8,
  kRemInvReqErr = 9,
  kRemAccessErr = 10,
  kRemOpErr = 11,
  kRetryExcErr = 12,
  kRnrRetryExcErr = 13,
  kLocRddViolErr = 14,
  kRemInvRdReqErr = 15,
  kRemAbortErr = 16,
  kInvEecnErr = 17,
  kInvEecStateErr = 18,
  kFatalErr = 19,
  kRespTimeoutErr = 20,
  kGeneralErr = 21,
};

// enum ibv_qp_state.
enum class QpState : uint8_t {
  kReset = 0,
  kInit = 1,
  kRtr = 2,
  kRts = 3,
  kSqd = 4,
  kSqe = 5,
  kErr = 6,
};

// enum ibv_access_flags (the three we use).
inline constexpr uint32_t kAccessLocalWrite = 1;
inline constexpr uint32_t kAccessRemoteWrite = 1u << 1;
inline constexpr uint32_t kAccessRemoteRead = 1u << 2;

// The RC state machine as the transport drives it (IB spec 10.3.1, the subset
// without SQD/SQE): RESET->INIT->RTR->RTS forward only, INIT->INIT allowed,
// any state -> ERR or RESET. Everything else is rejected by real devices.
constexpr bool QpTransitionAllowed(QpState from, QpState to) {
  if (to == QpState::kErr || to == QpState::kReset) return true;
  switch (from) {
    case QpState::kReset:
      return to == QpState::kInit;
    case QpState::kInit:
      return to == QpState::kInit || to == QpState::kRtr;
    case QpState::kRtr:
      return to == QpState::kRts;
    case QpState::kRts:
      return to == QpState::kRts;
    default:
      return false;
  }
}

using Gid = std::array<uint8_t, 16>;

struct DeviceAttrs {
  uint32_t max_qp_wr = 0;  // send-queue depth limit
  uint32_t max_sge = 0;    // scatter/gather entries per WR
  uint32_t max_cqe = 0;    // completion-queue depth limit
  uint64_t max_mr_size = 0;
};

struct PortAttrs {
  uint16_t lid = 0;
  uint8_t active_mtu = 0;    // enum ibv_mtu: 1=256 ... 5=4096
  uint32_t max_msg_sz = 0;   // largest message (one WR) in bytes
  bool is_ethernet = false;  // RoCE: addressing needs the GID
  Gid gid{};                 // GID at the configured index
};

struct MemoryRegion {
  MrHandle handle{};
  uint32_t lkey = 0;
  uint32_t rkey = 0;
};

struct QpCaps {
  uint32_t max_send_wr = 0;
  uint32_t max_send_sge = 0;
};

struct QueuePair {
  QpHandle handle{};
  uint32_t qpn = 0;
};

// INIT -> RTR: where the connected peer QP is.
struct RtrParams {
  uint32_t dest_qpn = 0;
  uint32_t rq_psn = 0;  // 24 bits: the peer's initial send PSN
  uint16_t dlid = 0;
  Gid dgid{};
  bool use_gid = false;  // RoCE or a routed IB fabric
  uint8_t sgid_index = 0;
  uint8_t port = 1;
  uint8_t path_mtu = 0;  // enum ibv_mtu
  uint8_t max_dest_rd_atomic = 16;
  uint8_t min_rnr_timer = 12;
};

// RTR -> RTS.
struct RtsParams {
  uint32_t sq_psn = 0;   // 24 bits
  uint8_t timeout = 14;  // 4.096 us * 2^timeout per try
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t max_rd_atomic = 16;
};

inline constexpr size_t kMaxSgePerWr = 8;

struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

enum class WrOpcode : uint8_t { kRdmaRead = 0, kRdmaWrite = 1 };

// One RDMA READ/WRITE work request: one contiguous remote range and up to
// kMaxSgePerWr local pieces.
struct SendWr {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kRdmaRead;
  bool signaled = false;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t num_sge = 0;
  std::array<Sge, kMaxSgePerWr> sge{};

  uint64_t total_bytes() const {
    uint64_t n = 0;
    for (uint32_t i = 0; i < num_sge; ++i) n += sge[i].length;
    return n;
  }
};

struct WorkCompletion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  uint32_t qp_num = 0;
  uint32_t vendor_err = 0;
};

// ibv_post_send posts a chain up to the first bad WR.
struct PostSendResult {
  size_t posted = 0;
  absl::Status status;
};

// --- The concept, one requirement per line. --------------------------------
template <typename V>
concept RdmaVerbs = requires(V& v, std::string_view name, ContextHandle ctx, uint8_t port,
                             int gid_index, PdHandle pd, void* addr, uint64_t length,
                             uint32_t access, MrHandle mr, uint32_t depth, CqHandle cq, QpCaps caps,
                             QpHandle qp, const RtrParams& rtr, const RtsParams& rts,
                             std::span<const SendWr> wrs, std::span<WorkCompletion> wcs) {
  // ibv_get_device_list: names of the devices present (empty: none).
  { v.ListDevices() } -> std::same_as<std::vector<std::string>>;
  { v.OpenDevice(name) } -> std::same_as<absl::StatusOr<ContextHandle>>;
  { v.CloseDevice(ctx) } -> std::same_as<absl::Status>;
  { v.QueryDevice(ctx) } -> std::same_as<absl::StatusOr<DeviceAttrs>>;
  { v.QueryPort(ctx, port, gid_index) } -> std::same_as<absl::StatusOr<PortAttrs>>;
  { v.AllocPd(ctx) } -> std::same_as<absl::StatusOr<PdHandle>>;
  { v.DeallocPd(pd) } -> std::same_as<absl::Status>;
  // ibv_reg_mr: pins [addr, addr + length); keys valid until DeregMr.
  { v.RegMr(pd, addr, length, access) } -> std::same_as<absl::StatusOr<MemoryRegion>>;
  { v.DeregMr(mr) } -> std::same_as<absl::Status>;
  { v.CreateCq(ctx, depth) } -> std::same_as<absl::StatusOr<CqHandle>>;
  { v.DestroyCq(cq) } -> std::same_as<absl::Status>;
  // An RC QP in RESET whose send and receive completions go to `cq`.
  { v.CreateQp(pd, cq, caps) } -> std::same_as<absl::StatusOr<QueuePair>>;
  { v.DestroyQp(qp) } -> std::same_as<absl::Status>;
  { v.ModifyQpToInit(qp, port, access) } -> std::same_as<absl::Status>;
  { v.ModifyQpToRtr(qp, rtr) } -> std::same_as<absl::Status>;
  { v.ModifyQpToRts(qp, rts) } -> std::same_as<absl::Status>;
  // Flushes every outstanding WR with kWrFlushErr; the device stops touching
  // their buffers.
  { v.ModifyQpToError(qp) } -> std::same_as<absl::Status>;
  // Posts `wrs` as one chained list (one doorbell).
  { v.PostSend(qp, wrs) } -> std::same_as<PostSendResult>;
  // Non-blocking; fills a prefix of `wcs` and returns its length.
  { v.PollCq(cq, wcs) } -> std::same_as<absl::StatusOr<size_t>>;
};

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_RDMA_VERBS_H_
