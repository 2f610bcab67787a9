// DecodeConnector<T>: the decode side of the PD connector (connector.h has
// the protocol and the failure semantics).
//
//   auto dc = DecodeConnector<TcpTransport>::Create(&tcp, layout, bases, {});
//   (*dc)->StartRequest("r1", {prefill_rpc_address}, blocks, num_tokens);
//   for (layer...) { if (!(*dc)->WaitLayer("r1", layer, timeout).ok()) recompute; ... }
//   auto end = (*dc)->End("r1");  // blocks reusable now, or after end.reusable_after
//
// The decode cache's regions are registered with the transport at Create and
// unregistered at destruction (keep the memory alive until then). A request
// pulls from one source per prefill TP rank; a layer is in place when every
// source says so.
//
// Thread-safety: thread-safe; WaitLayer/WaitAll/StartRequest/End block (each
// bounded: by its timeout, or by the RPC timeouts in the options).
#ifndef MOONCAKE_CONNECTOR_DECODE_CONNECTOR_H_
#define MOONCAKE_CONNECTOR_DECODE_CONNECTOR_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
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
#include "mooncake/base/status_macros.h"
#include "mooncake/connector/connector.h"
#include "mooncake/connector/internal/layer_plan.h"
#include "mooncake/connector/internal/peer_channels.h"
#include "mooncake/connector/kv_layout.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/rpc/tcp_server.h"
#include "mooncake/transport/transport.h"

namespace mooncake::connector {

struct DecodeConnectorOptions {
  std::string rpc_host = "127.0.0.1";
  uint16_t rpc_port = 0;             // 0: any free port
  uint32_t tp_rank = 0;              // this instance's rank in the decode TP group
  uint32_t tp_ranks = 1;             // the group's degree (each rank pulls its own heads)
  int64_t rpc_timeout_ms = 5'000;    // one Pull or Cancel
  int64_t probe_after_ms = 500;      // no word from a source this long: ask it (Status)
  int64_t probe_timeout_ms = 1'000;  // one Status
  int64_t io_deadline_ms = 5'000;    // the transport's I/O deadline, for reusable_after
  size_t max_requests = 4096;
  transport::MemoryLocation location = transport::MemoryLocation::HostDram();
  MetricsRegistry* metrics = nullptr;  // null: a private registry
  // Authentication (base/auth.h; docs/security.md): the RPC server serves
  // only peers that prove a principal this file lists, and calls to peers
  // prove this process's own. Null: none. The transport is authenticated by
  // its own options.
  std::shared_ptr<const auth::Credentials> auth;
};

struct DecodeConnectorStats {
  uint64_t requests_active = 0;
  uint64_t requests_finished = 0;    // every layer arrived
  uint64_t requests_failed = 0;      // ended with an error or unfinished
  uint64_t cancels_unconfirmed = 0;  // ended while a source could not confirm
};

// What End says about the request's blocks.
struct EndResult {
  absl::Status status;        // OK: every layer arrived; else the first error
  bool reusable_now = false;  // no write of the request can land any more
  absl::Time reusable_after;  // when !reusable_now: from then on
};

template <transport::Transport T>
class DecodeConnector {
 public:
  // `bases[i]` holds region i of `layout` (layout.RegionBytes(i) bytes).
  // Errors: INVALID_ARGUMENT, and the transport's RegisterMemory errors.
  static absl::StatusOr<std::unique_ptr<DecodeConnector>> Create(
      T* transport, KvLayout layout, std::vector<std::byte*> bases,
      DecodeConnectorOptions options = {}) {
    MC_ASSERT(transport != nullptr, "a connector needs a transport");
    RETURN_IF_ERROR(layout.Validate());
    if (bases.size() != layout.NumRegions()) {
      return absl::InvalidArgumentError(absl::StrCat("DecodeConnector: the layout has ",
                                                     layout.NumRegions(), " regions, got ",
                                                     bases.size(), " base addresses"));
    }
    if (options.tp_ranks == 0 || options.tp_ranks > kMaxTpRanks ||
        options.tp_rank >= options.tp_ranks || options.rpc_timeout_ms <= 0 ||
        options.probe_after_ms <= 0 || options.probe_timeout_ms <= 0) {
      return absl::InvalidArgumentError(
          "DecodeConnector: tp_rank < tp_ranks <= 64 and timeouts > 0");
    }
    std::unique_ptr<DecodeConnector> c(
        new DecodeConnector(transport, std::move(layout), std::move(options)));
    for (size_t i = 0; i < bases.size(); ++i) {
      absl::StatusOr<transport::SegmentDesc> seg =
          transport->RegisterMemory(bases[i], c->layout_.RegionBytes(), c->options_.location);
      if (!seg.ok()) return seg.status();
      c->segments_.push_back(*seg);
    }
    RETURN_IF_ERROR(c->StartServer());
    return c;
  }

