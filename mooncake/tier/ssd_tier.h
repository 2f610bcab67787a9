// SsdTier: a Tier on one or more regular files through io_uring,
// with O_DIRECT, per-record checksums, optional compression and crash
// recovery. The on-disk format is docs/ssd_format.md (internal/ssd_format.h).
//
// Layout: each file is [file header block][records...]; a record is a
// 4 KiB header block (key, sizes, codec, XXH3 checksums) and its payload
// padded to 4 KiB. File space is managed by one TlsfAllocator per file
// (mooncake/alloc) with 4 KiB granularity; an in-memory hash map holds
// key -> record (file, extent, header fields).
//
// I/O: `lanes` io_uring instances, each with one reaper thread. An operation
// goes to one lane; payloads are split into io_chunk_bytes pieces submitted
// together (device parallelism at queue depth 1) and hashed in order as they
// complete (reads) or as they are staged (writes), so checksumming overlaps
// the device. A write's header block goes last, once the checksum is known;
// with a one-piece payload the two go out as one write. Reads of raw
// (uncompressed) records into a 4 KiB-aligned buffer land directly in the
// caller's memory; everything else goes through per-lane bounce arenas
// (registered with io_uring as fixed buffers when register_buffers is set;
// files are registered when register_files is set). Reapers verify checksums,
// decompress and run the completion callbacks; a reaper decoding a record is
// joined by the idle threads of a helper pool
// (codec_threads - 1, shared by the lanes), so one record's chunks decode on
// several cores even at queue depth 1. A compressed record is read in
// compressed_read_piece_bytes pieces, all submitted at once; as the pieces
// land in order the reaper parses the frame and, after draining the
// completions that are ready, decodes every chunk whose payload has arrived,
// while the device is still reading the later pieces.
// The result is handed over only after the record checksum (over the stored
// bytes) and every chunk checksum (over the decoded bytes) verify.
//
// Durability (SsdTierOptions::durability). Syncs are batched per lane and
// file (group commit): at most one fdatasync is in flight per lane and file,
// and every write completing meanwhile joins the next one, so a write is
// covered by a completed sync at most two fdatasync durations after it lands
// and the number of syncs is bounded by the number of writes.
// - kPowerLoss (the default): a write is acknowledged after its record is
//   written AND an fdatasync issued after that write completed has completed.
// - kProcessCrash: a write is acknowledged as soon as its record is on the
//   device (the O_DIRECT write completed; with the buffered fallback, in the
//   page cache). That survives the process being killed at any point, since
//   nothing the kernel holds dies with it. The group commit runs in the
//   background, at most one fdatasync per background_sync_ms per lane and
//   file, so power loss or a kernel crash can lose only writes acknowledged
//   within about background_sync_ms + two fdatasync durations before it (and
//   those are then absent, never torn: checksums reject partial records).
//   A sync in flight slows this disk's writes down (a flush waits for every
//   write before it), hence the interval.
// - kNoSync: acknowledged as soon as written, like kProcessCrash, and nothing
//   is synced while the tier is open, removes included: for a cache whose
//   contents are worthless after a reboot anyway (the reference store empties
//   its tier at start). Every file header carries a flag and the kernel's boot
//   id while such a tier has it open; a clean close syncs everything and
//   clears the flag. Open of a flagged file in the same boot (the process was
//   killed) recovers as usual; after a reboot (another boot id) the files may
//   hold any mix of old and new blocks, so Open discards every record
//   (SsdTierInfo::recovered_discarded) instead of serving one that a power
//   loss may have reverted.
// A remove zeroes the record's header block and, under kPowerLoss and
// kProcessCrash, is acknowledged after an fdatasync covering the zeroed header
// has completed (under kNoSync when the zeroing write has); only then is the
// extent reused (and only once no read still uses it), so power loss can
// never revive an old header over a new record's bytes, and the space is free
// when the caller hears of the remove.
// Objects are immutable (Write of a present key is AlreadyExists), and every
// record carries a tier-wide increasing sequence number, so recovery keeps
// the newest valid record of a key and zeroes older ones.
//
// Recovery (Open of existing files): every file is scanned once; records whose
// header checksum or payload checksum fails (a torn tail, a damaged block) are
// counted in corrupt_records and skipped, never served.
//
// Errors: a full tier (no free extent for the record) is ResourceExhausted;
// an I/O error fails the operation (Unavailable, with the kernel's errno text)
// and nothing is acknowledged. That includes ENOSPC/EDQUOT from the kernel on
// a write, which a preallocated file never sees and a sparse one (a
// filesystem without fallocate) can: removing records would free no blocks
// there, so it is not ResourceExhausted, which callers answer by removing.
// The extent of a failed write is
// quarantined (never reused) until the next Open, since its bytes may form a
// valid record; a read whose checksum fails is DataLoss, the record is dropped
// from the index and its extent quarantined.
//
// Thread-safety: every public call may run concurrently. Complexity: Lookup,
// Contains O(1) expected; Write/Read/Remove O(1) plus the I/O and the
// allocator's O(1).
//
// Structure (docs/tier.md): SsdTier composes one object per responsibility,
// each with at most one lock (mooncake/base/mutex.h, ABSL_GUARDED_BY-annotated):
//   SsdFileSet   internal/ssd_file_set.h  the files: create/open/lock, the kNoSync flag.
//                                         No lock: used at Open and after the reapers stop.
//   SsdRecovery  internal/ssd_recovery.h  Open's scan: winners, zeroed losers. No lock.
//   RecordIndex  internal/record_index.h  key -> record, writes in flight, sequence numbers.
//   FileSpace    internal/file_space.h    free extents of every file (TLSF).
//   RecordCodec  internal/record_codec.h  compression: the rule, coders, profiles, helpers.
//   OpTracker    internal/op_tracker.h    work in flight, which the destructor waits for.
//   SsdLane      internal/ssd_lane.h      one I/O lane: its reaper thread (completions,
//                                         read hashing and decoding) over, each with a lock:
//     IoLane       internal/io_lane.h       the io_uring's submission side,
//     StagingArena internal/staging_arena.h the lane's bounce memory,
//     GroupCommit  internal/group_commit.h  the fdatasync batching of each file.
//   SsdOp/SsdIo  internal/ssd_op.h        one operation, owned by one thread at a time.
// SsdTier itself holds only what Open fixes, atomic counters, and the operations' logic.
//
// Lock order: every lock is a leaf. No code holds two of them at once, and none is held
// while a callback, a codec call or an I/O wait runs (GroupCommit returns steps that its
// lane takes after unlocking; records are released outside the index lock). Should a
// change ever need to nest two, take them in this order, outermost first:
//   RecordIndex -> GroupCommit -> OpTracker -> RecordCodec -> FileSpace -> StagingArena
//   -> IoLane
// (the order in which a write meets them), and say so here and in docs/tier.md.
#ifndef MOONCAKE_TIER_SSD_TIER_H_
#define MOONCAKE_TIER_SSD_TIER_H_

