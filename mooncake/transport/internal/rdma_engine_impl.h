// Member definitions of RdmaEngine<V>; included only by rdma_engine.h.
// IWYU pragma: private, include "mooncake/transport/internal/rdma_engine.h"
#ifndef MOONCAKE_TRANSPORT_INTERNAL_RDMA_ENGINE_IMPL_H_
#define MOONCAKE_TRANSPORT_INTERNAL_RDMA_ENGINE_IMPL_H_

#ifndef MOONCAKE_TRANSPORT_INTERNAL_RDMA_ENGINE_H_
#error "include mooncake/transport/internal/rdma_engine.h instead"
#endif

#include <fcntl.h>
#include <poll.h>

namespace mooncake::transport_internal {

// --- Setup and teardown -------------------------------------------------------

template <RdmaVerbs V>
absl::Status RdmaEngine<V>::Init() {
  const std::vector<std::string> devices = verbs_.ListDevices();
  if (devices.empty()) {
    return absl::FailedPreconditionError(
        "no RDMA device: ibv_get_device_list found none (no NIC, driver or rdma_rxe link); "
        "use the TCP transport on this host");
  }
  std::vector<RdmaPath> wanted = options_.paths;
  if (wanted.empty()) {
    wanted.push_back(RdmaPath{options_.device_name, options_.port, options_.gid_index, 1});
  }
  for (const RdmaPath& w : wanted) RETURN_IF_ERROR(OpenPath(w, devices));
  sq_depth_ = options_.send_queue_depth;
  limits_.max_sge = static_cast<uint32_t>(std::min<uint64_t>(options_.max_sge, kMaxSgePerWr));
  limits_.wr_bytes_max = options_.wr_bytes_max;
  max_mr_size_ = UINT64_MAX;
  for (const Device& d : devices_) {
    sq_depth_ = std::min(sq_depth_, d.attrs.max_qp_wr);
    limits_.max_sge = std::min(limits_.max_sge, d.attrs.max_sge);
    max_mr_size_ = std::min(max_mr_size_, d.attrs.max_mr_size);
  }
  double heaviest = 0;
  for (const Path& p : paths_) {
    limits_.wr_bytes_max = std::min<uint64_t>(limits_.wr_bytes_max, p.attrs.max_msg_sz);
    heaviest = std::max(heaviest, p.weight);
  }
  if (paths_.size() > 1) {
    for (Path& p : paths_) {
      p.window = std::max<uint64_t>(
          1, static_cast<uint64_t>(static_cast<double>(options_.path_window_bytes) * p.weight /
                                   heaviest));
    }
  }
  if (sq_depth_ < 2 || limits_.max_sge < 1 || limits_.wr_bytes_max == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "RDMA device '", devices_.front().name, "' reports unusable limits: max_qp_wr ", sq_depth_,
        ", max_sge ", limits_.max_sge, ", max_msg_sz ", limits_.wr_bytes_max));
  }
  ASSIGN_OR_RETURN(auto listener, rdma_ctl::ListenTcp(options_.listen_host, options_.listen_port));
  listen_fd_ = std::move(listener.first);
  listen_port_ = listener.second;
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoToStatus(errno, "pipe2");
  wake_read_ = UniqueFd(pipe_fds[0]);
  wake_write_ = UniqueFd(pipe_fds[1]);
  server_ = std::thread([this] { ServeLoop(); });
  return absl::OkStatus();
}