  DecodeConnector(const DecodeConnector&) = delete;
  DecodeConnector& operator=(const DecodeConnector&) = delete;
  ~DecodeConnector() {
    if (server_ != nullptr) server_->Stop();  // null when Create failed before it
    for (const transport::SegmentDesc& s : segments_) (void)transport_->UnregisterMemory(s.id);
  }

  std::string rpc_address() const { return server_->address(); }
  const KvLayout& layout() const { return layout_; }
  // The transport segments of the cache's regions, in region order.
  const std::vector<transport::SegmentDesc>& segments() const { return segments_; }

  // Asks every source (a prefill connector's rpc_address, one per prefill TP
  // rank) to write the request's first `num_tokens` tokens into `blocks`.
  // Blocks up to rpc_timeout_ms per source. On an error nothing is pulled
  // (sources that accepted are cancelled) and the request is not held.
  absl::Status StartRequest(std::string_view request_id, const std::vector<std::string>& sources,
                            std::vector<uint64_t> blocks, uint64_t num_tokens);

  // Blocks until `layer` is in place from every source (OK), a source failed
  // (its error; UNAVAILABLE for one that stopped answering), or `timeout`
  // passed (DEADLINE_EXCEEDED). NOT_FOUND for an unknown request.
  absl::Status WaitLayer(std::string_view request_id, uint32_t layer, absl::Duration timeout) {
    return Wait(request_id, layer, timeout);
  }
  absl::Status WaitAll(std::string_view request_id, absl::Duration timeout) {
    return Wait(request_id, kAllLayers, timeout);
  }

  // Forgets the request. Unfinished pulls are cancelled at their sources
  // (blocking up to rpc_timeout_ms each) so that the blocks can be reused.
  EndResult End(std::string_view request_id);

  DecodeConnectorStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    DecodeConnectorStats s = counters_;
    s.requests_active = requests_.size();
    return s;
  }

 private:
  static constexpr uint32_t kAllLayers = ~0u;

  struct Source {
    std::string address;
    uint64_t pull_id = 0;
    std::vector<bool> arrived;  // per layer
    bool finished = false;
    absl::Status error;
    bool error_is_final = false;  // the source said so: none of its writes is in flight
    absl::Time last_heard;
    int64_t request_timeout_ms = 0;
  };
  struct Request {
    std::vector<Source> sources;
  };

  DecodeConnector(T* transport, KvLayout layout, DecodeConnectorOptions options)
      : transport_(transport),
        layout_(std::move(layout)),
        options_(std::move(options)),
        registry_(options_.metrics),
        channels_(options_.auth),
        pull_id_base_(std::random_device{}() | (uint64_t{std::random_device{}()} << 32)) {}

  absl::Status StartServer() {
    RETURN_IF_ERROR(registry_.Register<NotifyMethod>(
        [this](const proto::NotifyRequest& r) { return OnNotify(r); }));
    rpc::RpcServerOptions so;
    so.host = options_.rpc_host;
    so.port = options_.rpc_port;
    so.auth = options_.auth;
    so.auth = options_.auth;
    server_ = std::make_unique<rpc::RpcServer>(&registry_, so);
    return server_->Start();
  }

