// ClientCore: the machinery behind client.h (master calls, the put and get
// paths, the cache and the transports). Only client.h includes it.
#ifndef MOONCAKE_STORE_CLIENT_INTERNAL_CLIENT_CORE_H_
#define MOONCAKE_STORE_CLIENT_INTERNAL_CLIENT_CORE_H_

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/base/value_checksum.h"
#include "mooncake/store/client/client_options.h"
#include "mooncake/store/client/internal/buffer_registry.h"
#include "mooncake/store/client/link_arbiter.h"
#include "mooncake/store/client/metadata_cache.h"
#include "mooncake/store/client/network_codec.h"
#include "mooncake/store/client/rdma_route.h"
#include "mooncake/store/client/read_reports.h"
#include "mooncake/store/client/read_spread.h"
#include "mooncake/store/client/segment_resolver.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/channel.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/object_key.h"
#include "mooncake/store/rpc/tensor_meta.h"
#include "mooncake/store/rpc/worker_id.h"
#include "mooncake/transport/local_transport.h"
#include "mooncake/transport/router.h"
#include "mooncake/transport/shm_transport.h"
#include "mooncake/transport/tcp_transport.h"

namespace mooncake::client_internal {

namespace proto = ::mooncake::store::proto;
using client::CachedObject;

// One get: where its bytes go. Either `owned` (resized to the object) or
// [buffer, buffer + capacity). `size` is set on success.
struct GetTarget {
  std::string_view key;
  void* buffer = nullptr;
  size_t capacity = 0;
  std::string* owned = nullptr;
  uint64_t size = 0;
  // An object stored compressed (TensorMeta.codec != 0) is read into
  // `staging` (its stored bytes), then decoded into the destination, which
  // holds its raw_bytes (shape x dtype). Null: read straight into place.
  std::unique_ptr<char[]> staging;
  bool packed = false;
  uint64_t raw_bytes = 0;
  // Set on success with `size`: the object's TensorMeta (null: none) and version.
  std::shared_ptr<const proto::TensorMeta> tensor;
  uint64_t version = 0;
};

struct AtomicStats {
  std::atomic<uint64_t> master_rpcs{0}, cache_hits{0}, cache_misses{0}, replica_fallbacks{0},
      checksum_mismatches{0}, bytes_read{0}, bytes_written{0}, registered_bytes_moved{0},
      ssd_load_waits{0}, ssd_put_waits{0}, compressed_puts{0}, compression_saved_bytes{0},
      decompressed_gets{0};
};

inline void Add(std::atomic<uint64_t>& c, uint64_t n = 1) {
  c.fetch_add(n, std::memory_order_relaxed);  // counters: no ordering needed
}

// The keys a client may name are the keys the master accepts
// (rpc/object_key.h), so blocks found by PrefixQuery can be put and read.
using rpc::ValidateObjectKey;

inline absl::Status Annotate(const absl::Status& s, std::string_view op, std::string_view key) {
  if (s.ok()) return s;
  return absl::Status(
      s.code(), absl::StrCat(AbslView(op), " '", absl::CEscape(AbslView(key)), "': ", s.message()));
}

// PutOptions::group_id / PutItem::group_id: bounded, and not on a replacing
// put (the master refuses both too; this names the field).
// The range capability the master gave a tenant's connection for `rep`
// (Replica.capability), for TransferRequest::capability; null without one.
inline const char* CapabilityOf(const proto::Replica& rep) {
  return rep.capability().size() == transport::kCapabilityBytes ? rep.capability().data() : nullptr;
}

inline absl::Status CheckGroupId(std::string_view group_id, bool replace) {
  if (group_id.size() > rpc::kMaxGroupIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("group_id of ", group_id.size(), " bytes; at most ", rpc::kMaxGroupIdBytes));
  }
  if (!group_id.empty() && replace) {
    return absl::InvalidArgumentError("a replacing put cannot join an object group (group_id)");
  }
  return absl::OkStatus();
}

// The client's TCP transport settings (ClientOptions::tcp_*).
inline transport::TcpTransport::Options TcpOptionsFor(const client::ClientOptions& o) {
  transport::TcpTransport::Options to;
  to.lanes_per_peer = o.tcp_lanes_per_peer;
  to.slice_bytes = o.tcp_slice_bytes;
  to.spread_min_bytes = o.tcp_spread_min_bytes;
  to.whole_request_lanes = o.tcp_whole_request_lanes;
  to.auth = o.auth;
  return to;
}

