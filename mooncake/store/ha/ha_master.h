// HaMaster<MasterT>: one of N metadata masters of an HA cluster on etcd
// (docs/ha.md). One is the leader and serves; the others are hot standbys
// that replay the oplog and answer every call UNAVAILABLE ("not the leader",
// naming it) so that clients look the leader up again.
//
//   HaMaster<M> ha(options, factory, &metrics);
//   RETURN_IF_ERROR(ha.Register(&registry));        // before the server starts
//   ... start the RPC server ...
//   RETURN_IF_ERROR(ha.Start(server.address()));    // joins the election
//   ...
//   ha.Stop();                                      // resigns if leader
//
// Roles:
//   standby   follows the oplog in etcd (every poll_ms) into its ReplayState;
//             a gap behind a snapshot reloads the snapshot first.
//   leader    on winning the election (epoch = the etcd revision of the win):
//             reads the oplog to its end (the old leader is fenced by then:
//             its appends compare the leader key with its own epoch), builds
//             a Master from the replayed state (Master::Restore), and serves.
//             Every change is logged by an OplogWriter; calls that change the
//             durable state (PutStart, PutEnd, PutRevoke, Remove, RemoveAll,
//             Mount and Unmount) are answered once their oplog entries are
//             stored.
//             Every snapshot_every_batches batches (and at most every
//             snapshot_min_interval) it writes a snapshot of its mirror of the
//             durable state, truncates the oplog behind it and compacts etcd's
//             history.
//   stepping down: when the election says the lease is lost (it steps down
//             before the lease can expire) or an append is fenced: the
//             Master goes (calls answer UNAVAILABLE, durable waits fail), and
//             the node follows the oplog again from its mirror, which holds
//             exactly the stored batches.
//
// What survives a failover: every acknowledged change, pending puts included
// (their PutEnd, retried at the new leader, commits; a PutStart sent again
// with its request_id gets the same put). What does not: read leases (clients take new ones),
// heartbeat sequences (workers count as alive from the takeover), SSD-tier state (HA masters refuse
// TierSync: SSD tiers and HA are exclusive for now).
//
// Thread-safety: Register/Start/Stop from the owner; handlers from the RPC
// server's threads.
#ifndef MOONCAKE_STORE_HA_HA_MASTER_H_
#define MOONCAKE_STORE_HA_HA_MASTER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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
#include "mooncake/base/clock.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/ha/election.h"
#include "mooncake/store/ha/etcd_client.h"
#include "mooncake/store/ha/oplog_store.h"
#include "mooncake/store/ha/oplog_writer.h"
#include "mooncake/store/ha/records.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/service.h"

namespace mooncake::ha {

struct HaMasterOptions {
  std::string etcd;     // endpoints, "http://127.0.0.1:2379[,...]"
  std::string cluster;  // [A-Za-z0-9_.-]{1,64}
  int64_t lease_ttl_ms = 2000;
  int64_t poll_ms = 50;  // a standby's oplog poll and leader check
  uint64_t snapshot_every_batches = 4096;
  absl::Duration snapshot_min_interval = absl::Seconds(10);
  int64_t tick_interval_ms = 100;
  // The masters' MasterOptions::hold_write_windows: a standby keeps the
  // ranges tenants' objects (not of default_tenant) leave for this long
  // (put_timeout_ms + 1 s), and holds them out of puts if it takes over
  // (ReplayState, RestoredHold). 0: none.
  int64_t hold_window_ns = 0;
  std::string default_tenant = "default";
  OplogWriterOptions writer;
  // Called with one line per event (became leader, stepped down, snapshot
  // written, a record refused); null: none. From the node's role thread.
  std::function<void(const std::string&)> on_event;
};

struct HaMasterStatus {
  bool leader = false;
  int64_t epoch = 0;
  uint64_t applied_seq = 0;  // batches replayed or stored (next_seq - 1)
  uint64_t failovers = 0;    // times this node became leader
  uint64_t step_downs = 0;
  uint64_t corrupt_records = 0;
  uint64_t snapshots_written = 0;
  uint64_t snapshots_loaded = 0;
  int64_t snapshot_unix_ns = 0;  // of the latest snapshot written or loaded
  std::string last_error;
  // The leader's oplog writer in this term (zeros on a standby): batches,
  // changes and record bytes stored (bytes as stored: compressed ones count
  // their frame).
  OplogWriterStats writer;
};

template <typename MasterT>
class HaMaster {
 public:
  // Makes an empty master for a new term (the same options every time).
  using Factory = std::function<absl::StatusOr<std::unique_ptr<MasterT>>()>;

