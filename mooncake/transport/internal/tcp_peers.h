// TcpPeers: the requester side of TcpTransport: one TcpPeer per peer
// endpoint, its paths (internal/tcp_paths.h) and lanes (internal/tcp_lane.h),
// and, once a peer has several paths, the rescue thread.
//
// A peer's lanes: lanes_per_peer per path, path p's at [p * L, (p + 1) * L).
// A single-path peer (the default) behaves as TcpTransport always did: a
// dead lane's share goes to a live lane, lanes are reconnected by the next
// Enqueue, and there is no observer and no thread. With several paths, a
// lane that dies hands its slices to the rescue thread (PathState::Rescue),
// which puts them on paths that are up and reconnects a down path's lanes
// once its backoff is over.
//
// Lock order: TcpPeers::mu_ and TcpPeer::mu are never held together; a
// lane's locks come after TcpPeer::mu. The rescue thread connects outside
// every lock.
// Thread-safety: every method may be called concurrently.
#ifndef MOONCAKE_TRANSPORT_INTERNAL_TCP_PEERS_H_
#define MOONCAKE_TRANSPORT_INTERNAL_TCP_PEERS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/mutex.h"
#include "mooncake/transport/internal/batch_table.h"
#include "mooncake/transport/internal/tcp_lane.h"
#include "mooncake/transport/internal/tcp_paths.h"

namespace mooncake::transport_internal {

// One (local address -> peer address) route; `state` only when the peer
// has several (a single-path peer's lanes have no observer).
struct TcpPath {
  std::string local_host;  // "": unbound
  std::string host;
  uint16_t port = 0;
  std::unique_ptr<PathState> state;
};
struct TcpPeer {
  std::string host;  // the first address: the key in peers_
  uint16_t port = 0;
  std::vector<TcpPath> paths;          // fixed at creation, at least one
  std::unique_ptr<PathPicker> picker;  // several paths only
  std::atomic<size_t> rescue_rr{0};
  Mutex mu;
  // lanes_per_peer per path: path p's are [p * L, (p + 1) * L). Declared
  // after `paths`: lanes stop (and stop calling their observer) first.
  std::vector<std::shared_ptr<TcpLane>> lanes ABSL_GUARDED_BY(mu);
  size_t next_lane ABSL_GUARDED_BY(mu) = 0;
  bool multi() const { return paths.size() > 1; }
};

class TcpPeers {
 public:
  using Address = std::pair<std::string, uint16_t>;
  static constexpr size_t kNoLane = ~size_t{0};

  struct Config {
    size_t lanes_per_peer = 2;
    absl::Duration connect_timeout = absl::Seconds(2);
    TcpLane::Limits limits;
    std::vector<std::pair<std::string, double>> local_paths;  // (address, weight)
    uint32_t retries_max = 4;
    absl::Duration backoff_min = absl::Milliseconds(200);
    absl::Duration backoff_max = absl::Seconds(5);
  };

  // `batches`, `queued` (the transport's unsettled slices) and `registry`
  // outlive this.
  TcpPeers(Config config, BatchTable* batches, std::atomic<size_t>* queued,
           MetricsRegistry* registry, std::string_view transport_name)
      : config_(std::move(config)),
        batches_(batches),
        queued_(queued),
        registry_(registry),
        name_(transport_name) {
    MC_ASSERT(config_.lanes_per_peer >= 1 && batches != nullptr && queued != nullptr,
              "TcpPeers settings");
  }
  ~TcpPeers() { Shutdown(); }
  TcpPeers(const TcpPeers&) = delete;
  TcpPeers& operator=(const TcpPeers&) = delete;

  // Stops the rescue thread (failing what it held with Cancelled), then
  // every lane (failing their slices). Idempotent.
  void Shutdown() {
    StopRescue();
    absl::flat_hash_map<std::string, std::shared_ptr<TcpPeer>> peers;
    {
      MutexLock lock(&mu_);
      peers.swap(peers_);
    }
  }

  std::shared_ptr<TcpPeer> Find(const Address& addr) {
    MutexLock lock(&mu_);
    auto it = peers_.find(JoinHostPort(addr.first, addr.second));
    return it == peers_.end() ? nullptr : it->second;
  }

