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
#ifndef MOONCAKE_TIER_SSD_TIER_H_
#define MOONCAKE_TIER_SSD_TIER_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mooncake/alloc/tlsf_allocator.h"
#include "mooncake/base/fast_hash.h"
#include "mooncake/base/fork_join_pool.h"
#include "mooncake/compress/adaptive_codec.h"
#include "mooncake/compress/byte_plane_codec.h"
#include "mooncake/compress/when_to_compress.h"
#include "mooncake/tier/internal/ssd_file.h"
#include "mooncake/tier/internal/ssd_format.h"
#include "mooncake/tier/internal/string_map.h"
#include "mooncake/tier/internal/uring.h"
#include "mooncake/tier/io_faults.h"
#include "mooncake/tier/tier.h"

namespace mooncake::tier {

// What an acknowledged write survives; see the header comment.
enum class Durability : uint8_t {
  kPowerLoss,     // acknowledged after an fdatasync covering it completed
  kProcessCrash,  // acknowledged when written; fdatasync follows in the background
  kNoSync,        // acknowledged when written; never synced while open; emptied by a reboot
                  // that follows an unclean close
};

// "power_loss", "process_crash", "no_sync": for flags and logs.
inline std::string_view DurabilityName(Durability d) {
  switch (d) {
    case Durability::kPowerLoss:
      return "power_loss";
    case Durability::kProcessCrash:
      return "process_crash";
    case Durability::kNoSync:
      return "no_sync";
  }
  return "unknown";
}

inline std::optional<Durability> ParseDurability(std::string_view name) {
  for (Durability d : {Durability::kPowerLoss, Durability::kProcessCrash, Durability::kNoSync}) {
    if (name == DurabilityName(d)) return d;
  }
  return std::nullopt;
}

struct SsdTierOptions {
  // One file per path, created (preallocated) when none exists; all must
  // exist or none (unless start_empty). Regular files only.
  std::vector<std::string> paths;
  // Open an empty tier without reading the files: every path that holds an SsdTier file
  // (any state, any capacity; not held by another open tier) is replaced by a new file of
  // capacity_bytes_per_file (required), and missing ones are created. A path holding
  // anything else is refused (FailedPrecondition) and left as it is. For a cache whose
  // records are worthless after a restart (the reference store's workers): no recovery
  // scan of the old files, and a new size just works.
  bool start_empty = false;
  // Size of each file, its header block included; a multiple of 4096 and at
  // least 64 KiB. 0 when opening existing files: taken from their headers.
  uint64_t capacity_bytes_per_file = 0;
  // io_uring instances, each with a reaper thread (verify, decompress, complete).
  uint32_t lanes = 2;
  uint32_t ring_entries = 256;
  // Payloads are read and written in pieces of this size (a multiple of 4096).
  uint32_t io_chunk_bytes = 1 << 20;
  // Compressed records are read in pieces of at most this size (a multiple of 4096), so
  // the reaper decodes the frame's chunks as their pieces land while the device reads
  // the rest (decode overlaps the I/O even at queue depth 1).
  uint32_t compressed_read_piece_bytes = 256 << 10;
  // Raw bytes per frame chunk when compressing (the decode pipeline's grain).
  uint32_t codec_chunk_bytes = 256 << 10;
  // Threads that decode one compressed record's chunks (and compress one write's): the
  // lane's reaper (the writer's thread) and the idle helpers of a pool of
  // codec_threads - 1 threads that every lane shares. A codec call gets one thread per CPU
  // that no other codec call of the tier holds (all of them at queue depth 1, about one
  // while every lane decodes), and a helper busy elsewhere is not waited for. 0: the CPUs
  // this process may use (its affinity mask), at most 256. 1: no helpers. At most 256.
  uint32_t codec_threads = 0;
  // Per-lane bounce memory; larger staging falls back to the heap.
  uint64_t bounce_arena_bytes = 64ull << 20;
  bool register_files = true;
  bool register_buffers = true;
  // Where O_DIRECT is refused, use buffered I/O (logged; stats show it).
  bool allow_buffered_fallback = true;
  Compression compression = Compression::kAuto;
  // kProcessCrash acknowledges writes about one fdatasync earlier than kPowerLoss and, at
  // queue depth > 1, does not keep the device waiting for syncs; power loss can take the
  // last background_sync_ms of them. kNoSync issues no sync at all while open (a flush
  // stalls every write behind it on many disks) and suits a cache whose contents are
  // worthless after a reboot (the reference store empties its tier at start).
  Durability durability = Durability::kPowerLoss;
  // kProcessCrash: the longest an acknowledged write waits for its background fdatasync to
  // be issued (the power-loss window, less the sync's own duration). 0: as soon as the
  // previous sync completes. At most 60000.
  uint32_t background_sync_ms = 100;
  // kNoSync (and the reopen of a file a kNoSync tier left open): where the kernel's boot id
  // is read. Tests point it at a file of their own to stage a reboot.
  std::string boot_id_path = "/proc/sys/kernel/random/boot_id";
  // Device bandwidth the compression rule uses; 0 = measure at Open (a short
  // write and read probe in free space).
  double device_read_bytes_per_s = 0;
  double device_write_bytes_per_s = 0;
  // Test hook: sees every I/O completion (io_faults.h). Null in production.
  std::shared_ptr<IoFaults> faults;
};

// Figures specific to the SSD tier.
struct SsdTierInfo {
  bool direct_io = true;
  double device_read_bytes_per_s = 0;
  double device_write_bytes_per_s = 0;
  uint64_t quarantined_bytes = 0;
  uint64_t recovered_corrupt = 0;  // records skipped by recovery
  uint64_t recovered_superseded = 0;
  // Records dropped at Open because a kNoSync tier of an earlier boot left the files open
  // (a power loss or kernel crash may have reverted any block since its last sync).
  uint64_t recovered_discarded = 0;
  uint32_t codec_threads = 1;       // threads per compressed record (options resolved)
  uint64_t codec_helper_joins = 0;  // times a helper joined a record's decode or encode
  Durability durability = Durability::kPowerLoss;
  // kProcessCrash: the longest an acknowledged write waits for its background fdatasync to
  // be issued (the power-loss window, less the sync's own duration). 0: as soon as the
  // previous sync completes. At most 60000.
  uint32_t background_sync_ms = 100;
  // fdatasyncs that failed (also in TierStats::io_errors). Under kProcessCrash the writes
  // they covered were acknowledged already: they survive a process crash, but a power
  // loss may take them.
  uint64_t failed_syncs = 0;
};

class SsdTier {
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
  uint64_t capacity_bytes() const { return capacity_bytes_; }
  SsdTierInfo info() const;