#include <linux/time_types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/alloc/tlsf_allocator.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fast_hash.h"
#include "mooncake/base/fork_join_pool.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/compress/adaptive_codec.h"
#include "mooncake/compress/byte_plane_codec.h"
#include "mooncake/tier/internal/file_space.h"
#include "mooncake/tier/internal/group_commit.h"
#include "mooncake/tier/internal/io_lane.h"
#include "mooncake/tier/internal/op_tracker.h"
#include "mooncake/tier/internal/record_codec.h"
#include "mooncake/tier/internal/record_index.h"
#include "mooncake/tier/internal/ssd_file.h"
#include "mooncake/tier/internal/ssd_file_set.h"
#include "mooncake/tier/internal/ssd_format.h"
#include "mooncake/tier/internal/ssd_lane.h"
#include "mooncake/tier/internal/ssd_op.h"
#include "mooncake/tier/internal/ssd_recovery.h"
#include "mooncake/tier/internal/staging_arena.h"
#include "mooncake/tier/io_faults.h"
#include "mooncake/tier/ssd_tier_options.h"
#include "mooncake/tier/tier.h"

namespace mooncake::tier {

class SsdTier : private tier_internal::SsdLaneClient {
 public:
  // Creates or recovers the files. InvalidArgument for bad options,
  // FailedPrecondition for foreign, mismatched or locked files (and for kNoSync
  // without a readable boot id), ResourceExhausted when the filesystem cannot
  // hold the files.
  static absl::StatusOr<std::unique_ptr<SsdTier>> Open(SsdTierOptions options);

  // Waits for every operation in flight, then stops the reapers; under kNoSync it
  // then syncs the files and clears their flag (a failure is logged, and the next
  // Open after a reboot discards the records). A tier whose Open failed leaves the
  // flags as it found them.
  ~SsdTier();
  SsdTier(const SsdTier&) = delete;
  SsdTier& operator=(const SsdTier&) = delete;

  void Write(std::string_view key, std::span<const std::byte> bytes, const ObjectMeta& meta,
             WriteDone done);
  void Read(std::string_view key, std::span<std::byte> into, ReadDone done);
  void Remove(std::string_view key, WriteDone done);

  std::optional<ObjectInfo> Lookup(std::string_view key) const;
  bool Contains(std::string_view key) const;
  void ForEach(ObjectVisitor visit) const;
  TierStats stats() const;
  uint64_t capacity_bytes() const { return files_.usable_bytes(); }
  SsdTierInfo info() const;

 private:
  // The lanes' reaper calls these (SsdLaneClient).
  void OnIosDone(tier_internal::SsdOp* op) override;
  void OnSynced(uint32_t file, int res, const std::vector<tier_internal::SsdOp*>& batch) override;
  void OnSyncIssued() override { counters_.syncs.fetch_add(1, std::memory_order_relaxed); }

