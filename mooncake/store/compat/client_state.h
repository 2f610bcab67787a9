// ClientState: what MooncakeDistributedStore.setup builds and close tears
// down (docs/python.md, "What a client is"), and the two ways to build it:
//   OpenClient(config)   a channel to the master; unless global_segment_size
//                        is 0, a Worker owning one memfd segment mounted under
//                        "host:port" (the port of its TCP endpoint, from
//                        local_hostname or free in [kPortRangeBegin,
//                        kPortRangeEnd)); a Client; the staging buffer.
//   OpenDummyClient(...) attaches to a mooncake_client daemon on this host
//                        (ClientDaemonInfoMethod): no segment of its own, puts
//                        prefer the daemon's segment.
// Errors: INVALID_ARGUMENT (protocol, metadata_server, local_hostname, a
// mem_pool_size over the daemon's segment), UNAVAILABLE (master or daemon
// unreachable within kRpcTimeoutMs), what the worker and client refuse.
//
// Thread-safety: a ClientState is built and destroyed by one thread; its
// members (client, registered buffers, staging allocator) are thread-safe.
#ifndef MOONCAKE_STORE_COMPAT_CLIENT_STATE_H_
#define MOONCAKE_STORE_COMPAT_CLIENT_STATE_H_

#include <netdb.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "mooncake/alloc/locked_allocator.h"
#include "mooncake/alloc/tlsf_allocator.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/client.h"
#include "mooncake/store/compat/client_daemon.pb.h"
#include "mooncake/store/compat/store_config.h"
#include "mooncake/store/ha/leader_resolver.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/tcp_channel.h"
#include "mooncake/store/worker/worker.h"

namespace mooncake::compat {

// Mooncake's transfer-engine port range: where a client's endpoint port is
// picked when local_hostname names none.
inline constexpr uint16_t kPortRangeBegin = 12300;
inline constexpr uint16_t kPortRangeEnd = 14300;
inline constexpr int64_t kRpcTimeoutMs = 2'000;

struct ClientDaemonInfoMethod {
  static constexpr uint16_t kId = static_cast<uint16_t>(proto::DAEMON_INFO);
  static constexpr std::string_view kName = "DaemonInfo";
  using Request = proto::DaemonInfoRequest;
  using Response = proto::DaemonInfoResponse;
};
static_assert(rpc::RpcMethod<ClientDaemonInfoMethod>);

// The staging buffer's allocation unit.
inline constexpr uint64_t kStagingGranularityBytes = 64;

struct ClientState {
  std::unique_ptr<rpc::TcpChannel> channel;
  std::unique_ptr<rpc::TcpChannel> daemon_channel;          // dummy clients only
  std::unique_ptr<worker::Worker<rpc::TcpChannel>> worker;  // null: no segment of its own
  std::unique_ptr<client::Client<rpc::TcpChannel>> client;
  std::string hostname;
  std::vector<std::string> default_segments;  // dummy: the daemon's segment
  // The staging buffer: anonymous memory carved by a TLSF allocator.
  void* staging = nullptr;
  uint64_t staging_bytes = 0;
  std::unique_ptr<alloc::LockedAllocator<alloc::TlsfAllocator>> staging_alloc;

  ~ClientState() {
    client.reset();
    if (staging != nullptr) ::munmap(staging, staging_bytes);
  }
};

inline absl::Status MapStaging(ClientState& s, uint64_t bytes) {
  const uint64_t usable = bytes / kStagingGranularityBytes * kStagingGranularityBytes;
  if (usable == 0) return absl::OkStatus();  // puts will fail with kBufferOverflow
  void* p = ::mmap(nullptr, usable, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("local_buffer_size: cannot map ", usable, " bytes"));
  }
  s.staging = p;
  s.staging_bytes = usable;
  ASSIGN_OR_RETURN(alloc::TlsfAllocator tlsf,
                   alloc::TlsfAllocator::Create(
                       {.capacity_bytes = usable, .granularity_bytes = kStagingGranularityBytes}));
  s.staging_alloc = std::make_unique<alloc::LockedAllocator<alloc::TlsfAllocator>>(std::move(tlsf));
  return absl::OkStatus();
}

inline absl::StatusOr<std::string> NumericHost(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("local_hostname: cannot resolve '", host, "'"));
  }
  char buf[NI_MAXHOST] = {};
  // Prefer IPv4 (what "localhost" means to most configs).
  const addrinfo* pick = res;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  }
  const int rc =
      ::getnameinfo(pick->ai_addr, pick->ai_addrlen, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST);
  ::freeaddrinfo(res);
  if (rc != 0) return absl::InvalidArgumentError("local_hostname: no numeric address");
  return std::string(buf);
}

