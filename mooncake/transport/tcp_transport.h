// TcpTransport: transfers between processes on any hosts over TCP.
//
// Owner side (internal/tcp_server.h): a listener on Options::bind_host and a
// thread per connection serving READ/WRITE frames straight from/into segment
// memory after an owner-side bounds check.
//
// Requester side (internal/tcp_lane.h): `lanes_per_peer` connections per peer
// endpoint. Submit cuts each request into slices of at most `slice_bytes`,
// deals them round-robin over the peer's live lanes and returns; each lane
// pipelines its slices (a window of bytes in flight, no round trip per slice)
// and receives each response straight into the destination buffer.
//
// I/O model: one blocking socket per thread with a short SO_RCVTIMEO /
// SO_SNDTIMEO tick, so every frame has an absolute deadline (io_timeout). A
// lane has exactly one socket, so readiness multiplexing (epoll) or a
// submission ring (io_uring) buys nothing on the data path; transfer_bench
// measures the alternatives (docs/transport.md has the figures and reasons).
//
// Failures: a peer that closes (Unavailable), stalls past io_timeout
// (DeadlineExceeded) or sends bytes that break the protocol (DataLoss) fails
// the requests on that lane with that Status and the lane is dropped; the next
// Submit to the peer reconnects it (bounded by connect_timeout). Nothing
// waits without a deadline.
//
// Bounds: slices queued per transport (max_queued_slices), bytes in flight per
// lane (lane_window_bytes), connections served (max_connections), one frame's
// payload (16 MiB). No data is buffered: payloads move between sockets and the
// caller's or the segment's memory.
//
// Endpoint: "tcp://<ipv4>:<port>" or "tcp://[<ipv6>]:<port>" (bind_host is a
// numeric address of either family); a multi-homed owner advertises several,
// "tcp://<addr>:<port>,<addr>:<port>" (Options::advertise_hosts).
//
// Aggregation (docs/transport.md, "Aggregation"): a peer reached over several
// paths, each a (local address -> peer address) pair with lanes_per_peer
// lanes bound to the local address (Options::local_paths, paired with the
// peer's addresses by PairPaths in internal/tcp_paths.h). Slices are sprayed
// over the paths that are up in proportion to their measured capacity (the
// configured weights until every path has a measurement); a lane that dies
// hands its slices to the rescue thread, which puts them on the other paths
// (at most path_retries_max moves per slice) while the failed path sits out
// a doubling backoff and is then reconnected by the same thread. With one
// path (the default) none of this runs: no observer, no thread.
//
// Authentication (Options::auth; docs/transport.md, "Authentication"): every
// connection, both ways, starts with mooncake/base/auth.h's challenge-response
// (internal/tcp_auth.h) before any other frame: the owner serves only peers
// that prove a principal of its token file, the requester talks only to
// owners that prove they hold its secret. Failures are UNAUTHENTICATED; the
// owner counts refused handshakes in
// mooncake_transport_auth_failures_total{transport="tcp"}. Null: no
// handshake, the wire as without authentication.
// Thread-safety: every method may be called concurrently.
#ifndef MOONCAKE_TRANSPORT_TCP_TRANSPORT_H_
#define MOONCAKE_TRANSPORT_TCP_TRANSPORT_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
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
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/transport/internal/batch_table.h"
#include "mooncake/transport/internal/tcp_auth.h"
#include "mooncake/transport/internal/tcp_lane.h"
#include "mooncake/transport/internal/tcp_paths.h"
#include "mooncake/transport/internal/tcp_peers.h"
#include "mooncake/transport/internal/tcp_server.h"
#include "mooncake/transport/internal/tcp_wire.h"
#include "mooncake/transport/transport.h"
#include "mooncake/transport/transport_metrics.h"

