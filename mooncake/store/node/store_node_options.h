// StoreNodeOptions: what one store process is (its role) and every knob the
// reference binary exposes as a flag, plus the parsers for the flag syntax
// (byte sizes with K/M/G suffixes, "host:port", tenant lists). Every parser
// returns INVALID_ARGUMENT with a message naming the flag and what it wants.
//
// Roles:
//   kAll     master + one worker in one process (the embedded default)
//   kMaster  metadata only; workers join it over TCP
//   kWorker  memory only; joins the master at `master_address`
//
// Thread-safety: plain values and pure functions.
#ifndef MOONCAKE_STORE_NODE_STORE_NODE_OPTIONS_H_
#define MOONCAKE_STORE_NODE_STORE_NODE_OPTIONS_H_

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/host_port.h"
#include "mooncake/store/ha/keys.h"
#include "mooncake/store/master/master_options.h"
#include "mooncake/tier/tier.h"
#include "mooncake/transport/internal/rdma_path.h"

namespace mooncake::node {

// The store's version, which its programs print (--version, the banner).
inline constexpr std::string_view kStoreVersion = "0.1.0";

enum class Role { kAll, kMaster, kWorker };

inline std::string_view RoleName(Role r) {
  switch (r) {
    case Role::kAll:
      return "all";
    case Role::kMaster:
      return "master";
    case Role::kWorker:
      return "worker";
  }
  return "?";
}

// The master's eviction policy (mooncake/index), which picks the objects
// that leave DRAM (for the SSD tier, if there is one): kLru, the least
// recently used first; kS3Fifo, S3-FIFO: objects read once leave before
// objects read again, so a scan of one-shot objects does not flush the hot
// ones (docs/store_binary.md has the trace replay figures for both).
enum class EvictionPolicyKind { kLru, kS3Fifo };

inline std::string_view EvictionPolicyName(EvictionPolicyKind e) {
  switch (e) {
    case EvictionPolicyKind::kLru:
      return "lru";
    case EvictionPolicyKind::kS3Fifo:
      return "s3fifo";
  }
  return "?";
}

// "lru" or "s3fifo"; nullopt for anything else.
inline std::optional<EvictionPolicyKind> ParseEvictionPolicy(std::string_view name) {
  for (EvictionPolicyKind e : {EvictionPolicyKind::kLru, EvictionPolicyKind::kS3Fifo}) {
    if (name == EvictionPolicyName(e)) return e;
  }
  return std::nullopt;
}

// Whether a worker also serves its segments over RDMA (--rdma): kAuto when
// the binary is built with --config=rdma and the host has an RDMA device;
// kOn, or the node fails to start (no RDMA in the build, no device); kOff
// never. A worker's RDMA control channel listens on --worker_host.
enum class RdmaUse { kAuto, kOn, kOff };

inline std::string_view RdmaUseName(RdmaUse r) {
  switch (r) {
    case RdmaUse::kAuto:
      return "auto";
    case RdmaUse::kOn:
      return "on";
    case RdmaUse::kOff:
      return "off";
  }
  return "?";
}

// "auto", "on" or "off"; nullopt for anything else.
inline std::optional<RdmaUse> ParseRdmaUse(std::string_view name) {
  for (RdmaUse r : {RdmaUse::kAuto, RdmaUse::kOn, RdmaUse::kOff}) {
    if (name == RdmaUseName(r)) return r;
  }
  return std::nullopt;
}

// How the master carves each worker segment (--allocator): kTlsf, the
// two-level segregated fit for any mix of sizes; kKv, alloc::KvAllocator:
// objects of exactly one of kv_block_bytes go to slabs of equal slots, every
// other size to TLSF (docs/alloc.md).
enum class AllocatorKind { kTlsf, kKv };

inline std::string_view AllocatorName(AllocatorKind a) {
  switch (a) {
    case AllocatorKind::kTlsf:
      return "tlsf";
    case AllocatorKind::kKv:
      return "kv";
  }
  return "?";
}

// "tlsf" or "kv"; nullopt for anything else.
inline std::optional<AllocatorKind> ParseAllocator(std::string_view name) {
  for (AllocatorKind a : {AllocatorKind::kTlsf, AllocatorKind::kKv}) {
    if (name == AllocatorName(a)) return a;
  }
  return std::nullopt;
}

// The KV block sizes of --allocator=kv when --kv_block_bytes is not given:
// the whole-model blocks of 16 and 64 tokens of Qwen2.5-7B (896 KiB,
// 3.5 MiB) and Llama-3-8B (2 MiB, 8 MiB), docs/alloc.md's workload 0.
inline constexpr std::string_view kDefaultKvBlockBytes = "896K,2M,3584K,8M";

struct StoreNodeOptions {
  Role role = Role::kAll;
  HostPort listen{"127.0.0.1", 50051};  // master RPC (all, master)
  HostPort master{"127.0.0.1", 50051};  // master to join (worker)
  bool http_enabled = true;
  HostPort http{"127.0.0.1", 9090};  // /metrics and /health
  uint64_t segment_bytes = uint64_t{1} << 30;
  size_t segments = 1;
  bool reserve_memory = true;     // WorkerOptions::reserve_memory (--reserve_memory)
  RdmaUse rdma = RdmaUse::kAuto;  // --rdma
  // --shm: the worker also hands its segments to clients on this host over
  // shared memory (an abstract Unix socket, open to every local process in
  // its network namespace: docs/security.md). false: TCP (and RDMA) only.
  bool serve_shm = true;
  std::string worker_host = "127.0.0.1";  // where the worker's TCP transport listens
  uint16_t worker_port = 0;               // its port; 0: any free port
  // The worker's transports over several paths (mooncake_store
  // --route_policy fills them from the host's bulk plan; docs/transport.md,
  // "Aggregation"): TCP over these addresses of this host
  // (WorkerOptions::tcp_path_hosts: the worker then listens on all
  // addresses and advertises these instead of worker_host), RDMA over these
  // ports. Empty: worker_host alone; the first device's port 1.
  std::vector<std::string> worker_path_hosts;
  std::vector<transport_internal::RdmaPath> rdma_paths;
  std::string host_id;  // "" = gethostname()
  uint32_t replicas = 1;
  uint64_t max_object_bytes = uint64_t{64} << 20;
  // A KV cache wants its memory full; eviction on the put path covers bursts.
  double high_watermark = 0.99;
  double low_watermark = 0.97;
  EvictionPolicyKind eviction_policy = EvictionPolicyKind::kLru;
  // The segments' allocator (roles all, master) and, for kKv, its block
  // sizes (1..32 distinct sizes, each at most max_object_bytes).
  AllocatorKind allocator = AllocatorKind::kTlsf;
  std::vector<uint64_t> kv_block_bytes;  // empty: kDefaultKvBlockBytes
  // Compaction of fragmented segments by relocation (MasterOptions::relocation);
  // never with ha_etcd (copies are refused there).
  bool relocation = true;
  // Tenants: capacity, pinned capacity and put rate (TenantConfig).
  std::vector<master::TenantConfig> tenants;
  // The worker's SSD tier (docs/tier.md, "In the store"): a file created (or
  // emptied) at start; evicted objects are written back to it. "" = none.
  std::string ssd_path;
  uint64_t ssd_bytes = 0;  // the file's size; required with ssd_path
  // Evicted objects smaller than this are dropped instead of written back (0: none).
  uint64_t ssd_offload_min_bytes = 0;
  // When the SSD tier compresses float-typed objects: kAuto where reading fewer
  // bytes pays for the decode at the device's measured bandwidth, kAlways (more
  // objects per byte of SSD: a tier small against its working set hits more
  // often), kNever.
  tier::Compression ssd_compression = tier::Compression::kAuto;
  // Copies between workers (docs/elasticity.md; master::ReplicationOptions).
  // Roles all, master. Re-replication of objects that lost a replica with a
  // worker, finished within repair_within_ms of the loss (0: off); hot-object
  // replicas for objects read hot_reads times within hot_window_ms (0: off),
  // up to hot_max_replicas replicas in all, holding at most hot_max_fraction
  // of the pool.
  int64_t repair_within_ms = 10'000;
  // Roles all, master: a drain that names no bandwidth ends its copies by this
  // fraction of its deadline, paced (ReplicationOptions::drain_pace; 0: at
  // the master's full drain bandwidth from the start).
  double drain_pace = 0.8;
  // Roles all, worker: the host's link arbiter the worker's copies to other
  // workers take bulk grants from (WorkerOptions::qos_link; docs/client.md,
  // "Sharing a link with other processes"). Empty: none.
  std::string qos_link;
  uint64_t qos_link_bytes_per_s = 0;
  uint32_t hot_reads = 0;
  int64_t hot_window_ms = 1'000;
  uint32_t hot_max_replicas = 3;
  double hot_max_fraction = 0.1;
  // The read lease a get takes when it names none (MasterOptions::
  // default_lease_ms; mooncake_master --default_kv_lease_ttl). The master's
  // longest lease is 60 s, or this if longer.
  int64_t default_lease_ms = 5'000;
  // Master timing (not flags: the defaults suit a real deployment).
  int64_t tick_interval_ms = 100;
  int64_t heartbeat_interval_ms = 1'000;
  int64_t heartbeat_timeout_ms = 10'000;
  size_t rpc_io_threads = 1;
  size_t rpc_worker_threads = 2;
  // Shutdown: how long in-flight transfers get between the worker's unmount
  // and the RPC server closing its connections.
  int64_t drain_ms = 200;
  // Leaving the pool (docs/store_binary.md, "Draining"): on SIGTERM a node
  // with a worker first asks the master to move its replicas elsewhere
  // (Worker::Drain) for at most drain_deadline_ms, then shuts down as above.
  // 0: no drain (SIGTERM unmounts at once; the replicas here are lost).
  // Bandwidth in bytes per second for the moves; 0: the master's default.
  int64_t drain_deadline_ms = 0;
  uint64_t drain_bandwidth_bytes_per_sec = 0;
  // Metadata HA (docs/ha.md). Role master: join the HA cluster `ha_cluster`
  // on the etcd endpoints `ha_etcd` ("http://h:p[,...]"); "" = a single
  // master that needs no etcd (the default).
  std::string ha_etcd;
  std::string ha_cluster = "mooncake";
  int64_t ha_lease_ttl_ms = 2'000;
  // Role worker: find the master through etcd (--master=etcd://h:p[,h:p]/CLUSTER)
  // instead of `master`: endpoints and cluster; "" = use `master`.
  std::string master_etcd;
  std::string master_cluster;
  // Access control (docs/security.md): a token file ("NAME SECRET" lines,
  // mode 0600) that must list "cluster". The master's RPC port and the
  // worker's transport port then serve only peers that prove a principal it
  // lists (tenants' connections are bound to their tenant); the worker proves
  // "cluster" to the master; POST /drain, /preempt and /trace need
  // "Authorization: Bearer <the cluster secret>". "" = no authentication.
  std::string auth_token_file;
  // Where the node reports events (HA: leader changes, snapshots); null: nowhere.
  std::function<void(const std::string&)> on_event;
};

// "etcd://h:p[,h:p...]/CLUSTER" -> ("http://h:p[,http://h:p...]", CLUSTER).
inline absl::StatusOr<std::pair<std::string, std::string>> ParseEtcdMaster(std::string_view text) {
  constexpr std::string_view kScheme = "etcd://";
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--master=", AbslView(text), ": ", AbslView(why),
                     " (want etcd://HOST:PORT[,HOST:PORT...]/CLUSTER)"));
  };
  if (!text.starts_with(kScheme)) return bad("not an etcd:// address");
  std::string_view rest = text.substr(kScheme.size());
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos || slash + 1 >= rest.size()) return bad("no cluster name");
  const std::string_view hosts = rest.substr(0, slash);
  const std::string_view cluster = rest.substr(slash + 1);
  if (hosts.empty()) return bad("no etcd endpoint");
  std::string endpoints;
  for (absl::string_view h : absl::StrSplit(AbslView(hosts), ',')) {
    if (h.empty()) return bad("an empty endpoint");
    absl::StrAppend(&endpoints, endpoints.empty() ? "" : ",", "http://", h);
  }
  return std::pair<std::string, std::string>(std::move(endpoints), std::string(cluster));
}

