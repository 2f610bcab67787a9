// Work-request mechanics of the RDMA transport, free of any device:
//   - SliceRequest: one transfer request -> RDMA READ/WRITE work requests,
//     each within the device's max message size and max_sge.
//   - SignalPolicy: selective signalling (one signalled WR every N, plus the
//     WR that would otherwise leave the send queue without a signalled tail).
//   - WrTracker: the in-order FIFO of posted WRs on one RC QP; a signalled
//     completion retires every WR up to it, an error completion splits the
//     FIFO into succeeded / failed / flushed.
//   - WcStatusToStatus: ibv_wc_status -> absl::Status with an actionable text.
//
// Thread-safety: none; the engine holds its mutex around every use.
#ifndef MOONCAKE_TRANSPORT_INTERNAL_RDMA_WORK_H_
#define MOONCAKE_TRANSPORT_INTERNAL_RDMA_WORK_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/transport/internal/rdma_verbs.h"

namespace mooncake::transport_internal {

// A piece of the local buffer covered by one memory region.
struct LocalChunk {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t lkey = 0;
};

struct SliceLimits {
  uint32_t max_sge = 1;       // <= kMaxSgePerWr and the device's max_sge
  uint64_t wr_bytes_max = 0;  // <= the port's max_msg_sz
};

// ibv_sge::length is 32 bits; stay well inside it.
inline constexpr uint64_t kSgeBytesMax = uint64_t{1} << 30;

// Appends to `out` the WRs that move the local `chunks` (in order, together
// the request's local buffer) to/from the contiguous remote range starting at
// `remote_addr`. Returns how many WRs were appended. wr_id and signaled are
// left for the poster.
inline size_t SliceRequest(WrOpcode opcode, std::span<const LocalChunk> chunks,
                           uint64_t remote_addr, uint32_t rkey, const SliceLimits& limits,
                           std::vector<SendWr>* out) {
  MC_ASSERT(limits.max_sge >= 1 && limits.max_sge <= kMaxSgePerWr, "max_sge out of range");
  MC_ASSERT(limits.wr_bytes_max > 0, "wr_bytes_max must be positive");
  const size_t first = out->size();
  SendWr wr;
  uint64_t wr_bytes = 0;
  uint64_t remote_cursor = remote_addr;
  auto flush = [&] {
    wr.opcode = opcode;
    wr.rkey = rkey;
    wr.remote_addr = remote_cursor;
    remote_cursor += wr_bytes;
    out->push_back(wr);
    wr = SendWr{};
    wr_bytes = 0;
  };
  for (const LocalChunk& chunk : chunks) {
    uint64_t offset = 0;
    while (offset < chunk.length) {
      if (wr.num_sge == limits.max_sge || wr_bytes == limits.wr_bytes_max) flush();
      const uint64_t piece =
          std::min({chunk.length - offset, limits.wr_bytes_max - wr_bytes, kSgeBytesMax});
      wr.sge[wr.num_sge++] = Sge{chunk.addr + offset, static_cast<uint32_t>(piece), chunk.lkey};
      wr_bytes += piece;
      offset += piece;
    }
  }
  if (wr.num_sge > 0) flush();
  return out->size() - first;
}

// Decides which posted WRs ask for a completion. An RC send queue only frees
// its slots when a later signalled WR completes, so the poster must force a
// signal on the last WR it posts when nothing else will follow soon (end of
// the pending queue) or when the queue would be full.
class SignalPolicy {
 public:
  explicit SignalPolicy(uint32_t interval) : interval_(interval) {
    MC_ASSERT(interval_ >= 1, "signal interval must be >= 1");
  }
  // Call once per WR in posting order.
  bool Next(bool force) {
    ++run_;
    if (force || run_ >= interval_) {
      run_ = 0;
      return true;
    }
    return false;
  }

 private:
  uint32_t interval_;
  uint32_t run_ = 0;  // unsignalled WRs since the last signalled one
};

// Which request of which batch a WR belongs to.
struct WrTag {
  uint64_t batch = 0;
  uint32_t request = 0;
  uint32_t wr = 0;  // the WR's index among its batch's WRs (the engine's)
};

// The posted-but-not-retired WRs of one QP, in posting order (RC executes
// and completes them in that order).
class WrTracker {
 public:
  // Returns the wr_id to post the WR with.
  uint64_t Track(WrTag tag) {
    const uint64_t seq = next_seq_++;
    fifo_.push_back(Entry{seq, tag});
    return seq;
  }

  size_t outstanding() const { return fifo_.size(); }
  // Whether a WR of `batch` is outstanding here.
  bool Holds(uint64_t batch) const {
    return std::any_of(fifo_.begin(), fifo_.end(),
                       [&](const Entry& e) { return e.tag.batch == batch; });
  }