inline absl::Status CheckCommon(const StoreConfig& c) {
  if (c.protocol == "rdma" && !client::kRdmaBuilt) {
    return absl::InvalidArgumentError(
        "protocol 'rdma': this build of the store client moves bytes over tcp and shared "
        "memory only (RDMA needs a build with --config=rdma)");
  }
  if (c.protocol != "tcp" && c.protocol != "rdma") {
    return absl::InvalidArgumentError(
        absl::StrCat("protocol '", c.protocol, "': want 'tcp' or 'rdma'"));
  }
  const std::string& m = c.metadata_server;
  if (!(m.empty() || m == "P2PHANDSHAKE" || m.starts_with("http://") || m.starts_with("etcd://") ||
        m.find(':') != std::string::npos)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metadata_server '", m, "': want P2PHANDSHAKE, http://host:port/... or etcd://host:port"));
  }
  return absl::OkStatus();
}

// `addr`: "host:port", or "etcd://HOST:PORT[;HOST:PORT...][/CLUSTER_ID]" for
// the leader of an HA cluster (mooncake_master --enable_ha; CLUSTER_ID
// defaults to Mooncake's "mooncake_cluster"): calls then follow the leader
// across failovers (docs/ha.md).
// MOONCAKE_AUTH_TOKEN_FILE (ours): the token file (docs/security.md) whose
// principal this process proves to the master, the workers and a
// mooncake_client daemon; its own global segment's transport then serves only
// peers that prove one the file lists. Unset: no authentication.
inline absl::StatusOr<std::shared_ptr<const auth::Credentials>> AuthFromEnvironment() {
  return auth::CredentialsFromEnvironment();
}

inline absl::StatusOr<std::unique_ptr<rpc::TcpChannel>> ConnectMaster(const std::string& addr) {
  rpc::TcpChannelOptions o;
  ASSIGN_OR_RETURN(o.auth, AuthFromEnvironment());
  o.connect_timeout_ns = kRpcTimeoutMs * 1'000'000;
  o.default_timeout_ns = kRpcTimeoutMs * 1'000'000;
  if (absl::StartsWith(addr, "etcd://")) {
    std::string rest = addr.substr(7);
    std::string cluster = "mooncake_cluster";
    if (const size_t slash = rest.find('/'); slash != std::string::npos) {
      cluster = rest.substr(slash + 1);
      rest.resize(slash);
    }
    std::string endpoints;
    for (absl::string_view h : absl::StrSplit(rest, absl::ByAnyChar(",;"), absl::SkipEmpty())) {
      absl::StrAppend(&endpoints, endpoints.empty() ? "" : ",", "http://", h);
    }
    auto resolve = ha::LeaderResolver(endpoints, cluster);
    if (!resolve.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("master_server_addr '", addr, "': ", resolve.status().message()));
    }
    o.resolve = *std::move(resolve);
    auto ch = rpc::TcpChannel::Connect("", o);
    if (!ch.ok()) {
      return absl::UnavailableError(
          absl::StrCat("master_server_addr '", addr, "': ", ch.status().message()));
    }
    return ch;
  }
  auto ch = rpc::TcpChannel::Connect(addr, o);
  if (!ch.ok()) {
    return absl::UnavailableError(
        absl::StrCat("master_server_addr '", addr, "': ", ch.status().message()));
  }
  return ch;
}

// MOONCAKE_TRANSPORTS (ours, not Mooncake's): a comma list of the paths
// the client may use, of "local", "shm" and "tcp" (default: all; the
// router picks the best per segment). "tcp" alone measures the network path
// between processes on one host.
// MOONCAKE_NETWORK_COMPRESSION (ours): "off" (default), "auto" or "always":
// float KV (a put with bf16/fp16/fp8 TensorMeta, e.g. put_tensor) is stored
// compressed when it pays for the link (ClientOptions::network_compression,
// docs/client.md); MOONCAKE_NETWORK_LINK_BYTES_PER_S gives "auto" the link's
// rate (default: the client's own measurement).
// One cheap call, so that a master that refuses this client (no token, or a
// token it does not accept for a call) fails setup with its reason instead of
// every later call failing with a bare code.
inline absl::Status ProbeMaster(rpc::TcpChannel& channel) {
  store::proto::DescribeSegmentsRequest req;
  req.add_segment_ids(0);
  auto r = rpc::Call<rpc::DescribeSegmentsMethod>(channel, req,
                                                  {.timeout_ns = kRpcTimeoutMs * 1'000'000});
  if (r.ok() || (!absl::IsUnauthenticated(r.status()) && !absl::IsPermissionDenied(r.status()))) {
    return absl::OkStatus();  // other failures surface on the calls that meet them
  }
  return r.status();
}

