// FakeVerbs: an in-process RDMA fabric that models RdmaVerbs for tests.
//
// It is strict where real devices are strict, so the transport's logic is
// tested for real:
//   - bytes really move between registered regions (memcpy, gather/scatter);
//   - every local SGE must lie inside an MR of the QP's PD with its lkey (and
//     LOCAL_WRITE for READ targets): else IBV_WC_LOC_PROT_ERR;
//   - every remote range must lie inside the responder's MR named by the
//     rkey, with REMOTE_READ/REMOTE_WRITE: else IBV_WC_REM_ACCESS_ERR;
//   - a WR over the port's max_msg_sz: IBV_WC_LOC_LEN_ERR; over max_sge or
//     beyond the send queue's free slots: PostSend fails;
//   - QP transitions follow QpTransitionAllowed; posting needs RTS;
//   - the two QPs must name each other (qpn), their PSNs must match the
//     exchanged ones and the address (lid, or gid when use_gid) must be the
//     responder port's: else the requester times out (IBV_WC_RETRY_EXC_ERR);
//   - send-queue slots free only when a signalled WR (or a later one)
//     completes, as on hardware, so a poster that never signals deadlocks
//     into a PostSend failure; a CQ that overflows reports an overrun;
//   - an error completion moves the QP to ERR and flushes the rest
//     (IBV_WC_WR_FLUSH_ERR for every one, signalled or not).
// WRs execute lazily, `execute_per_poll` per QP per PollCq (per port with
// SetPortExecutePerPoll: a slower link), so work is really asynchronous.
// Each device has `ports` ports; a port's address (lid, gid) names its device
// and port. Faults: FailNthWr (an error status on a chosen WR), Stall,
// SetPortDown (every WR through that port, on either side, exhausts its
// retries: a pulled cable).
//
// Thread-safety: every method locks the fabric.
#ifndef MOONCAKE_TRANSPORT_INTERNAL_FAKE_VERBS_H_
#define MOONCAKE_TRANSPORT_INTERNAL_FAKE_VERBS_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/transport/internal/rdma_verbs.h"

namespace mooncake::transport_internal {

struct FakeFabricLimits {
  uint32_t max_qp_wr = 1024;
  uint32_t max_sge = 4;
  uint32_t max_cqe = 1 << 16;
  uint64_t max_mr_size = uint64_t{1} << 40;
  uint32_t max_msg_sz = 1u << 31;
  uint8_t active_mtu = 5;  // 4096
  bool is_ethernet = false;
  size_t execute_per_poll = 8;
  uint8_t ports = 1;  // per device, numbered from 1
};

struct FakeFabricStats {
  uint64_t post_calls = 0;
  uint64_t wrs_posted = 0;
  uint64_t wrs_signaled = 0;
  uint64_t wrs_executed = 0;
  uint64_t bytes_moved = 0;
  size_t longest_chain = 0;
  uint32_t most_sges = 0;
};

class FakeFabric {
 public:
  explicit FakeFabric(std::vector<std::string> devices, FakeFabricLimits limits = {})
      : devices_(std::move(devices)), limits_(limits) {}

  // The `nth` WR executed from now on (1 = the next one) completes with `status`.
  void FailNthWr(uint64_t nth, WcStatus status) {
    MutexLock lock(&mu_);
    fail_at_ = stats_.wrs_executed + nth;
    fail_status_ = status;
  }
  // While stalled, posted WRs are accepted but never executed.
  void Stall(bool stalled) {
    MutexLock lock(&mu_);
    stalled_ = stalled;
  }
  // While down, a WR on a QP of that device and port, or aimed at one,
  // completes with IBV_WC_RETRY_EXC_ERR. Unknown devices are ignored.
  void SetPortDown(std::string_view device, uint8_t port, bool down) {
    MutexLock lock(&mu_);
    const std::optional<size_t> d = DeviceIndex(device);
    if (!d.has_value()) return;
    if (down) {
      down_.insert({*d, port});
    } else {
      down_.erase({*d, port});
    }
  }
  // QPs of that device and port execute `n` WRs per PollCq (>= 1) instead
  // of limits.execute_per_poll: a slower link.
  void SetPortExecutePerPoll(std::string_view device, uint8_t port, size_t n) {
    MutexLock lock(&mu_);
    const std::optional<size_t> d = DeviceIndex(device);
    if (d.has_value()) rate_[{*d, port}] = std::max<size_t>(n, 1);
  }
  FakeFabricStats stats() const {
    MutexLock lock(&mu_);
    return stats_;
  }
  std::optional<QpState> StateOfQpn(uint32_t qpn) const {
    MutexLock lock(&mu_);
    for (const auto& [id, qp] : qps_) {
      if (qp.qpn == qpn) return qp.state;
    }
    return std::nullopt;
  }
  size_t live_qps() const {
    MutexLock lock(&mu_);
    return qps_.size();
  }
  size_t live_mrs() const {
    MutexLock lock(&mu_);
    return mrs_.size();
  }

