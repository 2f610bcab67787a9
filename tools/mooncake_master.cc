// mooncake_master: the store's master under Mooncake Store's program name and
// flag names, for scripts and deployments written for Mooncake's
// mooncake_master (docs/store_binary.md, "mooncake_master").
//
//   mooncake_master                                   # RPC 127.0.0.1:50051, metrics :9003
//   mooncake_master --rpc_address=0.0.0.0 --port=50051 --default_kv_lease_ttl=10000
//   mooncake_master --enable_http_metadata_server --http_metadata_server_port=8080
//
// Workers join it as for `mooncake_store --role=master` (it is that node):
// `mooncake_store --role=worker --master=HOST:PORT`. Mooncake flags it does
// not implement are refused by name (exit 2), never ignored.
//
// Exit codes: 0 after a graceful shutdown (SIGINT, SIGTERM or SIGHUP), 1 when
// it cannot start (a port in use), 2 for bad or refused flags, 128 + the
// signal when a second signal cuts a shutdown short.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/node/metadata_server.h"
#include "mooncake/store/node/program.h"
#include "mooncake/store/node/status_line.h"
#include "mooncake/store/node/store_node.h"
#include "mooncake/store/node/store_node_options.h"

// Mooncake's names and defaults, except where a comment says otherwise.
ABSL_FLAG(int32_t, port, 50051, "master RPC port; 0 = any free port");
ABSL_FLAG(int32_t, rpc_port, 0, "master RPC port, preferred over --port; 0 = use --port");
// Mooncake binds 0.0.0.0; this master binds loopback unless told otherwise.
ABSL_FLAG(std::string, rpc_address, "127.0.0.1",
          "address the RPC server and /metrics bind to (numeric IPv4 or IPv6; 0.0.0.0 for all "
          "interfaces)");
ABSL_FLAG(int32_t, max_threads, 4, "RPC handler threads");
ABSL_FLAG(int32_t, rpc_thread_num, 0,
          "RPC handler threads, preferred over --max_threads; 0 = use "
          "--max_threads");
ABSL_FLAG(int32_t, metrics_port, 9003, "HTTP /metrics and /health port; 0 = any free port");
ABSL_FLAG(bool, enable_metric_reporting, true, "print a status line every 10 s");
ABSL_FLAG(uint64_t, default_kv_lease_ttl, 5000,
          "read lease, in ms, of a get that names none: the object's space is not reused "
          "before it ends");
ABSL_FLAG(double, eviction_high_watermark_ratio, 0.95,
          "eviction starts when this fraction of the workers' memory is used");
ABSL_FLAG(double, eviction_ratio, 0.05,
          "fraction of the memory eviction frees: it evicts down to "
          "eviction_high_watermark_ratio - eviction_ratio");
ABSL_FLAG(bool, enable_http_metadata_server, false,
          "also serve the transfer-engine metadata store (GET/PUT/DELETE /metadata?key=K)");
ABSL_FLAG(int32_t, http_metadata_server_port, 8080, "metadata server port; 0 = any free port");
// Mooncake binds 0.0.0.0; this master binds loopback unless told otherwise.
ABSL_FLAG(std::string, http_metadata_server_host, "127.0.0.1", "metadata server address");
// High availability (docs/ha.md): masters sharing a cluster_id on one etcd
// elect a leader; the others are hot standbys. Clients and workers find the
// leader with master_server_addr / --master = etcd://HOST:PORT[/CLUSTER_ID].
ABSL_FLAG(std::string, auth_token_file, "",
          "access control (docs/security.md): a mode-0600 file of 'NAME SECRET' lines listing "
          "'cluster' and any 'tenant:NAME'; RPC peers must prove a listed secret. Empty: none");
ABSL_FLAG(bool, enable_ha, false, "join an HA cluster on etcd (leader or hot standby)");
ABSL_FLAG(std::string, ha_backend_type, "etcd", "HA coordination service: etcd (the only one)");
ABSL_FLAG(std::string, ha_backend_connstring, "",
          "etcd endpoints, HOST:PORT[;HOST:PORT...] (also accepts ',')");
ABSL_FLAG(std::string, etcd_endpoints, "", "the older name of --ha_backend_connstring");
ABSL_FLAG(std::string, cluster_id, "mooncake_cluster", "the HA cluster's name");
ABSL_FLAG(int64_t, ha_lease_ttl_ms, 2000,
          "the leader's etcd lease; a dead leader is replaced about this long after it stops");
// This program's own.
ABSL_FLAG(std::string, memory_allocator, "offset",
          "segments' allocator: offset (a TLSF range allocator, as Mooncake's OffsetAllocator) "
          "or cachelib (KV block sizes get slabs over it, as CacheLib's slab classes); tlsf and "
          "kv are our names for the same two");