namespace mooncake::transport {

class TcpTransport {
 public:
  struct Options {
    std::string bind_host = "127.0.0.1";
    uint16_t port = 0;                 // 0: any free port
    size_t lanes_per_peer = 2;         // in [1, 64]
    uint32_t slice_bytes = 512 << 10;  // in [4 KiB, 16 MiB]
    // Requests larger than this deal their slices over the lanes; smaller
    // ones go whole to one lane (see whole_request_lanes for which).
    uint64_t spread_min_bytes = 2 << 20;
    // Batches start on one of the first `whole_request_lanes` lanes in turn
    // (0 or more than lanes_per_peer: any lane), and a batch's requests take
    // the lanes after its start, one each. So single-request batches keep to
    // a few connections while a batch of several requests (a value the Router
    // cut into 1 MiB slices) spreads over all of them.
    size_t whole_request_lanes = 0;
    uint64_t lane_window_bytes = 8 << 20;  // bytes in flight per lane
    absl::Duration io_timeout = absl::Seconds(5);
    absl::Duration connect_timeout = absl::Seconds(2);
    // How long a SubmitForWait claim keeps a lane's receiver thread asleep
    // waiting for the caller's Wait to receive on its own thread. (A claim
    // on an idle lane is a reservation instead, held for at most
    // 2 x min(io_timeout / 4, 100 ms): internal/tcp_lane.h.)
    absl::Duration claim_patience = absl::Milliseconds(2);
    size_t max_batches = 1024;
    size_t max_queued_slices = 1 << 16;
    size_t max_connections = 256;
    MetricsRegistry* metrics = nullptr;  // null: a private registry
    // The cluster's token file (auth::LoadCredentials). Set: the owner
    // serves only connections that prove one of its principals ("cluster" or
    // any "tenant:NAME": the transport has no notion of objects), within
    // io_timeout of connecting; the requester proves `auth->self()` on each
    // connection (within connect_timeout) and refuses owners that do not
    // prove the same secret, or do not ask for one. Null: no authentication.
    std::shared_ptr<const auth::Credentials> auth;
    // With `auth`: tenants' READs and WRITEs need a range capability from
    // the master (internal/tcp_server.h; docs/security.md, "Tenant isolation
    // on the workers"). `access.key` null: a tenant reaches every byte.
    // Refusals are counted in mooncake_transport_access_denied_total.
    ::mooncake::transport_internal::TcpAccessControl access;

    // Aggregation. A local address outgoing lanes bind to (a numeric
    // literal), and its starting share of the slices until capacities are
    // measured (route_binding.h fills these from a RoutePlan).
    struct LocalPath {
      std::string host;
      double weight = 1;
    };
    std::vector<LocalPath> local_paths;  // at most 8; empty: unbound lanes
    // The addresses LocalEndpoint names (the listener must answer on each:
    // bind_host "0.0.0.0" or "::"); empty: bind_host. At most 8.
    std::vector<std::string> advertise_hosts;
    uint32_t path_retries_max = 4;  // moves of one slice to another path
    absl::Duration path_backoff_min = absl::Milliseconds(200);
    absl::Duration path_backoff_max = absl::Seconds(5);
  };

  // Listens at once; aborts if it cannot (use Create for a Status).
  TcpTransport() : TcpTransport(Options{}) {}
  explicit TcpTransport(Options options) : TcpTransport(std::move(options), 0) {
    const absl::Status s = server_.Listen(options_.bind_host, options_.port);
    MC_ASSERT(s.ok(), "TcpTransport could not listen");
  }
  // What Create refuses in `options` before it binds anything, for a caller
  // that wants to say so up front. Errors: INVALID_ARGUMENT.
  static absl::Status CheckOptions(const Options& options) {
    if (options.lanes_per_peer < 1 || options.lanes_per_peer > 64 || options.slice_bytes < 4096 ||
        options.slice_bytes > ::mooncake::transport_internal::kMaxSliceBytes ||
        options.io_timeout <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          "TcpTransport options: lanes_per_peer in [1, 64], slice_bytes in [4 KiB, 16 MiB], "
          "io_timeout > 0");
    }
    if (options.local_paths.size() > ::mooncake::transport_internal::kMaxPaths ||
        options.advertise_hosts.size() > ::mooncake::transport_internal::kMaxPaths) {
      return absl::InvalidArgumentError(
          "TcpTransport options: at most 8 local_paths and 8 "
          "advertise_hosts");
    }
    for (const auto& p : options.local_paths) {
      if (::mooncake::transport_internal::CommonPrefixBits(p.host, p.host) == 0 ||
          !(p.weight > 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("TcpTransport options: local path \"", p.host,
                         "\" needs a numeric IPv4/IPv6 address and a weight > 0"));
      }
    }
    return absl::OkStatus();
  }