  // --- RdmaVerbs, forwarded from FakeVerbs. ---
  std::vector<std::string> ListDevices() const { return devices_; }
  absl::StatusOr<ContextHandle> OpenDevice(std::string_view name);
  absl::Status CloseDevice(ContextHandle ctx);
  absl::StatusOr<DeviceAttrs> QueryDevice(ContextHandle ctx);
  absl::StatusOr<PortAttrs> QueryPort(ContextHandle ctx, uint8_t port, int gid_index);
  absl::StatusOr<PdHandle> AllocPd(ContextHandle ctx);
  absl::Status DeallocPd(PdHandle pd);
  absl::StatusOr<MemoryRegion> RegMr(PdHandle pd, void* addr, uint64_t length, uint32_t access);
  absl::Status DeregMr(MrHandle mr);
  absl::StatusOr<CqHandle> CreateCq(ContextHandle ctx, uint32_t depth);
  absl::Status DestroyCq(CqHandle cq);
  absl::StatusOr<QueuePair> CreateQp(PdHandle pd, CqHandle cq, QpCaps caps);
  absl::Status DestroyQp(QpHandle qp);
  absl::Status ModifyQpToInit(QpHandle qp, uint8_t port, uint32_t access);
  absl::Status ModifyQpToRtr(QpHandle qp, const RtrParams& rtr);
  absl::Status ModifyQpToRts(QpHandle qp, const RtsParams& rts);
  absl::Status ModifyQpToError(QpHandle qp);
  PostSendResult PostSend(QpHandle qp, std::span<const SendWr> wrs);
  absl::StatusOr<size_t> PollCq(CqHandle cq, std::span<WorkCompletion> wcs);

 private:
  struct Ctx {
    size_t device = 0;
  };
  struct Mr {
    uintptr_t pd = 0;
    uint64_t addr = 0, length = 0;
    uint32_t access = 0, lkey = 0, rkey = 0;
  };
  struct Cq {
    uintptr_t ctx = 0;
    uint32_t depth = 0;
    std::deque<WorkCompletion> entries;
    bool overrun = false;
  };
  struct Qp {
    uintptr_t pd = 0, cq = 0;
    uint32_t qpn = 0;
    uint8_t port = 1;  // set at INIT
    QpCaps caps;
    QpState state = QpState::kReset;
    uint32_t access = 0;
    RtrParams rtr;
    RtsParams rts;
    std::deque<SendWr> queued;     // posted, not executed
    uint32_t slots_used = 0;       // posted, not yet covered by a signalled completion
    uint32_t unsignaled_done = 0;  // executed unsignalled WRs still holding slots
  };

