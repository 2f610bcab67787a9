// FakeFabric member definitions; included only by fake_verbs.h.
// IWYU pragma: private, include "mooncake/transport/internal/fake_verbs.h"
#ifndef MOONCAKE_TRANSPORT_INTERNAL_FAKE_VERBS_IMPL_H_
#define MOONCAKE_TRANSPORT_INTERNAL_FAKE_VERBS_IMPL_H_

#ifndef MOONCAKE_TRANSPORT_INTERNAL_FAKE_VERBS_H_
#error "include mooncake/transport/internal/fake_verbs.h instead"
#endif

namespace mooncake::transport_internal {

inline absl::Status FakeMissing(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("fake verbs: unknown ", AbslView(what)));
}

inline std::optional<size_t> FakeFabric::DeviceIndex(std::string_view name) const {
  auto it = std::find(devices_.begin(), devices_.end(), name);
  if (it == devices_.end()) return std::nullopt;
  return static_cast<size_t>(it - devices_.begin());
}

// Port 1 of device d has lid d + 1; port p adds 256 * (p - 1).
inline PortAttrs FakeFabric::PortOf(size_t device, uint8_t port) const {
  PortAttrs p;
  p.lid = static_cast<uint16_t>(device + 1 + 256 * (port - 1));
  p.active_mtu = limits_.active_mtu;
  p.max_msg_sz = limits_.max_msg_sz;
  p.is_ethernet = limits_.is_ethernet;
  p.gid = Gid{0xfe, 0x80};
  p.gid[15] = static_cast<uint8_t>(device + 1);
  p.gid[14] = static_cast<uint8_t>(port - 1);
  return p;
}

inline bool FakeFabric::PortDown(const Qp& qp) {
  return !down_.empty() && down_.contains({DeviceOfPd(qp.pd), qp.port});
}

inline absl::StatusOr<ContextHandle> FakeFabric::OpenDevice(std::string_view name) {
  MutexLock lock(&mu_);
  auto it = std::find(devices_.begin(), devices_.end(), name);
  if (it == devices_.end()) return absl::NotFoundError("fake verbs: no such device");
  const uintptr_t id = NewId();
  ctxs_[id] = Ctx{static_cast<size_t>(it - devices_.begin())};
  return ContextHandle{id};
}

inline absl::Status FakeFabric::CloseDevice(ContextHandle ctx) {
  MutexLock lock(&mu_);
  const auto id = static_cast<uintptr_t>(ctx);
  for (const auto& [pd, owner] : pds_) {
    if (owner == id) return absl::FailedPreconditionError("fake verbs: PD still allocated (EBUSY)");
  }
  return ctxs_.erase(id) == 1 ? absl::OkStatus() : FakeMissing("context");
}

inline absl::StatusOr<DeviceAttrs> FakeFabric::QueryDevice(ContextHandle ctx) {
  MutexLock lock(&mu_);
  if (!ctxs_.contains(static_cast<uintptr_t>(ctx))) return FakeMissing("context");
  return DeviceAttrs{limits_.max_qp_wr, limits_.max_sge, limits_.max_cqe, limits_.max_mr_size};
}

inline absl::StatusOr<PortAttrs> FakeFabric::QueryPort(ContextHandle ctx, uint8_t port,
                                                       int gid_index) {
  MutexLock lock(&mu_);
  auto it = ctxs_.find(static_cast<uintptr_t>(ctx));
  if (it == ctxs_.end()) return FakeMissing("context");
  if (port < 1 || port > limits_.ports || gid_index < 0 || gid_index >= 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("fake verbs: ports 1..", limits_.ports, ", gid index 0..15"));
  }
  return PortOf(it->second.device, port);
}

inline absl::StatusOr<PdHandle> FakeFabric::AllocPd(ContextHandle ctx) {
  MutexLock lock(&mu_);
  if (!ctxs_.contains(static_cast<uintptr_t>(ctx))) return FakeMissing("context");
  const uintptr_t id = NewId();
  pds_[id] = static_cast<uintptr_t>(ctx);
  return PdHandle{id};
}

inline absl::Status FakeFabric::DeallocPd(PdHandle pd) {
  MutexLock lock(&mu_);
  const auto id = static_cast<uintptr_t>(pd);
  for (const auto& [mr_id, mr] : mrs_) {
    if (mr.pd == id)
      return absl::FailedPreconditionError("fake verbs: MR still registered (EBUSY)");
  }
  for (const auto& [qp_id, qp] : qps_) {
    if (qp.pd == id) return absl::FailedPreconditionError("fake verbs: QP still alive (EBUSY)");
  }
  return pds_.erase(id) == 1 ? absl::OkStatus() : FakeMissing("PD");
}

