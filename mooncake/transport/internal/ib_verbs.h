// IbVerbs: the RdmaVerbs model over libibverbs (--config=rdma only).
//
// Stateless: every handle is the verbs object pointer. Each method is one
// verbs call (plus the attribute plumbing it needs) and turns the errno into
// a Status; everything else lives in the device-free RdmaEngine.
//
// Thread-safety: libibverbs calls are thread-safe; so is this adapter.
#ifndef MOONCAKE_TRANSPORT_INTERNAL_IB_VERBS_H_
#define MOONCAKE_TRANSPORT_INTERNAL_IB_VERBS_H_

#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/transport/internal/rdma_verbs.h"

namespace mooncake::transport_internal {

static_assert(static_cast<int>(WcStatus::kSuccess) == IBV_WC_SUCCESS);
static_assert(static_cast<int>(WcStatus::kLocLenErr) == IBV_WC_LOC_LEN_ERR);
static_assert(static_cast<int>(WcStatus::kLocProtErr) == IBV_WC_LOC_PROT_ERR);
static_assert(static_cast<int>(WcStatus::kWrFlushErr) == IBV_WC_WR_FLUSH_ERR);
static_assert(static_cast<int>(WcStatus::kBadRespErr) == IBV_WC_BAD_RESP_ERR);
static_assert(static_cast<int>(WcStatus::kRemInvReqErr) == IBV_WC_REM_INV_REQ_ERR);
static_assert(static_cast<int>(WcStatus::kRemAccessErr) == IBV_WC_REM_ACCESS_ERR);
static_assert(static_cast<int>(WcStatus::kRemOpErr) == IBV_WC_REM_OP_ERR);
static_assert(static_cast<int>(WcStatus::kRetryExcErr) == IBV_WC_RETRY_EXC_ERR);
static_assert(static_cast<int>(WcStatus::kRnrRetryExcErr) == IBV_WC_RNR_RETRY_EXC_ERR);
static_assert(static_cast<int>(WcStatus::kRemAbortErr) == IBV_WC_REM_ABORT_ERR);
static_assert(static_cast<int>(WcStatus::kFatalErr) == IBV_WC_FATAL_ERR);
static_assert(static_cast<int>(WcStatus::kRespTimeoutErr) == IBV_WC_RESP_TIMEOUT_ERR);
static_assert(static_cast<int>(WcStatus::kGeneralErr) == IBV_WC_GENERAL_ERR);
static_assert(static_cast<int>(QpState::kReset) == IBV_QPS_RESET);
static_assert(static_cast<int>(QpState::kInit) == IBV_QPS_INIT);
static_assert(static_cast<int>(QpState::kRtr) == IBV_QPS_RTR);
static_assert(static_cast<int>(QpState::kRts) == IBV_QPS_RTS);
static_assert(static_cast<int>(QpState::kErr) == IBV_QPS_ERR);
static_assert(kAccessLocalWrite == IBV_ACCESS_LOCAL_WRITE);
static_assert(kAccessRemoteWrite == IBV_ACCESS_REMOTE_WRITE);
static_assert(kAccessRemoteRead == IBV_ACCESS_REMOTE_READ);

// A verbs call's errno by base/errno_status.h's table, with the fix for the
// one a user most often hits (ENOMEM from ibv_reg_mr: the memlock limit).
inline absl::Status VerbsError(int err, std::string_view call) {
  const absl::Status s = ErrnoToStatus(err, call);
  if (err != ENOMEM) return s;
  return absl::ResourceExhaustedError(
      absl::StrCat(s.message(), "; for memory registration raise RLIMIT_MEMLOCK (ulimit -l)"));
}

template <typename H, typename P>
H ToHandle(P* p) {
  return static_cast<H>(reinterpret_cast<uintptr_t>(p));
}
template <typename P, typename H>
P* FromHandle(H h) {
  return reinterpret_cast<P*>(static_cast<uintptr_t>(h));
}

class IbVerbs {
 public:
  std::vector<std::string> ListDevices() {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    std::vector<std::string> names;
    if (list == nullptr) return names;
    for (int i = 0; i < n; ++i) names.emplace_back(ibv_get_device_name(list[i]));
    ibv_free_device_list(list);
    return names;
  }