  HaMaster(HaMasterOptions options, Factory factory, MetricsRegistry* metrics)
      : options_(std::move(options)),
        factory_(std::move(factory)),
        metrics_(metrics),
        replay_(options_.hold_window_ns, options_.default_tenant) {}
  HaMaster(const HaMaster&) = delete;
  HaMaster& operator=(const HaMaster&) = delete;
  ~HaMaster() { Stop(); }

  // Registers every method of master.proto, each dispatching to the current
  // term's master or answering UNAVAILABLE on a standby.
  absl::Status Register(rpc::ServiceRegistry* registry);

  // Connects to etcd, loads the latest snapshot and the oplog after it, then
  // follows and joins the election as `advertise` (the address clients
  // reach this node's RPC server at). Errors: UNAVAILABLE (etcd unreachable:
  // the message names the endpoints), DATA_LOSS (a corrupt snapshot or oplog
  // record: never applied), INVALID_ARGUMENT (options).
  absl::Status Start(std::string advertise);

  // Resigns (if leader) and stops every thread. Idempotent.
  void Stop();

  HaMasterStatus status() const {
    HaMasterStatus s;
    {
      MutexLock lock(&status_mu_);
      s = status_;
    }
    if (std::shared_ptr<Term> t = current(); t != nullptr) s.writer = t->writer->stats();
    return s;
  }
  bool IsLeader() const { return current() != nullptr; }
  // The current term's master (null on a standby). For stats and tests.
  std::shared_ptr<MasterT> master() const {
    std::shared_ptr<Term> t = current();
    return t == nullptr ? nullptr : t->master;
  }

 private:
  struct Term {
    std::shared_ptr<MasterT> master;
    std::unique_ptr<OplogWriter> writer;
    int64_t epoch = 0;
  };

  std::shared_ptr<Term> current() const {
    MutexLock lock(&term_mu_);
    return term_;
  }

  // The term calls may be served by: none past the election's step-down
  // point (last renewal + TTL - TTL/4), even if this node's threads have not
  // noticed yet (a leader stalled by a pause answers nothing, reads included,
  // once it resumes after its lease could have expired).
  std::shared_ptr<Term> serving() const {
    std::shared_ptr<Term> t = current();
    if (t == nullptr) return nullptr;
    if (absl::GetCurrentTimeNanos() >= serve_until_unix_ns_.load(std::memory_order_acquire)) {
      return nullptr;
    }
    return t;
  }

  void RefreshServeUntil() {
    if (election_ == nullptr) return;
    const absl::Duration ttl = absl::Milliseconds(options_.lease_ttl_ms);
    serve_until_unix_ns_.store(absl::ToUnixNanos(election_->last_renewal() + ttl - ttl / 4),
                               std::memory_order_release);
  }

  absl::Status NotLeader() const;
  // Registers M to answer FAILED_PRECONDITION: "<what> not supported with an
  // HA master".
  template <typename M>
  static absl::Status RefuseUnderHa(rpc::ServiceRegistry* r, std::string_view what) {
    return r->Register<M>(
        [msg = absl::StrCat(AbslView(what), " not supported with an HA master (--ha_etcd)")](
            const typename M::Request&) -> absl::StatusOr<typename M::Response> {
          return absl::FailedPreconditionError(msg);
        },
        {.mode = rpc::ExecutionMode::kInline});
  }
  absl::Status StartElection();
  void RestartElection();
  absl::Status CatchUp() ABSL_EXCLUSIVE_LOCKS_REQUIRED(replay_mu_);
  absl::Status LoadSnapshot() ABSL_EXCLUSIVE_LOCKS_REQUIRED(replay_mu_);
  void RoleLoop();
  absl::Status Promote(int64_t epoch);
  void Demote(const std::string& why);
  void MaybeSnapshot(const std::shared_ptr<Term>& term);
  void SetError(const absl::Status& s) {
    {
      MutexLock lock(&status_mu_);
      if (status_.last_error == s.ToString()) return;  // said already
      status_.last_error = s.ToString();
      if (absl::IsDataLoss(s)) ++status_.corrupt_records;
    }
    Event(absl::StrCat("HA: ", s.ToString()));
  }
  void RefreshGauges();
  // Applies the queued stored batches to the mirror.
  void DrainMirror() ABSL_EXCLUSIVE_LOCKS_REQUIRED(replay_mu_) {
    std::vector<hproto::OplogBatch> q;
    {
      MutexLock lock(&mirror_mu_);
      q.swap(mirror_queue_);
    }
    for (const hproto::OplogBatch& b : q) {
      if (absl::Status st = replay_.Apply(b); !st.ok()) SetError(st);
    }
  }
  void Event(const std::string& line) const {
    if (options_.on_event != nullptr) options_.on_event(line);
  }

