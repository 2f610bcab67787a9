// OplogWriter: the leader's MutationLog (master/mutation_log.h). Reports are
// queued as they come (under the master's shard locks: a short append), and
// committer threads (batches_in_flight of them) cut them into batches (group
// commit: everything queued when a committer is free, up to max_batch_bytes)
// and store each through `append(seq, bytes)` (OplogStore::Append, fenced by
// the leader's epoch). Batches may land out of order; a report counts as
// stored (durable()) only once every batch up to its own is stored, and
// on_batch sees the batches in seq order. A call that changed the durable state is acknowledged
// only once its reports are stored: the service reads appended() after the
// call and answers from WhenDurable(that count, ...).
//
// Failures:
//   - append fails with FAILED_PRECONDITION or ALREADY_EXISTS (this leader
//     was fenced, or another wrote that seq): the writer stops for good; every
//     waiter, queued or later, gets UNAVAILABLE, and on_fatal runs once (the
//     node steps down);
//   - other errors (etcd unreachable, a timeout): the same batch is retried
//     every retry_backoff until it is stored or Stop() (the election steps
//     down before the lease can expire, and Stop fails the waiters).
// A stored batch is handed to on_batch (for the leader's mirror of the
// durable state; it must be quick: the next batch waits) before its waiters
// are answered.
//
// Thread-safety: the MutationLog calls, appended(), WhenDurable() from any
// thread; Start/Stop from the owner. Callbacks run on the committer thread
// (or the caller's, for an immediate answer) and must not block.
#ifndef MOONCAKE_STORE_HA_OPLOG_WRITER_H_
#define MOONCAKE_STORE_HA_OPLOG_WRITER_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/ha/records.h"
#include "mooncake/store/master/mutation_log.h"

namespace mooncake::ha {

struct OplogWriterOptions {
  size_t max_batch_bytes = size_t{1} << 20;  // etcd refuses requests over 1.5 MiB
  absl::Duration retry_backoff = absl::Milliseconds(20);
  // Batches being stored at once. More than one lets a change that comes
  // while a batch is being stored go out at once instead of after it;
  // changes are still acknowledged in order. 1 by measurement: with one etcd
  // on the same 2-core machine, 2 and 4 gained nothing on pipelined clients
  // and lost 20-25% on closed-loop ones (smaller batches); an etcd across a
  // network, where a commit waits on round trips, is where more may pay.
  int batches_in_flight = 1;
};

struct OplogWriterStats {
  uint64_t batches = 0;
  uint64_t mutations = 0;
  uint64_t bytes = 0;
  uint64_t retries = 0;
  int64_t last_commit_ns = 0;  // how long the last stored batch took
  // The committers' time, summed over batches, by phase: cutting a batch off
  // the queue, encoding it, storing it (append, retries included), and
  // answering its waiters (docs/ha.md, "Throughput").
  int64_t cut_ns = 0;
  int64_t encode_ns = 0;
  int64_t append_ns = 0;
  int64_t answer_ns = 0;
};

class OplogWriter final : public master::MutationLog {
 public:
  using AppendFn = std::function<absl::Status(uint64_t seq, std::string_view bytes)>;
  using BatchFn = std::function<void(hproto::OplogBatch&&)>;
  using FatalFn = std::function<void(const absl::Status&)>;
  using NextIdFn = std::function<uint64_t()>;
  using Done = std::function<void(absl::Status)>;

  // `first_seq`: the seq of the first batch (one past the last stored).
  OplogWriter(int64_t epoch, uint64_t first_seq, Clock* clock, AppendFn append, BatchFn on_batch,
              FatalFn on_fatal, NextIdFn next_id, OplogWriterOptions options = {})
      : epoch_(epoch),
        next_seq_(first_seq),
        clock_(clock),
        append_(std::move(append)),
        on_batch_(std::move(on_batch)),
        on_fatal_(std::move(on_fatal)),
        next_id_(std::move(next_id)),
        options_(options),
        contiguous_(first_seq - 1) {
    MC_ASSERT(append_ != nullptr && clock_ != nullptr, "a writer needs a store and a clock");
  }
  OplogWriter(const OplogWriter&) = delete;
  OplogWriter& operator=(const OplogWriter&) = delete;
  ~OplogWriter() override { Stop(); }

