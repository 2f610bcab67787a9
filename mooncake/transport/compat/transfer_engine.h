// TransferEngine: Mooncake Transfer Engine's Python-facing API
// (TransferEnginePy, what vLLM's MooncakeConnector and SGLang's PD
// disaggregation call) over this project's transports, with Mooncake's names,
// argument order and integer return codes (return_codes.h). The Python module
// mooncake.engine (python/engine_binding.cc) only converts arguments;
// docs/python.md lists every call.
//
// Parts:
//   data path     a TcpTransport; each registered buffer is one of its
//                 segments. Mooncake's API names remote memory by the peer's
//                 raw virtual address: a PeerView maps it to (segment,
//                 offset), and the transport checks the range requester-side
//                 and again owner-side (OutOfRange), so a transfer outside the
//                 peer's registered memory is refused and never performed.
//   control path  an RpcServer on the rpc port answering HandshakeMethod
//                 (endpoint + registered buffers). A peer's view is cached
//                 per name; it is refreshed when an address is in no buffer
//                 it knows (registered after the handshake) and dropped after
//                 a failed transfer, so a restarted or dead peer is asked
//                 again (and fails fast when gone).
//   metadata      MetadataClient: with a server, Initialize publishes
//                 mooncake/rpc_meta/<local_server_name> and peers resolve names
//                 through it (the rpc port is any free port); the destructor
//                 deletes the key. With P2PHANDSHAKE a peer's name is its rpc
//                 address: initialize("host:port", ...) binds that port when
//                 free, else any free one, and peers target
//                 "host:<get_rpc_port()>".
//
// Return codes: 0 success; -1 (Mooncake's ERR_INVALID_ARGUMENT and generic
// failure) for any failed initialize, transfer, handshake or bad argument;
// -3 (ERR_ADDRESS_NOT_REGISTERED) unregistering an unknown address; -7
// (ERR_ADDRESS_OVERLAPPED) registering overlapping memory. Batch ids are
// never 0: 0 says the submit failed. The reason for every failure is logged
// to stderr, as Mooncake logs it.
//
// Deadlines: a synchronous transfer or a status wait ends by
// MC_TRANSFER_TIMEOUT seconds (default 30, at least 5) plus one second per
// GiB, as Mooncake's; a peer that dies fails the transfer as soon as its
// connections reset, one that stalls after the transport's 5 s I/O timeout.
//
// Thread-safety: after Initialize every call may run concurrently.
// Initialize and the destructor run alone.
#ifndef MOONCAKE_TRANSPORT_COMPAT_TRANSFER_ENGINE_H_
#define MOONCAKE_TRANSPORT_COMPAT_TRANSFER_ENGINE_H_

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/rpc/tcp_server.h"
#include "mooncake/transport/compat/metadata_client.h"
#include "mooncake/transport/compat/peer_view.h"
#include "mooncake/transport/compat/return_codes.h"
#include "mooncake/transport/tcp_transport.h"
#include "mooncake/transport/transport.h"

namespace mooncake::transport::compat {

enum class TransferOpcode : int { kRead = 0, kWrite = 1 };

struct TransferEngineOptions {
  // Mooncake's transfer timeout; MC_TRANSFER_TIMEOUT (seconds, at least 5)
  // overrides it when FromEnvironment builds the options.
  absl::Duration transfer_timeout = absl::Seconds(30);
  absl::Duration handshake_timeout = absl::Seconds(3);
  size_t lanes_per_peer = 4;
  size_t max_requests_per_call = size_t{1} << 20;  // one call's list length
  size_t max_async_batches = 65536;                // ids not yet collected
  bool log_errors = true;
  // A token file (base/auth.h, docs/security.md): the handshake server and
  // the transport serve only peers that prove a principal it lists, and this
  // engine proves its own to its peers. Empty: no authentication.
  // FromEnvironment takes MOONCAKE_AUTH_TOKEN_FILE; Initialize loads it.
  std::string auth_token_file;

