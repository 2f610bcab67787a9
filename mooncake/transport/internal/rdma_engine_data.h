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
// lkeys) and registers each gap on the fly, on every device, for the batch.
template <RdmaVerbs V>
absl::StatusOr<std::vector<typename RdmaEngine<V>::LocalPiece>> RdmaEngine<V>::CoverLocal(
    uint64_t addr, uint64_t length, Batch& batch) {
  std::vector<LocalPiece> pieces;
  const uint64_t end = addr + length;
  uint64_t cursor = addr;
  while (cursor < end) {
    auto next = segments_by_addr_.upper_bound(cursor);
    if (next != segments_by_addr_.begin()) {
      const LocalSegment& seg = segments_.at(std::prev(next)->second);
      if (cursor < seg.addr + seg.length) {
        const uint64_t piece_end = std::min(end, seg.addr + seg.length);
        LocalPiece piece{cursor, piece_end - cursor, {}};
        for (size_t d = 0; d < seg.mrs.size(); ++d) piece.lkeys[d] = seg.mrs[d].lkey;
        pieces.push_back(piece);
        cursor = piece_end;
        continue;
      }
    }
    const uint64_t gap_end = next == segments_by_addr_.end() ? end : std::min(end, next->first);
    LocalPiece piece{cursor, gap_end - cursor, {}};
    for (size_t d = 0; d < devices_.size(); ++d) {
      auto mr = verbs_.RegMr(devices_[d].pd, reinterpret_cast<void*>(cursor), gap_end - cursor,
                             kAccessLocalWrite);
      if (!mr.ok()) {
        return absl::Status(mr.status().code(),
                            absl::StrCat("registering an unregistered local buffer on the fly: ",
                                         mr.status().message()));
      }
      batch.extra.temp_mrs.push_back(*mr);
      piece.lkeys[d] = mr->lkey;
    }
    pieces.push_back(piece);
    cursor = gap_end;
  }
  MC_DASSERT(!pieces.empty(), "a non-empty range yields pieces");
  return pieces;
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
  PathGroup& group = *seg.paths.front().conn->group;
  if (!HasLivePath(group)) {
    for (const PathKey& k : seg.paths) {
      if (!k.conn->broken.ok()) return k.conn->broken;
    }
    return absl::UnavailableError("RDMA: no usable path to the segment's owner");
  }
  ASSIGN_OR_RETURN(std::vector<LocalPiece> pieces, CoverLocal(local, r.length, batch));
  // Sliced once, with each piece's index where its lkey goes: Bind puts in
  // the keys of the device that posts the WR.
  std::vector<LocalChunk> chunks;
  chunks.reserve(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    chunks.push_back(LocalChunk{pieces[i].addr, pieces[i].length, static_cast<uint32_t>(i)});
  }
  std::vector<SendWr> wrs;
  SliceRequest(r.op == transport::OpCode::kRead ? WrOpcode::kRdmaRead : WrOpcode::kRdmaWrite,
               chunks, seg.info.addr + r.remote_offset, /*rkey=*/0, limits_, &wrs);
  batch.requests[index].pieces_left = static_cast<uint32_t>(wrs.size());
  batch.extra.routes[index] = RequestRoute{seg.paths, std::move(pieces)};
  for (const SendWr& wr : wrs) {
    const auto w = static_cast<uint32_t>(batch.extra.wrs.size());
    batch.extra.wrs.push_back(WrPlan{wr, 0});
    group.pending.push_back(WrTag{batch_id, index, w});
    ++batch.extra.wrs_queued;
  }
  for (const PathKey& k : seg.paths) {
    if (std::find(batch.extra.conns.begin(), batch.extra.conns.end(), k.conn) ==
        batch.extra.conns.end()) {
      ++k.conn->refs;
      batch.extra.conns.push_back(k.conn);
    }
  }
  return absl::OkStatus();
}