  const HaMasterOptions options_;
  const Factory factory_;
  MetricsRegistry* const metrics_;
  std::optional<EtcdClient> etcd_;
  std::optional<OplogStore> store_;
  std::unique_ptr<LeaderElection> election_;
  std::string advertise_;

  mutable Mutex replay_mu_;
  ReplayState replay_ ABSL_GUARDED_BY(replay_mu_);
  uint64_t standby_lag_ ABSL_GUARDED_BY(replay_mu_) = 0;  // batches in etcd not replayed
  // Stored batches of this term not applied to replay_ yet (lock order:
  // replay_mu_ -> mirror_mu_).
  Mutex mirror_mu_;
  std::vector<hproto::OplogBatch> mirror_queue_ ABSL_GUARDED_BY(mirror_mu_);

  mutable Mutex term_mu_;
  std::shared_ptr<Term> term_ ABSL_GUARDED_BY(term_mu_);
  // serving()'s bound, Unix ns; set at promotion and on every role-loop pass.
  std::atomic<int64_t> serve_until_unix_ns_{0};

  // Events for the role thread.
  Mutex events_mu_;
  std::optional<int64_t> elected_ ABSL_GUARDED_BY(events_mu_);
  std::optional<std::string> lost_ ABSL_GUARDED_BY(events_mu_);
  bool stop_ ABSL_GUARDED_BY(events_mu_) = false;
  std::thread role_thread_;