  static TransferEngineOptions FromEnvironment() {
    TransferEngineOptions o;
    if (const char* f = std::getenv("MOONCAKE_AUTH_TOKEN_FILE"); f != nullptr) {
      o.auth_token_file = f;
    }
    int64_t seconds = 0;
    if (const char* v = std::getenv("MC_TRANSFER_TIMEOUT");
        v != nullptr && absl::SimpleAtoi(v, &seconds)) {
      o.transfer_timeout = absl::Seconds(std::max<int64_t>(5, seconds));
    }
    return o;
  }
};

class TransferEngine {
 public:
  explicit TransferEngine(TransferEngineOptions options = TransferEngineOptions::FromEnvironment())
      : options_(options) {}
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;
  ~TransferEngine() { Shutdown(); }

  // -- Life cycle ------------------------------------------------------------

  // initialize(local_server_name, metadata_server, protocol, device_name).
  // protocol "tcp" (or "", which picks tcp: there is no RDMA device to
  // discover); "rdma" and others are refused. device_name is accepted and
  // unused by TCP. A second Initialize is refused.
  int Initialize(std::string_view local_server_name, std::string_view metadata_server,
                 std::string_view protocol, std::string_view device_name) {
    (void)device_name;
    MutexLock lock(&init_mu_);
    if (ready_.load(std::memory_order_acquire)) return Fail("initialize: already initialized");
    absl::Status s = InitializeLocked(local_server_name, metadata_server, protocol);
    if (!s.ok()) {
      Shutdown();
      return Fail(absl::StrCat("initialize(\"", AbslView(local_server_name), "\", \"",
                               AbslView(metadata_server), "\", \"", AbslView(protocol),
                               "\"): ", s.ToString()));
    }
    // release: the members Initialize set are visible to any thread that sees ready_.
    ready_.store(true, std::memory_order_release);
    return kOk;
  }

  // Mooncake's initialize_ext: metadata_type names the server kind when
  // metadata_server has no scheme ("etcd", "http", "p2p").
  int InitializeExt(std::string_view local_server_name, std::string_view metadata_server,
                    std::string_view protocol, std::string_view device_name,
                    std::string_view metadata_type) {
    std::string conn(metadata_server);
    if (metadata_server != kP2PHandshake && metadata_type != "p2p" && !metadata_type.empty() &&
        metadata_server.find("://") == std::string_view::npos) {
      conn = absl::StrCat(AbslView(metadata_type), "://", AbslView(metadata_server));
    }
    if (metadata_type == "p2p") conn = std::string(kP2PHandshake);
    return Initialize(local_server_name, conn, protocol, device_name);
  }

  // The port of the handshake server; 0 before Initialize.
  int GetRpcPort() const { return ready() ? server_->port() : 0; }
  const std::string& local_server_name() const { return local_server_name_; }
  // Peers reach this engine under this name: local_server_name with a
  // metadata server, "host:rpc_port" with P2PHANDSHAKE.
  std::string PeerName() const {
    if (!ready()) return "";
    return metadata_->kind() == MetadataClient::Kind::kP2PHandshake
               ? JoinHostPort(host_, server_->port())
               : local_server_name_;
  }

  // -- Memory ----------------------------------------------------------------

  // 0; -1 before Initialize, for a null address or length 0, or a GPU
  // location ("cuda:0": TCP sends from host memory); -7 for an overlap.
  int RegisterMemory(uintptr_t addr, size_t length, std::string_view location = "*") {
    if (!ready()) return Fail("register_memory: not initialized");
    if (addr == 0 || length == 0 || location.starts_with("cuda") || location.starts_with("npu")) {
      return Fail(absl::StrCat("register_memory(0x", absl::Hex(addr), ", ", length, ", \"",
                               AbslView(location), "\"): needs host memory, non-null, length > 0"));
    }
    MutexLock lock(&buffers_mu_);
    for (const LocalBuffer& b : buffers_) {
      if (addr < b.addr + b.length && b.addr < addr + length) {
        return Fail(absl::StrCat("register_memory(0x", absl::Hex(addr), ", ", length,
                                 "): overlaps the registered buffer at 0x", absl::Hex(b.addr)),
                    kErrAddressOverlapped);
      }
    }
    absl::StatusOr<SegmentDesc> seg = transport_->RegisterMemory(
        reinterpret_cast<void*>(addr), length, MemoryLocation::HostDram());
    if (!seg.ok()) return Fail(absl::StrCat("register_memory: ", seg.status().ToString()));
    buffers_.push_back({addr, length, seg->id});
    return kOk;
  }

