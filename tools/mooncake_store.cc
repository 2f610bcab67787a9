// mooncake_store: the reference store binary (docs/store_binary.md).
//
//   bazel run -c opt //tools:mooncake_store                 # master + worker, demo, serve
//   mooncake_store --role=master --listen=0.0.0.0:50051
//   mooncake_store --role=worker --master=10.0.0.1:50051 --worker_host=10.0.0.2
//
// Exit codes: 0 after a graceful shutdown (SIGINT, SIGTERM or SIGHUP), 1 when
// the node cannot start (a port in use, the master unreachable), 2 for bad
// flags, 128 + the signal when a second signal cuts a shutdown short.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/marshalling.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/node/demo.h"
#include "mooncake/store/node/drain.h"
#include "mooncake/store/node/program.h"
#include "mooncake/store/node/status_line.h"
#include "mooncake/store/node/store_node.h"
#include "mooncake/store/node/store_node_options.h"
#include "mooncake/tier/tier.h"
#include "mooncake/transport/route_binding.h"
#include "mooncake/transport/route_policy.h"
#include "mooncake/transport/topology.h"

// THE FLAG CONTRACT: tools/mooncake_bench and the tests spawn this binary
// with these names; do not rename them.
ABSL_FLAG(std::string, role, "all", "all (master + one worker in this process), master or worker");
ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "master RPC address (roles all, master); port 0 = any free port");
ABSL_FLAG(std::string, master, "127.0.0.1:50051",
          "master to join (role worker): host:port, or etcd://host:port[,host:port]/CLUSTER for "
          "the leader of an HA cluster (docs/ha.md)");
ABSL_FLAG(std::string, ha_etcd, "",
          "role master: etcd endpoints (host:port[,host:port]) of an HA cluster; this master "
          "becomes its leader or a hot standby (docs/ha.md). Empty: a single master, no etcd");
ABSL_FLAG(std::string, ha_cluster, "mooncake", "the HA cluster's name ([A-Za-z0-9_.-]{1,64})");
ABSL_FLAG(int64_t, ha_lease_ttl_ms, 2000,
          "the leader's etcd lease (>= 1000; whole seconds at etcd): a dead leader is replaced "
          "about this long after it stops renewing");
ABSL_FLAG(std::string, auth_token_file, "",
          "access control (docs/security.md): a mode-0600 file of 'NAME SECRET' lines listing "
          "'cluster' (and 'tenant:NAME' for clients bound to a tenant); RPC and transport peers "
          "must prove a listed secret, POST /drain, /preempt and /trace need 'Authorization: "
          "Bearer <cluster secret>'. Empty: no authentication");
ABSL_FLAG(std::string, http, "127.0.0.1:9090",
          "/metrics and /health address; port 0 = any free port; empty = off");
ABSL_FLAG(std::string, segment_bytes, "1G", "bytes per worker segment (suffixes K, M, G, T)");
ABSL_FLAG(int32_t, segments, 1, "worker segments");
ABSL_FLAG(bool, reserve_memory, true,
          "allocate and map the segments' memory at start: a host without it fails at start, "
          "not with SIGBUS on a later put, and puts pay no first-touch page faults; false: "
          "pages come on first write");
ABSL_FLAG(std::string, worker_host, "127.0.0.1",
          "where the worker's TCP transport listens: a numeric IPv4 or IPv6 address that clients "
          "can reach (advertised as is)");
ABSL_FLAG(std::string, rdma, "auto",
          "worker: also serve the segments over RDMA (control channel on --worker_host): auto = "
          "when this binary is built with --config=rdma and the host has an RDMA device; on = "
          "fail to start otherwise; off = never");
ABSL_FLAG(bool, shm, true,
          "worker: also hand the segments to clients on this host over shared memory (any "
          "local process in the worker's network namespace may map them: docs/security.md); "
          "false: TCP and RDMA only");
ABSL_FLAG(int32_t, worker_port, 0,
          "the worker's TCP transport port (for firewalls and container port maps); 0 = any free "
          "port");
ABSL_FLAG(std::string, host_id, "",
          "this host's id for SHM matching (\"\" = hostname); clients with the same id read "
          "through shared memory");
ABSL_FLAG(int32_t, replicas, 1, "default replicas per object");
ABSL_FLAG(std::string, max_object_bytes, "64M", "largest object the master accepts");
ABSL_FLAG(double, high_watermark, 0.99, "eviction starts above this fraction of capacity used");
ABSL_FLAG(double, low_watermark, 0.97, "eviction frees down to this fraction");
ABSL_FLAG(std::string, eviction_policy, "lru",
          "which objects leave DRAM first: lru (least recently used) or s3fifo (S3-FIFO: objects "
          "read once before objects read again; scan-resistant)");
