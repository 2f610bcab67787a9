// BatchTable: the bounded, thread-safe bookkeeping of batches in flight that
// every model shares (Submit / Poll / Wait / Cancel semantics of transport.h).
//
// A model creates a batch with the number of *pieces* each request will be
// settled in (a TCP request cut into 8 slices has 8 pieces), hands the
// returned BatchState to whoever does the work, and calls Settle once per
// piece. A request is done when all its pieces settled; its status is the
// first non-OK piece status (or Cancelled if Cancel ran first). The batch is
// done when every request is.
//
// Invariants (under mu_): for every request, pieces_left > 0 <=> !done;
// unsettled == number of requests with !done.
// Thread-safety: every method may be called concurrently.
//
// BatchRecords (below BatchTable): the same bookkeeping for a model that
// keeps its batches under its own mutex because it advances them while
// holding it (the Router's slices and direct sub-batches, CudaTransport's
// events, RdmaEngine's work completions). The owner serializes every call;
// per-batch model state rides along as `Extra`.
#ifndef MOONCAKE_TRANSPORT_INTERNAL_BATCH_TABLE_H_
#define MOONCAKE_TRANSPORT_INTERNAL_BATCH_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/transport/transport.h"
#include "mooncake/transport/transport_metrics.h"

namespace mooncake::transport_internal {

using transport::BatchId;
using transport::BatchProgress;
using transport::BatchResult;
using transport::OpCode;
using transport::TransferRequest;

struct RequestState {
  OpCode op = OpCode::kRead;
  uint64_t length = 0;
  uint32_t pieces_left = 1;
  bool done = false;
  absl::Status status;
};

// A batch's request states; a batch of one (a single get or put) needs no heap block.
using RequestStates = absl::InlinedVector<RequestState, 1>;

class BatchTable;

// NotFound for a batch id the owner does not hold.
inline absl::Status UnknownBatchError(BatchId id) {
  return absl::NotFoundError(
      absl::StrCat("unknown batch id ", id, " (never submitted, or already collected)"));
}

// ResourceExhausted once `in_flight` batches reach the owner's limit.
inline absl::Status BatchLimitError(size_t in_flight) {
  return absl::ResourceExhaustedError(
      absl::StrCat(in_flight, " batches in flight (the limit): Wait for some before submitting"));
}

// The request-level checks every owner applies: InvalidArgument for a null
// address, zero length or an overflowing range; OutOfRange past the segment.
inline absl::Status CheckRange(const void* local_addr, uint64_t offset, uint64_t length,
                               uint64_t segment_length) {
  if (local_addr == nullptr) return absl::InvalidArgumentError("null local address");
  if (length == 0) return absl::InvalidArgumentError("zero-length request");
  if (offset + length < offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("offset ", offset, " + length ", length, " overflows"));
  }
  if (offset + length > segment_length) {
    return absl::OutOfRangeError(absl::StrCat("range [", offset, ", ", offset + length,
                                              ") is outside the segment of ", segment_length,
                                              " bytes"));
  }
  return absl::OkStatus();
}

// Shared between the table and the workers holding pieces of the batch.
class BatchState {
 public:
  BatchId id() const { return id_; }
  // Workers check this before starting a piece, to skip cancelled work.
  bool cancelled() const {
    // acquire: pairs with the release store in Cancel; nothing else is
    // published through it, but it keeps the flag's meaning obvious.
    return cancelled_.load(std::memory_order_acquire);
  }

 private:
  friend class BatchTable;

  BatchId id_ = 0;
  int64_t submit_ns_ = 0;
  std::atomic<bool> cancelled_{false};
  // Guarded by the owning table's mu_.
  RequestStates requests_;
  size_t unsettled_ = 0;
  size_t succeeded_ = 0;
};

class BatchTable {
 public:
  BatchTable(size_t max_batches, transport::TransportMetrics* metrics)
      : max_batches_(max_batches), metrics_(metrics) {
    MC_ASSERT(max_batches > 0, "max_batches must be positive");
  }
  BatchTable(const BatchTable&) = delete;
  BatchTable& operator=(const BatchTable&) = delete;