// Opens `want`'s device (once per device) and queries its port.
template <RdmaVerbs V>
absl::Status RdmaEngine<V>::OpenPath(const RdmaPath& want,
                                     const std::vector<std::string>& present) {
  const std::string name = want.device_name.empty() ? present.front() : want.device_name;
  if (std::find(present.begin(), present.end(), name) == present.end()) {
    return absl::NotFoundError(absl::StrCat("no RDMA device named '", name,
                                            "'; present: ", present.size(), " device(s), first '",
                                            present.front(), "'"));
  }
  size_t dev = 0;
  while (dev < devices_.size() && devices_[dev].name != name) ++dev;
  if (dev == devices_.size()) {
    Device d;
    d.name = name;
    ASSIGN_OR_RETURN(d.ctx, verbs_.OpenDevice(name));
    devices_.push_back(std::move(d));  // from here Shutdown closes it
    Device& opened = devices_.back();
    ASSIGN_OR_RETURN(opened.attrs, verbs_.QueryDevice(opened.ctx));
    ASSIGN_OR_RETURN(opened.pd, verbs_.AllocPd(opened.ctx));
    ASSIGN_OR_RETURN(opened.passive_cq, verbs_.CreateCq(opened.ctx, 16));
  }
  for (const Path& p : paths_) {
    if (p.device == dev && p.port == want.port) {
      return absl::InvalidArgumentError(
          absl::StrCat("RdmaOptions: path '", name, ":", want.port, "' is named twice"));
    }
  }
  Path path;
  path.device = dev;
  path.port = want.port;
  path.gid_index = want.gid_index;
  path.weight = want.weight;
  absl::StatusOr<PortAttrs> attrs = verbs_.QueryPort(devices_[dev].ctx, want.port, want.gid_index);
  if (!attrs.ok()) {
    return absl::Status(attrs.status().code(), absl::StrCat("RDMA port '", name, ":", want.port,
                                                            "': ", attrs.status().message()));
  }
  path.attrs = *attrs;
  path.stats.name = absl::StrCat(name, ":", want.port);
  path.stats.weight = want.weight;
  paths_.push_back(std::move(path));
  return absl::OkStatus();
}

template <RdmaVerbs V>
void RdmaEngine<V>::Shutdown() {
  if (server_.joinable()) {
    stopping_.store(true, std::memory_order_relaxed);  // the pipe write publishes it
    const char byte = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_write_.get(), &byte, 1);
    server_.join();
  }
  for (auto& s : control_conns_) DropControlConn(*s);
  control_conns_.clear();
  MutexLock lock(&mu_);
  for (auto& [id, c] : conns_) {
    if (c->qp.handle != QpHandle{}) verbs_.ModifyQpToError(c->qp.handle).IgnoreError();
    DestroyConnectionResources(*c);
  }
  conns_.clear();
  by_endpoint_.clear();
  batches_.ForEach([this](transport::BatchId, Batch& b) {
    for (const MemoryRegion& mr : b.extra.temp_mrs) verbs_.DeregMr(mr.handle).IgnoreError();
  });
  batches_.Clear();
  for (auto& [id, seg] : segments_) {
    for (const MemoryRegion& mr : seg.mrs) {
      if (mr.handle != MrHandle{}) verbs_.DeregMr(mr.handle).IgnoreError();
    }
  }
  segments_.clear();
  for (Device& d : devices_) {
    if (d.passive_cq != CqHandle{}) verbs_.DestroyCq(d.passive_cq).IgnoreError();
    if (d.pd != PdHandle{}) verbs_.DeallocPd(d.pd).IgnoreError();
    verbs_.CloseDevice(d.ctx).IgnoreError();
  }
  devices_.clear();
}

template <RdmaVerbs V>
std::string RdmaEngine<V>::PathName(size_t path) const {
  return absl::StrCat(devices_[paths_[path].device].name, ":", paths_[path].port);
}

template <RdmaVerbs V>
QpInfo RdmaEngine<V>::LocalQpInfo(size_t path, uint32_t qpn, uint32_t psn) const {
  const PortAttrs& a = paths_[path].attrs;
  QpInfo info;
  info.qpn = qpn;
  info.psn = psn;
  info.lid = a.lid;
  info.mtu = a.active_mtu;
  info.use_gid = a.is_ethernet;
  info.gid = a.gid;
  return info;
}