  using Record = tier_internal::SsdRecord;
  using RecordPtr = tier_internal::RecordIndex::RecordPtr;
  using Staging = tier_internal::Staging;
  using Op = tier_internal::SsdOp;
  using Io = tier_internal::SsdIo;
  using OpType = tier_internal::OpType;
  using Lane = tier_internal::SsdLane;
  struct Counters {
    std::atomic<uint64_t> writes{0}, write_failures{0}, reads{0}, read_misses{0}, removes{0},
        bytes_written{0}, bytes_read{0}, compressed_writes{0}, corrupt_records{0}, io_errors{0},
        syncs{0}, failed_syncs{0}, recovered_objects{0}, used_bytes{0}, raw_bytes{0},
        quarantined_bytes{0};
  };

  explicit SsdTier(SsdTierOptions options) : options_(std::move(options)) {}

  // Open steps.
  absl::Status Recover();
  absl::Status StartLanes();
  void ProbeDevice();

  RecordPtr MakeRecord();
  void ReleaseRecord(Record* r);
  uint32_t PickLane() { return next_lane_.fetch_add(1, std::memory_order_relaxed) % lanes_.size(); }
  // Counts work the destructor waits for: operations, and fdatasyncs in flight.
  void BeginOp() { ops_.Begin(); }
  void EndOp(Op* op) {
    delete op;
    ops_.End();
  }

  uint64_t StageWrite(std::span<const std::byte> bytes, const ObjectMeta& meta, Lane& lane,
                      Staging& staging, uint8_t& codec);
  void FinishWrite(Op* op, absl::Status status);
  void FinishRemove(Op* op, absl::Status status);
  void FinishRead(Op* op);
  void DropCorrupt(const RecordPtr& record);

  SsdTierOptions options_;
  SsdTierInfo info_;                              // fixed after Open
  std::optional<tier_internal::BootId> boot_id_;  // read at Open
  bool files_marked_ = false;                     // Open's Mark of the files completed
  tier_internal::SsdFileSet files_;
  tier_internal::FileSpace space_;
  tier_internal::RecordIndex index_;
  tier_internal::OpTracker ops_;
  // Declared before lanes_: their decoders use its helper threads.
  std::unique_ptr<tier_internal::RecordCodec> codec_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  tier_internal::AlignedBytes zero_block_;
  std::atomic<uint32_t> next_lane_{0};
  std::atomic<bool> closing_{false};
  Counters counters_;
};

static_assert(Tier<SsdTier>);

namespace ssd_tier_internal {

inline absl::Status CheckKey(std::string_view key) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key must be 1 to ", kMaxKeyBytes, " bytes, got ", key.size()));
  }
  return absl::OkStatus();
}

inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace ssd_tier_internal

inline absl::StatusOr<std::unique_ptr<SsdTier>> SsdTier::Open(SsdTierOptions options) {
  RETURN_IF_ERROR(ssd_tier_internal::ValidateOptions(options));
  std::unique_ptr<SsdTier> tier(new SsdTier(std::move(options)));
  const SsdTierOptions& o = tier->options_;
  // Before any file is created or touched.
  tier->boot_id_ = tier_internal::ReadBootId(o.boot_id_path);
  if (o.durability == Durability::kNoSync && !tier->boot_id_) {
    return absl::FailedPreconditionError(
        absl::StrCat("SsdTier: Durability::kNoSync needs the kernel's boot id, which ",
                     o.boot_id_path, " does not give; use kProcessCrash"));
  }
  RETURN_IF_ERROR(tier->files_.Open(tier_internal::SsdFileSetOptions{
      o.paths, o.start_empty, o.capacity_bytes_per_file, o.allow_buffered_fallback}));
  tier->info_.direct_io = tier->files_.direct_io();
  RETURN_IF_ERROR(tier->Recover());
  RETURN_IF_ERROR(tier->files_.Mark(o.durability == Durability::kNoSync, tier->boot_id_));
  tier->files_marked_ = true;
  RETURN_IF_ERROR(tier->StartLanes());
  tier->ProbeDevice();
  return tier;
}

inline SsdTier::~SsdTier() {
  // A background sync must not keep the close waiting for its timeout (up to 60 s).
  for (auto& lane : lanes_) lane->Hurry();
  ops_.WaitIdle();
  closing_.store(true, std::memory_order_release);
  for (auto& lane : lanes_) lane->Stop();
  // Only a tier that marked its files clears the flag: a failed Open must leave a flag
  // that an earlier open of the file left (its records not yet discarded or synced) as it was.
  if (options_.durability == Durability::kNoSync && files_marked_) {
    if (absl::Status s = files_.Mark(false, boot_id_); !s.ok()) {
      // A flag stays: a reopen in this boot recovers, one after a reboot discards.
      std::fprintf(stderr, "SsdTier: closing: %s\n", std::string(s.message()).c_str());
    }
  }
  index_.Clear();
  lanes_.clear();
  files_.Close();
}

