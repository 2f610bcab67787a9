// ShmArbiter: per-link byte budgets by priority class, shared by every
// process on the host that sends over the link.
//
//   auto arb = ShmArbiter::Open("eth0", /*capacity_bytes_per_s=*/125'000'000);
//   // decode engine, latency-critical read of 64 KiB:
//   auto g = (*arb)->Acquire(/*cls=*/0, 64 << 10, absl::Now() + absl::Milliseconds(5));
//   ... issue the read; the grant releases when `g` goes out of scope ...
//   // prefill engine, bulk write cut into 256 KiB grants:
//   auto b = (*arb)->Acquire(/*cls=*/1, 256 << 10, absl::InfiniteFuture());
//
// Why shared memory. The prefill engine's bulk KV writes and the decode
// engine's latency-critical reads come from different processes, so an
// in-process scheduler (qos/strict_priority_scheduler.h) cannot order them.
// The segment is a POSIX shm_open object, /dev/shm/mooncake_qos.<link_name>:
// processes started independently find it by the link's name, which a memfd
// (reachable only by inheriting or passing its fd) would not allow. It
// outlives its users (a restarted engine finds the link's state); Remove()
// deletes it. Participants must share /dev/shm and a pid namespace.
//
// Policy. Class 0 is latency-critical, class N-1 bulk.
//  - Class 0 is never delayed: Acquire grants it at once. Its bytes count as
//    in flight and are debited from the link's bucket (it may go into debt,
//    at most `debt_max_bytes`), so bulk refills at capacity minus the recent
//    critical rate.
//  - Class c >= 1 is granted only when (a) no process waits for a class
//    below c and at most `allowance_bytes` of classes below c are in flight
//    (bulk yields entirely while critical bytes are on the wire), and (b) the
//    bucket, refilled at `capacity_bytes_per_s` up to `burst_bytes`, holds
//    the request. So bulk runs at the link's rate, never faster (no standing
//    queue at the bottleneck for critical traffic to wait behind), and stops
//    while critical traffic is in flight. Optionally (c) classes >= 1
//    together keep at most `bulk_inflight_max_bytes` in flight, which bounds
//    the queue even when the link delivers less than `capacity_bytes_per_s`. Same-class waiters
//    race for tokens (no starvation, not FIFO); lower classes yield to announced waiters of higher
//    ones.
//  - A request above `burst_bytes` could never be covered and is refused
//    with INVALID_ARGUMENT; callers cut bulk transfers into grants of a few
//    hundred KiB, which also bounds how long a critical request waits behind
//    bulk bytes already granted.
//
// Crash reclamation. Each ShmArbiter object registers a slot holding its
// pid, its process start time (/proc/<pid>/stat field 22) and a heartbeat,
// and accounts its in-flight and waiting bytes there. A waiter that is
// blocked sweeps the slots at most every `sweep_interval` (link-wide, one
// sweeper at a time): a slot whose heartbeat is older than `stale_after` and
// whose owner is gone (kill(pid, 0) says ESRCH, the pid now belongs to a
// process with another start time, or it is a zombie) has its counters
// zeroed and is freed. A dead holder's budget is therefore back within
// stale_after + sweep_interval (+ the scan) of its death, as soon as anyone
// waits for it. We chose liveness checks over robust futexes/mutexes because
// budget is held across a whole transfer, not under a lock: there is no
// lock whose owner-died notice would fire. Open() also sweeps, so slots of
// dead processes do not accumulate. Tokens a dead process consumed are not
// refunded (its bytes may already be on the wire).
//
// Waiting uses a futex on a word in the segment (shared, not private):
// releases that may unblock someone bump it and wake sleepers; a waiter for
// tokens sleeps until they are due. The arbiter paces who may send; it does
// not measure the link, so `capacity_bytes_per_s` should be the rate the link
// really sustains.
//
// Thread-safety: every method may be called concurrently, from any number of
// threads and processes. An object must not be used across fork(): the
// child opens its own. Grants must not outlive their ShmArbiter.
// Complexity: Acquire/TryAcquire/Release are O(slots x classes) loads and a
// few compare-and-swaps; no locks, no system calls unless waiting.
#ifndef MOONCAKE_QOS_SHM_ARBITER_H_
#define MOONCAKE_QOS_SHM_ARBITER_H_

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"
#include "mooncake/qos/internal/shm_arbiter_segment.h"

