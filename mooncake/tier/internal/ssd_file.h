// Opening, creating and scanning SsdTier files (format: ssd_format.h).
//
// Creation is atomic per file: a temporary file is preallocated, given its
// header, synced and renamed into place, so a crash never leaves a file with a
// torn header. Scanning reads a file once, front to back, with synchronous
// preads in large windows; it is used only by SsdTier::Open.
//
// Thread-safety: free functions; a ScanFile call owns its buffers.
#ifndef MOONCAKE_TIER_INTERNAL_SSD_FILE_H_
#define MOONCAKE_TIER_INTERNAL_SSD_FILE_H_

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fast_hash.h"
#include "mooncake/base/hash.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/tier/internal/ssd_format.h"
#include "mooncake/tier/internal/uring.h"

namespace mooncake::tier_internal {

struct OpenFile {
  int fd = -1;
  bool direct_io = true;
  FileHeader header;
};

inline void CloseFd(int fd) {
  if (fd >= 0) ::close(fd);
}

// pread/pwrite of a whole range, retrying short transfers and EINTR.
inline absl::Status PreadFull(int fd, std::byte* buf, uint64_t len, uint64_t off) {
  while (len > 0) {
    const ssize_t n = ::pread(fd, buf, len, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, "pread");
    if (n == 0) return absl::DataLossError(absl::StrCat("unexpected end of file at ", off));
    buf += n;
    len -= static_cast<uint64_t>(n);
    off += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

inline absl::Status PwriteFull(int fd, const std::byte* buf, uint64_t len, uint64_t off) {
  while (len > 0) {
    const ssize_t n = ::pwrite(fd, buf, len, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, "pwrite");
    buf += n;
    len -= static_cast<uint64_t>(n);
    off += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

// Takes an exclusive flock on `fd` (the file at `path`), so that two tiers never share a
// file. A process killed a moment ago may still hold the lock through its io_uring
// instance, which the kernel tears down asynchronously: retry for up to about a second
// before calling the file busy.
inline absl::Status LockExclusive(int fd, const std::string& path) {
  int rc = ::flock(fd, LOCK_EX | LOCK_NB);
  for (int tries = 0; rc != 0 && errno == EWOULDBLOCK && tries < 200; ++tries) {
    ::usleep(5000);
    rc = ::flock(fd, LOCK_EX | LOCK_NB);
  }
  if (rc == 0) return absl::OkStatus();
  const int err = errno;
  if (err == EWOULDBLOCK) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is in use by another SsdTier (flock); give each tier its own files"));
  }
  return ErrnoToStatus(err, "flock");
}

// Opens with O_DIRECT, falling back to buffered I/O (logged) where the
// filesystem refuses it, and takes an exclusive lock so that two tiers never
// share a file.
inline absl::StatusOr<OpenFile> OpenLocked(const std::string& path, int extra_flags,
                                           bool allow_buffered) {
  OpenFile f;
  f.fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_DIRECT | extra_flags, 0644);
  if (f.fd < 0 && errno == EINVAL && allow_buffered) {
    std::fprintf(stderr, "SsdTier: O_DIRECT refused on %s; using buffered I/O\n", path.c_str());
    f.direct_io = false;
    f.fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | extra_flags, 0644);
  }
  if (f.fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  if (absl::Status s = LockExclusive(f.fd, path); !s.ok()) {
    CloseFd(f.fd);
    return s;
  }
  return f;
}

inline std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

inline absl::Status SyncDir(const std::string& path) {
  const int dfd = ::open(DirName(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return ErrnoToStatus(errno, "open directory");
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  return rc == 0 ? absl::OkStatus() : ErrnoToStatus(err, "fsync directory");
}

// Creates `path` atomically: preallocated to header.capacity_bytes, header
// written and synced, then renamed into place.
inline absl::StatusOr<OpenFile> CreateFile(const std::string& path, const FileHeader& header,
                                           bool allow_buffered) {
  const std::string tmp = path + ".tmp";
  absl::StatusOr<OpenFile> f = OpenLocked(tmp, O_CREAT | O_TRUNC, allow_buffered);
  if (!f.ok()) return f.status();
  auto fail = [&](absl::Status s) {
    CloseFd(f->fd);
    ::unlink(tmp.c_str());
    return s;
  };
  if (::fallocate(f->fd, 0, 0, static_cast<off_t>(header.capacity_bytes)) != 0) {
    const int err = errno;
    if (err != EOPNOTSUPP) {
      return fail(ErrnoToStatus(
          err, absl::StrCat("preallocating ", header.capacity_bytes, " bytes for ", path)));
    }
    if (::ftruncate(f->fd, static_cast<off_t>(header.capacity_bytes)) != 0) {
      return fail(ErrnoToStatus(errno, "ftruncate"));
    }
  }
  AlignedBytes block = AllocateAligned(kBlockBytes, kBlockBytes);
  EncodeFileHeader(header, std::span<std::byte>(block.get(), kBlockBytes));
  if (absl::Status s = PwriteFull(f->fd, block.get(), kBlockBytes, 0); !s.ok()) return fail(s);
  if (::fdatasync(f->fd) != 0) return fail(ErrnoToStatus(errno, "fdatasync"));
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail(ErrnoToStatus(errno, "rename"));
  if (absl::Status s = SyncDir(path); !s.ok()) {
    CloseFd(f->fd);
    return s;
  }
  f->header = header;
  return f;
}

// Checks that `path`, which exists, may be replaced by a new SsdTier file:
// a regular file that starts with the file magic (an SsdTier file, whatever its
// state) and that no open tier holds (flock). Returns its descriptor, still
// locked, for the caller to unlink the path and then close it; anything else
// is refused, so a mistyped path never destroys a file that is not ours.
inline absl::StatusOr<int> LockReplaceable(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoToStatus(errno, absl::StrCat("stat ", path));
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is not a regular file; an SsdTier keeps its records in regular files"));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  char magic[sizeof(kFileMagic)] = {};
  ssize_t n = 0;
  do {
    n = ::pread(fd, magic, sizeof(magic), 0);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof(magic)) ||
      std::memcmp(magic, kFileMagic, sizeof(magic)) != 0) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        path,
        " exists and is not an SsdTier file; refusing to replace it (remove it or name "
        "another path)"));
  }
  if (absl::Status s = LockExclusive(fd, path); !s.ok()) {
    ::close(fd);
    return s;
  }
  return fd;
}

// Writes `header` over block 0 and syncs it. The 64 header bytes lie in the
// block's first sector, which the device writes whole.
inline absl::Status RewriteFileHeader(int fd, const FileHeader& header) {
  AlignedBytes block = AllocateAligned(kBlockBytes, kBlockBytes);
  EncodeFileHeader(header, std::span<std::byte>(block.get(), kBlockBytes));
  RETURN_IF_ERROR(PwriteFull(fd, block.get(), kBlockBytes, 0));
  if (::fdatasync(fd) != 0) return ErrnoToStatus(errno, "fdatasync of the file header");
  return absl::OkStatus();
}

// The running kernel's boot id (a UUID, new at every boot) from `path`
// (normally /proc/sys/kernel/random/boot_id); nullopt when it cannot be read
// or parsed.
inline std::optional<BootId> ReadBootId(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char text[64] = {};
  const ssize_t n = ::read(fd, text, sizeof(text) - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  BootId id{};
  size_t digits = 0;
  for (ssize_t i = 0; i < n && text[i] != '\n'; ++i) {
    const char c = text[i];
    if (c == '-') continue;
    int v = -1;
    if (c >= '0' && c <= '9') v = c - '0';
    if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    if (v < 0 || digits == 2 * id.size()) return std::nullopt;
    id[digits / 2] = static_cast<uint8_t>(id[digits / 2] << 4 | v);
    ++digits;
  }
  if (digits != 2 * id.size() || id == BootId{}) return std::nullopt;
  return id;
}

inline absl::StatusOr<OpenFile> OpenExisting(const std::string& path, bool allow_buffered) {
  absl::StatusOr<OpenFile> f = OpenLocked(path, 0, allow_buffered);
  if (!f.ok()) return f.status();
  AlignedBytes block = AllocateAligned(kBlockBytes, kBlockBytes);
  absl::Status s = PreadFull(f->fd, block.get(), kBlockBytes, 0);
  absl::StatusOr<FileHeader> h =
      s.ok() ? DecodeFileHeader(std::span<const std::byte>(block.get(), kBlockBytes))
             : absl::StatusOr<FileHeader>(s);
  struct stat st {};
  const bool stat_ok = ::fstat(f->fd, &st) == 0;
  if (stat_ok && !S_ISREG(st.st_mode)) {
    h = absl::FailedPreconditionError(
        "not a regular file; an SsdTier keeps its records in regular files");
  } else if (h.ok() && (!stat_ok || static_cast<uint64_t>(st.st_size) < h->capacity_bytes)) {
    h = absl::DataLossError(absl::StrCat(path, " is shorter than its header's capacity"));
  }
  if (!h.ok()) {
    CloseFd(f->fd);
    return absl::Status(h.status().code(), absl::StrCat(path, ": ", h.status().message()));
  }
  f->header = *h;
  return f;
}

struct ScannedRecord {
  uint32_t file = 0;
  uint64_t offset = 0;  // of the header block, from the start of the file
  RecordHeader header;
  std::string key;
};

// Reads a file front to back and returns every record whose header and
// payload checksums verify. Blocks that hold no valid header are skipped one
// at a time; `corrupt` counts valid headers whose payload failed its checksum
// (torn or damaged records), which are skipped too.
class FileScanner {
 public:
  static constexpr uint64_t kWindowBytes = 4 << 20;

  FileScanner(int fd, uint64_t capacity) : fd_(fd), capacity_(capacity) {
    // A file smaller than the window needs no more than its own size.
    window_ = AllocateAligned(std::min(kWindowBytes, capacity), kBlockBytes);
  }

  absl::Status Scan(uint32_t file, std::vector<ScannedRecord>& out, uint64_t& corrupt) {
    uint64_t off = kBlockBytes;
    while (off + kBlockBytes <= capacity_) {
      const std::byte* block = nullptr;
      if (absl::Status s = At(off, block); !s.ok()) return s;
      std::optional<DecodedRecord> rec =
          DecodeRecordHeader(std::span<const std::byte>(block, kBlockBytes));
      if (!rec || off + RecordBytes(rec->header.stored_bytes) > capacity_) {
        off += kBlockBytes;
        continue;
      }
      ScannedRecord r{file, off, rec->header, std::string(rec->key)};
      uint64_t digest = 0;
      if (absl::Status s = HashRange(off + kBlockBytes, r.header.stored_bytes, digest); !s.ok()) {
        return s;
      }
      if (digest != r.header.payload_checksum) {
        ++corrupt;
        off += kBlockBytes;
        continue;
      }
      off += RecordBytes(r.header.stored_bytes);
      out.push_back(std::move(r));
    }
    return absl::OkStatus();
  }

 private:
  // Points `block` at file bytes [off, off + kBlockBytes), loading a window.
  absl::Status At(uint64_t off, const std::byte*& block) {
    if (off < base_ || off + kBlockBytes > base_ + len_) {
      base_ = off;
      len_ = std::min(kWindowBytes, capacity_ - off);
      if (absl::Status s = PreadFull(fd_, window_.get(), len_, base_); !s.ok()) {
        len_ = 0;
        return s;
      }
    }
    block = window_.get() + (off - base_);
    return absl::OkStatus();
  }

  absl::Status HashRange(uint64_t off, uint64_t len, uint64_t& digest) {
    FastStableHasher64 state;
    while (len > 0) {
      const uint64_t block_off = off / kBlockBytes * kBlockBytes;
      const std::byte* p = nullptr;
      if (absl::Status s = At(block_off, p); !s.ok()) return s;
      const uint64_t avail = base_ + len_ - off;
      const uint64_t n = std::min(avail, len);
      state.Update(window_.get() + (off - base_), n);
      off += n;
      len -= n;
    }
    digest = state.Digest();
    return absl::OkStatus();
  }

  int fd_;
  uint64_t capacity_;
  AlignedBytes window_;
  uint64_t base_ = 0;
  uint64_t len_ = 0;
};

}  // namespace mooncake::tier_internal

#endif  // MOONCAKE_TIER_INTERNAL_SSD_FILE_H_