  void Start() {
    MC_ASSERT(threads_.empty(), "writer already started");
    for (int i = 0; i < std::max(1, options_.batches_in_flight); ++i) {
      threads_.emplace_back([this] { Run(); });
    }
  }

  // Stops the committer (a batch being stored finishes or is abandoned at
  // its next retry) and answers every waiter UNAVAILABLE. Idempotent.
  void Stop() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
    FailAll(absl::UnavailableError("the leader stepped down before the change was durable"));
  }

  // ---- MutationLog -------------------------------------------------------------
  void ObjectSet(std::string_view key, const master::ObjectMeta& m, int64_t now_ns) override {
    hproto::Mutation mu;
    ToRecord(key, m, ClockPair{now_ns, absl::GetCurrentTimeNanos()}, mu.mutable_object_set());
    Push(std::move(mu));
  }
  void ObjectErased(std::string_view key) override {
    hproto::Mutation mu;
    mu.set_object_erased(std::string(key));
    Push(std::move(mu));
  }
  void ObjectReplaced(std::string_view key, std::string_view replacement_key,
                      const master::ObjectMeta& m, int64_t now_ns) override {
    hproto::Mutation mu;
    ToRecord(key, m, ClockPair{now_ns, absl::GetCurrentTimeNanos()},
             mu.mutable_object_replaced()->mutable_object());
    mu.mutable_object_replaced()->set_replacement_key(std::string(replacement_key));
    Push(std::move(mu));
  }
  void SegmentMounted(uint64_t id, const store::proto::SegmentDescriptor& desc) override {
    hproto::Mutation mu;
    mu.mutable_segment_mounted()->set_id(id);
    *mu.mutable_segment_mounted()->mutable_desc() = desc;
    Push(std::move(mu));
  }
  void SegmentUnmounted(uint64_t id) override {
    hproto::Mutation mu;
    mu.set_segment_unmounted(id);
    Push(std::move(mu));
  }
  void TenantSet(std::string_view name, uint64_t capacity, uint64_t pinned) override {
    hproto::Mutation mu;
    mu.mutable_tenant_set()->set_name(std::string(name));
    mu.mutable_tenant_set()->set_capacity_bytes(capacity);
    mu.mutable_tenant_set()->set_pinned_capacity_bytes(pinned);
    Push(std::move(mu));
  }

  // Reports queued so far (a count; the n-th report is durable once
  // durable() >= n).
  uint64_t appended() const {
    MutexLock lock(&mu_);
    return appended_;
  }
  uint64_t durable() const {
    MutexLock lock(&mu_);
    return durable_;
  }
  // Reports queued and not stored yet.
  uint64_t lag() const {
    MutexLock lock(&mu_);
    return appended_ - durable_;
  }

  // Calls `done(OK)` once the first `count` reports are stored (at once if
  // they are), or `done(UNAVAILABLE)` if the writer stops first.
  void WhenDurable(uint64_t count, Done done) {
    absl::Status now_status;
    {
      MutexLock lock(&mu_);
      if (durable_ < count && failed_.ok() && !stop_) {
        waiters_.emplace(count, std::move(done));
        return;
      }
      now_status = durable_ >= count ? absl::OkStatus()
                   : failed_.ok()    ? absl::UnavailableError("the leader is stepping down")
                                     : failed_;
    }
    done(now_status);
  }

  uint64_t next_seq() const {
    MutexLock lock(&mu_);
    return next_seq_;
  }
  int64_t epoch() const { return epoch_; }
  OplogWriterStats stats() const {
    MutexLock lock(&mu_);
    return stats_;
  }

