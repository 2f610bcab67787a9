// PrefillConnector<T>: the prefill side of the PD connector (connector.h has
// the protocol and the failure semantics).
//
//   auto pc = PrefillConnector<TcpTransport>::Create(&tcp, layout, bases, {});
//   // the decode side pulls request "r1" at (*pc)->rpc_address()
//   (*pc)->AddRequest("r1", blocks, num_tokens);
//   for (layer...) { compute(layer); (*pc)->SaveLayer("r1", layer); }
//   ... later: for (auto& r : (*pc)->TakeReleased()) free(r.blocks);
//
// SaveLayer never blocks on the network: a sender thread plans the layer's
// ranges for every pull of the request, submits them (batches of at most
// transport::kMaxBatchRequests), and notifies each decode side when its
// batches complete, so a layer's transfer overlaps the next layers' compute.
//
// Thread-safety: thread-safe. Invariant: a request's blocks are handed back
// (TakeReleased) only when no batch of any of its pulls is in flight.
#ifndef MOONCAKE_CONNECTOR_PREFILL_CONNECTOR_H_
#define MOONCAKE_CONNECTOR_PREFILL_CONNECTOR_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/connector/connector.h"
#include "mooncake/connector/internal/layer_plan.h"
#include "mooncake/connector/internal/peer_channels.h"
#include "mooncake/connector/kv_layout.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/rpc/tcp_server.h"
#include "mooncake/transport/transport.h"

namespace mooncake::connector {

struct PrefillConnectorOptions {
  std::string rpc_host = "127.0.0.1";
  uint16_t rpc_port = 0;                 // 0: any free port
  int64_t request_timeout_ms = 120'000;  // last SaveLayer (or a waiting pull) -> handed back
  int64_t notify_timeout_ms = 2'000;     // one Notify RPC
  int64_t transfer_timeout_ms = 30'000;  // one layer's batches of one pull
  size_t max_requests = 4096;            // requests and waiting pulls held at once
  MetricsRegistry* metrics = nullptr;    // null: a private registry
  // Authentication (base/auth.h; docs/security.md): the RPC server serves
  // only peers that prove a principal this file lists, and calls to peers
  // prove this process's own. Null: none. The transport is authenticated by
  // its own options.
  std::shared_ptr<const auth::Credentials> auth;
};

// A request whose blocks the prefill side may reuse now.
struct ReleasedRequest {
  std::string request_id;
  std::vector<uint64_t> blocks;
  absl::Status status;  // OK: every pull finished; else why it ended (expired, aborted)
};

struct PrefillConnectorStats {
  uint64_t requests_held = 0;  // added and not yet handed back
  uint64_t blocks_held = 0;    // their blocks
  uint64_t pulls_waiting = 0;  // pulls for requests not added yet
  uint64_t requests_completed = 0;
  uint64_t requests_expired = 0;
  uint64_t requests_aborted = 0;
  uint64_t layers_sent = 0;  // (pull, layer) transfers completed
  uint64_t ranges_sent = 0;  // transport requests they took
  uint64_t bytes_sent = 0;
};

template <transport::Transport T>
class PrefillConnector {
 public:
  // `bases[i]` is where region i of `layout` lives in this process, for the
  // connector's lifetime. Errors: INVALID_ARGUMENT (layout, bases), others
  // from starting the RPC server.
  static absl::StatusOr<std::unique_ptr<PrefillConnector>> Create(
      T* transport, KvLayout layout, std::vector<const std::byte*> bases,
      PrefillConnectorOptions options = {}) {
    MC_ASSERT(transport != nullptr, "a connector needs a transport");
    RETURN_IF_ERROR(layout.Validate());
    if (bases.size() != layout.NumRegions()) {
      return absl::InvalidArgumentError(absl::StrCat("PrefillConnector: the layout has ",
                                                     layout.NumRegions(), " regions, got ",
                                                     bases.size(), " base addresses"));
    }
    if (options.request_timeout_ms <= 0 || options.transfer_timeout_ms <= 0 ||
        options.notify_timeout_ms <= 0 || options.max_requests == 0) {
      return absl::InvalidArgumentError("PrefillConnector: timeouts and max_requests must be > 0");
    }
    std::unique_ptr<PrefillConnector> c(
        new PrefillConnector(transport, std::move(layout), std::move(bases), std::move(options)));
    RETURN_IF_ERROR(c->StartServer());
    c->sender_ = std::thread([p = c.get()] { p->SendLoop(); });
    return c;
  }

