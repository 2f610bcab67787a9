// ShmTransport: same-host transfers between processes through shared memory.
//
// Segments are memfds. The owner allocates memory with SharedMemory::Create
// (memfd_create, sealed against shrinking and growing) and registers it; a
// peer's OpenSegment connects to the owner's Unix-domain socket once, receives
// the memfd with SCM_RIGHTS and maps exactly the segment (one mapping per memfd
// per process, shared by every ShmTransport in it). A transfer is then
// one memcpy in the requester's thread: no CPU and no code on the owner's side.
//
// Owner-side bounds: one memfd is one segment, so the fd a peer receives
// reaches exactly the registered bytes; the shrink seal (checked by the peer)
// keeps the owner from truncating it under a peer's mapping (SIGBUS).
//
// Lifetimes: a peer's mapping keeps the memory alive. If the owner dies,
// existing mappings stay valid and keep working; new opens fail with
// Unavailable (nobody listens). UnregisterMemory stops new opens only: it
// cannot revoke mappings peers already hold (they keep seeing the memory).
//
// Endpoint: "shm://@name" (abstract socket, the default, nothing to clean
// up) or "shm:///path/to.sock".
//
// Authentication (docs/security.md): with Options::auth every open starts
// with base/auth.h's handshake in TcpTransport's AUTH_* frames
// (internal/tcp_auth.h, protocol "shm"). The owner answers an open that skips
// it with UNAUTHENTICATED and hands no fd to a peer that does not prove a
// principal it lists; a requester with a token refuses an owner that does
// not prove the same secret. With Options::refuse_tenants the owner serves
// "cluster" only: a mapping reaches every byte of its segment, so no range
// can be checked, and tenants get PERMISSION_DENIED (a Router then reads and
// writes over its next route, TCP, where ranges are checked).
//
// Thread-safety: every method may be called concurrently.
#ifndef MOONCAKE_TRANSPORT_SHM_TRANSPORT_H_
#define MOONCAKE_TRANSPORT_SHM_TRANSPORT_H_

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/base/value_checksum.h"
#include "mooncake/transport/internal/batch_table.h"
#include "mooncake/transport/internal/tcp_auth.h"
#include "mooncake/transport/internal/unix_socket.h"
#include "mooncake/transport/transport.h"
#include "mooncake/transport/transport_metrics.h"

namespace mooncake::transport {
namespace shm_internal {

// Process-wide map from a SharedMemory's address to its memfd, so that
// RegisterMemory(addr, length, ...) can find the fd to pass.
class MemfdDirectory {
 public:
  static MemfdDirectory& Get() {
    static MemfdDirectory* d = new MemfdDirectory();  // never destroyed
    return *d;
  }
  void Add(void* addr, uint64_t length, int fd) {
    MutexLock lock(&mu_);
    entries_[addr] = {length, fd};
  }
  void Remove(void* addr) {
    MutexLock lock(&mu_);
    entries_.erase(addr);
  }
  // A dup of the memfd whose mapping is exactly [addr, addr + length).
  absl::StatusOr<UniqueFd> Dup(void* addr, uint64_t length) {
    MutexLock lock(&mu_);
    auto it = entries_.find(addr);
    if (it == entries_.end() || it->second.first != length) {
      return absl::FailedPreconditionError(
          "ShmTransport registers only whole SharedMemory regions (SharedMemory::Create); "
          "this address/length is not one");
    }
    const int fd = ::fcntl(it->second.second, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return ErrnoToStatus(errno, "dup memfd");
    return UniqueFd(fd);
  }

 private:
  Mutex mu_;
  absl::flat_hash_map<void*, std::pair<uint64_t, int>> entries_ ABSL_GUARDED_BY(mu_);
};

// Wire messages on the open socket (host byte order: same host only).
inline constexpr uint32_t kOpenMagic = 0x4d435348;  // "HSCM"
struct OpenRequest {
  uint32_t magic = kOpenMagic;
  uint32_t version = 1;
  uint64_t segment_id = 0;
};
struct OpenReply {
  uint32_t magic = kOpenMagic;
  uint32_t code = 0;  // absl::StatusCode
  uint64_t length = 0;
  char message[112] = {};
};

// A peer's mapping of one segment; unmapped when the last user drops it.
struct Mapping {
  void* addr = nullptr;
  uint64_t length = 0;
  ~Mapping() {
    if (addr != nullptr) ::munmap(addr, length);
  }
};

// Process-wide: one mapping per memfd, shared by every ShmTransport in the
// process. Many clients of one process opening the same segment would
// otherwise each map and populate it, serialising on the process's mmap lock
// (eight store clients in one process: a 10x slower SHM read). Keyed by the
// file's (device, inode): a live mapping keeps its memfd alive, so the key of
// a live entry cannot name another file; an expired entry is mapped afresh.
class MappingCache {
 public:
  static MappingCache& Get() {
    static MappingCache* cache = new MappingCache;  // never destroyed: used at exit
    return *cache;
  }

