// Data-path member definitions of RdmaEngine<V> (submit, post, complete,
// wait, cancel); included only by rdma_engine.h.
// IWYU pragma: private, include "mooncake/transport/internal/rdma_engine.h"
#ifndef MOONCAKE_TRANSPORT_INTERNAL_RDMA_ENGINE_DATA_H_
#define MOONCAKE_TRANSPORT_INTERNAL_RDMA_ENGINE_DATA_H_

#ifndef MOONCAKE_TRANSPORT_INTERNAL_RDMA_ENGINE_H_
#error "include mooncake/transport/internal/rdma_engine.h instead"
#endif

namespace mooncake::transport_internal {

// Splits the local range into pieces covered by registered segments (their
// lkey) and registers each gap on the fly for the batch.
template <RdmaVerbs V>
absl::StatusOr<std::vector<LocalChunk>> RdmaEngine<V>::CoverLocal(uint64_t addr, uint64_t length,
                                                                  Batch& batch) {
  std::vector<LocalChunk> chunks;
  const uint64_t end = addr + length;
  uint64_t cursor = addr;
  while (cursor < end) {
    auto next = segments_by_addr_.upper_bound(cursor);
    if (next != segments_by_addr_.begin()) {
      const LocalSegment& seg = segments_.at(std::prev(next)->second);
      if (cursor < seg.addr + seg.length) {
        const uint64_t piece_end = std::min(end, seg.addr + seg.length);
        chunks.push_back(LocalChunk{cursor, piece_end - cursor, seg.mr.lkey});
        cursor = piece_end;
        continue;
      }
    }
    const uint64_t gap_end = next == segments_by_addr_.end() ? end : std::min(end, next->first);
    auto mr =
        verbs_.RegMr(pd_, reinterpret_cast<void*>(cursor), gap_end - cursor, kAccessLocalWrite);
    if (!mr.ok()) {
      return absl::Status(mr.status().code(),
                          absl::StrCat("registering an unregistered local buffer on the fly: ",
                                       mr.status().message()));
    }
    batch.extra.temp_mrs.push_back(*mr);
    chunks.push_back(LocalChunk{cursor, gap_end - cursor, mr->lkey});
    cursor = gap_end;
  }
  MC_DASSERT(!chunks.empty(), "a non-empty range yields chunks");
  return chunks;
}

template <RdmaVerbs V>
absl::Status RdmaEngine<V>::PrepareRequest(const transport::TransferRequest& r, uint64_t batch_id,
                                           uint32_t index, Batch& batch) {
  if (r.local_addr == nullptr || r.length == 0) {
    return absl::InvalidArgumentError("transfer request: null local address or zero length");
  }
  const auto local = reinterpret_cast<uint64_t>(r.local_addr);
  if (r.remote_offset + r.length < r.remote_offset || local + r.length < local) {
    return absl::InvalidArgumentError("transfer request: offset + length overflows");
  }
  auto it = handles_.find(r.segment);
  if (it == handles_.end()) {
    return absl::NotFoundError(
        absl::StrCat("transfer request: unknown or closed handle ", r.segment));
  }
  const OpenedSegment& seg = it->second;
  if (r.remote_offset + r.length > seg.info.length) {
    return absl::OutOfRangeError(absl::StrCat("transfer request: [", r.remote_offset, ", ",
                                              r.remote_offset + r.length, ") is outside segment ",
                                              seg.info.id, " of ", seg.info.length, " bytes"));
  }
  Connection* c = seg.conn;
  if (!c->broken.ok()) return c->broken;
  ASSIGN_OR_RETURN(std::vector<LocalChunk> chunks, CoverLocal(local, r.length, batch));
  std::vector<SendWr> wrs;
  SliceRequest(r.op == transport::OpCode::kRead ? WrOpcode::kRdmaRead : WrOpcode::kRdmaWrite,
               chunks, seg.info.addr + r.remote_offset, seg.info.rkey, limits_, &wrs);
  batch.requests[index].pieces_left = static_cast<uint32_t>(wrs.size());
  for (const SendWr& wr : wrs) c->pending.push_back(PendingWr{wr, WrTag{batch_id, index}});
  if (std::find(batch.extra.conns.begin(), batch.extra.conns.end(), c) == batch.extra.conns.end()) {
    ++c->refs;
    batch.extra.conns.push_back(c);
  }
  return absl::OkStatus();
}

// One WR of `tag` left the engine (completed, failed, flushed or dropped).
template <RdmaVerbs V>
void RdmaEngine<V>::Retire(const WrTag& tag, const absl::Status& s, bool was_posted) {
  Batch* b = batches_.Find(tag.batch);
  MC_ASSERT(b != nullptr, "work request of an unknown batch");
  if (was_posted) {
    MC_DASSERT(b->extra.wrs_outstanding > 0, "outstanding WR count underflow");
    --b->extra.wrs_outstanding;
  }
  // Done already: cancelled, or an earlier WR failed it (its pieces_left
  // then stays above 0, so Poll does not count it while WRs still run).
  if (b->requests[tag.request].done) return;
  batches_.SettlePiece(*b, tag.request, s);
}

// Posts queued WRs as chains within the send queue's free slots.
template <RdmaVerbs V>
void RdmaEngine<V>::Pump(Connection* c) {
  std::array<SendWr, 64> chain;
  const size_t chain_max = std::min<size_t>(options_.post_chain_max, chain.size());
  while (!c->pending.empty() && c->broken.ok() && c->tracker.outstanding() < sq_depth_) {
    const size_t room = sq_depth_ - c->tracker.outstanding();
    const size_t n = std::min({chain_max, room, c->pending.size()});
    // Force a signal at the chain's tail when nothing follows it soon: end of
    // queue, or a full send queue that only a completion can drain.
    const bool tail_must_signal = n == c->pending.size() || n == room;
    for (size_t i = 0; i < n; ++i) {
      PendingWr& p = c->pending[i];
      chain[i] = p.wr;
      chain[i].signaled = c->signal.Next(tail_must_signal && i + 1 == n);
      chain[i].wr_id = c->tracker.Track(p.tag);
      ++batches_.Find(p.tag.batch)->extra.wrs_outstanding;
    }
    c->pending.erase(c->pending.begin(), c->pending.begin() + static_cast<ptrdiff_t>(n));
    const PostSendResult posted = verbs_.PostSend(c->qp.handle, std::span(chain.data(), n));
    if (!posted.status.ok()) {
      Break(c, absl::Status(posted.status.code(),
                            absl::StrCat("ibv_post_send: ", posted.status.message())));
      return;
    }
  }
}

template <RdmaVerbs V>
void RdmaEngine<V>::Progress() {
  std::array<WorkCompletion, 32> wcs;
  Reap();
  for (auto& [id, owned] : conns_) {
    Connection* c = owned.get();
    if (c->refs == 0) continue;
    while (c->tracker.outstanding() > 0) {
      auto polled = verbs_.PollCq(c->cq, wcs);
      if (!polled.ok()) {
        Break(c, polled.status());
        break;
      }
      if (*polled == 0) break;
      for (size_t i = 0; i < *polled; ++i) {
        const absl::Status s = WcStatusToStatus(wcs[i].status, wcs[i].vendor_err);
        c->tracker.OnCompletion(
            wcs[i].wr_id, s, [&](const WrTag& t, const absl::Status& st) { Retire(t, st, true); });
        if (!s.ok()) Break(c, s);
      }
    }
    Pump(c);
  }
}

template <RdmaVerbs V>
absl::StatusOr<transport::BatchId> RdmaEngine<V>::Submit(
    std::span<const transport::TransferRequest> requests) {
  if (requests.empty() || requests.size() > transport::kMaxBatchRequests) {
    return absl::InvalidArgumentError(absl::StrCat("Submit: a batch holds 1..",
                                                   transport::kMaxBatchRequests, " requests, got ",
                                                   requests.size()));
  }
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(batches_.CheckRoom());
  const auto [id, batch] = batches_.Create(requests);
  for (uint32_t i = 0; i < requests.size(); ++i) {
    const absl::Status s = PrepareRequest(requests[i], id, i, *batch);
    if (!s.ok()) batches_.Finish(*batch, i, s);
  }
  for (Connection* c : batch->extra.conns) Pump(c);
  return id;
}

template <RdmaVerbs V>
absl::StatusOr<transport::BatchProgress> RdmaEngine<V>::Poll(transport::BatchId id) {
  MutexLock lock(&mu_);
  Progress();
  const Batch* b = batches_.Find(id);
  if (b == nullptr) return UnknownBatchError(id);
  // A request counts as finished only once no WR of its batch touches memory.
  if (!BatchDone(*b)) {
    size_t ok_done = 0, failed_done = 0;
    for (const RequestState& r : b->requests) {
      if (r.done && r.pieces_left == 0) (r.status.ok() ? ok_done : failed_done)++;
    }
    return transport::BatchProgress{b->requests.size(), ok_done, failed_done};
  }
  return b->progress();
}

template <RdmaVerbs V>
transport::BatchResult RdmaEngine<V>::TakeResult(transport::BatchId id) {
  Batch* b = batches_.Find(id);
  MC_ASSERT(b != nullptr, "TakeResult of an unknown batch");
  MC_ASSERT(b->extra.wrs_outstanding == 0, "batch released with work requests outstanding");
  const BatchState extra = std::move(b->extra);
  transport::BatchResult result = batches_.Take(id);
  for (const MemoryRegion& mr : extra.temp_mrs) verbs_.DeregMr(mr.handle).IgnoreError();
  for (Connection* c : extra.conns) Release(c);
  Reap();
  return result;
}

template <RdmaVerbs V>
absl::StatusOr<transport::BatchResult> RdmaEngine<V>::Wait(transport::BatchId id,
                                                           absl::Time deadline) {
  for (int round = 0;; ++round) {
    {
      MutexLock lock(&mu_);
      Progress();
      ASSIGN_OR_RETURN(const Batch* b, batches_.FindActive(id));
      if (BatchDone(*b)) return TakeResult(id);
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("Wait: batch ", id, " still in flight"));
    }
    // Completions of large WRs take microseconds: spin briefly, then nap.
    if (round < 64) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(std::min(absl::Microseconds(50), deadline - now));
    }
  }
}