  // 0; -3 unless `addr` starts a registered buffer.
  int UnregisterMemory(uintptr_t addr) {
    if (!ready()) return Fail("unregister_memory: not initialized");
    MutexLock lock(&buffers_mu_);
    auto it = std::find_if(buffers_.begin(), buffers_.end(),
                           [addr](const LocalBuffer& b) { return b.addr == addr; });
    if (it == buffers_.end()) {
      return Fail(absl::StrCat("unregister_memory(0x", absl::Hex(addr), "): not registered"),
                  kErrAddressNotRegistered);
    }
    (void)transport_->UnregisterMemory(it->segment);  // NotFound cannot happen: we own the id
    buffers_.erase(it);
    return kOk;
  }

  // Registers each in turn; on a failure unregisters what this call
  // registered and returns that failure's code.
  int BatchRegisterMemory(std::span<const uintptr_t> addrs, std::span<const size_t> lengths,
                          std::string_view location = "*") {
    if (addrs.size() != lengths.size()) {
      return Fail("batch_register_memory: addresses and capacities differ in length");
    }
    for (size_t i = 0; i < addrs.size(); ++i) {
      if (const int rc = RegisterMemory(addrs[i], lengths[i], location); rc != kOk) {
        for (size_t j = 0; j < i; ++j) (void)UnregisterMemory(addrs[j]);
        return rc;
      }
    }
    return kOk;
  }

  // Unregisters every address; the first failure's code, after trying all.
  int BatchUnregisterMemory(std::span<const uintptr_t> addrs) {
    int rc = kOk;
    for (const uintptr_t a : addrs) {
      if (const int r = UnregisterMemory(a); r != kOk && rc == kOk) rc = r;
    }
    return rc;
  }

  // Fresh page-aligned memory, registered; 0 on failure (or length 0).
  // Mooncake carves these from a buddy allocator over 2 GiB regions; here
  // each is its own mapping, so freeing returns the memory at once.
  uintptr_t AllocateManagedBuffer(size_t length) {
    if (!ready() || length == 0) {
      Fail("allocate_managed_buffer: not initialized or length 0");
      return 0;
    }
    void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      Fail(absl::StrCat("allocate_managed_buffer(", length, "): out of memory"));
      return 0;
    }
    const auto addr = reinterpret_cast<uintptr_t>(p);
    if (RegisterMemory(addr, length) != kOk) {
      ::munmap(p, length);
      return 0;
    }
    MutexLock lock(&buffers_mu_);
    managed_[addr] = length;
    return addr;
  }

  // 0; -3 for an address allocate_managed_buffer did not return (or freed);
  // -1 for a length other than the allocated one.
  int FreeManagedBuffer(uintptr_t addr, size_t length) {
    size_t mapped = 0;
    {
      MutexLock lock(&buffers_mu_);
      auto it = managed_.find(addr);
      if (it == managed_.end()) {
        return Fail(absl::StrCat("free_managed_buffer(0x", absl::Hex(addr), "): not managed"),
                    kErrAddressNotRegistered);
      }
      if (it->second != length) {
        return Fail(
            absl::StrCat("free_managed_buffer: allocated ", it->second, " bytes, not ", length));
      }
      mapped = it->second;
      managed_.erase(it);
    }
    (void)UnregisterMemory(addr);  // already unregistered by the caller is fine
    ::munmap(reinterpret_cast<void*>(addr), mapped);
    return kOk;
  }