inline absl::StatusOr<MemoryRegion> FakeFabric::RegMr(PdHandle pd, void* addr, uint64_t length,
                                                      uint32_t access) {
  MutexLock lock(&mu_);
  if (!pds_.contains(static_cast<uintptr_t>(pd))) return FakeMissing("PD");
  if (addr == nullptr || length == 0 || length > limits_.max_mr_size) {
    return absl::InvalidArgumentError("fake verbs: bad MR range");
  }
  const uintptr_t id = NewId();
  const uint32_t lkey = next_key_++;
  const uint32_t rkey = next_key_++;
  mrs_[id] =
      Mr{static_cast<uintptr_t>(pd), reinterpret_cast<uint64_t>(addr), length, access, lkey, rkey};
  return MemoryRegion{MrHandle{id}, lkey, rkey};
}

inline absl::Status FakeFabric::DeregMr(MrHandle mr) {
  MutexLock lock(&mu_);
  return mrs_.erase(static_cast<uintptr_t>(mr)) == 1 ? absl::OkStatus() : FakeMissing("MR");
}

inline absl::StatusOr<CqHandle> FakeFabric::CreateCq(ContextHandle ctx, uint32_t depth) {
  MutexLock lock(&mu_);
  if (!ctxs_.contains(static_cast<uintptr_t>(ctx))) return FakeMissing("context");
  if (depth == 0 || depth > limits_.max_cqe) return absl::InvalidArgumentError("fake: CQ depth");
  const uintptr_t id = NewId();
  cqs_[id] = Cq{static_cast<uintptr_t>(ctx), depth, {}, false};
  return CqHandle{id};
}

inline absl::Status FakeFabric::DestroyCq(CqHandle cq) {
  MutexLock lock(&mu_);
  const auto id = static_cast<uintptr_t>(cq);
  for (const auto& [qp_id, qp] : qps_) {
    if (qp.cq == id) return absl::FailedPreconditionError("fake verbs: CQ in use (EBUSY)");
  }
  return cqs_.erase(id) == 1 ? absl::OkStatus() : FakeMissing("CQ");
}

inline absl::StatusOr<QueuePair> FakeFabric::CreateQp(PdHandle pd, CqHandle cq, QpCaps caps) {
  MutexLock lock(&mu_);
  if (!pds_.contains(static_cast<uintptr_t>(pd))) return FakeMissing("PD");
  if (!cqs_.contains(static_cast<uintptr_t>(cq))) return FakeMissing("CQ");
  if (caps.max_send_wr == 0 || caps.max_send_wr > limits_.max_qp_wr || caps.max_send_sge == 0 ||
      caps.max_send_sge > limits_.max_sge) {
    return absl::InvalidArgumentError("fake verbs: QP caps over the device limits");
  }
  const uintptr_t id = NewId();
  Qp qp;
  qp.pd = static_cast<uintptr_t>(pd);
  qp.cq = static_cast<uintptr_t>(cq);
  qp.qpn = next_qpn_++;
  qp.caps = caps;
  qps_[id] = std::move(qp);
  return QueuePair{QpHandle{id}, qps_[id].qpn};
}

inline absl::Status FakeFabric::DestroyQp(QpHandle qp) {
  MutexLock lock(&mu_);
  return qps_.erase(static_cast<uintptr_t>(qp)) == 1 ? absl::OkStatus() : FakeMissing("QP");
}

inline absl::Status FakeFabric::Transition(QpHandle h, QpState to) {
  auto it = qps_.find(static_cast<uintptr_t>(h));
  if (it == qps_.end()) return FakeMissing("QP");
  if (!QpTransitionAllowed(it->second.state, to)) {
    return absl::InvalidArgumentError(
        absl::StrCat("fake verbs: QP transition ", static_cast<int>(it->second.state), " -> ",
                     static_cast<int>(to), " is not allowed (EINVAL)"));
  }
  it->second.state = to;
  return absl::OkStatus();
}

inline absl::Status FakeFabric::ModifyQpToInit(QpHandle qp, uint8_t port, uint32_t access) {
  MutexLock lock(&mu_);
  if (port < 1 || port > limits_.ports) {
    return absl::InvalidArgumentError(absl::StrCat("fake verbs: ports 1..", limits_.ports));
  }
  RETURN_IF_ERROR(Transition(qp, QpState::kInit));
  qps_[static_cast<uintptr_t>(qp)].access = access;
  qps_[static_cast<uintptr_t>(qp)].port = port;
  return absl::OkStatus();
}

