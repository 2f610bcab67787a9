// SsdLane: one I/O lane of the SSD tier: an io_uring (IoLane), its bounce
// memory (StagingArena), the group commit of each file on it (GroupCommit),
// and the reaper thread that consumes its completions. The reaper checks each
// I/O result (through the IoFaults hook), hashes a read's pieces in order as
// they land, decodes a compressed read's chunks once a batch of completions is
// drained (RecordCodec, with the lane's own decoder), takes the group commit's
// steps (fdatasyncs, background-sync timers) and hands every finished
// operation and completed sync to the tier (SsdLaneClient).
//
// Thread-safety: Submit, arena() and Notify may run on any thread. The
// reaper alone runs the completion path, owns the decoder and the list of
// landed reads, and is the only caller of the group commit (WaitForSync and
// MarkDirty are for the client's OnIosDone, which runs on it). This class has
// no lock of its own: its parts have one each (IoLane, StagingArena,
// GroupCommit), and none is held while another is taken or while the client
// is called (SsdTier's lock order, ssd_tier.h).
#ifndef MOONCAKE_TIER_INTERNAL_SSD_LANE_H_
#define MOONCAKE_TIER_INTERNAL_SSD_LANE_H_

#include <linux/time_types.h>

#include <cerrno>
#include <cstdint>
#include <span>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "mooncake/base/assert.h"
#include "mooncake/compress/byte_plane_codec.h"
#include "mooncake/tier/internal/group_commit.h"
#include "mooncake/tier/internal/io_lane.h"
#include "mooncake/tier/internal/op_tracker.h"
#include "mooncake/tier/internal/record_codec.h"
#include "mooncake/tier/internal/ssd_op.h"
#include "mooncake/tier/internal/staging_arena.h"
#include "mooncake/tier/io_faults.h"

namespace mooncake::tier_internal {

struct SsdLaneOptions {
  uint32_t index = 0;  // the lane's number (SsdOp::lane, SsdIo::lane)
  uint32_t files = 1;
  uint32_t ring_entries = 256;
  uint64_t bounce_arena_bytes = 64ull << 20;  // < 4 KiB: none (heap staging)
  bool register_buffers = true;
  uint32_t background_sync_ms = 100;  // GroupCommit's
};

// The tier, as the reaper sees it. Called on the lane's reaper thread only.
class SsdLaneClient {
 public:
  // Every io of `op` completed (a compressed read's chunks decoded as far as they go).
  virtual void OnIosDone(SsdOp* op) = 0;
  // An fdatasync of `file` completed with `res` (-errno on failure); `batch` holds the
  // ops it covers (GroupCommit::Wait), in arrival order.
  virtual void OnSynced(uint32_t file, int res, const std::vector<SsdOp*>& batch) = 0;
  // An fdatasync is being issued.
  virtual void OnSyncIssued() = 0;

 protected:
  ~SsdLaneClient() = default;
};

class SsdLane {
 public:
  // `ops` counts the fdatasyncs and timers in flight (the tier's destructor waits for
  // them); `faults` may be null.
  SsdLane(const SsdLaneOptions& options, RecordCodec& codec, OpTracker& ops, tier::IoFaults* faults,
          SsdLaneClient& client)
      : options_(options),
        codec_(codec),
        ops_(ops),
        faults_(faults),
        client_(client),
        commit_(options.files, options.background_sync_ms),
        decoder_(codec.codec_options()),
        sync_(options.files) {
    const uint32_t i = options.index;
    for (uint32_t f = 0; f < options.files; ++f) {
      sync_[f].sync = SsdIo{.file = f, .index = f, .lane = i, .kind = SsdIo::Kind::kSync};
      sync_[f].timer = SsdIo{.file = f, .index = f, .lane = i, .kind = SsdIo::Kind::kTimer};
    }
    stop_ = SsdIo{.lane = i, .kind = SsdIo::Kind::kStop};
    hurry_ = SsdIo{.lane = i, .kind = SsdIo::Kind::kHurry};
    cancelled_ = SsdIo{.lane = i, .kind = SsdIo::Kind::kIgnored};
  }
  // REQUIRES: Stop() was called, or Start() never was.
  ~SsdLane() { MC_ASSERT(!reaper_.joinable(), "SsdLane destroyed with its reaper running"); }
  SsdLane(const SsdLane&) = delete;
  SsdLane& operator=(const SsdLane&) = delete;