// "1G", "512M", "64K", "4096" (binary multiples; "1GiB", "1GB" accepted too).
inline absl::StatusOr<uint64_t> ParseByteSize(std::string_view flag, std::string_view text) {
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("--", AbslView(flag), "=", AbslView(text),
                     ": want a byte count with an optional K, M, G or T suffix (e.g. 64M, 1G)"));
  };
  std::string_view digits = text;
  for (std::string_view suffix : {"iB", "B"}) {
    if (digits.size() > suffix.size() + 1 && digits.ends_with(suffix) &&
        std::string_view("KMGTkmgt").find(digits[digits.size() - suffix.size() - 1]) !=
            std::string_view::npos) {
      digits.remove_suffix(suffix.size());
      break;
    }
  }
  if (digits.empty()) return bad();
  unsigned shift = 0;
  switch (digits.back()) {
    case 'K':
    case 'k':
      shift = 10;
      break;
    case 'M':
    case 'm':
      shift = 20;
      break;
    case 'G':
    case 'g':
      shift = 30;
      break;
    case 'T':
    case 't':
      shift = 40;
      break;
    default:
      break;
  }
  if (shift != 0) digits.remove_suffix(1);
  uint64_t n = 0;
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos ||
      !absl::SimpleAtoi(AbslView(digits), &n)) {
    return bad();
  }
  if (n > (std::numeric_limits<uint64_t>::max() >> shift)) return bad();
  return n << shift;
}

