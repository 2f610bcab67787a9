// DiskLab: the filesystem that holds one worker's SSD tier file, and the two
// disk faults the campaign injects on it.
//
// - The filesystem: an ext4 image file (`image_bytes`) loop-mounted at
//   <dir>/ssd (mount -o loop; the loop device goes with the unmount).
// - disk_full: Fill() takes every free block with a filler file
//   (fallocate); Unfill() deletes it.
// - slow_disk: Slow(pid) moves the process into a blkio cgroup (v1) that
//   throttles reads and writes on the loop device to `bytes_per_second`;
//   Unslow() moves it back. Unavailable (with the reason) where there is no
//   v1 blkio controller with throttling.
//
// Needs root; Create fails naming what is missing. A campaign enters a mount
// namespace of its own first (EnterPrivateMountNamespace), so a killed one
// leaves no mount behind. The destructor undoes
// everything it did, in reverse, also after a failed Create.
//
// Thread-safety: one owning thread.
#ifndef MOONCAKE_TOOLS_CHAOS_DISKLAB_H_
#define MOONCAKE_TOOLS_CHAOS_DISKLAB_H_

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/status_macros.h"
#include "tools/chaos/netlab.h"

namespace mooncake::chaos {

class DiskLab {
 public:
  DiskLab(const DiskLab&) = delete;
  DiskLab& operator=(const DiskLab&) = delete;
  ~DiskLab() {
    Unslow();
    if (!cgroup_.empty()) ::rmdir(cgroup_.c_str());
    Unfill();
    if (mounted_) Sh(absl::StrCat("umount -l ", mount_));
    std::remove(image_.c_str());
    ::rmdir(mount_.c_str());
  }

  static absl::StatusOr<std::unique_ptr<DiskLab>> Create(const std::string& dir,
                                                         uint64_t image_bytes) {
    if (geteuid() != 0) return absl::PermissionDeniedError("mounting a filesystem needs root");
    std::unique_ptr<DiskLab> d(new DiskLab());
    d->image_ = dir + "/ssd.img";
    d->mount_ = dir + "/ssd";
    ::mkdir(d->mount_.c_str(), 0755);
    RETURN_IF_ERROR(MustSh(absl::StrCat("truncate -s ", image_bytes, " ", d->image_)));
    RETURN_IF_ERROR(MustSh(absl::StrCat("mkfs.ext4 -q -F -m 0 ", d->image_)));
    RETURN_IF_ERROR(MustSh(absl::StrCat("mount -o loop ", d->image_, " ", d->mount_)));
    d->mounted_ = true;
    struct stat st {};
    if (::stat(d->mount_.c_str(), &st) != 0) return absl::InternalError("stat of the mount");
    d->device_ = absl::StrCat(major(st.st_dev), ":", minor(st.st_dev));
    return d;
  }

  // Moves this process (call it before any thread starts) into a mount
  // namespace of its own with private propagation: the tier filesystem
  // mounted later, and the loop device behind it, go with the campaign's
  // last process even when it is SIGKILLed, instead of staying mounted on
  // the host. Its children (masters, workers) share the namespace.
  static absl::Status EnterPrivateMountNamespace() {
    if (::unshare(CLONE_NEWNS) != 0) {
      return absl::UnavailableError(absl::StrCat("unshare(CLONE_NEWNS): errno ", errno));
    }
    if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      return absl::UnavailableError(absl::StrCat("making / private: errno ", errno));
    }
    return absl::OkStatus();
  }

  // Removes the blkio cgroups of campaigns that are gone (SIGKILLed ones).
  static void SweepStale() {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/sys/fs/cgroup/blkio", ec)) {
      const std::string name = e.path().filename().string();
      int pid = 0;
      if (name.rfind("mooncake_chaos_", 0) == 0 && absl::SimpleAtoi(name.substr(15), &pid) &&
          ::kill(pid, 0) != 0) {
        ::rmdir(e.path().c_str());
      }
    }
  }

  const std::string& mount() const { return mount_; }

  // Fills every free block; OK even if a few KiB stay free (metadata).
  absl::Status Fill() {
    const std::string filler = mount_ + "/filler";
    const int fd = ::open(filler.c_str(), O_WRONLY | O_CREAT, 0644);
    if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", filler));
    filled_ = true;
    uint64_t at = 0;
    for (uint64_t chunk = uint64_t{1} << 30; chunk >= 4096;) {
      if (::posix_fallocate(fd, static_cast<off_t>(at), static_cast<off_t>(chunk)) == 0) {
        at += chunk;
      } else {
        chunk /= 2;
      }
    }
    ::close(fd);
    struct statvfs v {};
    ::statvfs(mount_.c_str(), &v);
    free_after_fill_bytes_ = static_cast<uint64_t>(v.f_bavail) * v.f_frsize;
    return absl::OkStatus();
  }
  void Unfill() {
    if (filled_) std::remove((mount_ + "/filler").c_str());
    filled_ = false;
  }
  uint64_t free_after_fill_bytes() const { return free_after_fill_bytes_; }

  // OK if slow_disk can be injected here; else why not.
  absl::Status CanSlow() {
    const std::string root = "/sys/fs/cgroup/blkio";
    if (::access((root + "/blkio.throttle.write_bps_device").c_str(), W_OK) != 0) {
      return absl::UnavailableError("no cgroup v1 blkio controller with throttling");
    }
    cgroup_ = absl::StrCat(root, "/mooncake_chaos_", getpid());
    if (::mkdir(cgroup_.c_str(), 0755) != 0 && errno != EEXIST) {
      cgroup_.clear();
      return absl::UnavailableError("cannot create a blkio cgroup");
    }
    return absl::OkStatus();
  }

  // Throttles `pid`'s reads and writes on the tier's device.
  absl::Status Slow(pid_t pid, uint64_t bytes_per_second) {
    if (cgroup_.empty()) return absl::FailedPreconditionError("CanSlow first");
    for (const char* f : {"blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device"}) {
      RETURN_IF_ERROR(
          Write(absl::StrCat(cgroup_, "/", f), absl::StrCat(device_, " ", bytes_per_second)));
    }
    RETURN_IF_ERROR(Write(cgroup_ + "/cgroup.procs", absl::StrCat(pid)));
    slowed_ = pid;
    return absl::OkStatus();
  }
  void Unslow() {
    if (slowed_ > 0) {
      (void)Write("/sys/fs/cgroup/blkio/cgroup.procs", absl::StrCat(slowed_));
      slowed_ = 0;
    }
  }

 private:
  DiskLab() = default;

  static absl::Status Write(const std::string& path, const std::string& text) {
    std::ofstream out(path);
    out << text << "\n";
    out.flush();
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write '", text, "' to ", path));
    return absl::OkStatus();
  }

  std::string image_, mount_, device_, cgroup_;
  bool mounted_ = false;
  bool filled_ = false;
  pid_t slowed_ = 0;
  uint64_t free_after_fill_bytes_ = 0;
};

}  // namespace mooncake::chaos

#endif  // MOONCAKE_TOOLS_CHAOS_DISKLAB_H_