  // Sets up the ring over `fds` and the arena (registered when asked and possible).
  absl::Status Init(std::vector<int> fds) {
    if (absl::Status s = io_.Init(options_.ring_entries, std::move(fds)); !s.ok()) return s;
    arena_.Init(options_.bounce_arena_bytes);
    if (arena_.bytes() != 0 && options_.register_buffers) {
      (void)io_.RegisterBuffer(arena_.base(), arena_.bytes());  // else unfixed I/O
    }
    return absl::OkStatus();
  }
  // Registers Init's fds as fixed files (every lane of a tier does, or none).
  absl::Status RegisterFiles() { return io_.RegisterFiles(); }
  void Start() {
    MC_ASSERT(!reaper_.joinable(), "SsdLane::Start twice");
    reaper_ = std::thread([this] { ReapLoop(); });
  }
  // Background syncs start now instead of after their timeout (and from now on at once).
  void Hurry() {
    if (reaper_.joinable()) io_.SubmitNop(&hurry_);
  }
  // Stops the reaper once it has taken every completion before this call. REQUIRES:
  // nothing in flight (the tier's OpTracker is idle).
  void Stop() {
    if (!reaper_.joinable()) return;
    io_.SubmitNop(&stop_);
    reaper_.join();
  }

  StagingArena& arena() { return arena_; }
  // Submits ios[0, n) of one op (their user data is their address).
  void Submit(bool is_write, SsdIo* ios, size_t n) { io_.SubmitReadWrite(is_write, ios, n); }
  // Reaper only (the client's OnIosDone): `op` landed and is acknowledged once a sync
  // issued after now completes (OnSynced's batch).
  void WaitForSync(SsdOp* op) {
    const uint32_t file = op->record->file;
    TakeSyncStep(file, commit_.Wait(file, op));
  }
  // Reaper only: a write to `file` was acknowledged before any sync covers it.
  void MarkDirty(uint32_t file) { TakeSyncStep(file, commit_.MarkDirty(file)); }

 private:
  // The user data of one file's fdatasyncs and background-sync timers.
  struct SyncIos {
    SsdIo sync;
    SsdIo timer;
    __kernel_timespec timer_ts{};  // the armed timeout's interval (read by the kernel)
  };

  // Drains the completions that are ready (at most ring_entries), then decodes what the
  // compressed reads among them can decode: all the frame chunks that landed meanwhile go
  // to the codec in one call, which the idle codec helpers join (chunks decoded one
  // completion at a time would leave them nothing to share while the device delivers
  // pieces faster than one thread decodes).
  void ReapLoop() {
    for (;;) {
      io_uring_cqe* cqe = io_.WaitCqe();
      bool stop = false;
      for (uint32_t seen = 0; cqe != nullptr; ++seen) {
        SsdIo* io = static_cast<SsdIo*>(IoLane::Data(cqe));
        const int res = cqe->res;
        io_.Seen(cqe);
        if (io->op == nullptr && io->kind == SsdIo::Kind::kStop) {
          stop = true;
        } else {
          OnIo(io, res);
        }
        cqe = seen + 1 < options_.ring_entries ? io_.PeekCqe() : nullptr;
      }
      DecodeLanded();
      if (stop) return;
    }
  }