  mutable Mutex status_mu_;
  HaMasterStatus status_ ABSL_GUARDED_BY(status_mu_);
  std::string leader_hint_ ABSL_GUARDED_BY(status_mu_);  // "addr (epoch E)" as etcd says
  absl::Time last_snapshot_ = absl::InfinitePast();
  uint64_t batches_at_snapshot_ = 0;
  Gauge* g_leader_ = nullptr;
  Gauge* g_epoch_ = nullptr;
  Gauge* g_applied_ = nullptr;
  Gauge* g_lag_ = nullptr;
  Gauge* g_snapshot_age_ = nullptr;
  Counter* c_failovers_ = nullptr;
  Counter* c_step_downs_ = nullptr;
};

// ---- Definitions -------------------------------------------------------------

template <typename MasterT>
absl::Status HaMaster<MasterT>::NotLeader() const {
  std::string leader;
  {
    MutexLock lock(&status_mu_);
    leader = leader_hint_;
  }
  return absl::UnavailableError(absl::StrCat(
      "this master (", advertise_, ") is not the leader of HA cluster '", options_.cluster,
      "'; the leader is ", leader.empty() ? std::string("not elected yet") : leader));
}

template <typename MasterT>
absl::Status HaMaster<MasterT>::StartElection() {
  ElectionOptions eo;
  eo.cluster = options_.cluster;
  eo.candidate_id = advertise_;
  eo.ttl_ms = options_.lease_ttl_ms;
  eo.poll_ms = options_.poll_ms;
  eo.on_elected = [this](int64_t epoch) {
    MutexLock lock(&events_mu_);
    elected_ = epoch;
  };
  eo.on_lost = [this](std::string_view why) {
    MutexLock lock(&events_mu_);
    lost_ = std::string(why);
  };
  ASSIGN_OR_RETURN(election_, LeaderElection::Create(*etcd_, std::move(eo)));
  return election_->Start();
}

template <typename MasterT>
void HaMaster<MasterT>::RestartElection() {
  if (election_ != nullptr) election_->Resign().IgnoreError();
  {
    MutexLock lock(&events_mu_);
    elected_.reset();  // of the term just resigned
    lost_.reset();
  }
  if (absl::Status st = StartElection(); !st.ok()) SetError(st);
}

template <typename MasterT>
absl::Status HaMaster<MasterT>::Register(rpc::ServiceRegistry* registry) {
  const rpc::HandlerOptions fast{.mode = rpc::ExecutionMode::kInline};
  const rpc::HandlerOptions slow{.mode = rpc::ExecutionMode::kWorker};
  // Reads and heartbeats: answered at once.
#define MOONCAKE_HA_SYNC_(Name, opts)                                   \
  if (absl::Status s = registry->Register<rpc::Name##Method>(           \
          [this](const typename rpc::Name##Method::Request& r)          \
              -> absl::StatusOr<typename rpc::Name##Method::Response> { \
            std::shared_ptr<Term> t = serving();                        \
            if (t == nullptr) return NotLeader();                       \
            return t->master->Name(r);                                  \
          },                                                            \
          opts);                                                        \
      !s.ok()) {                                                        \
    return s;                                                           \
  }
  // Changes of the durable state, PutStart included (so a new leader knows
  // every range a writer was given): answered once their entries are stored.
#define MOONCAKE_HA_DURABLE_(Name, opts)                                                      \
  if (absl::Status s = registry->RegisterAsync<rpc::Name##Method>(                            \
          [this](const typename rpc::Name##Method::Request& r, const rpc::ServerCallContext&, \
                 rpc::Responder<typename rpc::Name##Method::Response> done) {                 \
            std::shared_ptr<Term> t = serving();                                              \
            if (t == nullptr) return std::move(done)(NotLeader());                            \
            auto resp = t->master->Name(r);                                                   \
            const uint64_t n = t->writer->appended();                                         \
            auto d = std::make_shared<rpc::Responder<typename rpc::Name##Method::Response>>(  \
                std::move(done));                                                             \
            t->writer->WhenDurable(n, [resp = std::move(resp), d](absl::Status s) mutable {   \
              if (!s.ok()) return std::move(*d)(s);                                           \
              std::move (*d)(std::move(resp));                                                \
            });                                                                               \
          },                                                                                  \
          opts);                                                                              \
      !s.ok()) {                                                                              \
    return s;                                                                                 \
  }
  MOONCAKE_HA_DURABLE_(MountSegment, slow)
  MOONCAKE_HA_DURABLE_(UnmountSegment, slow)
  MOONCAKE_HA_SYNC_(Heartbeat, fast)
  MOONCAKE_HA_DURABLE_(PutStart, slow)
  MOONCAKE_HA_DURABLE_(PutEnd, fast)
  MOONCAKE_HA_DURABLE_(PutRevoke, fast)
  MOONCAKE_HA_SYNC_(GetReplicas, fast)
  MOONCAKE_HA_SYNC_(ReleaseLeases, fast)
  MOONCAKE_HA_SYNC_(TouchObjects, fast)
  MOONCAKE_HA_DURABLE_(Remove, fast)
  MOONCAKE_HA_SYNC_(Exists, fast)
  MOONCAKE_HA_SYNC_(BatchExists, fast)
  MOONCAKE_HA_SYNC_(PrefixQuery, fast)
  MOONCAKE_HA_SYNC_(QueryObjects, slow)
  MOONCAKE_HA_SYNC_(DescribeSegments, fast)
  MOONCAKE_HA_DURABLE_(RemoveAll, slow)
  MOONCAKE_HA_SYNC_(BatchGetReplicas, fast)
  MOONCAKE_HA_DURABLE_(BatchPutStart, slow)
  MOONCAKE_HA_DURABLE_(BatchPutEnd, fast)