  // Enqueues lanes[l] (by the peer's lane index) on the peer's lanes, or
  // live ones in their place; claims the lane that gets lanes[claim_lane]
  // (kNoLane: none) and returns it.
  std::shared_ptr<TcpLane> Enqueue(TcpPeer& peer, LaneSlices& lanes, size_t claim_lane) {
    return peer.multi() ? EnqueueOnPaths(peer, lanes, claim_lane)
                        : EnqueueOnPeer(peer, lanes, claim_lane);
  }

  // Each path to the peer at `addr`: counters, capacity, up/down. Empty for
  // an unknown peer or one reached over a single path.
  std::vector<PathState::Stats> PathStats(const Address& addr) {
    std::vector<PathState::Stats> out;
    if (std::shared_ptr<TcpPeer> peer = Find(addr); peer != nullptr) {
      for (const TcpPath& p : peer->paths) {
        if (p.state != nullptr) out.push_back(p.state->stats());
      }
    }
    return out;
  }

  // Every lane of every peer, kept alive by the caller (a lane replaced
  // meanwhile stops in its destructor, after the caller let go of it).
  std::vector<std::shared_ptr<TcpLane>> AllLanes() {
    std::vector<std::shared_ptr<TcpLane>> out;
    for (const auto& peer : AllPeers()) {
      MutexLock lock(&peer->mu);
      for (const auto& lane : peer->lanes) {
        if (lane != nullptr) out.push_back(lane);
      }
    }
    return out;
  }

  // The peer at `addrs` (created with its paths on first use), with its
  // lanes reconnected; Unavailable if none connects.
  absl::StatusOr<std::shared_ptr<TcpPeer>> Get(const std::vector<Address>& addrs) {
    std::shared_ptr<TcpPeer> peer;
    {
      MutexLock lock(&mu_);
      auto& slot = peers_[JoinHostPort(addrs.front().first, addrs.front().second)];
      if (slot == nullptr) slot = NewPeerLocked(addrs);
      peer = slot;
    }
    MutexLock lock(&peer->mu);
    RETURN_IF_ERROR(ReviveLanesLocked(*peer, /*force=*/true));
    return peer;
  }

 private:
  std::shared_ptr<TcpPeer> NewPeerLocked(const std::vector<Address>& addrs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto peer = std::make_shared<TcpPeer>();
    peer->host = addrs.front().first;
    peer->port = addrs.front().second;
    std::vector<std::string> local, remote;
    for (const auto& p : config_.local_paths) local.push_back(p.first);
    for (const auto& [h, port] : addrs) remote.push_back(h);
    for (const auto& [l, r] : PairPaths(local, remote)) {
      TcpPath path;
      path.local_host = l < 0 ? std::string() : local[l];
      path.host = addrs[r].first;
      path.port = addrs[r].second;
      peer->paths.push_back(std::move(path));
    }
    if (!peer->multi()) return peer;
    peer->picker = std::make_unique<PathPicker>(peer->paths.size());
    for (size_t i = 0; i < peer->paths.size(); ++i) {
      TcpPath& path = peer->paths[i];
      const auto [l, r] = PairPaths(local, remote)[i];
      PathState::Config c;
      c.name = absl::StrCat(path.local_host.empty() ? "*" : path.local_host, "->",
                            JoinHostPort(path.host, path.port));
      c.weight = l < 0 ? 1.0 : config_.local_paths[l].second;
      c.retries_max = config_.retries_max;
      c.backoff_min = config_.backoff_min;
      c.backoff_max = config_.backoff_max;
      path.state = std::make_unique<PathState>(c, &MonotonicClock::Get(), &rescue_, peer.get(),
                                               *registry_, name_);
    }
    if (!rescue_thread_.joinable()) rescue_thread_ = std::thread([this] { RescueLoop(); });
    return peer;
  }

