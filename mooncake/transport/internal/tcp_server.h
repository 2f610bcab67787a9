// TcpServer: the owner side of TcpTransport. Serves OPEN, READ and WRITE
// frames (docs/tcp_wire_format.md) on registered segments.
//
// One thread per connection, blocking I/O with a short socket tick so every
// frame has an absolute deadline (io_timeout): a requester that stalls
// mid-frame or stops reading loses its connection, never a thread forever.
// Between requests the thread blocks in a recv into the connection's 16 KiB
// buffer (no poll first), woken by the tick while idle; one recv takes every
// request that has arrived, so a pipelined batch of READs costs one. READ
// data goes out with one sendmsg of {header, segment bytes} pairs (no copy in
// user space), one for every run of buffered READs of a segment (up to 64
// frames, 1 MiB); WRITE data is received straight into the segment (what the
// buffer already holds is copied). Every range
// is checked against the registered length first (owner-side bounds); a bad
// WRITE's payload is drained through a bounded scratch buffer.
//
// Unregistering waits (segment writer lock) for frames in progress on the
// segment, so once Remove returns no connection touches its memory.
//
// Authentication (Auth::creds set; internal/tcp_auth.h): a connection's first
// frames must be the handshake, finished within io_timeout of the accept, or
// the connection gets one ERROR(UNAUTHENTICATED) where the stream allows it
// and is closed; no segment byte moves before. So an unauthenticated peer
// holds a connection slot for io_timeout at most. Without creds an AUTH_*
// frame gets ERROR(UNIMPLEMENTED), which an authenticating requester reports
// as "does not require authentication". A connection's thread shuts its
// socket down when it stops serving, so the peer sees the close at once.
//
// Tenants' access (Auth::access set, with creds): a READ or WRITE of a
// connection whose principal is not "cluster" is served only with a range
// capability (base/capability.h) that covers it, carried after the frame's
// header (aux kAuxCapability), or on a segment Auth::access marks readable
// by everyone; otherwise it gets ERROR(PERMISSION_DENIED) (a WRITE's payload
// drained, no byte written) and the connection stays. A capability is
// verified (an HMAC) once: the server remembers those that verified
// (auth::VerifiedCapabilities), and each connection the last 256 or so.
//
// Thread-safety: Add / Remove / Stop may be called concurrently with serving.
#ifndef MOONCAKE_TRANSPORT_INTERNAL_TCP_SERVER_H_
#define MOONCAKE_TRANSPORT_INTERNAL_TCP_SERVER_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/capability.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/base/tcp_listen.h"
#include "mooncake/transport/internal/batch_table.h"
#include "mooncake/transport/internal/tcp_auth.h"
#include "mooncake/transport/internal/tcp_wire.h"
#include "mooncake/transport/internal/unix_socket.h"
#include "mooncake/transport/transport.h"

namespace mooncake::transport_internal {

// The socket timeout tick: how often blocked I/O wakes to check a deadline.
inline absl::Duration IoTick(absl::Duration io_timeout) {
  return std::min(io_timeout, absl::Milliseconds(50));
}

inline void TuneTcpSocket(int fd, absl::Duration io_timeout) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  SetSocketTimeouts(fd, IoTick(io_timeout));
}

static_assert(kWireCapabilityBytes == auth::kCapabilityBytes &&
                  kWireCapabilityBytes == transport::kCapabilityBytes,
              "one capability size on the wire, in base and in the Transport API");

// What a capability for one of the owner's segments must name
// (TcpAccessControl::target).
struct CapabilityTarget {
  std::string scope;         // CapabilityKey::Issue's scope (the store: the worker id)
  uint64_t segment = 0;      // its segment id (the store: the master's)
  bool public_read = false;  // READs need no capability (a directory every client reads)
};