// MOONCAKE_QOS_LINK (ours): the name of this host's link arbiter
// (ClientOptions::qos_link; docs/client.md, "Sharing a link with other
// processes"), with MOONCAKE_QOS_LINK_BYTES_PER_S (its rate, required) and
// MOONCAKE_QOS_CLASS "critical" or "bulk" (default "bulk"): every TCP slice
// this process sends takes a grant from it first. Unset: none.
inline absl::Status QosFromEnvironment(client::ClientOptions& o) {
  const char* link = std::getenv("MOONCAKE_QOS_LINK");
  if (link == nullptr || *link == '\0') return absl::OkStatus();
  o.qos_link = link;
  const char* rate = std::getenv("MOONCAKE_QOS_LINK_BYTES_PER_S");
  if (rate == nullptr || !absl::SimpleAtoi(rate, &o.qos_link_bytes_per_s) ||
      o.qos_link_bytes_per_s == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("MOONCAKE_QOS_LINK_BYTES_PER_S: '", rate != nullptr ? rate : "",
                     "' is not the link's rate in bytes per second (needed with "
                     "MOONCAKE_QOS_LINK)"));
  }
  const char* cls = std::getenv("MOONCAKE_QOS_CLASS");
  const absl::string_view c = cls != nullptr ? cls : "";
  if (c.empty() || c == "bulk") {
    o.qos_class = 1;
  } else if (c == "critical") {
    o.qos_class = 0;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("MOONCAKE_QOS_CLASS: '", c, "' is not critical or bulk"));
  }
  return absl::OkStatus();
}

// `protocol` "rdma" (in a --config=rdma build): RDMA required, else tcp and
// shared memory only.
inline absl::StatusOr<client::ClientOptions> MakeClientOptions(std::string_view protocol = "tcp") {
  client::ClientOptions o;
  o.use_rdma = o.require_rdma = protocol == "rdma";
  ASSIGN_OR_RETURN(o.auth, AuthFromEnvironment());
  o.rpc_timeout_ms = kRpcTimeoutMs;
  if (const char* c = std::getenv("MOONCAKE_NETWORK_COMPRESSION"); c != nullptr && *c != '\0') {
    const absl::string_view v(c);
    if (v == "off") {
      o.network_compression = client::NetworkCompression::kOff;
    } else if (v == "auto") {
      o.network_compression = client::NetworkCompression::kAuto;
    } else if (v == "always") {
      o.network_compression = client::NetworkCompression::kAlways;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("MOONCAKE_NETWORK_COMPRESSION: '", v, "' is not off, auto or always"));
    }
  }
  if (const char* r = std::getenv("MOONCAKE_NETWORK_LINK_BYTES_PER_S");
      r != nullptr && *r != '\0') {
    uint64_t rate = 0;
    if (!absl::SimpleAtoi(r, &rate)) {
      return absl::InvalidArgumentError(absl::StrCat("MOONCAKE_NETWORK_LINK_BYTES_PER_S: '", r,
                                                     "' is not a number of bytes per second"));
    }
    o.network_link_bytes_per_s = static_cast<double>(rate);
  }
  RETURN_IF_ERROR(QosFromEnvironment(o));
  const char* env = std::getenv("MOONCAKE_TRANSPORTS");
  if (env == nullptr || *env == '\0') return o;
  o.use_local = o.use_shm = o.use_tcp = false;
  for (absl::string_view t : absl::StrSplit(env, ',')) {
    if (t == "local") {
      o.use_local = true;
    } else if (t == "shm") {
      o.use_shm = true;
    } else if (t == "tcp") {
      o.use_tcp = true;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("MOONCAKE_TRANSPORTS: '", t, "' is not local, shm or tcp"));
    }
  }
  return o;
}