// "host:port"; `port_zero_ok` allows port 0 (listen on any free port).
inline absl::StatusOr<HostPort> ParseHostPort(std::string_view flag, std::string_view text,
                                              bool port_zero_ok) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", AbslView(flag), "=", AbslView(text), ": ", AbslView(why)));
  };
  const std::optional<HostPortText> split = SplitHostPort(text);
  if (!split) return bad("want host:port");
  const std::string_view host = split->host;
  if (host.find(':') != std::string_view::npos && !text.starts_with('[')) {
    return bad("an IPv6 host goes in brackets, e.g. [::1]:50051");  // "::1" is not ":" port 1
  }
  uint32_t port = 0;
  const std::string_view digits = split->port;
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos ||
      !absl::SimpleAtoi(AbslView(digits), &port) || port > 65535) {
    return bad("the port must be a number in [0, 65535]");
  }
  if (port == 0 && !port_zero_ok) return bad("port 0 is only meaningful for a listening address");
  return HostPort{std::string(host), static_cast<uint16_t>(port)};
}

// "name:capacity[:pinned],..." e.g. "a:10G,b:2G:1G". Empty text: no tenants.
inline absl::StatusOr<std::vector<master::TenantConfig>> ParseTenants(std::string_view text) {
  std::vector<master::TenantConfig> out;
  if (text.empty()) return out;
  for (absl::string_view item : absl::StrSplit(AbslView(text), ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, ':');
    if (parts.size() < 2 || parts.size() > 3 || parts[0].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tenants: \"", item, "\" is not name:capacity[:pinned]"));
    }
    master::TenantConfig t;
    t.name = std::string(parts[0]);
    for (const master::TenantConfig& seen : out) {
      if (seen.name == t.name) {
        return absl::InvalidArgumentError(absl::StrCat("--tenants: ", t.name, " given twice"));
      }
    }
    absl::StatusOr<uint64_t> cap = ParseByteSize("tenants", StdView(parts[1]));
    if (!cap.ok()) return cap.status();
    t.capacity_bytes = *cap;
    if (parts.size() == 3) {
      absl::StatusOr<uint64_t> pinned = ParseByteSize("tenants", StdView(parts[2]));
      if (!pinned.ok()) return pinned.status();
      if (*pinned > *cap) {
        return absl::InvalidArgumentError(
            absl::StrCat("--tenants: ", t.name, ": pinned capacity exceeds its capacity"));
      }
      t.pinned_capacity_bytes = *pinned;
    }
    out.push_back(std::move(t));
  }
  return out;
}