inline absl::Status SsdTier::Recover() {
  ASSIGN_OR_RETURN(tier_internal::RecoveredFiles found,
                   tier_internal::SsdRecovery::Run(files_, boot_id_));
  info_.recovered_corrupt = found.corrupt;
  info_.recovered_superseded = found.superseded;
  info_.recovered_discarded = found.discarded;
  counters_.corrupt_records.store(found.corrupt);
  index_.SetNextSequence(found.max_sequence + 1);
  for (uint32_t f = 0; f < files_.size(); ++f) {
    const std::vector<tier_internal::ScannedRecord>& v = found.by_file[f];
    std::vector<uint64_t> offsets, sizes;
    for (const tier_internal::ScannedRecord& s : v) {
      offsets.push_back(s.offset - tier_internal::kBlockBytes);
      sizes.push_back(tier_internal::RecordBytes(s.header.stored_bytes));
    }
    ASSIGN_OR_RETURN(std::vector<alloc::Allocation> extents,
                     space_.Rebuild(f, files_.usable_bytes(f), offsets, sizes));
    for (size_t k = 0; k < v.size(); ++k) {
      RecordPtr r = MakeRecord();
      r->key = v[k].key;
      r->file = f;
      r->extent = extents[k];
      r->header = v[k].header;
      counters_.used_bytes += extents[k].size;
      counters_.raw_bytes += v[k].header.raw_bytes;
      index_.Insert(std::move(r));
    }
  }
  counters_.recovered_objects.store(index_.size());
  return absl::OkStatus();
}

inline absl::Status SsdTier::StartLanes() {
  using tier_internal::kBlockBytes;
  zero_block_ = tier_internal::AllocateAligned(kBlockBytes, kBlockBytes);
  const int usable_cpus = UsableCpuCount();
  info_.durability = options_.durability;
  info_.codec_threads =
      options_.codec_threads != 0
          ? options_.codec_threads
          : static_cast<uint32_t>(std::min(usable_cpus, compress::kMaxCodecThreads));
  codec_ = std::make_unique<tier_internal::RecordCodec>(
      tier_internal::RecordCodecOptions{.compression = options_.compression,
                                        .codec_chunk_bytes = options_.codec_chunk_bytes,
                                        .codec_threads = info_.codec_threads,
                                        .usable_cpus = usable_cpus,
                                        .lanes = options_.lanes});
  for (uint32_t i = 0; i < options_.lanes; ++i) {
    auto lane = std::make_unique<Lane>(
        tier_internal::SsdLaneOptions{.index = i,
                                      .files = files_.size(),
                                      .ring_entries = options_.ring_entries,
                                      .bounce_arena_bytes = options_.bounce_arena_bytes,
                                      .register_buffers = options_.register_buffers,
                                      .background_sync_ms = options_.background_sync_ms},
        *codec_, ops_, options_.faults.get(), static_cast<tier_internal::SsdLaneClient&>(*this));
    RETURN_IF_ERROR(lane->Init(files_.fds()));
    if (options_.register_files) {
      // Every lane registers the same table, or none does (fds in SQEs must
      // mean the same thing on every lane).
      if (absl::Status s = lane->RegisterFiles(); !s.ok()) {
        if (i != 0) return s;
        options_.register_files = false;
      }
    }
    lanes_.push_back(std::move(lane));
  }
  for (auto& lane : lanes_) lane->Start();
  return absl::OkStatus();
}

// Measures the device with a short QD1 write+fdatasync and read of up to
// 64 MiB of free space in file 0 (zeros: no valid record header). Too little
// free space: 1 GB/s is assumed (info() shows the figures used).
inline void SsdTier::ProbeDevice() {
  info_.device_read_bytes_per_s = options_.device_read_bytes_per_s;
  info_.device_write_bytes_per_s = options_.device_write_bytes_per_s;
  double read_bw = 1e9, write_bw = 1e9;
  constexpr uint64_t kPiece = 1 << 20;
  const uint64_t bytes =
      std::min<uint64_t>(64 << 20, space_.LargestFreeBytes(0) / 2) / kPiece * kPiece;
  const bool measure = info_.device_read_bytes_per_s <= 0 || info_.device_write_bytes_per_s <= 0;
  std::optional<alloc::Allocation> probe;
  if (measure && bytes >= 4 * kPiece) probe = space_.AllocateIn(0, bytes);
  if (probe) {
    const int fd = files_.fd(0);
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
    space_.Free(0, *probe);
  }
  if (info_.device_read_bytes_per_s <= 0) info_.device_read_bytes_per_s = read_bw;
  if (info_.device_write_bytes_per_s <= 0) info_.device_write_bytes_per_s = write_bw;
  codec_->set_device_read_bytes_per_s(info_.device_read_bytes_per_s);
}