// INIT -> RTR -> RTS on local `path` against `peer`.
template <RdmaVerbs V>
absl::Status RdmaEngine<V>::BringUp(size_t path, QpHandle qp, const QpInfo& peer,
                                    uint32_t own_psn) {
  const Path& p = paths_[path];
  RETURN_IF_ERROR(verbs_.ModifyQpToInit(
      qp, p.port, kAccessLocalWrite | kAccessRemoteRead | kAccessRemoteWrite));
  RtrParams rtr;
  rtr.dest_qpn = peer.qpn;
  rtr.rq_psn = peer.psn;
  rtr.dlid = peer.lid;
  rtr.dgid = peer.gid;
  rtr.use_gid = peer.use_gid || p.attrs.is_ethernet;
  rtr.sgid_index = static_cast<uint8_t>(p.gid_index);
  rtr.port = p.port;
  rtr.path_mtu = std::min(p.attrs.active_mtu, peer.mtu);
  RETURN_IF_ERROR(verbs_.ModifyQpToRtr(qp, rtr));
  RtsParams rts = options_.rts;
  rts.sq_psn = own_psn;
  return verbs_.ModifyQpToRts(qp, rts);
}

// --- Registration -----------------------------------------------------------------

template <RdmaVerbs V>
absl::StatusOr<transport::SegmentDesc> RdmaEngine<V>::RegisterMemory(
    void* addr, uint64_t length, transport::MemoryLocation location) {
  const auto a = reinterpret_cast<uint64_t>(addr);
  if (addr == nullptr || length == 0 || a + length < a) {
    return absl::InvalidArgumentError("RegisterMemory: null address, zero length or overflow");
  }
  if (length > max_mr_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RegisterMemory: ", length, " bytes exceed the device's max_mr_size ", max_mr_size_));
  }
  MutexLock lock(&mu_);
  auto next = segments_by_addr_.lower_bound(a);
  bool overlaps = next != segments_by_addr_.end() && next->first < a + length;
  if (next != segments_by_addr_.begin()) {
    const LocalSegment& prev = segments_.at(std::prev(next)->second);
    overlaps = overlaps || prev.addr + prev.length > a;
  }
  if (overlaps) {
    return absl::AlreadyExistsError("RegisterMemory: range overlaps a registered segment");
  }
  std::vector<MemoryRegion> mrs;
  for (const Device& d : devices_) {
    absl::StatusOr<MemoryRegion> mr = verbs_.RegMr(
        d.pd, addr, length, kAccessLocalWrite | kAccessRemoteRead | kAccessRemoteWrite);
    if (!mr.ok()) {
      for (const MemoryRegion& made : mrs) verbs_.DeregMr(made.handle).IgnoreError();
      return absl::Status(mr.status().code(), absl::StrCat("RegisterMemory on '", d.name,
                                                           "': ", mr.status().message()));
    }
    mrs.push_back(*mr);
  }
  const transport::SegmentId id = next_segment_++;
  segments_[id] = LocalSegment{a, length, location, std::move(mrs)};
  segments_by_addr_[a] = id;
  return transport::SegmentDesc{id, length, location};
}

template <RdmaVerbs V>
absl::Status RdmaEngine<V>::UnregisterMemory(transport::SegmentId id) {
  MutexLock lock(&mu_);
  auto it = segments_.find(id);
  if (it == segments_.end()) {
    return absl::NotFoundError(absl::StrCat("UnregisterMemory: no segment ", id));
  }
  // Deregistering invalidates the rkeys: peers' later accesses fail on the
  // device. If the first deregistration fails the segment stays as it was
  // (try again); if a later one fails the segment is gone all the same (its
  // other keys are dead) and the error says how many regions stay pinned.
  LocalSegment& seg = it->second;
  size_t failed = 0, done = 0;
  absl::Status first;
  for (MemoryRegion& mr : seg.mrs) {
    if (mr.handle == MrHandle{}) continue;
    if (absl::Status s = verbs_.DeregMr(mr.handle); !s.ok()) {
      if (done == 0) return s;
      ++failed;
      if (first.ok()) first = s;
      continue;
    }
    mr.handle = MrHandle{};
    ++done;
  }
  segments_by_addr_.erase(seg.addr);
  segments_.erase(it);
  if (failed > 0) {
    return absl::Status(
        first.code(),
        absl::StrCat("UnregisterMemory: segment ", id, " is unregistered, but ", failed,
                     " of its memory regions could not be released: ", first.message()));
  }
  return absl::OkStatus();
}

// --- Connections ----------------------------------------------------------------