// What ClientCore::Create refuses in `o` before it opens anything.
inline absl::Status CheckClientOptions(const client::ClientOptions& o) {
  if (!o.use_local && !o.use_shm && !o.use_tcp && !o.use_rdma) {
    return absl::InvalidArgumentError("ClientOptions: enable at least one transport");
  }
  if (o.rpc_timeout_ms <= 0 || o.transfer_timeout_ms <= 0 || o.lease_margin_ms < 0 ||
      o.cache_max_entries == 0 || o.max_object_bytes == 0 || o.clock == nullptr ||
      o.put_attempts < 1 || o.put_attempts > 16 || o.suspect_segment_ms < 0 ||
      o.cached_read_report_ms < 0) {
    return absl::InvalidArgumentError(
        "ClientOptions: timeouts, cache_max_entries and max_object_bytes must be > 0, "
        "put_attempts in 1..16, lease_margin_ms, suspect_segment_ms and cached_read_report_ms "
        ">= 0, clock set");
  }
  if (o.qos_class > 1) {
    return absl::InvalidArgumentError(absl::StrCat("ClientOptions: qos_class ", o.qos_class,
                                                   "; use 0 (latency-critical) or 1 (bulk)"));
  }
  if (!o.qos_link.empty() && o.qos_link_bytes_per_s == 0) {
    return absl::InvalidArgumentError(
        "ClientOptions: qos_link needs qos_link_bytes_per_s, the rate the link sustains");
  }
  if (o.use_tcp) return transport::TcpTransport::CheckOptions(TcpOptionsFor(o));
  return absl::OkStatus();
}

template <rpc::RpcChannel C>
class ClientCore {
 public:
  static absl::StatusOr<std::unique_ptr<ClientCore>> Create(client::ClientOptions o, C* channel) {
    RETURN_IF_ERROR(CheckClientOptions(o));
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    if (o.host_id.empty()) o.host_id = host;
    static std::atomic<uint64_t> counter{0};
    if (o.client_id.empty()) {
      o.client_id = absl::StrCat(host, "/", ::getpid(), "/", counter.fetch_add(1));
    }
    std::vector<std::unique_ptr<transport_internal::AnyTransport>> list;
    if (o.use_local) {
      list.push_back(
          std::make_unique<transport_internal::AnyTransportOf<transport::LocalTransport>>(
              std::make_unique<transport::LocalTransport>()));
    }
    if (o.use_shm) {
      // Random bits: abstract socket names are shared across pid namespaces.
      std::random_device rd;
      transport::ShmTransport::Options so;
      so.socket_name =
          absl::StrCat("@mcc.", ::getpid(), ".", absl::Hex((uint64_t{rd()} << 32) ^ rd()));
      so.auth = o.auth;
      ASSIGN_OR_RETURN(auto shm, transport::ShmTransport::Create(std::move(so)));
      list.push_back(std::make_unique<transport_internal::AnyTransportOf<transport::ShmTransport>>(
          std::move(shm)));
    }
    RETURN_IF_ERROR(client::AppendRdmaRoute(o.use_rdma, o.require_rdma, o.rdma_factory, "127.0.0.1",
                                            &list, o.auth));
    if (o.use_tcp) {
      ASSIGN_OR_RETURN(auto tcp, transport::TcpTransport::Create(TcpOptionsFor(o)));
      list.push_back(std::make_unique<transport_internal::AnyTransportOf<transport::TcpTransport>>(
          std::move(tcp)));
    }
    transport::RouterOptions ro;
    if (!o.qos_link.empty()) {
      ASSIGN_OR_RETURN(ro, client::LinkArbiterRouterOptions(o.qos_link, o.qos_link_bytes_per_s,
                                                            o.qos_class, list));
    }
    ASSIGN_OR_RETURN(auto router, transport::Router::CreateFromList(ro, std::move(list)));
    return std::unique_ptr<ClientCore>(new ClientCore(std::move(o), channel, std::move(router)));
  }

  ~ClientCore() {
    if (reports_ != nullptr) SendReadReports(reports_->TakeAll());
    // Hand the cached leases back so their space frees now, not at expiry.
    std::vector<uint64_t> leases = cache_.Clear();
    if (!leases.empty()) {
      proto::ReleaseLeasesRequest req;
      for (uint64_t id : leases) req.add_lease_ids(id);
      CallMaster<rpc::ReleaseLeasesMethod>(req).IgnoreError();
    }
  }

