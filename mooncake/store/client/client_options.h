// The client's options, per-call options and statistics (client.h).
#ifndef MOONCAKE_STORE_CLIENT_CLIENT_OPTIONS_H_
#define MOONCAKE_STORE_CLIENT_CLIENT_OPTIONS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/clock.h"
#include "mooncake/store/client/rdma_route.h"
#include "mooncake/store/rpc/master.pb.h"

namespace mooncake::client {

// Whether puts of float KV are compressed before they cross the network
// (ClientOptions::network_compression; docs/client.md "Compression on the
// network path").
enum class NetworkCompression : uint8_t {
  kOff,     // every value is stored as given (the default)
  kAuto,    // when DecideCompression says it pays for the link's bandwidth
  kAlways,  // every eligible value (still stored raw when it would not shrink)
};

struct ClientOptions {
  std::string client_id;  // "" = <host>/<pid>/<n>
  std::string host_id;    // "" = gethostname(): the master puts this host's replicas first
  std::string tenant;     // calls whose options name no tenant use this ("" = default)
  // Access control (docs/security.md): the credentials the client's TCP
  // transport proves to workers (base/auth.h; null: none). The master channel
  // given to Create carries its own (rpc::TcpChannelOptions::auth).
  std::shared_ptr<const auth::Credentials> auth;
  bool use_local = true;  // transports the client may use (the Router picks the best)
  bool use_shm = true;
  bool use_tcp = true;
  // RDMA (rdma_route.h), ranked below shm and above tcp; a failed RDMA slice
  // fails over to TCP (stats().transport_failovers). Default: on where the
  // build has RDMA (--config=rdma); a host with no device just goes without.
  // Set in a build without RDMA, only `rdma_factory` can make it.
  bool use_rdma = kRdmaBuilt;
  bool require_rdma = false;  // use_rdma and no RDMA device: Create fails (FAILED_PRECONDITION)
  RdmaTransportFactory rdma_factory;  // empty: the real verbs
  // The TCP transport's connections per worker, slice size, and the request
  // size above which a request's slices spread over the connections
  // (TcpTransport::Options; docs/client.md has the figures behind them).
  size_t tcp_lanes_per_peer = 2;
  uint64_t tcp_spread_min_bytes = 2 << 20;
  // The connections a transfer batch may start on, in turn (the first this
  // many; 0: any); the batch's requests take the connections after its start
  // (TcpTransport::Options::whole_request_lanes).
  size_t tcp_whole_request_lanes = 0;
  uint32_t tcp_slice_bytes = 512 << 10;
  bool verify_checksums = true;  // the checksum of every value read (docs/client.md)
  bool cache_enabled = true;     // metadata cache with leases (metadata_cache.h)
  size_t cache_max_entries = 65536;
  uint64_t lease_ms = 0;         // asked of the master per read; 0 = its default
  int64_t lease_margin_ms = 50;  // a cached read must end this long before its lease
  // Reads served from the metadata cache are reported to the master
  // (TouchObjects, one call per tenant and up to 1,024 keys) once the oldest
  // unreported one is this old, with the client's next read (and when the
  // client closes): the master's eviction order, a drain's "hottest first"
  // and hot-object replicas then see them within about this long. 0: they are
  // counted only when the entry's lease ends and the client asks again, up to
  // a lease late. A master that does not know TouchObjects turns them off.
  int64_t cached_read_report_ms = 100;
  int64_t rpc_timeout_ms = 2'000;
  int64_t transfer_timeout_ms = 5'000;
  // How long a read waits for an object the master is loading back from a
  // worker's SSD tier (GetReplicasResponse.loading), asking again with a
  // backoff from 200 us to 5 ms; then UNAVAILABLE (a prefix read stops at it).
  // Longer than the master's default lease (5 s) with room to spare: when every
  // DRAM range on the worker is leased to readers, the load gets room only as
  // those leases run out, so a wait no longer than a lease can fail on a pool
  // that would have served it a moment later.
  int64_t ssd_load_wait_ms = 15'000;
  // How long a put asks again while the master has no DRAM room yet but is
  // offloading older objects to SSD (PutStartResponse.retry), with the same
  // backoff; then RESOURCE_EXHAUSTED.
  int64_t ssd_put_wait_ms = 5'000;
  // A put whose every replica write failed (a worker died and the master has
  // not expired it yet) is tried again, up to put_attempts rounds in all, on
  // other segments; segments whose writes failed are left out of this
  // client's puts for suspect_segment_ms (the master's default heartbeat
  // timeout), so one dead worker costs one failed write, not one per put.
  int put_attempts = 3;
  int64_t suspect_segment_ms = 10'000;
  uint64_t max_object_bytes = uint64_t{1} << 32;  // larger puts: INVALID_ARGUMENT here
  // Compression on the network path. A put whose TensorMeta says bf16, fp16
  // or fp8 (with a shape matching the value, codec 0) is compressed here with
  // the byte-plane codec and stored compressed (TensorMeta.codec set); every
  // read decompresses such an object into the caller's buffer, whatever this
  // option says. kAuto compresses when compress::DecideCompression (the
  // codec's measured speeds, sequential stages) says it saves 5% on a link of
  // network_link_bytes_per_s, or, when that is 0, of the throughput this
  // client measured on its recent transfers of >= 256 KiB (none yet: raw).
  NetworkCompression network_compression = NetworkCompression::kOff;
  double network_link_bytes_per_s = 0;
  size_t max_open_segments = 4096;
  // Cross-process QoS (docs/transport.md, "Cross-process QoS"). With a link
  // name, every slice this client sends over TCP or RDMA first takes a grant
  // from the host's arbiter for that link (qos::ShmArbiter, shared through
  // /dev/shm with every process that names the same link; the first to open
  // it sets its capacity, qos_link_bytes_per_s, and the others must name the
  // same). qos_class: 0 latency-critical (a decode engine's reads; never
  // delayed), 1 bulk (a prefill engine's KV writes; yields to critical bytes
  // in flight and is paced to the link's capacity). The router's slices are
  // cut to the arbiter's largest grant (burst_bytes: max(256 KiB, 2 ms of
  // capacity)). Empty: no arbiter.
  std::string qos_link;
  uint64_t qos_link_bytes_per_s = 0;
  uint32_t qos_class = 1;
  Clock* clock = &MonotonicClock::Get();  // must outlive the client
};

struct PutOptions {
  uint32_t replica_count = 0;         // 0 = the master's default
  uint64_t preferred_segment_id = 0;  // 0 = none
  store::proto::PinLevel pin = store::proto::PIN_NONE;
  uint64_t ttl_ms = 0;                               // 0 = no expiry
  std::string tenant;                                // "" = ClientOptions::tenant
  const store::proto::TensorMeta* tensor = nullptr;  // optional; copied
  // Upsert: a key of this tenant that exists is replaced. Readers see the old
  // version until the new one commits; the old one's space is then freed
  // like a Remove's (after its read leases end). A key being put or replaced
  // by another call is still ALREADY_EXISTS (whichever PutStart came second
  // gets it). A key that does not exist: a plain put.
  bool replace = false;
  // With pin == PIN_SOFT: the pin lapses this long after the put commits (the
  // object then evicts like an unpinned one). 0 = never. With PIN_HARD it
  // must be 0 (INVALID_ARGUMENT).
  uint64_t pin_ttl_ms = 0;
  // With replace: the new version takes the replaced object's pin level and
  // pin expiry instead of `pin` and `pin_ttl_ms` (a new key gets no pin).
  bool keep_pin = false;
  // The first replica goes to the first of these names that has a mounted
  // segment with room (WorkerOptions::segment_name; any segment of that name),
  // before preferred_segment_id; then placement as usual. At most
  // rpc::kMaxPreferredSegmentNames (64) names.
  std::vector<std::string> preferred_segment_names;
  // Non-empty: the object joins this object group of its tenant (at most
  // rpc::kMaxGroupIdBytes bytes) and stays invisible to every read until
  // Client::CommitGroup; the group is then evicted, expired and removed as
  // one. Not with `replace` (INVALID_ARGUMENT).
  std::string group_id;
};

struct GetOptions {
  std::string tenant;         // "" = ClientOptions::tenant
  bool bypass_cache = false;  // ask the master even if a cached lease is valid
};

struct RemoveOptions {
  std::string tenant;  // "" = ClientOptions::tenant
  bool force = false;  // also remove pinned objects
  // Without force: an object with a live read lease is not removed (ABORTED,
  // "has a live read lease") instead of being removed with its space freed
  // when the lease ends. This client's own cached lease on the key is handed
  // back first; another client's cached get holds its lease until its cache
  // entry drops (up to the master's lease, 5 s by default).
  bool refuse_if_leased = false;
};

struct RemoveAllOptions {
  std::string tenant;  // "" = ClientOptions::tenant
  // "" = every key of the tenant, block objects included. Else an ECMAScript
  // std::regex that must match the whole key (std::regex_match); it never
  // matches a block object (keys starting with 0x00). A bad pattern is
  // INVALID_ARGUMENT.
  std::string key_regex;
  bool force = true;  // also remove pinned objects
};

struct PutItem {
  std::string_view key;
  std::string_view value;  // may lie in a RegisterBuffer'd region
  // Per-item overrides of PutOptions::tensor and PutOptions::group_id (null /
  // empty: the options'); they must outlive the call.
  const store::proto::TensorMeta* tensor = nullptr;
  std::string_view group_id;
};

// An object with what the master keeps beside its bytes (Client::GetObject).
struct StoredObject {
  std::string value;
  std::optional<store::proto::TensorMeta> tensor;  // as the writer gave it; nullopt: none
  uint64_t version = 0;
};

// Client::Clone / ClonePrefix.
struct CloneOptions {
  std::string tenant;   // "" = ClientOptions::tenant
  uint64_t ttl_ms = 0;  // the clones expire this long after the call; 0 = never
};
struct CloneResult {
  uint64_t cloned = 0;        // new keys made
  uint64_t shared_bytes = 0;  // bytes they refer to (none copied)
};

// Client::CommitGroup / RemoveGroup.
struct GroupOptions {
  std::string tenant;  // "" = ClientOptions::tenant
  bool force = false;  // RemoveGroup: also remove pinned members
};
struct GroupCommit {
  uint64_t objects = 0;  // members made visible
  uint64_t bytes = 0;
};

// Client::QueryObjects: visible objects whose TensorMeta matches every filter.
struct ObjectQuery {
  std::string tenant;  // "" = ClientOptions::tenant
  std::string model;   // "" = any model (objects without TensorMeta match only "")
  // Set: objects whose [layer_begin, layer_end) overlaps [first, second).
  std::optional<std::pair<uint32_t, uint32_t>> layers;
  int32_t tp_rank = -1;     // -1 = any rank
  std::string start_after;  // keys after this one ("" = from the first)
  // Stops after this many objects (the pages the master answers are followed
  // until it says there are no more, or this many were collected).
  size_t objects_max = 100'000;
};
struct QueriedObject {
  std::string key;
  store::proto::ObjectInfo info;  // size, version, TensorMeta (info.has_tensor())
  // What a read returns: the raw tensor of an object stored compressed
  // (info.size_bytes is the stored size), else info.size_bytes.
  uint64_t value_bytes = 0;
};
// The answer of Client::QueryObjects: `more` says objects past the last one
// were left out (objects_max reached); ask again with start_after = the last key.
struct QueriedObjects {
  std::vector<QueriedObject> objects;
  bool more = false;
};

struct GetIntoItem {
  std::string_view key;
  void* buffer = nullptr;
  size_t capacity = 0;
};

// Where Client::GetPrefixInto puts one block.
struct BlockBuffer {
  void* buffer = nullptr;
  size_t capacity = 0;
};

// Counters since the client started (monotonic; relaxed atomics).
struct ClientStats {
  uint64_t master_rpcs = 0;  // every call this client made to the master
  uint64_t cache_hits = 0;   // gets served with no master RPC
  uint64_t cache_misses = 0;
  uint64_t replica_fallbacks = 0;    // reads that moved on to another replica
  uint64_t checksum_mismatches = 0;  // replicas whose bytes did not match
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t registered_bytes_moved = 0;  // bytes moved from/into registered buffers
  uint64_t ssd_load_waits = 0;          // rounds spent waiting for SSD-tier loads
  uint64_t ssd_put_waits = 0;           // rounds puts spent waiting for SSD-tier offloads
  // Transfer slices that failed on one transport and were retried on the
  // next (e.g. RDMA -> TCP): Router::failovers() of the client's router.
  uint64_t transport_failovers = 0;
  // Compression on the network path (ClientOptions::network_compression).
  uint64_t compressed_puts = 0;          // committed puts stored compressed
  uint64_t compression_saved_bytes = 0;  // their raw bytes less their stored bytes
  uint64_t decompressed_gets = 0;        // objects read that were stored compressed
  // The transfer throughput the client measured (bytes/s, a moving average
  // over transfers of >= 256 KiB; 0: none yet): what kAuto decides with
  // when network_link_bytes_per_s is 0.
  uint64_t measured_link_bytes_per_s = 0;
};

}  // namespace mooncake::client

#endif  // MOONCAKE_STORE_CLIENT_CLIENT_OPTIONS_H_
