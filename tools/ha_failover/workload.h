// The failover campaign's load (ha_failover.cc): client threads, each with
// its own TcpChannel that follows the HA leader (ha::LeaderResolver) and its
// own Client, doing a seeded random mix of put / get / remove on keys only it
// writes, checked against a model of what was acknowledged.
//
// Values: Value(key, version) is fully determined by the key and a version
// (its size, 1 KiB..256 KiB, too), and starts with the version, so a get's
// bytes name the version they claim to be and are compared byte for byte.
//
// The model (KeyModel): the versions a get may return and whether it may
// find nothing. An acknowledged put of v: exactly {v}. An acknowledged
// remove: absent. A failed call's outcome is unknown, so it only widens the
// set (a failed put of v adds v; a failed remove allows absent). A get that
// finds nothing where absent is not allowed is LOST; bytes that are not one
// of the allowed versions' bytes are WRONG. A failed get is only failed.
//
// Recovery (RTO): after an event (a kill) the campaign calls
// BeginEvent(); a client's recovery is the end of its first successful call
// that started after that; Recovered() is true once every client recovered.
//
// Thread-safety: Start/Stop/BeginEvent/Recovered/totals from the campaign's
// thread; each Worker's model is touched by its own thread only (and by
// Verify after Stop).
#ifndef MOONCAKE_TOOLS_HA_FAILOVER_WORKLOAD_H_
#define MOONCAKE_TOOLS_HA_FAILOVER_WORKLOAD_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/client.h"
#include "mooncake/store/ha/leader_resolver.h"
#include "mooncake/store/rpc/tcp_channel.h"

namespace mooncake::ha_failover {

using StoreClient = client::Client<rpc::TcpChannel>;

inline uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline constexpr size_t kMinValueBytes = 1 << 10;
inline constexpr size_t kMaxValueBytes = 256 << 10;

// The bytes of `key` at `version` (>= 1): 8 bytes of version, then
// pseudo-random bytes seeded by both.
inline std::string Value(const std::string& key, uint64_t version) {
  uint64_t seed = std::hash<std::string>{}(key) ^ (version * 0x2545f4914f6cdd1dull);
  const size_t size = kMinValueBytes + SplitMix64(seed) % (kMaxValueBytes - kMinValueBytes + 1);
  std::string v(size, '\0');
  std::memcpy(v.data(), &version, sizeof(version));
  for (size_t at = sizeof(version); at < size; at += 8) {
    const uint64_t r = SplitMix64(seed);
    std::memcpy(v.data() + at, &r, std::min<size_t>(8, size - at));
  }
  return v;
}

struct KeyModel {
  std::vector<uint64_t> versions;  // a get may return any of these
  bool maybe_absent = true;        // a get may find nothing
  uint64_t next_version = 1;
};

enum class Verdict { kOk, kLost, kWrong };

// What a get's answer (`got`: bytes, or NOT_FOUND) says about `model`.
inline Verdict Check(const std::string& key, const KeyModel& model,
                     const absl::StatusOr<std::string>& got, std::string* detail) {
  if (absl::IsNotFound(got.status())) {
    if (model.maybe_absent) return Verdict::kOk;
    *detail = absl::StrCat(key, ": NOT_FOUND, expected version ", model.versions.back());
    return Verdict::kLost;
  }
  MC_ASSERT(got.ok(), "Check of a failed get");
  uint64_t v = 0;
  if (got->size() >= sizeof(v)) std::memcpy(&v, got->data(), sizeof(v));
  if (std::find(model.versions.begin(), model.versions.end(), v) != model.versions.end() &&
      *got == Value(key, v)) {
    return Verdict::kOk;
  }
  *detail = absl::StrCat(key, ": got ", got->size(), " bytes claiming version ", v,
                         (*got == Value(key, v) ? " (intact)" : " (corrupt)"),
                         "; allowed: ", model.maybe_absent ? "absent " : "", "versions ");
  for (uint64_t a : model.versions) absl::StrAppend(detail, a, " ");
  return Verdict::kWrong;
}

struct WorkloadOptions {
  std::string etcd;     // "http://127.0.0.1:PORT"
  std::string cluster;  // the HA cluster's name
  int clients = 8;
  int keys_per_client = 32;
  uint64_t seed = 1;
  int64_t op_timeout_ms = 10'000;
  int64_t failover_retry_ms = 50;
};

struct Totals {
  uint64_t ok = 0;
  uint64_t failed = 0;
  uint64_t lost = 0;
  uint64_t wrong = 0;
  std::vector<std::string> anomalies;  // the first few lost / wrong
  std::vector<std::string> failures;   // the first few failed calls
};

// A TcpChannel that follows the leader, and a Client on it.
struct Connection {
  std::unique_ptr<rpc::TcpChannel> channel;
  std::unique_ptr<StoreClient> client;