  void OnIo(SsdIo* io, int res) {
    if (io->op == nullptr) {
      switch (io->kind) {
        case SsdIo::Kind::kSync:
          return OnSync(io->file, res);
        case SsdIo::Kind::kTimer:
          return OnSyncTimer(io->file);
        case SsdIo::Kind::kHurry:
          return HurrySyncs();
        case SsdIo::Kind::kStop:  // handled by ReapLoop
        case SsdIo::Kind::kIgnored:
          return;
      }
    }
    SsdOp* op = io->op;
    MC_DASSERT(io->lane == options_.index && op->lane == options_.index,
               "an op's ios complete on its own lane");
    const tier::IoKind kind =
        op->type == OpType::kRead ? tier::IoKind::kRead : tier::IoKind::kWrite;
    if (faults_ != nullptr) {
      res = faults_->OnComplete(kind, io->file, io->offset,
                                std::span<std::byte>(io->data, io->bytes), res);
    }
    if (op->error == 0 && res < 0) op->error = res;
    if (op->error == 0 && static_cast<uint32_t>(res) != io->bytes) op->error = -EIO;
    if (op->type == OpType::kRead && op->error == 0) {
      op->piece_done[io->index] = 1;
      op->AdvanceReadHash();
    }
    MC_DASSERT(op->pending > 0, "completion of an op with nothing pending");
    --op->pending;
    if (op->compressed_read()) {
      // Decoded, and finished once every piece is in, after this batch of completions.
      if (!op->landed) {
        op->landed = true;
        landed_.push_back(op);
      }
      return;
    }
    if (op->pending == 0) client_.OnIosDone(op);
  }

  void DecodeLanded() {
    // An op is in landed_ at most once (op->landed), and finishes only here.
    for (SsdOp* op : landed_) {
      op->landed = false;
      if (op->error == 0) {
        codec_.DecodeArrived(decoder_, op->record->header, op->staging.data, op->arrived, op->into,
                             op->decode);
      }
      if (op->pending == 0) client_.OnIosDone(op);
    }
    landed_.clear();
  }

  void TakeSyncStep(uint32_t file, SyncStep step) {
    SyncIos& s = sync_[file];
    switch (step) {
      case SyncStep::kNone:
        return;
      case SyncStep::kSync:
        ops_.Begin();  // the tier's destructor waits for it (OnSync ends it)
        client_.OnSyncIssued();
        return io_.SubmitSync(file, &s.sync);
      case SyncStep::kArmTimer: {
        ops_.Begin();  // the destructor waits for the timer and the sync it starts
        const uint32_t ms = options_.background_sync_ms;
        s.timer_ts.tv_sec = ms / 1000;
        s.timer_ts.tv_nsec = static_cast<long long>(ms % 1000) * 1000000;
        return io_.SubmitTimeout(&s.timer_ts, &s.timer);
      }
    }
  }

  void HurrySyncs() {
    std::vector<void*> timers;
    // Each cancelled timeout completes with -ECANCELED and OnSyncTimer starts its sync.
    for (uint32_t file : commit_.Hurry()) timers.push_back(&sync_[file].timer);
    io_.SubmitTimeoutRemoves(timers, &cancelled_);
  }

  void OnSyncTimer(uint32_t file) {
    TakeSyncStep(file, commit_.OnTimer(file));
    ops_.End();  // the timer's (TakeSyncStep counted it)
  }

  void OnSync(uint32_t file, int res) {
    if (faults_ != nullptr) res = faults_->OnComplete(tier::IoKind::kSync, file, 0, {}, res);
    SyncStep next = SyncStep::kNone;
    const std::vector<SsdOp*> batch = commit_.OnSync(file, next);
    TakeSyncStep(file, next);
    client_.OnSynced(file, res, batch);
    ops_.End();  // this sync's (TakeSyncStep counted it)
  }

  const SsdLaneOptions options_;
  RecordCodec& codec_;
  OpTracker& ops_;
  tier::IoFaults* const faults_;
  SsdLaneClient& client_;
  IoLane io_;
  StagingArena arena_;
  GroupCommit<SsdOp*> commit_;
  compress::BytePlaneCodec decoder_;  // the reaper's; joined by the codec's helpers
  std::vector<SsdOp*> landed_;        // the reaper's: compressed reads to decode
  std::vector<SyncIos> sync_;         // per file; fixed after construction
  SsdIo stop_, hurry_, cancelled_;
  std::thread reaper_;
};

}  // namespace mooncake::tier_internal

#endif  // MOONCAKE_TIER_INTERNAL_SSD_LANE_H_
