// TierAgent: a worker's SSD tier (mooncake/tier SsdTier) under its DRAM
// segments, driven by the master.
//
// The master decides everything (docs/master.md, "SSD tier"): which object
// leaves DRAM for the tier (OFFLOAD), which comes back into which DRAM range
// (LOAD), which record goes (DROP). The agent long-polls the master with
// TierSync for tasks, runs each on the tier asynchronously, and reports each
// result as soon as it is known (one TierReport per completion, which the
// master answers on its I/O thread with any tasks already queued, so work
// keeps flowing without the poll; a report that fails is resent with the
// next poll).
//
// Records are named by the object's version ("v<version>"), which the master
// never reuses in its life. A new worker, or one told to remount, has records
// no master knows, so Reset() empties the tier; results of tasks begun before
// a Reset are dropped, since a restarted master reuses task ids.
//
// Bytes. An OFFLOAD hashes the segment range (XXH3-64) and refuses a range
// that does not match the object's checksum (DataLoss), so the tier only ever
// holds the committed value; a LOAD checks the same hash after the read (the
// tier verified its own record checksums already). Segment memory is held by
// shared_ptr for as long as an operation uses it, so a remount that retires
// a segment never unmaps memory the tier is still reading or writing.
//
// Thread-safety: Reset and stats from any thread; one loop thread of its own;
// completion callbacks on the tier's reaper threads.
#ifndef MOONCAKE_STORE_WORKER_TIER_AGENT_H_
#define MOONCAKE_STORE_WORKER_TIER_AGENT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
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
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/base/value_checksum.h"
#include "mooncake/compress/codec.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/channel.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/tier/blocking.h"
#include "mooncake/tier/ssd_tier.h"

namespace mooncake::worker {

struct TierAgentOptions {
  // paths and capacity_bytes_per_file required. Writes and removes are acknowledged when
  // on the device and nothing is synced while the tier is open (kNoSync): the agent empties
  // the tier when its worker starts, so no record outlives the process that wrote it, and
  // syncs would only stall the writes queued behind them. For the same reason the tier
  // starts empty (start_empty): old files are replaced unread, whatever their size.
  tier::SsdTierOptions tier = {.start_empty = true, .durability = tier::Durability::kNoSync};
  int64_t poll_wait_ms = 500;      // TierSync long poll
  size_t max_in_flight = 64;       // tier operations at once
  int64_t rpc_timeout_ms = 2'000;  // added to poll_wait_ms for a poll
  int64_t retry_backoff_ms = 100;  // after a failed poll
};

struct TierAgentStats {
  uint64_t offloads = 0, offload_failures = 0;
  uint64_t loads = 0, load_failures = 0;
  uint64_t drops = 0;
  uint64_t polls = 0, poll_failures = 0, reports_resent = 0;
  uint64_t resets = 0;
};

// One DRAM segment as the agent sees it: the memory stays mapped while held.
struct SegmentMemory {
  std::shared_ptr<void> keep_alive;
  std::span<std::byte> bytes;
};

// master segment id -> its memory on this worker (nullopt: not one of ours).
using SegmentLookup = std::function<std::optional<SegmentMemory>(uint64_t master_segment_id)>;

inline compress::DType TierDType(store::proto::DType d) {
  switch (d) {
    case store::proto::DTYPE_BF16:
      return compress::DType::kBFloat16;
    case store::proto::DTYPE_FP16:
      return compress::DType::kFloat16;
    case store::proto::DTYPE_FP32:
      return compress::DType::kFloat32;
    case store::proto::DTYPE_FP8_E4M3:
      return compress::DType::kFloat8E4M3;
    case store::proto::DTYPE_FP8_E5M2:
      return compress::DType::kFloat8E5M2;
    default:
      return compress::DType::kBytes;
  }
}

inline std::string TierRecordKey(uint64_t version) { return absl::StrCat("v", version); }

template <rpc::RpcChannel C>
class TierAgent {
 public:
  // Opens the tier and empties it (Reset); the loop starts polling at once.
  static absl::StatusOr<std::unique_ptr<TierAgent>> Start(TierAgentOptions options, C* channel,
                                                          std::string worker_id,
                                                          SegmentLookup lookup) {
    if (options.poll_wait_ms < 0 || options.max_in_flight == 0 || options.rpc_timeout_ms <= 0) {
      return absl::InvalidArgumentError(
          "TierAgentOptions: poll_wait_ms >= 0, max_in_flight > 0, rpc_timeout_ms > 0");
    }
    MC_ASSERT(channel != nullptr && lookup != nullptr, "a tier agent needs a channel and lookup");
    ASSIGN_OR_RETURN(std::unique_ptr<tier::SsdTier> t, tier::SsdTier::Open(options.tier));
    std::unique_ptr<TierAgent> a(
        new TierAgent(std::move(options), channel, std::move(worker_id), std::move(lookup)));
    a->tier_ = std::move(t);
    RETURN_IF_ERROR(a->Reset());
    a->loop_ = std::thread([p = a.get()] { p->Loop(); });
    return a;
  }

