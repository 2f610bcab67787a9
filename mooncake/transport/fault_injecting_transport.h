// FaultInjectingTransport<T>: a Transport that wraps another and injects
// faults, for testing what sits above a transport (the Router's failover,
// a store's retries). It lives beside the conformance kit and, with no
// faults set, passes it.
//
// Faults (SetFaults may change them at any time; they apply to later calls):
//   fail_after_requests = N  the first N requests pass through; every later
//                            one fails with `failure` without reaching T
//                            (a transport that dies midway through a batch).
//   corrupt_reads            every successful READ has its first byte
//                            flipped after it lands (silent corruption, for
//                            checksum tests); its status stays OK. A chunk
//                            digest the inner transport took is taken again,
//                            as if the byte had arrived flipped.
//   poison_digests           a READ failed that way leaves garbage in its
//                            chunk digest slots (it digested, then died).
//   stall                    a batch looks in flight (Poll, Wait) until this
//                            long after its Submit (a stalled peer).
//
// Thread-safety: every method may be called concurrently.
#ifndef MOONCAKE_TRANSPORT_FAULT_INJECTING_TRANSPORT_H_
#define MOONCAKE_TRANSPORT_FAULT_INJECTING_TRANSPORT_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/value_checksum.h"
#include "mooncake/transport/transport.h"

namespace mooncake::transport {

struct InjectedFaults {
  int64_t fail_after_requests = -1;  // -1: never
  absl::Status failure = absl::UnavailableError("injected transport failure");
  bool corrupt_reads = false;
  // A READ failed by fail_after_requests leaves garbage in its chunk digest
  // slots (a transport that digested some bytes, then died).
  bool poison_digests = false;
  absl::Duration stall = absl::ZeroDuration();
};

template <Transport T>
class FaultInjectingTransport {
 public:
  explicit FaultInjectingTransport(std::unique_ptr<T> inner, InjectedFaults faults = {})
      : inner_(std::move(inner)), faults_(std::move(faults)) {
    MC_ASSERT(inner_ != nullptr, "FaultInjectingTransport needs a transport to wrap");
  }

  void SetFaults(InjectedFaults faults) {
    MutexLock lock(&mu_);
    faults_ = std::move(faults);
    requests_seen_ = 0;
  }
  T& inner() { return *inner_; }
  auto& metrics() { return inner_->metrics(); }
  // Requests that reached Submit since the faults were last set.
  int64_t requests_seen() const {
    MutexLock lock(&mu_);
    return requests_seen_;
  }

  std::string_view Name() const { return inner_->Name(); }
  std::string LocalEndpoint() const { return inner_->LocalEndpoint(); }
  absl::StatusOr<SegmentDesc> RegisterMemory(void* addr, uint64_t length, MemoryLocation loc) {
    return inner_->RegisterMemory(addr, length, loc);
  }
  absl::Status UnregisterMemory(SegmentId id) { return inner_->UnregisterMemory(id); }
  absl::StatusOr<RemoteSegment> OpenSegment(std::string_view endpoint, SegmentId id) {
    return inner_->OpenSegment(endpoint, id);
  }
  absl::Status CloseSegment(SegmentHandle h) { return inner_->CloseSegment(h); }

  absl::StatusOr<BatchId> Submit(std::span<const TransferRequest> requests) {
    if (requests.empty() || requests.size() > kMaxBatchRequests) return inner_->Submit(requests);
    Batch b;
    b.requests.assign(requests.begin(), requests.end());
    b.statuses.resize(requests.size());
    std::vector<TransferRequest> pass;
    {
      MutexLock lock(&mu_);
      b.corrupt = faults_.corrupt_reads;
      b.ready_at = absl::Now() + faults_.stall;
      for (size_t i = 0; i < requests.size(); ++i) {
        const bool fail =
            faults_.fail_after_requests >= 0 && requests_seen_ >= faults_.fail_after_requests;
        ++requests_seen_;
        if (fail) {
          b.statuses[i] = faults_.failure;
          const TransferRequest& r = requests[i];
          if (faults_.poison_digests && r.op == OpCode::kRead && r.chunk_digests != nullptr) {
            std::fill_n(r.chunk_digests, DigestChunkCount(r.length), 0x5a5a5a5a5a5a5a5aULL);
          }
        } else {
          b.passed.push_back(i);
          pass.push_back(requests[i]);
        }
      }
    }
    if (!pass.empty()) {
      absl::StatusOr<BatchId> inner = inner_->Submit(pass);
      if (!inner.ok()) return inner.status();
      b.inner = *inner;
    }
    MutexLock lock(&mu_);
    const BatchId id = next_id_++;
    batches_.emplace(id, std::move(b));
    return id;
  }