  // Handles one completion. `done(tag, status)` runs once per retired WR.
  // Completions for ids already retired (flushes after FailAll) are ignored.
  template <typename Done>
  void OnCompletion(uint64_t wr_id, const absl::Status& status, Done&& done) {
    if (fifo_.empty() || wr_id < fifo_.front().seq || wr_id >= next_seq_) return;
    while (!fifo_.empty() && fifo_.front().seq < wr_id) {
      done(fifo_.front().tag, absl::OkStatus());
      fifo_.pop_front();
    }
    MC_DASSERT(!fifo_.empty() && fifo_.front().seq == wr_id, "completion id not in FIFO");
    done(fifo_.front().tag, status);
    fifo_.pop_front();
    if (!status.ok()) FailAll(FlushedStatus(status), done);
  }

  // The QP is unusable: every WR still outstanding fails with `status`.
  template <typename Done>
  void FailAll(const absl::Status& status, Done&& done) {
    for (const Entry& e : fifo_) done(e.tag, status);
    fifo_.clear();
  }

  static absl::Status FlushedStatus(const absl::Status& cause) {
    return absl::UnavailableError(absl::StrCat(
        "RDMA work request flushed: an earlier request on the same queue pair failed (",
        cause.message(), "); reopen the segment or use another transport"));
  }

 private:
  struct Entry {
    uint64_t seq;
    WrTag tag;
  };
  std::deque<Entry> fifo_;
  uint64_t next_seq_ = 1;
};

inline std::string_view WcStatusName(WcStatus s) {
  static constexpr std::string_view kNames[] = {
      "IBV_WC_SUCCESS",           "IBV_WC_LOC_LEN_ERR",
      "IBV_WC_LOC_QP_OP_ERR",     "IBV_WC_LOC_EEC_OP_ERR",
      "IBV_WC_LOC_PROT_ERR",      "IBV_WC_WR_FLUSH_ERR",
      "IBV_WC_MW_BIND_ERR",       "IBV_WC_BAD_RESP_ERR",
      "IBV_WC_LOC_ACCESS_ERR",    "IBV_WC_REM_INV_REQ_ERR",
      "IBV_WC_REM_ACCESS_ERR",    "IBV_WC_REM_OP_ERR",
      "IBV_WC_RETRY_EXC_ERR",     "IBV_WC_RNR_RETRY_EXC_ERR",
      "IBV_WC_LOC_RDD_VIOL_ERR",  "IBV_WC_REM_INV_RD_REQ_ERR",
      "IBV_WC_REM_ABORT_ERR",     "IBV_WC_INV_EECN_ERR",
      "IBV_WC_INV_EEC_STATE_ERR", "IBV_WC_FATAL_ERR",
      "IBV_WC_RESP_TIMEOUT_ERR",  "IBV_WC_GENERAL_ERR"};
  const auto i = static_cast<size_t>(s);
  return i < std::size(kNames) ? kNames[i] : std::string_view("IBV_WC_<unknown>");
}

// Maps a completion status onto the Transport contract's codes:
//   peer unreachable / QP broken -> Unavailable (the Router fails over),
//   rkey rejected by the owner   -> NotFound (requests are bounds-checked
//                                   before posting, so a valid range with a
//                                   rejected key means the owner unregistered),
//   responder timeout            -> DeadlineExceeded,
//   malformed response           -> DataLoss,
//   local programming errors     -> Internal.
inline absl::Status WcStatusToStatus(WcStatus s, uint32_t vendor_err) {
  if (s == WcStatus::kSuccess) return absl::OkStatus();
  const std::string text = absl::StrCat("RDMA completion ", AbslView(WcStatusName(s)),
                                        " (vendor_err 0x", absl::Hex(vendor_err), ")");
  switch (s) {
    case WcStatus::kWrFlushErr:
    case WcStatus::kRetryExcErr:
    case WcStatus::kRnrRetryExcErr:
    case WcStatus::kRemAbortErr:
    case WcStatus::kRemOpErr:
    case WcStatus::kFatalErr:
      return absl::UnavailableError(
          absl::StrCat(text, ": the peer or link failed; reopen the segment or fail over"));
    case WcStatus::kRemAccessErr:
    case WcStatus::kRemInvRdReqErr:
      return absl::NotFoundError(absl::StrCat(
          text,
          ": the owner rejected the rkey; the segment was unregistered or its bounds exceeded"));
    case WcStatus::kRemInvReqErr:
      return absl::InvalidArgumentError(
          absl::StrCat(text, ": the responder rejected the request (length over its limits?)"));
    case WcStatus::kRespTimeoutErr:
      return absl::DeadlineExceededError(absl::StrCat(text, ": the responder did not answer"));
    case WcStatus::kBadRespErr:
      return absl::DataLossError(absl::StrCat(text, ": unexpected response from the responder"));
    default:
      return absl::InternalError(
          absl::StrCat(text, ": local work-request error (lkey, length or QP misuse)"));
  }
}

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_RDMA_WORK_H_
