// LeaderElection: one leader per HA cluster, elected on an etcd lease.
//
// Protocol (keys in keys.h):
//   campaign  grant a lease of ceil(ttl_ms / 1000) s (at least 1), then
//             Txn(create_revision(leader) == 0
//                   ? put leader = candidate_id under the lease
//                   : range leader).
//             Winning makes the candidate leader with epoch = the leader key's
//             create_revision (the winning txn's header revision). Epochs only
//             grow: each new leader key is created at a later revision.
//             Losing revokes the new lease.
//   leader    renews the lease every ttl_ms / 3 on the election's thread. Its
//             lease cannot expire at etcd before (send time of the last
//             successful renewal or grant) + ttl_ms, so it steps down (IsLeader
//             false, on_lost once, lease revoked best effort) when it has not
//             renewed by that time minus a safety margin of ttl_ms / 4, or as
//             soon as etcd says the lease is gone. Each renewal call is bounded
//             by the time left before that step-down point, so an etcd that
//             hangs cannot keep a stale leader in office.
//   standby   reads the leader key every poll_ms and campaigns when it is
//             absent (the old lease expired or was revoked).
// Leadership is advisory between the checks: a leader that stalls (GC pause,
// SIGSTOP) longer than the margin may still act after its lease is gone, which
// is why every write a leader makes is fenced by its epoch at etcd (see
// oplog_store.h).
//
//   ASSIGN_OR_RETURN(auto e, LeaderElection::Create(etcd, {.cluster = "c1",
//       .candidate_id = "10.0.0.2:50051", .on_elected = ..., .on_lost = ...}));
//   RETURN_IF_ERROR(e->Start());
//   ...
//   e->Resign();   // clean shutdown: the next candidate wins within poll_ms
//
// Callbacks run on the election's thread (on_lost("stopped") on the thread
// calling Stop or Resign) with no lock held; they must not call Stop or Resign.
// on_elected(epoch) runs once per term won, on_lost(reason) once per term lost.
//
// Errors: Create: INVALID_ARGUMENT for a bad cluster name, an empty id or
// non-positive ttl_ms / poll_ms. Start: FAILED_PRECONDITION when called twice.
// etcd errors during the election are retried every poll_ms, never fatal.
//
// Thread-safety: IsLeader, epoch, last_renewal and CurrentLeader from any
// thread; Start, Stop, Resign and the destructor from the owning thread.
#ifndef MOONCAKE_STORE_HA_ELECTION_H_
#define MOONCAKE_STORE_HA_ELECTION_H_

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/ha/etcd_client.h"
#include "mooncake/store/ha/keys.h"

namespace mooncake::ha {

struct LeaderInfo {
  std::string id;     // the leader's candidate_id (its advertised RPC address)
  int64_t epoch = 0;  // the leader key's create_revision
};

// The current leader of `cluster` as etcd sees it; nullopt when there is none.
inline absl::StatusOr<std::optional<LeaderInfo>> ReadLeader(const EtcdClient& etcd,
                                                            std::string_view cluster) {
  ASSIGN_OR_RETURN(HaKeys keys, HaKeys::For(cluster));
  ASSIGN_OR_RETURN(EtcdRange r, etcd.Range(keys.Leader()));
  if (r.kvs.empty()) return std::optional<LeaderInfo>();
  return std::optional<LeaderInfo>(LeaderInfo{r.kvs[0].value, r.kvs[0].create_revision});
}

struct ElectionOptions {
  std::string cluster;
  std::string candidate_id;
  int64_t ttl_ms = 2000;  // lease TTL, rounded up to whole seconds at etcd
  int64_t poll_ms = 50;   // a standby's read interval; also the retry interval
  std::function<void(int64_t epoch)> on_elected;
  std::function<void(std::string_view reason)> on_lost;
};

class LeaderElection {
 public:
  static absl::StatusOr<std::unique_ptr<LeaderElection>> Create(EtcdClient etcd,
                                                                ElectionOptions options) {
    ASSIGN_OR_RETURN(HaKeys keys, HaKeys::For(options.cluster));
    if (options.candidate_id.empty() || options.ttl_ms <= 0 || options.poll_ms <= 0) {
      return absl::InvalidArgumentError(
          "ElectionOptions: candidate_id must be set, ttl_ms and poll_ms > 0");
    }
    return std::unique_ptr<LeaderElection>(
        new LeaderElection(std::move(etcd), std::move(options), std::move(keys)));
  }

  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;
  ~LeaderElection() { Stop(); }

