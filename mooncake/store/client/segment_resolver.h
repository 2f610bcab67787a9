// SegmentResolver: from a master replica's segment id to an open transport
// handle on the client's Router, and the transfers over it.
//
// The first time a client meets a master segment id it asks the master
// (DescribeSegments, one RPC for any number of ids) for the segment's
// descriptor, as the worker gave it at MountSegment: the worker's router
// endpoint and the segment's id on that router. It opens the segment there
// (the router picks local, SHM on the same host, else TCP) and keeps the
// handle, so later transfers cost no RPC and no lookup. Master segment ids are
// never reused in a master's life, so a kept mapping cannot come to name other
// memory; a handle that fails is forgotten (Forget) and the next Resolve asks
// again: a segment the master has since unmounted (its worker left, expired or
// remounted) is remembered as gone and fails at once from then on.
//
// Errors of Resolve: UNAVAILABLE (segment unmounted, worker unreachable,
// master unreachable), NOT_FOUND (the master never assigned this id: a master
// restart, or a replica from another master), FAILED_PRECONDITION (the
// descriptor names another worker than the replica, or no router endpoint),
// DEADLINE_EXCEEDED.
//
// Bounds: at most `max_open_segments` handles (past that the least recently
// opened is closed) and as many remembered-gone ids; at most
// rpc::kMaxDescribeSegments ids per RPC; every RPC and transfer bounded by
// its deadline.
//
// Thread-safety: every method may be called concurrently. Concurrent misses
// of one id may each ask the master; the first handle opened wins.
#ifndef MOONCAKE_STORE_CLIENT_SEGMENT_RESOLVER_H_
#define MOONCAKE_STORE_CLIENT_SEGMENT_RESOLVER_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/channel.h"
#include "mooncake/store/rpc/master.pb.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/transport/router.h"
#include "mooncake/transport/transport.h"

namespace mooncake::client {

// Runs `requests` on `router` and returns one Status per request, all settled
// by `deadline` (a batch still running then is cancelled: DEADLINE_EXCEEDED).
inline std::vector<absl::Status> RunTransfers(transport::Router& router,
                                              std::span<const transport::TransferRequest> requests,
                                              absl::Time deadline) {
  std::vector<absl::Status> out;
  if (requests.size() > transport::kMaxBatchRequests) out.reserve(requests.size());
  for (size_t begin = 0; begin < requests.size(); begin += transport::kMaxBatchRequests) {
    const auto chunk =
        requests.subspan(begin, std::min(transport::kMaxBatchRequests, requests.size() - begin));
    absl::StatusOr<transport::BatchId> id = router.Submit(chunk);
    if (!id.ok()) {
      out.insert(out.end(), chunk.size(), id.status());
      continue;
    }
    absl::StatusOr<transport::BatchResult> r = router.Wait(*id, deadline);
    if (absl::IsDeadlineExceeded(r.status())) {
      r = router.Cancel(*id);  // bounded; the buffers are free after it
      if (r.ok()) {
        for (absl::Status& s : r->statuses) {
          if (absl::IsCancelled(s)) s = absl::DeadlineExceededError("transfer deadline passed");
        }
      }
    }
    if (!r.ok()) {
      out.insert(out.end(), chunk.size(), r.status());
      continue;
    }
    MC_ASSERT(r->statuses.size() == chunk.size(), "one status per request");
    if (chunk.size() == requests.size()) return std::move(r->statuses);  // one chunk: no copy
    out.insert(out.end(), r->statuses.begin(), r->statuses.end());
  }
  MC_DASSERT(out.size() == requests.size(), "every request settled");
  return out;
}

struct OpenedSegment {
  transport::SegmentHandle handle = 0;
  uint64_t length = 0;
};

// What the resolver asks the master: one SegmentInfo per id, in order
// (DescribeSegments). REQUIRES: 1..rpc::kMaxDescribeSegments ids.
using SegmentDescriber = std::function<absl::StatusOr<std::vector<store::proto::SegmentInfo>>(
    std::span<const uint64_t> segment_ids, absl::Time deadline)>;

// DescribeSegments over `channel`, the call bounded by `deadline`. A reply
// without one answer per id is INTERNAL.
template <rpc::RpcChannel C>
absl::StatusOr<std::vector<store::proto::SegmentInfo>> DescribeSegmentsOver(
    C& channel, std::span<const uint64_t> segment_ids, absl::Time deadline) {
  MC_ASSERT(!segment_ids.empty() && segment_ids.size() <= rpc::kMaxDescribeSegments,
            "1..kMaxDescribeSegments ids per call");
  store::proto::DescribeSegmentsRequest req;
  req.mutable_segment_ids()->Add(segment_ids.begin(), segment_ids.end());
  const int64_t left_ns = absl::ToInt64Nanoseconds(deadline - absl::Now());
  if (left_ns <= 0) return absl::DeadlineExceededError("no time left to ask the master");
  ASSIGN_OR_RETURN(store::proto::DescribeSegmentsResponse resp,
                   rpc::Call<rpc::DescribeSegmentsMethod>(channel, req, {.timeout_ns = left_ns}));
  if (static_cast<size_t>(resp.segments_size()) != segment_ids.size()) {
    return absl::InternalError(absl::StrCat("DescribeSegments answered ", resp.segments_size(),
                                            " segments for ", segment_ids.size(), " ids"));
  }
  return std::vector<store::proto::SegmentInfo>(
      std::make_move_iterator(resp.mutable_segments()->begin()),
      std::make_move_iterator(resp.mutable_segments()->end()));
}

class SegmentResolver {
 public:
  // `router` must outlive the resolver; `describe` asks the master (e.g.
  // DescribeSegmentsOver on the client's channel).
  SegmentResolver(transport::Router* router, SegmentDescriber describe,
                  size_t max_open_segments = 4096)
      : router_(router), describe_(std::move(describe)), max_open_(max_open_segments) {
    MC_ASSERT(router_ != nullptr && describe_ != nullptr && max_open_ > 0,
              "a resolver needs a router, a describer and room");
  }
  SegmentResolver(const SegmentResolver&) = delete;
  SegmentResolver& operator=(const SegmentResolver&) = delete;
  ~SegmentResolver() {
    MutexLock lock(&mu_);
    for (const auto& [id, s] : segments_) router_->CloseSegment(s.opened.handle).IgnoreError();
  }

