// SsdFileSet: the SSD tier's files: creates, opens (locked: one tier per
// file) or replaces them, checks that they form one set (same set id, each in
// its position), sets and clears the kNoSync flag in their headers, and
// unlocks and closes them.
//
// Thread-safety: none needed: Open and Mark run while no I/O lane uses the
// files (SsdTier's Open, and its destructor after the reapers stopped); the
// accessors read what Open fixed, from any thread.
#ifndef MOONCAKE_TIER_INTERNAL_SSD_FILE_SET_H_
#define MOONCAKE_TIER_INTERNAL_SSD_FILE_SET_H_

#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/tier/internal/ssd_file.h"
#include "mooncake/tier/internal/ssd_format.h"

namespace mooncake::tier_internal {

struct SsdFileSetOptions {
  std::vector<std::string> paths;
  bool start_empty = false;              // see SsdTierOptions
  uint64_t capacity_bytes_per_file = 0;  // 0: existing files, taken from their headers
  bool allow_buffered_fallback = true;
};

class SsdFileSet {
 public:
  SsdFileSet() = default;
  ~SsdFileSet() { Close(); }
  SsdFileSet(const SsdFileSet&) = delete;
  SsdFileSet& operator=(const SsdFileSet&) = delete;

  // Creates the files (none exists, or start_empty) or opens the existing set; see
  // SsdTierOptions::paths and start_empty. REQUIRES: called once.
  absl::Status Open(const SsdFileSetOptions& o) {
    MC_ASSERT(files_.empty(), "SsdFileSet::Open twice");
    paths_ = o.paths;
    const size_t n = o.paths.size();
    size_t existing = 0;
    for (const std::string& path : o.paths) existing += ::access(path.c_str(), F_OK) == 0;
    if (o.start_empty) {
      RETURN_IF_ERROR(UnlinkReplaceable(o.paths));
      existing = 0;
    }
    if (existing != 0 && existing != n) {
      return absl::FailedPreconditionError(absl::StrCat(
          "SsdTier: ", existing, " of ", n,
          " files exist; a tier's files are created together, so remove the partial set or "
          "name all of them"));
    }
    if (existing == 0 && o.capacity_bytes_per_file == 0) {
      return absl::InvalidArgumentError(
          "SsdTierOptions.capacity_bytes_per_file is required to create new files");
    }
    std::random_device rd;
    const uint64_t set_id =
        (uint64_t{rd()} << 32) ^ rd() ^
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    for (size_t i = 0; i < n; ++i) {
      absl::StatusOr<OpenFile> f;
      if (existing == 0) {
        FileHeader h{o.capacity_bytes_per_file, set_id, static_cast<uint32_t>(i),
                     static_cast<uint32_t>(n)};
        f = CreateFile(o.paths[i], h, o.allow_buffered_fallback);
      } else {
        f = OpenExisting(o.paths[i], o.allow_buffered_fallback);
      }
      if (!f.ok()) return f.status();
      files_.push_back(*f);
      const FileHeader& h = f->header;
      if (h.file_index != i || h.file_count != n || h.set_id != files_[0].header.set_id) {
        return absl::FailedPreconditionError(absl::StrCat(
            o.paths[i], " belongs to another tier or position (file ", h.file_index, " of ",
            h.file_count, ", set ", h.set_id, "); expected file ", i, " of ", n));
      }
      if (o.capacity_bytes_per_file != 0 && h.capacity_bytes != o.capacity_bytes_per_file) {
        return absl::FailedPreconditionError(
            absl::StrCat(o.paths[i], " holds ", h.capacity_bytes, " bytes but the options say ",
                         o.capacity_bytes_per_file, "; pass 0 to take the files' size"));
      }
      direct_io_ = direct_io_ && f->direct_io;
      fds_.push_back(f->fd);
      usable_bytes_ += h.capacity_bytes - kBlockBytes;
    }
    created_ = existing == 0;
    return absl::OkStatus();
  }

  // Sets (with `boot_id`) or clears every file header's kFileFlagUnsynced. A file is synced
  // before its flag is cleared: what a kNoSync run wrote must be durable before the file
  // stops saying it may not be. REQUIRES: boot_id when setting.
  absl::Status Mark(bool unsynced, const std::optional<BootId>& boot_id) {
    MC_ASSERT(!unsynced || boot_id.has_value(), "marking files unsynced needs a boot id");
    for (uint32_t i = 0; i < files_.size(); ++i) {
      OpenFile& f = files_[i];
      FileHeader h = f.header;
      h.flags = unsynced ? kFileFlagUnsynced : 0;
      h.boot_id = unsynced ? *boot_id : BootId{};
      if (h == f.header) continue;
      if (!unsynced && ::fdatasync(f.fd) != 0) {
        return ErrnoToStatus(errno, absl::StrCat("fdatasync ", paths_[i]));
      }
      // Synced (by RewriteFileHeader) before any write since this open is acknowledged.
      RETURN_IF_ERROR(RewriteFileHeader(f.fd, h));
      f.header = h;
    }
    return absl::OkStatus();
  }

  // Unlocks and closes every file (also the destructor's). Unlocks explicitly: rings that
  // registered the files drop their references asynchronously, which would keep the flock
  // held for a moment.
  void Close() {
    for (OpenFile& f : files_) {
      if (f.fd >= 0) ::flock(f.fd, LOCK_UN);
      CloseFd(f.fd);
      f.fd = -1;
    }
  }

  uint32_t size() const { return static_cast<uint32_t>(files_.size()); }
  int fd(uint32_t i) const { return files_[i].fd; }
  const FileHeader& header(uint32_t i) const { return files_[i].header; }
  const std::vector<int>& fds() const { return fds_; }
  const std::string& path(uint32_t i) const { return paths_[i]; }
  // Usable bytes of file i (after its header block).
  uint64_t usable_bytes(uint32_t i) const { return files_[i].header.capacity_bytes - kBlockBytes; }
  uint64_t usable_bytes() const { return usable_bytes_; }  // of every file
  bool direct_io() const { return direct_io_; }
  bool created() const { return created_; }  // new files: nothing to recover

 private:
  // start_empty: every old file is checked and locked before any is touched; then all are
  // unlinked and closed, so their space is free before the new files claim theirs. (The
  // close is where the filesystem frees the extents: ~0.6 s per written GiB on the ext4
  // here, mounted with discard. Freeing them in the background gains nothing there: the
  // new files' fallocate waits for it.)
  static absl::Status UnlinkReplaceable(const std::vector<std::string>& paths) {
    struct Locked {
      std::vector<std::pair<const std::string*, int>> files;
      ~Locked() {
        for (const auto& [path, fd] : files) ::close(fd);
      }
    } old;
    for (const std::string& path : paths) {
      if (::access(path.c_str(), F_OK) != 0) continue;
      ASSIGN_OR_RETURN(int fd, LockReplaceable(path));
      old.files.emplace_back(&path, fd);
    }
    for (const auto& [path, fd] : old.files) {
      if (::unlink(path->c_str()) != 0 && errno != ENOENT) {
        return ErrnoToStatus(errno, absl::StrCat("unlink ", *path));
      }
    }
    return absl::OkStatus();
  }

  std::vector<std::string> paths_;
  std::vector<OpenFile> files_;
  std::vector<int> fds_;
  uint64_t usable_bytes_ = 0;
  bool direct_io_ = true;
  bool created_ = false;
};

}  // namespace mooncake::tier_internal

#endif  // MOONCAKE_TIER_INTERNAL_SSD_FILE_SET_H_