  TierAgent(const TierAgent&) = delete;
  TierAgent& operator=(const TierAgent&) = delete;
  ~TierAgent() { Stop(); }

  // Stops polling and waits for the tier's operations in flight; the tier
  // stays open (stats still answer). Idempotent; not concurrent with itself.
  void Stop() {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (loop_.joinable()) loop_.join();
    MutexLock lock(&mu_);
    mu_.Await(Condition(
        +[](size_t* n) { return *n == 0; }, &in_flight_));
  }

  // Forgets every record (the master knows none of them): waits for the
  // operations in flight, then removes everything the tier holds.
  absl::Status Reset() {
    {
      MutexLock lock(&mu_);
      ++generation_;
      ++stats_.resets;
      pending_.clear();
      ready_.clear();
      mu_.Await(Condition(
          +[](size_t* n) { return *n == 0; }, &in_flight_));
    }
    std::vector<std::string> keys;
    tier_->ForEach([&](const tier::ObjectInfo& o) { keys.push_back(o.key); });
    for (const std::string& k : keys) {
      absl::Status s = tier::RemoveBlocking(*tier_, k);
      if (!s.ok() && !absl::IsNotFound(s)) return s;
    }
    return absl::OkStatus();
  }

  TierAgentStats stats() const {
    MutexLock lock(&mu_);
    return stats_;
  }
  tier::TierStats tier_stats() const { return tier_->stats(); }
  tier::SsdTier& tier() { return *tier_; }

 private:
  TierAgent(TierAgentOptions options, C* channel, std::string worker_id, SegmentLookup lookup)
      : options_(std::move(options)),
        channel_(channel),
        worker_id_(std::move(worker_id)),
        lookup_(std::move(lookup)) {}

  // Who we are and the tier's size and use, as TierSync and TierReport carry.
  template <typename Request>
  Request TierRequest() const {
    Request req;
    req.set_worker_id(worker_id_);
    const tier::TierStats st = tier_->stats();
    req.set_capacity_bytes(st.capacity_bytes);
    req.set_used_bytes(st.used_bytes);
    return req;
  }

  // One thread runs every task and keeps one TierSync long poll outstanding
  // (asynchronous, so tasks that come back with a TierReport answer run at
  // once instead of waiting for the poll). It never blocks on the master.
  void Loop() {
    for (;;) {
      std::vector<ReadyTask> run;
      std::optional<store::proto::TierSyncRequest> poll;
      {
        MutexLock lock(&mu_);
        mu_.Await(Condition(this, &TierAgent::HasWork));
        if (stopping_) {
          // The poll's callback touches this object.
          mu_.Await(Condition(
              +[](bool* out) { return !*out; }, &poll_outstanding_));
          return;
        }
        run.swap(ready_);
        if (CanPollLocked(run.size())) poll = PollRequestLocked(run.size());
      }
      if (poll.has_value()) SendPoll(std::move(*poll));
      for (const ReadyTask& t : run) Run(t.task, t.generation);
      if (run.empty() && !poll.has_value()) {
        // Backing off after a failed or unwaited poll: sleep, then look again.
        MutexLock lock(&mu_);
        mu_.AwaitWithDeadline(Condition(this, &TierAgent::HasUrgentWork), next_poll_at_);
      }
    }
  }

