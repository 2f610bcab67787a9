// SegmentResolver: from a master replica's (worker id, segment id) to an open
// transport handle on the client's Router, and the transfers over it.
//
// A worker id names the worker's router endpoint and its directory segment
// (mooncake/store/worker/segment_directory.h). The first time a client meets
// a master segment id it reads the worker's directory (one 4 KiB read, over
// SHM on the same host, else TCP), finds the router segment id and opens it;
// the handle is kept, so later transfers cost nothing extra. Master segment
// ids are never reused in a master's life, so a kept mapping cannot come to
// name other memory; a handle that fails is forgotten and reopened next time.
//
// Bounds: at most `max_open_segments` handles (past that the least recently
// opened is closed), directory reads retried at most kDirectoryReadsMax times
// (a torn read, or a worker that has not yet published a fresh mount), every
// transfer bounded by its deadline.
//
// Thread-safety: every method may be called concurrently.
#ifndef MOONCAKE_STORE_CLIENT_SEGMENT_RESOLVER_H_
#define MOONCAKE_STORE_CLIENT_SEGMENT_RESOLVER_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/worker/segment_directory.h"
#include "mooncake/transport/router.h"
#include "mooncake/transport/transport.h"

namespace mooncake::client {

inline constexpr int kDirectoryReadsMax = 20;

// Runs `requests` on `router` and returns one Status per request, all settled
// by `deadline` (a batch still running then is cancelled: DEADLINE_EXCEEDED).
inline std::vector<absl::Status> RunTransfers(transport::Router& router,
                                              std::span<const transport::TransferRequest> requests,
                                              absl::Time deadline) {
  std::vector<absl::Status> out;
  out.reserve(requests.size());
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
    out.insert(out.end(), r->statuses.begin(), r->statuses.end());
  }
  MC_DASSERT(out.size() == requests.size(), "every request settled");
  return out;
}

struct OpenedSegment {
  transport::SegmentHandle handle = 0;
  uint64_t length = 0;
};