  uintptr_t NewId() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return next_id_++; }
  absl::Status Transition(QpHandle h, QpState to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PushCqe(Qp& qp, uint64_t wr_id, WcStatus st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FlushQueued(Qp& qp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Qp* FindQpn(uint32_t qpn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  WcStatus Execute(Qp& qp, const SendWr& wr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  WcStatus CheckPath(const Qp& qp, const Qp* peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const Mr* FindMr(uintptr_t pd, uint32_t key, bool remote) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t DeviceOfPd(uintptr_t pd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PortAttrs PortOf(size_t device, uint8_t port) const;
  std::optional<size_t> DeviceIndex(std::string_view name) const;
  bool PortDown(const Qp& qp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<std::string> devices_;
  const FakeFabricLimits limits_;
  mutable Mutex mu_;
  uintptr_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint32_t next_qpn_ ABSL_GUARDED_BY(mu_) = 0x100;
  uint32_t next_key_ ABSL_GUARDED_BY(mu_) = 0x1000;
  std::map<uintptr_t, Ctx> ctxs_ ABSL_GUARDED_BY(mu_);
  std::map<uintptr_t, uintptr_t> pds_ ABSL_GUARDED_BY(mu_);  // pd -> ctx
  std::map<uintptr_t, Mr> mrs_ ABSL_GUARDED_BY(mu_);
  std::map<uintptr_t, Cq> cqs_ ABSL_GUARDED_BY(mu_);
  std::map<uintptr_t, Qp> qps_ ABSL_GUARDED_BY(mu_);
  FakeFabricStats stats_ ABSL_GUARDED_BY(mu_);
  uint64_t fail_at_ ABSL_GUARDED_BY(mu_) = 0;
  WcStatus fail_status_ ABSL_GUARDED_BY(mu_) = WcStatus::kSuccess;
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;
  std::set<std::pair<size_t, uint8_t>> down_ ABSL_GUARDED_BY(mu_);          // (device, port)
  std::map<std::pair<size_t, uint8_t>, size_t> rate_ ABSL_GUARDED_BY(mu_);  // WRs per poll
};

// The RdmaVerbs model: a cheap handle onto a shared fabric.
class FakeVerbs {
 public:
  explicit FakeVerbs(std::shared_ptr<FakeFabric> fabric) : f_(std::move(fabric)) {}

  std::vector<std::string> ListDevices() { return f_->ListDevices(); }
  absl::StatusOr<ContextHandle> OpenDevice(std::string_view n) { return f_->OpenDevice(n); }
  absl::Status CloseDevice(ContextHandle c) { return f_->CloseDevice(c); }
  absl::StatusOr<DeviceAttrs> QueryDevice(ContextHandle c) { return f_->QueryDevice(c); }
  absl::StatusOr<PortAttrs> QueryPort(ContextHandle c, uint8_t port, int gid_index) {
    return f_->QueryPort(c, port, gid_index);
  }
  absl::StatusOr<PdHandle> AllocPd(ContextHandle c) { return f_->AllocPd(c); }
  absl::Status DeallocPd(PdHandle pd) { return f_->DeallocPd(pd); }
  absl::StatusOr<MemoryRegion> RegMr(PdHandle pd, void* addr, uint64_t len, uint32_t access) {
    return f_->RegMr(pd, addr, len, access);
  }
  absl::Status DeregMr(MrHandle mr) { return f_->DeregMr(mr); }
  absl::StatusOr<CqHandle> CreateCq(ContextHandle c, uint32_t depth) {
    return f_->CreateCq(c, depth);
  }
  absl::Status DestroyCq(CqHandle cq) { return f_->DestroyCq(cq); }
  absl::StatusOr<QueuePair> CreateQp(PdHandle pd, CqHandle cq, QpCaps caps) {
    return f_->CreateQp(pd, cq, caps);
  }
  absl::Status DestroyQp(QpHandle qp) { return f_->DestroyQp(qp); }
  absl::Status ModifyQpToInit(QpHandle qp, uint8_t port, uint32_t access) {
    return f_->ModifyQpToInit(qp, port, access);
  }
  absl::Status ModifyQpToRtr(QpHandle qp, const RtrParams& r) { return f_->ModifyQpToRtr(qp, r); }
  absl::Status ModifyQpToRts(QpHandle qp, const RtsParams& r) { return f_->ModifyQpToRts(qp, r); }
  absl::Status ModifyQpToError(QpHandle qp) { return f_->ModifyQpToError(qp); }
  PostSendResult PostSend(QpHandle qp, std::span<const SendWr> wrs) {
    return f_->PostSend(qp, wrs);
  }
  absl::StatusOr<size_t> PollCq(CqHandle cq, std::span<WorkCompletion> wcs) {
    return f_->PollCq(cq, wcs);
  }

 private:
  std::shared_ptr<FakeFabric> f_;
};

static_assert(RdmaVerbs<FakeVerbs>);

}  // namespace mooncake::transport_internal

#include "mooncake/transport/internal/fake_verbs_impl.h"  // IWYU pragma: export

#endif  // MOONCAKE_TRANSPORT_INTERNAL_FAKE_VERBS_H_