inline SsdTier::RecordPtr SsdTier::MakeRecord() {
  return RecordPtr(new Record, [this](Record* r) { ReleaseRecord(r); });
}

inline void SsdTier::ReleaseRecord(Record* r) {
  if (!closing_.load(std::memory_order_acquire)) {
    if (r->reclaim.load(std::memory_order_acquire)) {
      space_.Free(r->file, r->extent);
    } else {
      counters_.quarantined_bytes += r->extent.size;
    }
  }
  delete r;
}

// Stages [header block][payload] for a write. A compressed payload is coded
// into the staging here; a raw one is copied later, piece by piece, as the
// pieces are submitted. Returns the stored payload size.
inline uint64_t SsdTier::StageWrite(std::span<const std::byte> bytes, const ObjectMeta& meta,
                                    Lane& lane, Staging& staging, uint8_t& codec) {
  using tier_internal::kBlockBytes;
  const uint64_t raw = bytes.size();
  codec = tier_internal::kCodecRaw;
  if (codec_->ShouldCompress(meta.dtype, raw)) {
    const std::optional<uint64_t> n = codec_->Compress(bytes, meta.dtype, [&](uint64_t max) {
      staging = lane.arena().Acquire(tier_internal::RecordBytes(max));
      return std::span<std::byte>(staging.data + kBlockBytes, max);
    });
    if (n) {
      codec = static_cast<uint8_t>(compress::AdaptiveCodec<>::kId);
      return *n;
    }
    lane.arena().Release(staging);
  }
  staging = lane.arena().Acquire(tier_internal::RecordBytes(raw));
  return raw;
}

inline void SsdTier::Write(std::string_view key, std::span<const std::byte> bytes,
                           const ObjectMeta& meta, WriteDone done) {
  using tier_internal::kBlockBytes;
  if (absl::Status s = ssd_tier_internal::CheckKey(key); !s.ok()) return done(s);
  if (bytes.empty()) return done(absl::InvalidArgumentError("cannot write an empty object"));
  if (bytes.size() + kBlockBytes > capacity_bytes()) {
    return done(absl::ResourceExhaustedError(
        absl::StrCat("object of ", bytes.size(), " bytes exceeds the SSD tier's capacity of ",
                     capacity_bytes())));
  }
  const std::optional<uint64_t> sequence = index_.BeginWrite(key);
  // Callbacks never run under a lock: they may call back into the tier.
  if (!sequence) {
    if (index_.SequencesExhausted()) {
      return done(absl::ResourceExhaustedError(
          "the SSD tier's sequence numbers are exhausted (its files hold a record numbered near "
          "2^63, which this tier did not write); start it empty"));
    }
    return done(absl::AlreadyExistsError(
        absl::StrCat("key '", AbslView(key), "' is already stored; remove it first")));
  }
  BeginOp();
  Op* op = new Op;
  op->type = OpType::kWrite;
  op->lane = PickLane();
  op->write_done = std::move(done);
  Lane& lane = *lanes_[op->lane];
  uint8_t codec = tier_internal::kCodecRaw;
  const uint64_t stored = StageWrite(bytes, meta, lane, op->staging, codec);
  const auto extent = space_.Allocate(tier_internal::RecordBytes(stored));
  if (!extent) {
    lane.arena().Release(op->staging);
    index_.EndWrite(key, nullptr);
    counters_.write_failures.fetch_add(1, std::memory_order_relaxed);
    WriteDone cb = std::move(op->write_done);
    EndOp(op);
    return cb(absl::ResourceExhaustedError(absl::StrCat(
        "SSD tier full: no free extent of ", tier_internal::RecordBytes(stored), " bytes (",
        counters_.used_bytes.load(), " of ", capacity_bytes(), " bytes used)")));
  }
  RecordPtr rec = MakeRecord();
  rec->key.assign(key);
  rec->file = extent->first;
  rec->extent = extent->second;
  rec->header = tier_internal::RecordHeader{*sequence,     tier_internal::KeyHash(key),
                                            bytes.size(),  stored,
                                            codec,         meta.dtype,
                                            meta.user_tag, 0};
  op->record = rec;
  const uint64_t chunk = options_.io_chunk_bytes;
  const uint32_t pieces = static_cast<uint32_t>((stored + chunk - 1) / chunk);
  // A one-piece payload goes out with its header block in front as one write (one device
  // request per object, like a plain write of it; the two are adjacent in the staging
  // memory and on disk). Longer payloads send their earlier pieces while the later ones
  // are still being copied and hashed, and the header last, once the checksum is known.
  const bool one_write = pieces == 1;
  op->ios.resize(one_write ? 1 : pieces + 1);
  op->pending = static_cast<uint32_t>(op->ios.size());
  const bool fixed = op->staging.in_arena();
  FastStableHasher64 hash;
  std::byte* payload = op->staging.data + kBlockBytes;
  for (uint32_t i = 0; i < pieces; ++i) {
    const uint64_t at = i * chunk;
    const uint64_t n = std::min(chunk, stored - at);
    if (codec == tier_internal::kCodecRaw) std::memcpy(payload + at, bytes.data() + at, n);
    if (i + 1 == pieces) std::memset(payload + at + n, 0, tier_internal::RoundUpToBlock(n) - n);
    hash.Update(payload + at, n);
    op->ios[i] = Io{op,
                    rec->file,
                    i,
                    op->lane,
                    payload + at,
                    static_cast<uint32_t>(tier_internal::RoundUpToBlock(n)),
                    static_cast<uint32_t>(n),
                    rec->DiskOffset() + kBlockBytes + at,
                    fixed};
    // The last piece goes out with the header, in one submission.
    if (i + 1 < pieces) lane.Submit(/*is_write=*/true, &op->ios[i], 1);
  }
  rec->header.payload_checksum = hash.Digest();
  tier_internal::EncodeRecordHeader(rec->header, key,
                                    std::span<std::byte>(op->staging.data, kBlockBytes));
  if (one_write) {
    op->ios[0].data = op->staging.data;
    op->ios[0].bytes += static_cast<uint32_t>(kBlockBytes);
    op->ios[0].offset = rec->DiskOffset();
    return lane.Submit(/*is_write=*/true, &op->ios[0], 1);
  }
  op->ios[pieces] = Io{op,       rec->file,         pieces,
                       op->lane, op->staging.data,  static_cast<uint32_t>(kBlockBytes),
                       0,        rec->DiskOffset(), fixed};
  lane.Submit(/*is_write=*/true, &op->ios[pieces - 1], 2);
}