  // Validates the batch shape (not the requests) and registers it. `pieces`
  // is empty (one piece per request) or gives each request's piece count.
  absl::StatusOr<std::shared_ptr<BatchState>> Create(std::span<const TransferRequest> requests,
                                                     std::span<const uint32_t> pieces = {}) {
    if (absl::Status shape = ShapeError(requests); !shape.ok()) return shape;
    MC_ASSERT(pieces.empty() || pieces.size() == requests.size(), "pieces per request");
    auto state = std::make_shared<BatchState>();
    state->submit_ns_ = MonotonicClock::Get().NowNs();
    state->requests_.resize(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      state->requests_[i].op = requests[i].op;
      state->requests_[i].length = requests[i].length;
      state->requests_[i].pieces_left = pieces.empty() ? 1 : pieces[i];
      MC_ASSERT(state->requests_[i].pieces_left > 0, "a request has at least one piece");
    }
    state->unsettled_ = requests.size();
    MutexLock lock(&mu_);
    if (batches_.size() >= max_batches_) return BatchLimitError(batches_.size());
    state->id_ = next_id_++;
    batches_.emplace(state->id_, state);
    return state;
  }

  // Settles `n` pieces of request `index` with `status`.
  void Settle(BatchState& batch, size_t index, const absl::Status& status, uint32_t n = 1) {
    MutexLock lock(&mu_);
    MC_ASSERT(index < batch.requests_.size(), "request index out of range");
    RequestState& r = batch.requests_[index];
    MC_ASSERT(!r.done && r.pieces_left >= n, "a piece settled twice");
    if (!status.ok() && r.status.ok()) r.status = status;
    r.pieces_left -= n;
    if (r.pieces_left > 0) return;
    r.done = true;
    --batch.unsettled_;
    if (r.status.ok()) ++batch.succeeded_;
    if (metrics_ != nullptr) metrics_->RecordRequest(r.op, r.length, r.status.ok());
    if (batch.unsettled_ == 0 && metrics_ != nullptr) {
      metrics_->RecordBatchLatencyNs(
          static_cast<uint64_t>(MonotonicClock::Get().NowNs() - batch.submit_ns_));
    }
  }

  // Settles every remaining piece of request `index` at once (it never started).
  void Fail(BatchState& batch, size_t index, const absl::Status& status) {
    MC_DASSERT(!status.ok(), "Fail needs an error");
    uint32_t left;
    {
      MutexLock lock(&mu_);
      left = batch.requests_[index].pieces_left;
    }
    Settle(batch, index, status, left);
  }

  absl::StatusOr<BatchProgress> Poll(BatchId id) const {
    MutexLock lock(&mu_);
    auto it = batches_.find(id);
    if (it == batches_.end()) return UnknownBatch(id);
    const BatchState& b = *it->second;
    BatchProgress p;
    p.total_requests = b.requests_.size();
    p.succeeded_requests = b.succeeded_;
    p.failed_requests = b.requests_.size() - b.unsettled_ - b.succeeded_;
    return p;
  }

  absl::StatusOr<BatchResult> Wait(BatchId id, absl::Time deadline) {
    MutexLock lock(&mu_);
    auto it = batches_.find(id);
    if (it == batches_.end()) return UnknownBatch(id);
    std::shared_ptr<BatchState> b = it->second;
    const auto done = [&b]() { return b->unsettled_ == 0; };
    if (!mu_.AwaitWithDeadline(Condition(&done), deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("batch ", id, " still in flight at the deadline (", b->unsettled_,
                       " requests left); Wait again or Cancel it"));
    }
    return TakeLocked(*b);
  }

  // Marks the batch cancelled, fails unfinished requests with Cancelled and
  // waits up to `drain_deadline` for workers to settle the pieces they hold.
  absl::StatusOr<BatchResult> Cancel(BatchId id, absl::Time drain_deadline) {
    MutexLock lock(&mu_);
    auto it = batches_.find(id);
    if (it == batches_.end()) return UnknownBatch(id);
    std::shared_ptr<BatchState> b = it->second;
    MarkCancelledLocked(*b);
    const auto done = [&b]() { return b->unsettled_ == 0; };
    if (!mu_.AwaitWithDeadline(Condition(&done), drain_deadline)) {
      return absl::InternalError(absl::StrCat("batch ", id,
                                              " could not be drained after Cancel; its buffers "
                                              "may still be in use"));
    }
    return TakeLocked(*b);
  }