  // Replaces dead or missing lanes; OK if at least one lane is live. A down
  // path is left to the rescue thread unless `force` (nothing else is live).
  absl::Status ReviveLanesLocked(TcpPeer& peer, bool force) ABSL_EXCLUSIVE_LOCKS_REQUIRED(peer.mu) {
    const size_t per_path = config_.lanes_per_peer;
    peer.lanes.resize(peer.paths.size() * per_path);
    std::vector<std::string> errors;
    size_t unauthenticated = 0;  // of `errors`
    absl::Status last;
    size_t live = 0;
    std::vector<bool> skip(peer.paths.size(), false);
    for (size_t i = 0; i < peer.lanes.size(); ++i) {
      auto& lane = peer.lanes[i];
      TcpPath& path = peer.paths[i / per_path];
      if (lane != nullptr && !lane->dead()) {
        ++live;
        continue;
      }
      if (skip[i / per_path] || (path.state != nullptr && !force && !path.state->up())) continue;
      auto fresh = std::make_shared<TcpLane>(batches_, queued_, config_.limits, path.state.get());
      last = fresh->Connect(path.host, path.port, absl::Now() + config_.connect_timeout,
                            path.local_host);
      if (!last.ok()) {
        if (path.state == nullptr) continue;
        skip[i / per_path] = true;  // one failed connect per path and round
        path.state->MarkDown(last);
        errors.push_back(absl::StrCat(path.state->name(), ": ", last.ToString()));
        if (absl::IsUnauthenticated(last)) ++unauthenticated;
        continue;
      }
      if (path.state != nullptr) path.state->MarkUp();
      lane = std::move(fresh);  // the old lane (if any) stops and fails its slices
      ++live;
    }
    if (live > 0) return absl::OkStatus();
    if (!peer.multi()) return last;
    // Refused authentication on every path is not a transient outage.
    const std::string why = absl::StrCat("no path to ", JoinHostPort(peer.host, peer.port),
                                         " connects (", absl::StrJoin(errors, "; "), ")");
    return unauthenticated == errors.size() && !errors.empty() ? absl::UnauthenticatedError(why)
                                                               : absl::UnavailableError(why);
  }

  // Enqueues lanes[l] on the peer's lane l (or a live one in its place);
  // claims the lane that gets lanes[claim_lane] and returns it.
  std::shared_ptr<TcpLane> EnqueueOnPeer(TcpPeer& peer, LaneSlices& lanes, size_t claim_lane) {
    std::shared_ptr<TcpLane> claimed;
    // Kept alive past the lock. Inline: a request's path allocates nothing here.
    absl::InlinedVector<std::shared_ptr<TcpLane>, 4> kicked;
    {
      MutexLock lock(&peer.mu);
      const absl::Status revived =
          AllLive(peer) ? absl::OkStatus() : ReviveLanesLocked(peer, /*force=*/true);
      absl::InlinedVector<size_t, 8> live;
      for (size_t l = 0; l < peer.lanes.size(); ++l) {
        if (peer.lanes[l] != nullptr && !peer.lanes[l]->dead()) live.push_back(l);
      }
      // No lane connects: the slices fail with why (e.g. UNAUTHENTICATED),
      // not with what broke the old lanes. Built only then.
      absl::Status none_live;
      if (live.empty()) {
        none_live = !revived.ok() ? revived
                                  : absl::UnavailableError(absl::StrCat(
                                        "no connection to ", JoinHostPort(peer.host, peer.port)));
      }
      for (size_t l = 0; l < lanes.size(); ++l) {
        if (lanes[l].empty()) continue;
        // A dead lane's share moves to a live one; with none, the slices
        // fail with the reconnect's error.
        const size_t target = live.empty() ? l : live[l % live.size()];
        std::shared_ptr<TcpLane> lane = target < peer.lanes.size() ? peer.lanes[target] : nullptr;
        if (lane == nullptr || (live.empty() && !revived.ok())) {
          for (Slice& s : lanes[l]) {
            batches_->Settle(*s.batch, s.index, none_live);
            // relaxed: a soft bound (see Submit).
            queued_->fetch_sub(1, std::memory_order_relaxed);
          }
          continue;
        }
        const bool claim = l == claim_lane;
        if (!lane->Enqueue(lanes[l], claim)) continue;  // dead: failed the slices
        if (claim) claimed = lane;
        kicked.push_back(std::move(lane));
      }
    }
    for (auto& lane : kicked) lane->Kick();
    return claimed;
  }

  // --- Aggregation (several paths to a peer). ---

 public:
  // Each path's spraying weight now (SprayWeights; the configured weights
  // when every path is down). REQUIRES: peer.multi().
  static std::vector<double> Weights(const TcpPeer& peer) {
    std::vector<PathState*> states;
    for (const TcpPath& p : peer.paths) states.push_back(p.state.get());
    std::vector<double> w = SprayWeights(states);
    if (std::all_of(w.begin(), w.end(), [](double x) { return x <= 0; })) {
      // Every path is down: EnqueueOnPaths reconnects what it can.
      for (size_t i = 0; i < w.size(); ++i) w[i] = states[i]->weight();
    }
    return w;
  }