inline absl::Status FakeFabric::ModifyQpToRtr(QpHandle qp, const RtrParams& rtr) {
  MutexLock lock(&mu_);
  if (rtr.path_mtu < 1 || rtr.path_mtu > 5 || rtr.dest_qpn == 0 || rtr.rq_psn >= (1u << 24)) {
    return absl::InvalidArgumentError("fake verbs: bad RTR attributes");
  }
  RETURN_IF_ERROR(Transition(qp, QpState::kRtr));
  qps_[static_cast<uintptr_t>(qp)].rtr = rtr;
  return absl::OkStatus();
}

inline absl::Status FakeFabric::ModifyQpToRts(QpHandle qp, const RtsParams& rts) {
  MutexLock lock(&mu_);
  if (rts.sq_psn >= (1u << 24)) return absl::InvalidArgumentError("fake verbs: bad sq_psn");
  RETURN_IF_ERROR(Transition(qp, QpState::kRts));
  qps_[static_cast<uintptr_t>(qp)].rts = rts;
  return absl::OkStatus();
}

inline void FakeFabric::PushCqe(Qp& qp, uint64_t wr_id, WcStatus st) {
  Cq& cq = cqs_.at(qp.cq);
  if (cq.entries.size() >= cq.depth) {
    cq.overrun = true;
    return;
  }
  cq.entries.push_back(WorkCompletion{wr_id, st, qp.qpn, st == WcStatus::kSuccess ? 0u : 0x42u});
}

inline void FakeFabric::FlushQueued(Qp& qp) {
  for (const SendWr& wr : qp.queued) PushCqe(qp, wr.wr_id, WcStatus::kWrFlushErr);
  qp.queued.clear();
  qp.slots_used = 0;
  qp.unsignaled_done = 0;
}

inline absl::Status FakeFabric::ModifyQpToError(QpHandle qp) {
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(Transition(qp, QpState::kErr));
  FlushQueued(qps_[static_cast<uintptr_t>(qp)]);
  return absl::OkStatus();
}

inline PostSendResult FakeFabric::PostSend(QpHandle h, std::span<const SendWr> wrs) {
  MutexLock lock(&mu_);
  auto it = qps_.find(static_cast<uintptr_t>(h));
  if (it == qps_.end()) return {0, FakeMissing("QP")};
  Qp& qp = it->second;
  ++stats_.post_calls;
  stats_.longest_chain = std::max(stats_.longest_chain, wrs.size());
  if (qp.state != QpState::kRts) {
    return {0, absl::FailedPreconditionError("fake verbs: post on a QP not in RTS (EINVAL)")};
  }
  for (size_t i = 0; i < wrs.size(); ++i) {
    if (wrs[i].num_sge == 0 || wrs[i].num_sge > qp.caps.max_send_sge) {
      return {i, absl::InvalidArgumentError("fake verbs: num_sge over the QP's max (EINVAL)")};
    }
    if (qp.slots_used >= qp.caps.max_send_wr) {
      return {i, absl::ResourceExhaustedError("fake verbs: send queue full (ENOMEM)")};
    }
    ++qp.slots_used;
    ++stats_.wrs_posted;
    stats_.wrs_signaled += wrs[i].signaled ? 1 : 0;
    stats_.most_sges = std::max(stats_.most_sges, wrs[i].num_sge);
    qp.queued.push_back(wrs[i]);
  }
  return {wrs.size(), absl::OkStatus()};
}

inline FakeFabric::Qp* FakeFabric::FindQpn(uint32_t qpn) {
  for (auto& [id, qp] : qps_) {
    if (qp.qpn == qpn) return &qp;
  }
  return nullptr;
}

inline size_t FakeFabric::DeviceOfPd(uintptr_t pd) { return ctxs_.at(pds_.at(pd)).device; }

inline const FakeFabric::Mr* FakeFabric::FindMr(uintptr_t pd, uint32_t key, bool remote) {
  for (const auto& [id, mr] : mrs_) {
    if (mr.pd == pd && (remote ? mr.rkey : mr.lkey) == key) return &mr;
  }
  return nullptr;
}