  // True when every request of batch `id` settled (also for an unknown id).
  bool Settled(BatchId id) const {
    MutexLock lock(&mu_);
    auto it = batches_.find(id);
    return it == batches_.end() || it->second->unsettled_ == 0;
  }

  // Waits until every request of batch `id` settled (true; also for an
  // unknown id) or `deadline` passed (false). Collects nothing.
  bool AwaitSettled(BatchId id, absl::Time deadline) {
    MutexLock lock(&mu_);
    auto it = batches_.find(id);
    if (it == batches_.end()) return true;
    std::shared_ptr<BatchState> b = it->second;
    const auto done = [&b]() { return b->unsettled_ == 0; };
    return mu_.AwaitWithDeadline(Condition(&done), deadline);
  }

  // Step one of Cancel alone, so a model can sweep queued work before the
  // drain: sets the flag and fails unfinished requests with Cancelled.
  absl::Status MarkCancelled(BatchId id) {
    MutexLock lock(&mu_);
    auto it = batches_.find(id);
    if (it == batches_.end()) return UnknownBatch(id);
    MarkCancelledLocked(*it->second);
    return absl::OkStatus();
  }

  size_t InFlight() const {
    MutexLock lock(&mu_);
    return batches_.size();
  }

 private:
  static absl::Status ShapeError(std::span<const TransferRequest> requests) {
    if (requests.empty()) return absl::InvalidArgumentError("empty batch: submit >= 1 request");
    if (requests.size() > transport::kMaxBatchRequests) {
      return absl::InvalidArgumentError(absl::StrCat("batch of ", requests.size(),
                                                     " requests exceeds kMaxBatchRequests (",
                                                     transport::kMaxBatchRequests, "); split it"));
    }
    return absl::OkStatus();
  }
  static absl::Status UnknownBatch(BatchId id) { return UnknownBatchError(id); }

  void MarkCancelledLocked(BatchState& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    b.cancelled_.store(true, std::memory_order_release);
    for (RequestState& r : b.requests_) {
      if (!r.done && r.status.ok()) r.status = absl::CancelledError("batch cancelled");
    }
  }

  BatchResult TakeLocked(BatchState& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    BatchResult result;
    result.statuses.reserve(b.requests_.size());
    for (RequestState& r : b.requests_) result.statuses.push_back(std::move(r.status));
    batches_.erase(b.id_);
    return result;
  }

  const size_t max_batches_;
  transport::TransportMetrics* const metrics_;
  mutable Mutex mu_;
  BatchId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<BatchId, std::shared_ptr<BatchState>> batches_ ABSL_GUARDED_BY(mu_);
};

struct NoBatchExtra {};

// The batch map of a model that guards it with its own mutex (see the top of
// this file). Thread-safety: thread-compatible; every call under the owner's
// lock. Invariant: for each batch, done_count counts its requests with done
// set and failed_count those of them with a non-OK status.
template <typename Extra = NoBatchExtra>
class BatchRecords {
 public:
  struct Batch {
    RequestStates requests;
    size_t done_count = 0;
    size_t failed_count = 0;
    bool cancelling = false;  // a Cancel owns it: Wait and Cancel see NotFound
    int64_t submit_ns = 0;
    Extra extra;

    bool all_done() const { return done_count == requests.size(); }
    BatchProgress progress() const {
      return BatchProgress{requests.size(), done_count - failed_count, failed_count};
    }
  };

  BatchRecords(size_t max_batches, transport::TransportMetrics* metrics)
      : max_batches_(max_batches), metrics_(metrics) {
    MC_ASSERT(max_batches > 0, "max_batches must be positive");
  }
  BatchRecords(const BatchRecords&) = delete;
  BatchRecords& operator=(const BatchRecords&) = delete;

  // ResourceExhausted when the limit of batches is in flight.
  absl::Status CheckRoom() const {
    return batches_.size() >= max_batches_ ? BatchLimitError(batches_.size()) : absl::OkStatus();
  }

