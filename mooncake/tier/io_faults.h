// IoFaults: a fault-injecting layer between SsdTier and the kernel.
//
// SsdTier passes every completed I/O (and every durability barrier) through
// IoFaults::OnComplete before acting on it. A hook may turn a success into an
// error (a negative errno), shorten a transfer, or flip bytes of data that was
// just read, which is how tests reproduce failing and lying devices without
// root or special filesystems. Production code passes no hook (a null
// pointer: one predictable branch per I/O).
//
// Thread-safety: OnComplete is called concurrently from every I/O lane; a
// hook synchronises its own state (ScriptedFaults uses atomics).
#ifndef MOONCAKE_TIER_IO_FAULTS_H_
#define MOONCAKE_TIER_IO_FAULTS_H_

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <span>

namespace mooncake::tier {

enum class IoKind : uint8_t { kRead, kWrite, kSync };

class IoFaults {
 public:
  virtual ~IoFaults() = default;
  // `result` is the kernel's (bytes moved, or -errno); the return value is
  // what the tier sees. `data` is the buffer of a read or write (empty for a
  // sync); a hook may modify a read's bytes.
  virtual int OnComplete(IoKind kind, uint32_t file_index, uint64_t file_offset,
                         std::span<std::byte> data, int result) = 0;
};

// A ready-made hook driven by counters: fail (with -fault_errno, EIO unless
// set) every I/O of a kind once `*_after` further I/Os of that kind went
// through, or flip one byte of each read payload. Set the fields at any time;
// -1 disables a rule.
class ScriptedFaults final : public IoFaults {
 public:
  std::atomic<int64_t> fail_writes_after{-1};
  std::atomic<int64_t> fail_reads_after{-1};
  std::atomic<int64_t> fail_syncs_after{-1};
  std::atomic<bool> corrupt_reads{false};
  std::atomic<int> fault_errno{EIO};
  std::atomic<uint64_t> injected{0};

  int OnComplete(IoKind kind, uint32_t /*file_index*/, uint64_t /*file_offset*/,
                 std::span<std::byte> data, int result) override {
    std::atomic<int64_t>& budget = kind == IoKind::kRead    ? fail_reads_after
                                   : kind == IoKind::kWrite ? fail_writes_after
                                                            : fail_syncs_after;
    // Relaxed: the counters are independent test knobs; no data is published.
    int64_t left = budget.load(std::memory_order_relaxed);
    while (left >= 0) {
      if (left == 0) {
        injected.fetch_add(1, std::memory_order_relaxed);
        return -fault_errno.load(std::memory_order_relaxed);
      }
      if (budget.compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) break;
    }
    if (kind == IoKind::kRead && result > 0 && !data.empty() &&
        corrupt_reads.load(std::memory_order_relaxed)) {
      data[data.size() / 2] ^= std::byte{0x5A};
      injected.fetch_add(1, std::memory_order_relaxed);
    }
    return result;
  }
};

}  // namespace mooncake::tier

#endif  // MOONCAKE_TIER_IO_FAULTS_H_