  absl::StatusOr<ContextHandle> OpenDevice(std::string_view name) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) return VerbsError(errno, "ibv_get_device_list");
    ibv_context* ctx = nullptr;
    int err = ENODEV;
    for (int i = 0; i < n; ++i) {
      if (name == ibv_get_device_name(list[i])) {
        ctx = ibv_open_device(list[i]);
        err = errno;
        break;
      }
    }
    ibv_free_device_list(list);
    if (ctx == nullptr) return VerbsError(err, absl::StrCat("ibv_open_device ", AbslView(name)));
    return ToHandle<ContextHandle>(ctx);
  }

  absl::Status CloseDevice(ContextHandle ctx) {
    return Check(ibv_close_device(FromHandle<ibv_context>(ctx)), "ibv_close_device");
  }

  absl::StatusOr<DeviceAttrs> QueryDevice(ContextHandle ctx) {
    ibv_device_attr attr{};
    if (int rc = ibv_query_device(FromHandle<ibv_context>(ctx), &attr); rc != 0) {
      return VerbsError(rc, "ibv_query_device");
    }
    return DeviceAttrs{static_cast<uint32_t>(attr.max_qp_wr), static_cast<uint32_t>(attr.max_sge),
                       static_cast<uint32_t>(attr.max_cqe), attr.max_mr_size};
  }

  absl::StatusOr<PortAttrs> QueryPort(ContextHandle ctx, uint8_t port, int gid_index) {
    ibv_context* c = FromHandle<ibv_context>(ctx);
    ibv_port_attr pa{};
    if (int rc = ibv_query_port(c, port, &pa); rc != 0) return VerbsError(rc, "ibv_query_port");
    if (pa.state != IBV_PORT_ACTIVE) {
      return absl::FailedPreconditionError(
          absl::StrCat("RDMA port ", port, " is not ACTIVE (state ", static_cast<int>(pa.state),
                       "): check the link and the subnet manager"));
    }
    PortAttrs out;
    out.lid = pa.lid;
    out.active_mtu = static_cast<uint8_t>(pa.active_mtu);
    out.max_msg_sz = pa.max_msg_sz;
    out.is_ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    ibv_gid gid{};
    if (int rc = ibv_query_gid(c, port, gid_index, &gid); rc != 0) {
      return VerbsError(rc, absl::StrCat("ibv_query_gid index ", gid_index));
    }
    std::memcpy(out.gid.data(), gid.raw, out.gid.size());
    return out;
  }

  absl::StatusOr<PdHandle> AllocPd(ContextHandle ctx) {
    ibv_pd* pd = ibv_alloc_pd(FromHandle<ibv_context>(ctx));
    if (pd == nullptr) return VerbsError(errno, "ibv_alloc_pd");
    return ToHandle<PdHandle>(pd);
  }

  absl::Status DeallocPd(PdHandle pd) {
    return Check(ibv_dealloc_pd(FromHandle<ibv_pd>(pd)), "ibv_dealloc_pd");
  }

  absl::StatusOr<MemoryRegion> RegMr(PdHandle pd, void* addr, uint64_t length, uint32_t access) {
    ibv_mr* mr = ibv_reg_mr(FromHandle<ibv_pd>(pd), addr, length, static_cast<int>(access));
    if (mr == nullptr) return VerbsError(errno, "ibv_reg_mr");
    return MemoryRegion{ToHandle<MrHandle>(mr), mr->lkey, mr->rkey};
  }

  absl::Status DeregMr(MrHandle mr) { return Check(ibv_dereg_mr(FromHandle<ibv_mr>(mr)), "dereg"); }

  absl::StatusOr<CqHandle> CreateCq(ContextHandle ctx, uint32_t depth) {
    ibv_cq* cq =
        ibv_create_cq(FromHandle<ibv_context>(ctx), static_cast<int>(depth), nullptr, nullptr, 0);
    if (cq == nullptr) return VerbsError(errno, "ibv_create_cq");
    return ToHandle<CqHandle>(cq);
  }

  absl::Status DestroyCq(CqHandle cq) {
    return Check(ibv_destroy_cq(FromHandle<ibv_cq>(cq)), "ibv_destroy_cq");
  }

  absl::StatusOr<QueuePair> CreateQp(PdHandle pd, CqHandle cq, QpCaps caps) {
    ibv_qp_init_attr init{};
    init.send_cq = FromHandle<ibv_cq>(cq);
    init.recv_cq = FromHandle<ibv_cq>(cq);
    init.cap.max_send_wr = caps.max_send_wr;
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = caps.max_send_sge;
    init.cap.max_recv_sge = 1;
    init.qp_type = IBV_QPT_RC;
    init.sq_sig_all = 0;  // selective signalling
    ibv_qp* qp = ibv_create_qp(FromHandle<ibv_pd>(pd), &init);
    if (qp == nullptr) return VerbsError(errno, "ibv_create_qp");
    return QueuePair{ToHandle<QpHandle>(qp), qp->qp_num};
  }

  absl::Status DestroyQp(QpHandle qp) {
    return Check(ibv_destroy_qp(FromHandle<ibv_qp>(qp)), "ibv_destroy_qp");
  }

  absl::Status ModifyQpToInit(QpHandle qp, uint8_t port, uint32_t access) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = port;
    a.qp_access_flags = access;
    return Check(
        ibv_modify_qp(FromHandle<ibv_qp>(qp), &a,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
        "ibv_modify_qp(INIT)");
  }

  absl::Status ModifyQpToRtr(QpHandle qp, const RtrParams& p) {
    ibv_qp* q = FromHandle<ibv_qp>(qp);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = static_cast<ibv_mtu>(p.path_mtu);
    a.dest_qp_num = p.dest_qpn;
    a.rq_psn = p.rq_psn;
    a.max_dest_rd_atomic = std::min<uint8_t>(p.max_dest_rd_atomic, MaxRdAtomic(q, true));
    a.min_rnr_timer = p.min_rnr_timer;
    a.ah_attr.dlid = p.dlid;
    a.ah_attr.port_num = p.port;
    if (p.use_gid) {
      a.ah_attr.is_global = 1;
      std::memcpy(a.ah_attr.grh.dgid.raw, p.dgid.data(), p.dgid.size());
      a.ah_attr.grh.sgid_index = p.sgid_index;
      a.ah_attr.grh.hop_limit = 64;
    }
    return Check(
        ibv_modify_qp(q, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
        "ibv_modify_qp(RTR)");
  }

  absl::Status ModifyQpToRts(QpHandle qp, const RtsParams& p) {
    ibv_qp* q = FromHandle<ibv_qp>(qp);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = p.timeout;
    a.retry_cnt = p.retry_cnt;
    a.rnr_retry = p.rnr_retry;
    a.sq_psn = p.sq_psn;
    a.max_rd_atomic = std::min<uint8_t>(p.max_rd_atomic, MaxRdAtomic(q, false));
    return Check(ibv_modify_qp(q, &a,
                               IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
                 "ibv_modify_qp(RTS)");
  }

  absl::Status ModifyQpToError(QpHandle qp) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    return Check(ibv_modify_qp(FromHandle<ibv_qp>(qp), &a, IBV_QP_STATE), "ibv_modify_qp(ERR)");
  }

  PostSendResult PostSend(QpHandle qp, std::span<const SendWr> wrs) {
    constexpr size_t kChainMax = 64;
    std::array<ibv_send_wr, kChainMax> native{};
    std::array<std::array<ibv_sge, kMaxSgePerWr>, kChainMax> sges{};
    const size_t n = std::min(wrs.size(), kChainMax);
    for (size_t i = 0; i < n; ++i) {
      const SendWr& w = wrs[i];
      for (uint32_t s = 0; s < w.num_sge; ++s) {
        sges[i][s] = ibv_sge{w.sge[s].addr, w.sge[s].length, w.sge[s].lkey};
      }
      ibv_send_wr& nw = native[i];
      nw.wr_id = w.wr_id;
      nw.sg_list = sges[i].data();
      nw.num_sge = static_cast<int>(w.num_sge);
      nw.opcode = w.opcode == WrOpcode::kRdmaRead ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
      nw.send_flags = w.signaled ? IBV_SEND_SIGNALED : 0;
      nw.wr.rdma.remote_addr = w.remote_addr;
      nw.wr.rdma.rkey = w.rkey;
      nw.next = i + 1 < n ? &native[i + 1] : nullptr;
    }
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(FromHandle<ibv_qp>(qp), native.data(), &bad);
    if (rc == 0 && n == wrs.size()) return {n, absl::OkStatus()};
    if (rc == 0) {
      return {n, absl::InvalidArgumentError("ibv_post_send: chain longer than 64 WRs")};
    }
    const size_t posted = bad == nullptr ? 0 : static_cast<size_t>(bad - native.data());
    return {posted, VerbsError(rc, "ibv_post_send")};
  }

  absl::StatusOr<size_t> PollCq(CqHandle cq, std::span<WorkCompletion> wcs) {
    constexpr int kMax = 64;
    std::array<ibv_wc, kMax> native;
    const int want = static_cast<int>(std::min<size_t>(wcs.size(), kMax));
    const int n = ibv_poll_cq(FromHandle<ibv_cq>(cq), want, native.data());
    if (n < 0) return absl::InternalError("ibv_poll_cq failed: completion queue overrun?");
    for (int i = 0; i < n; ++i) {
      wcs[i] = WorkCompletion{native[i].wr_id, static_cast<WcStatus>(native[i].status),
                              native[i].qp_num, native[i].vendor_err};
    }
    return static_cast<size_t>(n);
  }

 private:
  static absl::Status Check(int rc, std::string_view call) {
    return rc == 0 ? absl::OkStatus() : VerbsError(rc, call);
  }
  // The device's limit on outstanding RDMA READs per QP (responder / initiator).
  static uint8_t MaxRdAtomic(ibv_qp* q, bool responder) {
    ibv_device_attr attr{};
    if (ibv_query_device(q->context, &attr) != 0) return 1;
    const int v = responder ? attr.max_qp_rd_atom : attr.max_qp_init_rd_atom;
    return static_cast<uint8_t>(std::clamp(v, 1, 255));
  }
};

static_assert(RdmaVerbs<IbVerbs>);

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_IB_VERBS_H_