 private:
  // EnqueueOnPeer for a peer with several paths: a dead lane's share goes to
  // a live lane of its own path, else of another path that is up; with no
  // live lane at all every path is reconnected at once (backoff or not), and
  // if none connects the slices fail with every path's error.
  std::shared_ptr<TcpLane> EnqueueOnPaths(TcpPeer& peer, LaneSlices& lanes, size_t claim_lane) {
    const size_t per_path = config_.lanes_per_peer;
    std::shared_ptr<TcpLane> claimed;
    std::vector<std::shared_ptr<TcpLane>> kicked;  // kept alive past the lock
    ReleasableMutexLock lock(&peer.mu);
    peer.lanes.resize(peer.paths.size() * per_path);
    const auto usable = [&](size_t l) ABSL_EXCLUSIVE_LOCKS_REQUIRED(peer.mu) {
      return peer.lanes[l] != nullptr && !peer.lanes[l]->dead() &&
             peer.paths[l / per_path].state->up();
    };
    std::vector<size_t> live;
    for (size_t l = 0; l < peer.lanes.size(); ++l) {
      if (usable(l)) live.push_back(l);
    }
    absl::Status none;
    if (live.empty()) {
      none = ReviveLanesLocked(peer, /*force=*/true);
      // With nothing else, a down path whose lanes look alive is tried again.
      for (size_t l = 0; l < peer.lanes.size(); ++l) {
        if (none.ok() && peer.lanes[l] != nullptr && !peer.lanes[l]->dead()) {
          peer.paths[l / per_path].state->MarkUp();
        }
      }
      for (size_t l = 0; l < peer.lanes.size(); ++l) {
        if (usable(l)) live.push_back(l);
      }
    }
    for (size_t l = 0; l < peer.lanes.size(); ++l) {
      // A dead lane on a path still up: the path failed while idle.
      if (!lanes[l].empty() && peer.lanes[l] != nullptr && peer.lanes[l]->dead()) {
        (void)peer.paths[l / per_path].state->MarkDown(absl::UnavailableError(
            absl::StrCat("a lane of ", JoinHostPort(peer.host, peer.port), " died while idle")));
      }
    }
    for (size_t l = 0; l < lanes.size(); ++l) {
      if (lanes[l].empty()) continue;
      size_t target = l;
      if (!usable(l)) {
        target = kNoLane;
        const size_t first = l / per_path * per_path;
        for (size_t k = first; k < first + per_path && target == kNoLane; ++k) {
          if (usable(k)) target = k;
        }
        if (target == kNoLane && !live.empty()) target = live[l % live.size()];
      }
      if (target == kNoLane) {
        for (Slice& s : lanes[l])
          SettleNow(s, none.ok() ? absl::UnavailableError("no live path") : none);
        lanes[l].clear();
        continue;
      }
      std::shared_ptr<TcpLane> lane = peer.lanes[target];
      peer.paths[target / per_path].state->Started(lanes[l].size());
      const bool claim = l == claim_lane;
      if (!lane->Enqueue(lanes[l], claim)) continue;  // dead: failed or rescued the slices
      if (claim) claimed = lane;
      kicked.push_back(std::move(lane));
    }
    lock.Release();
    for (auto& lane : kicked) lane->Kick();
    return claimed;
  }

  // Settles a slice no lane holds (rescued, or never placed).
  void SettleNow(const Slice& s, const absl::Status& status) {
    batches_->Settle(*s.batch, s.index, status);
    // relaxed: a soft bound (see Submit).
    queued_->fetch_sub(1, std::memory_order_relaxed);
  }

  // The rescue thread: puts rescued slices on other paths and reconnects
  // down paths whose backoff is over.
  void RescueLoop() {
    absl::Time next_probe = absl::InfiniteFuture();
    for (;;) {
      bool open = true;
      std::vector<RescueQueue::Item> items = rescue_.Take(next_probe, &open);
      if (!open) {
        for (auto& item : items) SettleNow(item.slice, absl::CancelledError("transport shut down"));
        return;
      }
      Redispatch(items);
      next_probe = ProbePaths();
    }
  }