#undef MOONCAKE_HA_SYNC_
#undef MOONCAKE_HA_DURABLE_
  // SSD tiers keep state the oplog does not carry: refused, so a tier agent
  // stays idle instead of offloading what a failover would forget. Copies
  // between workers likewise: a copy's destination range is not in the
  // oplog, so a new leader could hand it out again while a deposed leader's
  // task still writes it.
  constexpr std::string_view kTiers = "SSD tiers are";
  constexpr std::string_view kCopies = "copies between workers (drain, copy and move tasks) are";
  RETURN_IF_ERROR(RefuseUnderHa<rpc::TierSyncMethod>(registry, kTiers));
  RETURN_IF_ERROR(RefuseUnderHa<rpc::TierReportMethod>(registry, kTiers));
  RETURN_IF_ERROR(RefuseUnderHa<rpc::CopySyncMethod>(registry, kCopies));
  RETURN_IF_ERROR(RefuseUnderHa<rpc::DrainWorkerMethod>(registry, kCopies));
  RETURN_IF_ERROR(RefuseUnderHa<rpc::DrainStatusMethod>(registry, kCopies));
  RETURN_IF_ERROR(RefuseUnderHa<rpc::CreateCopyTaskMethod>(registry, kCopies));
  RETURN_IF_ERROR(RefuseUnderHa<rpc::CreateMoveTaskMethod>(registry, kCopies));
  RETURN_IF_ERROR(RefuseUnderHa<rpc::QueryTaskMethod>(registry, kCopies));
  // Clones share replica ranges and groups keep visibility state: neither is
  // in the oplog, so a new leader could not rebuild them.
  constexpr std::string_view kShared = "clones and object groups are";
  RETURN_IF_ERROR(RefuseUnderHa<rpc::CloneMethod>(registry, kShared));
  RETURN_IF_ERROR(RefuseUnderHa<rpc::CommitGroupMethod>(registry, kShared));
  RETURN_IF_ERROR(RefuseUnderHa<rpc::RemoveGroupMethod>(registry, kShared));
  if (metrics_ != nullptr) {
    ASSIGN_OR_RETURN(g_leader_, metrics_->GetGauge("mooncake_ha_leader",
                                                   "1 while this master is the leader", {}));
    ASSIGN_OR_RETURN(g_epoch_, metrics_->GetGauge("mooncake_ha_epoch",
                                                  "epoch of the term this master serves", {}));
    ASSIGN_OR_RETURN(g_applied_, metrics_->GetGauge("mooncake_ha_applied_seq",
                                                    "oplog batches replayed or stored", {}));
    ASSIGN_OR_RETURN(g_lag_, metrics_->GetGauge("mooncake_ha_oplog_lag",
                                                "leader: changes not stored yet; standby: "
                                                "batches in etcd not replayed yet",
                                                {}));
    ASSIGN_OR_RETURN(g_snapshot_age_,
                     metrics_->GetGauge("mooncake_ha_snapshot_age_seconds",
                                        "age of the latest snapshot written or loaded", {}));
    ASSIGN_OR_RETURN(c_failovers_, metrics_->GetCounter("mooncake_ha_failovers_total",
                                                        "terms this master won", {}));
    ASSIGN_OR_RETURN(c_step_downs_, metrics_->GetCounter("mooncake_ha_step_downs_total",
                                                         "terms this master lost", {}));
  }
  return absl::OkStatus();
}

template <typename MasterT>
absl::Status HaMaster<MasterT>::LoadSnapshot() {
  ASSIGN_OR_RETURN(auto snap, store_->ReadSnapshot());
  if (!snap.has_value()) return absl::OkStatus();
  hproto::Snapshot s;
  RETURN_IF_ERROR(DecodeRecord(RecordKind::kSnapshot, snap->second, &s));
  if (s.next_seq() != snap->first) {
    return absl::DataLossError(absl::StrCat("snapshot manifest says batch ", snap->first,
                                            ", the snapshot says ", s.next_seq()));
  }
  if (s.next_seq() <= replay_.next_seq()) return absl::OkStatus();  // not newer
  replay_.Load(s);
  MutexLock lock(&status_mu_);
  ++status_.snapshots_loaded;
  status_.snapshot_unix_ns = s.unix_ns();
  return absl::OkStatus();
}