  // The mapping of exactly [0, length) of `fd` (stat'ed as `st`).
  absl::StatusOr<std::shared_ptr<Mapping>> Map(int fd, const struct stat& st, uint64_t length) {
    const Key key{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
    MutexLock lock(&mu_);
    if (auto it = maps_.find(key); it != maps_.end()) {
      std::shared_ptr<Mapping> m = it->second.lock();
      if (m != nullptr && m->length == length) return m;
    }
    void* addr = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (addr == MAP_FAILED) return ErrnoToStatus(errno, "mmap peer segment");
    auto m = std::make_shared<Mapping>();
    m->addr = addr;
    m->length = length;
    absl::erase_if(maps_, [](const auto& e) { return e.second.expired(); });
    maps_[key] = m;
    return m;
  }

  size_t live_mappings() const {
    MutexLock lock(&mu_);
    size_t n = 0;
    for (const auto& [key, weak] : maps_) n += !weak.expired();
    return n;
  }

 private:
  using Key = std::pair<uint64_t, uint64_t>;
  mutable Mutex mu_;
  absl::flat_hash_map<Key, std::weak_ptr<Mapping>> maps_ ABSL_GUARDED_BY(mu_);
};

// Room left in a cgroup from its limit, usage and memory.stat texts (v2:
// memory.max, memory.current; v1: memory.limit_in_bytes, memory.usage_in_bytes):
// the limit less what the cgroup uses beyond page cache it can reclaim
// (memory.stat's `file_field` -- "file" in v2, "cache" in v1 -- less its
// "shmem": tmpfs and memfds, which reclaim cannot drop). nullopt when there is
// no limit or a text is missing.
inline std::optional<uint64_t> CgroupRoom(std::string_view max, std::string_view current,
                                          std::string_view stat,
                                          std::string_view file_field = "file") {
  if (max.empty() || current.empty() || max.starts_with("max")) return std::nullopt;
  const auto number = [](std::string_view text) {
    uint64_t v = 0;
    for (char ch : text) {
      if (ch < '0' || ch > '9') break;
      if (v > (std::numeric_limits<uint64_t>::max() - 9) / 10) return v;  // saturate
      v = v * 10 + static_cast<uint64_t>(ch - '0');
    }
    return v;
  };
  const auto field = [&](std::string_view name) -> uint64_t {
    for (size_t at = stat.find(name); at != std::string_view::npos; at = stat.find(name, at + 1)) {
      const size_t end = at + name.size();
      if ((at == 0 || stat[at - 1] == '\n') && end < stat.size() && stat[end] == ' ') {
        return number(stat.substr(end + 1));
      }
    }
    return 0;
  };
  const uint64_t limit = number(max);
  uint64_t used = number(current);
  const uint64_t file = field(file_field), shmem = field("shmem");
  const uint64_t reclaimable = file > shmem ? file - shmem : 0;
  used = used > reclaimable ? used - reclaimable : 0;
  return limit > used ? limit - used : 0;
}

// Where this process's memory cgroup lives, from /proc/self/cgroup's text: the
// v2 path (the "0::" line, wherever it is: hybrid hosts list v1 hierarchies
// first) and the v1 memory controller's path (a "N:...memory...:" line).
struct CgroupPaths {
  std::optional<std::string> v2;
  std::optional<std::string> v1_memory;
};

inline CgroupPaths ParseProcCgroup(std::string_view text) {
  CgroupPaths out;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    const size_t c1 = line.find(':');
    if (c1 == std::string_view::npos) continue;
    const size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, c1), controllers = line.substr(c1 + 1, c2 - c1 - 1);
    const std::string_view path = line.substr(c2 + 1);
    if (path.empty() || path[0] != '/') continue;
    if (id == "0" && controllers.empty()) {
      out.v2 = std::string(path);
      continue;
    }
    for (std::string_view rest = controllers; !rest.empty();) {
      const size_t comma = rest.find(',');
      if (rest.substr(0, comma) == "memory") out.v1_memory = std::string(path);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  return out;
}

inline std::string ReadSmallFile(const std::string& path) {
  std::string text;
  if (FILE* f = std::fopen(path.c_str(), "re")) {
    char buf[4096];
    size_t n;
    while (text.size() < (1u << 20) && (n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
      text.append(buf, n);
    }
    std::fclose(f);
  }
  return text;
}

// The cgroup directories that limit this process, its own first and then
// each parent up to `root`'s top: a limit set on a parent binds every child.
// Uses v2 when /proc/self/cgroup names a v2 path whose directory has memory
// files, else the v1 memory controller (mounted at root/memory).
struct CgroupLimitFiles {
  std::vector<std::string> dirs;
  // v2's names; v1's are memory.limit_in_bytes, memory.usage_in_bytes, "cache".
  const char* limit = "/memory.max";
  const char* usage = "/memory.current";
  const char* file_field = "file";  // memory.stat's page cache field
};

inline CgroupLimitFiles FindCgroupLimitFiles(std::string_view proc_self_cgroup,
                                             const std::string& root) {
  const CgroupPaths paths = ParseProcCgroup(proc_self_cgroup);
  CgroupLimitFiles out;
  const auto walk = [&](const std::string& base, std::string path) {
    for (;;) {
      while (path.size() > 1 && path.back() == '/') path.pop_back();
      out.dirs.push_back(path == "/" ? base : base + path);
      if (path == "/" || path.empty()) break;
      const size_t slash = path.rfind('/');
      path = slash == 0 ? "/" : path.substr(0, slash);
    }
  };
  if (paths.v2 && ::access((root + *paths.v2 + "/memory.current").c_str(), R_OK) == 0) {
    walk(root, *paths.v2);
  } else if (paths.v1_memory) {
    out.limit = "/memory.limit_in_bytes";
    out.usage = "/memory.usage_in_bytes";
    out.file_field = "cache";
    walk(root + "/memory", *paths.v1_memory);
  } else if (paths.v2) {
    walk(root, *paths.v2);  // the root cgroup has no memory.current; nothing limits it
  }
  return out;
}

// Room left under every cgroup limit that binds this process (the smallest),
// nullopt when none does. `root` is where cgroupfs is mounted.
inline std::optional<uint64_t> CgroupRoomFor(std::string_view proc_self_cgroup,
                                             const std::string& root = "/sys/fs/cgroup") {
  const CgroupLimitFiles files = FindCgroupLimitFiles(proc_self_cgroup, root);
  std::optional<uint64_t> room;
  for (const std::string& dir : files.dirs) {
    const std::optional<uint64_t> r =
        CgroupRoom(ReadSmallFile(dir + files.limit), ReadSmallFile(dir + files.usage),
                   ReadSmallFile(dir + "/memory.stat"), files.file_field);
    if (r) room = room ? std::min(*room, *r) : *r;
  }
  return room;
}

// The smallest memory limit of every cgroup that binds this process (v2
// memory.max or v1 memory.limit_in_bytes), nullopt when none does. v1 writes
// "no limit" as a huge number; callers take the min with physical memory.
inline std::optional<uint64_t> CgroupLimitFor(std::string_view proc_self_cgroup,
                                              const std::string& root = "/sys/fs/cgroup") {
  const CgroupLimitFiles files = FindCgroupLimitFiles(proc_self_cgroup, root);
  std::optional<uint64_t> limit;
  for (const std::string& dir : files.dirs) {
    const std::string text = ReadSmallFile(dir + files.limit);
    if (text.empty() || text[0] < '0' || text[0] > '9') continue;  // "max": no limit
    errno = 0;
    const uint64_t v = std::strtoull(text.c_str(), nullptr, 10);
    if (errno != 0 || v == 0) continue;
    limit = limit ? std::min(*limit, v) : v;
  }
  return limit;
}

// Bytes this process can still allocate: /proc/meminfo's MemAvailable, and
// no more than the room under its cgroups' limits (CgroupRoomFor). 0 when
// unknown.
inline uint64_t AvailableMemoryBytes() {
  uint64_t avail = 0;
  const std::string meminfo = ReadSmallFile("/proc/meminfo");
  if (size_t at = meminfo.find("MemAvailable:"); at != std::string::npos) {
    avail = std::strtoull(meminfo.c_str() + at + 13, nullptr, 10) << 10;  // kB
  }
  if (const std::optional<uint64_t> room = CgroupRoomFor(ReadSmallFile("/proc/self/cgroup"))) {
    avail = avail == 0 ? *room : std::min(avail, *room);
  }
  return avail;
}

// The most memory this process could ever have: the host's physical memory,
// and no more than its cgroups' limits (CgroupLimitFor). 0 when unknown.
inline uint64_t PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  uint64_t total =
      pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
  if (const std::optional<uint64_t> limit = CgroupLimitFor(ReadSmallFile("/proc/self/cgroup"))) {
    total = total == 0 ? *limit : std::min(total, *limit);
  }
  return total;
}

}  // namespace shm_internal

// How SharedMemory gets its pages.
enum class Backing {
  // On first touch: a sparse region costs nothing until written, but each
  // first write of a page faults (allocate, zero, map), and a host that runs
  // out of memory meets the OOM killer mid-serving.
  kLazy,
  // Allocated and mapped by Create (fallocate, then MAP_POPULATE): Create
  // fails with RESOURCE_EXHAUSTED when `length` exceeds what the host (or
  // the process's cgroup) has available, and no later access faults. Costs
  // the zeroing and mapping of `length` bytes up front: about 1 s per GiB on
  // a 2-vCPU VM, where the hypervisor backs each page at first touch.
  kReserved,
};

// Shared memory that ShmTransport can register: a sealed memfd, mapped here.
// Movable owner; unmaps and closes on destruction (peers' mappings survive).
class SharedMemory {
 public:
  static absl::StatusOr<SharedMemory> Create(uint64_t length, Backing backing = Backing::kLazy) {
    if (length == 0) return absl::InvalidArgumentError("SharedMemory of 0 bytes");
    UniqueFd fd(::memfd_create("mooncake-segment", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!fd.valid()) return ErrnoToStatus(errno, "memfd_create");
    if (::ftruncate(fd.get(), static_cast<off_t>(length)) != 0) {
      return ErrnoToStatus(errno, "ftruncate memfd");
    }
    int flags = MAP_SHARED;
    if (backing == Backing::kReserved) {
      // fallocate on a memfd has no size limit of its own: past the host's
      // memory it ends in the OOM killer, not in an error. Refuse first.
      const uint64_t avail = shm_internal::AvailableMemoryBytes();
      if (avail != 0 && length > avail) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "cannot reserve ", length, " bytes of shared memory: ", avail,
            " bytes available (MemAvailable, cgroup memory.max); use a smaller segment or "
            "free memory"));
      }
      // fallocate reports a shortage (ENOSPC / ENOMEM) here; MAP_POPULATE
      // alone would ignore one and leave the SIGBUS for later.
      const int err = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(length));
      if (err != 0) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "cannot reserve ", length, " bytes of shared memory (memfd fallocate: ",
            std::strerror(err), "); free memory, raise the cgroup limit or use a smaller segment"));
      }
      flags |= MAP_POPULATE;
    }
    if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      return ErrnoToStatus(errno, "seal memfd");
    }
    void* addr = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, flags, fd.get(), 0);
    if (addr == MAP_FAILED) return ErrnoToStatus(errno, "mmap memfd");
    shm_internal::MemfdDirectory::Get().Add(addr, length, fd.get());
    return SharedMemory(addr, length, std::move(fd));
  }

  SharedMemory(SharedMemory&& o) noexcept
      : addr_(std::exchange(o.addr_, nullptr)),
        length_(std::exchange(o.length_, 0)),
        fd_(std::move(o.fd_)) {}
  SharedMemory& operator=(SharedMemory&& o) noexcept {
    if (this != &o) {
      Release();
      addr_ = std::exchange(o.addr_, nullptr);
      length_ = std::exchange(o.length_, 0);
      fd_ = std::move(o.fd_);
    }
    return *this;
  }
  ~SharedMemory() { Release(); }

  void* data() const { return addr_; }
  uint64_t size() const { return length_; }

 private:
  SharedMemory(void* addr, uint64_t length, UniqueFd fd)
      : addr_(addr), length_(length), fd_(std::move(fd)) {}
  void Release() {
    if (addr_ == nullptr) return;
    shm_internal::MemfdDirectory::Get().Remove(addr_);
    ::munmap(addr_, length_);
    addr_ = nullptr;
  }

  void* addr_ = nullptr;
  uint64_t length_ = 0;
  UniqueFd fd_;
};