ABSL_FLAG(std::string, kv_block_bytes, "",
          "(ours) --memory_allocator=cachelib: the KV block sizes given slabs, e.g. 896K,2M "
          "(default: the store's built-in sizes)");
ABSL_FLAG(std::string, ready_file, "",
          "when serving, atomically write rpc=<host:port>, http=<host:port>, "
          "metadata=<host:port or empty>, pid=<pid> here");

namespace mooncake {
namespace {

constexpr std::string_view kProgram = "mooncake_master";

// Mooncake master flags (and the glog flags its binary takes) not
// implemented here.
constexpr node::RefusedFlag kRefused[] = {
    {"config_path", "give the settings as flags"},
    {"client_ttl", "clients of an HA cluster follow the leader through etcd; no TTL"},
    {"root_fs_dir", "there is no file-system storage backend; workers take --ssd_path"},
    {"global_file_segment_size", "there is no file-system storage backend"},
    {"enable_offload", "workers offload to their SSD tier (mooncake_store --ssd_path)"},
    {"enable_disk_eviction", "there is no file-system storage backend"},
    {"quota_bytes", "there is no file-system storage backend"},
    {"default_kv_soft_pin_ttl",
     "a soft pin lasts as long as its put's pin_ttl_ms says; there is no master default"},
    {"allow_evict_soft_pinned_objects",
     "soft-pinned objects are always evictable, after every unpinned one"},
    {"rpc_conn_timeout_seconds", "idle RPC connections are kept"},
    {"rpc_enable_tcp_no_delay", "TCP_NODELAY is always on"},
    {"allocation_strategy", "placement is client-local first"},
    {"put_start_discard_timeout_sec", "an unfinished put is revoked after 30 s"},
    {"put_start_release_timeout_sec", "an unfinished put is revoked after 30 s"},
    {"max_total_finished_tasks", "there is no task manager"},
    {"max_total_pending_tasks", "there is no task manager"},
    {"max_total_processing_tasks", "there is no task manager"},
    {"pending_task_timeout_sec", "there is no task manager"},
    {"processing_task_timeout_sec", "there is no task manager"},
    {"enable_cxl", "there is no CXL memory support"},
    {"cxl_path", "there is no CXL memory support"},
    {"cxl_size", "there is no CXL memory support"},
    {"enable_gc", "objects leave by eviction, removal or their TTL"},
    {"v", "there is no glog; the master prints its events and status lines"},
    {"vmodule", "there is no glog"},
    {"logtostderr", "there is no glog; lines go to stdout"},
    {"alsologtostderr", "there is no glog; lines go to stdout"},
    {"log_dir", "there is no glog; redirect stdout"},
    {"minloglevel", "there is no glog"},
    {"stderrthreshold", "there is no glog"},
};
constexpr std::string_view kBuiltins[] = {"help", "helpfull", "helpshort", "version"};

[[noreturn]] void BadFlags(std::string_view why) { node::ExitBadFlags(kProgram, why); }

uint16_t PortFlag(std::string_view name, int32_t port) {
  if (port < 0 || port > 65535) {
    BadFlags(absl::StrCat("--", AbslView(name), "=", port, ": want a port in [0, 65535]"));
  }
  return static_cast<uint16_t>(port);
}

// A bind address: numeric, an IPv6 one with or without brackets.
std::string HostFlag(std::string_view name, std::string host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  in6_addr v6{};
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) != 1 &&
      ::inet_pton(AF_INET6, host.c_str(), &v6) != 1) {
    BadFlags(absl::StrCat("--", AbslView(name), "=", host,
                          ": want a numeric IPv4 or IPv6 address (0.0.0.0 or :: for all)"));
  }
  return host;
}

struct MasterConfig {
  node::StoreNodeOptions node;
  std::optional<node::MetadataServerOptions> metadata;
};