// The WR of `tag` as connection `c` posts it: the segment's rkey on the
// owner's device behind c's path, the pieces' lkeys on c's device. False if
// the request's segment was not opened over c (cannot happen: every live
// connection of a group is in every route of the group).
template <RdmaVerbs V>
bool RdmaEngine<V>::Bind(const Batch& b, const WrTag& tag, const Connection& c, SendWr* out) const {
  const RequestRoute& route = b.extra.routes[tag.request];
  auto key = std::find_if(route.paths.begin(), route.paths.end(),
                          [&](const PathKey& k) { return k.conn == &c; });
  if (key == route.paths.end()) return false;
  const size_t device = paths_[c.path].device;
  *out = b.extra.wrs[tag.wr].wr;
  out->rkey = key->rkey;
  for (uint32_t i = 0; i < out->num_sge; ++i) {
    out->sge[i].lkey = route.pieces[out->sge[i].lkey].lkeys[device];
  }
  return true;
}

// One WR of `tag` left a queue pair (`was_posted`; `c` is that connection)
// or its group's queue. A WR that failed for its path's sake goes back to
// the group's queue while another path lives and it has moves left.
template <RdmaVerbs V>
void RdmaEngine<V>::Retire(Connection* c, const WrTag& tag, const absl::Status& s,
                           bool was_posted) {
  Batch* b = batches_.Find(tag.batch);
  MC_ASSERT(b != nullptr, "work request of an unknown batch");
  WrPlan& plan = b->extra.wrs[tag.wr];
  const uint64_t bytes = plan.wr.total_bytes();
  if (was_posted) {
    MC_DASSERT(b->extra.wrs_outstanding > 0, "outstanding WR count underflow");
    --b->extra.wrs_outstanding;
    MC_DASSERT(c != nullptr && c->bytes_posted >= bytes, "posted byte count underflow");
    c->bytes_posted -= bytes;
    if (s.ok()) {
      ++paths_[c->path].stats.wrs_done;
      paths_[c->path].stats.bytes_done += bytes;
    }
  } else {
    MC_DASSERT(b->extra.wrs_queued > 0, "queued WR count underflow");
    --b->extra.wrs_queued;
  }
  // Done already: cancelled, or an earlier WR failed it (its pieces_left
  // then stays above 0, so Poll does not count it while WRs still run).
  const RequestState& request = b->requests[tag.request];
  if (request.done) return;
  // Moved only when the path failed it and its request has not failed for
  // another reason already (an owner that refused a key refuses it on every
  // path: moving its WRs would break the other paths too).
  const bool path_failed = absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
  if (was_posted && path_failed && request.status.ok() && plan.moves < options_.path_retries_max &&
      HasLivePath(*c->group, c)) {
    ++plan.moves;
    ++paths_[c->path].stats.wrs_moved;
    c->group->pending.push_front(tag);
    ++b->extra.wrs_queued;
    return;
  }
  batches_.SettlePiece(*b, tag.request, s);
}

// Posts at most `max_wrs` of the group's queued WRs on `c` as chains within
// its send queue's free slots and its window.
template <RdmaVerbs V>
void RdmaEngine<V>::Pump(Connection* c, size_t max_wrs) {
  std::array<SendWr, 64> chain;
  const size_t chain_max = std::min<size_t>(options_.post_chain_max, chain.size());
  const uint64_t window = paths_[c->path].window;
  std::deque<WrTag>& queue = c->group->pending;
  while (!queue.empty() && max_wrs > 0 && c->broken.ok() && c->tracker.outstanding() < sq_depth_) {
    const size_t room = std::min<size_t>(sq_depth_ - c->tracker.outstanding(), max_wrs);
    size_t n = 0;
    uint64_t posted = c->bytes_posted;
    bool window_full = false;
    // Drops the tags from queue[n] on whose requests are over (cancelled, or
    // failed: they are never posted), so that queue[n], if any, is one to post.
    const auto drop_dead = [&] {
      while (n < queue.size()) {
        const WrTag t = queue[n];
        const RequestState& r = batches_.Find(t.batch)->requests[t.request];
        if (!r.done && r.status.ok()) return;
        const absl::Status why = r.status;
        queue.erase(queue.begin() + static_cast<ptrdiff_t>(n));
        Retire(c, t, why, false);
      }
    };
    for (drop_dead(); n < chain_max && n < room && n < queue.size(); drop_dead()) {
      const WrTag t = queue[n];
      const Batch* b = batches_.Find(t.batch);
      const uint64_t bytes = b->extra.wrs[t.wr].wr.total_bytes();
      if (window != 0 && posted > 0 && posted + bytes > window) {
        window_full = true;
        break;
      }
      if (!Bind(*b, t, *c, &chain[n])) {
        queue.erase(queue.begin() + static_cast<ptrdiff_t>(n));
        Retire(c, t, absl::InternalError("RDMA: a queued WR's segment is not open on this path"),
               false);
        continue;
      }
      posted += bytes;
      ++n;
    }
    if (n == 0) break;
    // A chain cut at chain_max whose next WR would not fit the window ends
    // the posting too.
    if (!window_full && window != 0 && n < queue.size() && n < room) {
      const WrTag& next = queue[n];
      window_full =
          posted + batches_.Find(next.batch)->extra.wrs[next.wr].wr.total_bytes() > window;
    }
    // Force a signal at the chain's tail when nothing follows it soon: end of
    // queue, a full send queue or window that only a completion can drain.
    const bool tail_must_signal = n == queue.size() || n == room || window_full;
    for (size_t i = 0; i < n; ++i) {
      const WrTag& t = queue[i];
      chain[i].signaled = c->signal.Next(tail_must_signal && i + 1 == n);
      chain[i].wr_id = c->tracker.Track(t);
      Batch* b = batches_.Find(t.batch);
      ++b->extra.wrs_outstanding;
      --b->extra.wrs_queued;
      c->bytes_posted += chain[i].total_bytes();
    }
    queue.erase(queue.begin(), queue.begin() + static_cast<ptrdiff_t>(n));
    max_wrs -= n;
    const PostSendResult posted_result = verbs_.PostSend(c->qp.handle, std::span(chain.data(), n));
    if (!posted_result.status.ok()) {
      Break(c, absl::Status(posted_result.status.code(),
                            absl::StrCat("ibv_post_send: ", posted_result.status.message())));
      return;
    }
    if (window_full) return;
  }
}