// "--tenant=NAME:BYTES[:RATE]", one tenant per flag (the flag repeats):
// BYTES its capacity, RATE the bytes per second of puts admitted for it
// (size x replicas; 0 or absent: unlimited), both with the suffixes of
// ParseByteSize. A name given here and in --tenants gets this capacity and
// rate and keeps --tenants' pinned capacity; a name given twice here is an
// error. `tenants` is what --tenants gave.
inline absl::Status ApplyTenantFlag(std::string_view text,
                                    std::vector<master::TenantConfig>& tenants,
                                    std::vector<std::string>& seen) {
  std::vector<absl::string_view> parts = absl::StrSplit(AbslView(text), ':');
  if (parts.size() < 2 || parts.size() > 3 || parts[0].empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tenant=", AbslView(text), ": want NAME:BYTES[:RATE] (e.g. a:10G:1G)"));
  }
  const std::string name(parts[0]);
  if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
    return absl::InvalidArgumentError(absl::StrCat("--tenant: ", name, " given twice"));
  }
  seen.push_back(name);
  absl::StatusOr<uint64_t> cap = ParseByteSize("tenant", StdView(parts[1]));
  if (!cap.ok()) return cap.status();
  uint64_t rate = 0;
  if (parts.size() == 3) {
    absl::StatusOr<uint64_t> r = ParseByteSize("tenant", StdView(parts[2]));
    if (!r.ok()) return r.status();
    if (*r > master::kMaxTenantRateBytesPerSec) {
      return absl::InvalidArgumentError(absl::StrCat("--tenant: ", name, ": rate ", *r,
                                                     " B/s exceeds the limit of ",
                                                     master::kMaxTenantRateBytesPerSec));
    }
    rate = *r;
  }
  auto it = std::find_if(tenants.begin(), tenants.end(),
                         [&](const master::TenantConfig& t) { return t.name == name; });
  if (it == tenants.end()) {
    tenants.push_back(master::TenantConfig{.name = name});
    it = std::prev(tenants.end());
  }
  if (it->pinned_capacity_bytes > *cap) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tenant: ", name, ": capacity is below its pinned capacity from --tenants"));
  }
  it->capacity_bytes = *cap;
  it->rate_bytes_per_sec = rate;
  return absl::OkStatus();
}