MasterConfig ConfigFromFlags() {
  MasterConfig c;
  node::StoreNodeOptions& o = c.node;
  o.role = node::Role::kMaster;
  const std::string host = HostFlag("rpc_address", absl::GetFlag(FLAGS_rpc_address));
  const uint16_t port = PortFlag("port", absl::GetFlag(FLAGS_port));
  const uint16_t rpc_port = PortFlag("rpc_port", absl::GetFlag(FLAGS_rpc_port));
  o.listen = {host, rpc_port != 0 ? rpc_port : port};
  o.http_enabled = true;
  o.http = {host, PortFlag("metrics_port", absl::GetFlag(FLAGS_metrics_port))};
  const int32_t rpc_threads = absl::GetFlag(FLAGS_rpc_thread_num);
  const int32_t threads = rpc_threads > 0 ? rpc_threads : absl::GetFlag(FLAGS_max_threads);
  if (rpc_threads < 0 || threads < 1 || threads > 256) {
    BadFlags(absl::StrCat(rpc_threads > 0 ? "--rpc_thread_num=" : "--max_threads=", threads,
                          ": want [1, 256] RPC threads"));
  }
  o.rpc_worker_threads = static_cast<size_t>(threads);
  const uint64_t lease = absl::GetFlag(FLAGS_default_kv_lease_ttl);
  if (lease < 1 || lease > static_cast<uint64_t>(node::kMaxDefaultLeaseMs)) {
    BadFlags(absl::StrCat("--default_kv_lease_ttl=", lease, ": want [1, ", node::kMaxDefaultLeaseMs,
                          "] ms"));
  }
  o.default_lease_ms = static_cast<int64_t>(lease);
  const double high = absl::GetFlag(FLAGS_eviction_high_watermark_ratio);
  const double ratio = absl::GetFlag(FLAGS_eviction_ratio);
  if (!(high > 0 && high <= 1)) {
    BadFlags(absl::StrCat("--eviction_high_watermark_ratio=", high, ": want (0, 1]"));
  }
  if (!(ratio > 0 && ratio < high)) {
    BadFlags(absl::StrCat("--eviction_ratio=", ratio, ": want (0, --eviction_high_watermark_ratio",
                          "): eviction frees memory down to their difference"));
  }
  o.high_watermark = high;
  o.low_watermark = high - ratio;
  const std::string allocator = absl::GetFlag(FLAGS_memory_allocator);
  if (allocator == "offset" || allocator == "tlsf") {
    o.allocator = node::AllocatorKind::kTlsf;
  } else if (allocator == "cachelib" || allocator == "kv") {
    o.allocator = node::AllocatorKind::kKv;
  } else {
    BadFlags(absl::StrCat("--memory_allocator=", allocator, ": want offset or cachelib"));
  }
  if (const std::string blocks = absl::GetFlag(FLAGS_kv_block_bytes); !blocks.empty()) {
    if (o.allocator != node::AllocatorKind::kKv) {
      BadFlags("--kv_block_bytes needs --memory_allocator=cachelib");
    }
    auto parsed = node::ParseKvBlockBytes(blocks);
    if (!parsed.ok()) BadFlags(StdView(parsed.status().message()));
    o.kv_block_bytes = *parsed;
  }
  o.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  if (absl::GetFlag(FLAGS_enable_ha)) {
    if (absl::GetFlag(FLAGS_ha_backend_type) != "etcd") {
      BadFlags(absl::StrCat("--ha_backend_type=", absl::GetFlag(FLAGS_ha_backend_type),
                            ": only etcd is supported"));
    }
    std::string conn = absl::GetFlag(FLAGS_ha_backend_connstring);
    if (conn.empty()) conn = absl::GetFlag(FLAGS_etcd_endpoints);
    if (conn.empty()) BadFlags("--enable_ha needs --ha_backend_connstring=HOST:PORT[;...]");
    std::string list;
    for (absl::string_view h : absl::StrSplit(conn, absl::ByAnyChar(",;"), absl::SkipEmpty())) {
      absl::StrAppend(&list, list.empty() ? "" : ",",
                      absl::StartsWith(h, "http://") ? "" : "http://", h);
    }
    o.ha_etcd = list;
    o.ha_cluster = absl::GetFlag(FLAGS_cluster_id);
    o.ha_lease_ttl_ms = absl::GetFlag(FLAGS_ha_lease_ttl_ms);
    o.on_event = [](const std::string& line) { node::LogLine("event: " + line); };
  } else if (!absl::GetFlag(FLAGS_ha_backend_connstring).empty() ||
             !absl::GetFlag(FLAGS_etcd_endpoints).empty()) {
    BadFlags("--ha_backend_connstring/--etcd_endpoints need --enable_ha");
  }
  if (const absl::Status s = node::ValidateStoreNodeOptions(o); !s.ok()) {
    BadFlags(StdView(s.message()));
  }
  if (absl::GetFlag(FLAGS_enable_http_metadata_server)) {
    c.metadata = node::MetadataServerOptions{
        .host =
            HostFlag("http_metadata_server_host", absl::GetFlag(FLAGS_http_metadata_server_host)),
        .port =
            PortFlag("http_metadata_server_port", absl::GetFlag(FLAGS_http_metadata_server_port))};
    // The metadata server takes the master's token file (any secret it lists).
    auto creds = auth::LoadCredentials(o.auth_token_file);
    if (!creds.ok()) BadFlags(StdView(creds.status().message()));
    c.metadata->auth = *std::move(creds);
  }
  return c;
}