// Shares the group's queued WRs among its live connections: each may take
// an equal part of the queue now (so one batch starts on every path), and a
// path whose WRs complete sooner comes back for more sooner.
template <RdmaVerbs V>
void RdmaEngine<V>::PumpGroup(PathGroup& g) {
  if (g.pending.empty()) return;
  const auto live =
      static_cast<size_t>(std::count_if(g.conns.begin(), g.conns.end(), [](const Connection* c) {
        return c->broken.ok() && c->refs > 0;
      }));
  if (live == 0) return;
  const size_t share = (g.pending.size() + live - 1) / live;
  for (size_t i = 0; i < g.conns.size(); ++i) {
    Connection* c = g.conns[i];
    if (c->broken.ok() && c->refs > 0) Pump(c, share);
  }
}

template <RdmaVerbs V>
void RdmaEngine<V>::PumpGroups(std::span<Connection* const> conns) {
  std::vector<PathGroup*>& groups = pump_scratch_;  // no allocation per call once grown
  groups.clear();
  for (Connection* c : conns) groups.push_back(c->group.get());
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  for (PathGroup* g : groups) PumpGroup(*g);
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
        c->tracker.OnCompletion(wcs[i].wr_id, s, [&](const WrTag& t, const absl::Status& st) {
          Retire(c, t, st, true);
        });
        if (!s.ok()) Break(c, s);
      }
    }
  }
  groups_to_pump_.clear();
  for (auto& [id, owned] : conns_) {
    if (owned->refs > 0 && !owned->group->pending.empty()) groups_to_pump_.push_back(owned.get());
  }
  PumpGroups(groups_to_pump_);
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
  batch->extra.routes.resize(requests.size());
  for (uint32_t i = 0; i < requests.size(); ++i) {
    const absl::Status s = PrepareRequest(requests[i], id, i, *batch);
    if (!s.ok()) batches_.Finish(*batch, i, s);
  }
  PumpGroups(batch->extra.conns);
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
  MC_ASSERT(b->extra.wrs_outstanding == 0 && b->extra.wrs_queued == 0,
            "batch released with work requests outstanding");
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
    b.extra.wrs_queued -=
        std::erase_if(c->group->pending, [&](const WrTag& t) { return t.batch == id; });
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
      if (c->tracker.Holds(id)) {  // not a healthy path that carries other batches only
        Break(c, absl::DeadlineExceededError("cancelled work requests did not complete within "
                                             "the I/O timeout; queue pair flushed"));
      }
    }
  }
  return TakeResult(id);
}

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_RDMA_ENGINE_DATA_H_