  uint64_t NextRequestId() {
    // relaxed: only uniqueness matters.
    const uint64_t id = next_request_id_.fetch_add(1, std::memory_order_relaxed);
    return id != 0 ? id : next_request_id_.fetch_add(1, std::memory_order_relaxed);
  }

  std::string Tenant(std::string_view t) const {
    return t.empty() ? options_.tenant : std::string(t);
  }

  template <rpc::RpcMethod M>
  absl::StatusOr<typename M::Response> CallMaster(const typename M::Request& req) {
    Add(stats_.master_rpcs);
    return rpc::Call<M>(*channel_, req, CallOpts());
  }

  // Issues every request at once (pipelined on one connection) and waits for
  // all; bounded by the RPC timeout.
  template <rpc::RpcMethod M>
  std::vector<absl::StatusOr<typename M::Response>> CallMany(
      const std::vector<typename M::Request>& reqs) {
    struct State {
      Mutex mu;
      size_t left ABSL_GUARDED_BY(mu) = 0;
      std::vector<std::optional<absl::StatusOr<typename M::Response>>> out;
    } state;
    state.out.resize(reqs.size());
    {
      MutexLock lock(&state.mu);
      state.left = reqs.size();
    }
    Add(stats_.master_rpcs, reqs.size());
    auto issue = [&] {
      for (size_t i = 0; i < reqs.size(); ++i) {
        rpc::CallAsync<M>(*channel_, reqs[i], CallOpts(),
                          [&state, i](absl::StatusOr<typename M::Response> r) {
                            MutexLock lock(&state.mu);
                            state.out[i].emplace(std::move(r));
                            --state.left;
                          });
      }
    };
    rpc::IssueAndReceive(
        *channel_,
        [&] {
          if constexpr (requires { typename C::Batch; }) {
            typename C::Batch batch(*channel_);  // one send for the lot
            issue();
          } else {
            issue();
          }
        },
        [&state] {
          MutexLock lock(&state.mu);
          return state.left == 0;
        });
    MutexLock lock(&state.mu);
    state.mu.Await(Condition(
        +[](size_t* left) { return *left == 0; }, &state.left));
    std::vector<absl::StatusOr<typename M::Response>> out;
    out.reserve(reqs.size());
    for (auto& r : state.out) out.push_back(std::move(*r));
    return out;
  }

  // The requests of M (two or more) as one batched RPC B per
  // rpc::kMaxBatchItems of them, all of `tenant`, answered per item as
  // CallMany would; CallMany itself for one request, or once the master has
  // answered B with UNIMPLEMENTED (an older master, a test fake).
  template <rpc::RpcMethod M, rpc::RpcMethod B>
  std::vector<absl::StatusOr<typename M::Response>> CallBatched(
      const std::vector<typename M::Request>& reqs, const std::string& tenant) {
    // relaxed: a hint; a racing caller at worst asks once more.
    if (reqs.size() < 2 || no_batch_rpcs_.load(std::memory_order_relaxed)) {
      return CallMany<M>(reqs);
    }
    std::vector<typename B::Request> batches;
    for (size_t begin = 0; begin < reqs.size(); begin += rpc::kMaxBatchItems) {
      typename B::Request& b = batches.emplace_back();
      b.set_tenant(tenant);
      const size_t end = std::min(reqs.size(), begin + rpc::kMaxBatchItems);
      b.mutable_items()->Reserve(static_cast<int>(end - begin));
      for (size_t i = begin; i < end; ++i) *b.add_items() = reqs[i];
    }
    auto answers = CallMany<B>(batches);
    if (!answers.front().ok() && absl::IsUnimplemented(answers.front().status())) {
      no_batch_rpcs_.store(true, std::memory_order_relaxed);
      return CallMany<M>(reqs);
    }
    std::vector<absl::StatusOr<typename M::Response>> out;
    out.reserve(reqs.size());
    for (size_t k = 0; k < batches.size(); ++k) {
      const int n = batches[k].items_size();
      if (answers[k].ok() && (answers[k]->items_size() != n || answers[k]->status_size() != n)) {
        answers[k] = absl::InternalError(absl::StrCat("the master answered a batch of ", n,
                                                      " items with ", answers[k]->items_size()));
      }
      for (int i = 0; i < n; ++i) {
        if (!answers[k].ok()) {
          out.push_back(answers[k].status());
        } else if (const proto::ItemStatus& st = answers[k]->status(i); st.code() != 0) {
          out.push_back(absl::Status(static_cast<absl::StatusCode>(st.code()), st.message()));
        } else {
          out.push_back(std::move(*answers[k]->mutable_items(i)));
        }
      }
    }
    return out;
  }