  absl::StatusOr<proto::NotifyResponse> OnNotify(const proto::NotifyRequest& req) {
    proto::NotifyResponse resp;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Source* s = FindSource(req.request_id(), req.pull_id());
      if (s == nullptr) return resp;
      resp.set_known(true);
      Merge(*s, req.layers(), req.finished(), req.error_code(), req.error_message());
    }
    cv_.notify_all();
    return resp;
  }

  // Under mu_.
  Source* FindSource(std::string_view request_id, uint64_t pull_id) {
    auto it = requests_.find(request_id);
    if (it == requests_.end()) return nullptr;
    for (Source& s : it->second.sources) {
      if (s.pull_id == pull_id) return &s;
    }
    return nullptr;
  }
  template <typename Layers>
  void Merge(Source& s, const Layers& layers, bool finished, int32_t code, const std::string& msg) {
    s.last_heard = absl::Now();
    for (uint32_t l : layers) {
      if (l < s.arrived.size()) s.arrived[l] = true;
    }
    if (finished) {
      s.finished = true;
      std::fill(s.arrived.begin(), s.arrived.end(), true);
    }
    if (code != 0 && s.error.ok()) {
      s.error = absl::Status(static_cast<absl::StatusCode>(code),
                             absl::StrCat("prefill ", s.address, ": ", msg));
      s.error_is_final = true;
    }
  }

  absl::Status Wait(std::string_view request_id, uint32_t layer, absl::Duration timeout);
  // Asks one source where its pull stands (no lock held).
  void Probe(const std::string& request_id, const std::string& address, uint64_t pull_id);

  T* const transport_;
  const KvLayout layout_;
  const DecodeConnectorOptions options_;
  rpc::ServiceRegistry registry_;
  std::unique_ptr<rpc::RpcServer> server_;
  std::vector<transport::SegmentDesc> segments_;
  connector_internal::PeerChannels channels_;
  const uint64_t pull_id_base_;
  std::atomic<uint64_t> next_pull_{1};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Request, std::less<>> requests_;
  DecodeConnectorStats counters_;
};

// --- Implementation ----------------------------------------------------------

template <transport::Transport T>
absl::Status DecodeConnector<T>::StartRequest(std::string_view request_id,
                                              const std::vector<std::string>& sources,
                                              std::vector<uint64_t> blocks, uint64_t num_tokens) {
  RETURN_IF_ERROR(connector_internal::CheckRequestShape(layout_, request_id, blocks, num_tokens));
  if (sources.empty() || sources.size() > kMaxTpRanks) {
    return absl::InvalidArgumentError("StartRequest: 1 to 64 sources (one per prefill TP rank)");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (requests_.contains(request_id)) {
      return absl::AlreadyExistsError(
          absl::StrCat("request '", AbslView(request_id), "' is active"));
    }
    if (requests_.size() >= options_.max_requests) {
      return absl::ResourceExhaustedError("DecodeConnector: max_requests requests active");
    }
    Request& r = requests_[std::string(request_id)];
    for (const std::string& address : sources) {
      Source s;
      s.address = address;
      s.pull_id = pull_id_base_ + next_pull_.fetch_add(1);
      if (s.pull_id == 0) s.pull_id = pull_id_base_ + next_pull_.fetch_add(1);
      s.arrived.assign(layout_.num_layers, false);
      s.last_heard = absl::Now();
      r.sources.push_back(std::move(s));
    }
  }
  proto::PullRequest pull;
  pull.set_request_id(std::string(request_id));
  pull.set_dst_layout(layout_.Encode());
  for (uint32_t b : blocks) pull.add_dst_blocks(b);
  pull.set_num_tokens(num_tokens);
  pull.set_dst_transport_endpoint(transport_->LocalEndpoint());
  for (const transport::SegmentDesc& s : segments_) {
    proto::Region* region = pull.add_dst_regions();
    region->set_segment_id(s.id);
    region->set_length(s.length);
  }
  pull.set_dst_rpc_address(rpc_address());
  pull.set_dst_rank(options_.tp_rank);
  pull.set_dst_ranks(options_.tp_ranks);
  std::vector<std::pair<std::string, uint64_t>> targets;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Source& s : requests_.find(request_id)->second.sources) {
      targets.emplace_back(s.address, s.pull_id);
    }
  }
  absl::Status failed;
  for (const auto& [address, pull_id] : targets) {
    pull.set_pull_id(pull_id);
    absl::StatusOr<proto::PullResponse> r =
        channels_.Call<PullMethod>(address, pull, options_.rpc_timeout_ms);
    if (!r.ok()) {
      failed = absl::Status(r.status().code(),
                            absl::StrCat("pull from ", address, ": ", r.status().message()));
      break;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (Source* s = FindSource(request_id, pull_id)) {
      s->request_timeout_ms = static_cast<int64_t>(r->request_timeout_ms());
    }
  }
  if (failed.ok()) return absl::OkStatus();
  // Sources that accepted are cancelled; the caller recomputes.
  (void)End(request_id);
  return failed;
}