inline void SsdTier::Read(std::string_view key, std::span<std::byte> into, ReadDone done) {
  using tier_internal::kBlockBytes;
  if (absl::Status s = ssd_tier_internal::CheckKey(key); !s.ok()) return done(s);
  RecordPtr rec = index_.Find(key);
  if (!rec) {
    counters_.read_misses.fetch_add(1, std::memory_order_relaxed);
    return done(
        absl::NotFoundError(absl::StrCat("key '", AbslView(key), "' is not in the SSD tier")));
  }
  const tier_internal::RecordHeader& h = rec->header;
  if (into.size() < h.raw_bytes) {
    return done(absl::InvalidArgumentError(absl::StrCat("read of '", AbslView(key), "' needs ",
                                                        h.raw_bytes, " bytes, got ", into.size())));
  }
  BeginOp();
  Op* op = new Op;
  op->type = OpType::kRead;
  op->lane = PickLane();
  op->record = rec;
  op->into = into;
  op->read_done = std::move(done);
  Lane& lane = *lanes_[op->lane];
  const uint64_t stored = h.stored_bytes;
  const bool compressed = h.codec != tier_internal::kCodecRaw;
  const uint64_t chunk =
      compressed ? std::min(options_.io_chunk_bytes, options_.compressed_read_piece_bytes)
                 : options_.io_chunk_bytes;
  const uint32_t pieces = static_cast<uint32_t>((stored + chunk - 1) / chunk);
  op->zero_copy = h.codec == tier_internal::kCodecRaw &&
                  reinterpret_cast<uintptr_t>(into.data()) % kBlockBytes == 0;
  if (!op->zero_copy) op->staging = lane.arena().Acquire(tier_internal::RoundUpToBlock(stored));
  op->ios.resize(pieces);
  op->piece_done.assign(pieces, 0);
  op->pending = pieces;
  op->hash.Reset();
  for (uint32_t i = 0; i < pieces; ++i) {
    const uint64_t at = i * chunk;
    const uint64_t n = std::min(chunk, stored - at);
    const uint64_t len = tier_internal::RoundUpToBlock(n);
    std::byte* dst = nullptr;
    bool fixed = false;
    if (!op->zero_copy) {
      dst = op->staging.data + at;
      fixed = op->staging.in_arena();
    } else if (at + len <= into.size()) {
      dst = into.data() + at;
    } else {
      // The caller's buffer ends inside the last block: stage that piece.
      op->staging = lane.arena().Acquire(len);
      dst = op->tail_src = op->staging.data;
      fixed = op->staging.in_arena();
      op->tail_dst = into.data() + at;
      op->tail_bytes = n;
    }
    op->ios[i] = Io{op,
                    rec->file,
                    i,
                    op->lane,
                    dst,
                    static_cast<uint32_t>(len),
                    static_cast<uint32_t>(n),
                    rec->DiskOffset() + kBlockBytes + at,
                    fixed};
  }
  lane.Submit(/*is_write=*/false, op->ios.data(), pieces);
}