template <RdmaVerbs V>
absl::StatusOr<std::unique_ptr<typename RdmaEngine<V>::Connection>> RdmaEngine<V>::Connect(
    const std::string& endpoint, size_t path) {
  ASSIGN_OR_RETURN(const HostPort hp, rdma_ctl::ParseEndpoint(endpoint, "rdma"));
  const absl::Time deadline = absl::Now() + options_.connect_timeout;
  const Device& dev = devices_[paths_[path].device];
  auto c = std::make_unique<Connection>();
  c->endpoint = endpoint;
  c->path = path;
  c->signal = SignalPolicy(options_.signal_interval);
  ASSIGN_OR_RETURN(c->cq, verbs_.CreateCq(dev.ctx, sq_depth_ + 1));
  auto created = verbs_.CreateQp(dev.pd, c->cq, QpCaps{sq_depth_, limits_.max_sge});
  if (!created.ok()) {
    verbs_.DestroyCq(c->cq).IgnoreError();
    return created.status();
  }
  c->qp = *created;
  uint32_t psn;
  {
    MutexLock lock(&mu_);
    psn = NextPsn();
  }
  auto status = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(UniqueFd fd, rdma_ctl::ConnectTcp(hp, deadline));
    RETURN_IF_ERROR(AuthenticateControl(fd.get(), deadline));
    RdmaMessage hello;
    hello.type = RdmaMsgType::kConnectRequest;
    hello.qp = LocalQpInfo(path, c->qp.qpn, psn);
    hello.path = static_cast<uint8_t>(path);
    RETURN_IF_ERROR(rdma_ctl::SendRdmaMessage(fd.get(), hello, deadline));
    ASSIGN_OR_RETURN(RdmaMessage reply, rdma_ctl::RecvRdmaMessage(fd.get(), deadline));
    if (reply.type != RdmaMsgType::kConnectReply) {
      return absl::DataLossError("RDMA control: expected a connect reply");
    }
    RETURN_IF_ERROR(reply.status);
    RETURN_IF_ERROR(BringUp(path, c->qp.handle, reply.qp, psn));
    MutexLock lock(&c->control_mu);
    c->control = std::move(fd);
    return absl::OkStatus();
  }();
  if (!status.ok()) {
    DestroyConnectionResources(*c);
    return absl::Status(status.code(), absl::StrCat("RDMA connect to ", endpoint, " over ",
                                                    PathName(path), ": ", status.message()));
  }
  return c;
}

// The endpoint's connections, one per local path that could connect (at
// least one), each with a ref for the caller.
template <RdmaVerbs V>
absl::StatusOr<std::vector<typename RdmaEngine<V>::Connection*>> RdmaEngine<V>::GetOrConnect(
    const std::string& endpoint) {
  const auto share = [](const std::vector<Connection*>& conns) {  // under mu_
    for (Connection* c : conns) ++c->refs;
    return conns;
  };
  {
    MutexLock lock(&mu_);
    auto it = by_endpoint_.find(endpoint);
    if (it != by_endpoint_.end()) return share(it->second);
  }
  std::vector<std::unique_ptr<Connection>> fresh;
  absl::Status first_error;
  std::vector<size_t> failed;
  for (size_t p = 0; p < paths_.size(); ++p) {
    absl::StatusOr<std::unique_ptr<Connection>> c = Connect(endpoint, p);
    if (c.ok()) {
      fresh.push_back(std::move(*c));
    } else {
      failed.push_back(p);
      if (first_error.ok()) first_error = c.status();
    }
  }
  MutexLock lock(&mu_);
  for (size_t p : failed) ++paths_[p].stats.connect_failures;
  if (fresh.empty()) return first_error;
  auto it = by_endpoint_.find(endpoint);
  if (it != by_endpoint_.end()) {  // another thread connected first: keep theirs
    for (auto& c : fresh) DestroyConnectionResources(*c);
    return share(it->second);
  }
  auto group = std::make_shared<PathGroup>();
  std::vector<Connection*> conns;
  for (auto& owned : fresh) {
    owned->id = next_conn_++;
    owned->refs = 2;  // the endpoint map and the caller
    owned->group = group;
    Connection* c = owned.get();
    group->conns.push_back(c);
    conns.push_back(c);
    conns_[c->id] = std::move(owned);
  }
  by_endpoint_[endpoint] = conns;
  return conns;
}

