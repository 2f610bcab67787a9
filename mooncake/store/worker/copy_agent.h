// CopyAgent: runs the master's copy tasks on a worker (docs/elasticity.md).
//
// The master moves replicas between workers (a drain, re-replication, hot
// replicas, a client's CreateCopyTask / CreateMoveTask) by handing the
// SOURCE worker CopyTasks: "write [src_offset, src_offset + length) of your
// segment src_segment_id into [dst_offset, ...) of the segment served at
// (dst_router_endpoint, dst_router_segment_id)". The agent long-polls
// CopySync for tasks, runs a batch (every task of one answer submitted to
// the worker's Router as one-sided WRITEs, then waited for), and reports each
// task's outcome (absl::StatusCode + message) with the next CopySync. A poll
// that fails keeps its results for the next one; remount_required is left to
// the worker's heartbeat (the agent just polls on).
//
// Bytes. Before anything is written the source range is hashed with the
// object's checksum format (value_checksum.h, as a client's Get verifies): a
// mismatch fails the task with DATA_LOSS and the destination is untouched.
// Source memory is held by shared_ptr (SegmentLookup) while the batch runs,
// so a remount never unmaps bytes a transfer still reads.
//
// Outcomes: OK (copied); NOT_FOUND (src_segment_id is not one of this
// worker's mounted segments); OUT_OF_RANGE (a range past its segment);
// FAILED_PRECONDITION (unknown checksum format); DATA_LOSS (checksum); what
// OpenSegment / the transfer say (UNAVAILABLE, NOT_FOUND, DEADLINE_EXCEEDED
// after transfer_timeout_ms) for the destination.
//
// Priority. CopyTask.priority_class 0 (unset) is the router's bulk (last)
// class, so copies yield to the client traffic on the same router; n > 0
// asks for class n - 1 (1: most urgent), clamped to the bulk class.
//
// Destinations are opened once per (router endpoint, router segment id) and
// kept (at most open_segments_max; past that the cache is emptied); a handle
// whose transfer failed is closed, so the next task opens it afresh.
//
// Stop returns within one transfer batch (transfer_timeout_ms at most): the
// poll in flight is not waited for (its answer lands in shared state the
// callback keeps alive), and the tasks it would have handed out are
// re-issued by the master when their lease there runs out.
//
// Thread-safety: stats() and Stop() from any thread; one loop thread runs
// every task and RPC. The router and channel must outlive the agent.
#ifndef MOONCAKE_STORE_WORKER_COPY_AGENT_H_
#define MOONCAKE_STORE_WORKER_COPY_AGENT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/base/value_checksum.h"
#include "mooncake/qos/scheduler.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/channel.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/worker/tier_agent.h"
#include "mooncake/transport/router.h"
#include "mooncake/transport/transport.h"

