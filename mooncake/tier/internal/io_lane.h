// IoLane: one io_uring instance of the SSD tier and its submission side.
// Any thread submits (reads, writes, fdatasyncs, timeouts, no-ops) under the
// lane's lock; one thread, the lane's reaper, consumes its completions (no
// lock: io_uring's completion queue has a single consumer and shares nothing
// with the submission side). Each submission's user data is a pointer the
// reaper gets back with Data(cqe).
//
// Files are addressed by their index in the table given to Init; with
// RegisterFiles that index is a registered (fixed) file, else it maps to the
// fd. A read or write whose memory lies in the registered buffer
// (RegisterBuffer) and is marked `fixed` goes out as a *_FIXED operation.
//
// Thread-safety: Submit* may run concurrently from any thread: one lock (mu_),
// held while entries are prepared and submitted; it calls nothing that locks,
// so it is a leaf in SsdTier's lock order (ssd_tier.h). The completion calls
// belong to one thread. Init and Register* run before either.
#ifndef MOONCAKE_TIER_INTERNAL_IO_LANE_H_
#define MOONCAKE_TIER_INTERNAL_IO_LANE_H_

#include <liburing.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"
#include "mooncake/tier/internal/uring.h"

namespace mooncake::tier_internal {

class IoLane {
 public:
  IoLane() = default;
  IoLane(const IoLane&) = delete;
  IoLane& operator=(const IoLane&) = delete;

  absl::Status Init(unsigned entries, std::vector<int> fds) {
    fds_ = std::move(fds);
    MutexLock lock(&mu_);
    return ring_.Init(entries);
  }
  // Registers Init's fds; afterwards files are addressed as fixed files.
  absl::Status RegisterFiles() {
    MutexLock lock(&mu_);
    absl::Status s = ring_.RegisterFiles(fds_);
    files_registered_ = s.ok();
    return s;
  }
  absl::Status RegisterBuffer(std::byte* base, size_t bytes) {
    MutexLock lock(&mu_);
    absl::Status s = ring_.RegisterBuffer(base, bytes);
    buffer_registered_ = s.ok();
    return s;
  }
  bool files_registered() const { return files_registered_; }
  bool buffer_registered() const { return buffer_registered_; }

  // Submits ios[0, n) as reads or writes, each with its own address as user data. IoT has
  // `file`, `data`, `bytes`, `offset` and `fixed` (data lies in the registered buffer).
  template <typename IoT>
  void SubmitReadWrite(bool is_write, IoT* ios, size_t n) {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < n; ++i) {
      IoT& io = ios[i];
      io_uring_sqe* sqe = ring_.Sqe();
      const int fd = Fd(io.file);
      const bool fixed = io.fixed && buffer_registered_;
      if (is_write) {
        if (fixed) {
          io_uring_prep_write_fixed(sqe, fd, io.data, io.bytes, io.offset, 0);
        } else {
          io_uring_prep_write(sqe, fd, io.data, io.bytes, io.offset);
        }
      } else if (fixed) {
        io_uring_prep_read_fixed(sqe, fd, io.data, io.bytes, io.offset, 0);
      } else {
        io_uring_prep_read(sqe, fd, io.data, io.bytes, io.offset);
      }
      if (files_registered_) sqe->flags |= IOSQE_FIXED_FILE;
      ring_.SetData(sqe, &io);
    }
    ring_.Submit();
  }
  void SubmitSync(uint32_t file, void* data) {
    MutexLock lock(&mu_);
    io_uring_sqe* sqe = ring_.Sqe();
    io_uring_prep_fsync(sqe, Fd(file), IORING_FSYNC_DATASYNC);
    if (files_registered_) sqe->flags |= IOSQE_FIXED_FILE;
    ring_.SetData(sqe, data);
    ring_.Submit();
  }
  // A timeout completing after *ts (-ETIME), which the kernel reads until then.
  void SubmitTimeout(__kernel_timespec* ts, void* data) {
    MutexLock lock(&mu_);
    io_uring_sqe* sqe = ring_.Sqe();
    io_uring_prep_timeout(sqe, ts, 0, 0);
    ring_.SetData(sqe, data);
    ring_.Submit();
  }
  // Cancels the pending timeouts submitted with user data `targets` (each completes with
  // -ECANCELED); every removal completes with user data `data`.
  void SubmitTimeoutRemoves(std::span<void* const> targets, void* data) {
    MutexLock lock(&mu_);
    for (void* target : targets) {
      io_uring_sqe* sqe = ring_.Sqe();
      io_uring_prep_timeout_remove(sqe, reinterpret_cast<uintptr_t>(target), 0);
      ring_.SetData(sqe, data);
    }
    ring_.Submit();
  }
  void SubmitNop(void* data) {
    MutexLock lock(&mu_);
    io_uring_sqe* sqe = ring_.Sqe();
    io_uring_prep_nop(sqe);
    ring_.SetData(sqe, data);
    ring_.Submit();
  }

  // The completion side: the reaper's alone (see the header comment), hence unlocked.
  io_uring_cqe* WaitCqe() ABSL_NO_THREAD_SAFETY_ANALYSIS { return ring_.WaitCqe(); }
  io_uring_cqe* PeekCqe() ABSL_NO_THREAD_SAFETY_ANALYSIS { return ring_.PeekCqe(); }
  void Seen(io_uring_cqe* cqe) ABSL_NO_THREAD_SAFETY_ANALYSIS { ring_.Seen(cqe); }
  static void* Data(const io_uring_cqe* cqe) { return Ring::Data(cqe); }

 private:
  int Fd(uint32_t file) const {
    MC_DASSERT(file < fds_.size(), "file index");
    return files_registered_ ? static_cast<int>(file) : fds_[file];
  }

  std::vector<int> fds_;            // fixed after Init
  bool files_registered_ = false;   // fixed after RegisterFiles
  bool buffer_registered_ = false;  // fixed after RegisterBuffer
  Mutex mu_;
  Ring ring_ ABSL_GUARDED_BY(mu_);  // submission side; see WaitCqe
};

}  // namespace mooncake::tier_internal

#endif  // MOONCAKE_TIER_INTERNAL_IO_LANE_H_