template <RdmaVerbs V>
absl::StatusOr<transport::BatchResult> RdmaEngine<V>::Cancel(transport::BatchId id) {
  MutexLock lock(&mu_);
  Progress();
  ASSIGN_OR_RETURN(Batch * found, batches_.FindActive(id));
  Batch& b = *found;
  b.cancelling = true;
  batches_.FinishRest(b, absl::CancelledError("request cancelled before it completed"));
  for (Connection* c : b.extra.conns) {
    std::erase_if(c->pending, [&](const PendingWr& p) { return p.tag.batch == id; });
  }
  // Posted WRs cannot be recalled: wait for them, then flush the QPs.
  const absl::Time deadline = absl::Now() + options_.io_timeout;
  while (b.extra.wrs_outstanding > 0 && absl::Now() < deadline) {
    mu_.Unlock();
    absl::SleepFor(absl::Microseconds(50));
    mu_.Lock();
    Progress();
  }
  if (b.extra.wrs_outstanding > 0) {
    const std::vector<Connection*> conns = b.extra.conns;
    for (Connection* c : conns) {
      if (c->tracker.outstanding() > 0) {
        Break(c, absl::DeadlineExceededError("cancelled work requests did not complete within "
                                             "the I/O timeout; queue pair flushed"));
      }
    }
  }
  return TakeResult(id);
}

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_RDMA_ENGINE_DATA_H_