  PrefillConnector(const PrefillConnector&) = delete;
  PrefillConnector& operator=(const PrefillConnector&) = delete;

  // Stops serving, cancels what is in flight and waits for the sender.
  ~PrefillConnector() {
    if (server_ != nullptr) server_->Stop();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (sender_.joinable()) sender_.join();  // not started when Create failed
  }

  // Where decode sides send their pulls ("host:port").
  std::string rpc_address() const { return server_->address(); }
  const KvLayout& layout() const { return layout_; }

  // The engine scheduled `request_id` here: its first `num_tokens` tokens will
  // be in `blocks` (token order). Errors: INVALID_ARGUMENT (ids, sizes, blocks
  // out of the layout), ALREADY_EXISTS, RESOURCE_EXHAUSTED (max_requests).
  absl::Status AddRequest(std::string_view request_id, std::vector<uint64_t> blocks,
                          uint64_t num_tokens) {
    RETURN_IF_ERROR(connector_internal::CheckRequestShape(layout_, request_id, blocks, num_tokens));
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, fresh] = requests_.try_emplace(std::string(request_id));
    Request& r = it->second;
    if (!fresh && r.added) {
      return absl::AlreadyExistsError(
          absl::StrCat("request '", AbslView(request_id), "' was added already"));
    }
    if (fresh && requests_.size() > options_.max_requests) {
      requests_.erase(it);
      return absl::ResourceExhaustedError("PrefillConnector: max_requests requests held");
    }
    r.added = true;
    r.blocks = std::move(blocks);
    r.num_tokens = num_tokens;
    // The clock starts at the last SaveLayer: the engine still writes the
    // blocks until then (and can Abort).
    r.expires = absl::InfiniteFuture();
    r.saved.assign(layout_.num_layers, false);
    blocks_held_ += r.blocks.size();
    return absl::OkStatus();
  }

  // Layer `layer` of the request is in its blocks: sends it to every pull
  // (now and to pulls that arrive later). Never blocks on the network.
  // Errors: NOT_FOUND (unknown or ended request), INVALID_ARGUMENT (layer).
  absl::Status SaveLayer(std::string_view request_id, uint32_t layer) {
    if (layer >= layout_.num_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", layer, " of a ", layout_.num_layers, "-layer layout"));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = requests_.find(request_id);
      if (it == requests_.end() || !it->second.added) {
        return absl::NotFoundError(
            absl::StrCat("request '", AbslView(request_id), "' is not held"));
      }
      Request& r = it->second;
      r.saved[layer] = true;
      if (std::all_of(r.saved.begin(), r.saved.end(), [](bool b) { return b; }) &&
          r.expires == absl::InfiniteFuture()) {
        r.expires = absl::Now() + absl::Milliseconds(options_.request_timeout_ms);
      }
      for (auto& [pull_id, pull] : it->second.pulls) Enqueue(it->first, pull_id, layer);
    }
    cv_.notify_all();
    return absl::OkStatus();
  }