inline void SsdTier::Remove(std::string_view key, WriteDone done) {
  if (absl::Status s = ssd_tier_internal::CheckKey(key); !s.ok()) return done(s);
  RecordPtr rec = index_.Take(key);
  // Callbacks never run under a lock: they may call back into the tier.
  if (!rec) {
    return done(
        absl::NotFoundError(absl::StrCat("key '", AbslView(key), "' is not in the SSD tier")));
  }
  BeginOp();
  Op* op = new Op;
  op->type = OpType::kRemove;
  op->lane = PickLane();
  // The op holds the only reference: the extent is free the moment FinishRemove drops it,
  // which may happen on a reaper before this function returns.
  op->record = std::move(rec);
  op->write_done = std::move(done);
  op->ios.resize(1);
  op->pending = 1;
  const Record& r = *op->record;
  op->ios[0] = Io{op,
                  r.file,
                  0,
                  op->lane,
                  zero_block_.get(),
                  static_cast<uint32_t>(tier_internal::kBlockBytes),
                  0,
                  r.DiskOffset(),
                  false};
  lanes_[op->lane]->Submit(/*is_write=*/true, op->ios.data(), 1);
}

inline void SsdTier::OnIosDone(Op* op) {
  const absl::Status io_error =
      op->error == 0
          ? absl::OkStatus()
          : ErrnoToStatus(-op->error, absl::StrCat("SSD tier I/O on '", op->record->key, "'"));
  if (op->error != 0) counters_.io_errors.fetch_add(1, std::memory_order_relaxed);
  Lane& lane = *lanes_[op->lane];
  switch (op->type) {
    case OpType::kRead:
      return FinishRead(op);
    case OpType::kWrite:
      if (op->error) return FinishWrite(op, absl::UnavailableError(io_error.message()));
      if (options_.durability == Durability::kPowerLoss) return lane.WaitForSync(op);
      // On the device now: a process crash cannot take it. Power loss can until the
      // background sync this asks for completes (kProcessCrash), or at all (kNoSync).
      if (options_.durability == Durability::kProcessCrash) lane.MarkDirty(op->record->file);
      return FinishWrite(op, absl::OkStatus());
    case OpType::kRemove:
      // Acknowledged when the extent is free again (callers remove to make room; the
      // store's tier agent retries a write refused for space when its removes end): once
      // the zeroed header is synced, or under kNoSync written.
      if (op->error) return FinishRemove(op, absl::UnavailableError(io_error.message()));
      if (options_.durability == Durability::kNoSync) return FinishRemove(op, absl::OkStatus());
      return lane.WaitForSync(op);
  }
}

inline void SsdTier::OnSynced(uint32_t file, int res, const std::vector<Op*>& batch) {
  absl::Status status = absl::OkStatus();
  if (res < 0) {
    counters_.io_errors.fetch_add(1, std::memory_order_relaxed);
    counters_.failed_syncs.fetch_add(1, std::memory_order_relaxed);
    status = absl::UnavailableError(
        absl::StrCat("fdatasync of SSD tier file ", file, " failed: ", std::strerror(-res)));
  }
  for (Op* op : batch) {
    if (op->type == OpType::kWrite) {
      FinishWrite(op, status);
      continue;
    }
    FinishRemove(op, status);
  }
}

inline void SsdTier::FinishWrite(Op* op, absl::Status status) {
  Record& r = *op->record;
  lanes_[op->lane]->arena().Release(op->staging);
  index_.EndWrite(r.key, status.ok() ? op->record : nullptr);
  if (status.ok()) {
    counters_.writes.fetch_add(1, std::memory_order_relaxed);
    counters_.bytes_written.fetch_add(r.header.raw_bytes, std::memory_order_relaxed);
    counters_.used_bytes.fetch_add(r.extent.size, std::memory_order_relaxed);
    counters_.raw_bytes.fetch_add(r.header.raw_bytes, std::memory_order_relaxed);
    if (r.header.codec != tier_internal::kCodecRaw) counters_.compressed_writes.fetch_add(1);
  } else {
    counters_.write_failures.fetch_add(1, std::memory_order_relaxed);
  }
  op->record.reset();  // a failed write's extent is quarantined now
  WriteDone done = std::move(op->write_done);
  done(std::move(status));
  EndOp(op);
}

inline void SsdTier::FinishRemove(Op* op, absl::Status status) {
  Record& r = *op->record;
  if (status.ok()) {
    r.reclaim.store(true, std::memory_order_release);
    counters_.removes.fetch_add(1, std::memory_order_relaxed);
    counters_.used_bytes.fetch_sub(r.extent.size, std::memory_order_relaxed);
    counters_.raw_bytes.fetch_sub(r.header.raw_bytes, std::memory_order_relaxed);
  }
  // A failed remove is not acknowledged, but the header block may be zeroed
  // on disk all the same (the device can fail after writing), so the object
  // is no longer served while the tier stays open either way: its extent stays
  // quarantined and, after a restart, it is present only if its record still
  // verifies.
  // Dropping the op's reference frees the extent now, unless a read still
  // uses it (then the read's completion frees it): before the callback, so
  // the space is free when the caller hears of it.
  op->record.reset();
  WriteDone done = std::move(op->write_done);
  done(std::move(status));
  EndOp(op);
}

