// Router data path: submission, the dispatcher, failover, completion.
// Included only by router_impl.h.
// IWYU pragma: private, include "mooncake/transport/router.h"
#ifndef MOONCAKE_TRANSPORT_INTERNAL_ROUTER_DATA_H_
#define MOONCAKE_TRANSPORT_INTERNAL_ROUTER_DATA_H_

#ifndef MOONCAKE_TRANSPORT_ROUTER_H_
#error "include mooncake/transport/router.h instead"
#endif

namespace mooncake::transport {

inline absl::Status Router::CheckRequest(const TransferRequest& r) const {
  const auto local = reinterpret_cast<uint64_t>(r.local_addr);
  if (r.local_addr == nullptr || r.length == 0 || r.remote_offset + r.length < r.remote_offset ||
      local + r.length < local) {
    return absl::InvalidArgumentError("null address, zero length or offset + length overflows");
  }
  auto it = handles_.find(r.segment);
  if (it == handles_.end() || it->second.closed) {
    return absl::NotFoundError(absl::StrCat("unknown or closed handle ", r.segment));
  }
  if (r.remote_offset + r.length > it->second.length) {
    return absl::OutOfRangeError(absl::StrCat("[", r.remote_offset, ", ",
                                              r.remote_offset + r.length, ") is outside the ",
                                              it->second.length, "-byte segment"));
  }
  return absl::OkStatus();
}

inline absl::StatusOr<BatchId> Router::SubmitWithPriority(std::span<const TransferRequest> requests,
                                                          qos::ClassId cls) {
  if (requests.empty() || requests.size() > kMaxBatchRequests) {
    return absl::InvalidArgumentError(absl::StrCat("Submit: a batch holds 1..", kMaxBatchRequests,
                                                   " requests, got ", requests.size()));
  }
  if (cls >= options_.priority_classes) {
    return absl::InvalidArgumentError(
        absl::StrCat("Submit: class ", cls, " >= ", options_.priority_classes));
  }
  trace::Scope span("router.submit", "router");
  SubBatch direct;
  DirectRequests direct_requests;
  ASSIGN_OR_RETURN(const BatchId id, Admit(requests, cls, &direct, &direct_requests));
  if (span.active()) {
    span.set_batch(id);
    uint64_t bytes = 0;
    for (const TransferRequest& r : requests) bytes += r.length;
    span.set_bytes(bytes);
  }
  if (!direct.slices.empty()) SubmitDirect(std::move(direct), direct_requests);
  return id;
}

// True when the batch may take the direct path: nothing queued (so nothing it
// could overtake or be overtaken by), its slices fit the in-flight budget and
// every one of them takes the same first route.
inline bool Router::DirectFitsLocked(std::span<const TransferRequest> requests, size_t slices,
                                     size_t* transport) const {
  if (!options_.direct_path || slices == 0 || queue_.Size() > 0 || held_count_ > 0 ||
      slices_in_flight_ + slices > options_.slices_in_flight_max) {
    return false;
  }
  bool first = true;
  for (const TransferRequest& r : requests) {
    if (!CheckRequest(r).ok()) continue;
    const size_t t = handles_.at(r.segment).routes.front().transport;
    if (!first && t != *transport) return false;
    *transport = t;
    first = false;
  }
  return !first;
}

// Registers the batch and cuts its valid requests into slices: queued for the
// dispatcher, or (direct path) returned in `direct` with the transport
// requests in `direct_requests`, already counted as in flight.
inline absl::StatusOr<BatchId> Router::Admit(std::span<const TransferRequest> requests,
                                             qos::ClassId cls, SubBatch* direct,
                                             DirectRequests* direct_requests) {
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(batches_.CheckRoom());
  size_t slices = 0;
  for (const TransferRequest& r : requests) {
    if (CheckRequest(r).ok())
      slices += (r.length + options_.slice_bytes - 1) / options_.slice_bytes;
  }
  if (queue_.Size() + slices > options_.queued_slices_max) {
    return absl::ResourceExhaustedError(
        absl::StrCat("Submit: ", slices, " slices would overfill the router queue (", queue_.Size(),
                     " of ", options_.queued_slices_max, " queued)"));
  }
  size_t direct_transport = 0;
  bool go_direct = DirectFitsLocked(requests, slices, &direct_transport);
  const auto [id, batch] = batches_.Create(requests);
  batch->extra.cls = cls;
  const int64_t trace_ns = trace::Enabled() ? trace::NowNs() : 0;
  batch->extra.submit_ns = trace_ns;
  uint32_t index = 0;
  for (uint32_t i = 0; i < requests.size(); ++i) {
    const TransferRequest& r = requests[i];
    if (absl::Status s = CheckRequest(r); !s.ok()) {
      batches_.Finish(*batch, i, s);
      continue;
    }
    Opened& o = handles_.at(r.segment);
    batch->extra.bytes += r.length;
    for (uint64_t off = 0; off < r.length; off += options_.slice_bytes) {
      Slice s{id,
              i,
              r.op,
              static_cast<uint8_t*>(r.local_addr) + off,
              r.segment,
              r.remote_offset + off,
              std::min(options_.slice_bytes, r.length - off)};
      s.digests = SubrangeDigests(r, off, s.length);
      s.capability = r.capability;
      s.index = index++;
      s.queued_ns = trace_ns;
      ++batch->requests[i].pieces_left;
      ++o.slices_alive;
      if (go_direct) {
        direct_requests->push_back(TransferRequest{s.op, s.local, o.routes.front().handle, s.offset,
                                                   s.length, s.digests, s.capability});
        direct->slices.push_back(std::move(s));
        continue;
      }
      const uint64_t cost = s.length;
      const qos::PushResult pushed = queue_.Push(std::move(s), cls, cost);
      MC_ASSERT(pushed == qos::PushResult::kAccepted, "queue capacity was checked");
    }
  }
  if (go_direct && arbiter_of_[direct_transport] != nullptr) {
    // All or nothing: a batch the route's arbiter would hold in part goes
    // through the dispatcher, which holds and retries slice by slice. The
    // grants already taken stay with their slices (a grant's tokens are
    // spent; giving it back would not return them).
    for (Slice& s : direct->slices) {
      absl::Status failed;
      if (!TakeGrant(direct_transport, cls, s, &failed)) {
        go_direct = false;
        break;
      }
    }
    if (!go_direct) {
      for (Slice& s : direct->slices) {
        const uint64_t cost = s.length;
        const qos::PushResult pushed = queue_.Push(std::move(s), cls, cost);
        MC_ASSERT(pushed == qos::PushResult::kAccepted, "queue capacity was checked");
      }
      direct->slices.clear();
      direct_requests->clear();
    }
  }
  if (go_direct) {
    MC_DASSERT(direct->slices.size() == slices, "every slice of a direct batch goes direct");
    direct->transport = direct_transport;
    direct->batch = id;
    slices_in_flight_ += slices;
    ++batch->extra.subs_in_flight;
    batch->extra.direct_submitting = true;
    ++direct_batches_;
  } else if (slices > 0) {
    work_cv_.Signal();
  }
  return id;
}

// The direct path's submission, on the caller's thread without the lock (an
// SHM or local transport copies inside Submit).
inline void Router::SubmitDirect(SubBatch sb, std::span<const TransferRequest> requests) {
  MC_DASSERT(sb.slices.size() == requests.size(), "one transport request per slice");
  sb.started = absl::Now();
  sb.started_ns = trace::Enabled() ? trace::NowNs() : 0;
  // The submitting thread collects a direct sub-batch (Wait, or Poll):
  // a transport may receive it on that thread.
  absl::StatusOr<BatchId> sub = transports_[sb.transport]->SubmitForWait(requests);
  MutexLock lock(&mu_);
  // The batch is still there: neither Wait nor Cancel takes it before this.
  batches_.Find(sb.batch)->extra.direct_submitting = false;
  cv_.SignalAll();  // a Cancel waiting for the submission goes on
  if (!sub.ok()) {
    // As the dispatcher would: each slice fails over or fails with the error.
    Settle(std::move(sb), sub.status(), false);
    if (queue_.Size() > 0) work_cv_.Signal();
    return;
  }
  sb.id = *sub;
  const BatchId id = sb.batch;
  direct_.emplace(id, DirectSub{std::move(sb), false});
  cv_.SignalAll();  // a Wait that raced ahead of us now has something to collect
}

// Settles the direct sub-batch of `id` with the transport's answer.
inline void Router::SettleDirectLocked(BatchId id, const absl::StatusOr<BatchResult>& r,
                                       bool timed_out) {
  auto it = direct_.find(id);
  MC_ASSERT(it != direct_.end(), "settling a direct sub-batch twice");
  SubBatch sb = std::move(it->second.sub);
  direct_.erase(it);
  Settle(std::move(sb), r, timed_out);
  if (queue_.Size() > 0) work_cv_.Signal();  // failed slices went back to the queue
  cv_.SignalAll();
}

// Collects the direct sub-batch of `id` on this thread: waits on its
// transport with mu_ released (until `deadline` or the attempt timeout) and
// settles it. False: `deadline` came first and the sub-batch stays in flight.
inline bool Router::WaitDirectLocked(BatchId id, absl::Time deadline) {
  DirectSub& d = direct_.at(id);
  MC_DASSERT(!d.collecting, "one collector at a time");
  d.collecting = true;
  const size_t t = d.sub.transport;
  const BatchId sub = d.sub.id;
  const absl::Time attempt_end = d.sub.started + options_.attempt_timeout;
  mu_.Unlock();
  absl::StatusOr<BatchResult> r = transports_[t]->Wait(sub, std::min(deadline, attempt_end));
  bool timed_out = false;
  if (absl::IsDeadlineExceeded(r.status()) && attempt_end <= deadline) {
    r = transports_[t]->Cancel(sub);  // the route stalled: its slices fail over
    timed_out = true;
  }
  mu_.Lock();
  auto it = direct_.find(id);
  if (it == direct_.end() || it->second.sub.id != sub) return true;  // Cancel settled it
  if (absl::IsDeadlineExceeded(r.status()) && !timed_out) {
    it->second.collecting = false;
    cv_.SignalAll();  // another waiter may collect now
    return false;
  }
  SettleDirectLocked(id, r, timed_out);
  return true;
}

// Poll's share of the direct path: settles the sub-batch if it is done or
// past the attempt timeout, without blocking.
inline void Router::PollDirectLocked(BatchId id) {
  const SubBatch& sb = direct_.at(id).sub;
  auto& t = *transports_[sb.transport];
  absl::StatusOr<BatchProgress> p = t.Poll(sb.id);
  if (!p.ok()) {
    SettleDirectLocked(id, p.status(), false);
  } else if (p->done()) {
    SettleDirectLocked(id, t.Wait(sb.id, absl::InfinitePast()), false);
  } else if (absl::Now() - sb.started >= options_.attempt_timeout) {
    SettleDirectLocked(id, t.Cancel(sb.id), true);
  }
}

inline absl::StatusOr<BatchProgress> Router::Poll(BatchId id) {
  MutexLock lock(&mu_);
  const Batch* b = batches_.Find(id);
  if (b == nullptr) return transport_internal::UnknownBatchError(id);
  if (auto d = direct_.find(id); d != direct_.end() && !d->second.collecting) {
    PollDirectLocked(id);
  }
  return b->progress();
}

inline absl::StatusOr<BatchResult> Router::Wait(BatchId id, absl::Time deadline) {
  MutexLock lock(&mu_);
  for (;;) {
    ASSIGN_OR_RETURN(const Batch* b, batches_.FindActive(id));
    if (BatchDone(*b)) {
      if (b->extra.submit_ns != 0) {
        trace::Record("router.complete", "router", b->extra.submit_ns, trace::NowNs(), id, 0,
                      b->extra.bytes);
      }
      return batches_.Take(id);
    }
    if (auto d = direct_.find(id); d != direct_.end() && !d->second.collecting) {
      if (!WaitDirectLocked(id, deadline)) {
        return absl::DeadlineExceededError(absl::StrCat("Wait: batch ", id, " still in flight"));
      }
      continue;
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("Wait: batch ", id, " still in flight"));
    }
    cv_.WaitWithDeadline(&mu_, deadline);
  }
}