 private:
  struct Record {
    std::string key;
    uint32_t file = 0;
    alloc::Allocation extent;
    tier_internal::RecordHeader header;
    // Set once the record's header is durably gone (or was never written):
    // only then may its extent be reused.
    std::atomic<bool> reclaim{false};
    uint64_t DiskOffset() const { return tier_internal::kBlockBytes + extent.offset; }
  };
  using RecordPtr = std::shared_ptr<Record>;

  enum class OpType : uint8_t { kWrite, kRead, kRemove };
  struct Op;
  // One submission queue entry. `op` is null for syncs and the markers.
  struct Io {
    // What a completion without an op is: a sync, or one of the lane's markers.
    enum class Kind : uint8_t {
      kSync,
      kTimer,    // a SyncState's background-sync timeout
      kStop,     // the destructor's: the reaper returns
      kHurry,    // the destructor's: cancel the lane's pending timeouts
      kIgnored,  // a timeout removal's own completion
    };
    Op* op = nullptr;
    uint32_t file = 0;
    uint32_t index = 0;  // piece number within op, or the file of a sync
    uint32_t lane = 0;
    std::byte* data = nullptr;
    uint32_t bytes = 0;       // transferred (a block multiple)
    uint32_t payload = 0;     // payload bytes in it that the checksum covers
    uint64_t offset = 0;      // in the file
    bool fixed = false;       // data lies in the lane's registered arena
    Kind kind = Kind::kSync;  // when op is null
  };
  // Aligned staging memory: a slice of the lane's arena or a heap block.
  struct Staging {
    std::byte* data = nullptr;
    std::optional<alloc::Allocation> slot;
    tier_internal::AlignedBytes heap;
  };
  struct Op {
    OpType type = OpType::kRead;
    uint32_t lane = 0;
    RecordPtr record;
    std::vector<Io> ios;
    uint32_t pending = 0;  // ios not yet completed; reaper-owned after submission
    int error = 0;         // first failure (-errno)
    Staging staging;
    // Reads: pieces complete in any order and are hashed in order.
    std::span<std::byte> into;
    std::vector<uint8_t> piece_done;
    uint32_t hashed = 0;
    FastStableHasher64 hash;
    std::byte* tail_src = nullptr;  // zero-copy read: last piece staged here
    std::byte* tail_dst = nullptr;
    uint64_t tail_bytes = 0;
    bool zero_copy = false;
    // Compressed reads: stored bytes [0, arrived) have landed (in order); the frame is
    // parsed once its table has, and chunks [0, decoded_chunks) are decoded into `into`.
    uint64_t arrived = 0;
    std::optional<compress::FrameView> frame;
    uint32_t decoded_chunks = 0;
    bool landed = false;  // in its lane's `landed` list
    absl::Status decode_status;
    double decode_s = 0;  // thread-seconds: each call's wall time x the threads that ran it
    WriteDone write_done;
    ReadDone read_done;
  };
  // Group commit state of one (lane, file); owned by the lane's reaper.
  struct SyncState {
    bool in_flight = false;
    bool dirty = false;        // kProcessCrash: writes acknowledged since the last sync began
    bool timer_armed = false;  // kProcessCrash: a background_sync_ms timeout is pending
    Io timer_io;
    __kernel_timespec timer_ts{};  // the armed timeout's interval (read by the kernel)
    std::vector<Op*> waiting;      // written, waiting for the next fdatasync
    std::vector<Op*> batch;        // covered by the fdatasync in flight
    Io io;
  };
  struct Lane {
    tier_internal::Ring ring;
    std::mutex sq_mu;
    std::thread reaper;
    std::mutex arena_mu;
    tier_internal::AlignedBytes arena;
    std::optional<alloc::TlsfAllocator> arena_alloc;
    bool arena_registered = false;
    explicit Lane(compress::CodecOptions codec) : decoder(codec) {}
    std::vector<SyncState> sync;
    compress::BytePlaneCodec decoder;  // joined by codec_helpers_ (CodecCall's threads)
    // Compressed reads with pieces landed in the current batch of completions; reaper-owned.
    std::vector<Op*> landed;
    Io stop;
    Io hurry;
    Io cancelled;  // the user data of every timeout removal
  };
  struct File {
    tier_internal::OpenFile open;
    std::optional<alloc::TlsfAllocator> alloc;
  };
  struct Counters {
    std::atomic<uint64_t> writes{0}, write_failures{0}, reads{0}, read_misses{0}, removes{0},
        bytes_written{0}, bytes_read{0}, compressed_writes{0}, corrupt_records{0}, io_errors{0},
        syncs{0}, failed_syncs{0}, recovered_objects{0}, used_bytes{0}, raw_bytes{0},
        quarantined_bytes{0};
  };
  struct Profile {
    bool measured = false;
    compress::CodecProfile codec;
  };