template <RdmaVerbs V>
void RdmaEngine<V>::DestroyConnectionResources(Connection& c) {
  if (c.qp.handle != QpHandle{}) verbs_.DestroyQp(c.qp.handle).IgnoreError();
  if (c.cq != CqHandle{}) verbs_.DestroyCq(c.cq).IgnoreError();
  c.qp = QueuePair{};
  c.cq = CqHandle{};
  MutexLock lock(&c.control_mu);
  c.control.Reset();  // the owner drops its passive QP when the channel closes
}

template <RdmaVerbs V>
void RdmaEngine<V>::Release(Connection* c) {
  MC_ASSERT(c->refs > 0, "connection reference count underflow");
  if (--c->refs > 0) return;
  MC_DASSERT(c->tracker.outstanding() == 0, "released with work posted");
  // Erased later by Reap(): Release may run while Progress iterates conns_.
  DestroyConnectionResources(*c);
  zombies_.push_back(c->id);
}

template <RdmaVerbs V>
void RdmaEngine<V>::Reap() {
  for (uint64_t id : zombies_) {
    auto it = conns_.find(id);
    if (it == conns_.end()) continue;
    std::erase(it->second->group->conns, it->second.get());
    conns_.erase(it);
  }
  zombies_.clear();
}

template <RdmaVerbs V>
bool RdmaEngine<V>::HasLivePath(const PathGroup& g, const Connection* except) {
  return std::any_of(g.conns.begin(), g.conns.end(), [&](const Connection* c) {
    return c != except && c->broken.ok() && c->refs > 0;
  });
}

// The QP is unusable: flush it; its WRs go to the group's other paths (or
// fail), and the endpoint is forgotten so the next OpenSegment connects
// every path anew.
template <RdmaVerbs V>
void RdmaEngine<V>::Break(Connection* c, const absl::Status& why) {
  if (!c->broken.ok()) return;
  c->broken = why;
  ++paths_[c->path].stats.breaks;
  verbs_.ModifyQpToError(c->qp.handle).IgnoreError();
  const absl::Status flushed = WrTracker::FlushedStatus(why);
  c->tracker.FailAll(flushed,
                     [&](const WrTag& t, const absl::Status& s) { Retire(c, t, s, true); });
  PathGroup& g = *c->group;
  if (!HasLivePath(g)) {
    std::deque<WrTag> stranded = std::move(g.pending);
    g.pending.clear();
    for (const WrTag& t : stranded) Retire(nullptr, t, flushed, false);
  }
  auto it = by_endpoint_.find(c->endpoint);
  if (it != by_endpoint_.end() &&
      std::find(it->second.begin(), it->second.end(), c) != it->second.end()) {
    const std::vector<Connection*> conns = std::move(it->second);
    by_endpoint_.erase(it);
    for (Connection* x : conns) Release(x);
  }
}