  absl::StatusOr<BatchProgress> Poll(BatchId id) {
    BatchProgress p;
    absl::Time ready_at;
    BatchId inner = 0;
    {
      MutexLock lock(&mu_);
      auto it = batches_.find(id);
      if (it == batches_.end()) return Unknown(id);
      p.total_requests = it->second.requests.size();
      p.failed_requests = it->second.requests.size() - it->second.passed.size();
      ready_at = it->second.ready_at;
      inner = it->second.inner;
    }
    if (absl::Now() < ready_at) return BatchProgress{p.total_requests, 0, 0};
    if (inner != 0) {
      absl::StatusOr<BatchProgress> in = inner_->Poll(inner);
      if (!in.ok()) return in.status();
      p.succeeded_requests = in->succeeded_requests;
      p.failed_requests += in->failed_requests;
    }
    return p;
  }

  absl::StatusOr<BatchResult> Wait(BatchId id, absl::Time deadline) {
    absl::Time ready_at;
    BatchId inner = 0;
    {
      MutexLock lock(&mu_);
      auto it = batches_.find(id);
      if (it == batches_.end()) return Unknown(id);
      ready_at = it->second.ready_at;
      inner = it->second.inner;
    }
    // A stall that has already run out (or none: ready_at is the epoch) does
    // not make even a non-blocking collect (deadline InfinitePast) time out.
    if (ready_at > absl::Now() && ready_at > deadline) {
      absl::SleepFor(deadline - absl::Now());
      return absl::DeadlineExceededError(absl::StrCat("batch ", id, " stalled (injected)"));
    }
    absl::SleepFor(ready_at - absl::Now());
    absl::StatusOr<BatchResult> r;
    if (inner != 0) {
      r = inner_->Wait(inner, deadline);
      if (!r.ok()) return r.status();
    }
    return Finish(id, inner != 0 ? &*r : nullptr);
  }

  absl::StatusOr<BatchResult> Cancel(BatchId id) {
    BatchId inner = 0;
    {
      MutexLock lock(&mu_);
      auto it = batches_.find(id);
      if (it == batches_.end()) return Unknown(id);
      inner = it->second.inner;
    }
    absl::StatusOr<BatchResult> r;
    if (inner != 0) {
      r = inner_->Cancel(inner);
      if (!r.ok()) return r.status();
    }
    return Finish(id, inner != 0 ? &*r : nullptr);
  }

 private:
  struct Batch {
    BatchId inner = 0;                      // 0: nothing passed through
    std::vector<TransferRequest> requests;  // as submitted
    std::vector<size_t> passed;             // indexes sent to the inner transport
    std::vector<absl::Status> statuses;     // injected failures; OK elsewhere
    absl::Time ready_at;
    bool corrupt = false;
  };

  static absl::Status Unknown(BatchId id) {
    return absl::NotFoundError(absl::StrCat("unknown batch id ", id));
  }

  BatchResult Finish(BatchId id, BatchResult* inner) {
    Batch b;
    {
      MutexLock lock(&mu_);
      auto it = batches_.find(id);
      MC_ASSERT(it != batches_.end(), "batch collected twice");
      b = std::move(it->second);
      batches_.erase(it);
    }
    BatchResult out;
    out.statuses = std::move(b.statuses);
    for (size_t k = 0; k < b.passed.size(); ++k) {
      const size_t i = b.passed[k];
      out.statuses[i] = inner->statuses[k];
      const TransferRequest& r = b.requests[i];
      if (b.corrupt && r.op == OpCode::kRead && out.statuses[i].ok()) {
        *static_cast<unsigned char*>(r.local_addr) ^= 0xFF;
        // As if the byte had arrived flipped: a digest taken on landing saw it.
        if (r.chunk_digests != nullptr && r.chunk_digests[0] != kNoDigest) {
          r.chunk_digests[0] = ChunkDigest(r.local_addr, std::min(r.length, kDigestChunkBytes));
        }
      }
    }
    return out;
  }

  std::unique_ptr<T> inner_;
  mutable Mutex mu_;
  InjectedFaults faults_ ABSL_GUARDED_BY(mu_);
  int64_t requests_seen_ ABSL_GUARDED_BY(mu_) = 0;
  BatchId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<BatchId, Batch> batches_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::transport

#endif  // MOONCAKE_TRANSPORT_FAULT_INJECTING_TRANSPORT_H_