ABSL_FLAG(std::string, tenants, "", "name:capacity[:pinned],... (capacities with suffixes)");
// Repeated: every occurrence counts (collected before abseil parses, which
// would keep only the last); defined here for --help and the flag checks.
ABSL_FLAG(std::string, tenant, "",
          "NAME:BYTES[:RATE], repeatable: a tenant's capacity and the bytes per second of puts "
          "admitted for it (suffixes K, M, G, T; 0 or absent: unlimited); overrides --tenants' "
          "capacity for that name");
ABSL_FLAG(std::string, allocator, "tlsf",
          "how the master carves worker segments (roles all, master): tlsf or kv (KV block "
          "sizes to slabs, see --kv_block_bytes)");
ABSL_FLAG(std::string, kv_block_bytes, "",
          "--allocator=kv: the KV block sizes given slabs, e.g. 896K,2M (default "
          "896K,2M,3584K,8M)");
ABSL_FLAG(std::string, relocation, "auto",
          "on: the master compacts a fragmented segment (moving a few objects within it, "
          "copied by its worker) when a put finds enough free bytes but no extent that fits, "
          "instead of evicting (docs/alloc.md, Relocation); off: such a put evicts; auto: on "
          "without --ha_etcd, off with it (on is refused with --ha_etcd)");
ABSL_FLAG(std::string, ssd_path, "",
          "the worker's SSD tier: a file (created, or emptied, at start) that evicted objects "
          "are written back to; empty: none");
ABSL_FLAG(std::string, ssd_bytes, "", "size of the --ssd_path file (suffixes K, M, G, T)");
ABSL_FLAG(std::string, ssd_offload_min_bytes, "0",
          "write-back policy (roles all, master): evicted objects smaller than this are dropped "
          "instead of written to a worker's SSD tier (suffixes K, M, G, T; 0 = write back all)");
ABSL_FLAG(std::string, ssd_compression, "auto",
          "when the SSD tier compresses float-typed (bf16, fp16, fp32, fp8) objects: auto "
          "(where it pays at the device's measured bandwidth), always (more objects fit: for "
          "a tier small against its working set), never");
ABSL_FLAG(int64_t, repair_within_ms, 10'000,
          "roles all, master: objects that lose a replica with a worker are copied back to "
          "their put's replica count within this long (ms), hottest first; 0 = no "
          "re-replication (docs/elasticity.md)");
ABSL_FLAG(double, drain_pace, 0.8,
          "roles all, master: a drain that names no bandwidth (POST /drain, SIGTERM) paces its "
          "copies to end by this fraction of its deadline, so foreground reads keep their "
          "latency; 0 = at the full drain bandwidth (1 GiB/s) from the start. A spot notice "
          "(POST /preempt) is never paced (docs/elasticity.md)");
ABSL_FLAG(std::string, qos_link, "",
          "roles all, worker: the host's shared link arbiter (/dev/shm/mooncake_qos.NAME) that "
          "copies to other workers take bulk grants from, so that they yield to latency-critical "
          "reads of the engines on this host that name the same link; needs "
          "--qos_link_bytes_per_s (docs/client.md)");
ABSL_FLAG(int64_t, qos_link_bytes_per_s, 0, "the rate --qos_link sustains, bytes per second");
ABSL_FLAG(int32_t, hot_reads, 0,
          "roles all, master: an object read this many times within --hot_window_ms gets an "
          "extra replica on another worker (up to --hot_max_replicas in all), dropped first "
          "when space runs short; 0 = off");