  static absl::StatusOr<std::unique_ptr<TcpTransport>> Create(Options options) {
    RETURN_IF_ERROR(CheckOptions(options));
    std::unique_ptr<TcpTransport> t(new TcpTransport(std::move(options), 0));
    RETURN_IF_ERROR(t->server_.Listen(t->options_.bind_host, t->options_.port));
    return t;
  }
  ~TcpTransport() {
    server_.Stop();
    {
      MutexLock lock(&mu_);
      claims_.clear();  // claimed lanes are held here too (uncollected SubmitForWait batches)
    }
    peers_.Shutdown();  // stops every lane, failing what is still in flight
  }
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  std::string_view Name() const { return "tcp"; }
  std::string LocalEndpoint() const {
    if (options_.advertise_hosts.empty()) {
      return absl::StrCat("tcp://", JoinHostPort(options_.bind_host, server_.port()));
    }
    std::vector<std::string> addrs;
    for (const auto& h : options_.advertise_hosts) addrs.push_back(JoinHostPort(h, server_.port()));
    return absl::StrCat("tcp://", absl::StrJoin(addrs, ","));
  }
  TransportMetrics& metrics() { return metrics_; }

  absl::StatusOr<SegmentDesc> RegisterMemory(void* addr, uint64_t length, MemoryLocation location) {
    if (addr == nullptr || length == 0) {
      return absl::InvalidArgumentError("RegisterMemory needs a non-null address and length > 0");
    }
    if (location.kind == MemoryKind::kGpu) {
      return absl::FailedPreconditionError(
          "TcpTransport sends from host memory; stage GPU memory or use CudaTransport");
    }
    return SegmentDesc{server_.Add(addr, length, location), length, location};
  }

  absl::Status UnregisterMemory(SegmentId id) { return server_.Remove(id); }

  absl::StatusOr<RemoteSegment> OpenSegment(std::string_view endpoint, SegmentId id) {
    ASSIGN_OR_RETURN(auto addrs, ParseEndpointList(endpoint));
    const absl::Time deadline = absl::Now() + options_.connect_timeout + options_.io_timeout;
    // A short control connection (the lanes stay free for data), to the
    // first of the peer's addresses that answers.
    absl::StatusOr<UniqueFd> fd;
    for (const auto& [host, port] : addrs) {
      fd = ::mooncake::transport_internal::ConnectTcp(
          host, port, absl::Now() + options_.connect_timeout, options_.io_timeout);
      if (fd.ok()) break;
    }
    if (!fd.ok()) return fd.status();
    RETURN_IF_ERROR(::mooncake::transport_internal::AuthenticateToOwner(
        fd->get(), options_.auth.get(), deadline, endpoint));
    ASSIGN_OR_RETURN(RemoteSegment remote, ExchangeOpen(fd->get(), id, deadline));
    ASSIGN_OR_RETURN(std::shared_ptr<Peer> peer, peers_.Get(addrs));
    MutexLock lock(&mu_);
    remote.handle = next_handle_++;
    handles_.emplace(remote.handle, Handle{std::move(peer), remote.id, remote.length});
    return remote;
  }