  // The first registered buffer (registration order) of this engine or of
  // the peer named `segment_name`; 0 when it has none or cannot be reached.
  uintptr_t GetFirstBufferAddress(std::string_view segment_name) {
    if (!ready()) return 0;
    if (segment_name == local_server_name_ || segment_name == PeerName()) {
      MutexLock lock(&buffers_mu_);
      return buffers_.empty() ? 0 : buffers_.front().addr;
    }
    absl::StatusOr<std::shared_ptr<View>> view = Refresh(segment_name);
    if (!view.ok()) {
      Fail(absl::StrCat("get_first_buffer_address(\"", AbslView(segment_name),
                        "\"): ", view.status().ToString()));
      return 0;
    }
    return (*view)->first_buffer();
  }

  // Local memory helpers (Mooncake's write_bytes_to_buffer /
  // read_bytes_from_buffer): plain copies within this process, no peer
  // involved. -1 for a null address or a length past the data given.
  static int WriteBytesToBuffer(uintptr_t dest, std::string_view data, size_t length) {
    if (length == 0) return kOk;
    if (dest == 0 || length > data.size()) return kErrInvalidArgument;
    std::memcpy(reinterpret_cast<void*>(dest), data.data(), length);
    return kOk;
  }
  static int ReadBytesFromBuffer(uintptr_t src, size_t length, char* out) {
    if (length == 0) return kOk;
    if (src == 0 || out == nullptr) return kErrInvalidArgument;
    std::memcpy(out, reinterpret_cast<const void*>(src), length);
    return kOk;
  }

  // -- Transfers -------------------------------------------------------------

  int TransferSync(std::string_view target, uintptr_t local, uintptr_t remote, size_t length,
                   TransferOpcode op) {
    const uintptr_t l[] = {local};
    const uintptr_t r[] = {remote};
    const size_t n[] = {length};
    return BatchTransferSync(target, l, r, n, op);
  }

  // 0 when every request succeeded; -1 otherwise (nothing of a failed batch
  // may be relied on: some requests may have landed).
  int BatchTransferSync(std::string_view target, std::span<const uintptr_t> locals,
                        std::span<const uintptr_t> remotes, std::span<const size_t> lengths,
                        TransferOpcode op) {
    if (locals.empty() && remotes.empty() && lengths.empty()) return kOk;
    absl::StatusOr<Submitted> sub = Submit(target, locals, remotes, lengths, op, /*for_wait=*/true);
    if (!sub.ok()) return Fail(TransferWhy(target, sub.status()));
    const absl::Status s = WaitAll(*sub);
    if (!s.ok()) {
      ForgetPeer(target, sub->view);
      return Fail(TransferWhy(target, s));
    }
    return kOk;
  }

  // A batch id, or 0 when the batch could not be submitted (unknown or
  // unreachable peer, an address in no buffer of the peer, bad arguments).
  uint64_t BatchTransferAsync(std::string_view target, std::span<const uintptr_t> locals,
                              std::span<const uintptr_t> remotes, std::span<const size_t> lengths,
                              TransferOpcode op) {
    absl::StatusOr<Submitted> sub =
        Submit(target, locals, remotes, lengths, op, /*for_wait=*/false);
    if (!sub.ok()) {
      Fail(TransferWhy(target, sub.status()));
      return 0;
    }
    sub->target = std::string(target);
    MutexLock lock(&async_mu_);
    if (async_.size() >= options_.max_async_batches) {
      CancelAll(*sub);
      Fail(absl::StrCat("batch_transfer_async: ", async_.size(),
                        " batches not yet collected (get_batch_transfer_status)"));
      return 0;
    }
    const uint64_t id = next_async_id_++;
    async_.emplace(id, std::move(*sub));
    return id;
  }

  uint64_t TransferSubmitWrite(std::string_view target, uintptr_t local, uintptr_t remote,
                               size_t length) {
    const uintptr_t l[] = {local};
    const uintptr_t r[] = {remote};
    const size_t n[] = {length};
    return BatchTransferAsync(target, l, r, n, TransferOpcode::kWrite);
  }

