// The chaos campaign's verifying clients: `clients` threads in the campaign
// process, each with its own channel to the master (following the HA leader
// through etcd with --ha) and its own store Client, doing a seeded random mix
// of put / get / remove on keys only it writes, and prefix reads
// (GetPrefixInto) over a chain of block keys only it writes. Every operation
// becomes one history line (history.h) when it completes; the judging is the
// checker's, from the history alone.
//
// Values are ha_failover's Value(key, version): 1 KiB..256 KiB, determined by
// key and version, their first 8 bytes the version; so the history needs
// only the version a read's bytes claim and their digest.
//
// Thread-safety: Start/Stop/Pending from the campaign's thread; each client's
// state belongs to its thread, except `inflight` (its own mutex).
#ifndef MOONCAKE_TOOLS_CHAOS_CLIENTS_H_
#define MOONCAKE_TOOLS_CHAOS_CLIENTS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
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
#include "mooncake/base/clock.h"
#include "mooncake/base/hash.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/client.h"
#include "mooncake/store/ha/leader_resolver.h"
#include "mooncake/store/rpc/object_key.h"
#include "mooncake/store/rpc/tcp_channel.h"
#include "tools/chaos/history.h"
#include "tools/ha_failover/workload.h"

namespace mooncake::chaos {

struct ClientsOptions {
  std::string master;  // host:port of a single master; "" with etcd
  std::string etcd;    // "http://host:port" of an HA cluster's etcd
  std::string cluster;
  int clients = 8;
  int keys_per_client = 24;
  int chain_blocks = 4;
  uint64_t seed = 1;
  int64_t rpc_timeout_ms = 2'000;
};

inline int64_t NowNs() { return MonotonicClock::Get().NowNs(); }

class ChaosClients {
 public:
  ChaosClients(ClientsOptions o, HistoryWriter* history) : options_(std::move(o)), h_(history) {}
  ChaosClients(const ChaosClients&) = delete;
  ChaosClients& operator=(const ChaosClients&) = delete;
  ~ChaosClients() { Join(); }

  absl::Status Start() {
    for (int i = 0; i < options_.clients; ++i) {
      auto c = std::make_unique<One>();
      c->index = i;
      RETURN_IF_ERROR(Open(*c));
      for (int k = 0; k < options_.keys_per_client; ++k)
        c->keys.push_back(absl::StrCat("c", i, "/k", k));
      for (int b = 0; b < options_.chain_blocks; ++b) {
        const std::string name = absl::StrCat("c", i, "/b", b);
        c->chain.push_back(StableHash128(name, options_.seed));
        c->block_names.push_back(name);
        c->next_version[name] = 1;
      }
      clients_.push_back(std::move(c));
    }
    for (auto& c : clients_) c->thread = std::thread([this, p = c.get()] { Run(*p); });
    return absl::OkStatus();
  }

  void RequestStop() { stop_.store(true, std::memory_order_relaxed); }
  // True once every client has finished its last operation.
  bool AllIdle() const {
    for (const auto& c : clients_) {
      if (!c->done.load(std::memory_order_acquire)) return false;
    }
    return true;
  }
  // Writes a pending line for every operation still running (the campaign
  // gave up on it); returns how many.
  int RecordPending() {
    int n = 0;
    for (auto& c : clients_) {
      MutexLock lock(&c->mu);
      if (c->inflight.empty()) continue;
      Record r = c->inflight;
      r["end_ns"] = absl::StrCat(NowNs());
      r["res"] = "pending";
      h_->Append(r);
      c->inflight.clear();
      ++n;
    }
    return n;
  }
  // After Join (every client idle): reads every key and block of every
  // client once more (up to 3 tries), into the history, for the checker,
  // until `deadline`; returns how many keys it did not get to (a cluster
  // that cannot answer must not hold the campaign forever).
  int Verify(absl::Time deadline) {
    int skipped = 0;
    for (auto& c : clients_) {
      std::vector<std::pair<std::string, std::string>> all;
      for (const std::string& k : c->keys) all.emplace_back(k, k);
      for (size_t b = 0; b < c->chain.size(); ++b) {
        all.emplace_back(c->block_names[b], rpc::BlockObjectKey(c->chain[b]));
      }
      for (const auto& [key, store_key] : all) {
        if (absl::Now() > deadline) {
          ++skipped;
          continue;
        }
        for (int attempt = 0; attempt < 3; ++attempt) {
          Record r = Begin(*c, "get", key, 0);
          absl::StatusOr<std::string> got = c->client->Get(store_key, {.bypass_cache = true});
          if (got.ok()) Describe(*got, r);
          End(*c, r, got.status());
          if (got.ok() || absl::IsNotFound(got.status())) break;
        }
      }
    }
    return skipped;
  }

  void Join() {
    RequestStop();
    for (auto& c : clients_) {
      if (c->thread.joinable()) c->thread.join();
    }
  }

 private:
  struct One {
    int index = 0;
    std::unique_ptr<rpc::TcpChannel> channel;
    std::unique_ptr<client::Client<rpc::TcpChannel>> client;
    std::vector<std::string> keys;
    std::vector<Hash128> chain;
    std::vector<std::string> block_names;
    std::map<std::string, uint64_t> next_version;
    std::thread thread;
    std::atomic<bool> done{false};
    Mutex mu;
    Record inflight ABSL_GUARDED_BY(mu);  // the running operation's line; empty when idle
  };