template <typename MasterT>
absl::Status HaMaster<MasterT>::CatchUp() {
  for (;;) {
    ASSIGN_OR_RETURN(auto batches, store_->ReadFrom(replay_.next_seq()));
    if (batches.empty()) return absl::OkStatus();
    if (batches.front().first != replay_.next_seq()) {
      // Truncated behind a snapshot: load it, then go on from there.
      const uint64_t before = replay_.next_seq();
      RETURN_IF_ERROR(LoadSnapshot());
      if (replay_.next_seq() > batches.front().first) {
        return absl::DataLossError(absl::StrCat("snapshot up to batch ", replay_.next_seq() - 1,
                                                " is past the oplog's first batch ",
                                                batches.front().first));
      }
      // Otherwise a hole: the leader stores batches concurrently, and a later
      // one may land first. Wait for it (a new leader discards what follows a
      // hole its predecessor never filled: none of it was acknowledged).
      if (replay_.next_seq() == before) return absl::OkStatus();
      continue;
    }
    for (const auto& [seq, bytes] : batches) {
      if (seq != replay_.next_seq()) break;  // read again from there
      hproto::OplogBatch b;
      RETURN_IF_ERROR(DecodeRecord(RecordKind::kBatch, bytes, &b));
      if (b.seq() != seq) {
        return absl::DataLossError(
            absl::StrCat("oplog batch stored as ", seq, " says it is ", b.seq()));
      }
      RETURN_IF_ERROR(replay_.Apply(b));
    }
  }
}

template <typename MasterT>
absl::Status HaMaster<MasterT>::Start(std::string advertise) {
  advertise_ = std::move(advertise);
  RETURN_IF_ERROR(ValidateClusterName(options_.cluster));
  if (options_.lease_ttl_ms < 1000 || options_.poll_ms <= 0) {
    return absl::InvalidArgumentError("HA: lease TTL must be >= 1000 ms and poll_ms > 0");
  }
  ASSIGN_OR_RETURN(EtcdClient etcd, EtcdClient::Create(options_.etcd));
  etcd_ = etcd;
  store_.emplace(etcd, options_.cluster);
  {
    MutexLock lock(&replay_mu_);
    if (absl::Status s = LoadSnapshot(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("HA cluster '", options_.cluster, "' at ",
                                                 etcd.Describe(), ": ", s.message()));
    }
    if (absl::Status s = CatchUp(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("HA cluster '", options_.cluster, "' at ",
                                                 etcd.Describe(), ": ", s.message()));
    }
  }
  RETURN_IF_ERROR(StartElection());
  role_thread_ = std::thread([this] { RoleLoop(); });
  return absl::OkStatus();
}

template <typename MasterT>
void HaMaster<MasterT>::Stop() {
  {
    MutexLock lock(&events_mu_);
    if (stop_) return;
    stop_ = true;
  }
  if (role_thread_.joinable()) role_thread_.join();
  // Hand over at once: finish this term's writes, then resign.
  std::shared_ptr<Term> t = current();
  if (t != nullptr) {
    {
      MutexLock lock(&term_mu_);
      term_.reset();  // new calls answer UNAVAILABLE (clients go to the next leader)
    }
    // Calls already made are answered once stored (bounded: 2 lease TTLs).
    const absl::Time until = absl::Now() + absl::Milliseconds(2 * options_.lease_ttl_ms);
    while (t->writer->lag() > 0 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(1));
    t->writer->Stop();
    MutexLock lock(&replay_mu_);
    DrainMirror();
  }
  if (election_ != nullptr) {
    if (t != nullptr) {
      election_->Resign().IgnoreError();
    } else {
      election_->Stop();
    }
  }
}