  std::vector<absl::Status> PutMany(std::span<const client::PutItem> items,
                                    const client::PutOptions& o);
  std::vector<absl::Status> GetMany(std::span<GetTarget> targets, const client::GetOptions& o);
  // PrefixQuery with replicas over `chain` (one chunk), the matched blocks
  // read into `buffers` in one batch, the lease released. Returns how many
  // leading blocks were read (client.h GetPrefixInto has the contract).
  absl::StatusOr<size_t> ReadPrefixChunk(std::span<const Hash128> chain,
                                         std::span<const client::BlockBuffer> buffers,
                                         const std::string& tenant);
  std::vector<absl::Status> RemoveMany(std::span<const std::string_view> keys,
                                       const client::RemoveOptions& o);
  absl::StatusOr<uint64_t> RemoveAll(const client::RemoveAllOptions& o);
  absl::StatusOr<uint64_t> GetSize(std::string_view key, std::string_view tenant);
  // Clones, object groups and tensor queries (client_objects.h; client.h has
  // the contracts).
  absl::StatusOr<client::CloneResult> Clone(std::span<const std::string_view> sources,
                                            std::span<const std::string_view> destinations,
                                            const client::CloneOptions& o);
  absl::StatusOr<client::CloneResult> ClonePrefix(std::string_view source_prefix,
                                                  std::string_view destination_prefix,
                                                  const client::CloneOptions& o);
  absl::StatusOr<client::GroupCommit> CommitGroup(std::string_view group_id,
                                                  const client::GroupOptions& o);
  absl::StatusOr<uint64_t> RemoveGroup(std::string_view group_id, const client::GroupOptions& o);
  absl::StatusOr<client::QueriedObjects> QueryObjects(const client::ObjectQuery& q);

  client::ClientStats stats() const {
    auto l = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    return {l(stats_.master_rpcs),
            l(stats_.cache_hits),
            l(stats_.cache_misses),
            l(stats_.replica_fallbacks),
            l(stats_.checksum_mismatches),
            l(stats_.bytes_read),
            l(stats_.bytes_written),
            l(stats_.registered_bytes_moved),
            l(stats_.ssd_load_waits),
            l(stats_.ssd_put_waits),
            router_->failovers(),
            l(stats_.compressed_puts),
            l(stats_.compression_saved_bytes),
            l(stats_.decompressed_gets),
            link_.bytes_per_s()};
  }
  const std::string& client_id() const { return options_.client_id; }
  client::MetadataCache& cache() { return cache_; }
  transport::Router& router() { return *router_; }
  BufferRegistry& buffers() { return buffers_; }

 private:
  // What a get knows about one object: from the cache or a fresh answer.
  struct Resolved {
    bool have = false;
    bool from_cache = false;
    CachedObject obj;
  };
  // One per object of a get; a single get needs no heap block for it.
  using ResolvedList = absl::InlinedVector<Resolved, 1>;

  ClientCore(client::ClientOptions o, C* channel, std::unique_ptr<transport::Router> router)
      : options_(std::move(o)),
        channel_(channel),
        router_(std::move(router)),
        resolver_(
            router_.get(),
            [this](std::span<const uint64_t> ids, absl::Time deadline) {
              Add(stats_.master_rpcs);  // once per segment id in the client's life
              return client::DescribeSegmentsOver(*channel_, ids, deadline);
            },
            options_.max_open_segments),
        cache_(options_.cache_max_entries, options_.clock),
        reports_(options_.cache_enabled && options_.cached_read_report_ms > 0
                     ? std::make_unique<client::CachedReadReports>(options_.cached_read_report_ms *
                                                                   1'000'000)
                     : nullptr) {}

