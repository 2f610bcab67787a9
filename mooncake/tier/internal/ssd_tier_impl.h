// SsdTier's member functions (declared in ssd_tier.h). Part of ssd_tier.h:
// include that header, not this one.
#ifndef MOONCAKE_TIER_INTERNAL_SSD_TIER_IMPL_H_
#define MOONCAKE_TIER_INTERNAL_SSD_TIER_IMPL_H_

#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/tier/ssd_tier.h"

namespace mooncake::tier {
namespace ssd_tier_internal {

using tier_internal::kBlockBytes;
using tier_internal::RecordBytes;
using tier_internal::RoundUpToBlock;

inline absl::Status ValidateOptions(const SsdTierOptions& o) {
  if (o.paths.empty() || o.paths.size() > 64) {
    return absl::InvalidArgumentError("SsdTierOptions.paths must name 1 to 64 files");
  }
  if (o.start_empty && o.capacity_bytes_per_file == 0) {
    return absl::InvalidArgumentError(
        "SsdTierOptions.start_empty needs capacity_bytes_per_file (the new files' size)");
  }
  if (o.lanes < 1 || o.lanes > 64) {
    return absl::InvalidArgumentError("SsdTierOptions.lanes must be in [1, 64]");
  }
  if (o.codec_threads > static_cast<uint32_t>(compress::kMaxCodecThreads)) {
    return absl::InvalidArgumentError(absl::StrCat("SsdTierOptions.codec_threads must be in [0, ",
                                                   compress::kMaxCodecThreads, "]"));
  }
  if (o.ring_entries < 8 || o.ring_entries > 4096) {
    return absl::InvalidArgumentError("SsdTierOptions.ring_entries must be in [8, 4096]");
  }
  if (o.io_chunk_bytes < kBlockBytes || o.io_chunk_bytes > (64u << 20) ||
      o.io_chunk_bytes % kBlockBytes != 0) {
    return absl::InvalidArgumentError(
        "SsdTierOptions.io_chunk_bytes must be a multiple of 4096 in [4 KiB, 64 MiB]");
  }
  if (o.compressed_read_piece_bytes < kBlockBytes || o.compressed_read_piece_bytes > (64u << 20) ||
      o.compressed_read_piece_bytes % kBlockBytes != 0) {
    return absl::InvalidArgumentError(
        "SsdTierOptions.compressed_read_piece_bytes must be a multiple of 4096 in [4 KiB, 64 MiB]");
  }
  if (absl::Status s = compress::ValidateChunkBytes(o.codec_chunk_bytes); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SsdTierOptions.codec_chunk_bytes: ", s.message()));
  }
  const uint64_t cap = o.capacity_bytes_per_file;
  if (cap != 0 && (cap % kBlockBytes != 0 || cap < 16 * kBlockBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SsdTierOptions.capacity_bytes_per_file must be 0 (existing files) or a multiple of "
        "4096 of at least 64 KiB, got ",
        cap));
  }
  if (o.device_read_bytes_per_s < 0 || o.device_write_bytes_per_s < 0) {
    return absl::InvalidArgumentError("device bandwidths must be >= 0");
  }
  if (o.durability != Durability::kPowerLoss && o.durability != Durability::kProcessCrash &&
      o.durability != Durability::kNoSync) {
    return absl::InvalidArgumentError("SsdTierOptions.durability is not a Durability");
  }
  if (o.background_sync_ms > 60000) {
    return absl::InvalidArgumentError("SsdTierOptions.background_sync_ms must be at most 60000");
  }
  return absl::OkStatus();
}

inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Thread-seconds of the codec call that began at t0: its wall time (floored, so a coarse
// clock gives no infinite speed) times the threads that ran it.
template <typename Codec>
double CodecThreadSeconds(std::chrono::steady_clock::time_point t0, const Codec& codec) {
  return std::max(SecondsSince(t0), 1e-9) * codec.last_call_threads();
}

inline double Ewma(bool has_old, double old_value, double sample) {
  return has_old ? 0.8 * old_value + 0.2 * sample : sample;
}

}  // namespace ssd_tier_internal

inline absl::StatusOr<std::unique_ptr<SsdTier>> SsdTier::Open(SsdTierOptions options) {
  RETURN_IF_ERROR(ssd_tier_internal::ValidateOptions(options));
  std::unique_ptr<SsdTier> tier(new SsdTier(std::move(options)));
  // Before any file is created or touched.
  tier->boot_id_ = tier_internal::ReadBootId(tier->options_.boot_id_path);
  if (tier->options_.durability == Durability::kNoSync && !tier->boot_id_) {
    return absl::FailedPreconditionError(
        absl::StrCat("SsdTier: Durability::kNoSync needs the kernel's boot id, which ",
                     tier->options_.boot_id_path, " does not give; use kProcessCrash"));
  }
  RETURN_IF_ERROR(tier->OpenFiles());
  RETURN_IF_ERROR(tier->Recover());
  RETURN_IF_ERROR(tier->MarkFiles(tier->options_.durability == Durability::kNoSync));
  tier->files_marked_ = true;
  RETURN_IF_ERROR(tier->StartLanes());
  tier->ProbeDevice();
  return tier;
}

inline SsdTier::~SsdTier() {
  // A background sync must not keep the close waiting for its timeout (up to 60 s).
  hurry_syncs_.store(true);
  NotifyReapers(&Lane::hurry);
  {
    std::unique_lock<std::mutex> lock(inflight_mu_);
    inflight_cv_.wait(lock, [&] { return inflight_ == 0; });
  }
  closing_.store(true, std::memory_order_release);
  NotifyReapers(&Lane::stop);
  for (auto& lane : lanes_) {
    if (lane->reaper.joinable()) lane->reaper.join();
  }
  // Only a tier that marked its files clears the flag: a failed Open must leave a flag
  // that an earlier open of the file left (its records not yet discarded or synced) as it was.
  if (options_.durability == Durability::kNoSync && files_marked_) {
    if (absl::Status s = MarkFiles(false); !s.ok()) {
      // A flag stays: a reopen in this boot recovers, one after a reboot discards.
      std::fprintf(stderr, "SsdTier: closing: %s\n", std::string(s.message()).c_str());
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    index_.clear();
  }
  lanes_.clear();
  // Unlock explicitly: rings that registered the files drop their references
  // asynchronously, which would keep the flock held for a moment.
  for (File& f : files_) {
    if (f.open.fd >= 0) ::flock(f.open.fd, LOCK_UN);
    tier_internal::CloseFd(f.open.fd);
  }
}

inline void SsdTier::NotifyReapers(Io Lane::*marker) {
  for (auto& lane : lanes_) {
    if (!lane->reaper.joinable()) continue;
    std::lock_guard<std::mutex> lock(lane->sq_mu);
    io_uring_sqe* sqe = lane->ring.Sqe();
    io_uring_prep_nop(sqe);
    lane->ring.SetData(sqe, &((*lane).*marker));
    lane->ring.Submit();
  }
}

inline absl::Status SsdTier::OpenFiles() {
  const size_t n = options_.paths.size();
  size_t existing = 0;
  for (const std::string& path : options_.paths) existing += ::access(path.c_str(), F_OK) == 0;
  if (options_.start_empty) {
    // Every old file is checked and locked before any is touched; then all are unlinked
    // and closed, so their space is free before the new files claim theirs. (The close is
    // where the filesystem frees the extents: ~0.6 s per written GiB on the ext4 here,
    // mounted with discard. Freeing them in the background gains nothing there: the new
    // files' fallocate waits for it.)
    struct Locked {
      std::vector<std::pair<const std::string*, int>> files;
      ~Locked() {
        for (const auto& [path, fd] : files) ::close(fd);
      }
    } old;
    for (const std::string& path : options_.paths) {
      if (::access(path.c_str(), F_OK) != 0) continue;
      ASSIGN_OR_RETURN(int fd, tier_internal::LockReplaceable(path));
      old.files.emplace_back(&path, fd);
    }
    for (const auto& [path, fd] : old.files) {
      if (::unlink(path->c_str()) != 0 && errno != ENOENT) {
        return ErrnoToStatus(errno, absl::StrCat("unlink ", *path));
      }
    }
    existing = 0;
  }
  if (existing != 0 && existing != n) {
    return absl::FailedPreconditionError(absl::StrCat(
        "SsdTier: ", existing, " of ", n,
        " files exist; a tier's files are created together, so remove the partial set or "
        "name all of them"));
  }
  if (existing == 0 && options_.capacity_bytes_per_file == 0) {
    return absl::InvalidArgumentError(
        "SsdTierOptions.capacity_bytes_per_file is required to create new files");
  }
  std::random_device rd;
  const uint64_t set_id =
      (uint64_t{rd()} << 32) ^ rd() ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  files_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    absl::StatusOr<tier_internal::OpenFile> f;
    if (existing == 0) {
      tier_internal::FileHeader h{options_.capacity_bytes_per_file, set_id,
                                  static_cast<uint32_t>(i), static_cast<uint32_t>(n)};
      f = tier_internal::CreateFile(options_.paths[i], h, options_.allow_buffered_fallback);
    } else {
      f = tier_internal::OpenExisting(options_.paths[i], options_.allow_buffered_fallback);
    }
    if (!f.ok()) return f.status();
    files_[i].open = *f;
    const tier_internal::FileHeader& h = f->header;
    if (h.file_index != i || h.file_count != n || h.set_id != files_[0].open.header.set_id) {
      return absl::FailedPreconditionError(absl::StrCat(
          options_.paths[i], " belongs to another tier or position (file ", h.file_index, " of ",
          h.file_count, ", set ", h.set_id, "); expected file ", i, " of ", n));
    }
    if (options_.capacity_bytes_per_file != 0 &&
        h.capacity_bytes != options_.capacity_bytes_per_file) {
      return absl::FailedPreconditionError(absl::StrCat(
          options_.paths[i], " holds ", h.capacity_bytes, " bytes but the options say ",
          options_.capacity_bytes_per_file, "; pass 0 to take the files' size"));
    }
    info_.direct_io = info_.direct_io && f->direct_io;
    fds_.push_back(f->fd);
    capacity_bytes_ += h.capacity_bytes - tier_internal::kBlockBytes;
  }
  files_created_ = existing == 0;
  return absl::OkStatus();
}

inline absl::Status SsdTier::Recover() {
  // Files a kNoSync tier left open: in this boot its process died and the kernel still
  // holds (or has written) every block it wrote (MarkFiles syncs them before it clears the
  // flag); after a reboot any block may have been reverted to an older state, so nothing
  // in them can be trusted.
  bool discard = false;
  for (const File& f : files_) {
    if ((f.open.header.flags & tier_internal::kFileFlagUnsynced) == 0) continue;
    discard = discard || !boot_id_ || f.open.header.boot_id != *boot_id_;
  }
  std::vector<tier_internal::ScannedRecord> all;
  uint64_t corrupt = 0;
  // New files hold no record (a fresh inode, preallocated): no need to read them.
  for (uint32_t i = 0; i < files_.size() && !files_created_; ++i) {
    tier_internal::FileScanner scanner(files_[i].open.fd, files_[i].open.header.capacity_bytes);
    RETURN_IF_ERROR(scanner.Scan(i, all, corrupt));
  }
  // The newest valid record of each key wins; older ones are zeroed so that a
  // later removal of the winner cannot bring them back. Discarded records are
  // all zeroed (their sequence numbers still count: new ones go above them).
  absl::flat_hash_map<std::string_view, size_t> best;
  std::vector<size_t> losers;
  uint64_t max_sequence = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    max_sequence = std::max(max_sequence, all[i].header.sequence);
    if (discard) {
      losers.push_back(i);
      continue;
    }
    auto [it, fresh] = best.try_emplace(all[i].key, i);
    if (fresh) continue;
    size_t& winner = it->second;
    if (all[winner].header.sequence < all[i].header.sequence) {
      losers.push_back(winner);
      winner = i;
    } else {
      losers.push_back(i);
    }
  }
  tier_internal::AlignedBytes zero =
      tier_internal::AllocateAligned(tier_internal::kBlockBytes, tier_internal::kBlockBytes);
  std::vector<bool> dirty(files_.size(), false);
  for (size_t i : losers) {
    RETURN_IF_ERROR(tier_internal::PwriteFull(files_[all[i].file].open.fd, zero.get(),
                                              tier_internal::kBlockBytes, all[i].offset));
    dirty[all[i].file] = true;
  }
  for (uint32_t f = 0; f < files_.size(); ++f) {
    if (dirty[f] && ::fdatasync(files_[f].open.fd) != 0) {
      return ErrnoToStatus(errno, "fdatasync after recovery");
    }
  }
  info_.recovered_corrupt = corrupt;
  (discard ? info_.recovered_discarded : info_.recovered_superseded) = losers.size();
  counters_.corrupt_records.store(corrupt);
  next_sequence_ = max_sequence + 1;
  // Per file, winners in address order, to rebuild the allocator's layout.
  std::vector<std::vector<size_t>> by_file(files_.size());
  for (const auto& [key, i] : best) by_file[all[i].file].push_back(i);
  for (uint32_t f = 0; f < files_.size(); ++f) {
    std::vector<size_t>& v = by_file[f];
    std::sort(v.begin(), v.end(),
              [&](size_t a, size_t b) { return all[a].offset < all[b].offset; });
    std::vector<uint64_t> offsets, sizes;
    for (size_t i : v) {
      offsets.push_back(all[i].offset - tier_internal::kBlockBytes);
      sizes.push_back(tier_internal::RecordBytes(all[i].header.stored_bytes));
    }
    std::vector<alloc::Allocation> extents;
    RETURN_IF_ERROR(RebuildAllocator(f, extents, offsets, sizes));
    for (size_t k = 0; k < v.size(); ++k) {
      tier_internal::ScannedRecord& s = all[v[k]];
      RecordPtr r = MakeRecord();
      r->key = s.key;
      r->file = f;
      r->extent = extents[k];
      r->header = s.header;
      counters_.used_bytes += extents[k].size;
      counters_.raw_bytes += s.header.raw_bytes;
      index_.emplace(s.key, std::move(r));
    }
  }
  counters_.recovered_objects.store(index_.size());
  return absl::OkStatus();
}