inline absl::StatusOr<BatchResult> Router::Cancel(BatchId id) {
  MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Batch * found, batches_.FindActive(id));
  Batch& b = *found;
  b.cancelling = true;  // no retries from here on
  // Another thread's direct Submit is still running: once it returns, its
  // sub-batch is in direct_ (cancelled below) or already settled. Bounded by
  // the transport's Submit (at most a connect timeout).
  while (b.extra.direct_submitting) cv_.Wait(&mu_);
  // A direct sub-batch: cancel it here even if another thread is collecting
  // it (that thread then finds it settled and drops its own answer).
  if (auto d = direct_.find(id); d != direct_.end()) {
    SettleDirectLocked(id, transports_[d->second.sub.transport]->Cancel(d->second.sub.id), false);
  }
  // Sub-batches in flight: cancel them so no transport touches the buffers.
  for (size_t i = 0; i < in_flight_.size();) {
    if (in_flight_[i].batch != id) {
      ++i;
      continue;
    }
    SubBatch sb = std::move(in_flight_[i]);
    in_flight_.erase(in_flight_.begin() + static_cast<ptrdiff_t>(i));
    auto r = transports_[sb.transport]->Cancel(sb.id);
    Settle(std::move(sb), r, false);
  }
  // Slices still queued never started; they are dropped when popped.
  batches_.FinishRest(b, absl::CancelledError("request cancelled before it completed"));
  return batches_.Take(id);
}

