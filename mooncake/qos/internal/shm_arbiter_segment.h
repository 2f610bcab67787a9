// The shared-memory layout behind qos::ShmArbiter, and the process-liveness
// check its crash reclamation relies on. Private to mooncake/qos.
//
// Every field a participant touches after creation is a lock-free std::atomic
// (static_asserted below), so it is address-free and works from any process
// that maps the segment. The creator writes the configuration fields, then
// publishes `magic` with a release store; openers read `magic` with acquire
// before anything else. A segment whose magic, version or size differ from
// this file's is refused, never reinterpreted.
#ifndef MOONCAKE_QOS_INTERNAL_SHM_ARBITER_SEGMENT_H_
#define MOONCAKE_QOS_INTERNAL_SHM_ARBITER_SEGMENT_H_

#include <signal.h>
#include <sys/types.h>
#include <time.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

namespace mooncake::qos_internal {

inline constexpr uint64_t kArbiterMagic = 0x4d43514f53415242ULL;  // "MCQOSARB"
inline constexpr uint32_t kArbiterLayoutVersion = 1;
inline constexpr size_t kArbiterMaxClasses = 8;
inline constexpr size_t kArbiterMaxSlots = 64;

// Slot.owner: 0 is free; otherwise the owner's pid, with kSlotBusyBit set while
// a process claims the slot or a sweeper reclaims it.
inline constexpr uint64_t kSlotBusyBit = uint64_t{1} << 63;

// One participant (one ShmArbiter object). Only its owner adds to or
// subtracts from the counters while it lives; a sweeper zeroes them once the
// owner is dead, which is idempotent, so a sweeper that dies half-way leaves
// nothing inconsistent for the next one.
struct alignas(64) ArbiterSlot {
  std::atomic<uint64_t> owner;
  std::atomic<uint64_t> start_ticks;  // owner's /proc start time: pid-reuse guard
  std::atomic<int64_t> heartbeat_ns;  // CLOCK_MONOTONIC of the owner's last call
  std::array<std::atomic<int64_t>, kArbiterMaxClasses> inflight_bytes;
  std::array<std::atomic<int64_t>, kArbiterMaxClasses> waiting_bytes;
};

struct alignas(64) ArbiterClassCounters {
  std::atomic<uint64_t> granted_requests;
  std::atomic<uint64_t> granted_bytes;
  std::atomic<uint64_t> timeouts;
  std::atomic<uint64_t> wait_ns;
};

struct ArbiterSegment {
  std::atomic<uint64_t> magic;
  // Written once by the creator before `magic` is published.
  uint32_t version;
  uint32_t classes;
  uint64_t burst_bytes;
  uint64_t allowance_bytes;
  uint64_t bulk_inflight_max_bytes;  // 0: unbounded
  uint64_t debt_max_bytes;

  std::atomic<uint64_t> capacity_bytes_per_s;
  // The bulk bucket: every grant debits it, classes >= 1 wait for it.
  alignas(64) std::atomic<int64_t> tokens;
  std::atomic<int64_t> refill_ns;
  // Futex word: bumped by every release that may unblock a waiter.
  alignas(64) std::atomic<uint32_t> wake_seq;
  std::atomic<uint32_t> sleepers;
  std::atomic<int64_t> last_sweep_ns;
  std::atomic<uint64_t> reclaimed_slots;
  std::atomic<uint64_t> reclaimed_bytes;
  std::array<ArbiterClassCounters, kArbiterMaxClasses> counters;
  std::array<ArbiterSlot, kArbiterMaxSlots> slots;
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(std::atomic<int64_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word must be 32 bits");

// CLOCK_MONOTONIC is one clock for every process on the host, so heartbeats
// and refill times written by one process mean the same in another.
inline int64_t MonotonicNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

struct ProcessStat {
  char state = '?';          // field 3: R, S, D, Z (zombie), X (dead), ...
  uint64_t start_ticks = 0;  // field 22: start time in clock ticks since boot
};

// Fields 3 and 22 of /proc/<pid>/stat, or nullopt when the process does not
// exist. The comm field may hold spaces and parentheses, so parsing starts
// after the last ')'.
inline std::optional<ProcessStat> ReadProcessStat(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return std::nullopt;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ' || p[2] == '\0') return std::nullopt;
  ProcessStat stat;
  stat.state = p[2];
  // p[1] is the space before field 3; each further space starts a field.
  int field = 2;
  for (; *p != '\0' && field < 22; ++p) {
    if (*p == ' ') ++field;
  }
  if (field != 22) return std::nullopt;
  unsigned long long ticks = 0;
  if (std::sscanf(p, "%llu", &ticks) != 1) return std::nullopt;
  stat.start_ticks = static_cast<uint64_t>(ticks);
  return stat;
}

// True while the process that registered as (pid, start_ticks) still runs.
// kill(pid, 0) answers ESRCH for a pid nobody holds (EPERM still means it
// exists); the start time tells the original process from a later one that
// reused the pid; a zombie (killed, not yet reaped) will never release what
// it holds, so it counts as dead. Callers must share the pid namespace.
inline bool ProcessAlive(pid_t pid, uint64_t start_ticks) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  const std::optional<ProcessStat> stat = ReadProcessStat(pid);
  return stat.has_value() && stat->start_ticks == start_ticks && stat->state != 'Z' &&
         stat->state != 'X';
}

}  // namespace mooncake::qos_internal

#endif  // MOONCAKE_QOS_INTERNAL_SHM_ARBITER_SEGMENT_H_