inline absl::Status SsdTier::MarkFiles(bool unsynced) {
  for (uint32_t i = 0; i < files_.size(); ++i) {
    File& f = files_[i];
    tier_internal::FileHeader h = f.open.header;
    h.flags = unsynced ? tier_internal::kFileFlagUnsynced : 0;
    h.boot_id = unsynced ? *boot_id_ : tier_internal::BootId{};  // Open checked boot_id_
    if (h == f.open.header) continue;
    if (!unsynced && ::fdatasync(f.open.fd) != 0) {
      return ErrnoToStatus(errno, absl::StrCat("fdatasync ", options_.paths[i]));
    }
    // Synced (by RewriteFileHeader) before any write since this open is acknowledged.
    RETURN_IF_ERROR(tier_internal::RewriteFileHeader(f.open.fd, h));
    f.open.header = h;
  }
  return absl::OkStatus();
}

// The Allocator concept has no "reserve this offset" call, so the layout is
// rebuilt through a property of a fresh TLSF allocator: with a single free
// extent, allocate() carves from its start. Gaps are allocated as fillers and
// freed at the end; every offset is checked.
inline absl::Status SsdTier::RebuildAllocator(uint32_t file,
                                              std::vector<alloc::Allocation>& extents,
                                              const std::vector<uint64_t>& offsets,
                                              const std::vector<uint64_t>& sizes) {
  const uint64_t cap = files_[file].open.header.capacity_bytes - tier_internal::kBlockBytes;
  files_[file].alloc.emplace(
      alloc::TlsfOptions{.capacity_bytes = cap, .granularity_bytes = tier_internal::kBlockBytes});
  alloc::TlsfAllocator& a = *files_[file].alloc;
  std::vector<alloc::Allocation> fillers;
  uint64_t cursor = 0;
  auto take = [&](uint64_t at, uint64_t size) -> absl::StatusOr<alloc::Allocation> {
    std::optional<alloc::Allocation> got = a.allocate(size, tier_internal::kBlockBytes);
    if (!got || got->offset != at) {
      return absl::InternalError(absl::StrCat("SsdTier recovery: allocator could not reserve [", at,
                                              ", +", size, ") of file ", file));
    }
    return *got;
  };
  for (size_t k = 0; k < offsets.size(); ++k) {
    if (offsets[k] > cursor) {
      ASSIGN_OR_RETURN(alloc::Allocation filler, take(cursor, offsets[k] - cursor));
      fillers.push_back(filler);
    }
    ASSIGN_OR_RETURN(alloc::Allocation extent, take(offsets[k], sizes[k]));
    extents.push_back(extent);
    cursor = offsets[k] + sizes[k];
  }
  for (const alloc::Allocation& f : fillers) a.free(f);
  return absl::OkStatus();
}