inline absl::StatusOr<std::unique_ptr<ClientState>> OpenClient(const StoreConfig& c) {
  RETURN_IF_ERROR(CheckCommon(c));
  auto s = std::make_unique<ClientState>();
  std::string host = c.local_hostname.empty() ? std::string("localhost") : c.local_hostname;
  uint16_t port = 0;
  if (std::optional<HostPortText> hp = SplitHostPort(host); hp.has_value()) {
    uint32_t p = 0;
    if (!absl::SimpleAtoi(AbslView(hp->port), &p) || p > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("local_hostname '", c.local_hostname, "': bad port"));
    }
    port = static_cast<uint16_t>(p);
    host = std::string(hp->host);
  }
  ASSIGN_OR_RETURN(s->channel, ConnectMaster(c.master_server_addr));
  RETURN_IF_ERROR(ProbeMaster(*s->channel));
  if (c.global_segment_size > 0) {
    ASSIGN_OR_RETURN(const std::string bind, NumericHost(host));
    worker::WorkerOptions w;
    w.segment_count = 1;
    w.segment_bytes = c.global_segment_size;
    w.tcp_bind_host = bind;
    w.serve_rdma = w.require_rdma = c.protocol == "rdma";
    w.rpc_timeout_ms = kRpcTimeoutMs;
    ASSIGN_OR_RETURN(w.auth, AuthFromEnvironment());
    std::mt19937 rng(std::random_device{}());
    absl::Status last = absl::OkStatus();
    // A fixed port is tried once; otherwise free ports in Mooncake's range.
    for (int attempt = 0; attempt < (port != 0 ? 1 : 64); ++attempt) {
      const uint16_t p =
          port != 0
              ? port
              : static_cast<uint16_t>(kPortRangeBegin + rng() % (kPortRangeEnd - kPortRangeBegin));
      w.tcp_port = p;
      w.segment_name = JoinHostPort(host, p);
      auto started = worker::Worker<rpc::TcpChannel>::Start(w, s->channel.get());
      if (started.ok()) {
        s->worker = std::move(*started);
        s->hostname = w.segment_name;
        break;
      }
      last = started.status();
      if (!absl::IsAlreadyExists(last) && !absl::IsUnavailable(last) &&
          last.message().find("in use") == std::string_view::npos) {
        break;
      }
    }
    if (s->worker == nullptr) {
      return absl::Status(last.code(), absl::StrCat("global segment of ", c.global_segment_size,
                                                    " bytes: ", last.message()));
    }
  } else {
    s->hostname = JoinHostPort(host, port);
  }
  ASSIGN_OR_RETURN(client::ClientOptions co, MakeClientOptions(c.protocol));
  ASSIGN_OR_RETURN(s->client, client::Client<rpc::TcpChannel>::Create(co, s->channel.get()));
  RETURN_IF_ERROR(MapStaging(*s, c.local_buffer_size));
  if (s->staging != nullptr) {
    RETURN_IF_ERROR(s->client->RegisterBuffer(s->staging, s->staging_bytes));
  }
  return s;
}

inline absl::StatusOr<std::unique_ptr<ClientState>> OpenDummyClient(
    uint64_t mem_pool_size, uint64_t local_buffer_size, const std::string& server_address) {
  auto s = std::make_unique<ClientState>();
  rpc::TcpChannelOptions o;
  o.connect_timeout_ns = kRpcTimeoutMs * 1'000'000;
  ASSIGN_OR_RETURN(o.auth, AuthFromEnvironment());
  auto ch = rpc::TcpChannel::Connect(server_address, o);
  if (!ch.ok()) {
    return absl::UnavailableError(
        absl::StrCat("mooncake_client daemon at '", server_address, "': ", ch.status().message()));
  }
  s->daemon_channel = std::move(*ch);
  proto::DaemonInfoRequest req;
  ASSIGN_OR_RETURN(proto::DaemonInfoResponse info,
                   rpc::Call<ClientDaemonInfoMethod>(*s->daemon_channel, req,
                                                     {.timeout_ns = kRpcTimeoutMs * 1'000'000}));
  if (mem_pool_size > info.segment_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("setup_dummy: mem_pool_size ", mem_pool_size,
                                                   " exceeds the daemon's segment of ",
                                                   info.segment_bytes(), " bytes"));
  }
  ASSIGN_OR_RETURN(s->channel, ConnectMaster(info.master_address()));
  RETURN_IF_ERROR(ProbeMaster(*s->channel));
  ASSIGN_OR_RETURN(client::ClientOptions co, MakeClientOptions("tcp"));
  ASSIGN_OR_RETURN(s->client, client::Client<rpc::TcpChannel>::Create(co, s->channel.get()));
  s->hostname = info.segment_name();
  s->default_segments = {info.segment_name()};
  RETURN_IF_ERROR(MapStaging(*s, local_buffer_size));
  if (s->staging != nullptr) {
    RETURN_IF_ERROR(s->client->RegisterBuffer(s->staging, s->staging_bytes));
  }
  return s;
}

}  // namespace mooncake::compat

#endif  // MOONCAKE_STORE_COMPAT_CLIENT_STATE_H_