  absl::Status Open(One& c) {
    rpc::TcpChannelOptions co;
    if (!options_.etcd.empty()) {
      ASSIGN_OR_RETURN(co.resolve, ha::LeaderResolver(options_.etcd, options_.cluster));
      co.failover_retry_ns = 50'000'000;
    }
    co.connect_timeout_ns = options_.rpc_timeout_ms * 1'000'000;
    co.default_timeout_ns = options_.rpc_timeout_ms * 1'000'000;
    ASSIGN_OR_RETURN(c.channel, rpc::TcpChannel::Connect(options_.master, co));
    client::ClientOptions opts;
    opts.client_id = absl::StrCat("chaos/", c.index);
    opts.rpc_timeout_ms = options_.rpc_timeout_ms;
    ASSIGN_OR_RETURN(c.client, client::Client<rpc::TcpChannel>::Create(opts, c.channel.get()));
    return absl::OkStatus();
  }

  void Run(One& c) {
    std::mt19937_64 rng(options_.seed * 1'000'003 + c.index);
    std::vector<std::string> buffers(options_.chain_blocks,
                                     std::string(ha_failover::kMaxValueBytes, '\0'));
    while (!stop_.load(std::memory_order_relaxed)) {
      const uint64_t dice = rng() % 100;
      if (dice < 13) {
        Prefix(c, buffers);
        continue;
      }
      const bool block = dice < 25;
      const std::string key =
          block ? c.block_names[rng() % c.block_names.size()] : c.keys[rng() % c.keys.size()];
      const std::string store_key = block ? rpc::BlockObjectKey(c.chain[IndexOf(c, key)]) : key;
      const uint64_t d2 = rng() % 100;
      if (d2 < 45) {
        Put(c, key, store_key);
      } else if (d2 < 85) {
        Get(c, key, store_key);
      } else {
        Remove(c, key, store_key);
      }
    }
    c.done.store(true, std::memory_order_release);
  }

  static size_t IndexOf(const One& c, const std::string& name) {
    for (size_t i = 0; i < c.block_names.size(); ++i) {
      if (c.block_names[i] == name) return i;
    }
    return 0;
  }

  Record Begin(One& c, const char* op, const std::string& key, uint64_t v) {
    Record r = {{"t", "op"},  {"c", absl::StrCat(c.index)}, {"op", op},
                {"key", key}, {"v", absl::StrCat(v)},       {"inv_ns", absl::StrCat(NowNs())}};
    MutexLock lock(&c.mu);
    c.inflight = r;
    return r;
  }
  // A failed call backs off 10 ms, as a real client would, so that a master
  // that refuses connections at once is not asked thousands of times a second.
  void End(One& c, Record& r, const absl::Status& s) {
    if (!s.ok() && !absl::IsNotFound(s)) absl::SleepFor(absl::Milliseconds(10));
    r["end_ns"] = absl::StrCat(NowNs());
    r["res"] = s.ok() ? "ok" : absl::IsNotFound(s) ? "not_found" : "fail";
    if (!s.ok() && !absl::IsNotFound(s)) r["code"] = absl::StatusCodeToString(s.code());
    {
      MutexLock lock(&c.mu);
      c.inflight.clear();
    }
    h_->Append(r);
  }

  void Put(One& c, const std::string& key, const std::string& store_key) {
    const uint64_t v = c.next_version[key]++;
    const std::string value = ha_failover::Value(key, v);
    Record r = Begin(c, "put", key, v);
    r["digest"] = absl::StrCat(Digest(value));
    r["size"] = absl::StrCat(value.size());
    End(c, r, c.client->Put(store_key, value, {.replace = true}));
  }

  void Get(One& c, const std::string& key, const std::string& store_key) {
    Record r = Begin(c, "get", key, 0);
    absl::StatusOr<std::string> got = c.client->Get(store_key);
    if (got.ok()) Describe(*got, r);
    End(c, r, got.status());
  }

  void Remove(One& c, const std::string& key, const std::string& store_key) {
    Record r = Begin(c, "remove", key, 0);
    End(c, r, c.client->Remove(store_key));
  }

  // The version `bytes` claim and their digest.
  static void Describe(std::string_view bytes, Record& r) {
    uint64_t v = 0;
    if (bytes.size() >= sizeof(v)) std::memcpy(&v, bytes.data(), sizeof(v));
    r["v"] = absl::StrCat(v);
    r["digest"] = absl::StrCat(Digest(bytes));
    r["size"] = absl::StrCat(bytes.size());
  }

  // GetPrefixInto reports how many blocks it read, not their sizes; a block's
  // size follows from the version it claims (Value's size is a function of
  // key and version), so that many bytes are digested.
  void Prefix(One& c, std::vector<std::string>& buffers) {
    std::vector<client::BlockBuffer> bufs;
    for (auto& b : buffers) {
      std::memset(b.data(), 0, sizeof(uint64_t));
      bufs.push_back({b.data(), b.size()});
    }
    Record r = Begin(c, "prefix", absl::StrCat("c", c.index, "/chain"), 0);
    r["size"] = absl::StrCat(c.chain.size());
    absl::StatusOr<size_t> n = c.client->GetPrefixInto(c.chain, bufs);
    if (n.ok()) r["v"] = absl::StrCat(*n);
    End(c, r, n.status());
    if (!n.ok()) return;
    for (size_t i = 0; i < *n; ++i) {
      uint64_t v = 0;
      std::memcpy(&v, buffers[i].data(), sizeof(v));
      size_t size = ha_failover::Value(c.block_names[i], v).size();
      Record b = r;
      b["op"] = "prefix_block";
      b["key"] = c.block_names[i];
      Describe(std::string_view(buffers[i].data(), std::min(size, buffers[i].size())), b);
      h_->Append(b);
    }
  }

  const ClientsOptions options_;
  HistoryWriter* const h_;
  std::vector<std::unique_ptr<One>> clients_;
  std::atomic<bool> stop_{false};  // relaxed: a request; threads finish their op first
};

}  // namespace mooncake::chaos

#endif  // MOONCAKE_TOOLS_CHAOS_CLIENTS_H_