  // Waits for every batch (each until its own deadline) and releases the
  // ids: 0 when all completed, -1 when any failed, timed out or is unknown.
  int GetBatchTransferStatus(std::span<const uint64_t> ids) {
    std::vector<Submitted> taken;
    bool unknown = false;
    {
      MutexLock lock(&async_mu_);
      for (const uint64_t id : ids) {
        auto it = async_.find(id);
        if (it == async_.end()) {
          unknown = true;
          continue;
        }
        taken.push_back(std::move(it->second));
        async_.erase(it);
      }
    }
    int rc =
        unknown ? Fail("get_batch_transfer_status: unknown or already collected batch id") : kOk;
    for (Submitted& sub : taken) {
      if (const absl::Status s = WaitAll(sub); !s.ok()) {
        ForgetPeer(sub.target, sub.view);
        rc = Fail(TransferWhy(sub.target, s));
      }
    }
    return rc;
  }

  // Mooncake's transfer_check_status: 1 completed (id released), 0 pending,
  // -1 failed or unknown (released), -2 past its deadline (cancelled, released).
  int TransferCheckStatus(uint64_t id) {
    std::optional<Submitted> sub;
    {
      MutexLock lock(&async_mu_);
      auto it = async_.find(id);
      if (it == async_.end()) return kStatusFailed;
      bool done = true;
      for (const BatchId b : it->second.batches) {
        absl::StatusOr<BatchProgress> p = transport_->Poll(b);
        done = done && (!p.ok() || p->done());
      }
      const bool late = absl::Now() > it->second.deadline;
      if (!done && !late) return kStatusPending;
      sub.emplace(std::move(it->second));
      async_.erase(it);
      if (!done) {
        CancelAll(*sub);
        return kStatusTimeout;
      }
    }
    return WaitAll(*sub).ok() ? kStatusCompleted : kStatusFailed;
  }

  // 0 when the peer answers a handshake now; -1 otherwise.
  int SendProbe(std::string_view target) {
    if (!ready()) return Fail("send_probe: not initialized");
    absl::StatusOr<std::shared_ptr<View>> view = Refresh(target);
    if (!view.ok()) {
      return Fail(
          absl::StrCat("send_probe(\"", AbslView(target), "\"): ", view.status().ToString()));
    }
    return kOk;
  }

 private:
  using View = PeerView<TcpTransport>;
  struct LocalBuffer {
    uintptr_t addr = 0;
    size_t length = 0;
    SegmentId segment = 0;
  };
  // A submitted call: its transport batches (at most kMaxBatchRequests
  // requests each) and the view whose handles they use.
  struct Submitted {
    std::shared_ptr<View> view;
    std::vector<BatchId> batches;
    absl::Time deadline;
    std::string target;  // async batches: for the failure's log and ForgetPeer
  };

  bool ready() const { return ready_.load(std::memory_order_acquire); }

  int Fail(std::string_view why, int code = kFailed) {
    if (options_.log_errors) {
      std::fprintf(stderr, "mooncake.engine: %.*s\n", static_cast<int>(why.size()), why.data());
    }
    return code;
  }
  static std::string TransferWhy(std::string_view target, const absl::Status& s) {
    return absl::StrCat("transfer with \"", AbslView(target), "\": ", s.ToString());
  }