  // The open handle for master segment `segment_id` of `worker_id` (the
  // replica's; empty: not checked). Errors: see the file comment.
  absl::StatusOr<OpenedSegment> Resolve(const std::string& worker_id, uint64_t segment_id,
                                        absl::Time deadline) {
    if (auto known = Cached(segment_id, worker_id); known.has_value()) return *known;
    const uint64_t ids[1] = {segment_id};
    ASSIGN_OR_RETURN(std::vector<store::proto::SegmentInfo> infos, Describe(ids, deadline));
    MC_DASSERT(infos.size() == 1, "one answer per id");
    return Open(infos[0], worker_id);
  }

  // Describes every id not yet known in one RPC per kMaxDescribeSegments ids
  // and opens the mounted ones, so a batch of replicas costs one round trip.
  // Per-id failures are left for Resolve to report; the status is the RPC's.
  absl::Status Prefetch(std::span<const uint64_t> segment_ids, absl::Time deadline) {
    std::vector<uint64_t> unknown;
    for (const uint64_t id : segment_ids) {
      if (!Cached(id, "").has_value() &&
          std::find(unknown.begin(), unknown.end(), id) == unknown.end()) {
        unknown.push_back(id);
      }
    }
    for (size_t i = 0; i < unknown.size(); i += rpc::kMaxDescribeSegments) {
      const auto chunk = std::span<const uint64_t>(unknown).subspan(
          i, std::min(rpc::kMaxDescribeSegments, unknown.size() - i));
      ASSIGN_OR_RETURN(std::vector<store::proto::SegmentInfo> infos, Describe(chunk, deadline));
      for (const store::proto::SegmentInfo& info : infos) Open(info, "").IgnoreError();
    }
    return absl::OkStatus();
  }

  // Drops the handle of `segment_id` (after a failed transfer); the next
  // Resolve asks the master again.
  void Forget(uint64_t segment_id) {
    MutexLock lock(&mu_);
    auto it = segments_.find(segment_id);
    if (it == segments_.end()) return;
    router_->CloseSegment(it->second.opened.handle).IgnoreError();
    segments_.erase(it);
    std::erase(order_, segment_id);  // rare (a failure): linear is fine
  }

  size_t open_segments() const {
    MutexLock lock(&mu_);
    return segments_.size();
  }
  // DescribeSegments RPCs made so far.
  uint64_t describe_calls() const { return describe_calls_.load(std::memory_order_relaxed); }
  transport::Router& router() { return *router_; }

 private:
  struct Entry {
    OpenedSegment opened;
    std::string worker_id;
  };