template <transport::Transport T>
void DecodeConnector<T>::Probe(const std::string& request_id, const std::string& address,
                               uint64_t pull_id) {
  proto::StatusRequest q;
  q.set_request_id(request_id);
  q.set_pull_id(pull_id);
  absl::StatusOr<proto::StatusResponse> r =
      channels_.Call<StatusMethod>(address, q, options_.probe_timeout_ms);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Source* s = FindSource(request_id, pull_id);
    if (s == nullptr) return;
    if (!r.ok()) {
      if (s->error.ok()) {
        s->error = absl::UnavailableError(
            absl::StrCat("prefill ", address, " stopped answering: ", r.status().message()));
      }
    } else if (!r->known()) {
      if (s->error.ok() && !s->finished) {
        s->error =
            absl::NotFoundError(absl::StrCat("prefill ", address, " no longer has the pull"));
        s->error_is_final = true;  // a source without the pull writes nothing for it
      }
    } else {
      Merge(*s, r->layers(), r->finished(), r->error_code(), r->error_message());
    }
  }
  cv_.notify_all();
}

template <transport::Transport T>
absl::Status DecodeConnector<T>::Wait(std::string_view request_id, uint32_t layer,
                                      absl::Duration timeout) {
  if (layer != kAllLayers && layer >= layout_.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", layer, " of a ", layout_.num_layers, "-layer layout"));
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto it = requests_.find(request_id);
    if (it == requests_.end()) {
      return absl::NotFoundError(
          absl::StrCat("request '", AbslView(request_id), "' is not active"));
    }
    bool done = true;
    std::vector<std::pair<std::string, uint64_t>> quiet;  // sources to probe
    const absl::Time now = absl::Now();
    for (const Source& s : it->second.sources) {
      if (!s.error.ok()) return s.error;
      const bool have = layer == kAllLayers ? s.finished : s.arrived[layer];
      done = done && have;
      if (!have && now - s.last_heard >= absl::Milliseconds(options_.probe_after_ms)) {
        quiet.emplace_back(s.address, s.pull_id);
      }
    }
    if (done) return absl::OkStatus();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "request '", AbslView(request_id),
          "': ", layer == kAllLayers ? std::string("all layers") : absl::StrCat("layer ", layer),
          " not in place after ", absl::FormatDuration(timeout)));
    }
    if (!quiet.empty()) {
      const std::string id(request_id);
      lock.unlock();
      for (const auto& [address, pull_id] : quiet) Probe(id, address, pull_id);
      lock.lock();
      continue;
    }
    const absl::Time wake = std::min(deadline, now + absl::Milliseconds(options_.probe_after_ms));
    cv_.wait_for(lock, absl::ToChronoMilliseconds(wake - now) + std::chrono::milliseconds(1));
  }
}

template <transport::Transport T>
EndResult DecodeConnector<T>::End(std::string_view request_id) {
  Request r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = requests_.find(request_id);
    if (it == requests_.end()) {
      return EndResult{
          absl::NotFoundError(absl::StrCat("request '", AbslView(request_id), "' is not active")),
          true, absl::Now()};
    }
    r = std::move(it->second);
    requests_.erase(it);
  }
  EndResult out;
  out.reusable_now = true;
  out.reusable_after = absl::Now();
  for (Source& s : r.sources) {
    if (out.status.ok() && !s.error.ok()) out.status = s.error;
    if (out.status.ok() && !s.finished) out.status = absl::CancelledError("ended unfinished");
    if (s.finished || s.error_is_final) continue;
    proto::CancelRequest c;
    c.set_request_id(std::string(request_id));
    c.set_pull_id(s.pull_id);
    c.set_reason(s.error.ok() ? "the decode side ended the request"
                              : std::string(s.error.message()));
    absl::StatusOr<proto::CancelResponse> ack =
        channels_.Call<CancelMethod>(s.address, c, options_.rpc_timeout_ms);
    if (ack.ok()) continue;  // known or not, no write of the pull is in flight there
    // Unconfirmed: the source stops on its own by its request timeout.
    out.reusable_now = false;
    const int64_t source_timeout_ms = s.request_timeout_ms > 0 ? s.request_timeout_ms : 120'000;
    out.reusable_after =
        std::max(out.reusable_after,
                 absl::Now() + absl::Milliseconds(source_timeout_ms + options_.io_deadline_ms));
  }
  std::lock_guard<std::mutex> lock(mu_);
  (out.status.ok() ? counters_.requests_finished : counters_.requests_failed)++;
  if (!out.reusable_now) ++counters_.cancels_unconfirmed;
  return out;
}

}  // namespace mooncake::connector

#endif  // MOONCAKE_CONNECTOR_DECODE_CONNECTOR_H_