inline absl::Status SsdTier::StartLanes() {
  zero_block_ =
      tier_internal::AllocateAligned(tier_internal::kBlockBytes, tier_internal::kBlockBytes);
  usable_cpus_ = UsableCpuCount();
  info_.durability = options_.durability;
  info_.codec_threads =
      options_.codec_threads != 0
          ? options_.codec_threads
          : static_cast<uint32_t>(std::min(usable_cpus_, compress::kMaxCodecThreads));
  codec_helpers_ = std::make_unique<ForkJoinPool>(static_cast<int>(info_.codec_threads) - 1);
  for (uint32_t i = 0; i < options_.lanes; ++i) {
    auto lane = std::make_unique<Lane>(CodecOptions());
    RETURN_IF_ERROR(lane->ring.Init(options_.ring_entries));
    if (options_.register_files) {
      // Every lane registers the same table, or none does (fds in SQEs must
      // mean the same thing on every lane).
      if (absl::Status s = lane->ring.RegisterFiles(fds_); !s.ok()) {
        if (i != 0) return s;
        options_.register_files = false;
      }
    }
    if (options_.bounce_arena_bytes >= tier_internal::kBlockBytes) {
      const uint64_t bytes =
          options_.bounce_arena_bytes / tier_internal::kBlockBytes * tier_internal::kBlockBytes;
      lane->arena = tier_internal::AllocateAligned(bytes, tier_internal::kBlockBytes);
      lane->arena_alloc.emplace(alloc::TlsfOptions{
          .capacity_bytes = bytes, .granularity_bytes = tier_internal::kBlockBytes});
      lane->arena_registered =
          options_.register_buffers && lane->ring.RegisterBuffer(lane->arena.get(), bytes).ok();
    }
    lane->sync.resize(files_.size());
    for (uint32_t f = 0; f < files_.size(); ++f) {
      lane->sync[f].io.file = f;
      lane->sync[f].io.index = f;
      lane->sync[f].io.lane = i;
      lane->sync[f].timer_io = lane->sync[f].io;
      lane->sync[f].timer_io.kind = Io::Kind::kTimer;
    }
    lane->stop = Io{.lane = i, .kind = Io::Kind::kStop};
    lane->hurry = Io{.lane = i, .kind = Io::Kind::kHurry};
    lane->cancelled = Io{.lane = i, .kind = Io::Kind::kIgnored};
    lanes_.push_back(std::move(lane));
  }
  for (uint32_t i = 0; i < lanes_.size(); ++i) {
    lanes_[i]->reaper = std::thread([this, i] { ReapLoop(i); });
  }
  return absl::OkStatus();
}