  // Ends the request now: every pull is told `reason` (as ABORTED) and the
  // blocks are handed back once no write is in flight.
  absl::Status Abort(std::string_view request_id, std::string_view reason) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = requests_.find(request_id);
      if (it == requests_.end()) {
        return absl::NotFoundError(
            absl::StrCat("request '", AbslView(request_id), "' is not held"));
      }
      it->second.end_status =
          absl::AbortedError(absl::StrCat("prefill aborted: ", AbslView(reason)));
      ++aborted_;
    }
    cv_.notify_all();
    return absl::OkStatus();
  }

  // Requests that ended since the last call, with their blocks.
  std::vector<ReleasedRequest> TakeReleased() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<ReleasedRequest> out;
    out.swap(released_);
    return out;
  }

  PrefillConnectorStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    PrefillConnectorStats s;
    for (const auto& [id, r] : requests_) {
      s.requests_held += r.added ? 1 : 0;
      s.pulls_waiting += r.added ? 0 : r.pulls.size();
    }
    s.blocks_held = blocks_held_;
    s.requests_completed = completed_;
    s.requests_expired = expired_;
    s.requests_aborted = aborted_;
    s.layers_sent = layers_sent_;
    s.ranges_sent = ranges_sent_;
    s.bytes_sent = bytes_sent_;
    return s;
  }

 private:
  struct Pull {
    proto::PullRequest msg;
    KvLayout dst_layout;
    std::vector<transport::SegmentHandle> dst_segments;  // per dst region
    std::vector<bool> sent;                              // per layer: bytes in place
    std::vector<uint32_t> unreported;                    // sent, not yet notified
    absl::Status error;                                  // set: the pull failed
    bool cancelled = false;
    bool reported_end = false;  // the decode side was told the end (or asked for it)
    int batches_in_flight = 0;
  };
  struct Request {
    bool added = false;  // false: only pulls arrived so far
    std::vector<uint64_t> blocks;
    uint64_t num_tokens = 0;
    std::vector<bool> saved;  // per layer
    absl::Time expires;
    absl::Status end_status;      // set (not OK): aborted
    uint32_t expected_pulls = 0;  // the decode TP degree, from the first pull
    std::map<uint64_t, Pull> pulls;
  };
  struct Job {
    std::string request_id;
    uint64_t pull_id = 0;
    uint32_t layer = 0;
  };

  PrefillConnector(T* transport, KvLayout layout, std::vector<const std::byte*> bases,
                   PrefillConnectorOptions options)
      : transport_(transport),
        layout_(std::move(layout)),
        bases_(std::move(bases)),
        options_(std::move(options)),
        registry_(options_.metrics),
        channels_(options_.auth) {}

  absl::Status StartServer();
  absl::StatusOr<proto::PullResponse> OnPull(const proto::PullRequest& req);
  absl::StatusOr<proto::StatusResponse> OnStatus(const proto::StatusRequest& req);
  absl::StatusOr<proto::CancelResponse> OnCancel(const proto::CancelRequest& req);

  void Enqueue(const std::string& request_id, uint64_t pull_id, uint32_t layer) {
    jobs_.push_back(Job{request_id, pull_id, layer});
  }
  void SendLoop();
  void SendJobs(std::vector<Job> jobs);
  void Sweep();  // under mu_: ends requests that are done, expired or aborted
  void NotifyPulls();
  // Under mu_: a pull for a request that ended is refused (bounded memory).
  void RememberEnded(const std::string& id, absl::Status why) {
    if (ended_.size() >= kEndedRemembered) {
      ended_.erase(ended_order_.front());
      ended_order_.pop_front();
    }
    if (ended_.insert_or_assign(id, std::move(why)).second) ended_order_.push_back(id);
  }
  static constexpr size_t kEndedRemembered = 4096;

  T* const transport_;
  const KvLayout layout_;
  const std::vector<const std::byte*> bases_;
  const PrefillConnectorOptions options_;
  rpc::ServiceRegistry registry_;
  std::unique_ptr<rpc::RpcServer> server_;
  connector_internal::PeerChannels channels_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Request, std::less<>> requests_;
  std::deque<Job> jobs_;
  std::vector<ReleasedRequest> released_;
  std::map<std::string, absl::Status, std::less<>> ended_;
  std::deque<std::string> ended_order_;
  bool stopping_ = false;
  uint64_t blocks_held_ = 0, completed_ = 0, expired_ = 0, aborted_ = 0;
  uint64_t layers_sent_ = 0, ranges_sent_ = 0, bytes_sent_ = 0;
  std::thread sender_;
};

// --- Implementation ----------------------------------------------------------

template <transport::Transport T>
absl::Status PrefillConnector<T>::StartServer() {
  RETURN_IF_ERROR(
      registry_.Register<PullMethod>([this](const proto::PullRequest& r) { return OnPull(r); }));
  RETURN_IF_ERROR(registry_.Register<StatusMethod>(
      [this](const proto::StatusRequest& r) { return OnStatus(r); }));
  RETURN_IF_ERROR(registry_.Register<CancelMethod>(
      [this](const proto::CancelRequest& r) { return OnCancel(r); }));
  rpc::RpcServerOptions so;
  so.host = options_.rpc_host;
  so.port = options_.rpc_port;
  so.auth = options_.auth;
  so.worker_threads = 4;  // a Cancel waits for in-flight writes on one of them
  server_ = std::make_unique<rpc::RpcServer>(&registry_, so);
  return server_->Start();
}