  void Redispatch(std::vector<RescueQueue::Item>& items) {
    const size_t per_path = config_.lanes_per_peer;
    absl::flat_hash_map<TcpPeer*, LaneSlices> per_peer;
    std::vector<std::shared_ptr<TcpPeer>> alive = AllPeers();  // peers outlive their lanes
    for (auto& item : items) {
      if (item.slice.batch->cancelled()) {
        SettleNow(item.slice, absl::CancelledError("cancelled"));
        continue;
      }
      TcpPeer* peer = const_cast<TcpPeer*>(static_cast<const TcpPeer*>(item.peer));
      auto& lanes = per_peer[peer];
      if (lanes.empty()) lanes.resize(peer->paths.size() * per_path);
      const std::vector<double> w = Weights(*peer);
      const size_t path = peer->picker->Pick(w, item.slice.length);
      const size_t lane = peer->rescue_rr.fetch_add(1, std::memory_order_relaxed) % per_path;
      lanes[path * per_path + lane].push_back(std::move(item.slice));
    }
    for (auto& [peer, lanes] : per_peer) (void)EnqueueOnPaths(*peer, lanes, kNoLane);
  }

  // Reconnects the lanes of each down path whose backoff is over (connects
  // outside the peer's lock); returns when the next down path is due.
  absl::Time ProbePaths() {
    absl::Time next = absl::InfiniteFuture();
    for (const std::shared_ptr<TcpPeer>& peer : AllPeers()) {
      if (!peer->multi()) continue;
      for (size_t p = 0; p < peer->paths.size(); ++p) {
        TcpPath& path = peer->paths[p];
        if (path.state->ProbeDue()) {
          std::vector<std::shared_ptr<TcpLane>> fresh;
          absl::Status last;
          for (size_t i = 0; i < config_.lanes_per_peer && last.ok(); ++i) {
            auto lane =
                std::make_shared<TcpLane>(batches_, queued_, config_.limits, path.state.get());
            last = lane->Connect(path.host, path.port, absl::Now() + config_.connect_timeout,
                                 path.local_host);
            if (last.ok()) fresh.push_back(std::move(lane));
          }
          if (fresh.empty()) {
            path.state->ProbeFailed(last);
          } else {
            std::vector<std::shared_ptr<TcpLane>> old;  // stopped past the lock
            MutexLock lock(&peer->mu);
            peer->lanes.resize(peer->paths.size() * config_.lanes_per_peer);
            // Every lane of a down path is suspect (an idle lane does not
            // notice a closed connection): all are replaced, and what an
            // old one still holds is rescued (Unavailable is retryable).
            for (size_t i = 0; i < config_.lanes_per_peer && !fresh.empty(); ++i) {
              auto& slot = peer->lanes[p * config_.lanes_per_peer + i];
              if (slot != nullptr) slot->Abort(absl::UnavailableError("path reconnected"));
              old.push_back(std::exchange(slot, std::move(fresh.back())));
              fresh.pop_back();
            }
            path.state->MarkUp();
          }
        }
        next = std::min(next, path.state->ProbeAt());
      }
    }
    return next;
  }

  void StopRescue() {
    for (auto& item : rescue_.Close()) {
      SettleNow(item.slice, absl::CancelledError("transport shut down"));
    }
    if (rescue_thread_.joinable()) rescue_thread_.join();
  }

 public:
  // Lanes of the peer at `addr` for which pred(lane) holds (tests).
  template <typename Pred>
  size_t CountLanes(const Address& addr, Pred pred) {
    std::shared_ptr<TcpPeer> peer = Find(addr);
    if (peer == nullptr) return 0;
    MutexLock lock(&peer->mu);
    size_t n = 0;
    for (auto& lane : peer->lanes) n += (lane != nullptr && pred(*lane)) ? 1 : 0;
    return n;
  }

 private:
  static bool AllLive(TcpPeer& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(peer.mu) {
    for (auto& lane : peer.lanes) {
      if (lane == nullptr || lane->dead()) return false;
    }
    return true;
  }

  std::vector<std::shared_ptr<TcpPeer>> AllPeers() {
    MutexLock lock(&mu_);
    std::vector<std::shared_ptr<TcpPeer>> out;
    for (auto& [k, p] : peers_) out.push_back(p);
    return out;
  }

  const Config config_;
  BatchTable* const batches_;
  std::atomic<size_t>* const queued_;
  MetricsRegistry* const registry_;
  const std::string name_;
  // Before peers_: their paths point here.
  RescueQueue rescue_;
  std::thread rescue_thread_;  // started with the first peer that has several paths
  Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<TcpPeer>> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_TCP_PEERS_H_