template <typename MasterT>
void HaMaster<MasterT>::RoleLoop() {
  int64_t last_tick_ns = 0;
  for (;;) {
    std::optional<int64_t> elected;
    std::optional<std::string> lost;
    {
      MutexLock lock(&events_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(events_mu_) {
        return stop_ || elected_.has_value() || lost_.has_value();
      };
      events_mu_.AwaitWithTimeout(
          Condition(&ready),
          absl::Milliseconds(std::min(options_.poll_ms, options_.tick_interval_ms)));
      if (stop_) return;
      std::swap(elected, elected_);
      std::swap(lost, lost_);
    }
    if (lost.has_value() && current() != nullptr) {
      Demote(*lost);
      // Fenced while the election still holds the lease: give it up, or no
      // one would serve.
      if (election_ != nullptr && election_->IsLeader()) RestartElection();
    }
    if (elected.has_value() && current() == nullptr) {
      if (absl::Status st = Promote(*elected); !st.ok()) {
        SetError(st);
        RestartElection();  // let another one try; this one campaigns again
      }
    }
    std::shared_ptr<Term> t = current();
    if (t == nullptr) {
      {
        MutexLock lock(&replay_mu_);
        if (absl::Status st = CatchUp(); !st.ok()) SetError(st);
        if (auto last = store_->LastSeq(); last.ok()) {
          standby_lag_ = last->has_value() && **last >= replay_.next_seq()
                             ? **last - replay_.next_seq() + 1
                             : 0;
        }
      }
      if (auto l = ReadLeader(*etcd_, options_.cluster); l.ok()) {
        MutexLock lock(&status_mu_);
        leader_hint_ =
            l->has_value() ? absl::StrCat((*l)->id, " (epoch ", (*l)->epoch, ")") : std::string();
      }
    } else {
      RefreshServeUntil();
      const int64_t now = MonotonicClock::Get().NowNs();
      if (now - last_tick_ns >= options_.tick_interval_ms * 1'000'000) {
        t->master->Tick();
        last_tick_ns = now;
      }
      MaybeSnapshot(t);
    }
    RefreshGauges();
  }
}

template <typename MasterT>
absl::Status HaMaster<MasterT>::Promote(int64_t epoch) {
  std::vector<master::RestoredSegment> segments;
  std::vector<master::RestoredObject> objects;
  std::vector<master::RestoredHold> holds;
  uint64_t bad = 0, first_seq = 0, next_id = 0;
  {
    MutexLock lock(&replay_mu_);
    // The old leader is fenced now: everything it stored is in etcd.
    RETURN_IF_ERROR(CatchUp());
    // Batches after a hole it never filled were never acknowledged (changes
    // are acknowledged in seq order): discard them so the seqs are ours.
    ASSIGN_OR_RETURN(std::optional<uint64_t> last, store_->LastSeq());
    if (last.has_value() && *last >= replay_.next_seq()) {
      RETURN_IF_ERROR(store_->DiscardFrom(epoch, replay_.next_seq()));
      Event(absl::StrCat("HA: discarded unacknowledged oplog batches ", replay_.next_seq(), "..",
                         *last, " after a hole the previous leader left"));
    }
    replay_.ToRestore(ClockPair{MonotonicClock::Get().NowNs(), absl::GetCurrentTimeNanos()},
                      &segments, &objects, &bad, &holds);
    first_seq = replay_.next_seq();
    next_id = replay_.next_id();
  }
  ASSIGN_OR_RETURN(std::unique_ptr<MasterT> fresh, factory_());
  std::shared_ptr<MasterT> m(std::move(fresh));
  const int64_t restore_start = MonotonicClock::Get().NowNs();
  ASSIGN_OR_RETURN(master::RestoreReport report,
                   m->Restore(std::move(segments), std::move(objects), next_id, std::move(holds)));
  auto term = std::make_shared<Term>();
  term->epoch = epoch;
  term->master = m;
  std::weak_ptr<MasterT> weak = m;
  term->writer = std::make_unique<OplogWriter>(
      epoch, first_seq, &MonotonicClock::Get(),
      [this, epoch](uint64_t seq, std::string_view bytes) {
        return store_->Append(epoch, seq, bytes);
      },
      [this](hproto::OplogBatch&& b) {
        // Queued: applied to the mirror by the role thread, so a snapshot
        // being written never holds up a commit.
        MutexLock lock(&mirror_mu_);
        mirror_queue_.push_back(std::move(b));
      },
      [this](const absl::Status& s) {
        MutexLock lock(&events_mu_);
        lost_ = std::string(s.message());
      },
      [weak] {
        std::shared_ptr<MasterT> mm = weak.lock();
        return mm == nullptr ? uint64_t{0} : mm->NextId();
      },
      options_.writer);
  m->SetMutationLog(term->writer.get());
  term->writer->Start();
  RefreshServeUntil();
  {
    MutexLock lock(&term_mu_);
    term_ = term;
  }
  {
    MutexLock lock(&status_mu_);
    status_.leader = true;
    status_.epoch = epoch;
    ++status_.failovers;
  }
  if (c_failovers_ != nullptr) c_failovers_->Increment();
  Event(absl::StrCat(
      "HA: leader of '", options_.cluster, "' (epoch ", epoch, "): restored ", report.objects,
      " objects, ", report.pending, " pending puts and ", report.segments, " segments",
      report.held_ranges > 0
          ? absl::StrCat(" (", report.held_ranges, " ranges held for live write capabilities)")
          : std::string(),
      " from oplog batch ", first_seq - 1, " in ",
      (MonotonicClock::Get().NowNs() - restore_start) / 1'000'000, " ms",
      report.dropped_objects + report.dropped_replicas + bad > 0
          ? absl::StrCat("; dropped ", report.dropped_objects, " objects and ",
                         report.dropped_replicas,
                         " replicas that could not be "
                         "restored, ",
                         bad, " unreadable records")
          : std::string()));
  last_snapshot_ = absl::Now();
  {
    MutexLock lock(&replay_mu_);
    batches_at_snapshot_ = replay_.batches();
  }
  return absl::OkStatus();
}

template <typename MasterT>
void HaMaster<MasterT>::Demote(const std::string& why) {
  std::shared_ptr<Term> t;
  {
    MutexLock lock(&term_mu_);
    t = std::move(term_);
  }
  if (t == nullptr) return;
  t->writer->Stop();  // waiters answered UNAVAILABLE
  {
    MutexLock lock(&replay_mu_);
    DrainMirror();  // the mirror now holds every stored batch
  }
  {
    MutexLock lock(&status_mu_);
    status_.leader = false;
    ++status_.step_downs;
    status_.last_error = absl::StrCat("stepped down: ", why);
  }
  if (c_step_downs_ != nullptr) c_step_downs_->Increment();
  Event(absl::StrCat("HA: stepped down from epoch ", t->epoch, ": ", why,
                     "; following the oplog again"));
  // The mirror holds exactly the stored batches: following resumes there.
}

template <typename MasterT>
void HaMaster<MasterT>::MaybeSnapshot(const std::shared_ptr<Term>& term) {
  hproto::Snapshot snap;
  {
    MutexLock lock(&replay_mu_);
    DrainMirror();
    if (replay_.batches() - batches_at_snapshot_ < options_.snapshot_every_batches ||
        absl::Now() - last_snapshot_ < options_.snapshot_min_interval) {
      return;
    }
    snap = replay_.ToSnapshot(absl::GetCurrentTimeNanos());
    batches_at_snapshot_ = replay_.batches();
  }
  last_snapshot_ = absl::Now();
  const std::string bytes = EncodeRecord(RecordKind::kSnapshot, snap);
  absl::Status s = store_->WriteSnapshot(term->epoch, snap.next_seq(), bytes);
  if (s.ok()) s = store_->TruncateBelow(snap.next_seq());
  if (!s.ok()) {
    SetError(s);
    return;
  }
  // etcd keeps every revision of every key until compacted: drop the
  // history of the truncated batches (current values stay).
  if (auto r = etcd_->Range(store_->keys().Leader()); r.ok() && r->revision > 0) {
    if (absl::Status c = etcd_->Compact(r->revision); !c.ok() && !absl::IsFailedPrecondition(c)) {
      SetError(c);
    }
  }
  {
    MutexLock lock(&status_mu_);
    ++status_.snapshots_written;
    status_.snapshot_unix_ns = snap.unix_ns();
  }
  Event(absl::StrCat("HA: snapshot of ", snap.objects_size(), " objects (", bytes.size(),
                     " bytes) up to oplog batch ", snap.next_seq() - 1,
                     "; the oplog behind it is truncated"));
}

template <typename MasterT>
void HaMaster<MasterT>::RefreshGauges() {
  std::shared_ptr<Term> t = current();
  uint64_t applied = 0;
  {
    MutexLock lock(&replay_mu_);
    applied = replay_.next_seq() - 1;
  }
  HaMasterStatus st;
  {
    MutexLock lock(&status_mu_);
    status_.applied_seq = applied;
    st = status_;
  }
  if (g_leader_ == nullptr) return;
  g_leader_->Set(t != nullptr ? 1.0 : 0.0);
  g_epoch_->Set(static_cast<double>(t != nullptr ? t->epoch : 0));
  g_applied_->Set(static_cast<double>(applied));
  uint64_t standby_lag = 0;
  {
    MutexLock lock(&replay_mu_);
    standby_lag = standby_lag_;
  }
  g_lag_->Set(static_cast<double>(t != nullptr ? t->writer->lag() : standby_lag));
  g_snapshot_age_->Set(
      st.snapshot_unix_ns == 0
          ? 0.0
          : static_cast<double>(absl::GetCurrentTimeNanos() - st.snapshot_unix_ns) / 1e9);
}

}  // namespace mooncake::ha

#endif  // MOONCAKE_STORE_HA_HA_MASTER_H_