template <RdmaVerbs V>
absl::StatusOr<transport::RemoteSegment> RdmaEngine<V>::OpenSegment(std::string_view endpoint,
                                                                    transport::SegmentId id) {
  if (id == 0) return absl::InvalidArgumentError("OpenSegment: segment id 0 is never valid");
  ASSIGN_OR_RETURN(std::vector<Connection*> conns, GetOrConnect(std::string(endpoint)));
  RdmaMessage ask;
  ask.type = RdmaMsgType::kOpenRequest;
  ask.segment.id = id;
  std::vector<absl::StatusOr<RdmaMessage>> replies;
  for (Connection* c : conns) {
    MutexLock lock(&c->control_mu);
    const absl::Time deadline = absl::Now() + options_.io_timeout;
    absl::Status sent = c->control.valid()
                            ? rdma_ctl::SendRdmaMessage(c->control.get(), ask, deadline)
                            : absl::UnavailableError("RDMA control channel already closed");
    replies.push_back(sent.ok() ? rdma_ctl::RecvRdmaMessage(c->control.get(), deadline) : sent);
  }
  MutexLock lock(&mu_);
  std::vector<PathKey> keys;
  SegmentInfo info;
  absl::Status refusal, failure;
  for (size_t i = 0; i < conns.size(); ++i) {
    Connection* c = conns[i];
    absl::StatusOr<RdmaMessage>& reply = replies[i];
    if (reply.ok() && reply->type != RdmaMsgType::kOpenReply) {
      reply = absl::DataLossError("RDMA control: expected an open reply");
    }
    if (!reply.ok()) {
      Break(c, reply.status());
      Release(c);
      if (failure.ok()) failure = reply.status();
      continue;
    }
    if (!reply->status.ok() || reply->segment.id != id ||
        (!keys.empty() &&
         (reply->segment.addr != info.addr || reply->segment.length != info.length))) {
      Release(c);
      if (refusal.ok()) {
        refusal = !reply->status.ok() ? reply->status
                  : reply->segment.id != id
                      ? absl::DataLossError("OpenSegment: reply names another segment")
                      : absl::DataLossError(
                            "OpenSegment: the owner's paths disagree on the "
                            "segment's address or length");
      }
      continue;
    }
    if (keys.empty()) info = reply->segment;
    keys.push_back(PathKey{c, reply->segment.rkey});
  }
  if (!refusal.ok() || keys.empty()) {
    for (const PathKey& k : keys) Release(k.conn);
    Reap();
    if (!refusal.ok()) return refusal;
    return absl::UnavailableError(
        absl::StrCat("OpenSegment ", AbslView(endpoint), ": ", failure.message()));
  }
  Reap();
  const transport::SegmentHandle handle = next_handle_++;
  handles_[handle] = OpenedSegment{info, std::move(keys)};  // keeps the caller's refs
  return transport::RemoteSegment{handle, id, info.length, info.location};
}

template <RdmaVerbs V>
absl::Status RdmaEngine<V>::CloseSegment(transport::SegmentHandle handle) {
  MutexLock lock(&mu_);
  auto it = handles_.find(handle);
  if (it == handles_.end()) {
    return absl::NotFoundError(absl::StrCat("CloseSegment: unknown handle ", handle));
  }
  const std::vector<PathKey> paths = std::move(it->second.paths);
  handles_.erase(it);
  for (const PathKey& k : paths) Release(k.conn);
  Reap();
  return absl::OkStatus();
}

// --- Owner side: the control server --------------------------------------------

inline constexpr size_t kRdmaControlConnsMax = 1024;

template <RdmaVerbs V>
void RdmaEngine<V>::ServeLoop() {
  std::vector<pollfd> fds;
  while (!stopping_.load(std::memory_order_relaxed)) {
    fds.clear();
    fds.push_back({wake_read_.get(), POLLIN, 0});
    fds.push_back({listen_fd_.get(), POLLIN, 0});
    for (auto& s : control_conns_) fds.push_back({s->fd.get(), POLLIN, 0});
    const int n = ::poll(fds.data(), fds.size(), 200);
    if (n <= 0) continue;
    if (fds[0].revents != 0) break;
    // Control connections first: fds[2 + i] matches control_conns_[i] only before accepting.
    for (size_t i = control_conns_.size(); i-- > 0;) {
      if (fds[2 + i].revents == 0) continue;
      if (!HandleMessage(*control_conns_[i]).ok()) {
        DropControlConn(*control_conns_[i]);
        control_conns_.erase(control_conns_.begin() + static_cast<ptrdiff_t>(i));
      }
    }
    if ((fds[1].revents & POLLIN) == 0) continue;
    for (;;) {
      const int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      UniqueFd owned(fd);
      if (control_conns_.size() >= kRdmaControlConnsMax) continue;  // closes it: bounded
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto s = std::make_unique<ControlConn>();
      s->fd = std::move(owned);
      control_conns_.push_back(std::move(s));
    }
  }
}