  rpc::CallOptions CallOpts() const { return {.timeout_ns = options_.rpc_timeout_ms * 1'000'000}; }
  int64_t NowNs() const { return options_.clock->NowNs(); }
  int64_t MarginNs() const { return options_.lease_margin_ms * 1'000'000; }

  // A read of `obj` must end before its lease does (less the margin).
  absl::Time ReadDeadline(const CachedObject& obj) const {
    const int64_t now = NowNs();
    const int64_t end =
        std::min(now + options_.transfer_timeout_ms * 1'000'000, obj.lease_end_ns - MarginNs());
    return absl::Now() + absl::Nanoseconds(std::max<int64_t>(end - now, 0));
  }

  void ReleaseAsync(std::vector<uint64_t> leases) {
    if (leases.empty()) return;
    proto::ReleaseLeasesRequest req;
    for (uint64_t id : leases) req.add_lease_ids(id);
    Add(stats_.master_rpcs);
    // Best effort: an unreleased lease just runs out.
    rpc::CallAsync<rpc::ReleaseLeasesMethod>(*channel_, req, CallOpts(), [](auto) {});
  }

  // Empties the cache; its live leases are released before this returns
  // (best effort: an unreleased lease just runs out).
  void ClearCacheNow() {
    const std::vector<uint64_t> leases = cache_.Clear();
    for (size_t begin = 0; begin < leases.size(); begin += rpc::kMaxBatchKeys) {
      proto::ReleaseLeasesRequest req;
      const size_t end = std::min(leases.size(), begin + rpc::kMaxBatchKeys);
      for (size_t i = begin; i < end; ++i) req.add_lease_ids(leases[i]);
      CallMaster<rpc::ReleaseLeasesMethod>(req).IgnoreError();
    }
  }

  // Whether cached reads go to the master as they happen (TouchObjects);
  // else they ride on the next GetReplicas of the object.
  bool ReportingReads() const {
    return reports_ != nullptr && !touch_unsupported_->load(std::memory_order_relaxed);
  }
  // A read of (tenant, key) served from the cache.
  void NoteCachedRead(std::string_view tenant, std::string_view key) {
    if (ReportingReads()) SendReadReports(reports_->Add(tenant, key, NowNs()));
  }
  // Best effort: the reads of a lost report are never counted (the entry's
  // next GetReplicas carries none); an UNIMPLEMENTED answer (an older master)
  // turns reporting off.
  void SendReadReports(std::vector<proto::TouchObjectsRequest> reqs) {
    for (const proto::TouchObjectsRequest& req : reqs) {
      Add(stats_.master_rpcs);
      rpc::CallAsync<rpc::TouchObjectsMethod>(
          *channel_, req, CallOpts(),
          [off = touch_unsupported_](absl::StatusOr<proto::TouchObjectsResponse> r) {
            if (absl::IsUnimplemented(r.status())) off->store(true, std::memory_order_relaxed);
          });
    }
  }

  void Invalidate(const std::string& tenant, std::string_view key) {
    if (auto lease = cache_.Erase(tenant, key); lease.has_value()) ReleaseAsync({*lease});
  }

  // Where the transport puts the object's stored bytes.
  void* Destination(GetTarget& t) const {
    if (t.staging != nullptr) return t.staging.get();
    return FinalDestination(t);
  }
  // Where the caller wants the value.
  void* FinalDestination(GetTarget& t) const {
    return t.owned != nullptr ? static_cast<void*>(t.owned->data()) : t.buffer;
  }
  // The value's size as the caller sees it (raw when stored compressed).
  static uint64_t ValueBytes(const GetTarget& t, const CachedObject& obj) {
    return t.packed ? t.raw_bytes : obj.size_bytes;
  }
  // Feeds a finished transfer batch to link_ (only a batch that all went
  // through measures the link).
  void ObserveLink(std::span<const transport::TransferRequest> reqs,
                   std::span<const absl::Status> rs, absl::Time started) {
    uint64_t bytes = 0;
    for (size_t j = 0; j < reqs.size(); ++j) {
      if (!rs[j].ok()) return;
      bytes += reqs[j].length;
    }
    link_.Observe(bytes, absl::ToDoubleSeconds(absl::Now() - started));
  }
  // Decodes the objects read into staging (stored compressed) into their
  // destinations; a frame that does not decode fails its item (DATA_LOSS).
  void DecodeStaged(std::span<GetTarget> t, const ResolvedList& res, std::vector<absl::Status>* st);
  // The compressed stand-ins of the items ClientOptions::network_compression
  // compresses (client_put.h).
  struct PackedPuts {
    std::vector<client::PutItem> items;      // items, compressed ones pointing below
    std::vector<std::string> frames;         // per item: its stored bytes ("" = raw)
    std::vector<proto::TensorMeta> tensors;  // per item: its TensorMeta with codec set
  };
  void PackForNetwork(std::span<const client::PutItem> items, const client::PutOptions& o,
                      PackedPuts* packed);