  static absl::StatusOr<Connection> Open(const WorkloadOptions& o, const std::string& id) {
    ASSIGN_OR_RETURN(auto resolve, ha::LeaderResolver(o.etcd, o.cluster));
    rpc::TcpChannelOptions co;
    co.resolve = std::move(resolve);
    co.failover_retry_ns = o.failover_retry_ms * 1'000'000;
    co.connect_timeout_ns = o.op_timeout_ms * 1'000'000;
    co.default_timeout_ns = o.op_timeout_ms * 1'000'000;
    Connection c;
    ASSIGN_OR_RETURN(c.channel, rpc::TcpChannel::Connect("", co));
    client::ClientOptions opts;
    opts.client_id = id;
    opts.rpc_timeout_ms = o.op_timeout_ms;
    ASSIGN_OR_RETURN(c.client, StoreClient::Create(opts, c.channel.get()));
    return c;
  }
};

class Workload {
 public:
  explicit Workload(WorkloadOptions options) : options_(std::move(options)) {
    for (int i = 0; i < options_.clients; ++i) workers_.push_back(std::make_unique<Worker>());
  }
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;
  ~Workload() { Stop(); }

  absl::Status Start() {
    for (int i = 0; i < options_.clients; ++i) {
      ASSIGN_OR_RETURN(workers_[i]->conn,
                       Connection::Open(options_, absl::StrCat("ha_failover/", i)));
      for (int k = 0; k < options_.keys_per_client; ++k) {
        workers_[i]->keys.push_back(absl::StrCat("c", i, "/k", k));
        workers_[i]->models.emplace_back();
      }
    }
    for (int i = 0; i < options_.clients; ++i) {
      workers_[i]->thread = std::thread([this, i] { Run(i); });
    }
    return absl::OkStatus();
  }

  void Stop() {
    stop_.store(true, std::memory_order_relaxed);
    for (auto& w : workers_) {
      if (w->thread.joinable()) w->thread.join();
    }
  }

  // Marks an event that has just happened (the victim is gone): recovery is
  // measured from the next successful call each client starts after this.
  void BeginEvent() {
    accept_after_ns_.store(std::numeric_limits<int64_t>::max(), std::memory_order_seq_cst);
    for (auto& w : workers_) w->recovered_ns.store(0, std::memory_order_seq_cst);
    accept_after_ns_.store(NowNs(), std::memory_order_seq_cst);
  }
  // The latest recovery time of any client, or nullopt while one has none.
  std::optional<int64_t> Recovered() const {
    int64_t latest = 0;
    for (const auto& w : workers_) {
      const int64_t r = w->recovered_ns.load(std::memory_order_acquire);
      if (r == 0) return std::nullopt;
      latest = std::max(latest, r);
    }
    return latest;
  }

  Totals totals() const {
    Totals t;
    MutexLock lock(&mu_);
    t.ok = ok_.load();
    t.failed = failed_.load();
    t.lost = lost_.load();
    t.wrong = wrong_.load();
    t.anomalies = anomalies_;
    t.failures = failures_;
    return t;
  }

  // After Stop: reads every key once through a new connection (bypassing any
  // cache) and checks it against the model. Adds to lost / wrong; returns how
  // many keys could not be read (errors after 3 tries).
  absl::StatusOr<uint64_t> Verify(uint64_t* keys_checked) {
    ASSIGN_OR_RETURN(Connection c, Connection::Open(options_, "ha_failover/verify"));
    uint64_t unreadable = 0;
    for (auto& w : workers_) {
      for (size_t k = 0; k < w->keys.size(); ++k) {
        absl::StatusOr<std::string> got;
        for (int attempt = 0; attempt < 3; ++attempt) {
          got = c.client->Get(w->keys[k], {.bypass_cache = true});
          if (got.ok() || absl::IsNotFound(got.status())) break;
        }
        ++*keys_checked;
        if (!got.ok() && !absl::IsNotFound(got.status())) {
          ++unreadable;
          Failed("verify get", w->keys[k], got.status());
          continue;
        }
        Judge(w->keys[k], w->models[k], got, "verify");
      }
    }
    return unreadable;
  }