// Per-range access of tenants (TcpServer's header comment).
struct TcpAccessControl {
  std::shared_ptr<const auth::CapabilityKey> key;  // null: tenants reach every byte (no checks)
  // The target of transport segment `id`; nullopt: tenants may not touch it.
  // Called on connection threads, concurrently.
  std::function<std::optional<CapabilityTarget>(transport::SegmentId id)> target;
  Counter* denials = nullptr;  // frames refused; may be null
};

// A TcpServer's authentication settings (TcpServer::Auth).
struct TcpServerAuth {
  std::shared_ptr<const auth::Credentials> creds;  // null: no authentication
  Counter* failures = nullptr;                     // handshakes refused or timed out; may be null
  TcpAccessControl access;                         // applies only with creds
};

class TcpServer {
 public:
  using Auth = TcpServerAuth;

  TcpServer(absl::Duration io_timeout, size_t max_connections, Auth auth = {})
      : io_timeout_(io_timeout),
        max_connections_(max_connections),
        auth_(std::move(auth)),
        verified_(auth_.access.key != nullptr
                      ? std::make_unique<auth::VerifiedCapabilities>(auth_.access.key)
                      : nullptr) {}
  ~TcpServer() { Stop(); }
  TcpServer(const TcpServer&) = delete;
  TcpServer& operator=(const TcpServer&) = delete;