ABSL_FLAG(int64_t, hot_window_ms, 1'000, "the window --hot_reads counts reads in (ms)");
ABSL_FLAG(int32_t, hot_max_replicas, 3,
          "the most replicas a hot object gets, its own included (one more per window in "
          "which it is read --hot_reads times; each on another worker)");
ABSL_FLAG(double, hot_max_fraction, 0.1,
          "the share of the pool's capacity hot extra replicas may hold, in [0, 1]");
ABSL_FLAG(int64_t, drain_deadline_ms, 0,
          "roles all, worker: on SIGTERM first ask the master to move this worker's replicas "
          "to other workers, for at most this long (ms), then unmount and stop; 0 = no drain "
          "(SIGTERM unmounts at once and the replicas only here are lost). POST "
          "/drain?deadline_ms=N on --http does the same without stopping");
ABSL_FLAG(std::string, drain_bandwidth, "0",
          "bytes per second the drain's copies may use (suffixes K, M, G, T); 0 = the master's "
          "default");
ABSL_FLAG(std::string, route_policy, "",
          "a routing policy file (docs/transport.md, \"Routing policy\"): the host's topology "
          "is read from --sysfs_root, the path each source and traffic class would take is "
          "printed at start and exported as mooncake_route_paths, and the worker's transports "
          "take the bulk plan of --route_source: TCP over its NICs' addresses (listening on "
          "all addresses), RDMA over its ports; empty = none");
ABSL_FLAG(std::string, route_source, "",
          "with --route_policy: whose bulk plan the worker follows, numaN, gpuN or cpuN; "
          "empty = the CPU this process starts on");
ABSL_FLAG(std::string, sysfs_root, "/sys", "where --route_policy reads the host's topology");
ABSL_FLAG(bool, demo, true,
          "role all: run a short workload against itself and print its figures, then serve");
ABSL_FLAG(absl::Duration, status_interval, absl::Seconds(10),
          "print a one-line status this often; 0 = off");
ABSL_FLAG(bool, log_timestamps, true,
          "start each line from \"serving\" on (status, events, shutdown) with its UTC time, "
          "2026-12-04T14:30:05.123Z; false for a supervisor that stamps lines itself");
ABSL_FLAG(std::string, ready_file, "",
          "when serving, atomically write rpc=<host:port>, http=<host:port>, pid=<pid> here");

namespace mooncake {
namespace {

constexpr std::string_view kProgram = "mooncake_store";
// abseil's flags that reach abseil as they are; its others are checked like
// this binary's own.
constexpr std::string_view kBuiltins[] = {
    "help",     "helpfull", "helpshort",  "helppackage", "version", "only_check_args",
    "flagfile", "fromenv",  "tryfromenv", "undefok"};

using node::Say;

[[noreturn]] void BadFlags(std::string_view why) { node::ExitBadFlags(kProgram, why); }

// `tenant_flags`: every --tenant value, in order.
// --route_source: "numaN", "gpuN", "cpuN"; empty: the CPU this process
// runs on (sched_getcpu). nullopt when it does not parse.
std::optional<transport::RouteSource> ParseRouteSource(std::string_view text) {
  if (text.empty()) return transport::RouteSource::Cpu(std::max(0, ::sched_getcpu()));
  for (const auto& [prefix, kind] :
       {std::pair{std::string_view("numa"), transport::RouteSource::Kind::kNuma},
        std::pair{std::string_view("gpu"), transport::RouteSource::Kind::kGpu},
        std::pair{std::string_view("cpu"), transport::RouteSource::Kind::kCpu}}) {
    int index = 0;
    if (text.starts_with(prefix) &&
        absl::SimpleAtoi(AbslView(text.substr(prefix.size())), &index) && index >= 0) {
      return transport::RouteSource{kind, index};
    }
  }
  return std::nullopt;
}

// The worker's transports follow `source`'s bulk plan: TCP over the plan's
// NICs' addresses, RDMA over its ports. What cannot be bound is said and
// left as it was.
void BindWorkerToPlan(const transport::RoutePlanner& planner, transport::RouteSource source,
                      node::StoreNodeOptions* options) {
  absl::StatusOr<transport::RoutePlan> plan = planner.Plan(source, transport::TrafficClass::kBulk);
  if (!plan.ok()) {
    Say(absl::StrCat("route: no bulk plan for ", source.Name(), " (", plan.status().message(),
                     "); the worker's transports are not bound"));
    return;
  }
  if (absl::StatusOr<std::vector<transport::TcpTransport::Options::LocalPath>> tcp =
          transport::TcpLocalPaths(*plan);
      tcp.ok()) {
    options->worker_path_hosts.clear();
    for (const auto& p : *tcp) options->worker_path_hosts.push_back(p.host);
    Say(absl::StrCat("route: the worker's TCP transport follows the bulk plan of ", source.Name(),
                     ": listens on every address, advertises ",
                     absl::StrJoin(options->worker_path_hosts, ", ")));
  } else {
    Say(absl::StrCat("route: TCP stays on --worker_host (", tcp.status().message(), ")"));
  }
  if (absl::StatusOr<std::vector<transport_internal::RdmaPath>> rdma =
          transport::RdmaLocalPaths(*plan);
      rdma.ok()) {
    options->rdma_paths = *std::move(rdma);
    std::vector<std::string> names;
    for (const auto& p : options->rdma_paths) {
      names.push_back(absl::StrCat(p.device_name, ":", p.port));
    }
    Say(absl::StrCat("route: the worker's RDMA transport uses ", absl::StrJoin(names, ", ")));
  }
}

node::StoreNodeOptions OptionsFromFlags(const std::vector<std::string>& tenant_flags) {
  node::StoreNodeOptions o;
  auto check = [](const absl::Status& s) {
    if (!s.ok()) BadFlags(StdView(s.message()));
  };
  const std::string role = absl::GetFlag(FLAGS_role);
  if (role == "all") {
    o.role = node::Role::kAll;
  } else if (role == "master") {
    o.role = node::Role::kMaster;
  } else if (role == "worker") {
    o.role = node::Role::kWorker;
  } else {
    BadFlags(absl::StrCat("--role=", role, ": want all, master or worker"));
  }
  auto listen = node::ParseHostPort("listen", absl::GetFlag(FLAGS_listen), true);
  check(listen.status());
  o.listen = *listen;
  const std::string master_flag = absl::GetFlag(FLAGS_master);
  if (master_flag.starts_with("etcd://")) {
    auto etcd = node::ParseEtcdMaster(master_flag);
    check(etcd.status());
    std::tie(o.master_etcd, o.master_cluster) = *etcd;
  } else {
    auto master = node::ParseHostPort("master", master_flag, false);
    check(master.status());
    o.master = *master;
  }
  o.ha_etcd = absl::GetFlag(FLAGS_ha_etcd);
  if (!o.ha_etcd.empty() && !o.ha_etcd.starts_with("http://")) {
    std::string list;
    for (absl::string_view h : absl::StrSplit(o.ha_etcd, ',')) {
      absl::StrAppend(&list, list.empty() ? "" : ",",
                      absl::StartsWith(h, "http://") ? "" : "http://", h);
    }
    o.ha_etcd = list;
  }
  o.ha_cluster = absl::GetFlag(FLAGS_ha_cluster);
  o.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  o.ha_lease_ttl_ms = absl::GetFlag(FLAGS_ha_lease_ttl_ms);
  o.on_event = [](const std::string& line) { node::LogLine("event: " + line); };
  const std::string http = absl::GetFlag(FLAGS_http);
  o.http_enabled = !http.empty();
  if (o.http_enabled) {
    auto hp = node::ParseHostPort("http", http, true);
    check(hp.status());
    o.http = *hp;
  }
  auto seg = node::ParseByteSize("segment_bytes", absl::GetFlag(FLAGS_segment_bytes));
  check(seg.status());
  o.segment_bytes = *seg;
  if (absl::GetFlag(FLAGS_segments) < 1) BadFlags("--segments must be at least 1");
  o.segments = static_cast<size_t>(absl::GetFlag(FLAGS_segments));
  o.reserve_memory = absl::GetFlag(FLAGS_reserve_memory);
  o.worker_host = absl::GetFlag(FLAGS_worker_host);
  if (const int32_t port = absl::GetFlag(FLAGS_worker_port); port < 0 || port > 65535) {
    BadFlags(absl::StrCat("--worker_port=", port, ": want a port in [0, 65535]"));
  } else {
    o.worker_port = static_cast<uint16_t>(port);
  }
  o.host_id = absl::GetFlag(FLAGS_host_id);
  if (absl::GetFlag(FLAGS_replicas) < 1) BadFlags("--replicas must be at least 1");
  o.replicas = static_cast<uint32_t>(absl::GetFlag(FLAGS_replicas));
  auto max_obj = node::ParseByteSize("max_object_bytes", absl::GetFlag(FLAGS_max_object_bytes));
  check(max_obj.status());
  o.max_object_bytes = *max_obj;
  o.high_watermark = absl::GetFlag(FLAGS_high_watermark);
  o.low_watermark = absl::GetFlag(FLAGS_low_watermark);
  const std::optional<node::RdmaUse> rdma = node::ParseRdmaUse(absl::GetFlag(FLAGS_rdma));
  if (!rdma) BadFlags("--rdma must be auto, on or off");
  o.rdma = *rdma;
  o.serve_shm = absl::GetFlag(FLAGS_shm);
  const std::optional<node::EvictionPolicyKind> eviction =
      node::ParseEvictionPolicy(absl::GetFlag(FLAGS_eviction_policy));
  if (!eviction) BadFlags("--eviction_policy must be lru or s3fifo");
  o.eviction_policy = *eviction;
  auto tenants = node::ParseTenants(absl::GetFlag(FLAGS_tenants));
  check(tenants.status());
  o.tenants = *tenants;
  std::vector<std::string> seen;
  for (const std::string& t : tenant_flags) check(node::ApplyTenantFlag(t, o.tenants, seen));
  const std::optional<node::AllocatorKind> allocator =
      node::ParseAllocator(absl::GetFlag(FLAGS_allocator));
  if (!allocator) BadFlags("--allocator must be tlsf or kv");
  o.allocator = *allocator;
  if (const std::string blocks = absl::GetFlag(FLAGS_kv_block_bytes); !blocks.empty()) {
    if (o.allocator != node::AllocatorKind::kKv) BadFlags("--kv_block_bytes needs --allocator=kv");
    auto parsed = node::ParseKvBlockBytes(blocks);
    check(parsed.status());
    o.kv_block_bytes = *parsed;
  }
  if (const std::string r = absl::GetFlag(FLAGS_relocation); r == "on" || r == "off") {
    o.relocation = r == "on";
    // Copies are refused with HA (docs/elasticity.md), and a compaction is copies.
    if (o.relocation && !o.ha_etcd.empty()) BadFlags("--relocation=on cannot go with --ha_etcd");
  } else if (r == "auto") {
    o.relocation = o.ha_etcd.empty();
  } else {
    BadFlags("--relocation must be on, off or auto");
  }
  o.ssd_path = absl::GetFlag(FLAGS_ssd_path);
  if (const std::string ssd = absl::GetFlag(FLAGS_ssd_bytes); !ssd.empty()) {
    auto b = node::ParseByteSize("ssd_bytes", ssd);
    check(b.status());
    o.ssd_bytes = *b;
  }
  auto min_offload =
      node::ParseByteSize("ssd_offload_min_bytes", absl::GetFlag(FLAGS_ssd_offload_min_bytes));
  check(min_offload.status());
  o.ssd_offload_min_bytes = *min_offload;
  const std::optional<tier::Compression> compression =
      tier::ParseCompression(absl::GetFlag(FLAGS_ssd_compression));
  if (!compression) BadFlags("--ssd_compression must be auto, always or never");
  o.ssd_compression = *compression;
  o.repair_within_ms = absl::GetFlag(FLAGS_repair_within_ms);
  o.drain_pace = absl::GetFlag(FLAGS_drain_pace);
  o.qos_link = absl::GetFlag(FLAGS_qos_link);
  if (absl::GetFlag(FLAGS_qos_link_bytes_per_s) < 0 ||
      (!o.qos_link.empty() && absl::GetFlag(FLAGS_qos_link_bytes_per_s) == 0)) {
    BadFlags("--qos_link needs --qos_link_bytes_per_s > 0");
  }
  o.qos_link_bytes_per_s = static_cast<uint64_t>(absl::GetFlag(FLAGS_qos_link_bytes_per_s));
  if (absl::GetFlag(FLAGS_hot_reads) < 0) BadFlags("--hot_reads must be >= 0");
  o.hot_reads = static_cast<uint32_t>(absl::GetFlag(FLAGS_hot_reads));
  o.hot_window_ms = absl::GetFlag(FLAGS_hot_window_ms);
  if (absl::GetFlag(FLAGS_hot_max_replicas) < 1) BadFlags("--hot_max_replicas must be >= 1");
  o.hot_max_replicas = static_cast<uint32_t>(absl::GetFlag(FLAGS_hot_max_replicas));
  o.hot_max_fraction = absl::GetFlag(FLAGS_hot_max_fraction);
  o.drain_deadline_ms = absl::GetFlag(FLAGS_drain_deadline_ms);
  auto drain_bw = node::ParseByteSize("drain_bandwidth", absl::GetFlag(FLAGS_drain_bandwidth));
  check(drain_bw.status());
  o.drain_bandwidth_bytes_per_sec = *drain_bw;
  if (absl::GetFlag(FLAGS_status_interval) < absl::ZeroDuration()) {
    BadFlags("--status_interval must be >= 0");
  }
  check(node::ValidateStoreNodeOptions(o));
  return o;
}

bool IsLoopbackHost(std::string_view host) {
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

// Addresses that work on this host but not for remote peers: said once at
// start, on stderr, not refused (a single-host setup is fine).
void WarnAboutAddresses(const node::StoreNodeOptions& o) {
  auto warn = [](const std::string& line) {
    std::fprintf(stderr, "mooncake_store: warning: %s\n", line.c_str());
  };
  if (o.role == node::Role::kAll && !IsLoopbackHost(o.listen.host) &&
      IsLoopbackHost(o.worker_host)) {
    warn(absl::StrCat("--listen=", o.listen.ToString(), " accepts remote clients, but the worker ",
                      "listens on --worker_host=", o.worker_host,
                      ": they would reach the master and not the data. Set --worker_host to an "
                      "address of this host they can reach."));
  }
  if (o.role == node::Role::kAll && o.replicas > 1) {
    warn(absl::StrCat("--replicas=", o.replicas, ": role all has one worker, so puts that take ",
                      "the default fail until ", o.replicas - 1,
                      " more --role=worker process(es) join this master"));
  }
  if (o.role == node::Role::kAll) {
    const uint64_t pool = o.segment_bytes * o.segments;  // validated: <= 64 x segment_bytes
    for (const master::TenantConfig& t : o.tenants) {
      if (t.capacity_bytes > pool) {
        warn(absl::StrCat("--tenants: ", t.name, "'s ", node::HumanBytes(t.capacity_bytes),
                          " is more than this node's whole pool (", node::HumanBytes(pool),
                          "): the pool fills first"));
      }
    }
  }
  if (o.role == node::Role::kWorker && !IsLoopbackHost(o.master.host) &&
      IsLoopbackHost(o.worker_host)) {
    warn(absl::StrCat("the master is at ", o.master.ToString(),
                      " but --worker_host=", o.worker_host,
                      ": clients on other hosts cannot reach this worker's data. Set "
                      "--worker_host to an address of this host they can reach."));
  }
}

void PrintBanner(node::StoreNode& n) {
  const node::StoreNodeOptions& o = n.options();
  Say(absl::StrCat("mooncake_store ", AbslView(node::kStoreVersion),
                   ": a distributed KV-cache store (role ", AbslView(node::RoleName(o.role)),
                   o.role == node::Role::kAll ? ": master + one worker in this process)" : ")"));
  if (!n.rpc_address().empty()) {
    Say(absl::StrCat("  master RPC   ", n.rpc_address(),
                     "   (clients and workers connect here; eviction ",
                     AbslView(node::EvictionPolicyName(o.eviction_policy)), ", allocator ",
                     AbslView(node::AllocatorName(o.allocator)), ")"));
  }
  if (!o.tenants.empty() && o.role != node::Role::kWorker) {
    std::string list;
    for (const master::TenantConfig& t : o.tenants) {
      absl::StrAppend(&list, list.empty() ? "" : ", ", t.name, " ",
                      node::HumanBytes(t.capacity_bytes));
      if (t.pinned_capacity_bytes != 0) {
        absl::StrAppend(&list, " (pinned ", node::HumanBytes(t.pinned_capacity_bytes), ")");
      }
      if (t.rate_bytes_per_sec != 0) {
        absl::StrAppend(&list, " at ", node::HumanBytes(t.rate_bytes_per_sec), "/s");
      }
    }
    Say(absl::StrCat("  tenants      ", list,
                     "; requests naming no tenant: \"default\", unlimited; other names: refused"));
  }
  if (auto* w = n.worker(); w != nullptr) {
    Say(absl::StrCat("  worker       ", o.segments, " x ", node::HumanBytes(o.segment_bytes),
                     " segment(s), host_id ", w->host_id(), ", transports ", w->router_endpoint(),
                     ", joined master ", n.master_address()));
    if (auto* t = w->tier_agent(); t != nullptr) {
      const auto info = t->tier().info();
      Say(absl::StrCat("  SSD tier     ", o.ssd_path, ", ", node::HumanBytes(o.ssd_bytes),
                       info.direct_io ? " (O_DIRECT" : " (buffered I/O", ", device read ",
                       absl::SixDigits(info.device_read_bytes_per_s / 1e9), " GB/s, compression ",
                       AbslView(tier::CompressionName(o.ssd_compression)),
                       "): evicted objects are written back here"));
    }
  }
  if (!n.http_address().empty()) {
    Say(absl::StrCat("  HTTP         http://", n.http_address(), "/metrics   http://",
                     n.http_address(), "/health"));
  } else {
    Say("  HTTP         off (--http=\"\")");
  }
}

void RunDemo(node::StoreNode& n) {
  Say("demo: puts and gets through a real client (TCP, then shared memory), every byte checked:");
  node::DemoOptions d;
  d.master_address = n.rpc_address();
  d.host_id = n.options().host_id;
  d.metrics = &n.metrics();  // /metrics shows what the demo's clients did
  // Keep the demo well inside the pool: at most 1/8 of it per row, and a row writes at
  // least 4 values (DemoOptions::bytes_per_row).
  d.bytes_per_row =
      std::min<uint64_t>(uint64_t{32} << 20, n.options().segment_bytes * n.options().segments / 8);
  std::vector<uint64_t> sizes;
  for (uint64_t s : d.value_bytes) {
    if (s <= n.options().max_object_bytes && s * 4 <= d.bytes_per_row) sizes.push_back(s);
  }
  d.value_bytes = sizes;
  auto rows = node::RunDemo(d);
  if (!rows.ok()) {
    Say(absl::StrCat("demo: FAILED: ", rows.status().ToString()));
    return;
  }
  std::string table = node::FormatDemo(*rows);
  if (!table.empty() && table.back() == '\n') table.pop_back();
  Say(table);
  Say("demo: ok (objects removed again)");
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "the mooncake reference store: --role=all (default), master or worker. "
      "See docs/store_binary.md.");
  absl::FlagsUsageConfig usage;
  usage.version_string = [] {
#ifdef NDEBUG
    constexpr const char* kBuild = "optimized build";
#else
    constexpr const char* kBuild = "debug build (assertions on)";
#endif
    return absl::StrCat("mooncake_store ", AbslView(node::kStoreVersion), " (", kBuild, ")\n");
  };
  absl::SetFlagsUsageConfig(usage);
  // -h is --help (abseil knows only the long forms).
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "-h") argv[i] = const_cast<char*>("--help");
  }
  node::PrecheckFlags(kProgram, argc, argv, {}, kBuiltins, node::OtherBuiltins::kChecked);
  // --only_check_args is handled here, after this binary's own checks (abseil's
  // would exit before them).
  bool only_check = false;
  std::vector<char*> args;
  std::vector<std::string> tenant_flags;
  for (int i = 0; i < argc; ++i) {
    const std::string_view a = argv[i];
    // --tenant repeats; PrecheckFlags has checked each one's form.
    if (i > 0 && (a.starts_with("--tenant") || a.starts_with("-tenant"))) {
      const std::string_view rest = a.substr(a.find_first_not_of('-') + 6);
      if (rest.starts_with("=")) {
        tenant_flags.emplace_back(rest.substr(1));
        continue;
      }
      if (rest.empty() && i + 1 < argc) {
        tenant_flags.emplace_back(argv[++i]);
        continue;
      }
    }
    if (i > 0 && (a.starts_with("--only_check_args") || a.starts_with("-only_check_args"))) {
      std::string_view name = a.substr(a.find_first_not_of('-'));
      name.remove_prefix(std::string_view("only_check_args").size());
      if (name.empty()) {
        only_check = true;
        continue;
      }
      if (name[0] == '=') {
        bool value = false;
        std::string error;
        if (!absl::ParseFlag(std::string(name.substr(1)), &value, &error)) {
          BadFlags(absl::StrCat("--only_check_args: ", error.empty() ? "not a boolean" : error));
        }
        only_check = value;
        continue;
      }
    }
    args.push_back(argv[i]);
  }
  std::vector<char*> rest = absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  if (rest.size() > 1) BadFlags(absl::StrCat("unexpected argument \"", rest[1], "\""));
  node::StoreNodeOptions options = OptionsFromFlags(tenant_flags);
  WarnAboutAddresses(options);
  node::SetLogTimestamps(absl::GetFlag(FLAGS_log_timestamps));
  // A bad policy file is a flag error (before anything starts).
  std::optional<transport::RoutePolicy> route_policy;
  if (const std::string path = absl::GetFlag(FLAGS_route_policy); !path.empty()) {
    std::ifstream in(path);
    if (!in) BadFlags(absl::StrCat("--route_policy: cannot read ", path));
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<transport::RoutePolicy> parsed = transport::ParseRoutePolicy(text.str());
    if (!parsed.ok()) {
      BadFlags(absl::StrCat("--route_policy ", path, ": ", parsed.status().message()));
    }
    route_policy = std::move(*parsed);
  }
  const std::optional<transport::RouteSource> route_source =
      ParseRouteSource(absl::GetFlag(FLAGS_route_source));
  if (!route_source.has_value()) {
    BadFlags(absl::StrCat("--route_source=", absl::GetFlag(FLAGS_route_source),
                          ": expected numaN, gpuN or cpuN (or empty)"));
  }
  if (only_check) {
    Say("flags ok");
    return 0;
  }
  // The route plans, before anything starts: the worker binds to its bulk plan.
  std::optional<transport::RoutePlans> route_plans;
  if (route_policy.has_value()) {
    absl::StatusOr<transport::Topology> topo =
        transport::DiscoverTopology(absl::GetFlag(FLAGS_sysfs_root));
    if (!topo.ok()) {
      std::fprintf(stderr, "mooncake_store: --route_policy: %s\n",
                   topo.status().ToString().c_str());
      return node::kExitCannotStart;
    }
    Say(topo->ToString());
    const transport::RoutePlanner planner(std::move(*topo), *route_policy);
    route_plans = planner.PlanAll();
    if (options.role != node::Role::kMaster) BindWorkerToPlan(planner, *route_source, &options);
  }

  node::StopSignals signals;  // before any thread starts
  auto started = node::StoreNode::Start(options);
  if (!started.ok()) {
    std::fprintf(stderr, "mooncake_store: cannot start: %s\n", started.status().ToString().c_str());
    return node::kExitCannotStart;
  }
  node::StoreNode& n = **started;
  PrintBanner(n);
  if (route_plans.has_value()) {
    for (const std::string& line : transport::RenderPlans(*route_plans)) {
      Say(absl::StrCat("  ", line));
    }
    if (const absl::Status s = transport::ExportRoutePlans(route_plans->plans, n.metrics());
        !s.ok()) {
      std::fprintf(stderr, "mooncake_store: route metrics: %s\n", s.ToString().c_str());
    }
  }
  if (absl::GetFlag(FLAGS_demo) && options.role == node::Role::kAll) RunDemo(n);

  const node::ReadyFile ready(absl::GetFlag(FLAGS_ready_file));
  if (const absl::Status s = ready.Write(absl::StrCat(
          "rpc=", n.rpc_address(), "\nhttp=", n.http_address(), "\npid=", ::getpid(), "\n"));
      !s.ok()) {
    std::fprintf(stderr, "mooncake_store: --ready_file: %s\n", s.ToString().c_str());
    n.Shutdown().IgnoreError();
    return node::kExitCannotStart;
  }
  node::LogLine("serving; Ctrl-C to stop");

  const absl::Duration interval = absl::GetFlag(FLAGS_status_interval);
  node::StatusReporter status;
  node::EventReporter events;  // membership and trouble, checked every second
  {
    const node::NodeSnapshot first = n.Snapshot();
    if (interval > absl::ZeroDuration()) status.Line(first);  // the rates' baseline
    events.Events(first);
  }
  absl::Time next_status = absl::Now() + interval;
  absl::Time next_events = absl::Now() + absl::Seconds(1);
  int sig = 0;
  for (;;) {
    absl::Time until = next_events;
    if (interval > absl::ZeroDuration()) until = std::min(until, next_status);
    if ((sig = signals.Wait(until - absl::Now())) != 0) break;
    const absl::Time now = absl::Now();
    if (now < next_events && (interval <= absl::ZeroDuration() || now < next_status)) continue;
    const node::NodeSnapshot snap = n.Snapshot();
    if (now >= next_events) {
      for (const std::string& line : events.Events(snap)) node::LogLine(line);
      next_events = now + absl::Seconds(1);
    }
    if (interval > absl::ZeroDuration() && now >= next_status) {
      node::LogLine(status.Line(snap));
      next_status += interval;
    }
  }
  const bool drain = options.drain_deadline_ms > 0 && n.worker() != nullptr && !n.worker_retired();
  node::LogLine(absl::StrCat(
      "received ", node::SignalName(sig), ": shutting down (",
      drain ? absl::StrCat("drain the worker for at most ", options.drain_deadline_ms, " ms, ")
            : "",
      "health 503, ", n.worker() != nullptr ? "worker unmount, " : "",
      "drain, stop); a second signal exits at once"));
  // A second signal cuts the shutdown short (an unreachable master can hold the
  // unmount for its timeout, a drain for its deadline).
  node::RunShutdown(signals, ready, [&n, &options, drain] {
    if (drain) {
      const absl::StatusOr<store::proto::DrainStatus> d = n.DrainWorker(
          absl::Milliseconds(options.drain_deadline_ms), options.drain_bandwidth_bytes_per_sec);
      node::LogLine(d.ok()
                        ? node::DrainSummaryLine(*d)
                        : absl::StrCat("drain: ", d.status().ToString(), " (unmounting anyway)"));
    }
    const absl::Status s = n.Shutdown();
    if (!s.ok()) node::LogLine(absl::StrCat("shutdown: worker unmount: ", s.ToString()));
  });
  node::LogLine("stopped");
  return 0;
}

}  // namespace
}  // namespace mooncake

int main(int argc, char** argv) { return mooncake::Main(argc, argv); }