  explicit SsdTier(SsdTierOptions options) : options_(std::move(options)) {}

  // Open steps (ssd_tier_impl.h).
  absl::Status OpenFiles();
  absl::Status Recover();
  // Sets (with this boot's id) or clears every file header's kFileFlagUnsynced. A file is
  // synced before its flag is cleared: what a kNoSync run wrote must be durable before
  // the file stops saying it may not be.
  absl::Status MarkFiles(bool unsynced);
  absl::Status RebuildAllocator(uint32_t file, std::vector<alloc::Allocation>& extents,
                                const std::vector<uint64_t>& offsets,
                                const std::vector<uint64_t>& sizes);
  absl::Status StartLanes();
  void ProbeDevice();

  RecordPtr MakeRecord();
  void ReleaseRecord(Record* r);
  std::optional<std::pair<uint32_t, alloc::Allocation>> AllocateExtent(uint64_t bytes);
  Staging AcquireStaging(Lane& lane, uint64_t bytes);
  void ReleaseStaging(Lane& lane, Staging& staging);
  uint32_t PickLane() { return next_lane_.fetch_add(1, std::memory_order_relaxed) % lanes_.size(); }
  // Counts work the destructor waits for: operations, and fdatasyncs in flight.
  void BeginOp();
  void EndOp(Op* op);
  void EndInflight();
  void SubmitIos(Op* op, size_t first, size_t last, bool is_write);
  void SubmitSync(Lane& lane, uint32_t lane_index, uint32_t file);

  uint64_t StageWrite(std::span<const std::byte> bytes, const ObjectMeta& meta, Lane& lane,
                      Staging& staging, uint8_t& codec);
  bool ShouldCompress(compress::DType dtype, uint64_t raw_bytes);