  // Starts campaigning on a new thread.
  absl::Status Start() {
    std::lock_guard<std::mutex> lock(mu_);
    if (started_) return absl::FailedPreconditionError("LeaderElection::Start called twice");
    started_ = true;
    thread_ = std::thread([this] { Run(); });
    return absl::OkStatus();
  }

  // Stops campaigning and renewing; joins the thread. A leader steps down
  // locally (on_lost("stopped")) but leaves its lease to expire at etcd, as a
  // crashed leader would; Resign hands over at once.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    stop_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    StepDown("stopped", /*revoke=*/false);
  }

  // Stop, then delete the leader key if it is still ours and revoke the lease
  // of the last term, so a standby wins within its poll_ms. The first etcd
  // error, if any (the lease then expires on its own).
  absl::Status Resign() {
    Stop();
    int64_t epoch = 0, lease = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      epoch = std::exchange(term_epoch_, 0);
      lease = std::exchange(term_lease_, 0);
    }
    if (lease == 0) return absl::OkStatus();
    absl::Status status =
        etcd_
            .Txn({{.key = keys_.Leader(), .target = EtcdCompare::kCreate, .number = epoch}},
                 {{.kind = EtcdOp::kDeleteRange, .key = keys_.Leader()}})
            .status();
    absl::Status revoked = etcd_.Revoke(lease);
    if (status.ok() && !revoked.ok() && !absl::IsNotFound(revoked)) status = revoked;
    return status;
  }

  bool IsLeader() const {
    std::lock_guard<std::mutex> lock(mu_);
    return leader_;
  }
  // The epoch of the current term; 0 when not leader.
  int64_t epoch() const {
    std::lock_guard<std::mutex> lock(mu_);
    return leader_ ? term_epoch_ : 0;
  }
  // The send time of the last successful grant or renewal of the last term
  // (kept after losing it); absl::InfinitePast() before the first term.
  absl::Time last_renewal() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_renewal_;
  }
  const ElectionOptions& options() const { return options_; }

  // The leader as etcd sees it now (maybe another candidate).
  absl::StatusOr<std::optional<LeaderInfo>> CurrentLeader() const {
    return ReadLeader(etcd_, options_.cluster);
  }

 private:
  LeaderElection(EtcdClient etcd, ElectionOptions options, HaKeys keys)
      : etcd_(std::move(etcd)),
        options_(std::move(options)),
        keys_(std::move(keys)),
        ttl_(absl::Milliseconds(options_.ttl_ms)),
        poll_(absl::Milliseconds(options_.poll_ms)) {}

  void Run() {
    for (;;) {
      bool leader = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_) return;
        leader = leader_;
      }
      if (leader) {
        LeaderStep();
      } else {
        StandbyStep();
      }
    }
  }

  // Sleeps for `d` or until Stop; true when stopping.
  bool WaitFor(absl::Duration d) {
    std::unique_lock<std::mutex> lock(mu_);
    stop_cv_.wait_for(lock, absl::ToChronoNanoseconds(std::max(d, absl::ZeroDuration())),
                      [this] { return stop_; });
    return stop_;
  }

  void LeaderStep() {
    int64_t lease = 0;
    absl::Time last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      lease = term_lease_;
      last = last_renewal_;
    }
    const absl::Time step_down_at = last + ttl_ - ttl_ / 4;
    const absl::Time renew_at = last + ttl_ / 3;
    const absl::Time now = absl::Now();
    if (now >= step_down_at) {
      StepDown(absl::StrCat("lease ", lease, " not renewed since ",
                            absl::FormatTime(last, absl::UTCTimeZone()),
                            " (ttl_ms=", options_.ttl_ms, ")"),
               /*revoke=*/true);
      return;
    }
    if (now < renew_at) {
      WaitFor(std::min(renew_at, step_down_at) - now);
      return;
    }
    // Every endpoint attempt must end before the step-down point.
    const absl::Duration per_attempt = std::max(
        (step_down_at - now) / static_cast<int64_t>(etcd_.endpoint_count()), absl::Milliseconds(1));
    const absl::Time sent = absl::Now();
    absl::StatusOr<int64_t> ttl = etcd_.WithTimeout(per_attempt).KeepAlive(lease);
    if (ttl.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      last_renewal_ = sent;
      return;
    }
    if (absl::IsNotFound(ttl.status())) {
      StepDown(absl::StrCat("lease gone at etcd: ", ttl.status().message()), /*revoke=*/false);
      return;
    }
    WaitFor(std::min(poll_, step_down_at - absl::Now()));  // retry soon
  }

  void StandbyStep() {
    absl::StatusOr<EtcdRange> r = etcd_.Range(keys_.Leader());
    if (r.ok() && r->kvs.empty()) Campaign();
    WaitFor(poll_);
  }

  void Campaign() {
    const int64_t ttl_s = std::max<int64_t>(1, (options_.ttl_ms + 999) / 1000);
    const absl::Time sent = absl::Now();
    absl::StatusOr<int64_t> lease = etcd_.Grant(ttl_s);
    if (!lease.ok()) return;
    absl::StatusOr<EtcdTxnResult> txn =
        etcd_.Txn({{.key = keys_.Leader(), .target = EtcdCompare::kCreate, .number = 0}},
                  {{.kind = EtcdOp::kPut,
                    .key = keys_.Leader(),
                    .value = options_.candidate_id,
                    .lease = *lease}},
                  {{.kind = EtcdOp::kRange, .key = keys_.Leader()}});
    if (!txn.ok() || !txn->succeeded) {
      // A txn that timed out may have won; its lease then expires unrenewed.
      (void)etcd_.WithTimeout(std::min(ttl_ / 4, absl::Seconds(1))).Revoke(*lease);
      return;
    }
    MC_ASSERT(txn->revision > 0, "a won txn has a revision");
    {
      std::lock_guard<std::mutex> lock(mu_);
      leader_ = true;
      term_epoch_ = txn->revision;
      term_lease_ = *lease;
      last_renewal_ = sent;
    }
    if (options_.on_elected) options_.on_elected(txn->revision);
  }

  // Ends the current term, if any: on_lost(reason) once, then the lease
  // revoked best effort (bounded, so a hung etcd does not hold the thread).
  void StepDown(const std::string& reason, bool revoke) {
    int64_t lease = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!leader_) return;
      leader_ = false;
      lease = term_lease_;
    }
    if (options_.on_lost) options_.on_lost(reason);
    if (revoke) (void)etcd_.WithTimeout(std::min(ttl_ / 4, absl::Seconds(1))).Revoke(lease);
  }

  const EtcdClient etcd_;
  const ElectionOptions options_;
  const HaKeys keys_;
  const absl::Duration ttl_;
  const absl::Duration poll_;

  // std::mutex, not absl::Mutex: Debian's abseil is not built with TSAN, which
  // then cannot see absl::Mutex's happens-before edges (docs/qos.md).
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;  // signalled when stop_ is set
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool leader_ ABSL_GUARDED_BY(mu_) = false;
  int64_t term_epoch_ ABSL_GUARDED_BY(mu_) = 0;  // of the last term won
  int64_t term_lease_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_renewal_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::thread thread_;  // started once, by Start; joined by Stop
};

}  // namespace mooncake::ha

#endif  // MOONCAKE_STORE_HA_ELECTION_H_