  // A kept handle, or the gone error; nullopt when the master must be asked.
  // A kept handle of another worker than the replica names is stale (the id
  // now comes from a restarted master): dropped, and the master asked again.
  std::optional<absl::StatusOr<OpenedSegment>> Cached(uint64_t segment_id,
                                                      const std::string& worker_id) {
    MutexLock lock(&mu_);
    if (auto it = segments_.find(segment_id); it != segments_.end()) {
      if (worker_id.empty() || it->second.worker_id == worker_id) return it->second.opened;
      router_->CloseSegment(it->second.opened.handle).IgnoreError();
      segments_.erase(it);
      std::erase(order_, segment_id);
      return std::nullopt;
    }
    if (gone_.contains(segment_id)) return Gone(segment_id);
    return std::nullopt;
  }

  static absl::Status Gone(uint64_t segment_id) {
    return absl::UnavailableError(absl::StrCat(
        "segment ", segment_id,
        " was unmounted (its worker left, expired or remounted): its replicas are gone"));
  }

  absl::StatusOr<std::vector<store::proto::SegmentInfo>> Describe(std::span<const uint64_t> ids,
                                                                  absl::Time deadline) {
    describe_calls_.fetch_add(1, std::memory_order_relaxed);  // relaxed: a statistic
    absl::StatusOr<std::vector<store::proto::SegmentInfo>> infos = describe_(ids, deadline);
    if (!infos.ok()) {
      return absl::Status(infos.status().code(),
                          absl::StrCat("asking the master where segment ", ids[0],
                                       " lives: ", infos.status().message()));
    }
    MC_ASSERT(infos->size() == ids.size(), "a describer answers every id");
    return infos;
  }

  // Turns the master's answer for one id into an open handle (kept) or an
  // error (unmounted ids are remembered).
  absl::StatusOr<OpenedSegment> Open(const store::proto::SegmentInfo& info,
                                     const std::string& worker_id) {
    const uint64_t id = info.segment_id();
    switch (info.state()) {
      case store::proto::SEGMENT_MOUNTED:
        break;
      case store::proto::SEGMENT_UNMOUNTED: {
        MutexLock lock(&mu_);
        if (gone_.size() >= max_open_) gone_.clear();  // bounded; forgetting costs one RPC
        gone_.insert(id);
        return Gone(id);
      }
      default:
        return absl::NotFoundError(
            absl::StrCat("the master does not know segment ", id,
                         " (it restarted, or the replica came from another master)"));
    }
    const store::proto::SegmentDescriptor& d = info.segment();
    if (!worker_id.empty() && d.worker_id() != worker_id) {
      return absl::FailedPreconditionError(absl::StrCat("segment ", id, " belongs to worker '",
                                                        d.worker_id(), "', not to '", worker_id,
                                                        "' as the replica says"));
    }
    if (d.endpoint().router_endpoint().empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker '", d.worker_id(), "' mounted segment ", id, " without a router endpoint"));
    }
    absl::StatusOr<transport::RemoteSegment> remote =
        router_->OpenSegment(d.endpoint().router_endpoint(), d.endpoint().router_segment_id());
    if (!remote.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "worker '", d.worker_id(), "' is gone or unreachable: ", remote.status().message()));
    }
    return Keep(id, OpenedSegment{remote->handle, remote->length}, d.worker_id());
  }

  OpenedSegment Keep(uint64_t id, OpenedSegment opened, const std::string& worker_id) {
    MutexLock lock(&mu_);
    if (auto it = segments_.find(id); it != segments_.end()) {
      router_->CloseSegment(opened.handle).IgnoreError();  // another thread won
      return it->second.opened;
    }
    segments_.emplace(id, Entry{opened, worker_id});
    order_.push_back(id);
    while (segments_.size() > max_open_) {
      const uint64_t old = order_.front();
      order_.pop_front();
      if (auto it = segments_.find(old); it != segments_.end()) {
        router_->CloseSegment(it->second.opened.handle).IgnoreError();
        segments_.erase(it);
      }
    }
    MC_DASSERT(segments_.size() <= max_open_ && order_.size() >= segments_.size(), "bounded");
    return opened;
  }

  transport::Router* const router_;
  const SegmentDescriber describe_;
  const size_t max_open_;
  std::atomic<uint64_t> describe_calls_{0};
  mutable Mutex mu_;
  absl::flat_hash_map<uint64_t, Entry> segments_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> order_ ABSL_GUARDED_BY(mu_);          // open order, for the bound
  absl::flat_hash_set<uint64_t> gone_ ABSL_GUARDED_BY(mu_);  // unmounted: never come back
};

}  // namespace mooncake::client

#endif  // MOONCAKE_STORE_CLIENT_SEGMENT_RESOLVER_H_