  // Whether a read of `obj` asks the transport for chunk digests: only the
  // chunked checksum format is verified from them.
  bool WantsDigests(const CachedObject& obj) const {
    return options_.verify_checksums && obj.checksum_format == kChecksumChunked;
  }

  void LookupMany(std::span<GetTarget> t, const std::string& tenant, bool bypass, ResolvedList* res,
                  std::vector<absl::Status>* st);
  absl::Status ReadReplica(const CachedObject& obj, size_t r, void* dst, absl::Time deadline);
  absl::Status ReadFrom(const CachedObject& obj, size_t first, void* dst, absl::Time deadline,
                        absl::Status earlier = absl::OkStatus());
  void ReadAll(std::span<GetTarget> t, ResolvedList& res, std::vector<absl::Status>* st);
  void CheckTarget(GetTarget& t, const CachedObject& obj, absl::Status* st) const;
  void TakeReplicas(google::protobuf::RepeatedPtrField<proto::Replica>* from, CachedObject* obj);
  void SpreadRead(CachedObject* obj);
  void RetryTierBusy(const std::vector<proto::PutStartRequest>& reqs, const std::string& tenant,
                     std::vector<absl::StatusOr<proto::PutStartResponse>>* starts);
  std::vector<absl::Status> WriteAll(std::span<const client::PutItem> items,
                                     const std::vector<absl::StatusOr<proto::PutStartResponse>>& s,
                                     std::vector<std::vector<uint64_t>>* failed_segments);
  // One round of PutMany; (*dead)[i]: item i failed because every replica
  // write failed (worth another round on other segments).
  std::vector<absl::Status> PutRound(std::span<const client::PutItem> items,
                                     const client::PutOptions& o, std::vector<bool>* dead);
  // Segments whose writes failed lately: left out of this client's puts for
  // ClientOptions::suspect_segment_ms (a dead worker stays mounted at the
  // master until its heartbeats time out).
  void MarkSuspect(std::span<const uint64_t> segment_ids);
  std::vector<uint64_t> SuspectSegments();

  const client::ClientOptions options_;
  C* const channel_;
  std::unique_ptr<transport::Router> router_;
  // PutStartRequest.request_id: a random start, then a counter (unique per
  // client; a resent PutStart is known by it).
  std::atomic<uint64_t> next_request_id_{[] {
    std::random_device rd;
    return ((uint64_t{rd()} << 32) ^ rd()) | 1;
  }()};
  client::SegmentResolver resolver_;
  client::MetadataCache cache_;
  // Cached reads not yet reported to the master (null: not reported).
  const std::unique_ptr<client::CachedReadReports> reports_;
  // Shared with the reports' answer callbacks, which may outlive a call.
  const std::shared_ptr<std::atomic<bool>> touch_unsupported_ =
      std::make_shared<std::atomic<bool>>(false);
  client::ReadSpread spread_;  // which replica a read takes
  BufferRegistry buffers_;
  AtomicStats stats_;
  client::LinkEstimator link_;              // kAuto's bandwidth when none was given
  std::atomic<bool> no_batch_rpcs_{false};  // the master answered a batched RPC UNIMPLEMENTED
  Mutex suspect_mu_;
  // segment id -> NowNs() until which puts leave it out; at most
  // rpc::kMaxExcludedSegments entries.
  absl::flat_hash_map<uint64_t, int64_t> suspect_until_ns_ ABSL_GUARDED_BY(suspect_mu_);
};

}  // namespace mooncake::client_internal

#include "mooncake/store/client/internal/client_get.h"      // IWYU pragma: export
#include "mooncake/store/client/internal/client_objects.h"  // IWYU pragma: export
#include "mooncake/store/client/internal/client_put.h"      // IWYU pragma: export

#endif  // MOONCAKE_STORE_CLIENT_INTERNAL_CLIENT_CORE_H_