  void ReapLoop(uint32_t lane_index);
  void OnIo(Io* io, int res);
  void OnIosDone(Op* op);
  void AdvanceReadHash(Op* op);
  void DecodeLanded(Lane& lane);
  void DecodeArrived(Op* op);
  void EnqueueSync(Op* op);
  void MarkUnsynced(uint32_t lane_index, uint32_t file);
  void ScheduleBackgroundSync(Lane& lane, uint32_t lane_index, uint32_t file);
  void OnSyncTimer(uint32_t lane_index, uint32_t file);
  // The destructor's request: pending background-sync timeouts end now (their syncs start).
  void HurrySyncs(uint32_t lane_index);
  // Queues a no-op carrying the lane's `marker` Io (stop, hurry) on every running lane.
  void NotifyReapers(Io Lane::*marker);
  void OnSync(uint32_t lane_index, uint32_t file, int res);
  void FinishWrite(Op* op, absl::Status status);
  void FinishRemove(Op* op, absl::Status status);
  void FinishRead(Op* op);
  void DropCorrupt(const RecordPtr& record);

  // The codecs' options: helpers from codec_helpers_; each call sets its threads.
  compress::CodecOptions CodecOptions() const {
    return compress::CodecOptions{.chunk_bytes = options_.codec_chunk_bytes,
                                  .threads = static_cast<int>(info_.codec_threads),
                                  .pool = codec_helpers_.get()};
  }
  // Counts a codec call in progress for its lifetime and gives it its threads: one per CPU
  // that no other codec call of this tier holds (at least its own, at most codec_threads).
  // More threads than CPUs would not go faster, and a reaper waiting for a preempted
  // helper's chunk takes no completions meanwhile. The count is a snapshot: a call keeps
  // the helpers that joined it until it ends.
  class CodecCall {
   public:
    explicit CodecCall(SsdTier& tier) : active_(tier.codec_calls_) {
      // Relaxed: a heuristic count; nothing is published through it.
      const int calls = active_.fetch_add(1, std::memory_order_relaxed) + 1;
      threads_ =
          std::clamp(tier.usable_cpus_ - calls + 1, 1, static_cast<int>(tier.info_.codec_threads));
    }
    ~CodecCall() { active_.fetch_sub(1, std::memory_order_relaxed); }
    CodecCall(const CodecCall&) = delete;
    CodecCall& operator=(const CodecCall&) = delete;
    int threads() const { return threads_; }

   private:
    std::atomic<int>& active_;
    int threads_ = 1;
  };
  SsdTierOptions options_;
  // Declared before every codec that uses it (lanes_, codec_pool_), so destroyed after them.
  std::unique_ptr<ForkJoinPool> codec_helpers_;
  int usable_cpus_ = 1;              // UsableCpuCount() at Open
  std::atomic<int> codec_calls_{0};  // codec calls in progress (CodecCall)
  uint64_t capacity_bytes_ = 0;
  std::vector<File> files_;
  std::vector<int> fds_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  tier_internal::AlignedBytes zero_block_;
  std::optional<tier_internal::BootId> boot_id_;  // read at Open
  bool files_marked_ = false;                     // Open's MarkFiles completed
  bool files_created_ = false;                    // OpenFiles made new files: nothing to scan

  mutable std::mutex mu_;
  tier_internal::StringMap<RecordPtr> index_;  // guarded by mu_
  tier_internal::StringSet writing_;           // guarded by mu_: writes in flight
  uint64_t next_sequence_ = 1;                 // guarded by mu_

  std::mutex alloc_mu_;  // guards every files_[i].alloc

  std::atomic<uint32_t> next_lane_{0};
  std::atomic<uint32_t> next_file_{0};
  std::mutex inflight_mu_;
  std::condition_variable inflight_cv_;
  uint64_t inflight_ = 0;  // guarded by inflight_mu_
  std::atomic<bool> closing_{false};
  // Set by the destructor: background syncs start at once instead of after a timeout.
  std::atomic<bool> hurry_syncs_{false};

  Counters counters_;
  SsdTierInfo info_;  // fixed after Open

  std::mutex codec_mu_;
  std::vector<std::unique_ptr<compress::AdaptiveCodec<>>> codec_pool_;  // guarded by codec_mu_
  mutable std::mutex profile_mu_;
  std::array<Profile, compress::kDTypeCount> profiles_;  // guarded by profile_mu_
};

static_assert(Tier<SsdTier>);

}  // namespace mooncake::tier

#include "mooncake/tier/internal/ssd_tier_impl.h"

#endif  // MOONCAKE_TIER_SSD_TIER_H_