namespace mooncake::qos {

struct ShmArbiterOptions {
  size_t priority_classes = 2;  // in [1, kMaxClasses]; class 0 most urgent
  // Bucket depth; 0: max(256 KiB, 2 ms of capacity). Largest grant allowed.
  uint64_t burst_bytes = 0;
  // Bytes of higher classes in flight that a lower class still ignores.
  uint64_t allowance_bytes = 0;
  // Bound on bytes of classes >= 1 in flight on the link, all processes
  // together (0: unbounded). Bytes granted but not yet delivered queue at
  // the bottleneck, so this bounds what a critical request can find ahead
  // of it: bulk_inflight_max_bytes / capacity.
  uint64_t bulk_inflight_max_bytes = 0;
  // Debt class 0 may leave in the bucket; 0: burst_bytes.
  uint64_t debt_max_bytes = 0;
  absl::Duration stale_after = absl::Milliseconds(20);
  absl::Duration sweep_interval = absl::Milliseconds(10);
  mode_t mode = 0600;  // permissions of a newly created segment
};

struct ShmArbiterClassStats {
  uint64_t granted_requests = 0;  // link-wide, since the segment was created
  uint64_t granted_bytes = 0;
  uint64_t timeouts = 0;
  uint64_t wait_ns = 0;        // total time granted requests waited
  int64_t inflight_bytes = 0;  // link-wide, now
  int64_t waiting_bytes = 0;   // link-wide, now
};

struct ShmArbiterStats {
  uint64_t capacity_bytes_per_s = 0;
  int64_t tokens = 0;
  size_t participants = 0;  // slots in use
  uint64_t reclaimed_slots = 0;
  uint64_t reclaimed_bytes = 0;
  std::vector<ShmArbiterClassStats> classes;
};

class ShmArbiter {
 public:
  using Options = ShmArbiterOptions;
  static constexpr size_t kMaxClasses = qos_internal::kArbiterMaxClasses;
  static constexpr size_t kMaxParticipants = qos_internal::kArbiterMaxSlots;
  static constexpr size_t kMaxLinkNameBytes = 200;
  static constexpr uint64_t kMaxCapacityBytesPerSec = uint64_t{1} << 50;  // 1 PB/s

  // Budget held for one request; releasing it reports completion.
  class Grant {
   public:
    Grant() = default;
    Grant(Grant&& o) noexcept
        : arbiter_(std::exchange(o.arbiter_, nullptr)), cls_(o.cls_), bytes_(o.bytes_) {}
    Grant& operator=(Grant&& o) noexcept {
      if (this != &o) {
        Release();
        arbiter_ = std::exchange(o.arbiter_, nullptr);
        cls_ = o.cls_;
        bytes_ = o.bytes_;
      }
      return *this;
    }
    Grant(const Grant&) = delete;
    Grant& operator=(const Grant&) = delete;
    ~Grant() { Release(); }

    // Returns the bytes to the link (the transfer finished or was dropped).
    void Release() {
      if (arbiter_ != nullptr) std::exchange(arbiter_, nullptr)->ReleaseBytes(cls_, bytes_);
    }
    bool held() const { return arbiter_ != nullptr; }
    size_t cls() const { return cls_; }
    uint64_t bytes() const { return bytes_; }

   private:
    friend class ShmArbiter;
    Grant(ShmArbiter* a, size_t cls, uint64_t bytes) : arbiter_(a), cls_(cls), bytes_(bytes) {}
    ShmArbiter* arbiter_ = nullptr;
    size_t cls_ = 0;
    uint64_t bytes_ = 0;
  };

  // Opens the link's segment, creating it if needed, and registers this
  // object as a participant. A link created by another process must have
  // the same class count and capacity (FAILED_PRECONDITION otherwise: call
  // SetCapacity, or Remove the link when nobody uses it).
  static absl::StatusOr<std::unique_ptr<ShmArbiter>> Open(std::string_view link_name,
                                                          uint64_t capacity_bytes_per_s,
                                                          const Options& options = Options{}) {
    if (absl::Status s = ValidateLinkName(link_name); !s.ok()) return s;
    if (capacity_bytes_per_s == 0 || capacity_bytes_per_s > kMaxCapacityBytesPerSec) {
      return absl::InvalidArgumentError(
          absl::StrCat("link '", AbslView(link_name), "': capacity ", capacity_bytes_per_s,
                       " bytes/s; it must be in [1, ", kMaxCapacityBytesPerSec, "]"));
    }
    if (options.priority_classes < 1 || options.priority_classes > kMaxClasses) {
      return absl::InvalidArgumentError(absl::StrCat("priority_classes ", options.priority_classes,
                                                     " must be in [1, ", kMaxClasses, "]"));
    }
    if (options.stale_after <= absl::ZeroDuration() ||
        options.sweep_interval <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("stale_after and sweep_interval must be positive");
    }
    const std::string path = ShmName(link_name);
    std::unique_ptr<ShmArbiter> arb(new ShmArbiter(std::string(link_name), options));
    absl::Status s = arb->MapSegment(path, capacity_bytes_per_s);
    if (!s.ok()) return s;
    s = arb->ClaimSlot();
    if (!s.ok()) return s;
    return arb;
  }