class ShmTransport {
 public:
  struct Options {
    std::string socket_name;                       // "" = "@mooncake-shm.<pid>.<n>"
    absl::Duration io_timeout = absl::Seconds(5);  // bounds every open exchange
    size_t max_batches = 1024;
    MetricsRegistry* metrics = nullptr;  // null: a private registry
    // Proves auth->self() on every open and serves only peers that prove a
    // principal it lists (see the top of this file); null: no authentication.
    std::shared_ptr<const auth::Credentials> auth;
    // With `auth`: only "cluster" may map a segment; tenants are refused
    // (PERMISSION_DENIED). For owners that check tenants' ranges elsewhere.
    bool refuse_tenants = false;
  };

  // Listens at once; a failure to listen aborts (use Create for a Status).
  ShmTransport() : ShmTransport(Options{}) {}
  explicit ShmTransport(Options options) : ShmTransport(std::move(options), 0) {
    const absl::Status s = Listen();
    MC_ASSERT(s.ok(), "ShmTransport could not listen on its unix socket");
  }
  static absl::StatusOr<std::unique_ptr<ShmTransport>> Create(Options options) {
    std::unique_ptr<ShmTransport> t(new ShmTransport(std::move(options), 0));
    RETURN_IF_ERROR(t->Listen());
    return t;
  }
  ~ShmTransport() {
    const uint64_t one = 1;
    if (wake_.valid()) (void)!::write(wake_.get(), &one, sizeof(one));
    if (server_.joinable()) server_.join();
  }
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  std::string_view Name() const { return "shm"; }
  std::string LocalEndpoint() const { return absl::StrCat("shm://", options_.socket_name); }
  TransportMetrics& metrics() { return metrics_; }