// --- The dispatcher -------------------------------------------------------------

inline void Router::Loop() {
  MutexLock lock(&mu_);
  while (!stopping_) {
    Collect();
    Dispatch();
    // Held slices: an arbiter has no way to call us back when another
    // process releases budget, so ask it again after arbiter_retry.
    if (in_flight_.empty() && held_count_ == 0) {
      work_cv_.Wait(&mu_);
    } else if (in_flight_.empty()) {
      work_cv_.WaitWithTimeout(&mu_, options_.arbiter_retry);
    } else {
      work_cv_.WaitWithTimeout(&mu_, std::min(absl::Microseconds(50), options_.arbiter_retry));
    }
  }
}

// Settles every sub-batch that finished, or ran past the attempt timeout.
inline void Router::Collect() {
  for (size_t i = 0; i < in_flight_.size();) {
    SubBatch& sb = in_flight_[i];
    auto& t = *transports_[sb.transport];
    // Poll first: it is the contract's non-consuming progress check, and a
    // done batch is then collected with a bounded Wait.
    absl::StatusOr<BatchProgress> p = t.Poll(sb.id);
    absl::StatusOr<BatchResult> r = absl::UnknownError("unset");
    bool timed_out = false;
    if (!p.ok()) {
      r = p.status();
    } else if (p->done()) {
      r = t.Wait(sb.id, absl::Now() + options_.attempt_timeout);
    } else {
      if (absl::Now() - sb.started < options_.attempt_timeout) {
        ++i;
        continue;
      }
      r = t.Cancel(sb.id);
      timed_out = true;
    }
    SubBatch done = std::move(sb);
    in_flight_.erase(in_flight_.begin() + static_cast<ptrdiff_t>(i));
    Settle(std::move(done), r, timed_out);
  }
}