  // Deletes the link's segment name; processes that have it mapped keep
  // using their mapping. NOT_FOUND if there is none.
  static absl::Status Remove(std::string_view link_name) {
    if (absl::Status s = ValidateLinkName(link_name); !s.ok()) return s;
    const std::string path = ShmName(link_name);
    if (::shm_unlink(path.c_str()) != 0) {
      return ErrnoToStatus(errno, absl::StrCat("shm_unlink /dev/shm", path));
    }
    return absl::OkStatus();
  }

  // "/mooncake_qos.<link_name>" (under /dev/shm).
  static std::string ShmName(std::string_view link_name) {
    return absl::StrCat("/mooncake_qos.", AbslView(link_name));
  }

  ShmArbiter(const ShmArbiter&) = delete;
  ShmArbiter& operator=(const ShmArbiter&) = delete;

  ~ShmArbiter() {
    if (seg_ != nullptr) {
      if (slot_ != nullptr) FreeOwnSlot();
      ::munmap(seg_, sizeof(qos_internal::ArbiterSegment));
    }
  }

  // Waits until `bytes` of class `cls` may be sent, or `deadline` passes
  // (DEADLINE_EXCEEDED). INVALID_ARGUMENT for a class out of range, 0 bytes,
  // or more than burst_bytes (split the request).
  absl::StatusOr<Grant> Acquire(size_t cls, uint64_t bytes, absl::Time deadline) {
    if (absl::Status s = CheckRequest(cls, bytes); !s.ok()) return s;
    const int64_t start_ns = qos_internal::MonotonicNowNs();
    Heartbeat(start_ns);
    if (cls == 0 || TryAdmit(cls, bytes, start_ns, /*newcomer=*/true) == Blocked::kNo) {
      return Granted(cls, bytes, 0);
    }
    const int64_t deadline_ns = ToMonotonicDeadline(deadline, start_ns);
    // relaxed: the announcement only steers lower classes' decisions; no data
    // is published through it.
    slot_->waiting_bytes[cls].fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
    for (;;) {
      // acquire: pairs with the release bump in Wake(), so a release that
      // happened before this load is seen by TryAdmit below.
      const uint32_t seq = seg_->wake_seq.load(std::memory_order_acquire);
      const int64_t now = qos_internal::MonotonicNowNs();
      const Blocked why = TryAdmit(cls, bytes, now, /*newcomer=*/false);
      if (why == Blocked::kNo) {
        // Announce the grant before withdrawing the demand, so lower classes
        // never see neither.
        Grant g = Granted(cls, bytes, static_cast<uint64_t>(now - start_ns));
        slot_->waiting_bytes[cls].fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
        return g;
      }
      if (now >= deadline_ns) {
        slot_->waiting_bytes[cls].fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
        seg_->counters[cls].timeouts.fetch_add(1, std::memory_order_relaxed);
        Wake();  // lower classes no longer yield to this demand
        return absl::DeadlineExceededError(
            absl::StrCat("link '", link_, "': no budget for ", bytes, " bytes of class ", cls,
                         " before the deadline (", Describe(why), ")"));
      }
      if (why == Blocked::kPriority || why == Blocked::kWindow) MaybeSweep(now);
      int64_t sleep_ns = sweep_interval_ns_;
      if (why == Blocked::kTokens || why == Blocked::kQueued) {
        sleep_ns = std::min(sleep_ns, TokenWaitNs(bytes));
      }
      SleepUntilWoken(seq, std::min(sleep_ns, deadline_ns - now));
      Heartbeat(qos_internal::MonotonicNowNs());
    }
  }

  // Acquire without waiting: RESOURCE_EXHAUSTED when it would have to wait.
  absl::StatusOr<Grant> TryAcquire(size_t cls, uint64_t bytes) {
    if (absl::Status s = CheckRequest(cls, bytes); !s.ok()) return s;
    const int64_t now = qos_internal::MonotonicNowNs();
    Heartbeat(now);
    const Blocked why = cls == 0 ? Blocked::kNo : TryAdmit(cls, bytes, now, /*newcomer=*/true);
    if (why == Blocked::kNo) return Granted(cls, bytes, 0);
    if (why == Blocked::kPriority || why == Blocked::kWindow) MaybeSweep(now);
    return absl::ResourceExhaustedError(absl::StrCat("link '", link_, "': no budget for ", bytes,
                                                     " bytes of class ", cls, " now (",
                                                     Describe(why), ")"));
  }