  absl::Status CloseSegment(SegmentHandle handle) {
    MutexLock lock(&mu_);
    if (handles_.erase(handle) == 0) {
      return absl::NotFoundError(absl::StrCat("segment handle ", handle, " is not open"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<BatchId> Submit(std::span<const TransferRequest> requests) {
    return SubmitImpl(requests, /*claim=*/false);
  }

  // Submit for a caller that calls Wait for the batch next: that Wait
  // receives the responses of the batch's first lane on the calling thread
  // (no receiver-thread wake-up on the latency path). Poll or Cancel instead
  // is fine too; a claim nobody takes up holds that lane's receiver back for
  // at most Options::claim_patience, or, on an idle lane whose slices are all
  // READs or all WRITEs (a reservation, no wake-up at all), until another
  // batch uses the lane or for at most 2 x min(io_timeout / 4, 100 ms). A
  // reserved batch's large WRITEs start from this call (one sendmsg, at most
  // one socket tick; the rest goes to the lane's sender thread).
  absl::StatusOr<BatchId> SubmitForWait(std::span<const TransferRequest> requests) {
    return SubmitImpl(requests, /*claim=*/true);
  }

  absl::StatusOr<BatchProgress> Poll(BatchId batch) {
    DropClaim(batch);
    return batches_.Poll(batch);
  }
  absl::StatusOr<BatchResult> Wait(BatchId batch, absl::Time deadline) {
    if (std::shared_ptr<Lane> lane = TakeClaim(batch); lane != nullptr) {
      // Gives up a socket tick before the deadline: a receive that blocks
      // returns within one tick. No time for that (or a non-blocking collect):
      // the claim goes back to the receiver thread.
      const absl::Time give_up =
          deadline - ::mooncake::transport_internal::IoTick(options_.io_timeout);
      if (give_up > absl::Now()) {
        lane->ReceiveFor(
            batch, [&] { return batches_.Settled(batch); }, give_up);
      } else {
        lane->DropClaim(batch);
      }
    }
    return batches_.Wait(batch, deadline);
  }

 private:
  absl::StatusOr<BatchId> SubmitImpl(std::span<const TransferRequest> requests, bool claim) {
    if (requests.empty() || requests.size() > kMaxBatchRequests) {
      return batches_.Create(requests).status();  // the table words the error
    }
    // Inline: a batch of a few requests allocates none of these.
    absl::InlinedVector<Handle, 4> targets(requests.size());
    absl::InlinedVector<absl::Status, 4> early(requests.size());
    absl::InlinedVector<uint32_t, 4> pieces(requests.size(), 1);
    size_t slices = 0;
    {
      MutexLock lock(&mu_);
      for (size_t i = 0; i < requests.size(); ++i) {
        early[i] = Resolve(requests[i], &targets[i]);
        if (early[i].ok()) {
          pieces[i] = static_cast<uint32_t>((requests[i].length + options_.slice_bytes - 1) /
                                            options_.slice_bytes);
          slices += pieces[i];
        }
      }
    }
    // relaxed: a soft bound; the count is not used to publish memory.
    if (queued_slices_.load(std::memory_order_relaxed) + slices > options_.max_queued_slices) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "TcpTransport queue full (", options_.max_queued_slices, " slices); Wait for batches"));
    }
    ASSIGN_OR_RETURN(auto batch, batches_.Create(requests, pieces));
    queued_slices_.fetch_add(slices, std::memory_order_relaxed);
    for (size_t i = 0; i < requests.size(); ++i) {
      if (!early[i].ok()) batches_.Fail(*batch, i, early[i]);
    }
    std::shared_ptr<Lane> claimed = Dispatch(batch, requests, targets, early, claim);
    if (claimed != nullptr) {
      MutexLock lock(&mu_);
      claims_[batch->id()] = std::move(claimed);
    }
    return batch->id();
  }

 public:
  // Returns only once no lane touches the batch's buffers: queued slices are
  // dropped at once; slices on the wire get io_timeout to finish, then every
  // lane still holding one is broken (socket shut down, which wakes a blocked
  // send or receive at once) and reconnects on the next Submit.
  absl::StatusOr<BatchResult> Cancel(BatchId batch) {
    DropClaim(batch);
    RETURN_IF_ERROR(batches_.MarkCancelled(batch));
    const std::vector<std::shared_ptr<Lane>> lanes = peers_.AllLanes();
    for (const auto& lane : lanes) lane->SweepCancelled();
    if (!batches_.AwaitSettled(batch, absl::Now() + options_.io_timeout)) {
      for (const auto& lane : lanes) {
        if (lane->Holds(batch)) {
          lane->Abort(absl::DeadlineExceededError(
              absl::StrCat("a cancelled batch's transfer was still on the wire after io_timeout (",
                           absl::FormatDuration(options_.io_timeout), "); connection reset")));
        }
      }
    }
    // After Abort the lane's threads settle its slices within one wake-up.
    return batches_.Cancel(batch, absl::Now() + options_.io_timeout + absl::Seconds(1));
  }

  // The principal each connection this owner serves proved ("" without
  // authentication), in accept order (tests, diagnostics).
  std::vector<std::string> ServedPrincipals() { return server_.Principals(); }
  // Handshakes this owner refused or that timed out (the
  // mooncake_transport_auth_failures_total series).
  uint64_t AuthFailures() const { return auth_failures_->Value(); }
  // READ/WRITE frames refused to tenants for want of a capability
  // (Options::access; the mooncake_transport_access_denied_total series).
  uint64_t AccessDenials() const { return server_.AccessDenials(); }

  // Lanes of the peer at `endpoint` that are connected and healthy (tests).
  size_t LiveLanes(std::string_view endpoint) {
    return CountLanes(endpoint, [](const Lane& lane) { return !lane.dead(); });
  }
  // Lanes of that peer reserved for a SubmitForWait caller (tests; see
  // "Reservation" in internal/tcp_lane.h).
  size_t ReservedLanes(std::string_view endpoint) {
    return CountLanes(endpoint, [](const Lane& lane) { return lane.reserved(); });
  }
  // Inline large-WRITE sends on that peer's lanes that left frames to the
  // sender thread (tests).
  uint64_t InlineHandoffs(std::string_view endpoint) {
    uint64_t n = 0;
    CountLanes(endpoint, [&n](const Lane& lane) {
      n += lane.handoffs();
      return false;
    });
    return n;
  }
  // Each path to the peer at `endpoint`: counters, capacity, up/down. Empty
  // for an unknown peer or one reached over a single path.
  std::vector<::mooncake::transport_internal::PathState::Stats> PathStats(
      std::string_view endpoint) {
    auto hp = ParseEndpoint(endpoint);
    if (!hp.ok()) return {};
    return peers_.PathStats(*hp);
  }

  // Slices ever queued on each of that peer's created lanes, in lane order
  // (tests).
  std::vector<uint64_t> EnqueuedPerLane(std::string_view endpoint) {
    std::vector<uint64_t> out;
    CountLanes(endpoint, [&out](const Lane& lane) {
      out.push_back(lane.enqueued());
      return false;
    });
    return out;
  }

 private:
  using Lane = ::mooncake::transport_internal::TcpLane;
  using Slice = ::mooncake::transport_internal::Slice;
  using Peer = ::mooncake::transport_internal::TcpPeer;
  using Peers = ::mooncake::transport_internal::TcpPeers;

  struct Handle {
    std::shared_ptr<Peer> peer;
    SegmentId id = 0;
    uint64_t length = 0;
  };

  TcpTransport(Options options, int /*tag*/)
      : options_(std::move(options)),
        metrics_(options_.metrics, "tcp"),
        batches_(options_.max_batches, &metrics_),
        auth_failures_(::mooncake::transport::AuthFailuresCounter(metrics_.registry(), Name())),
        server_(options_.io_timeout, options_.max_connections,
                {options_.auth, auth_failures_, WithDenialCounter(options_.access, metrics_)}),
        peers_(PeersConfig(options_), &batches_, &queued_slices_, &metrics_.registry(), Name()),
        whole_lanes_(options_.whole_request_lanes == 0 ||
                             options_.whole_request_lanes > options_.lanes_per_peer
                         ? options_.lanes_per_peer
                         : options_.whole_request_lanes) {}

  using Address = Peers::Address;

  static ::mooncake::transport_internal::TcpAccessControl WithDenialCounter(
      ::mooncake::transport_internal::TcpAccessControl access, TransportMetrics& metrics) {
    if (access.key == nullptr) return access;
    absl::StatusOr<Counter*> c = metrics.registry().GetCounter(
        "mooncake_transport_access_denied_total",
        "READ and WRITE frames of tenants' connections refused for want of a capability that "
        "covers them (missing, expired, another range, tenant or worker).",
        {{"transport", "tcp"}});
    MC_ASSERT(c.ok(), "access denial metric registration failed (name clash in the registry)");
    access.denials = *c;
    return access;
  }

  static Peers::Config PeersConfig(const Options& o) {
    Peers::Config c;
    c.lanes_per_peer = o.lanes_per_peer;
    c.connect_timeout = o.connect_timeout;
    c.limits.window_bytes = o.lane_window_bytes;
    c.limits.io_timeout = o.io_timeout;
    c.limits.claim_patience = o.claim_patience;
    c.limits.auth = o.auth;
    for (const auto& p : o.local_paths) c.local_paths.emplace_back(p.host, p.weight);
    c.retries_max = o.path_retries_max;
    c.backoff_min = o.path_backoff_min;
    c.backoff_max = o.path_backoff_max;
    return c;
  }

  template <typename Pred>
  size_t CountLanes(std::string_view endpoint, Pred pred) {
    auto hp = ParseEndpoint(endpoint);
    return hp.ok() ? peers_.CountLanes(*hp, pred) : 0;
  }

  // "tcp://<addr>:<port>[,<addr>:<port>...]": every address, in order.
  static absl::StatusOr<std::vector<Address>> ParseEndpointList(std::string_view ep) {
    std::vector<Address> out;
    const auto bad = [ep] {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad tcp endpoint \"", AbslView(ep),
          "\"; expected tcp://<ipv4>:<port> or tcp://[<ipv6>]:<port>, several joined by ','"));
    };
    if (!ep.starts_with("tcp://")) return bad();
    for (absl::string_view part : absl::StrSplit(AbslView(ep.substr(6)), ',')) {
      std::optional<HostPortText> hp = SplitHostPort(std::string_view(part.data(), part.size()));
      uint32_t port = 0;
      if (!hp || !absl::SimpleAtoi(AbslView(hp->port), &port) || port == 0 || port > 65535) {
        return bad();
      }
      out.emplace_back(std::string(hp->host), static_cast<uint16_t>(port));
    }
    if (out.empty() || out.size() > ::mooncake::transport_internal::kMaxPaths) return bad();
    return out;
  }
  static absl::StatusOr<Address> ParseEndpoint(std::string_view ep) {
    ASSIGN_OR_RETURN(auto all, ParseEndpointList(ep));
    return all.front();
  }

  absl::StatusOr<RemoteSegment> ExchangeOpen(int fd, SegmentId id, absl::Time deadline) {
    using ::mooncake::transport_internal::FrameType;
    const auto req =
        ::mooncake::transport_internal::EncodeHeader({FrameType::kOpen, 0, 1, id, 0, 0, 0});
    iovec iov{const_cast<uint8_t*>(req.data()), req.size()};
    RETURN_IF_ERROR(::mooncake::transport_internal::SendIovBy(fd, &iov, 1, deadline, "OPEN"));
    ::mooncake::transport_internal::WireHeader raw;
    RETURN_IF_ERROR(::mooncake::transport_internal::RecvAllBy(fd, raw.data(), raw.size(), deadline,
                                                              "OPEN reply"));
    ASSIGN_OR_RETURN(::mooncake::transport_internal::FrameHeader h,
                     ::mooncake::transport_internal::DecodeHeader(raw.data()));
    if (h.type == FrameType::kError) {
      std::string msg(h.length, '\0');
      RETURN_IF_ERROR(::mooncake::transport_internal::RecvAllBy(fd, msg.data(), msg.size(),
                                                                deadline, "OPEN error"));
      return absl::Status(static_cast<absl::StatusCode>(h.code), absl::StrCat("owner: ", msg));
    }
    if (h.type != FrameType::kOpenOk || h.tag != 1 || h.segment != id) {
      return absl::DataLossError("unexpected reply to OPEN");
    }
    RemoteSegment r;
    r.id = id;
    r.length = h.offset;
    r.location.kind = static_cast<MemoryKind>(h.aux & 0xFF);
    r.location.device = static_cast<int32_t>(h.aux >> 8) - 1;
    return r;
  }

  absl::Status Resolve(const TransferRequest& r, Handle* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = handles_.find(r.segment);
    if (it == handles_.end()) {
      return absl::NotFoundError(absl::StrCat("segment handle ", r.segment, " is not open"));
    }
    *out = it->second;
    // A requester-side pre-check with the advertised length; the owner checks again.
    return ::mooncake::transport_internal::CheckRange(r.local_addr, r.remote_offset, r.length,
                                                      out->length);
  }

  std::shared_ptr<Lane> TakeClaim(BatchId batch) {
    MutexLock lock(&mu_);
    auto it = claims_.find(batch);
    if (it == claims_.end()) return nullptr;
    std::shared_ptr<Lane> lane = std::move(it->second);
    claims_.erase(it);
    return lane;
  }

  void DropClaim(BatchId batch) {
    if (std::shared_ptr<Lane> lane = TakeClaim(batch); lane != nullptr) lane->DropClaim(batch);
  }

  // Cuts requests into slices and deals them over each peer's live lanes.
  // With `claim`, the lane that gets the first slice is claimed for the
  // caller and returned.
  std::shared_ptr<Lane> Dispatch(
      const std::shared_ptr<::mooncake::transport_internal::BatchState>& batch,
      std::span<const TransferRequest> requests, std::span<const Handle> targets,
      std::span<const absl::Status> early, bool claim) {
    struct PeerWork {
      ::mooncake::transport_internal::LaneSlices lanes;  // by the peer's lane index
      std::vector<double> weights;                       // several paths: SprayWeights
      std::vector<size_t> next_lane;                     // several paths: each path's next lane
    };
    // The peers in order of first use; a batch to one peer (the common case:
    // a single get or put) needs no heap block. The index finds a peer once
    // there are more than a few.
    absl::InlinedVector<std::pair<Peer*, PeerWork>, 1> per_peer;
    absl::flat_hash_map<Peer*, size_t> peer_index;
    constexpr size_t kScanPeers = 8;
    const auto work_of = [&](Peer* peer) -> PeerWork& {
      if (per_peer.size() <= kScanPeers) {
        for (auto& [p, w] : per_peer) {
          if (p == peer) return w;
        }
      } else if (auto it = peer_index.find(peer); it != peer_index.end()) {
        return per_peer[it->second].second;
      }
      per_peer.emplace_back(peer, PeerWork{});
      if (per_peer.size() == kScanPeers + 1) {
        for (size_t k = 0; k < per_peer.size(); ++k) peer_index[per_peer[k].first] = k;
      } else if (per_peer.size() > kScanPeers + 1) {
        peer_index[peer] = per_peer.size() - 1;
      }
      return per_peer.back().second;
    };
    Peer* claim_peer = nullptr;
    size_t claim_lane = 0;
    // Batches start on one of the first whole_lanes_ lanes, in turn; a
    // batch's requests then take the lanes after it, one each.
    size_t next_lane = rr_.fetch_add(1, std::memory_order_relaxed) % whole_lanes_;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (!early[i].ok()) continue;
      Peer* peer = targets[i].peer.get();
      PeerWork& work = work_of(peer);
      const size_t per_path = options_.lanes_per_peer;
      if (work.lanes.empty()) {
        work.lanes.resize(peer->paths.size() * per_path);
        if (peer->multi()) {
          work.weights = Peers::Weights(*peer);
          work.next_lane.assign(peer->paths.size(), next_lane);
        }
      }
      const TransferRequest& r = requests[i];
      // A request up to spread_min_bytes stays on one lane: its response is
      // one stream that wakes one server thread and one receiver. Larger
      // requests deal their slices over the lanes (and the paths).
      const bool spread = r.length > options_.spread_min_bytes;
      size_t lane = next_lane++ % per_path;
      // A spread request picks a path per slice, a whole one once.
      const uint64_t first_bytes =
          spread ? std::min<uint64_t>(options_.slice_bytes, r.length) : r.length;
      size_t path = peer->multi() ? peer->picker->Pick(work.weights, first_bytes) : 0;
      // Each path deals its share of a spread request over its own lanes.
      if (spread && peer->multi()) lane = work.next_lane[path]++ % per_path;
      if (claim && claim_peer == nullptr) {
        claim_peer = peer;
        claim_lane = path * per_path + lane;
      }
      for (uint64_t done = 0; done < r.length; done += options_.slice_bytes) {
        Slice s;
        s.batch = batch;
        s.index = static_cast<uint32_t>(i);
        s.op = r.op;
        s.local = static_cast<char*>(r.local_addr) + done;
        s.segment = targets[i].id;
        s.offset = r.remote_offset + done;
        s.length = static_cast<uint32_t>(std::min<uint64_t>(options_.slice_bytes, r.length - done));
        s.digests = SubrangeDigests(r, done, s.length);
        s.capability = r.capability;
        if (spread && peer->multi() && done > 0) {
          path = peer->picker->Pick(work.weights, s.length);
          lane = work.next_lane[path]++ % per_path;
        }
        work.lanes[path * per_path + lane].push_back(std::move(s));
        if (spread && !peer->multi()) lane = (lane + 1) % per_path;
      }
    }
    std::shared_ptr<Lane> claimed;
    for (auto& [peer, work] : per_peer) {
      const size_t claim_at = peer == claim_peer ? claim_lane : Peers::kNoLane;
      std::shared_ptr<Lane> c = peers_.Enqueue(*peer, work.lanes, claim_at);
      if (c != nullptr) claimed = std::move(c);
    }
    return claimed;
  }

  Options options_;
  TransportMetrics metrics_;
  ::mooncake::transport_internal::BatchTable batches_;
  Counter* const auth_failures_;  // in metrics_'s registry
  ::mooncake::transport_internal::TcpServer server_;
  std::atomic<size_t> queued_slices_{0};
  Peers peers_;               // after what its lanes settle into
  const size_t whole_lanes_;  // lanes a batch can start on
  std::atomic<size_t> rr_{0};
  Mutex mu_;
  SegmentHandle next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<SegmentHandle, Handle> handles_ ABSL_GUARDED_BY(mu_);
  // Batches submitted with SubmitForWait whose Wait has not come yet.
  absl::flat_hash_map<BatchId, std::shared_ptr<Lane>> claims_ ABSL_GUARDED_BY(mu_);
};

static_assert(Transport<TcpTransport>);

}  // namespace mooncake::transport

#endif  // MOONCAKE_TRANSPORT_TCP_TRANSPORT_H_