 private:
  struct Worker {
    Connection conn;
    std::vector<std::string> keys;
    std::vector<KeyModel> models;
    std::thread thread;
    std::atomic<int64_t> recovered_ns{0};
  };

  static int64_t NowNs() { return MonotonicClock::Get().NowNs(); }

  void Run(int i) {
    Worker& w = *workers_[i];
    std::mt19937_64 rng(options_.seed * 1'000'003 + i);
    while (!stop_.load(std::memory_order_relaxed)) {
      const size_t k = rng() % w.keys.size();
      const uint64_t dice = rng() % 100;
      const int64_t start = NowNs();
      const bool ok = dice < 45 ? DoPut(w, k) : dice < 85 ? DoGet(w, k) : DoRemove(w, k);
      // The bound is read after the call, so a call that started before an
      // event never counts for it. seq_cst pairs with BeginEvent: seeing the
      // new bound implies seeing recovered_ns reset.
      if (ok && start >= accept_after_ns_.load(std::memory_order_seq_cst)) {
        int64_t expected = 0;
        w.recovered_ns.compare_exchange_strong(expected, NowNs(), std::memory_order_acq_rel);
      }
    }
  }

  bool DoPut(Worker& w, size_t k) {
    KeyModel& m = w.models[k];
    const uint64_t v = m.next_version++;
    const absl::Status s = w.conn.client->Put(w.keys[k], Value(w.keys[k], v), {.replace = true});
    if (s.ok()) {
      m.versions = {v};
      m.maybe_absent = false;
    } else {
      m.versions.push_back(v);
      Failed("put", w.keys[k], s);
    }
    Count(s.ok());
    return s.ok();
  }

  // NOT_FOUND counts as done: the channel sends a call again after a lost
  // answer, so a remove that took effect at the old leader finds nothing at
  // the new one (and a lost put shows up at the gets, not here).
  bool DoRemove(Worker& w, size_t k) {
    KeyModel& m = w.models[k];
    absl::Status s = w.conn.client->Remove(w.keys[k]);
    if (absl::IsNotFound(s)) s = absl::OkStatus();
    if (s.ok()) {
      m.versions.clear();
    } else {
      Failed("remove", w.keys[k], s);
    }
    m.maybe_absent = true;
    Count(s.ok());
    return s.ok();
  }

  bool DoGet(Worker& w, size_t k) {
    absl::StatusOr<std::string> got = w.conn.client->Get(w.keys[k]);
    if (!got.ok() && !absl::IsNotFound(got.status())) {
      Failed("get", w.keys[k], got.status());
      Count(false);
      return false;
    }
    Judge(w.keys[k], w.models[k], got, "get");
    Count(true);
    return true;
  }

  void Judge(const std::string& key, const KeyModel& m, const absl::StatusOr<std::string>& got,
             const char* op) {
    std::string detail;
    switch (Check(key, m, got, &detail)) {
      case Verdict::kOk:
        return;
      case Verdict::kLost:
        lost_.fetch_add(1, std::memory_order_relaxed);
        Note(absl::StrCat("LOST (", op, ") ", detail));
        return;
      case Verdict::kWrong:
        wrong_.fetch_add(1, std::memory_order_relaxed);
        Note(absl::StrCat("WRONG (", op, ") ", detail));
        return;
    }
  }

  void Failed(const char* op, const std::string& key, const absl::Status& s) {
    MutexLock lock(&mu_);
    if (failures_.size() < 10) failures_.push_back(absl::StrCat(op, " ", key, ": ", s.ToString()));
  }

  void Count(bool ok) { (ok ? ok_ : failed_).fetch_add(1, std::memory_order_relaxed); }

  void Note(std::string line) {
    MutexLock lock(&mu_);
    if (anomalies_.size() < 40) anomalies_.push_back(std::move(line));
  }

  const WorkloadOptions options_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> accept_after_ns_{std::numeric_limits<int64_t>::max()};
  std::atomic<uint64_t> ok_{0}, failed_{0}, lost_{0}, wrong_{0};  // counters only: relaxed
  mutable Mutex mu_;
  std::vector<std::string> anomalies_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> failures_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::ha_failover

#endif  // MOONCAKE_TOOLS_HA_FAILOVER_WORKLOAD_H_