class SegmentResolver {
 public:
  // `router` must outlive the resolver.
  explicit SegmentResolver(transport::Router* router, size_t max_open_segments = 4096)
      : router_(router), max_open_(max_open_segments) {
    MC_ASSERT(router_ != nullptr && max_open_ > 0, "a resolver needs a router and room");
  }
  SegmentResolver(const SegmentResolver&) = delete;
  SegmentResolver& operator=(const SegmentResolver&) = delete;
  ~SegmentResolver() {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, s] : segments_) router_->CloseSegment(s.handle).IgnoreError();
    for (const auto& [w, h] : directories_) router_->CloseSegment(h).IgnoreError();
  }

  // The open handle for master segment `segment_id` of `worker_id`.
  // UNAVAILABLE: the worker cannot be reached or no longer serves it.
  absl::StatusOr<OpenedSegment> Resolve(const std::string& worker_id, uint64_t segment_id,
                                        absl::Time deadline) {
    {
      absl::MutexLock lock(&mu_);
      if (auto it = segments_.find(segment_id); it != segments_.end()) return it->second;
    }
    ASSIGN_OR_RETURN(const worker::WorkerAddress addr, worker::ParseWorkerId(worker_id));
    ASSIGN_OR_RETURN(const worker::DirectoryEntry entry, FindEntry(addr, segment_id, deadline));
    absl::StatusOr<transport::RemoteSegment> remote =
        router_->OpenSegment(addr.router_endpoint, entry.router_segment_id);
    if (!remote.ok()) return Unreachable(worker_id, remote.status());
    absl::MutexLock lock(&mu_);
    if (auto it = segments_.find(segment_id); it != segments_.end()) {
      router_->CloseSegment(remote->handle).IgnoreError();  // another thread won
      return it->second;
    }
    const OpenedSegment opened{remote->handle, remote->length};
    segments_.emplace(segment_id, opened);
    order_.push_back(segment_id);
    while (segments_.size() > max_open_) {
      const uint64_t old = order_.front();
      order_.pop_front();
      if (auto it = segments_.find(old); it != segments_.end()) {
        router_->CloseSegment(it->second.handle).IgnoreError();
        segments_.erase(it);
      }
    }
    return opened;
  }

  // Drops the handle of `segment_id` (after a failed transfer); the next
  // Resolve reopens it.
  void Forget(uint64_t segment_id) {
    absl::MutexLock lock(&mu_);
    auto it = segments_.find(segment_id);
    if (it == segments_.end()) return;
    router_->CloseSegment(it->second.handle).IgnoreError();
    segments_.erase(it);
    std::erase(order_, segment_id);  // rare (a failure): linear is fine
  }

  size_t open_segments() const {
    absl::MutexLock lock(&mu_);
    return segments_.size();
  }
  transport::Router& router() { return *router_; }

 private:
  static absl::Status Unreachable(const std::string& worker_id, const absl::Status& cause) {
    return absl::UnavailableError(
        absl::StrCat("worker ", worker_id, " is gone or unreachable: ", cause.message()));
  }

  absl::StatusOr<transport::SegmentHandle> DirectoryHandle(const worker::WorkerAddress& addr) {
    const std::string id = worker::FormatWorkerId(addr.router_endpoint, addr.directory_segment_id);
    {
      absl::MutexLock lock(&mu_);
      if (auto it = directories_.find(id); it != directories_.end()) return it->second;
    }
    absl::StatusOr<transport::RemoteSegment> remote =
        router_->OpenSegment(addr.router_endpoint, addr.directory_segment_id);
    if (!remote.ok()) return Unreachable(id, remote.status());
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = directories_.emplace(id, remote->handle);
    if (!inserted) router_->CloseSegment(remote->handle).IgnoreError();
    return it->second;
  }

  void ForgetDirectory(const worker::WorkerAddress& addr) {
    const std::string id = worker::FormatWorkerId(addr.router_endpoint, addr.directory_segment_id);
    absl::MutexLock lock(&mu_);
    auto it = directories_.find(id);
    if (it == directories_.end()) return;
    router_->CloseSegment(it->second).IgnoreError();
    directories_.erase(it);
  }

  // Reads the worker's directory until it names `segment_id` (a fresh mount
  // is published right after the master answers the worker) or the bounds
  // run out.
  absl::StatusOr<worker::DirectoryEntry> FindEntry(const worker::WorkerAddress& addr,
                                                   uint64_t segment_id, absl::Time deadline) {
    const std::string who = worker::FormatWorkerId(addr.router_endpoint, addr.directory_segment_id);
    ASSIGN_OR_RETURN(const transport::SegmentHandle dir, DirectoryHandle(addr));
    std::array<uint8_t, worker::kDirectoryBytes> buf;
    absl::Status last;
    for (int attempt = 0; attempt < kDirectoryReadsMax && absl::Now() < deadline; ++attempt) {
      if (attempt > 0) absl::SleepFor(absl::Milliseconds(std::min(2 * attempt, 20)));
      const transport::TransferRequest req{transport::OpCode::kRead, buf.data(), dir, 0,
                                           buf.size()};
      const absl::Status s =
          RunTransfers(*router_, std::span<const transport::TransferRequest>(&req, 1), deadline)
              .front();
      if (!s.ok()) {
        ForgetDirectory(addr);
        return Unreachable(who, s);
      }
      absl::StatusOr<worker::Directory> d = worker::DecodeDirectory(buf);
      if (!d.ok()) {
        last = d.status();
        continue;
      }
      if (auto e = d->Find(segment_id); e.has_value()) return *e;
      last = absl::NotFoundError(absl::StrCat("segment ", segment_id, " not in the directory"));
    }
    return absl::UnavailableError(absl::StrCat("worker ", who, " does not serve segment ",
                                               segment_id,
                                               " (unmounted or remounted): ", last.message()));
  }

  transport::Router* const router_;
  const size_t max_open_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, OpenedSegment> segments_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> order_ ABSL_GUARDED_BY(mu_);  // open order, for the bound
  absl::flat_hash_map<std::string, transport::SegmentHandle> directories_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::client

#endif  // MOONCAKE_STORE_CLIENT_SEGMENT_RESOLVER_H_