template <transport::Transport T>
absl::StatusOr<proto::PullResponse> PrefillConnector<T>::OnPull(const proto::PullRequest& req) {
  ASSIGN_OR_RETURN(KvLayout dst, KvLayout::Decode(req.dst_layout()));
  std::vector<uint64_t> dst_blocks(req.dst_blocks().begin(), req.dst_blocks().end());
  RETURN_IF_ERROR(
      connector_internal::CheckRequestShape(dst, req.request_id(), dst_blocks, req.num_tokens()));
  if (req.pull_id() == 0 || req.dst_ranks() == 0 || req.dst_ranks() > kMaxTpRanks ||
      req.dst_rank() >= req.dst_ranks()) {
    return absl::InvalidArgumentError(
        "pull: pull_id must be non-zero and dst_rank < dst_ranks <= 64");
  }
  if (static_cast<size_t>(req.dst_regions_size()) != dst.NumRegions()) {
    return absl::InvalidArgumentError(absl::StrCat("pull: ", req.dst_regions_size(),
                                                   " regions for a layout of ", dst.NumRegions()));
  }
  for (int i = 0; i < req.dst_regions_size(); ++i) {
    if (req.dst_regions(i).length() < dst.RegionBytes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pull: region ", i, " has ", req.dst_regions(i).length(),
                       " bytes, the layout needs ", dst.RegionBytes()));
    }
  }
  // Layouts that cannot be converted are refused now, not at the first layer.
  {
    std::vector<uint64_t> src_probe(1, 0);
    const uint64_t probe_tokens =
        std::min<uint64_t>({req.num_tokens(), layout_.block_size, dst.block_size});
    std::vector<uint64_t> dst_probe(dst_blocks.begin(), dst_blocks.begin() + 1);
    RETURN_IF_ERROR(
        connector_internal::PlanLayer(layout_, src_probe, dst, dst_probe, probe_tokens, 0)
            .status());
  }
  Pull pull;
  pull.msg = req;
  pull.dst_layout = std::move(dst);
  pull.sent.assign(layout_.num_layers, false);
  for (const proto::Region& region : req.dst_regions()) {
    absl::StatusOr<transport::RemoteSegment> seg =
        transport_->OpenSegment(req.dst_transport_endpoint(), region.segment_id());
    if (!seg.ok()) {
      for (transport::SegmentHandle h : pull.dst_segments) (void)transport_->CloseSegment(h);
      return absl::Status(seg.status().code(),
                          absl::StrCat("pull: opening the decode memory at ",
                                       req.dst_transport_endpoint(), ": ", seg.status().message()));
    }
    pull.dst_segments.push_back(seg->handle);
  }
  proto::PullResponse resp;
  resp.set_src_layout(layout_.Encode());
  resp.set_request_timeout_ms(static_cast<uint64_t>(options_.request_timeout_ms));
  absl::Status refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, fresh] = requests_.try_emplace(req.request_id());
    Request& r = it->second;
    if (fresh && ended_.contains(req.request_id())) {
      requests_.erase(it);
      refused = absl::FailedPreconditionError(
          absl::StrCat("pull: request '", req.request_id(),
                       "' already ended here: ", ended_.find(req.request_id())->second.ToString()));
    } else if (fresh && requests_.size() > options_.max_requests) {
      requests_.erase(it);
      refused = absl::ResourceExhaustedError("PrefillConnector: max_requests requests held");
    } else if (!r.end_status.ok()) {
      refused = r.end_status;
    } else if (r.expected_pulls != 0 && r.expected_pulls != req.dst_ranks()) {
      refused = absl::InvalidArgumentError(
          absl::StrCat("pull: the request is pulled by a group of ", r.expected_pulls,
                       ", this pull says ", req.dst_ranks()));
    } else if (r.pulls.contains(req.pull_id())) {
      refused = absl::AlreadyExistsError("pull: this pull_id was pulled already");
    } else {
      if (fresh) r.expires = absl::Now() + absl::Milliseconds(options_.request_timeout_ms);
      r.expected_pulls = req.dst_ranks();
      r.pulls.emplace(req.pull_id(), std::move(pull));
      for (uint32_t layer = 0; r.added && layer < r.saved.size(); ++layer) {
        if (r.saved[layer]) Enqueue(it->first, req.pull_id(), layer);
      }
    }
  }
  if (!refused.ok()) {
    for (transport::SegmentHandle h : pull.dst_segments) (void)transport_->CloseSegment(h);
    return refused;
  }
  cv_.notify_all();
  return resp;
}