// The requester's side of the handshake on a fresh control connection
// (nothing without options_.auth). UNAUTHENTICATED when the owner refuses,
// proves wrongly, or does not ask for a token (it answers AUTH_HELLO with
// another error): a requester with a token never uses an unauthenticated owner.
template <RdmaVerbs V>
absl::Status RdmaEngine<V>::AuthenticateControl(int fd, absl::Time deadline) {
  if (options_.auth == nullptr) return absl::OkStatus();
  auth::ClientHandshake hs(*options_.auth, kRdmaAuthProtocol);
  const auto exchange = [&](RdmaMsgType type, std::string blob,
                            RdmaMsgType want) -> absl::StatusOr<std::string> {
    RdmaMessage m;
    m.type = type;
    m.auth = std::move(blob);
    RETURN_IF_ERROR(rdma_ctl::SendRdmaMessage(fd, m, deadline));
    ASSIGN_OR_RETURN(RdmaMessage reply, rdma_ctl::RecvRdmaMessage(fd, deadline));
    if (!reply.status.ok()) {
      if (reply.type == want && absl::IsUnauthenticated(reply.status)) {
        return absl::UnauthenticatedError(
            absl::StrCat("owner refused authentication: ", reply.status.message()));
      }
      if (reply.type == want && absl::IsPermissionDenied(reply.status)) return reply.status;
      return absl::UnauthenticatedError(absl::StrCat(
          "owner does not require authentication (it answered ", reply.status.message(),
          "); refusing it: an RDMA transport with an auth token talks only to owners that "
          "prove they hold the same secret"));
    }
    if (reply.type != want) {
      return absl::DataLossError("RDMA control: unexpected message during authentication");
    }
    return std::move(reply.auth);
  };
  ASSIGN_OR_RETURN(std::string challenge,
                   exchange(RdmaMsgType::kAuthHello, hs.Hello(), RdmaMsgType::kAuthChallenge));
  ASSIGN_OR_RETURN(std::string proof, hs.Proof(challenge));
  ASSIGN_OR_RETURN(std::string server_proof,
                   exchange(RdmaMsgType::kAuthProof, std::move(proof), RdmaMsgType::kAuthOk));
  if (absl::Status v = hs.Verify(server_proof); !v.ok()) {
    return absl::UnauthenticatedError(v.message());
  }
  return absl::OkStatus();
}

// The owner's side of the handshake: `m` is a message of a control
// connection that has not authenticated yet. Answers it; a non-OK return
// closes the connection (after the refusal was sent).
template <RdmaVerbs V>
absl::Status RdmaEngine<V>::HandleHandshake(ControlConn& s, RdmaMessage& m, absl::Time deadline) {
  RdmaMessage reply;
  absl::Status refusal;
  if (m.type == RdmaMsgType::kAuthHello && s.handshake == nullptr) {
    s.handshake = std::make_unique<auth::ServerHandshake>(options_.auth, kRdmaAuthProtocol);
    reply.type = RdmaMsgType::kAuthChallenge;
    absl::StatusOr<std::string> challenge = s.handshake->OnHello(m.auth);
    if (challenge.ok()) {
      reply.auth = *std::move(challenge);
    } else {
      refusal = challenge.status();
    }
  } else if (m.type == RdmaMsgType::kAuthProof && s.handshake != nullptr) {
    reply.type = RdmaMsgType::kAuthOk;
    auth::Principal who;
    absl::StatusOr<std::string> ok = s.handshake->OnProof(m.auth, &who);
    if (!ok.ok()) {
      refusal = ok.status();
    } else if (options_.refuse_tenants && !who.cluster()) {
      refusal = absl::PermissionDeniedError(absl::StrCat(
          "'", who.name,
          "' may not use RDMA here: this owner checks tenants' ranges, which one-sided RDMA "
          "bypasses (read and write over TCP)"));
    } else {
      reply.auth = *std::move(ok);
      s.authenticated = true;
    }
  } else {
    // Anything else first: refused, in the reply type the requester waits for.
    reply.type =
        m.type == RdmaMsgType::kOpenRequest ? RdmaMsgType::kOpenReply : RdmaMsgType::kConnectReply;
    reply.qp = LocalQpInfo(0, 0, 0);  // a well-formed body around the refusal
    refusal = absl::UnauthenticatedError(
        "authentication required: this RDMA transport has an auth token file (give the "
        "requester's RdmaOptions a token from it: RdmaOptions::auth)");
  }
  if (!refusal.ok()) {
    reply.status = refusal;
    reply.auth.clear();
    if (auth_failures_ != nullptr) auth_failures_->Increment();
    (void)rdma_ctl::SendRdmaMessage(s.fd.get(), reply, deadline);
    return refusal;
  }
  return rdma_ctl::SendRdmaMessage(s.fd.get(), reply, deadline);
}