// Measures the device with a short QD1 write+fdatasync and read of up to
// 64 MiB of free space in file 0 (zeros: no valid record header). Too little
// free space: 1 GB/s is assumed (info() shows the figures used).
inline void SsdTier::ProbeDevice() {
  info_.device_read_bytes_per_s = options_.device_read_bytes_per_s;
  info_.device_write_bytes_per_s = options_.device_write_bytes_per_s;
  if (info_.device_read_bytes_per_s > 0 && info_.device_write_bytes_per_s > 0) return;
  constexpr uint64_t kPiece = 1 << 20;
  std::optional<alloc::Allocation> probe;
  uint64_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(alloc_mu_);
    alloc::TlsfAllocator& a = *files_[0].alloc;
    bytes = std::min<uint64_t>(64 << 20, a.stats().largest_free_bytes / 2) / kPiece * kPiece;
    if (bytes >= 4 * kPiece) probe = a.allocate(bytes, tier_internal::kBlockBytes);
  }
  double read_bw = 1e9, write_bw = 1e9;
  if (probe) {
    const int fd = files_[0].open.fd;
    const uint64_t base = tier_internal::kBlockBytes + probe->offset;
    tier_internal::AlignedBytes buf =
        tier_internal::AllocateAligned(kPiece, tier_internal::kBlockBytes);
    auto t0 = std::chrono::steady_clock::now();
    bool ok = true;
    for (uint64_t off = 0; ok && off < bytes; off += kPiece) {
      ok = tier_internal::PwriteFull(fd, buf.get(), kPiece, base + off).ok();
    }
    ok = ok && ::fdatasync(fd) == 0;
    const double write_s = ssd_tier_internal::SecondsSince(t0);
    t0 = std::chrono::steady_clock::now();
    for (uint64_t off = 0; ok && off < bytes; off += kPiece) {
      ok = tier_internal::PreadFull(fd, buf.get(), kPiece, base + off).ok();
    }
    const double read_s = ssd_tier_internal::SecondsSince(t0);
    if (ok) {
      write_bw = static_cast<double>(bytes) / write_s;
      read_bw = static_cast<double>(bytes) / read_s;
    }
    std::lock_guard<std::mutex> lock(alloc_mu_);
    files_[0].alloc->free(*probe);
  }
  if (info_.device_read_bytes_per_s <= 0) info_.device_read_bytes_per_s = read_bw;
  if (info_.device_write_bytes_per_s <= 0) info_.device_write_bytes_per_s = write_bw;
}