  absl::Status InitializeLocked(std::string_view name, std::string_view metadata_server,
                                std::string_view protocol) ABSL_EXCLUSIVE_LOCKS_REQUIRED(init_mu_) {
    if (protocol != "tcp" && !protocol.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "protocol \"", AbslView(protocol),
          "\" is not available in this build (no RDMA device or driver here); use \"tcp\""));
    }
    ASSIGN_OR_RETURN(auth_, auth::LoadCredentials(options_.auth_token_file));
    ASSIGN_OR_RETURN(MetadataClient metadata, MetadataClient::Parse(metadata_server, auth_));
    metadata_ = std::move(metadata);
    std::string host(name);
    uint32_t port = 0;
    if (std::optional<HostPortText> hp = SplitHostPort(name); hp.has_value()) {
      if (!absl::SimpleAtoi(AbslView(hp->port), &port) || port > 65535) {
        return absl::InvalidArgumentError(
            "local_server_name: bad port; expected host or host:port");
      }
      host = std::string(hp->host);
    }
    if (host.empty()) return absl::InvalidArgumentError("local_server_name has no host");
    ASSIGN_OR_RETURN(std::string ip, NumericAddress(host));
    local_server_name_ = std::string(name);
    host_ = host;

    TcpTransport::Options topts;
    topts.bind_host = ip;
    topts.lanes_per_peer = options_.lanes_per_peer;
    topts.auth = auth_;
    ASSIGN_OR_RETURN(transport_, TcpTransport::Create(topts));

    server_.reset();
    registry_ = std::make_unique<rpc::ServiceRegistry>();
    RETURN_IF_ERROR(registry_->Register<HandshakeMethod>(
        [this](const proto::HandshakeRequest&) -> absl::StatusOr<proto::HandshakeResponse> {
          return Describe();
        },
        {.mode = rpc::ExecutionMode::kInline}));
    // P2P peers address this engine by the port in its name when it is free.
    const bool p2p = metadata_->kind() == MetadataClient::Kind::kP2PHandshake;
    absl::Status started = absl::UnknownError("not started");
    for (const uint32_t try_port : {p2p ? port : 0u, 0u}) {
      server_ = std::make_unique<rpc::RpcServer>(
          registry_.get(), rpc::RpcServerOptions{.host = ip,
                                                 .port = static_cast<uint16_t>(try_port),
                                                 .worker_threads = 1,
                                                 .auth = auth_});
      if (started = server_->Start(); started.ok() || try_port == 0) break;
    }
    RETURN_IF_ERROR(started);
    if (!p2p) {
      RETURN_IF_ERROR(
          metadata_->Put(RpcMetaKey(local_server_name_), EncodeRpcMeta({ip, server_->port()})));
      published_ = true;
    }
    return absl::OkStatus();
  }

  // A numeric address for `host` (itself when it is one), IPv4 preferred.
  static absl::StatusOr<std::string> NumericAddress(const std::string& host) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot resolve host \"", host, "\": ", ::gai_strerror(rc)));
    }
    const addrinfo* pick = found;
    for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
      if (a->ai_family == AF_INET) {
        pick = a;
        break;
      }
    }
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw = pick->ai_family == AF_INET
                          ? static_cast<const void*>(
                                &reinterpret_cast<const sockaddr_in*>(pick->ai_addr)->sin_addr)
                          : static_cast<const void*>(
                                &reinterpret_cast<const sockaddr_in6*>(pick->ai_addr)->sin6_addr);
    const bool ok = ::inet_ntop(pick->ai_family, raw, text, sizeof(text)) != nullptr;
    ::freeaddrinfo(found);
    if (!ok) return absl::InternalError("inet_ntop failed");
    return std::string(text);
  }

  proto::HandshakeResponse Describe() {
    proto::HandshakeResponse r;
    r.set_local_server_name(local_server_name_);
    r.set_protocol("tcp");
    r.set_endpoint(transport_->LocalEndpoint());
    MutexLock lock(&buffers_mu_);
    for (const LocalBuffer& b : buffers_) {
      proto::BufferDesc* d = r.add_buffers();
      d->set_addr(b.addr);
      d->set_length(b.length);
      d->set_segment_id(b.segment);
    }
    return r;
  }

  // The rpc address of the engine named `target`.
  absl::StatusOr<std::string> ResolveRpcAddress(std::string_view target) {
    if (metadata_->kind() == MetadataClient::Kind::kP2PHandshake) {
      std::optional<HostPortText> hp = SplitHostPort(target);
      uint32_t port = 0;
      if (!hp.has_value() || !absl::SimpleAtoi(AbslView(hp->port), &port) || port == 0 ||
          port > 65535) {
        return absl::InvalidArgumentError(absl::StrCat(
            "with P2PHANDSHAKE a peer is named \"host:rpc_port\", not \"", AbslView(target), "\""));
      }
      return std::string(target);
    }
    ASSIGN_OR_RETURN(std::optional<std::string> value, metadata_->Get(RpcMetaKey(target)));
    if (!value.has_value()) {
      return absl::NotFoundError(
          absl::StrCat("no engine \"", AbslView(target), "\" in metadata ", metadata_->Describe()));
    }
    ASSIGN_OR_RETURN(RpcMeta meta, DecodeRpcMeta(*value));
    return JoinHostPort(meta.ip_or_host_name, meta.rpc_port);
  }

  // A fresh view of `target`, cached for later calls.
  absl::StatusOr<std::shared_ptr<View>> Refresh(std::string_view target) {
    ASSIGN_OR_RETURN(std::string address, ResolveRpcAddress(target));
    ASSIGN_OR_RETURN(proto::HandshakeResponse answer,
                     Handshake(address, local_server_name_, options_.handshake_timeout, auth_));
    if (answer.protocol() != "tcp") {
      return absl::FailedPreconditionError(
          absl::StrCat("peer speaks \"", answer.protocol(), "\", this engine tcp"));
    }
    auto view = std::make_shared<View>(transport_.get(), answer);
    MutexLock lock(&peers_mu_);
    peers_[std::string(target)] = view;
    return view;
  }

  absl::StatusOr<std::shared_ptr<View>> CachedOrRefresh(std::string_view target) {
    {
      MutexLock lock(&peers_mu_);
      if (auto it = peers_.find(AbslView(target)); it != peers_.end()) return it->second;
    }
    return Refresh(target);
  }

  // Drops the cached view of `target` if it is still `view` (a concurrent
  // refresh may have replaced it already).
  void ForgetPeer(std::string_view target, const std::shared_ptr<View>& view) {
    MutexLock lock(&peers_mu_);
    if (auto it = peers_.find(AbslView(target)); it != peers_.end() && it->second == view) {
      peers_.erase(it);
    }
  }

  absl::StatusOr<Submitted> Submit(std::string_view target, std::span<const uintptr_t> locals,
                                   std::span<const uintptr_t> remotes,
                                   std::span<const size_t> lengths, TransferOpcode op,
                                   bool for_wait) {
    if (!ready()) return absl::FailedPreconditionError("the engine is not initialized");
    const size_t n = locals.size();
    if (remotes.size() != n || lengths.size() != n) {
      return absl::InvalidArgumentError(
          "buffers, peer_buffer_addresses and lengths differ in length");
    }
    if (n > options_.max_requests_per_call) {
      return absl::InvalidArgumentError(
          absl::StrCat(n, " requests in one call; at most ", options_.max_requests_per_call));
    }
    uint64_t total_bytes = 0;
    for (size_t i = 0; i < n; ++i) {
      if (locals[i] == 0 || lengths[i] == 0 || remotes[i] == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("request ", i, ": null address or length 0"));
      }
      total_bytes += lengths[i];
    }
    ASSIGN_OR_RETURN(std::shared_ptr<View> view, CachedOrRefresh(target));
    // Any failure from here on may mean the peer restarted or died: the next
    // call asks it again instead of trusting this view.
    auto forget = [&](absl::Status s) {
      ForgetPeer(target, view);
      return s;
    };
    std::vector<TransferRequest> requests(n);
    bool refreshed = false;
    for (size_t i = 0; i < n; ++i) {
      absl::StatusOr<View::Target> t = view->Map(remotes[i]);
      if (absl::IsNotFound(t.status()) && !refreshed) {
        // The peer may have registered the buffer after our handshake: ask
        // again once and map every request with the new view.
        refreshed = true;
        absl::StatusOr<std::shared_ptr<View>> fresh = Refresh(target);
        if (!fresh.ok()) return forget(fresh.status());
        view = std::move(*fresh);
        i = static_cast<size_t>(-1);  // the loop's ++i restarts at 0
        continue;
      }
      if (!t.ok()) return forget(t.status());
      requests[i] = TransferRequest{
          .op = op == TransferOpcode::kWrite ? OpCode::kWrite : OpCode::kRead,
          .local_addr = reinterpret_cast<void*>(locals[i]),
          .segment = t->handle,
          .remote_offset = t->offset,
          .length = lengths[i],
      };
    }
    Submitted sub;
    sub.view = view;
    sub.deadline =
        absl::Now() + options_.transfer_timeout +
        absl::Nanoseconds(static_cast<int64_t>(std::min<uint64_t>(total_bytes, 1ull << 62)));
    const std::span<const TransferRequest> all(requests);
    for (size_t at = 0; at < n; at += kMaxBatchRequests) {
      const auto chunk = all.subspan(at, std::min(kMaxBatchRequests, n - at));
      absl::StatusOr<BatchId> b = for_wait && n <= kMaxBatchRequests
                                      ? SubmitForWaitOrSubmit(*transport_, chunk)
                                      : transport_->Submit(chunk);
      if (!b.ok()) {
        CancelAll(sub);
        return forget(b.status());
      }
      sub.batches.push_back(*b);
    }
    return sub;
  }

  // Waits for every batch of `sub` until its deadline (cancelling what is
  // left then); the first failure, or OK.
  absl::Status WaitAll(Submitted& sub) {
    absl::Status first;
    for (const BatchId b : sub.batches) {
      absl::StatusOr<BatchResult> r = transport_->Wait(b, sub.deadline);
      if (absl::IsDeadlineExceeded(r.status())) r = transport_->Cancel(b);
      const absl::Status s = r.ok() ? r->FirstError() : r.status();
      if (first.ok() && !s.ok()) first = s;
    }
    sub.batches.clear();
    return first;
  }

  void CancelAll(Submitted& sub) {
    for (const BatchId b : sub.batches) (void)transport_->Cancel(b);
    sub.batches.clear();
  }

  void Shutdown() {
    ready_.store(false, std::memory_order_release);
    if (server_ != nullptr) server_->Stop();
    if (published_ && metadata_.has_value()) {
      if (absl::Status s = metadata_->Delete(RpcMetaKey(local_server_name_)); !s.ok()) {
        Fail(absl::StrCat("close: could not remove the rpc_meta key: ", s.ToString()));
      }
      published_ = false;
    }
    {
      MutexLock lock(&async_mu_);
      for (auto& [id, sub] : async_) {
        if (transport_ != nullptr) CancelAll(sub);
      }
      async_.clear();
    }
    {
      MutexLock lock(&peers_mu_);
      peers_.clear();  // views close their handles on the transport
    }
    transport_.reset();  // no peer reaches the buffers after this
    MutexLock lock(&buffers_mu_);
    buffers_.clear();
    for (const auto& [addr, length] : managed_) ::munmap(reinterpret_cast<void*>(addr), length);
    managed_.clear();
  }

  const TransferEngineOptions options_;
  Mutex init_mu_;
  std::atomic<bool> ready_{false};
  // Set by Initialize before ready_ and constant after it.
  std::string local_server_name_;
  std::string host_;
  std::optional<MetadataClient> metadata_;
  std::shared_ptr<const auth::Credentials> auth_;  // null: no authentication
  std::unique_ptr<TcpTransport> transport_;
  std::unique_ptr<rpc::ServiceRegistry> registry_;  // outlives server_ (declared before it)
  std::unique_ptr<rpc::RpcServer> server_;
  bool published_ = false;

  Mutex buffers_mu_;
  std::vector<LocalBuffer> buffers_ ABSL_GUARDED_BY(buffers_mu_);  // registration order
  absl::flat_hash_map<uintptr_t, size_t> managed_ ABSL_GUARDED_BY(buffers_mu_);

  Mutex peers_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<View>> peers_ ABSL_GUARDED_BY(peers_mu_);

  Mutex async_mu_;
  uint64_t next_async_id_ ABSL_GUARDED_BY(async_mu_) = 1;  // 0 means "submit failed"
  absl::flat_hash_map<uint64_t, Submitted> async_ ABSL_GUARDED_BY(async_mu_);
};

}  // namespace mooncake::transport::compat

#endif  // MOONCAKE_TRANSPORT_COMPAT_TRANSFER_ENGINE_H_