template <transport::Transport T>
absl::StatusOr<proto::StatusResponse> PrefillConnector<T>::OnStatus(
    const proto::StatusRequest& req) {
  proto::StatusResponse resp;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = requests_.find(req.request_id());
  if (it == requests_.end()) return resp;
  auto p = it->second.pulls.find(req.pull_id());
  if (p == it->second.pulls.end()) return resp;
  const Pull& pull = p->second;
  resp.set_known(true);
  for (uint32_t layer = 0; layer < pull.sent.size(); ++layer) {
    if (pull.sent[layer]) resp.add_layers(layer);
  }
  resp.set_finished(std::all_of(pull.sent.begin(), pull.sent.end(), [](bool b) { return b; }));
  if (!pull.error.ok()) {
    resp.set_error_code(static_cast<int32_t>(pull.error.code()));
    resp.set_error_message(std::string(pull.error.message()));
  }
  return resp;
}

template <transport::Transport T>
absl::StatusOr<proto::CancelResponse> PrefillConnector<T>::OnCancel(
    const proto::CancelRequest& req) {
  proto::CancelResponse resp;
  std::unique_lock<std::mutex> lock(mu_);
  auto it = requests_.find(req.request_id());
  if (it == requests_.end()) return resp;
  auto p = it->second.pulls.find(req.pull_id());
  if (p == it->second.pulls.end()) return resp;
  Pull& pull = p->second;
  pull.cancelled = true;
  pull.reported_end = true;  // the decode side asked: nothing more to tell it
  if (pull.error.ok()) pull.error = absl::CancelledError(absl::StrCat("cancelled: ", req.reason()));
  // Answered only when no write of this pull can still land (Sweep may erase
  // the pull meanwhile: it does so only once none is in flight).
  const bool drained =
      cv_.wait_for(lock, std::chrono::milliseconds(options_.transfer_timeout_ms), [&] {
        auto r = requests_.find(req.request_id());
        if (r == requests_.end()) return true;
        auto q = r->second.pulls.find(req.pull_id());
        return q == r->second.pulls.end() || q->second.batches_in_flight == 0;
      });
  if (!drained) return absl::DeadlineExceededError("cancel: writes still in flight");
  resp.set_known(true);
  cv_.notify_all();
  return resp;
}

template <transport::Transport T>
void PrefillConnector<T>::SendLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stopping_ || !jobs_.empty(); });
    if (stopping_) break;
    std::vector<Job> jobs(jobs_.begin(), jobs_.end());
    jobs_.clear();
    lock.unlock();
    if (!jobs.empty()) SendJobs(std::move(jobs));
    NotifyPulls();
    lock.lock();
    Sweep();
  }
  // Closing: every pull still open is told, then nothing is held.
  for (auto& [id, r] : requests_) {
    if (r.end_status.ok()) r.end_status = absl::UnavailableError("prefill connector closed");
  }
  lock.unlock();
  NotifyPulls();
  lock.lock();
  Sweep();
}