// "896K,2M,..." (--kv_block_bytes): 1..32 distinct sizes.
inline absl::StatusOr<std::vector<uint64_t>> ParseKvBlockBytes(std::string_view text) {
  std::vector<uint64_t> out;
  for (absl::string_view item : absl::StrSplit(AbslView(text), ',')) {
    absl::StatusOr<uint64_t> b = ParseByteSize("kv_block_bytes", StdView(item));
    if (!b.ok()) return b.status();
    if (*b == 0 || std::find(out.begin(), out.end(), *b) != out.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--kv_block_bytes=", AbslView(text), ": sizes must be distinct and greater than 0"));
    }
    out.push_back(*b);
  }
  if (out.size() > 32) {
    return absl::InvalidArgumentError("--kv_block_bytes: at most 32 sizes");
  }
  return out;
}

// A day: a longer default lease would pin space that no reader still uses.
inline constexpr int64_t kMaxDefaultLeaseMs = 86'400'000;
// The longest drain a node asks for (--drain_deadline_ms, POST /drain): a
// day; longer is a mistake (a node that never leaves), not a plan.
inline constexpr int64_t kMaxDrainDeadlineMs = 86'400'000;
// The most replicas --hot_max_replicas may ask for (MasterOptions::
// max_replica_count allows at most 255).
inline constexpr uint32_t kMaxHotReplicas = 255;