inline SsdTier::RecordPtr SsdTier::MakeRecord() {
  return RecordPtr(new Record, [this](Record* r) { ReleaseRecord(r); });
}

inline void SsdTier::ReleaseRecord(Record* r) {
  if (!closing_.load(std::memory_order_acquire)) {
    if (r->reclaim.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(alloc_mu_);
      files_[r->file].alloc->free(r->extent);
    } else {
      counters_.quarantined_bytes += r->extent.size;
    }
  }
  delete r;
}

inline std::optional<std::pair<uint32_t, alloc::Allocation>> SsdTier::AllocateExtent(
    uint64_t bytes) {
  std::lock_guard<std::mutex> lock(alloc_mu_);
  const uint32_t n = static_cast<uint32_t>(files_.size());
  const uint32_t start = next_file_.fetch_add(1, std::memory_order_relaxed) % n;
  for (uint32_t k = 0; k < n; ++k) {
    const uint32_t f = (start + k) % n;
    if (std::optional<alloc::Allocation> a =
            files_[f].alloc->allocate(bytes, tier_internal::kBlockBytes)) {
      return std::make_pair(f, *a);
    }
  }
  return std::nullopt;
}

inline SsdTier::Staging SsdTier::AcquireStaging(Lane& lane, uint64_t bytes) {
  Staging s;
  if (lane.arena_alloc) {
    std::lock_guard<std::mutex> lock(lane.arena_mu);
    s.slot = lane.arena_alloc->allocate(tier_internal::RoundUpToBlock(bytes),
                                        tier_internal::kBlockBytes);
  }
  if (s.slot) {
    s.data = lane.arena.get() + s.slot->offset;
  } else {
    s.heap = tier_internal::AllocateAligned(bytes, tier_internal::kBlockBytes, /*zero=*/false);
    s.data = s.heap.get();
  }
  return s;
}