inline void Router::Settle(SubBatch sb, const absl::StatusOr<BatchResult>& r, bool timed_out) {
  if (sb.started_ns != 0 && trace::Enabled()) {  // each slice's time on its route
    const int64_t now_ns = trace::NowNs();
    for (const Slice& s : sb.slices) {
      trace::Record("router.attempt", "router", sb.started_ns, now_ns, s.batch, s.index, s.length);
    }
  }
  slices_in_flight_ -= sb.slices.size();
  if (Batch* b = batches_.Find(sb.batch); b != nullptr) --b->extra.subs_in_flight;
  for (size_t k = 0; k < sb.slices.size(); ++k) {
    absl::Status s;
    if (!r.ok()) {
      s = r.status();
    } else if (r->statuses.size() != sb.slices.size()) {
      s = absl::InternalError("transport returned a result of the wrong size");
    } else {
      s = r->statuses[k];
    }
    if (timed_out && absl::IsCancelled(s)) {
      s = absl::DeadlineExceededError(absl::StrCat(AbslView(transports_[sb.transport]->Name()),
                                                   " stalled past the router's attempt timeout"));
    }
    OnSliceResult(std::move(sb.slices[k]), s);
  }
}

inline bool Router::TakeGrant(size_t t, qos::ClassId cls, Slice& s, absl::Status* error) const {
  qos::ShmArbiter* a = arbiter_of_[t];
  if (a == nullptr || s.grant.held()) return true;
  const size_t arbiter_cls = std::min<size_t>(cls, a->priority_classes() - 1);
  absl::StatusOr<qos::ShmArbiter::Grant> g = a->TryAcquire(arbiter_cls, s.length);
  if (g.ok()) {
    s.grant = std::move(*g);
    return true;
  }
  if (!absl::IsResourceExhausted(g.status())) *error = g.status();
  return false;
}