inline void SsdTier::DropCorrupt(const RecordPtr& record) {
  counters_.corrupt_records.fetch_add(1, std::memory_order_relaxed);
  if (index_.Drop(record)) {
    counters_.used_bytes.fetch_sub(record->extent.size, std::memory_order_relaxed);
    counters_.raw_bytes.fetch_sub(record->header.raw_bytes, std::memory_order_relaxed);
  }
}

inline void SsdTier::FinishRead(Op* op) {
  const Record& r = *op->record;
  const tier_internal::RecordHeader& h = r.header;
  absl::Status status;
  if (op->error != 0) {
    status = absl::UnavailableError(
        absl::StrCat("SSD tier read of '", r.key, "' failed: ", std::strerror(-op->error)));
  } else if (op->hash.Digest() != h.payload_checksum) {
    DropCorrupt(op->record);
    status = absl::DataLossError(absl::StrCat("SSD tier record of '", r.key, "' (file ", r.file,
                                              ", offset ", r.DiskOffset(),
                                              ") failed its checksum; dropped"));
  } else if (h.codec == tier_internal::kCodecRaw) {
    if (!op->zero_copy) {
      std::memcpy(op->into.data(), op->staging.data, h.raw_bytes);
    } else if (op->tail_dst != nullptr) {
      std::memcpy(op->tail_dst, op->tail_src, op->tail_bytes);
    }
  } else if (h.codec != static_cast<uint8_t>(compress::CodecId::kBytePlane)) {
    // Written by a build with another codec: not corrupt, so kept (a later build reads it).
    status = absl::DataLossError(absl::StrCat("SSD tier record of '", r.key, "' uses codec ",
                                              h.codec, ", which this build does not decode"));
  } else if (!op->decode.done()) {
    // Every piece has arrived, so every chunk was decoded unless decoding failed.
    DropCorrupt(op->record);
    status = absl::DataLossError(
        absl::StrCat("SSD tier record of '", r.key, "' failed to decode; dropped: ",
                     op->decode.status.ok() ? "frame incomplete" : op->decode.status.message()));
  } else {
    codec_->NoteDecode(h.dtype, h.raw_bytes, op->decode.decode_s);
  }
  lanes_[op->lane]->arena().Release(op->staging);
  ReadDone done = std::move(op->read_done);
  if (status.ok()) {
    counters_.reads.fetch_add(1, std::memory_order_relaxed);
    counters_.bytes_read.fetch_add(h.raw_bytes, std::memory_order_relaxed);
    done(ReadResult{h.raw_bytes, ObjectMeta{h.dtype, h.user_tag}});
  } else {
    done(std::move(status));
  }
  EndOp(op);
}

inline std::optional<ObjectInfo> SsdTier::Lookup(std::string_view key) const {
  const RecordPtr r = index_.Find(key);
  if (!r) return std::nullopt;
  return ObjectInfo{r->key, r->header.raw_bytes, r->extent.size,
                    ObjectMeta{r->header.dtype, r->header.user_tag},
                    r->header.codec != tier_internal::kCodecRaw};
}

inline bool SsdTier::Contains(std::string_view key) const { return index_.Contains(key); }

inline void SsdTier::ForEach(ObjectVisitor visit) const {
  for (const RecordPtr& r : index_.Snapshot()) {
    visit(ObjectInfo{r->key, r->header.raw_bytes, r->extent.size,
                     ObjectMeta{r->header.dtype, r->header.user_tag},
                     r->header.codec != tier_internal::kCodecRaw});
  }
}

inline TierStats SsdTier::stats() const {
  TierStats s;
  s.capacity_bytes = capacity_bytes();
  s.objects = index_.size();
  const Counters& c = counters_;
  s.used_bytes = c.used_bytes.load();
  s.raw_bytes = c.raw_bytes.load();
  s.writes = c.writes.load();
  s.write_failures = c.write_failures.load();
  s.reads = c.reads.load();
  s.read_misses = c.read_misses.load();
  s.removes = c.removes.load();
  s.bytes_written = c.bytes_written.load();
  s.bytes_read = c.bytes_read.load();
  s.compressed_writes = c.compressed_writes.load();
  s.corrupt_records = c.corrupt_records.load();
  s.io_errors = c.io_errors.load();
  s.syncs = c.syncs.load();
  s.recovered_objects = c.recovered_objects.load();
  return s;
}

inline SsdTierInfo SsdTier::info() const {
  SsdTierInfo i = info_;
  i.quarantined_bytes = counters_.quarantined_bytes.load();
  i.codec_helper_joins = codec_ ? codec_->helper_joins() : 0;
  i.failed_syncs = counters_.failed_syncs.load();
  return i;
}

}  // namespace mooncake::tier

#endif  // MOONCAKE_TIER_SSD_TIER_H_
