// Small RAII pieces over liburing and aligned memory for SsdTier.
//
// Thread-safety: a Ring's submission side (Sqe, Submit) must be used by one
// thread at a time (SsdTier holds a per-lane mutex); its completion side
// (WaitCqe, Seen) by one other thread at a time (the lane's reaper). That
// split is liburing's own single-producer / single-consumer contract.
//
// ThreadSanitizer cannot see the kernel carry an entry from the submitting
// thread to the reaping one, so everything the submitter wrote before an
// entry went in (its Io, the buffer it filled) would look racy when the reaper
// reads it. SetData / Data tell it: an entry's user_data pointer is released
// when it is set and acquired when its completion is reaped.
#ifndef MOONCAKE_TIER_INTERNAL_URING_H_
#define MOONCAKE_TIER_INTERNAL_URING_H_

#include <liburing.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/errno_status.h"

#if defined(__SANITIZE_THREAD__)
#define MOONCAKE_TSAN_ 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MOONCAKE_TSAN_ 1
#endif
#endif

#ifdef MOONCAKE_TSAN_
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace mooncake::tier_internal {

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<std::byte[], FreeDeleter>;

// `bytes` rounded up to `alignment` (a power of two); zeroed when `zero`.
inline AlignedBytes AllocateAligned(size_t bytes, size_t alignment, bool zero = true) {
  const size_t rounded = std::max((bytes + alignment - 1) / alignment * alignment, alignment);
  void* p = std::aligned_alloc(alignment, rounded);
  MC_ASSERT(p != nullptr, "out of memory for an aligned I/O buffer");
  if (zero) std::memset(p, 0, rounded);
  return AlignedBytes(static_cast<std::byte*>(p));
}

class Ring {
 public:
  Ring() = default;
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  ~Ring() {
    if (ready_) io_uring_queue_exit(&ring_);
  }

  absl::Status Init(unsigned entries) {
    const int rc = io_uring_queue_init(entries, &ring_, 0);
    if (rc < 0) return ErrnoToStatus(-rc, "io_uring_queue_init");
    ready_ = true;
    return absl::OkStatus();
  }

  absl::Status RegisterFiles(std::span<const int> fds) {
    const int rc = io_uring_register_files(&ring_, fds.data(), static_cast<unsigned>(fds.size()));
    return rc < 0 ? ErrnoToStatus(-rc, "io_uring_register_files") : absl::OkStatus();
  }

  absl::Status RegisterBuffer(std::byte* base, size_t bytes) {
    iovec iov{base, bytes};
    const int rc = io_uring_register_buffers(&ring_, &iov, 1);
    return rc < 0 ? ErrnoToStatus(-rc, "io_uring_register_buffers") : absl::OkStatus();
  }

  // A free submission entry; flushes the queue to the kernel when it is full.
  io_uring_sqe* Sqe() {
    for (int tries = 0; tries < 1000; ++tries) {
      if (io_uring_sqe* sqe = io_uring_get_sqe(&ring_)) return sqe;
      io_uring_submit(&ring_);
    }
    MC_ASSERT(false, "io_uring submission queue stays full");
    return nullptr;
  }

  int Submit() { return io_uring_submit(&ring_); }

  // io_uring_sqe_set_data, and the hand-off for ThreadSanitizer (above).
  static void SetData(io_uring_sqe* sqe, void* data) {
#ifdef MOONCAKE_TSAN_
    __tsan_release(data);
#endif
    io_uring_sqe_set_data(sqe, data);
  }
  // The user_data of a reaped completion; the other half of SetData.
  static void* Data(const io_uring_cqe* cqe) {
    void* data = io_uring_cqe_get_data(cqe);
#ifdef MOONCAKE_TSAN_
    __tsan_acquire(data);
#endif
    return data;
  }

  // Blocks for one completion; retries EINTR.
  io_uring_cqe* WaitCqe() {
    io_uring_cqe* cqe = nullptr;
    for (;;) {
      const int rc = io_uring_wait_cqe(&ring_, &cqe);
      if (rc == 0) return cqe;
      MC_ASSERT(rc == -EINTR || rc == -EAGAIN, "io_uring_wait_cqe failed");
    }
  }
  io_uring_cqe* PeekCqe() {
    io_uring_cqe* cqe = nullptr;
    return io_uring_peek_cqe(&ring_, &cqe) == 0 ? cqe : nullptr;
  }
  void Seen(io_uring_cqe* cqe) { io_uring_cqe_seen(&ring_, cqe); }

 private:
  io_uring ring_{};
  bool ready_ = false;
};

}  // namespace mooncake::tier_internal

#undef MOONCAKE_TSAN_

#endif  // MOONCAKE_TIER_INTERNAL_URING_H_