// Plans and submits every job's ranges, then waits for them in order. A job
// whose pull was cancelled, failed or ended stops at its next batch.
template <transport::Transport T>
void PrefillConnector<T>::SendJobs(std::vector<Job> jobs) {
  struct Submitted {
    Job job;
    Pull* pull = nullptr;
    std::vector<transport::BatchId> batches;
    absl::Status status;
    uint64_t ranges = 0, bytes = 0;
  };
  std::vector<Submitted> subs;
  for (Job& job : jobs) {
    Submitted s{std::move(job)};
    std::vector<uint64_t> src_blocks, dst_blocks;
    const KvLayout* dst = nullptr;
    uint64_t tokens = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = requests_.find(s.job.request_id);
      if (it == requests_.end()) continue;
      auto p = it->second.pulls.find(s.job.pull_id);
      if (p == it->second.pulls.end() || !p->second.error.ok() || p->second.sent[s.job.layer])
        continue;
      s.pull = &p->second;  // stable: a pull is erased only with no batch in flight
      ++s.pull->batches_in_flight;
      src_blocks = it->second.blocks;
      dst_blocks.assign(s.pull->msg.dst_blocks().begin(), s.pull->msg.dst_blocks().end());
      dst = &s.pull->dst_layout;
      tokens = std::min<uint64_t>(it->second.num_tokens, s.pull->msg.num_tokens());
    }
    absl::StatusOr<std::vector<CopyRange>> plan =
        connector_internal::PlanLayer(layout_, src_blocks, *dst, dst_blocks, tokens, s.job.layer);
    if (!plan.ok()) {
      s.status = plan.status();
    } else {
      std::vector<transport::TransferRequest> reqs;
      reqs.reserve(std::min(plan->size(), transport::kMaxBatchRequests));
      for (size_t i = 0; i < plan->size() && s.status.ok(); ++i) {
        const CopyRange& c = (*plan)[i];
        reqs.push_back(transport::TransferRequest{
            .op = transport::OpCode::kWrite,
            .local_addr = const_cast<std::byte*>(bases_[c.src_region] + c.src_offset),
            .segment = s.pull->dst_segments[c.dst_region],
            .remote_offset = c.dst_offset,
            .length = c.length});
        s.bytes += c.length;
        if (reqs.size() == transport::kMaxBatchRequests || i + 1 == plan->size()) {
          absl::StatusOr<transport::BatchId> b = transport_->Submit(reqs);
          if (b.ok()) {
            s.batches.push_back(*b);
          } else {
            s.status = b.status();
          }
          reqs.clear();
        }
      }
      s.ranges = plan->size();
    }
    subs.push_back(std::move(s));
  }
  for (Submitted& s : subs) {
    const absl::Time deadline = absl::Now() + absl::Milliseconds(options_.transfer_timeout_ms);
    for (transport::BatchId b : s.batches) {
      absl::StatusOr<transport::BatchResult> r = absl::DeadlineExceededError("");
      for (;;) {
        r = transport_->Wait(b, std::min(deadline, absl::Now() + absl::Milliseconds(20)));
        if (r.ok() || r.status().code() != absl::StatusCode::kDeadlineExceeded) break;
        bool give_up = absl::Now() >= deadline;
        {
          std::lock_guard<std::mutex> lock(mu_);
          give_up = give_up || s.pull->cancelled || stopping_;
        }
        if (give_up) {
          r = transport_->Cancel(b);
          if (r.ok()) r = absl::CancelledError("transfer cancelled or past its deadline");
          break;
        }
      }
      if (s.status.ok() && !r.ok()) s.status = r.status();
      if (s.status.ok() && !r->ok()) s.status = r->FirstError();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      --s.pull->batches_in_flight;
      if (!s.status.ok()) {
        if (s.pull->error.ok()) {
          s.pull->error = absl::Status(
              s.status.code(), absl::StrCat("layer ", s.job.layer, ": ", s.status.message()));
        }
      } else if (s.pull->error.ok()) {
        s.pull->sent[s.job.layer] = true;
        s.pull->unreported.push_back(s.job.layer);
        ++layers_sent_;
        ranges_sent_ += s.ranges;
        bytes_sent_ += s.bytes;
      }
    }
    cv_.notify_all();
  }
}