 private:
  void Push(hproto::Mutation mu) {
    MutexLock lock(&mu_);
    queue_.push_back(std::move(mu));
    ++appended_;
  }

  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); }

  // One of the batches_in_flight committers: cuts the next batch, stores it,
  // and hands it on once every batch before it is stored too.
  void Run() {
    for (;;) {
      hproto::OplogBatch batch;
      uint64_t seq = 0;
      int64_t cut_start = 0, cut_end = 0;
      {
        MutexLock lock(&mu_);
        mu_.Await(Condition(this, &OplogWriter::HasWork));
        if (stop_) return;
        cut_start = clock_->NowNs();
        size_t bytes = 0, n = 0;
        while (n < queue_.size() &&
               (n == 0 || bytes + queue_[n].ByteSizeLong() <= options_.max_batch_bytes)) {
          bytes += queue_[n].ByteSizeLong();
          ++n;
        }
        for (size_t i = 0; i < n; ++i) *batch.add_mutations() = std::move(queue_[i]);
        queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
        seq = next_seq_++;
        batch.set_seq(seq);
        batch.set_epoch(epoch_);
        batch.set_unix_ns(absl::GetCurrentTimeNanos());
        if (next_id_ != nullptr) batch.set_next_id(next_id_());
        cut_end = clock_->NowNs();
      }
      const std::string bytes = EncodeRecord(RecordKind::kBatch, batch);
      const int64_t start = clock_->NowNs();
      absl::Status s;
      for (;;) {
        s = append_(seq, bytes);
        if (s.ok() || absl::IsFailedPrecondition(s) || absl::IsAlreadyExists(s)) break;
        MutexLock lock(&mu_);
        ++stats_.retries;
        if (mu_.AwaitWithTimeout(Condition(&stop_), options_.retry_backoff)) return;
      }
      if (!s.ok()) {
        Fatal(
            absl::UnavailableError(absl::StrCat("this master can no longer write the oplog (",
                                                s.message(), "): it is not the leader any more")));
        return;
      }
      std::vector<Done> ready;
      {
        MutexLock lock(&mu_);
        ++stats_.batches;
        stats_.bytes += bytes.size();
        stats_.last_commit_ns = clock_->NowNs() - start;
        stats_.cut_ns += cut_end - cut_start;
        stats_.encode_ns += start - cut_end;
        stats_.append_ns += stats_.last_commit_ns;
        stored_.emplace(seq, std::move(batch));
        // Acknowledged in seq order only: a change is durable once every
        // batch up to its own is stored (a later batch may land first).
        for (auto it = stored_.begin(); it != stored_.end() && it->first == contiguous_ + 1;
             it = stored_.erase(it)) {
          ++contiguous_;
          const auto n = static_cast<uint64_t>(it->second.mutations_size());
          durable_ += n;
          stats_.mutations += n;
          if (on_batch_ != nullptr) on_batch_(std::move(it->second));  // in seq order
        }
        auto end = waiters_.upper_bound(durable_);
        for (auto it = waiters_.begin(); it != end; ++it) ready.push_back(std::move(it->second));
        waiters_.erase(waiters_.begin(), end);
      }
      if (ready.empty()) continue;
      const int64_t answer_start = clock_->NowNs();
      for (Done& d : ready) d(absl::OkStatus());
      const int64_t answered = clock_->NowNs() - answer_start;
      MutexLock lock(&mu_);
      stats_.answer_ns += answered;
    }
  }

  void Fatal(const absl::Status& s) {
    {
      MutexLock lock(&mu_);
      if (!failed_.ok()) return;  // another committer said it
      failed_ = s;
      stop_ = true;  // the other committers stop too
    }
    FailAll(s);
    if (on_fatal_ != nullptr) on_fatal_(s);
  }

  void FailAll(const absl::Status& s) {
    std::multimap<uint64_t, Done> waiters;
    {
      MutexLock lock(&mu_);
      waiters.swap(waiters_);
    }
    for (auto& [count, d] : waiters) d(s);
  }

  const int64_t epoch_;
  mutable Mutex mu_;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_);
  Clock* const clock_;
  const AppendFn append_;
  const BatchFn on_batch_;
  const FatalFn on_fatal_;
  const NextIdFn next_id_;
  const OplogWriterOptions options_;
  std::vector<hproto::Mutation> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t appended_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t durable_ ABSL_GUARDED_BY(mu_) = 0;
  std::multimap<uint64_t, Done> waiters_ ABSL_GUARDED_BY(mu_);
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  OplogWriterStats stats_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, hproto::OplogBatch> stored_ ABSL_GUARDED_BY(mu_);  // not yet contiguous
  uint64_t contiguous_ ABSL_GUARDED_BY(mu_);  // every batch up to this one is stored
  std::vector<std::thread> threads_;
};

}  // namespace mooncake::ha

#endif  // MOONCAKE_STORE_HA_OPLOG_WRITER_H_