  struct ReadyTask {
    store::proto::TierTask task;
    uint64_t generation = 0;
  };

  bool CanPollLocked(size_t about_to_run) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !poll_outstanding_ && in_flight_ + about_to_run < options_.max_in_flight &&
           absl::Now() >= next_poll_at_;
  }
  bool HasUrgentWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !ready_.empty();
  }
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return HasUrgentWork() || (!poll_outstanding_ && in_flight_ < options_.max_in_flight);
  }

  store::proto::TierSyncRequest PollRequestLocked(size_t about_to_run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto req = TierRequest<store::proto::TierSyncRequest>();
    for (auto& r : pending_) *req.add_results() = std::move(r);
    stats_.reports_resent += pending_.size();
    pending_.clear();
    req.set_max_tasks(static_cast<uint32_t>(
        std::min(options_.max_in_flight - in_flight_ - about_to_run, rpc::kMaxTierTasks)));
    req.set_wait_ms(static_cast<uint64_t>(options_.poll_wait_ms));
    ++stats_.polls;
    poll_outstanding_ = true;
    poll_generation_ = generation_;
    return req;
  }

  void SendPoll(store::proto::TierSyncRequest req) {
    const int64_t timeout_ms = options_.poll_wait_ms + options_.rpc_timeout_ms;
    const absl::Time sent = absl::Now();
    auto results = std::make_shared<store::proto::TierSyncRequest>(req);
    rpc::CallAsync<rpc::TierSyncMethod>(
        *channel_, req, {.timeout_ns = timeout_ms * 1'000'000},
        [this, sent, results](absl::StatusOr<store::proto::TierSyncResponse> r) {
          MutexLock lock(&mu_);
          const bool current = poll_generation_ == generation_;
          if (!r.ok()) {
            ++stats_.poll_failures;
            if (current) {
              for (auto& x : *results->mutable_results()) pending_.push_back(std::move(x));
            }
            next_poll_at_ = absl::Now() + absl::Milliseconds(options_.retry_backoff_ms);
          } else if (r->remount_required()) {
            // The worker's heartbeat remounts and Resets us; until then, wait.
            next_poll_at_ = absl::Now() + absl::Milliseconds(options_.retry_backoff_ms);
          } else if (r->tasks().empty() && options_.poll_wait_ms > 0 &&
                     absl::Now() - sent < absl::Milliseconds(1)) {
            // The master did not wait (its long-poll slots are taken, or it
            // is stopping): do not spin on it.
            next_poll_at_ = absl::Now() + absl::Milliseconds(20);
          } else if (current) {
            for (const store::proto::TierTask& t : r->tasks()) {
              ready_.push_back({t, poll_generation_});
            }
          }
          poll_outstanding_ = false;  // last: Stop waits for it
        });
  }

  void Run(const store::proto::TierTask& t, uint64_t generation) {
    // Looked up before counting the task: the lookup takes the worker's lock,
    // which a remount holds while Reset waits for in_flight_ to drain.
    std::optional<SegmentMemory> mem;
    if (t.kind() != store::proto::TIER_DROP) mem = lookup_(t.segment_id());
    {
      MutexLock lock(&mu_);
      if (generation != generation_ || stopping_) return;  // from before a Reset
      ++in_flight_;
    }
    const uint64_t id = t.task_id();
    const std::string key = TierRecordKey(t.version());
    if (t.kind() == store::proto::TIER_DROP) {
      {
        MutexLock lock(&mu_);
        ++removes_in_flight_;
      }
      tier_->Remove(key, [this, id, generation](absl::Status s) {
        RemoveEnded();
        Done(id, generation, absl::IsNotFound(s) ? absl::OkStatus() : s, &TierAgentStats::drops,
             nullptr);
      });
      return;
    }
    if (!mem.has_value() || t.length() == 0 || t.offset() > mem->bytes.size() ||
        t.length() > mem->bytes.size() - t.offset()) {
      // Not NOT_FOUND: the master reads that as "the record is gone".
      Done(id, generation,
           absl::FailedPreconditionError(absl::StrCat("segment ", t.segment_id(), " range [",
                                                      t.offset(), ", +", t.length(),
                                                      ") is not on this worker")),
           nullptr,
           t.kind() == store::proto::TIER_LOAD ? &TierAgentStats::load_failures
                                               : &TierAgentStats::offload_failures);
      return;
    }
    std::span<std::byte> range = mem->bytes.subspan(t.offset(), t.length());
    if (!KnownChecksumFormat(t.checksum_format())) {
      Done(id, generation,
           absl::FailedPreconditionError(
               absl::StrCat("checksum format ", t.checksum_format(), " is unknown to this worker")),
           nullptr,
           t.kind() == store::proto::TIER_LOAD ? &TierAgentStats::load_failures
                                               : &TierAgentStats::offload_failures);
      return;
    }
    if (t.kind() == store::proto::TIER_OFFLOAD) {
      if (!ChecksumMatches(t.checksum_format(), range.data(), range.size(), nullptr,
                           t.checksum())) {
        Done(id, generation,
             absl::DataLossError("segment bytes do not match the object's checksum"), nullptr,
             &TierAgentStats::offload_failures);
        return;
      }
      Offload(Parked{t, generation, std::move(*mem)}, /*retried=*/false);
      return;
    }
    if (t.kind() != store::proto::TIER_LOAD) {
      Done(id, generation, absl::InvalidArgumentError("unknown tier task kind"), nullptr, nullptr);
      return;
    }
    tier_->Read(key, range,
                [this, id, generation, range, checksum = t.checksum(),
                 format = static_cast<uint32_t>(t.checksum_format()),
                 keep = std::move(mem)](absl::StatusOr<tier::ReadResult> r) {
                  absl::Status s = r.status();
                  if (s.ok() && r->raw_bytes != range.size()) {
                    s = absl::DataLossError(absl::StrCat("record holds ", r->raw_bytes,
                                                         " bytes, the object ", range.size()));
                  } else if (s.ok() && !ChecksumMatches(format, range.data(), range.size(), nullptr,
                                                        checksum)) {
                    s = absl::DataLossError("loaded bytes do not match the object's checksum");
                  }
                  Done(id, generation, s, &TierAgentStats::loads, &TierAgentStats::load_failures);
                });
  }

  // An OFFLOAD, kept whole while it waits for removes to free tier space.
  struct Parked {
    store::proto::TierTask task;
    uint64_t generation = 0;
    SegmentMemory mem;
  };

  // Write copies (or compresses) the bytes before it returns. A full tier
  // with removes in flight (the master dropped old copies to make room, and
  // their space is free only once each remove is durable) gets one more try
  // after they end.
  void Offload(Parked p, bool retried) {
    // Everything below reads the task from `parked`, which the callback keeps alive.
    // (Reading it from `p` after the move read an empty task: every record was
    // written as kBytes, so the store's tier never compressed.)
    auto parked = std::make_shared<Parked>(std::move(p));
    const store::proto::TierTask& t = parked->task;
    std::span<std::byte> range = parked->mem.bytes.subspan(t.offset(), t.length());
    const std::string key = TierRecordKey(t.version());
    const uint64_t id = t.task_id(), generation = parked->generation;
    tier_->Write(key, range, tier::ObjectMeta{.dtype = TierDType(t.dtype())},
                 [this, id, generation, retried, parked, key](absl::Status s) mutable {
                   if (absl::IsResourceExhausted(s) && !retried) {
                     MutexLock lock(&mu_);
                     if (removes_in_flight_ > 0) {
                       parked_.push_back(std::move(*parked));
                       return;
                     }
                   }
                   // What the record takes (compressed, header, padding), so the
                   // master charges the tier that and not the raw size.
                   uint64_t stored = 0;
                   if (s.ok()) {
                     if (std::optional<tier::ObjectInfo> info = tier_->Lookup(key)) {
                       stored = info->stored_bytes;
                     }
                   }
                   Done(id, generation, s, &TierAgentStats::offloads,
                        &TierAgentStats::offload_failures, stored);
                 });
  }

  void RemoveEnded() {
    std::vector<Parked> retry;
    {
      MutexLock lock(&mu_);
      MC_ASSERT(removes_in_flight_ > 0, "a remove ended twice");
      if (--removes_in_flight_ == 0) retry.swap(parked_);
    }
    for (Parked& p : retry) Offload(std::move(p), /*retried=*/true);
  }

  // Tasks waiting to run plus tasks running, this one included.
  size_t ReadyAndInFlight() {
    MutexLock lock(&mu_);
    return ready_.size() + in_flight_;
  }

  // On a reaper thread (or the loop's): counts, then reports at once.
  // `stored_bytes`: an OFFLOAD's record size on the tier (0: none or unknown).
  void Done(uint64_t task_id, uint64_t generation, const absl::Status& s,
            uint64_t TierAgentStats::*ok_counter, uint64_t TierAgentStats::*fail_counter,
            uint64_t stored_bytes = 0) {
    store::proto::TierTaskResult result;
    result.set_task_id(task_id);
    result.set_code(static_cast<uint32_t>(s.code()));
    result.set_message(std::string(s.message()));
    if (s.ok() && stored_bytes > 0) result.set_stored_bytes(stored_bytes);
    bool report = false;
    {
      MutexLock lock(&mu_);
      MC_ASSERT(in_flight_ > 0, "a tier task ended twice");
      auto counter = s.ok() ? ok_counter : fail_counter;
      if (counter != nullptr) ++(stats_.*counter);
      report = generation == generation_ && !stopping_;
      if (!report) {
        --in_flight_;
        return;
      }
    }
    auto req = TierRequest<store::proto::TierReportRequest>();
    *req.add_results() = result;
    // Room for more work, counting this task as ended: the answer carries
    // tasks already queued for us, so a busy worker rarely waits for a poll.
    req.set_max_tasks(static_cast<uint32_t>(
        std::min(options_.max_in_flight - std::min(options_.max_in_flight, ReadyAndInFlight()),
                 rpc::kMaxTierTasks)));
    rpc::CallAsync<rpc::TierReportMethod>(
        *channel_, req, {.timeout_ns = options_.rpc_timeout_ms * 1'000'000},
        [this, generation, result](absl::StatusOr<store::proto::TierReportResponse> r) {
          MutexLock lock(&mu_);
          if (!r.ok() && generation == generation_) pending_.push_back(result);
          if (r.ok() && generation == generation_) {
            for (const store::proto::TierTask& t : r->tasks()) ready_.push_back({t, generation});
          }
          --in_flight_;  // last: the destructor waits for it
        });
  }

  const TierAgentOptions options_;
  C* const channel_;
  const std::string worker_id_;
  const SegmentLookup lookup_;
  std::unique_ptr<tier::SsdTier> tier_;

  mutable Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // tier operations and their reports
  size_t removes_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Parked> parked_ ABSL_GUARDED_BY(mu_);    // offloads waiting for removes
  std::vector<ReadyTask> ready_ ABSL_GUARDED_BY(mu_);  // handed out, not yet run
  bool poll_outstanding_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t poll_generation_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time next_poll_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::vector<store::proto::TierTaskResult> pending_ ABSL_GUARDED_BY(mu_);  // reports to resend
  TierAgentStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread loop_;
};

}  // namespace mooncake::worker

#endif  // MOONCAKE_STORE_WORKER_TIER_AGENT_H_