inline void SsdTier::ReleaseStaging(Lane& lane, Staging& staging) {
  if (staging.slot) {
    std::lock_guard<std::mutex> lock(lane.arena_mu);
    lane.arena_alloc->free(*staging.slot);
    staging.slot.reset();
  }
  staging.heap.reset();
  staging.data = nullptr;
}

inline void SsdTier::BeginOp() {
  std::lock_guard<std::mutex> lock(inflight_mu_);
  ++inflight_;
}

inline void SsdTier::EndOp(Op* op) {
  delete op;
  EndInflight();
}

inline void SsdTier::EndInflight() {
  std::lock_guard<std::mutex> lock(inflight_mu_);
  MC_ASSERT(inflight_ > 0, "EndOp without BeginOp");
  if (--inflight_ == 0) inflight_cv_.notify_all();
}

inline void SsdTier::SubmitIos(Op* op, size_t first, size_t last, bool is_write) {
  Lane& lane = *lanes_[op->lane];
  std::lock_guard<std::mutex> lock(lane.sq_mu);
  for (size_t i = first; i < last; ++i) {
    Io& io = op->ios[i];
    io_uring_sqe* sqe = lane.ring.Sqe();
    const int fd = options_.register_files ? static_cast<int>(io.file) : fds_[io.file];
    const bool fixed = io.fixed && lane.arena_registered;
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
    if (options_.register_files) sqe->flags |= IOSQE_FIXED_FILE;
    lane.ring.SetData(sqe, &io);
  }
  lane.ring.Submit();
}

inline void SsdTier::SubmitSync(Lane& lane, uint32_t lane_index, uint32_t file) {
  MC_DASSERT(lane_index < lanes_.size(), "lane index");
  SyncState& s = lane.sync[file];
  MC_DASSERT(!s.in_flight && s.batch.empty(), "one fdatasync in flight per lane and file");
  s.batch.swap(s.waiting);
  s.in_flight = true;
  s.dirty = false;  // the writes acknowledged so far completed before this sync is issued
  BeginOp();        // the destructor waits for it (OnSync ends it)
  counters_.syncs.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(lane.sq_mu);
  io_uring_sqe* sqe = lane.ring.Sqe();
  const int fd = options_.register_files ? static_cast<int>(file) : fds_[file];
  io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
  if (options_.register_files) sqe->flags |= IOSQE_FIXED_FILE;
  lane.ring.SetData(sqe, &s.io);
  lane.ring.Submit();
}

}  // namespace mooncake::tier

#include "mooncake/tier/internal/ssd_tier_ops.h"

#endif  // MOONCAKE_TIER_INTERNAL_SSD_TIER_IMPL_H_