namespace mooncake::worker {

struct CopyAgentOptions {
  int64_t poll_wait_ms = 1'000;          // CopySync long poll
  uint32_t max_tasks = 16;               // per poll: one batch; in [1, rpc::kMaxCopyTasks]
  int64_t rpc_timeout_ms = 2'000;        // added to poll_wait_ms for a poll
  int64_t transfer_timeout_ms = 30'000;  // one batch's transfers, then DEADLINE_EXCEEDED
  int64_t retry_backoff_ms = 100;        // after a failed poll; doubles per failure
  int64_t retry_backoff_max_ms = 2'000;
  size_t open_segments_max = 256;  // destination handles kept
  // The router's last priority class (RouterOptions::priority_classes - 1):
  // where copies go unless a task asks for another.
  uint32_t bulk_class = 1;
};

struct CopyAgentStats {
  uint64_t tasks_done = 0;
  uint64_t tasks_failed = 0;
  uint64_t bytes_copied = 0;
  uint64_t polls = 0;
  uint64_t poll_failures = 0;
};

template <rpc::RpcChannel C>
class CopyAgent {
 public:
  // The loop starts polling at once. `router` moves the bytes (the worker's).
  static absl::StatusOr<std::unique_ptr<CopyAgent>> Start(CopyAgentOptions options, C* channel,
                                                          transport::Router* router,
                                                          std::string worker_id,
                                                          SegmentLookup lookup) {
    if (options.poll_wait_ms < 0 || options.rpc_timeout_ms <= 0 ||
        options.transfer_timeout_ms <= 0 || options.retry_backoff_ms <= 0 ||
        options.retry_backoff_max_ms < options.retry_backoff_ms || options.max_tasks == 0 ||
        options.max_tasks > rpc::kMaxCopyTasks || options.open_segments_max == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CopyAgentOptions: poll_wait_ms >= 0, rpc/transfer timeouts and backoffs > 0, "
          "max_tasks in [1, ",
          rpc::kMaxCopyTasks, "], open_segments_max > 0"));
    }
    MC_ASSERT(channel != nullptr && router != nullptr && lookup != nullptr,
              "a copy agent needs a channel, a router and a lookup");
    std::unique_ptr<CopyAgent> a(new CopyAgent(std::move(options), channel, router,
                                               std::move(worker_id), std::move(lookup)));
    a->loop_ = std::thread([p = a.get()] { p->Loop(); });
    return a;
  }

  CopyAgent(const CopyAgent&) = delete;
  CopyAgent& operator=(const CopyAgent&) = delete;
  ~CopyAgent() { Stop(); }

  // Stops polling; waits for the batch running, if any. Idempotent.
  void Stop() {
    {
      MutexLock lock(&shared_->mu);
      shared_->stopping = true;
    }
    if (loop_.joinable()) loop_.join();
  }

  CopyAgentStats stats() const {
    MutexLock lock(&stats_mu_);
    return stats_;
  }

 private:
  // What the loop and a poll's callback share; the callback keeps it alive,
  // so Stop need not wait for a poll the master is still holding.
  struct Shared {
    Mutex mu;
    bool stopping ABSL_GUARDED_BY(mu) = false;
    std::optional<absl::StatusOr<store::proto::CopySyncResponse>> answer ABSL_GUARDED_BY(mu);
  };

  CopyAgent(CopyAgentOptions options, C* channel, transport::Router* router, std::string worker_id,
            SegmentLookup lookup)
      : options_(std::move(options)),
        channel_(channel),
        router_(router),
        worker_id_(std::move(worker_id)),
        lookup_(std::move(lookup)) {}

  void Loop() {
    std::vector<store::proto::CopyTaskResult> results;  // to report
    int64_t backoff_ms = options_.retry_backoff_ms;
    for (;;) {
      store::proto::CopySyncRequest req;
      req.set_worker_id(worker_id_);
      req.set_wait_ms(static_cast<uint64_t>(options_.poll_wait_ms));
      req.set_max_tasks(options_.max_tasks);
      const size_t reported = std::min(results.size(), rpc::kMaxCopyTasks);
      for (size_t i = 0; i < reported; ++i) *req.add_results() = results[i];
      const absl::Time sent = absl::Now();
      AddStat(&CopyAgentStats::polls, 1);
      std::optional<absl::StatusOr<store::proto::CopySyncResponse>> answer = Poll(req);
      if (!answer.has_value()) return;  // stopping
      if (!answer->ok()) {
        AddStat(&CopyAgentStats::poll_failures, 1);
        if (!Sleep(absl::Milliseconds(backoff_ms))) return;
        backoff_ms = std::min(backoff_ms * 2, options_.retry_backoff_max_ms);
        continue;
      }
      backoff_ms = options_.retry_backoff_ms;
      results.erase(results.begin(), results.begin() + static_cast<ptrdiff_t>(reported));
      const store::proto::CopySyncResponse& r = **answer;
      if (r.tasks().empty()) {
        // A master that did not wait (remount pending, long-poll slots
        // taken, stopping): do not spin on it.
        if (options_.poll_wait_ms > 0 && absl::Now() - sent < absl::Milliseconds(1) &&
            !Sleep(absl::Milliseconds(20))) {
          return;
        }
        continue;
      }
      const size_t before = results.size();
      RunBatch(r.tasks(), &results);
      MC_DASSERT(results.size() == before + static_cast<size_t>(r.tasks().size()),
                 "one result per task");
    }
  }

  // One CopySync; nullopt once stopping.
  std::optional<absl::StatusOr<store::proto::CopySyncResponse>> Poll(
      const store::proto::CopySyncRequest& req) {
    {
      MutexLock lock(&shared_->mu);
      if (shared_->stopping) return std::nullopt;
      shared_->answer.reset();
    }
    const int64_t timeout_ms = options_.poll_wait_ms + options_.rpc_timeout_ms;
    rpc::CallAsync<rpc::CopySyncMethod>(
        *channel_, req, {.timeout_ns = timeout_ms * 1'000'000},
        [shared = shared_](absl::StatusOr<store::proto::CopySyncResponse> r) {
          MutexLock lock(&shared->mu);
          shared->answer = std::move(r);
        });
    MutexLock lock(&shared_->mu);
    shared_->mu.Await(Condition(
        +[](Shared* s)
             ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) { return s->stopping || s->answer.has_value(); },
        shared_.get()));
    if (shared_->stopping) return std::nullopt;
    return std::move(shared_->answer);
  }

  // Sleeps `d` unless stopped first; false once stopping.
  bool Sleep(absl::Duration d) {
    MutexLock lock(&shared_->mu);
    shared_->mu.AwaitWithTimeout(Condition(&shared_->stopping), d);
    return !shared_->stopping;
  }

  // A task checked and ready to transfer.
  struct Prepared {
    size_t index = 0;  // into the batch
    SegmentMemory source;
    transport::TransferRequest request;
    std::string destination;  // the cache key
  };

  void RunBatch(const google::protobuf::RepeatedPtrField<store::proto::CopyTask>& tasks,
                std::vector<store::proto::CopyTaskResult>* results) {
    std::vector<absl::Status> status(static_cast<size_t>(tasks.size()));
    // class -> the tasks submitted in it.
    std::map<qos::ClassId, std::vector<Prepared>> by_class;
    for (int i = 0; i < tasks.size(); ++i) {
      absl::StatusOr<Prepared> p = Prepare(tasks[i]);
      if (!p.ok()) {
        status[static_cast<size_t>(i)] = p.status();
        continue;
      }
      p->index = static_cast<size_t>(i);
      if (tasks[i].length() == 0) continue;  // nothing to move: verified, done
      by_class[Class(tasks[i].priority_class())].push_back(std::move(*p));
    }
    const absl::Time deadline = absl::Now() + absl::Milliseconds(options_.transfer_timeout_ms);
    for (auto& [cls, list] : by_class) Transfer(cls, list, deadline, &status);
    for (int i = 0; i < tasks.size(); ++i) {
      const absl::Status& s = status[static_cast<size_t>(i)];
      store::proto::CopyTaskResult r;
      r.set_task_id(tasks[i].task_id());
      r.set_code(static_cast<uint32_t>(s.code()));
      r.set_message(std::string(s.message()));
      results->push_back(std::move(r));
      AddStat(s.ok() ? &CopyAgentStats::tasks_done : &CopyAgentStats::tasks_failed, 1);
      if (s.ok()) AddStat(&CopyAgentStats::bytes_copied, tasks[i].length());
    }
  }

  qos::ClassId Class(uint32_t priority_class) const {
    const qos::ClassId bulk = options_.bulk_class;
    if (priority_class == 0) return bulk;
    return std::min<qos::ClassId>(priority_class - 1, bulk);
  }

  absl::StatusOr<Prepared> Prepare(const store::proto::CopyTask& t) {
    std::optional<SegmentMemory> mem = lookup_(t.src_segment_id());
    if (!mem.has_value()) {
      return absl::NotFoundError(
          absl::StrCat("segment ", t.src_segment_id(), " is not mounted on this worker"));
    }
    if (t.src_offset() > mem->bytes.size() || t.length() > mem->bytes.size() - t.src_offset()) {
      return absl::OutOfRangeError(absl::StrCat("source range [", t.src_offset(), ", +", t.length(),
                                                ") is past segment ", t.src_segment_id(), " (",
                                                mem->bytes.size(), " bytes)"));
    }
    const uint32_t format = static_cast<uint32_t>(t.checksum_format());
    if (!KnownChecksumFormat(format)) {
      return absl::FailedPreconditionError(
          absl::StrCat("checksum format ", format, " is unknown to this worker"));
    }
    const std::byte* src = mem->bytes.data() + t.src_offset();
    if (!ChecksumMatches(format, src, t.length(), nullptr, t.checksum())) {
      return absl::DataLossError(absl::StrCat("source bytes of '", t.key(), "' v", t.version(),
                                              " do not match the object's checksum"));
    }
    MC_DASSERT(mem->keep_alive != nullptr, "a looked-up segment is kept mapped");
    Prepared p;
    p.source = std::move(*mem);
    if (t.length() == 0) return p;
    p.destination = absl::StrCat(t.dst_router_endpoint(), "|", t.dst_router_segment_id());
    ASSIGN_OR_RETURN(const transport::RemoteSegment dst,
                     Open(p.destination, t.dst_router_endpoint(), t.dst_router_segment_id()));
    if (t.dst_offset() > dst.length || t.length() > dst.length - t.dst_offset()) {
      return absl::OutOfRangeError(absl::StrCat("destination range [", t.dst_offset(), ", +",
                                                t.length(), ") is past the segment (", dst.length,
                                                " bytes)"));
    }
    p.request = transport::TransferRequest{transport::OpCode::kWrite, const_cast<std::byte*>(src),
                                           dst.handle, t.dst_offset(), t.length()};
    return p;
  }

  absl::StatusOr<transport::RemoteSegment> Open(const std::string& key, const std::string& endpoint,
                                                transport::SegmentId id) {
    if (auto it = open_.find(key); it != open_.end()) return it->second;
    if (open_.size() >= options_.open_segments_max) {
      for (auto& [k, seg] : open_) router_->CloseSegment(seg.handle).IgnoreError();
      open_.clear();
    }
    absl::StatusOr<transport::RemoteSegment> seg = router_->OpenSegment(endpoint, id);
    if (!seg.ok()) {
      return absl::Status(seg.status().code(),
                          absl::StrCat("open destination ", endpoint, " segment ", id, ": ",
                                       seg.status().message()));
    }
    open_.emplace(key, *seg);
    return *seg;
  }

  void Forget(const std::string& key) {
    auto it = open_.find(key);
    if (it == open_.end()) return;
    router_->CloseSegment(it->second.handle).IgnoreError();
    open_.erase(it);
  }

  // Submits `list` in class `cls` and waits (cancelling at `deadline`).
  void Transfer(qos::ClassId cls, std::vector<Prepared>& list, absl::Time deadline,
                std::vector<absl::Status>* status) {
    for (size_t begin = 0; begin < list.size(); begin += transport::kMaxBatchRequests) {
      const size_t n = std::min(transport::kMaxBatchRequests, list.size() - begin);
      std::vector<transport::TransferRequest> reqs;
      reqs.reserve(n);
      for (size_t i = begin; i < begin + n; ++i) reqs.push_back(list[i].request);
      std::vector<absl::Status> out(n);
      absl::StatusOr<transport::BatchId> id = router_->SubmitWithPriority(reqs, cls);
      absl::StatusOr<transport::BatchResult> r = absl::UnknownError("not submitted");
      if (!id.ok()) {
        r = id.status();
      } else {
        r = router_->Wait(*id, deadline);
        if (absl::IsDeadlineExceeded(r.status())) {
          r = router_->Cancel(*id);  // bounded; the source is free after it
          if (r.ok()) {
            for (absl::Status& s : r->statuses) {
              if (absl::IsCancelled(s)) s = absl::DeadlineExceededError("copy deadline passed");
            }
          }
        }
      }
      MC_ASSERT(!r.ok() || r->statuses.size() == n, "one status per request");
      for (size_t i = 0; i < n; ++i) {
        out[i] = r.ok() ? r->statuses[i] : r.status();
        if (!out[i].ok()) Forget(list[begin + i].destination);
        (*status)[list[begin + i].index] = out[i];
      }
    }
  }

  void AddStat(uint64_t CopyAgentStats::*field, uint64_t n) {
    MutexLock lock(&stats_mu_);
    stats_.*field += n;
  }

  const CopyAgentOptions options_;
  C* const channel_;
  transport::Router* const router_;
  const std::string worker_id_;
  const SegmentLookup lookup_;
  const std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  // "endpoint|router segment id" -> handle. Loop thread only.
  std::map<std::string, transport::RemoteSegment> open_;

  mutable Mutex stats_mu_;
  CopyAgentStats stats_ ABSL_GUARDED_BY(stats_mu_);
  std::thread loop_;  // last: starts after everything above exists
};

}  // namespace mooncake::worker

#endif  // MOONCAKE_STORE_WORKER_COPY_AGENT_H_