  // Registers a batch whose requests have no pieces yet: a model that cuts
  // requests into pieces counts them in pieces_left before settling any.
  // REQUIRES: CheckRoom().ok().
  std::pair<BatchId, Batch*> Create(std::span<const TransferRequest> requests) {
    MC_ASSERT(batches_.size() < max_batches_, "Create past the batch limit");
    auto batch = std::make_unique<Batch>();
    batch->submit_ns = MonotonicClock::Get().NowNs();
    batch->requests.resize(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      batch->requests[i].op = requests[i].op;
      batch->requests[i].length = requests[i].length;
      batch->requests[i].pieces_left = 0;
    }
    const BatchId id = next_id_++;
    Batch* raw = batch.get();
    batches_.emplace(id, std::move(batch));
    return {id, raw};
  }

  // The batch, or nullptr when `id` is not held.
  Batch* Find(BatchId id) {
    auto it = batches_.find(id);
    return it == batches_.end() ? nullptr : it->second.get();
  }

  // The batch for Wait or Cancel: NotFound when unknown or being cancelled.
  absl::StatusOr<Batch*> FindActive(BatchId id) {
    Batch* b = Find(id);
    if (b == nullptr) return UnknownBatchError(id);
    if (b->cancelling) {
      return absl::NotFoundError(absl::StrCat("batch ", id, " is being cancelled"));
    }
    return b;
  }

  // Marks request `index` done with `status`; pieces_left keeps the count of
  // pieces that never settled (still running, or never to run).
  // REQUIRES: the request is not done.
  void Finish(Batch& b, size_t index, const absl::Status& status) {
    RequestState& r = Request(b, index);
    r.status = status;
    MarkDone(b, r);
  }

  // Settles one piece of request `index`; the request keeps its first error
  // and is done with its last piece (true then).
  bool SettlePiece(Batch& b, size_t index, const absl::Status& status) {
    RequestState& r = Request(b, index);
    MC_ASSERT(r.pieces_left > 0, "a piece settled twice");
    if (!status.ok() && r.status.ok()) r.status = status;
    if (--r.pieces_left > 0) return false;
    MarkDone(b, r);
    return true;
  }

  // Finishes every request not done yet with `status` (a Cancel).
  void FinishRest(Batch& b, const absl::Status& status) {
    for (size_t i = 0; i < b.requests.size(); ++i) {
      if (!b.requests[i].done) Finish(b, i, status);
    }
  }

  // Removes batch `id` and returns its statuses, recording each request and
  // the batch's latency in the metrics. REQUIRES: Find(id) != nullptr.
  BatchResult Take(BatchId id) {
    auto it = batches_.find(id);
    MC_ASSERT(it != batches_.end(), "Take of an unknown batch");
    Batch& b = *it->second;
    BatchResult result;
    result.statuses.reserve(b.requests.size());
    for (RequestState& r : b.requests) {
      if (metrics_ != nullptr) metrics_->RecordRequest(r.op, r.length, r.status.ok());
      result.statuses.push_back(std::move(r.status));
    }
    if (metrics_ != nullptr) {
      metrics_->RecordBatchLatencyNs(
          static_cast<uint64_t>(MonotonicClock::Get().NowNs() - b.submit_ns));
    }
    batches_.erase(it);
    return result;
  }

  // Calls f(id, batch) for every batch held (shutdown sweeps).
  template <typename F>
  void ForEach(F&& f) {
    for (auto& [id, b] : batches_) f(id, *b);
  }
  void Clear() { batches_.clear(); }
  size_t size() const { return batches_.size(); }

 private:
  static RequestState& Request(Batch& b, size_t index) {
    MC_ASSERT(index < b.requests.size(), "request index out of range");
    RequestState& r = b.requests[index];
    MC_ASSERT(!r.done, "request finished twice");
    return r;
  }

  static void MarkDone(Batch& b, RequestState& r) {
    r.done = true;
    ++b.done_count;
    if (!r.status.ok()) ++b.failed_count;
  }

  const size_t max_batches_;
  transport::TransportMetrics* const metrics_;
  BatchId next_id_ = 1;
  absl::flat_hash_map<BatchId, std::unique_ptr<Batch>> batches_;
};

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_BATCH_TABLE_H_