// Serves one control message. A non-OK return closes that control connection.
template <RdmaVerbs V>
absl::Status RdmaEngine<V>::HandleMessage(ControlConn& s) {
  const absl::Time deadline = absl::Now() + options_.io_timeout;
  ASSIGN_OR_RETURN(RdmaMessage m, rdma_ctl::RecvRdmaMessage(s.fd.get(), deadline));
  if (options_.auth != nullptr && !s.authenticated) return HandleHandshake(s, m, deadline);
  RdmaMessage reply;
  if (m.type == RdmaMsgType::kConnectRequest) {
    reply.type = RdmaMsgType::kConnectReply;
    if (s.has_qp) verbs_.DestroyQp(s.qp.handle).IgnoreError();
    s.has_qp = false;
    uint32_t psn;
    {
      MutexLock lock(&mu_);
      psn = NextPsn();
    }
    // Rails pair up: the requester's path i meets this side's path i (mod).
    s.path = m.path % paths_.size();
    const Device& dev = devices_[paths_[s.path].device];
    auto qp = verbs_.CreateQp(dev.pd, dev.passive_cq, QpCaps{1, 1});
    absl::Status up = qp.ok() ? BringUp(s.path, qp->handle, m.qp, psn) : qp.status();
    if (up.ok()) {
      s.qp = *qp;
      s.has_qp = true;
    } else if (qp.ok()) {
      verbs_.DestroyQp(qp->handle).IgnoreError();
    }
    reply.status = up;
    reply.qp = LocalQpInfo(s.path, up.ok() ? qp->qpn : 0, psn);
  } else if (m.type == RdmaMsgType::kOpenRequest) {
    reply.type = RdmaMsgType::kOpenReply;
    reply.segment.id = m.segment.id;
    MutexLock lock(&mu_);
    auto it = segments_.find(m.segment.id);
    if (!s.has_qp) {
      reply.status = absl::FailedPreconditionError("RDMA control: open before connect");
    } else if (it == segments_.end()) {
      reply.status =
          absl::NotFoundError(absl::StrCat("no segment ", m.segment.id, " at ", LocalEndpoint(),
                                           " (never registered or "
                                           "unregistered)"));
    } else {
      const LocalSegment& seg = it->second;
      reply.segment = SegmentInfo{m.segment.id, seg.addr, seg.mrs[paths_[s.path].device].rkey,
                                  seg.length, seg.location};
    }
  } else if (m.type == RdmaMsgType::kAuthHello || m.type == RdmaMsgType::kAuthProof) {
    // A handshake where none is due (this owner has no token file, or it is
    // done): answered so a requester with a token reports it, then closed.
    reply.type =
        m.type == RdmaMsgType::kAuthHello ? RdmaMsgType::kAuthChallenge : RdmaMsgType::kAuthOk;
    reply.status = options_.auth == nullptr
                       ? absl::UnimplementedError(
                             "this RDMA transport does not use authentication (it has no auth "
                             "token file)")
                       : absl::FailedPreconditionError(
                             "authentication message on an authenticated control connection");
    (void)rdma_ctl::SendRdmaMessage(s.fd.get(), reply, deadline);
    return reply.status;
  } else {
    return absl::DataLossError("RDMA control: unexpected message type from a requester");
  }
  return rdma_ctl::SendRdmaMessage(s.fd.get(), reply, deadline);
}

template <RdmaVerbs V>
void RdmaEngine<V>::DropControlConn(ControlConn& s) {
  if (s.has_qp) verbs_.DestroyQp(s.qp.handle).IgnoreError();
  s.has_qp = false;
  s.fd.Reset();
}

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_RDMA_ENGINE_IMPL_H_