// Checks what the parsers cannot see alone (ranges, combinations).
inline absl::Status ValidateStoreNodeOptions(const StoreNodeOptions& o) {
  auto bad = [](std::string_view why) { return absl::InvalidArgumentError(AbslView(why)); };
  if (o.role != Role::kMaster) {
    if (o.segment_bytes < (uint64_t{1} << 20)) return bad("--segment_bytes must be at least 1M");
    if (o.segments < 1 || o.segments > 64) return bad("--segments must be in [1, 64]");
    if (o.worker_host.empty()) return bad("--worker_host must not be empty");
    // Clients connect to exactly this text (the worker advertises it), so it
    // must be an address they can reach: no names, no wildcard, no scope.
    const std::string flag = absl::StrCat("--worker_host=", o.worker_host, ": ");
    if (o.worker_host.find('%') != std::string::npos) {
      return bad(absl::StrCat(flag,
                              "a scoped IPv6 address cannot be advertised (a client's scope "
                              "differs); give a global or unique-local address"));
    }
    in_addr v4{};
    in6_addr v6{};
    const bool is_v4 = ::inet_pton(AF_INET, o.worker_host.c_str(), &v4) == 1;
    const bool is_v6 = !is_v4 && ::inet_pton(AF_INET6, o.worker_host.c_str(), &v6) == 1;
    if (!is_v4 && !is_v6) {
      return bad(absl::StrCat(flag,
                              "must be a numeric IPv4 or IPv6 address of this host (it is "
                              "advertised to clients as is; no names, no brackets)"));
    }
    if ((is_v4 && v4.s_addr == htonl(INADDR_ANY)) || (is_v6 && IN6_IS_ADDR_UNSPECIFIED(&v6))) {
      return bad(absl::StrCat(flag,
                              "the wildcard address would be advertised to clients, who cannot "
                              "reach it; give the address of this host they should use"));
    }
    if (is_v6 && IN6_IS_ADDR_LINKLOCAL(&v6)) {
      return bad(absl::StrCat(flag,
                              "a link-local address needs a scope that clients on other links "
                              "do not share; give a global or unique-local address"));
    }
  }
  if (o.role == Role::kWorker && o.master_etcd.empty() && o.master.port == 0) {
    return bad("--master needs a port");
  }
  if (!o.ha_etcd.empty()) {
    if (o.role != Role::kMaster) {
      return bad(
          "--ha_etcd is for --role=master (workers find the leader with "
          "--master=etcd://HOST:PORT/CLUSTER)");
    }
    if (o.ha_lease_ttl_ms < 1000) return bad("--ha_lease_ttl_ms must be >= 1000");
  }
  if (!o.ha_etcd.empty()) {
    if (absl::Status s = ha::ValidateClusterName(o.ha_cluster); !s.ok())
      return bad(StdView(s.message()));
  }
  if (!o.master_etcd.empty()) {
    if (absl::Status s = ha::ValidateClusterName(o.master_cluster); !s.ok()) {
      return bad(StdView(s.message()));
    }
  }
  if (EvictionPolicyName(o.eviction_policy) == "?") {
    return bad("--eviction_policy must be lru or s3fifo");
  }
  if (AllocatorName(o.allocator) == "?") return bad("--allocator must be tlsf or kv");
  if (o.kv_block_bytes.size() > 32) return bad("--kv_block_bytes: at most 32 sizes");
  for (const uint64_t b : o.kv_block_bytes) {
    if (b == 0 || b > o.max_object_bytes) {
      return bad("--kv_block_bytes: each size must be in [1, --max_object_bytes]");
    }
  }
  for (const master::TenantConfig& t : o.tenants) {
    if (t.rate_bytes_per_sec > master::kMaxTenantRateBytesPerSec) {
      return bad(absl::StrCat("--tenant: ", t.name, ": rate exceeds ",
                              master::kMaxTenantRateBytesPerSec, " B/s"));
    }
  }
  if (o.ssd_path.empty() != (o.ssd_bytes == 0)) {
    return bad("--ssd_path and --ssd_bytes go together (an SSD tier needs both)");
  }
  if (!o.ssd_path.empty()) {
    if (o.role == Role::kMaster) return bad("--ssd_path is for a node with a worker");
    if (o.ssd_bytes < (uint64_t{64} << 20) || o.ssd_bytes % 4096 != 0) {
      return bad("--ssd_bytes must be at least 64M and a multiple of 4K");
    }
  }
  if (o.replicas < 1 || o.replicas > 8) return bad("--replicas must be in [1, 8]");
  if (o.max_object_bytes == 0 || o.max_object_bytes > (uint64_t{1} << 32)) {
    return bad("--max_object_bytes must be in [1, 4G]");
  }
  if (!(o.low_watermark > 0 && o.low_watermark < o.high_watermark && o.high_watermark <= 1.0)) {
    return bad("watermarks: need 0 < --low_watermark < --high_watermark <= 1");
  }
  if (o.default_lease_ms < 1 || o.default_lease_ms > kMaxDefaultLeaseMs) {
    return bad(absl::StrCat("the default read lease (mooncake_master --default_kv_lease_ttl) ",
                            "must be in [1, ", kMaxDefaultLeaseMs, "] ms"));
  }
  if (o.tick_interval_ms <= 0 || o.heartbeat_interval_ms <= 0 ||
      o.heartbeat_timeout_ms <= o.heartbeat_interval_ms || o.drain_ms < 0) {
    return bad("timing: ticks and heartbeats > 0, heartbeat timeout > interval, drain >= 0");
  }
  if (o.repair_within_ms < 0 || o.hot_window_ms <= 0 || o.hot_max_replicas < 1 ||
      o.hot_max_replicas > kMaxHotReplicas ||
      !(o.hot_max_fraction >= 0 && o.hot_max_fraction <= 1) ||
      !(o.drain_pace >= 0 && o.drain_pace <= 1)) {
    return bad(
        absl::StrCat("--repair_within_ms must be >= 0, --hot_window_ms > 0, --hot_max_replicas "
                     "in [1, ",
                     kMaxHotReplicas, "], --hot_max_fraction and --drain_pace in [0, 1]"));
  }
  if (o.hot_reads > master::kMaxWindowReads) {
    return bad(absl::StrCat("--hot_reads must be in [0, ", master::kMaxWindowReads, "]"));
  }
  if (o.drain_deadline_ms < 0 || o.drain_deadline_ms > kMaxDrainDeadlineMs) {
    return bad(absl::StrCat("--drain_deadline_ms must be in [0, ", kMaxDrainDeadlineMs,
                            "] (0: no drain on SIGTERM)"));
  }
  return absl::OkStatus();
}

}  // namespace mooncake::node

#endif  // MOONCAKE_STORE_NODE_STORE_NODE_OPTIONS_H_