inline void Router::Dispatch() {
  // Sub-batches of at most a quarter of the budget, in pop (priority) order:
  // each settles on its own, so the budget refills while the others are
  // still on the wire instead of the pipeline draining between rounds.
  const size_t chunk = std::max<size_t>(1, options_.slices_in_flight_max / 4);
  using Key = std::pair<BatchId, size_t>;  // (batch, transport)
  std::vector<std::pair<Key, Slices>> groups;
  std::map<Key, size_t> filling;  // the group of `groups` that takes the key's next slice
  size_t taken = 0;
  const int64_t trace_ns = trace::Enabled() ? trace::NowNs() : 0;
  const auto room = [&] { return slices_in_flight_ + taken < options_.slices_in_flight_max; };
  const auto take = [&](Slice s, size_t t) {
    const Key key{s.batch, t};
    auto f = filling.find(key);
    if (f == filling.end() || groups[f->second].second.size() >= chunk) {
      filling[key] = groups.size();
      groups.emplace_back(key, Slices());
    }
    groups[filling[key]].second.push_back(std::move(s));
    ++taken;
  };
  // Per transport, the most urgent class its arbiter refused this round:
  // that class and the less urgent ones wait on that route.
  std::array<size_t, transport_internal::kRouterTransportsMax> refused;
  refused.fill(SIZE_MAX);
  for (qos::ClassId c = 0; c < options_.priority_classes && room(); ++c) {
    // Slices of class c held for an arbiter were popped before anything of
    // class c still queued: they go first.
    for (size_t t = 0; t < held_.size(); ++t) {
      std::deque<Slice>& held = held_[t][c];
      while (!held.empty() && room() && refused[t] > c) {
        absl::Status error;
        const bool alive = batches_.Find(held.front().batch) != nullptr;
        if (alive && !TakeGrant(t, c, held.front(), &error) && error.ok()) {
          refused[t] = c;
          break;
        }
        Slice s = std::move(held.front());
        held.pop_front();
        --held_count_;
        if (!alive) {  // cancelled while held: never started
          ReleaseSlice(s);
        } else if (!error.ok()) {
          OnSliceResult(std::move(s), error);
        } else {
          if (s.queued_ns != 0 && trace_ns != 0) {
            trace::Record("router.arbiter", "router", s.queued_ns, std::max(s.queued_ns, trace_ns),
                          s.batch, s.index, s.length);
          }
          take(std::move(s), t);
        }
      }
    }
    // At most slices_in_flight_max of a class wait for arbiters; the rest of
    // the class stays queued (a more urgent class is never held up by them).
    size_t held_in_class = 0;
    for (const auto& per_class : held_) held_in_class += per_class[c].size();
    while (room() && held_in_class < options_.slices_in_flight_max && queue_.PeekClass() == c) {
      std::optional<Slice> s = queue_.Pop();
      if (batches_.Find(s->batch) == nullptr) {  // cancelled: never started
        ReleaseSlice(*s);
        continue;
      }
      if (s->queued_ns != 0 && trace_ns != 0) {  // a failed-over slice's wait is its retry span
        trace::Record(s->tries > 0 ? "router.retry" : "router.queue", "router", s->queued_ns,
                      std::max(s->queued_ns, trace_ns), s->batch, s->index, s->length);
      }
      const size_t t = TransportOf(*s);
      if (arbiter_of_[t] != nullptr) {
        absl::Status error;
        if (refused[t] <= c || !held_[t][c].empty() || !TakeGrant(t, c, *s, &error)) {
          if (!error.ok()) {
            OnSliceResult(std::move(*s), error);
            continue;
          }
          refused[t] = std::min<size_t>(refused[t], c);
          s->queued_ns = trace_ns;  // its wait for the arbiter is traced from here
          ++stats_[t].slices_held;
          held_[t][c].push_back(std::move(*s));
          ++held_count_;
          ++held_in_class;
          continue;
        }
      }
      take(std::move(*s), t);
    }
  }
  for (auto& [key, slices] : groups) {
    const auto [batch, t] = key;
    std::vector<TransferRequest> reqs;
    reqs.reserve(slices.size());
    for (const Slice& s : slices) {
      const Route& route = handles_.at(s.handle).routes[s.route];
      reqs.push_back(TransferRequest{s.op, s.local, route.handle, s.offset, s.length, s.digests,
                                     s.capability});
    }
    absl::StatusOr<BatchId> sub = transports_[t]->Submit(reqs);
    if (!sub.ok()) {
      for (Slice& s : slices) OnSliceResult(std::move(s), sub.status());
      continue;
    }
    slices_in_flight_ += slices.size();
    ++batches_.Find(batch)->extra.subs_in_flight;
    in_flight_.push_back(SubBatch{t, *sub, batch, std::move(slices), absl::Now(), trace_ns});
  }
}

