// UniqueFd: the one owner of a POSIX file descriptor (socket, pipe, eventfd,
// memfd, file). Closes it on destruction; move-only, so exactly one owner
// closes each descriptor.
//
// Invariant: fd_ is -1 (empty) or a descriptor this object alone will close.
// Thread-safety: thread-compatible (like an int); the descriptor itself may be
// used from several threads as the system call allows.
#ifndef MOONCAKE_BASE_FD_H_
#define MOONCAKE_BASE_FD_H_

#include <unistd.h>

#include <utility>

namespace mooncake {

class UniqueFd {
 public:
  UniqueFd() = default;
  // Takes ownership of `fd` (-1, or any negative value a failed call
  // returned, makes an empty owner).
  explicit UniqueFd(int fd) : fd_(fd < 0 ? -1 : fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  // The descriptor, still owned (-1 when empty).
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Closes the owned descriptor (if any) and owns `fd` instead. close()'s
  // result is ignored: Linux releases the descriptor even when it fails, so
  // retrying could close another thread's new one.
  void Reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd < 0 ? -1 : fd;
  }
  // Gives up ownership without closing; the caller closes the result.
  [[nodiscard]] int Release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

}  // namespace mooncake

#endif  // MOONCAKE_BASE_FD_H_