  absl::StatusOr<SegmentDesc> RegisterMemory(void* addr, uint64_t length, MemoryLocation location) {
    if (addr == nullptr || length == 0) {
      return absl::InvalidArgumentError("RegisterMemory needs a non-null address and length > 0");
    }
    if (location.kind == MemoryKind::kGpu) {
      return absl::FailedPreconditionError(
          "ShmTransport cannot share GPU memory; use CudaTransport");
    }
    ASSIGN_OR_RETURN(UniqueFd fd, shm_internal::MemfdDirectory::Get().Dup(addr, length));
    MutexLock lock(&mu_);
    const SegmentId id = next_segment_++;
    owned_.emplace(id, Owned{std::move(fd), length});
    return SegmentDesc{id, length, MemoryLocation::SharedMemory()};
  }

  absl::Status UnregisterMemory(SegmentId id) {
    MutexLock lock(&mu_);
    if (owned_.erase(id) == 0) {
      return absl::NotFoundError(absl::StrCat("segment ", id, " is not registered here"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<RemoteSegment> OpenSegment(std::string_view endpoint, SegmentId id) {
    if (!endpoint.starts_with("shm://")) {
      return absl::InvalidArgumentError(absl::StrCat("bad shm endpoint \"", AbslView(endpoint),
                                                     "\"; expected shm://@name or shm:///path"));
    }
    ASSIGN_OR_RETURN(auto addr, transport_internal::UnixAddress(endpoint.substr(6)));
    UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!sock.valid()) return ErrnoToStatus(errno, "socket");
    transport_internal::SetSocketTimeouts(sock.get(), options_.io_timeout);
    if (::connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr.first), addr.second) != 0) {
      // A socket path that is gone means the owner is: Unavailable, as the
      // transport contract says for an unreachable peer (not NotFound).
      const absl::Status s = ErrnoToStatus(
          errno, absl::StrCat("connect to ", AbslView(endpoint), " (is the owner alive?)"));
      return absl::IsNotFound(s) ? absl::UnavailableError(s.message()) : s;
    }
    RETURN_IF_ERROR(transport_internal::AuthenticateToOwner(
        sock.get(), options_.auth.get(), absl::Now() + options_.io_timeout, endpoint,
        transport_internal::kShmAuthProtocol));
    shm_internal::OpenRequest req;
    req.segment_id = id;
    RETURN_IF_ERROR(transport_internal::SendAll(sock.get(), &req, sizeof(req), "shm open"));
    shm_internal::OpenReply reply;
    ASSIGN_OR_RETURN(UniqueFd fd,
                     transport_internal::RecvWithFd(sock.get(), &reply, sizeof(reply)));
    absl::StatusOr<std::shared_ptr<shm_internal::Mapping>> mapping = MapReply(reply, std::move(fd));
    if (absl::IsUnauthenticated(mapping.status()) || absl::IsPermissionDenied(mapping.status())) {
      return absl::Status(mapping.status().code(),
                          absl::StrCat("owner ", AbslView(endpoint), " refused segment ", id, ": ",
                                       mapping.status().message()));
    }
    if (!mapping.ok()) return mapping.status();
    RemoteSegment remote{0, id, (*mapping)->length, MemoryLocation::SharedMemory()};
    MutexLock lock(&mu_);
    remote.handle = next_handle_++;
    handles_.emplace(remote.handle, *std::move(mapping));
    return remote;
  }

  absl::Status CloseSegment(SegmentHandle handle) {
    MutexLock lock(&mu_);  // batches in flight hold their own reference
    if (handles_.erase(handle) == 0) {
      return absl::NotFoundError(absl::StrCat("segment handle ", handle, " is not open"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<BatchId> Submit(std::span<const TransferRequest> requests) {
    ASSIGN_OR_RETURN(auto batch, batches_.Create(requests));
    for (size_t i = 0; i < requests.size(); ++i) {
      batches_.Settle(*batch, i, Copy(requests[i]));
    }
    return batch->id();
  }

  absl::StatusOr<BatchProgress> Poll(BatchId batch) const { return batches_.Poll(batch); }
  absl::StatusOr<BatchResult> Wait(BatchId batch, absl::Time deadline) {
    return batches_.Wait(batch, deadline);
  }
  absl::StatusOr<BatchResult> Cancel(BatchId batch) {
    return batches_.Cancel(batch, absl::Now() + options_.io_timeout);
  }

 private:
  struct Owned {
    UniqueFd fd;
    uint64_t length = 0;
  };

  ShmTransport(Options options, int /*tag*/)
      : options_(std::move(options)),
        metrics_(options_.metrics, "shm"),
        batches_(options_.max_batches, &metrics_),
        auth_failures_(options_.auth != nullptr ? AuthFailuresCounter(metrics_.registry(), "shm")
                                                : nullptr) {
    static std::atomic<uint64_t> counter{0};
    if (options_.socket_name.empty()) {
      // relaxed: only uniqueness matters.
      options_.socket_name = absl::StrCat("@mooncake-shm.", ::getpid(), ".",
                                          counter.fetch_add(1, std::memory_order_relaxed));
    }
  }

  absl::Status Listen() {
    ASSIGN_OR_RETURN(auto addr, transport_internal::UnixAddress(options_.socket_name));
    listen_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!listen_.valid()) return ErrnoToStatus(errno, "socket");
    if (::bind(listen_.get(), reinterpret_cast<const sockaddr*>(&addr.first), addr.second) != 0) {
      return ErrnoToStatus(errno, absl::StrCat("bind ", options_.socket_name, " (name in use?)"));
    }
    if (::listen(listen_.get(), 64) != 0) return ErrnoToStatus(errno, "listen");
    wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC));
    if (!wake_.valid()) return ErrnoToStatus(errno, "eventfd");
    server_ = std::thread([this] { Serve(); });
    return absl::OkStatus();
  }

  // Answers opens one at a time; each exchange is bounded by io_timeout, so a
  // stalled peer delays others by at most that.
  void Serve() {
    for (;;) {
      pollfd p[2] = {{listen_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) continue;
      if (p[1].revents != 0) return;
      UniqueFd conn(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!conn.valid()) continue;
      transport_internal::SetSocketTimeouts(conn.get(), options_.io_timeout);
      ServeOpen(conn.get());
    }
  }

  // One open: the handshake where the owner has a token file, then the
  // request and its answer.
  void ServeOpen(int conn) {
    const absl::Time deadline = absl::Now() + options_.io_timeout;
    // An open request starts with kOpenMagic; a handshake with a frame
    // header (tcp_wire.h), whose first bytes never equal it.
    uint32_t first = 0;
    if (::recv(conn, &first, sizeof(first), MSG_PEEK | MSG_WAITALL) !=
        static_cast<ssize_t>(sizeof(first))) {
      return;  // closed or stalled before saying anything
    }
    const bool is_open = first == shm_internal::kOpenMagic;
    absl::Status refusal;
    if (options_.auth == nullptr) {
      if (!is_open) {
        // A requester with a token: tell it we do not authenticate (it
        // refuses us, as TcpTransport's requesters refuse such owners).
        absl::StatusOr<transport_internal::SmallFrame> f =
            transport_internal::RecvSmallFrame(conn, deadline, "AUTH_HELLO");
        if (f.ok()) {
          (void)transport_internal::SendErrorFrame(
              conn, f->h.tag,
              absl::UnimplementedError(
                  "this shared-memory owner does not use authentication (it has no auth token "
                  "file)"),
              deadline);
        }
        return;
      }
    } else if (is_open) {
      // (OpenReply::message holds 111 characters.)
      refusal = absl::UnauthenticatedError(
          "authentication required: the owner has an auth token file (Options::auth, "
          "MOONCAKE_AUTH_TOKEN_FILE)");
    } else {
      absl::StatusOr<auth::Principal> who = transport_internal::AuthenticatePeer(
          conn, options_.auth, deadline, transport_internal::kShmAuthProtocol);
      if (!who.ok()) {
        if (!absl::IsUnavailable(who.status())) auth_failures_->Increment();
        return;
      }
      if (options_.refuse_tenants && !who->cluster()) {
        refusal = absl::PermissionDeniedError(
            "tenants may not map this owner's memory: it checks their byte ranges (over TCP)");
      }
    }
    shm_internal::OpenRequest req;
    if (!transport_internal::RecvAll(conn, &req, sizeof(req), "shm open").ok()) return;
    if (!refusal.ok()) {
      if (absl::IsUnauthenticated(refusal)) auth_failures_->Increment();
      SendReply(conn, refusal, 0, -1);
      return;
    }
    AnswerOpen(conn, req);
  }

  static void SendReply(int conn, const absl::Status& status, uint64_t length, int fd) {
    shm_internal::OpenReply reply;
    reply.code = static_cast<uint32_t>(status.code());
    reply.length = length;
    std::snprintf(reply.message, sizeof(reply.message), "%s",
                  std::string(status.message()).c_str());
    (void)transport_internal::SendWithFd(conn, &reply, sizeof(reply), fd);
  }

  void AnswerOpen(int conn, const shm_internal::OpenRequest& req) {
    absl::Status status;
    uint64_t length = 0;
    int fd = -1;
    MutexLock lock(&mu_);  // the fd stays open while we send it
    if (req.magic != shm_internal::kOpenMagic || req.version != 1) {
      status = absl::InvalidArgumentError("bad shm open request (magic/version)");
    } else if (auto it = owned_.find(req.segment_id); it == owned_.end()) {
      status = absl::NotFoundError(absl::StrCat("segment ", req.segment_id, " is not registered"));
    } else {
      fd = it->second.fd.get();
      length = it->second.length;
    }
    SendReply(conn, status, length, fd);
  }

  static absl::StatusOr<std::shared_ptr<shm_internal::Mapping>> MapReply(
      const shm_internal::OpenReply& reply, UniqueFd fd) {
    if (reply.magic != shm_internal::kOpenMagic) {
      return absl::DataLossError("bad shm open reply (magic)");
    }
    if (reply.code != 0) {
      const std::string msg(reply.message, strnlen(reply.message, sizeof(reply.message)));
      return absl::Status(static_cast<absl::StatusCode>(reply.code <= 16 ? reply.code : 2), msg);
    }
    if (!fd.valid()) return absl::DataLossError("shm open reply carried no fd");
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return ErrnoToStatus(errno, "fstat");
    const int seals = ::fcntl(fd.get(), F_GET_SEALS);
    if (seals < 0 || (seals & F_SEAL_SHRINK) == 0 || reply.length == 0 ||
        static_cast<uint64_t>(st.st_size) < reply.length) {
      return absl::DataLossError(
          "the owner's memfd is not sealed against shrinking or is shorter than advertised");
    }
    return shm_internal::MappingCache::Get().Map(fd.get(), st, reply.length);
  }

  absl::Status Copy(const TransferRequest& r) {
    std::shared_ptr<shm_internal::Mapping> m;
    {
      MutexLock lock(&mu_);
      auto it = handles_.find(r.segment);
      if (it == handles_.end()) {
        return absl::NotFoundError(absl::StrCat("segment handle ", r.segment, " is not open"));
      }
      m = it->second;
    }
    RETURN_IF_ERROR(
        transport_internal::CheckRange(r.local_addr, r.remote_offset, r.length, m->length));
    char* remote = static_cast<char*>(m->addr) + r.remote_offset;
    if (r.op == OpCode::kRead) {
      CopyAndDigest(r.local_addr, remote, r.length, r.chunk_digests);
    } else {
      std::memcpy(remote, r.local_addr, r.length);
    }
    return absl::OkStatus();
  }

  Options options_;
  TransportMetrics metrics_;
  transport_internal::BatchTable batches_;
  Counter* const auth_failures_;  // in metrics_'s registry; null without options_.auth
  UniqueFd listen_;
  UniqueFd wake_;
  std::thread server_;
  Mutex mu_;
  SegmentId next_segment_ ABSL_GUARDED_BY(mu_) = 1;
  SegmentHandle next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<SegmentId, Owned> owned_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<SegmentHandle, std::shared_ptr<shm_internal::Mapping>> handles_
      ABSL_GUARDED_BY(mu_);
};

static_assert(Transport<ShmTransport>);

}  // namespace mooncake::transport

#endif  // MOONCAKE_TRANSPORT_SHM_TRANSPORT_H_