inline void Router::OnSliceResult(Slice s, absl::Status status) {
  s.grant.Release();  // its bytes are off the route, whatever happens next
  Batch* b = batches_.Find(s.batch);
  if (b == nullptr) {
    ReleaseSlice(s);
    return;
  }
  const Opened& o = handles_.at(s.handle);
  RouteStats& st = stats_[o.routes[s.route].transport];
  (status.ok() ? st.slices_ok : st.slices_failed)++;
  const bool retryable = !status.ok() && !absl::IsInvalidArgument(status) &&
                         !absl::IsOutOfRange(status) && !absl::IsCancelled(status);
  if (retryable && !b->cancelling && s.tries < options_.retries_max &&
      s.route + 1 < o.routes.size()) {
    ++s.tries;
    ++s.route;
    // The failed route may have digested bytes the next one writes again.
    if (s.digests != nullptr) std::fill_n(s.digests, DigestChunkCount(s.length), kNoDigest);
    s.queued_ns = trace::Enabled() ? trace::NowNs() : 0;
    const uint64_t cost = s.length;
    if (queue_.Push(std::move(s), b->extra.cls, cost) == qos::PushResult::kAccepted) {
      ++failovers_;
      return;
    }
    status = absl::ResourceExhaustedError(
        absl::StrCat("router queue full while failing over after: ", status.message()));
  }
  FinishSlice(*b, s, status);
}

inline void Router::FinishSlice(Batch& b, const Slice& s, const absl::Status& status) {
  // A cancelled request is done already; its late slices only release.
  if (!b.requests[s.request].done) batches_.SettlePiece(b, s.request, status);
  ReleaseSlice(s);
  if (BatchDone(b)) cv_.SignalAll();
}

inline void Router::ReleaseSlice(const Slice& s) {
  auto it = handles_.find(s.handle);
  MC_ASSERT(it != handles_.end(), "slice of an unknown handle");
  MC_DASSERT(it->second.slices_alive > 0, "slices_alive underflow");
  if (--it->second.slices_alive == 0 && it->second.closed) {
    CloseRoutes(it->second);
    handles_.erase(it);
  }
}

}  // namespace mooncake::transport

#endif  // MOONCAKE_TRANSPORT_INTERNAL_ROUTER_DATA_H_