  // Changes the link's capacity for every participant.
  absl::Status SetCapacity(uint64_t capacity_bytes_per_s) {
    if (capacity_bytes_per_s == 0 || capacity_bytes_per_s > kMaxCapacityBytesPerSec) {
      return absl::InvalidArgumentError(absl::StrCat("capacity ", capacity_bytes_per_s,
                                                     " bytes/s must be in [1, ",
                                                     kMaxCapacityBytesPerSec, "]"));
    }
    // relaxed: refills read whichever value is current; nothing else depends
    // on the order.
    seg_->capacity_bytes_per_s.store(capacity_bytes_per_s, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  // Reclaims the slots of dead participants now; returns how many.
  size_t Sweep() { return SweepSlots(qos_internal::MonotonicNowNs(), /*all=*/true); }

  ShmArbiterStats Stats() const {
    ShmArbiterStats st;
    // relaxed everywhere: a statistics snapshot, not a consistent cut.
    st.capacity_bytes_per_s = seg_->capacity_bytes_per_s.load(std::memory_order_relaxed);
    st.tokens = seg_->tokens.load(std::memory_order_relaxed);
    st.reclaimed_slots = seg_->reclaimed_slots.load(std::memory_order_relaxed);
    st.reclaimed_bytes = seg_->reclaimed_bytes.load(std::memory_order_relaxed);
    st.classes.resize(classes_);
    for (size_t c = 0; c < classes_; ++c) {
      const auto& k = seg_->counters[c];
      st.classes[c].granted_requests = k.granted_requests.load(std::memory_order_relaxed);
      st.classes[c].granted_bytes = k.granted_bytes.load(std::memory_order_relaxed);
      st.classes[c].timeouts = k.timeouts.load(std::memory_order_relaxed);
      st.classes[c].wait_ns = k.wait_ns.load(std::memory_order_relaxed);
    }
    for (const auto& slot : seg_->slots) {
      if (slot.owner.load(std::memory_order_relaxed) == 0) continue;
      ++st.participants;
      for (size_t c = 0; c < classes_; ++c) {
        st.classes[c].inflight_bytes += slot.inflight_bytes[c].load(std::memory_order_relaxed);
        st.classes[c].waiting_bytes += slot.waiting_bytes[c].load(std::memory_order_relaxed);
      }
    }
    return st;
  }

  size_t priority_classes() const { return classes_; }
  uint64_t burst_bytes() const { return burst_bytes_; }
  // The largest grant of class `cls` (burst_bytes, and for classes >= 1 at
  // most bulk_inflight_max_bytes when that is set).
  uint64_t max_grant_bytes(size_t cls) const {
    if (cls >= 1 && bulk_inflight_max_bytes_ > 0) {
      return std::min(burst_bytes_, static_cast<uint64_t>(bulk_inflight_max_bytes_));
    }
    return burst_bytes_;
  }
  const std::string& link_name() const { return link_; }

 private:
  enum class Blocked { kNo, kPriority, kQueued, kWindow, kTokens };

  ShmArbiter(std::string link, const Options& o)
      : link_(std::move(link)),
        options_(o),
        classes_(o.priority_classes),
        stale_after_ns_(absl::ToInt64Nanoseconds(o.stale_after)),
        sweep_interval_ns_(absl::ToInt64Nanoseconds(o.sweep_interval)) {}

  static absl::Status ValidateLinkName(std::string_view name) {
    bool ok = !name.empty() && name.size() <= kMaxLinkNameBytes && name[0] != '.';
    for (char ch : name) {
      ok = ok && ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-');
    }
    if (ok) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("link name '", AbslView(name), "' must be 1 to ", kMaxLinkNameBytes,
                     " characters of [A-Za-z0-9._-], not starting with '.'"));
  }

  static const char* Describe(Blocked why) {
    switch (why) {
      case Blocked::kPriority:
        return "higher-priority traffic in flight or waiting";
      case Blocked::kQueued:
        return "earlier requests of this class are waiting";
      case Blocked::kWindow:
        return "bulk_inflight_max_bytes in flight";
      default:
        return "link bucket empty";
    }
  }

  absl::Status CheckRequest(size_t cls, uint64_t bytes) const {
    if (cls >= classes_) {
      return absl::InvalidArgumentError(absl::StrCat("link '", link_, "': class ", cls,
                                                     " out of range; it has ", classes_,
                                                     " classes (0 = most urgent)"));
    }
    if (bytes == 0 || bytes > burst_bytes_) {
      return absl::InvalidArgumentError(
          absl::StrCat("link '", link_, "': request of ", bytes, " bytes; grants must be 1 to ",
                       burst_bytes_, " bytes (burst_bytes): split larger transfers"));
    }
    if (cls >= 1 && bulk_inflight_max_bytes_ > 0 &&
        static_cast<int64_t>(bytes) > bulk_inflight_max_bytes_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "link '", link_, "': request of ", bytes, " bytes of class ", cls,
          " exceeds bulk_inflight_max_bytes ", bulk_inflight_max_bytes_, ": split it"));
    }
    return absl::OkStatus();
  }