// Tells each decode side what changed: layers in place, the end (finished or
// failed). A decode side that cannot be told is taken as gone (the pull fails).
template <transport::Transport T>
void PrefillConnector<T>::NotifyPulls() {
  struct Out {
    std::string address;
    proto::NotifyRequest msg;
    std::string request_id;
    uint64_t pull_id = 0;
  };
  std::vector<Out> outs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, r] : requests_) {
      for (auto& [pull_id, pull] : r.pulls) {
        if (pull.reported_end) continue;
        const bool expired = absl::Now() >= r.expires;
        if (pull.error.ok() && (!r.end_status.ok() || expired)) {
          pull.error =
              !r.end_status.ok()
                  ? r.end_status
                  : absl::DeadlineExceededError(absl::StrCat("prefill request timed out after ",
                                                             options_.request_timeout_ms, " ms"));
          pull.cancelled = true;
        }
        const bool all_sent =
            std::all_of(pull.sent.begin(), pull.sent.end(), [](bool b) { return b; });
        const bool failed = !pull.error.ok() && pull.batches_in_flight == 0;
        if (pull.unreported.empty() && !all_sent && !failed) continue;
        Out o{pull.msg.dst_rpc_address()};
        o.request_id = id;
        o.pull_id = pull_id;
        o.msg.set_request_id(id);
        o.msg.set_pull_id(pull_id);
        for (uint32_t l : pull.unreported) o.msg.add_layers(l);
        pull.unreported.clear();
        if (failed) {
          o.msg.set_error_code(static_cast<int32_t>(pull.error.code()));
          o.msg.set_error_message(std::string(pull.error.message()));
        } else {
          o.msg.set_finished(all_sent);
        }
        pull.reported_end = failed || all_sent;
        outs.push_back(std::move(o));
      }
    }
  }
  for (Out& o : outs) {
    absl::StatusOr<proto::NotifyResponse> r =
        channels_.Call<NotifyMethod>(o.address, o.msg, options_.notify_timeout_ms);
    if (r.ok() && r->known()) continue;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = requests_.find(o.request_id);
    if (it == requests_.end()) continue;
    auto p = it->second.pulls.find(o.pull_id);
    if (p == it->second.pulls.end()) continue;
    if (p->second.error.ok()) {
      p->second.error = r.ok() ? absl::CancelledError("the decode side no longer waits")
                               : absl::UnavailableError(absl::StrCat("notifying the decode side: ",
                                                                     r.status().message()));
    }
    p->second.cancelled = true;
    p->second.reported_end = true;
  }
}

// Under mu_. Hands back requests that ended: every expected pull finished, or
// aborted or expired with no write in flight.
template <transport::Transport T>
void PrefillConnector<T>::Sweep() {
  const absl::Time now = absl::Now();
  for (auto it = requests_.begin(); it != requests_.end();) {
    Request& r = it->second;
    // Every expected pull ended (finished, failed or cancelled by its decode
    // side): nobody needs the blocks any more.
    const bool all_pulled = r.added && r.expected_pulls != 0 && r.pulls.size() == r.expected_pulls;
    bool idle = true, all_ok = all_pulled;
    absl::Status first_error;
    for (auto& [pull_id, pull] : r.pulls) {
      idle = idle && pull.batches_in_flight == 0 && pull.reported_end;
      all_ok = all_ok && pull.error.ok() && pull.reported_end;
      if (first_error.ok()) first_error = pull.error;
    }
    const bool ending = !r.end_status.ok() || now >= r.expires || stopping_;
    if (!(all_ok || ((ending || all_pulled) && idle))) {
      ++it;
      continue;
    }
    for (auto& [pull_id, pull] : r.pulls) {
      for (transport::SegmentHandle h : pull.dst_segments) (void)transport_->CloseSegment(h);
    }
    RememberEnded(it->first,
                  r.added ? (all_ok ? absl::OkStatus() : absl::AbortedError("the request ended"))
                          : absl::DeadlineExceededError("the request was never added"));
    if (r.added) {
      absl::Status why = all_ok               ? absl::OkStatus()
                         : !r.end_status.ok() ? r.end_status
                         : now >= r.expires   ? absl::DeadlineExceededError("request timed out")
                         : !first_error.ok()  ? first_error
                                              : absl::CancelledError("prefill connector closed");
      if (all_ok) {
        ++completed_;
      } else if (r.end_status.ok() && now >= r.expires) {
        ++expired_;
      }
      blocks_held_ -= r.blocks.size();
      released_.push_back(ReleasedRequest{it->first, std::move(r.blocks), std::move(why)});
    }
    it = requests_.erase(it);
  }
}

}  // namespace mooncake::connector

#endif  // MOONCAKE_CONNECTOR_PREFILL_CONNECTOR_H_