// The two RC QPs must be connected to each other with the exchanged PSNs and
// the responder's address; otherwise packets go nowhere and the requester
// exhausts its retries.
inline WcStatus FakeFabric::CheckPath(const Qp& qp, const Qp* peer) {
  if (peer == nullptr || (peer->state != QpState::kRtr && peer->state != QpState::kRts) ||
      peer->rtr.dest_qpn != qp.qpn || peer->rtr.rq_psn != qp.rts.sq_psn ||
      (peer->state == QpState::kRts && qp.rtr.rq_psn != peer->rts.sq_psn)) {
    return WcStatus::kRetryExcErr;
  }
  if (PortDown(qp) || PortDown(*peer)) return WcStatus::kRetryExcErr;
  const PortAttrs dest = PortOf(DeviceOfPd(peer->pd), peer->port);
  const bool addressed = qp.rtr.use_gid ? qp.rtr.dgid == dest.gid : qp.rtr.dlid == dest.lid;
  return addressed ? WcStatus::kSuccess : WcStatus::kRetryExcErr;
}

inline WcStatus FakeFabric::Execute(Qp& qp, const SendWr& wr) {
  ++stats_.wrs_executed;
  if (fail_at_ != 0 && stats_.wrs_executed == fail_at_) return fail_status_;
  const Qp* peer = FindQpn(qp.rtr.dest_qpn);
  if (WcStatus path = CheckPath(qp, peer); path != WcStatus::kSuccess) return path;
  const bool read = wr.opcode == WrOpcode::kRdmaRead;
  if (wr.total_bytes() > limits_.max_msg_sz) return WcStatus::kLocLenErr;
  for (uint32_t i = 0; i < wr.num_sge; ++i) {
    const Mr* mr = FindMr(qp.pd, wr.sge[i].lkey, false);
    if (mr == nullptr || wr.sge[i].addr < mr->addr ||
        wr.sge[i].addr + wr.sge[i].length > mr->addr + mr->length ||
        (read && (mr->access & kAccessLocalWrite) == 0)) {
      return WcStatus::kLocProtErr;
    }
  }
  const Mr* remote = FindMr(peer->pd, wr.rkey, true);
  const uint32_t need = read ? kAccessRemoteRead : kAccessRemoteWrite;
  if (remote == nullptr || wr.remote_addr < remote->addr ||
      wr.remote_addr + wr.total_bytes() > remote->addr + remote->length ||
      (remote->access & need) == 0 || (peer->access & need) == 0) {
    return WcStatus::kRemAccessErr;
  }
  uint64_t cursor = wr.remote_addr;
  for (uint32_t i = 0; i < wr.num_sge; ++i) {
    auto* local = reinterpret_cast<uint8_t*>(wr.sge[i].addr);
    auto* far = reinterpret_cast<uint8_t*>(cursor);
    std::memmove(read ? local : far, read ? far : local, wr.sge[i].length);
    cursor += wr.sge[i].length;
  }
  stats_.bytes_moved += wr.total_bytes();
  return WcStatus::kSuccess;
}

inline absl::StatusOr<size_t> FakeFabric::PollCq(CqHandle h, std::span<WorkCompletion> wcs) {
  MutexLock lock(&mu_);
  auto cq_it = cqs_.find(static_cast<uintptr_t>(h));
  if (cq_it == cqs_.end()) return FakeMissing("CQ");
  for (auto& [id, qp] : qps_) {
    if (qp.cq != cq_it->first || stalled_) continue;
    size_t per_poll = limits_.execute_per_poll;
    if (!rate_.empty()) {
      auto r = rate_.find({DeviceOfPd(qp.pd), qp.port});
      if (r != rate_.end()) per_poll = r->second;
    }
    for (size_t n = 0; n < per_poll && !qp.queued.empty(); ++n) {
      const SendWr wr = qp.queued.front();
      qp.queued.pop_front();
      const WcStatus st = Execute(qp, wr);
      if (st != WcStatus::kSuccess) {
        PushCqe(qp, wr.wr_id, st);
        qp.state = QpState::kErr;
        FlushQueued(qp);
        break;
      }
      if (wr.signaled) {
        PushCqe(qp, wr.wr_id, st);
        qp.slots_used -= qp.unsignaled_done + 1;  // this one and the ones before it
        qp.unsignaled_done = 0;
      } else {
        ++qp.unsignaled_done;
      }
    }
  }
  Cq& cq = cq_it->second;
  if (cq.overrun) return absl::InternalError("fake verbs: completion queue overrun");
  size_t n = 0;
  while (n < wcs.size() && !cq.entries.empty()) {
    wcs[n++] = cq.entries.front();
    cq.entries.pop_front();
  }
  return n;
}

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_FAKE_VERBS_IMPL_H_