  static int64_t ToMonotonicDeadline(absl::Time deadline, int64_t now_ns) {
    if (deadline == absl::InfiniteFuture()) return INT64_MAX;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return now_ns;
    if (left > absl::Hours(24 * 365)) return INT64_MAX;
    return now_ns + absl::ToInt64Nanoseconds(left);
  }

  absl::Status MapSegment(const std::string& path, uint64_t capacity) {
    for (int attempt = 0; attempt < 4; ++attempt) {
      UniqueFd fd(::shm_open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, options_.mode));
      if (fd.valid()) return CreateSegment(fd, path, capacity);
      if (errno != EEXIST) return ErrnoToStatus(errno, absl::StrCat("shm_open /dev/shm", path));
      fd.Reset(::shm_open(path.c_str(), O_RDWR | O_CLOEXEC, 0));
      if (fd.valid()) return AttachSegment(fd, path, capacity);
      if (errno != ENOENT) return ErrnoToStatus(errno, absl::StrCat("shm_open /dev/shm", path));
      // Removed between our two opens: create it again.
    }
    return absl::UnavailableError(absl::StrCat("/dev/shm", path, " keeps disappearing"));
  }

  absl::Status MapFd(const UniqueFd& fd, const std::string& path) {
    void* p = ::mmap(nullptr, sizeof(qos_internal::ArbiterSegment), PROT_READ | PROT_WRITE,
                     MAP_SHARED, fd.get(), 0);
    if (p == MAP_FAILED) return ErrnoToStatus(errno, absl::StrCat("mmap /dev/shm", path));
    seg_ = static_cast<qos_internal::ArbiterSegment*>(p);
    return absl::OkStatus();
  }

  absl::Status CreateSegment(const UniqueFd& fd, const std::string& path, uint64_t capacity) {
    if (::ftruncate(fd.get(), sizeof(qos_internal::ArbiterSegment)) != 0) {
      const int err = errno;
      ::shm_unlink(path.c_str());
      return ErrnoToStatus(err, absl::StrCat("ftruncate /dev/shm", path));
    }
    if (absl::Status s = MapFd(fd, path); !s.ok()) {
      ::shm_unlink(path.c_str());
      return s;
    }
    // The file is zero-filled and every field is a trivially constructible
    // atomic or integer, so zero bytes are valid initial values; placement
    // new gives the object a lifetime without touching them.
    new (seg_) qos_internal::ArbiterSegment;
    seg_->version = qos_internal::kArbiterLayoutVersion;
    seg_->classes = static_cast<uint32_t>(classes_);
    uint64_t burst = options_.burst_bytes;
    if (burst == 0) burst = std::max<uint64_t>(256 << 10, capacity / 500);
    seg_->burst_bytes = burst;
    seg_->allowance_bytes = options_.allowance_bytes;
    seg_->bulk_inflight_max_bytes = options_.bulk_inflight_max_bytes;
    seg_->debt_max_bytes = options_.debt_max_bytes != 0 ? options_.debt_max_bytes : burst;
    // relaxed: all published by the release store of `magic` below.
    seg_->capacity_bytes_per_s.store(capacity, std::memory_order_relaxed);
    seg_->tokens.store(static_cast<int64_t>(burst), std::memory_order_relaxed);
    seg_->refill_ns.store(qos_internal::MonotonicNowNs(), std::memory_order_relaxed);
    // release: openers that acquire-load the magic see the fields above.
    seg_->magic.store(qos_internal::kArbiterMagic, std::memory_order_release);
    LoadConfig();
    return absl::OkStatus();
  }

  absl::Status AttachSegment(const UniqueFd& fd, const std::string& path, uint64_t capacity) {
    // The creator may still be sizing and initializing it: wait up to 1 s.
    const int64_t give_up_ns = qos_internal::MonotonicNowNs() + 1000000000;
    for (;;) {
      struct stat st;
      if (::fstat(fd.get(), &st) != 0) return ErrnoToStatus(errno, "fstat /dev/shm" + path);
      if (static_cast<size_t>(st.st_size) == sizeof(qos_internal::ArbiterSegment)) {
        if (seg_ == nullptr) {
          if (absl::Status s = MapFd(fd, path); !s.ok()) return s;
        }
        // acquire: pairs with the creator's release store.
        if (seg_->magic.load(std::memory_order_acquire) == qos_internal::kArbiterMagic) break;
      } else if (st.st_size != 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "/dev/shm", path, " has ", st.st_size, " bytes, not the ",
            sizeof(qos_internal::ArbiterSegment),
            " of this arbiter version; ShmArbiter::Remove it when no process uses it"));
      }
      if (qos_internal::MonotonicNowNs() > give_up_ns) {
        return absl::FailedPreconditionError(
            absl::StrCat("/dev/shm", path,
                         " was never initialized (its creator died?); "
                         "ShmArbiter::Remove it"));
      }
      ::usleep(1000);
    }
    if (seg_->version != qos_internal::kArbiterLayoutVersion || seg_->classes != classes_) {
      return absl::FailedPreconditionError(
          absl::StrCat("link '", link_, "' exists with layout version ", seg_->version, " and ",
                       seg_->classes, " classes; this process asks for version ",
                       qos_internal::kArbiterLayoutVersion, " and ", classes_, " classes"));
    }
    const uint64_t have = seg_->capacity_bytes_per_s.load(std::memory_order_relaxed);
    if (have != capacity) {
      return absl::FailedPreconditionError(absl::StrCat(
          "link '", link_, "' exists with capacity ", have, " bytes/s; this process asks for ",
          capacity, " (use the same value, or SetCapacity)"));
    }
    LoadConfig();
    return absl::OkStatus();
  }

  void LoadConfig() {
    burst_bytes_ = seg_->burst_bytes;
    allowance_bytes_ = static_cast<int64_t>(seg_->allowance_bytes);
    bulk_inflight_max_bytes_ = static_cast<int64_t>(seg_->bulk_inflight_max_bytes);
    debt_max_bytes_ = static_cast<int64_t>(seg_->debt_max_bytes);
    MC_ASSERT(burst_bytes_ > 0 && debt_max_bytes_ > 0, "segment configuration");
  }

  absl::Status ClaimSlot() {
    const int64_t now = qos_internal::MonotonicNowNs();
    SweepSlots(now, /*all=*/true);
    pid_ = ::getpid();
    const std::optional<qos_internal::ProcessStat> self = qos_internal::ReadProcessStat(pid_);
    if (!self.has_value()) {
      return absl::InternalError(absl::StrCat("cannot read /proc/", pid_, "/stat"));
    }
    for (auto& slot : seg_->slots) {
      uint64_t expected = 0;
      // acquire: a freed slot's zeroed counters (released by its freer) are
      // visible before we reuse them.
      if (!slot.owner.compare_exchange_strong(expected, qos_internal::kSlotBusyBit | pid_,
                                              std::memory_order_acquire)) {
        continue;
      }
      slot.start_ticks.store(self->start_ticks, std::memory_order_relaxed);
      slot.heartbeat_ns.store(now, std::memory_order_relaxed);
      for (size_t c = 0; c < kMaxClasses; ++c) {
        slot.inflight_bytes[c].store(0, std::memory_order_relaxed);
        slot.waiting_bytes[c].store(0, std::memory_order_relaxed);
      }
      // release: a sweeper that sees the plain pid sees the start time.
      slot.owner.store(static_cast<uint64_t>(pid_), std::memory_order_release);
      slot_ = &slot;
      return absl::OkStatus();
    }
    return absl::ResourceExhaustedError(
        absl::StrCat("link '", link_, "' already has ", kMaxParticipants, " participants"));
  }

  void FreeOwnSlot() {
    for (size_t c = 0; c < kMaxClasses; ++c) {
      slot_->inflight_bytes[c].store(0, std::memory_order_relaxed);
      slot_->waiting_bytes[c].store(0, std::memory_order_relaxed);
    }
    // release: the zeroed counters are visible to the next claimer.
    slot_->owner.store(0, std::memory_order_release);
    slot_ = nullptr;
    Wake();
  }

  void Heartbeat(int64_t now) {
    MC_DASSERT(slot_ != nullptr, "a participant always has a slot");
    // relaxed: a hint for sweepers, who confirm death with kill() anyway.
    slot_->heartbeat_ns.store(now, std::memory_order_relaxed);
  }

  Grant Granted(size_t cls, uint64_t bytes, uint64_t waited_ns) {
    if (cls == 0) Debit(bytes);
    // relaxed: counters steer admission decisions only; no data is
    // published through them (a grant racing a check costs one grant's bytes).
    slot_->inflight_bytes[cls].fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
    auto& k = seg_->counters[cls];
    k.granted_requests.fetch_add(1, std::memory_order_relaxed);
    k.granted_bytes.fetch_add(bytes, std::memory_order_relaxed);
    k.wait_ns.fetch_add(waited_ns, std::memory_order_relaxed);
    return Grant(this, cls, bytes);
  }

  void ReleaseBytes(size_t cls, uint64_t bytes) {
    MC_ASSERT(slot_ != nullptr && cls < classes_, "release of a grant from a live arbiter");
    const int64_t before = slot_->inflight_bytes[cls].fetch_sub(static_cast<int64_t>(bytes),
                                                                std::memory_order_relaxed);
    MC_DASSERT(before >= static_cast<int64_t>(bytes), "released more than was granted");
    // Releases unblock lower classes and, under bulk_inflight_max_bytes,
    // any class >= 1 (Wake costs no system call while nobody sleeps).
    if (cls + 1 < classes_ || bulk_inflight_max_bytes_ > 0) Wake();
  }

  void Wake() {
    // release: a waiter that acquire-loads the new sequence sees our
    // counter updates. seq_cst on sleepers: pairs with the waiter's
    // increment, so either we see it and wake, or it sees the new sequence.
    seg_->wake_seq.fetch_add(1, std::memory_order_seq_cst);
    if (seg_->sleepers.load(std::memory_order_seq_cst) == 0) return;
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&seg_->wake_seq), FUTEX_WAKE, INT_MAX, nullptr,
              nullptr, 0);
  }

  void SleepUntilWoken(uint32_t seq, int64_t sleep_ns) {
    if (sleep_ns <= 0) return;
    seg_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    timespec ts{static_cast<time_t>(sleep_ns / 1000000000),
                static_cast<long>(sleep_ns % 1000000000)};
    // Returns at once if wake_seq moved on since `seq` was read.
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&seg_->wake_seq), FUTEX_WAIT, seq, &ts,
              nullptr, 0);
    seg_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }

  struct Pressure {
    int64_t inflight_higher = 0;  // bytes in flight of classes below cls
    int64_t waiting_higher = 0;   // bytes waiting in classes below cls
    int64_t waiting_same = 0;     // bytes waiting in class cls
    int64_t inflight_bulk = 0;    // bytes in flight of classes >= 1
  };

  Pressure PressureOn(size_t cls) const {
    Pressure p;
    for (const auto& slot : seg_->slots) {
      // relaxed: see Granted(); a free slot's counters are zero.
      if (slot.owner.load(std::memory_order_relaxed) == 0) continue;
      for (size_t c = 0; c < cls; ++c) {
        p.inflight_higher += slot.inflight_bytes[c].load(std::memory_order_relaxed);
        p.waiting_higher += slot.waiting_bytes[c].load(std::memory_order_relaxed);
      }
      p.waiting_same += slot.waiting_bytes[cls].load(std::memory_order_relaxed);
      for (size_t c = 1; c < classes_; ++c) {
        p.inflight_bulk += slot.inflight_bytes[c].load(std::memory_order_relaxed);
      }
    }
    return p;
  }

  // A newcomer also queues behind waiters of its own class, so a thread
  // that just finished a grant cannot take the tokens that sleeping waiters
  // are due (waiters then race among themselves: no starvation, but not FIFO).
  Blocked TryAdmit(size_t cls, uint64_t bytes, int64_t now, bool newcomer) {
    MC_DASSERT(cls >= 1 && cls < classes_, "class 0 is admitted without checks");
    const Pressure p = PressureOn(cls);
    if (p.waiting_higher > 0 || p.inflight_higher > allowance_bytes_) return Blocked::kPriority;
    if (newcomer && p.waiting_same > 0) return Blocked::kQueued;
    if (bulk_inflight_max_bytes_ > 0 &&
        p.inflight_bulk + static_cast<int64_t>(bytes) > bulk_inflight_max_bytes_) {
      return Blocked::kWindow;
    }
    Refill(now);
    const int64_t want = static_cast<int64_t>(bytes);
    // relaxed: the bucket is a counter; the CAS makes each take exclusive.
    int64_t t = seg_->tokens.load(std::memory_order_relaxed);
    do {
      if (t < want) return Blocked::kTokens;
    } while (!seg_->tokens.compare_exchange_weak(t, t - want, std::memory_order_relaxed));
    return Blocked::kNo;
  }

  void Debit(uint64_t bytes) {
    Refill(qos_internal::MonotonicNowNs());
    int64_t t = seg_->tokens.load(std::memory_order_relaxed);
    int64_t next;
    do {
      next = std::max(t - static_cast<int64_t>(bytes), -debt_max_bytes_);
    } while (!seg_->tokens.compare_exchange_weak(t, next, std::memory_order_relaxed));
  }

  // Adds the tokens earned since refill_ns. The process that moves
  // refill_ns forward adds exactly the tokens for the time it claimed, and
  // refill_ns moves only by whole tokens' worth, so nothing drifts.
  void Refill(int64_t now) {
    const uint64_t cap = seg_->capacity_bytes_per_s.load(std::memory_order_relaxed);
    // relaxed: refill_ns and tokens are independent counters; the CAS on
    // refill_ns alone decides who adds the tokens for an interval.
    int64_t last = seg_->refill_ns.load(std::memory_order_relaxed);
    if (now <= last) return;
    const unsigned __int128 earned = static_cast<unsigned __int128>(now - last) * cap / 1000000000;
    if (earned == 0) return;
    const uint64_t burst = burst_bytes_;
    const int64_t add =
        static_cast<int64_t>(std::min<unsigned __int128>(earned, 2 * burst + 2 * debt_max_bytes_));
    const int64_t advance_ns =
        earned > static_cast<unsigned __int128>(add)
            ? now - last
            : static_cast<int64_t>(static_cast<unsigned __int128>(add) * 1000000000 / cap);
    if (!seg_->refill_ns.compare_exchange_strong(last, last + advance_ns,
                                                 std::memory_order_relaxed)) {
      return;  // another participant refilled this interval
    }
    int64_t t = seg_->tokens.load(std::memory_order_relaxed);
    while (!seg_->tokens.compare_exchange_weak(t, std::min(t + add, static_cast<int64_t>(burst)),
                                               std::memory_order_relaxed)) {
    }
  }

  // Nanoseconds until the bucket could hold `bytes`, at least 20 us.
  int64_t TokenWaitNs(uint64_t bytes) const {
    const int64_t t = seg_->tokens.load(std::memory_order_relaxed);
    const uint64_t cap = seg_->capacity_bytes_per_s.load(std::memory_order_relaxed);
    const int64_t deficit = std::max<int64_t>(static_cast<int64_t>(bytes) - t, 1);
    const int64_t ns =
        static_cast<int64_t>(static_cast<unsigned __int128>(deficit) * 1000000000 / cap);
    return std::max<int64_t>(ns, 20000);
  }

  void MaybeSweep(int64_t now) {
    // relaxed: a rate limit on sweeps; the CAS picks one sweeper per interval.
    int64_t last = seg_->last_sweep_ns.load(std::memory_order_relaxed);
    if (now - last < sweep_interval_ns_) return;
    if (!seg_->last_sweep_ns.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
    SweepSlots(now, /*all=*/false);
  }

  // Frees the slots of dead owners whose heartbeat is stale; with !all, only
  // slots that hold budget (the ones that block someone).
  size_t SweepSlots(int64_t now, bool all) {
    size_t reclaimed = 0;
    for (auto& slot : seg_->slots) {
      // acquire: pairs with ClaimSlot's release, so start_ticks is the owner's.
      uint64_t owner = slot.owner.load(std::memory_order_acquire);
      if (owner == 0 || &slot == slot_) continue;
      if (now - slot.heartbeat_ns.load(std::memory_order_relaxed) < stale_after_ns_) continue;
      int64_t held = 0;
      for (size_t c = 0; c < kMaxClasses; ++c) {
        held += slot.inflight_bytes[c].load(std::memory_order_relaxed) +
                slot.waiting_bytes[c].load(std::memory_order_relaxed);
      }
      if (!all && held == 0) continue;
      const pid_t pid = static_cast<pid_t>(owner & ~qos_internal::kSlotBusyBit);
      if (qos_internal::ProcessAlive(pid, slot.start_ticks.load(std::memory_order_relaxed))) {
        continue;
      }
      // A busy slot whose pid is dead: its claimer or sweeper died in the
      // middle; taking it over is safe because zeroing is idempotent.
      if (!slot.owner.compare_exchange_strong(owner, qos_internal::kSlotBusyBit | pid_,
                                              std::memory_order_acquire)) {
        continue;  // another sweeper took it
      }
      int64_t freed = 0;
      for (size_t c = 0; c < kMaxClasses; ++c) {
        freed += slot.inflight_bytes[c].exchange(0, std::memory_order_relaxed);
        slot.waiting_bytes[c].store(0, std::memory_order_relaxed);
      }
      seg_->reclaimed_slots.fetch_add(1, std::memory_order_relaxed);
      seg_->reclaimed_bytes.fetch_add(static_cast<uint64_t>(std::max<int64_t>(freed, 0)),
                                      std::memory_order_relaxed);
      // release: the zeroed counters are visible to the next claimer.
      slot.owner.store(0, std::memory_order_release);
      ++reclaimed;
    }
    if (reclaimed > 0) Wake();
    return reclaimed;
  }

  const std::string link_;
  const Options options_;
  const size_t classes_;
  const int64_t stale_after_ns_;
  const int64_t sweep_interval_ns_;
  qos_internal::ArbiterSegment* seg_ = nullptr;
  qos_internal::ArbiterSlot* slot_ = nullptr;
  pid_t pid_ = 0;
  uint64_t burst_bytes_ = 0;
  int64_t allowance_bytes_ = 0;
  int64_t bulk_inflight_max_bytes_ = 0;
  int64_t debt_max_bytes_ = 0;
};

}  // namespace mooncake::qos

#endif  // MOONCAKE_QOS_SHM_ARBITER_H_