void PrintBanner(node::StoreNode& n, const node::MetadataServer* metadata) {
  const node::StoreNodeOptions& o = n.options();
  node::Say(absl::StrCat("mooncake_master ", AbslView(node::kStoreVersion),
                         ": the mooncake store's master"));
  node::Say(absl::StrCat("  master RPC   ", n.rpc_address(), "   (", o.rpc_worker_threads,
                         " handler threads; workers join with mooncake_store --role=worker "
                         "--master=",
                         n.rpc_address(), ")"));
  node::Say(absl::StrCat(
      "  allocator    ", AbslView(node::AllocatorName(o.allocator)),
      o.allocator == node::AllocatorKind::kKv ? " (KV block slabs over TLSF)" : " (TLSF)"));
  node::Say(absl::StrCat("  leases       ", o.default_lease_ms, " ms by default; eviction from ",
                         o.high_watermark, " down to ", o.low_watermark, " of memory used"));
  node::Say(absl::StrCat("  HTTP         http://", n.http_address(), "/metrics   http://",
                         n.http_address(), "/health"));
  if (metadata != nullptr) {
    node::Say(absl::StrCat("  metadata     http://", metadata->address(), "/metadata",
                           "   (transfer-engine metadata: GET/PUT/DELETE ?key=K)"));
  }
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "the mooncake store's master under Mooncake Store's flag names. See "
      "docs/store_binary.md.");
  absl::FlagsUsageConfig usage;
  usage.version_string = [] {
    return absl::StrCat("mooncake_master ", AbslView(node::kStoreVersion), "\n");
  };
  absl::SetFlagsUsageConfig(usage);
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "-h") argv[i] = const_cast<char*>("--help");
  }
  node::PrecheckFlags(kProgram, argc, argv, kRefused, kBuiltins);
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) BadFlags(absl::StrCat("unexpected argument \"", rest[1], "\""));
  const MasterConfig config = ConfigFromFlags();

  node::StopSignals signals;  // before any thread starts
  auto started = node::StoreNode::Start(config.node);
  if (!started.ok()) {
    std::fprintf(stderr, "mooncake_master: cannot start: %s\n",
                 started.status().ToString().c_str());
    return node::kExitCannotStart;
  }
  node::StoreNode& n = **started;
  std::unique_ptr<node::MetadataServer> metadata;
  if (config.metadata.has_value()) {
    auto m = node::MetadataServer::Start(*config.metadata);
    if (!m.ok()) {
      std::fprintf(stderr, "mooncake_master: cannot start: --http_metadata_server_port=%d: %s%s\n",
                   config.metadata->port, m.status().ToString().c_str(),
                   absl::IsAlreadyExists(m.status()) ? " (the port is already in use)" : "");
      n.Shutdown().IgnoreError();
      return node::kExitCannotStart;
    }
    metadata = std::move(*m);
  }
  PrintBanner(n, metadata.get());

  const node::ReadyFile ready(absl::GetFlag(FLAGS_ready_file));
  if (const absl::Status s = ready.Write(absl::StrCat(
          "rpc=", n.rpc_address(), "\nhttp=", n.http_address(),
          "\nmetadata=", metadata ? metadata->address() : "", "\npid=", ::getpid(), "\n"));
      !s.ok()) {
    std::fprintf(stderr, "mooncake_master: --ready_file: %s\n", s.ToString().c_str());
    n.Shutdown().IgnoreError();
    return node::kExitCannotStart;
  }
  node::LogLine("serving; Ctrl-C to stop");

  const bool report = absl::GetFlag(FLAGS_enable_metric_reporting);
  const absl::Duration interval = absl::Seconds(10);
  node::StatusReporter status;
  node::EventReporter events;  // workers joining and leaving, checked every second
  {
    const node::NodeSnapshot first = n.Snapshot();
    if (report) status.Line(first);  // the rates' baseline
    events.Events(first);
  }
  absl::Time next_status = absl::Now() + interval;
  int sig = 0;
  while ((sig = signals.Wait(absl::Seconds(1))) == 0) {
    const node::NodeSnapshot snap = n.Snapshot();
    for (const std::string& line : events.Events(snap)) node::LogLine(line);
    if (report && absl::Now() >= next_status) {
      node::LogLine(status.Line(snap));
      next_status += interval;
    }
  }
  node::LogLine(absl::StrCat("received ", node::SignalName(sig),
                             ": shutting down (health 503, drain, stop); a second signal exits "
                             "at once"));
  node::RunShutdown(signals, ready, [&] {
    n.Shutdown().IgnoreError();  // a master has no worker to unmount
    if (metadata != nullptr) metadata->Stop();
  });
  node::LogLine("stopped");
  return 0;
}

}  // namespace
}  // namespace mooncake

int main(int argc, char** argv) { return mooncake::Main(argc, argv); }