  absl::Status Listen(const std::string& host, uint16_t port) {
    // Blocking: the acceptor blocks in accept(2) until Stop wakes it.
    ASSIGN_OR_RETURN(TcpListener listener, ListenTcp({host, port}, {.non_blocking = false}));
    listen_ = std::move(listener.fd);
    port_ = listener.port;
    wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC));
    if (!wake_.valid()) return ErrnoToStatus(errno, "eventfd");
    acceptor_ = std::thread([this] { AcceptLoop(); });
    return absl::OkStatus();
  }

  uint16_t port() const { return port_; }

  transport::SegmentId Add(void* addr, uint64_t length, transport::MemoryLocation location) {
    auto seg = std::make_shared<Segment>();
    seg->addr = static_cast<char*>(addr);
    seg->length = length;
    seg->location = location;
    MutexLock lock(&mu_);
    const transport::SegmentId id = next_segment_++;
    segments_.emplace(id, std::move(seg));
    return id;
  }

  absl::Status Remove(transport::SegmentId id) {
    std::shared_ptr<Segment> seg;
    {
      MutexLock lock(&mu_);
      auto it = segments_.find(id);
      if (it == segments_.end()) {
        return absl::NotFoundError(absl::StrCat("segment ", id, " is not registered here"));
      }
      seg = std::move(it->second);
      segments_.erase(it);
    }
    WriterMutexLock drain(&seg->io_mu);  // waits for frames in progress
    return absl::OkStatus();
  }

  // Serves frames on `fd` until the peer closes, errs, stalls mid-frame or
  // Stop; the accept loop runs it per connection, the fuzzer on a socketpair.
  void ServeConnection(int fd) { Serve(fd, nullptr); }

  // The principal each connection being served proved ("" before or
  // without authentication), in accept order (tests, diagnostics).
  std::vector<std::string> Principals() {
    MutexLock lock(&mu_);
    std::vector<std::string> out;
    for (const auto& c : conns_) {
      if (!c->done.load(std::memory_order_acquire)) out.push_back(c->principal);
    }
    return out;
  }

  // READ/WRITE frames refused to tenants (Auth::access).
  uint64_t AccessDenials() const {
    return auth_.access.denials != nullptr ? auth_.access.denials->Value() : 0;
  }

  void Stop() {
    if (!acceptor_.joinable()) return;
    const uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof(one));
    acceptor_.join();
    std::list<std::unique_ptr<Conn>> conns;
    {
      MutexLock lock(&mu_);
      stopping_ = true;
      conns.swap(conns_);
      for (auto& c : conns) ::shutdown(c->fd.get(), SHUT_RDWR);
    }
    for (auto& c : conns) c->thread.join();
  }

 private:
  struct Segment {
    char* addr = nullptr;
    uint64_t length = 0;
    transport::MemoryLocation location;
    SharedMutex io_mu;  // readers: frames in progress; writer: Remove
  };
  struct Conn {
    UniqueFd fd;
    std::thread thread;
    std::atomic<bool> done{false};
    std::string principal;  // guarded by TcpServer::mu_; set once authenticated
  };

  void AcceptLoop() {
    for (;;) {
      pollfd p[2] = {{listen_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) continue;
      if (p[1].revents != 0) return;
      UniqueFd fd(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!fd.valid()) continue;
      TuneTcpSocket(fd.get(), io_timeout_);
      MutexLock lock(&mu_);
      ReapLocked();
      if (stopping_ || conns_.size() >= max_connections_) continue;  // closes fd
      auto conn = std::make_unique<Conn>();
      conn->fd = std::move(fd);
      Conn* c = conn.get();
      conn->thread = std::thread([this, c] {
        Serve(c->fd.get(), c);
        ::shutdown(c->fd.get(), SHUT_RDWR);  // the peer sees the close now, not at the reap
        // release: Reap's acquire load sees a finished thread it may join.
        c->done.store(true, std::memory_order_release);
      });
      conns_.push_back(std::move(conn));
    }
  }

  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = conns_.begin(); it != conns_.end();) {
      if ((*it)->done.load(std::memory_order_acquire)) {
        (*it)->thread.join();
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // What was received from the peer and not consumed yet. One recv takes
  // whatever has arrived, so a requester's pipelined frames (a batch's READs
  // sent in one sendmsg) are read with one system call. 16 KiB: ~340 headers;
  // a WRITE's payload beyond it is received straight into the segment.
  using InBuf = StreamBuffer<16 << 10>;

  // Makes at least `want` (<= kBytes) bytes buffered: false on EOF or a
  // socket error, or once `deadline` passes with fewer (an empty buffer waits
  // without a deadline: an idle connection is fine; the tick wakes the recv,
  // Stop's shutdown ends it).
  static bool Fill(int fd, InBuf& in, size_t want, absl::Time deadline) {
    if (in.size() >= want) return true;
    if (in.begin > 0) {
      std::memmove(in.data.data(), in.data.data() + in.begin, in.size());
      in.end -= in.begin;
      in.begin = 0;
    }
    while (in.size() < want) {
      const ssize_t n = ::recv(fd, in.data.data() + in.end, InBuf::kBytes - in.end, 0);
      if (n > 0) {
        in.end += static_cast<size_t>(n);
        continue;
      }
      if (n == 0) return false;
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
      if (in.size() > 0 && absl::Now() >= deadline) return false;  // stalled mid-header
    }
    return true;
  }

  // A capability this connection had verified for transport segment
  // `segment` (0: empty slot).
  struct Recent {
    uint64_t segment = 0;
    std::array<char, kWireCapabilityBytes> cap;
    auth::CapabilityGrant grant;
  };
  // Four-way sets chosen by a MAC byte: the few dozen capabilities a client
  // reads in turn (direct-mapped, a tenth of 64 collided and evicted each
  // other on every read) stay.
  static constexpr size_t kRecentWays = 4;
  static constexpr size_t kRecentSets = 64;
  struct RecentSet {
    std::array<Recent, kRecentWays> way;
    uint8_t next = 0;  // the way replaced next (round robin)
  };
  // A connection's view of tenants' access: who it is, whether its frames
  // are checked, and the capabilities it had verified lately (no lock, no
  // allocation, no HMAC to find one again: a hit costs a 64-byte compare).
  struct Access {
    bool check = false;  // a non-cluster principal and access control set
    auth::Principal who;
    std::unique_ptr<std::array<RecentSet, kRecentSets>> recent;  // with `check`
  };

  // Serves frames until the peer closes, errs, stalls mid-frame or Stop.
  // `conn` (null for ServeConnection) records the peer's principal.
  void Serve(int fd, Conn* conn) {
    Access access;
    if (auth_.creds != nullptr) {
      if (!Authenticate(fd, conn, &access.who)) return;
      access.check = !access.who.cluster() && auth_.access.key != nullptr;
      if (access.check) access.recent = std::make_unique<std::array<RecentSet, kRecentSets>>();
    }
    InBuf in;
    for (;;) {
      // The first bytes of the next request without a deadline, the rest of
      // its header within io_timeout of them.
      if (in.size() == 0 && !Fill(fd, in, 1, absl::InfiniteFuture())) return;
      if (!Fill(fd, in, kHeaderBytes, Deadline())) return;
      absl::StatusOr<FrameHeader> h = DecodeHeader(in.at());
      in.Take(nullptr, kHeaderBytes);
      if (h.ok() && IsAuthFrame(h->type)) {
        // Drained (<= 256 bytes) so the close that follows is a clean one.
        if (!Drain(fd, in, h->length).ok()) return;
        (void)Reply(fd, h->tag,
                    auth_.creds == nullptr
                        ? absl::UnimplementedError(
                              "this transport does not use authentication (it has no auth token "
                              "file)")
                        : absl::FailedPreconditionError(
                              "authentication frame on an authenticated connection"));
        return;
      }
      if (!h.ok() || !IsRequest(h->type)) {
        (void)Reply(fd, 0,
                    h.ok() ? absl::DataLossError("response frame sent to a server") : h.status());
        return;  // after garbage the stream cannot be resynchronized
      }
      std::array<char, kWireCapabilityBytes> cap;
      const bool has_cap = h->aux == kAuxCapability;
      if (has_cap) {
        // Mostly received with the header already (no clock read then).
        if (in.size() < kWireCapabilityBytes && !Fill(fd, in, kWireCapabilityBytes, Deadline())) {
          return;
        }
        in.Take(cap.data(), cap.size());
      }
      if (!Handle(fd, in, *h, has_cap ? std::string_view(cap.data(), cap.size()) : "", access)
               .ok()) {
        return;
      }
    }
  }

  absl::Time Deadline() const { return absl::Now() + io_timeout_; }

  // The handshake, within io_timeout of now (the accept). A peer that closes
  // is not a failure (a health check's connect and close); one that is
  // refused or stalls is.
  bool Authenticate(int fd, Conn* conn, auth::Principal* out) {
    absl::StatusOr<auth::Principal> who = AuthenticatePeer(fd, auth_.creds, Deadline());
    if (!who.ok()) {
      if (auth_.failures != nullptr && !absl::IsUnavailable(who.status())) {
        auth_.failures->Increment();
      }
      return false;
    }
    if (conn != nullptr) {
      MutexLock lock(&mu_);
      conn->principal = who->name;
    }
    *out = *std::move(who);
    return true;
  }

  // OK when `access`'s connection may do READ/WRITE `h` with `cap` (empty:
  // the frame carried none); PERMISSION_DENIED with the reason otherwise.
  absl::Status Admit(Access& access, const FrameHeader& h, std::string_view cap) {
    if (!access.check) return absl::OkStatus();
    absl::Status s = AdmitChecked(access, h, cap);
    if (!s.ok() && auth_.access.denials != nullptr) auth_.access.denials->Increment();
    return s;
  }
  absl::Status AdmitChecked(Access& access, const FrameHeader& h, std::string_view cap) {
    const uint8_t right = h.type == FrameType::kRead ? auth::kCapRead : auth::kCapWrite;
    const int64_t now = auth::NowUnixMs();
    // Seen on this connection for this segment: verified then (a segment id
    // names one target for as long as it is registered).
    RecentSet* set = nullptr;
    if (cap.size() == kWireCapabilityBytes) {
      set = &(*access.recent)[static_cast<uint8_t>(cap[32]) % kRecentSets];
      for (const Recent& r : set->way) {
        if (r.segment == h.segment &&
            std::memcmp(r.cap.data(), cap.data(), kWireCapabilityBytes) == 0) {
          return auth::CapabilityKey::Covers(r.grant, right, h.offset, h.length, now);
        }
      }
    }
    std::optional<CapabilityTarget> target =
        auth_.access.target ? auth_.access.target(h.segment) : std::optional<CapabilityTarget>();
    if (!target.has_value()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "'", access.who.name, "' may not access segment ", h.segment, " of this owner"));
    }
    if (target->public_read && right == auth::kCapRead) return absl::OkStatus();
    if (cap.empty()) {
      return absl::PermissionDeniedError(
          absl::StrCat("'", access.who.name,
                       "' needs a capability from the master for every read and write here (the "
                       "owner checks tenants' ranges)"));
    }
    RETURN_IF_ERROR(verified_->Check(target->scope, access.who.name, target->segment, cap, right,
                                     h.offset, h.length, now));
    Recent& slot = set->way[set->next];
    set->next = static_cast<uint8_t>((set->next + 1) % kRecentWays);
    ASSIGN_OR_RETURN(slot.grant, auth::DecodeCapabilityGrant(cap));
    std::memcpy(slot.cap.data(), cap.data(), cap.size());
    slot.segment = h.segment;
    return absl::OkStatus();
  }

  std::shared_ptr<Segment> Find(transport::SegmentId id) {
    MutexLock lock(&mu_);
    auto it = segments_.find(id);
    return it == segments_.end() ? nullptr : it->second;
  }

  // Returns a non-OK Status only when the connection must close.
  absl::Status Handle(int fd, InBuf& in, const FrameHeader& h, std::string_view cap,
                      Access& access) {
    if (h.type != FrameType::kOpen) {
      if (absl::Status a = Admit(access, h, cap); !a.ok()) {
        if (h.type == FrameType::kWrite) RETURN_IF_ERROR(Drain(fd, in, h.length));
        return Reply(fd, h.tag, a);
      }
    }
    std::shared_ptr<Segment> seg = Find(h.segment);
    if (seg == nullptr) {
      if (h.type == FrameType::kWrite) RETURN_IF_ERROR(Drain(fd, in, h.length));
      return Reply(fd, h.tag,
                   absl::NotFoundError(
                       absl::StrCat("segment ", h.segment, " is not registered at the owner")));
    }
    ReaderMutexLock io(&seg->io_mu);
    if (h.type == FrameType::kOpen) {
      FrameHeader ok{FrameType::kOpenOk,
                     0,
                     h.tag,
                     h.segment,
                     seg->length,
                     0,
                     static_cast<uint32_t>(seg->location.kind) |
                         (static_cast<uint32_t>(seg->location.device + 1) << 8)};
      const WireHeader out = EncodeHeader(ok);
      iovec iov{const_cast<uint8_t*>(out.data()), out.size()};
      return SendIovBy(fd, &iov, 1, Deadline(), "OPEN_OK");
    }
    const absl::Status range = CheckRange(seg->addr, h.offset, h.length, seg->length);
    if (!range.ok()) {
      if (h.type == FrameType::kWrite) RETURN_IF_ERROR(Drain(fd, in, h.length));
      return Reply(fd, h.tag, range);
    }
    if (h.type == FrameType::kRead) return ServeReads(fd, in, *seg, h, access);
    char* dst = seg->addr + h.offset;
    const size_t buffered = in.Take(dst, h.length);
    RETURN_IF_ERROR(
        RecvAllBy(fd, dst + buffered, h.length - buffered, Deadline(), "WRITE payload"));
    const WireHeader out =
        EncodeHeader({FrameType::kWriteAck, 0, h.tag, h.segment, h.offset, 0, 0});
    iovec iov{const_cast<uint8_t*>(out.data()), out.size()};
    return SendIovBy(fd, &iov, 1, Deadline(), "WRITE_ACK");
  }

  // Answers the READ `first` and every READ of the same segment whose
  // header is already buffered behind it (a batch pipelined by the
  // requester) with one sendmsg of {header, segment bytes} pairs, up to
  // kCoalesceFrames frames and kCoalesceBytes bytes: one system call per
  // batch instead of one per frame, and no wait for a request not yet here.
  // REQUIRES: seg.io_mu held shared; `first` checked against the segment.
  static constexpr size_t kCoalesceFrames = 64;
  static constexpr uint64_t kCoalesceBytes = 1 << 20;
  absl::Status ServeReads(int fd, InBuf& in, Segment& seg, const FrameHeader& first, Access& access)
      ABSL_SHARED_LOCKS_REQUIRED(seg.io_mu) {
    std::array<WireHeader, kCoalesceFrames> heads;
    std::array<iovec, 2 * kCoalesceFrames> iov;
    size_t frames = 0;
    uint64_t bytes = 0;
    FrameHeader h = first;
    for (;;) {
      heads[frames] =
          EncodeHeader({FrameType::kReadData, 0, h.tag, h.segment, h.offset, h.length, 0});
      iov[2 * frames] = {heads[frames].data(), kHeaderBytes};
      iov[2 * frames + 1] = {seg.addr + h.offset, h.length};
      ++frames;
      bytes += h.length;
      if (frames == kCoalesceFrames || bytes >= kCoalesceBytes || in.size() < kHeaderBytes) break;
      absl::StatusOr<FrameHeader> next = DecodeHeader(in.at());
      // Anything else (another segment, a WRITE, a bad range or frame) is
      // served on its own after these are sent.
      if (!next.ok() || next->type != FrameType::kRead || next->segment != first.segment ||
          !CheckRange(seg.addr, next->offset, next->length, seg.length).ok()) {
        break;
      }
      const size_t cap_bytes = next->aux == kAuxCapability ? kWireCapabilityBytes : 0;
      if (in.size() < kHeaderBytes + cap_bytes) break;
      const std::string_view cap(reinterpret_cast<const char*>(in.at()) + kHeaderBytes, cap_bytes);
      // A refused READ is answered on its own (its ERROR after these).
      if (access.check && !AdmitChecked(access, *next, cap).ok()) break;
      in.Take(nullptr, kHeaderBytes + cap_bytes);
      h = *next;
    }
    return SendIovBy(fd, iov.data(), static_cast<int>(2 * frames), Deadline(), "READ_DATA");
  }

  // Discards a rejected frame's `length` payload bytes, buffered ones first.
  absl::Status Drain(int fd, InBuf& in, uint32_t length) {
    length -= static_cast<uint32_t>(in.Take(nullptr, length));
    std::vector<char> scratch(std::min<uint32_t>(length, 64 << 10));
    const absl::Time deadline = Deadline();
    while (length > 0) {
      const uint32_t n = std::min<uint32_t>(length, static_cast<uint32_t>(scratch.size()));
      RETURN_IF_ERROR(RecvAllBy(fd, scratch.data(), n, deadline, "rejected WRITE payload"));
      length -= n;
    }
    return absl::OkStatus();
  }

  absl::Status Reply(int fd, uint64_t tag, const absl::Status& error) {
    MC_DASSERT(!error.ok(), "Reply sends errors only");
    return SendErrorFrame(fd, tag, error, Deadline());
  }

  const absl::Duration io_timeout_;
  const size_t max_connections_;
  const Auth auth_;
  // Capabilities that verified, across connections (auth_.access.key set).
  const std::unique_ptr<auth::VerifiedCapabilities> verified_;
  UniqueFd listen_;
  UniqueFd wake_;
  uint16_t port_ = 0;
  std::thread acceptor_;
  Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  transport::SegmentId next_segment_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<transport::SegmentId, std::shared_ptr<Segment>> segments_
      ABSL_GUARDED_BY(mu_);
  std::list<std::unique_ptr<Conn>> conns_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_TCP_SERVER_H_
