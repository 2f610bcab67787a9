// SsdTier's operations and completion path (declared in ssd_tier.h). Part of
// ssd_tier.h: include that header, not this one.
#ifndef MOONCAKE_TIER_INTERNAL_SSD_TIER_OPS_H_
#define MOONCAKE_TIER_INTERNAL_SSD_TIER_OPS_H_

#include <chrono>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/tier/ssd_tier.h"

namespace mooncake::tier {
namespace ssd_tier_internal {

inline absl::Status CheckKey(std::string_view key) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key must be 1 to ", kMaxKeyBytes, " bytes, got ", key.size()));
  }
  return absl::OkStatus();
}

}  // namespace ssd_tier_internal

inline bool SsdTier::ShouldCompress(compress::DType dtype, uint64_t raw_bytes) {
  if (options_.compression == Compression::kNever || dtype == compress::DType::kBytes ||
      raw_bytes < 4 * tier_internal::kBlockBytes) {
    return false;
  }
  if (options_.compression == Compression::kAlways) return true;
  std::lock_guard<std::mutex> lock(profile_mu_);
  Profile& p = profiles_[static_cast<size_t>(dtype)];
  if (!p.measured) return true;
  compress::CodecProfile codec = p.codec;
  // The rule is applied to the read path, where compression pays (fewer bytes from the
  // device): a read decodes while its later pieces are still being read (pipelined, in
  // grains of one frame chunk), on every lane's reaper at once (each joined by the idle
  // codec helpers), and never compresses, so the compress speed (paid once, on the
  // writer's thread) is not one of its stages. The profile holds one thread's decode
  // speed (a record's thread-seconds); reads on all lanes together decode on the reapers and the
  // helpers, at most one per usable CPU.
  codec.decompress_bytes_per_s *= static_cast<double>(
      std::min<size_t>(static_cast<size_t>(usable_cpus_),
                       lanes_.size() + static_cast<size_t>(codec_helpers_->helpers())));
  codec.compress_bytes_per_s = std::numeric_limits<double>::infinity();
  return compress::DecideCompression(raw_bytes, info_.device_read_bytes_per_s, codec,
                                     compress::Overlap::kPipelined, options_.codec_chunk_bytes)
      .compress;
}

// Stages [header block][payload] for a write. A compressed payload is coded
// into the staging here; a raw one is copied later, piece by piece, as the
// pieces are submitted. Returns the stored payload size.
inline uint64_t SsdTier::StageWrite(std::span<const std::byte> bytes, const ObjectMeta& meta,
                                    Lane& lane, Staging& staging, uint8_t& codec) {
  using Clock = std::chrono::steady_clock;
  const uint64_t raw = bytes.size();
  codec = tier_internal::kCodecRaw;
  if (ShouldCompress(meta.dtype, raw)) {
    std::unique_ptr<compress::AdaptiveCodec<>> coder;
    {
      std::lock_guard<std::mutex> lock(codec_mu_);
      if (!codec_pool_.empty()) {
        coder = std::move(codec_pool_.back());
        codec_pool_.pop_back();
      }
    }
    if (!coder) coder = std::make_unique<compress::AdaptiveCodec<>>(CodecOptions());
    const uint64_t max = std::max<uint64_t>(coder->MaxCompressedSize(raw), raw);
    staging = AcquireStaging(lane, tier_internal::RecordBytes(max));
    std::span<std::byte> out(staging.data + tier_internal::kBlockBytes, max);
    absl::StatusOr<size_t> n;
    double compress_s = 0;
    {
      const CodecCall call(*this);
      coder->set_threads(call.threads());
      const auto t0 = Clock::now();
      n = coder->Compress(bytes, meta.dtype, out);
      compress_s = ssd_tier_internal::CodecThreadSeconds(t0, *coder);
    }
    bool measured = true;
    if (n.ok()) {
      std::lock_guard<std::mutex> lock(profile_mu_);
      measured = profiles_[static_cast<size_t>(meta.dtype)].measured;
    }
    double decompress_bytes_per_s = 0;
    if (n.ok() && !measured) {
      // One-time decode to learn the decompression speed before any read (with this
      // thread's own coder: the lane's decoder belongs to its reaper).
      std::vector<std::byte> check(raw);
      const CodecCall call(*this);
      coder->set_threads(call.threads());
      const auto t1 = Clock::now();
      absl::StatusOr<size_t> back =
          coder->Decompress(std::span<const std::byte>(out.data(), *n), check);
      decompress_bytes_per_s =
          back.ok() ? raw / ssd_tier_internal::CodecThreadSeconds(t1, *coder) : 1;
    }
    if (n.ok()) {
      std::lock_guard<std::mutex> lock(profile_mu_);
      Profile& p = profiles_[static_cast<size_t>(meta.dtype)];
      if (!p.measured && decompress_bytes_per_s > 0) {
        p.codec.decompress_bytes_per_s = decompress_bytes_per_s;
      }
      p.codec.ratio = ssd_tier_internal::Ewma(p.measured, p.codec.ratio, double(raw) / double(*n));
      p.codec.compress_bytes_per_s =
          ssd_tier_internal::Ewma(p.measured, p.codec.compress_bytes_per_s, raw / compress_s);
      p.measured = true;
    }
    {
      std::lock_guard<std::mutex> lock(codec_mu_);
      codec_pool_.push_back(std::move(coder));
    }
    if (n.ok() && *n < raw - raw / 50) {
      codec = static_cast<uint8_t>(compress::AdaptiveCodec<>::kId);
      return *n;
    }
    ReleaseStaging(lane, staging);
  }
  staging = AcquireStaging(lane, tier_internal::RecordBytes(raw));
  return raw;
}

inline void SsdTier::Write(std::string_view key, std::span<const std::byte> bytes,
                           const ObjectMeta& meta, WriteDone done) {
  using tier_internal::kBlockBytes;
  if (absl::Status s = ssd_tier_internal::CheckKey(key); !s.ok()) return done(s);
  if (bytes.empty()) return done(absl::InvalidArgumentError("cannot write an empty object"));
  if (bytes.size() + kBlockBytes > capacity_bytes_) {
    return done(absl::ResourceExhaustedError(
        absl::StrCat("object of ", bytes.size(), " bytes exceeds the SSD tier's capacity of ",
                     capacity_bytes_)));
  }
  uint64_t sequence = 0;
  bool exists = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    exists = index_.contains(key) || writing_.contains(key);
    if (!exists) {
      writing_.emplace(key);
      sequence = next_sequence_++;
    }
  }
  // Callbacks never run under mu_: they may call back into the tier.
  if (exists) {
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
  const auto extent = AllocateExtent(tier_internal::RecordBytes(stored));
  if (!extent) {
    ReleaseStaging(lane, op->staging);
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_.erase(key);
    }
    counters_.write_failures.fetch_add(1, std::memory_order_relaxed);
    WriteDone cb = std::move(op->write_done);
    EndOp(op);
    return cb(absl::ResourceExhaustedError(absl::StrCat(
        "SSD tier full: no free extent of ", tier_internal::RecordBytes(stored), " bytes (",
        counters_.used_bytes.load(), " of ", capacity_bytes_, " bytes used)")));
  }
  RecordPtr rec = MakeRecord();
  rec->key.assign(key);
  rec->file = extent->first;
  rec->extent = extent->second;
  rec->header = tier_internal::RecordHeader{
      sequence, tier_internal::KeyHash(key), bytes.size(), stored, codec, meta.dtype, meta.user_tag,
      0};
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
  const bool fixed = op->staging.slot.has_value();
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
    if (i + 1 < pieces) SubmitIos(op, i, i + 1, /*is_write=*/true);
  }
  rec->header.payload_checksum = hash.Digest();
  tier_internal::EncodeRecordHeader(rec->header, key,
                                    std::span<std::byte>(op->staging.data, kBlockBytes));
  if (one_write) {
    op->ios[0].data = op->staging.data;
    op->ios[0].bytes += static_cast<uint32_t>(kBlockBytes);
    op->ios[0].offset = rec->DiskOffset();
    return SubmitIos(op, 0, 1, /*is_write=*/true);
  }
  op->ios[pieces] = Io{op,       rec->file,         pieces,
                       op->lane, op->staging.data,  static_cast<uint32_t>(kBlockBytes),
                       0,        rec->DiskOffset(), fixed};
  SubmitIos(op, pieces - 1, pieces + 1, /*is_write=*/true);
}

inline void SsdTier::Read(std::string_view key, std::span<std::byte> into, ReadDone done) {
  using tier_internal::kBlockBytes;
  if (absl::Status s = ssd_tier_internal::CheckKey(key); !s.ok()) return done(s);
  RecordPtr rec;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) rec = it->second;
  }
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
  if (!op->zero_copy) op->staging = AcquireStaging(lane, tier_internal::RoundUpToBlock(stored));
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
      fixed = op->staging.slot.has_value();
    } else if (at + len <= into.size()) {
      dst = into.data() + at;
    } else {
      // The caller's buffer ends inside the last block: stage that piece.
      op->staging = AcquireStaging(lane, len);
      dst = op->tail_src = op->staging.data;
      fixed = op->staging.slot.has_value();
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
  SubmitIos(op, 0, pieces, /*is_write=*/false);
}

inline void SsdTier::Remove(std::string_view key, WriteDone done) {
  if (absl::Status s = ssd_tier_internal::CheckKey(key); !s.ok()) return done(s);
  RecordPtr rec;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      rec = std::move(it->second);
      index_.erase(it);
    }
  }
  // Callbacks never run under mu_: they may call back into the tier.
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
  SubmitIos(op, 0, 1, /*is_write=*/true);
}

// Drains the completions that are ready (at most ring_entries), then decodes what the
// compressed reads among them can decode: all the frame chunks that landed meanwhile go to
// the codec in one call, which the idle codec helpers join (chunks decoded one completion
// at a time would leave them nothing to share while the device delivers pieces faster
// than one thread decodes).
inline void SsdTier::ReapLoop(uint32_t lane_index) {
  Lane& lane = *lanes_[lane_index];
  for (;;) {
    io_uring_cqe* cqe = lane.ring.WaitCqe();
    bool stop = false;
    for (uint32_t seen = 0; cqe != nullptr; ++seen) {
      Io* io = static_cast<Io*>(lane.ring.Data(cqe));
      const int res = cqe->res;
      lane.ring.Seen(cqe);
      if (io->op == nullptr && io->kind == Io::Kind::kStop) {
        stop = true;
      } else {
        OnIo(io, res);
      }
      cqe = seen + 1 < options_.ring_entries ? lane.ring.PeekCqe() : nullptr;
    }
    DecodeLanded(lane);
    if (stop) return;
  }
}

inline void SsdTier::DecodeLanded(Lane& lane) {
  // An op is in `landed` at most once (op->landed), and finishes only here.
  for (Op* op : lane.landed) {
    op->landed = false;
    if (op->error == 0) DecodeArrived(op);
    if (op->pending == 0) OnIosDone(op);
  }
  lane.landed.clear();
}

inline void SsdTier::OnIo(Io* io, int res) {
  if (io->op == nullptr) {
    switch (io->kind) {
      case Io::Kind::kSync:
        return OnSync(io->lane, io->file, res);
      case Io::Kind::kTimer:
        return OnSyncTimer(io->lane, io->file);
      case Io::Kind::kHurry:
        return HurrySyncs(io->lane);
      case Io::Kind::kStop:  // handled by ReapLoop
      case Io::Kind::kIgnored:
        return;
    }
  }
  Op* op = io->op;
  const IoKind kind = op->type == OpType::kRead ? IoKind::kRead : IoKind::kWrite;
  if (options_.faults) {
    res = options_.faults->OnComplete(kind, io->file, io->offset,
                                      std::span<std::byte>(io->data, io->bytes), res);
  }
  if (op->error == 0 && res < 0) op->error = res;
  if (op->error == 0 && static_cast<uint32_t>(res) != io->bytes) op->error = -EIO;
  if (op->type == OpType::kRead && op->error == 0) {
    op->piece_done[io->index] = 1;
    AdvanceReadHash(op);
  }
  MC_DASSERT(op->pending > 0, "completion of an op with nothing pending");
  --op->pending;
  if (op->type == OpType::kRead && op->record->header.codec != tier_internal::kCodecRaw) {
    // Decoded, and finished once every piece is in, after this batch of completions.
    MC_DASSERT(io->lane == op->lane, "a read's pieces complete on its own lane");
    if (!op->landed) {
      op->landed = true;
      lanes_[io->lane]->landed.push_back(op);
    }
    return;
  }
  if (op->pending == 0) OnIosDone(op);
}

inline void SsdTier::AdvanceReadHash(Op* op) {
  while (op->hashed < op->ios.size() && op->piece_done[op->hashed]) {
    const Io& io = op->ios[op->hashed];
    op->hash.Update(io.data, io.payload);
    op->arrived += io.payload;
    ++op->hashed;
  }
}

// Decodes the frame chunks whose payloads lie in the stored bytes that have
// arrived (op->arrived, in order). The first failure is kept in decode_status
// and ends decoding; FinishRead reports it.
inline void SsdTier::DecodeArrived(Op* op) {
  const tier_internal::RecordHeader& h = op->record->header;
  if (!op->decode_status.ok()) return;
  if (h.codec != static_cast<uint8_t>(compress::CodecId::kBytePlane)) {
    op->decode_status = absl::DataLossError(
        absl::StrCat("uses codec ", h.codec, ", which this build does not decode"));
    return;
  }
  const std::span<const std::byte> frame(op->staging.data, h.stored_bytes);
  if (!op->frame) {
    const uint64_t need = compress::FrameBytesToParse(frame.first(op->arrived));
    if ((need == 0 || need > op->arrived) && op->arrived < h.stored_bytes) return;
    absl::StatusOr<compress::FrameView> view = compress::FrameView::Parse(frame);
    if (!view.ok()) {
      op->decode_status = view.status();
      return;
    }
    if (view->info().raw_bytes != h.raw_bytes) {
      op->decode_status = absl::DataLossError(absl::StrCat(
          "frame holds ", view->info().raw_bytes, " raw bytes, the record says ", h.raw_bytes));
      return;
    }
    op->frame.emplace(*std::move(view));
  }
  const std::vector<compress::ChunkRef>& chunks = op->frame->chunks();
  uint32_t end = op->decoded_chunks;
  while (end < chunks.size() &&
         chunks[end].payload_offset + chunks[end].payload_bytes <= op->arrived) {
    ++end;
  }
  if (end == op->decoded_chunks) return;
  compress::BytePlaneCodec& decoder = lanes_[op->lane]->decoder;
  const CodecCall call(*this);
  decoder.set_threads(call.threads());
  const auto t0 = std::chrono::steady_clock::now();
  op->decode_status = decoder.DecompressChunks(*op->frame, op->decoded_chunks, end, op->arrived,
                                               op->into.first(h.raw_bytes));
  op->decode_s += ssd_tier_internal::CodecThreadSeconds(t0, decoder);
  op->decoded_chunks = end;
}

inline void SsdTier::OnIosDone(Op* op) {
  const absl::Status io_error =
      op->error == 0
          ? absl::OkStatus()
          : ErrnoToStatus(-op->error, absl::StrCat("SSD tier I/O on '", op->record->key, "'"));
  if (op->error != 0) counters_.io_errors.fetch_add(1, std::memory_order_relaxed);
  switch (op->type) {
    case OpType::kRead:
      return FinishRead(op);
    case OpType::kWrite:
      if (op->error) return FinishWrite(op, absl::UnavailableError(io_error.message()));
      if (options_.durability == Durability::kPowerLoss) return EnqueueSync(op);
      // On the device now: a process crash cannot take it. Power loss can until the
      // background sync this asks for completes (kProcessCrash), or at all (kNoSync).
      if (options_.durability == Durability::kProcessCrash) {
        MarkUnsynced(op->lane, op->record->file);
      }
      return FinishWrite(op, absl::OkStatus());
    case OpType::kRemove:
      // Acknowledged when the extent is free again (callers remove to make room; the
      // store's tier agent retries a write refused for space when its removes end): once
      // the zeroed header is synced, or under kNoSync written.
      if (op->error) return FinishRemove(op, absl::UnavailableError(io_error.message()));
      if (options_.durability == Durability::kNoSync) return FinishRemove(op, absl::OkStatus());
      return EnqueueSync(op);
  }
}

inline void SsdTier::EnqueueSync(Op* op) {
  Lane& lane = *lanes_[op->lane];
  SyncState& s = lane.sync[op->record->file];
  s.waiting.push_back(op);
  if (!s.in_flight) SubmitSync(lane, op->lane, op->record->file);
}

inline void SsdTier::MarkUnsynced(uint32_t lane_index, uint32_t file) {
  Lane& lane = *lanes_[lane_index];
  lane.sync[file].dirty = true;
  ScheduleBackgroundSync(lane, lane_index, file);
}

// A sync in flight covers nothing acknowledged after it began, so a dirty (lane, file)
// gets its next sync background_sync_ms after the first write it has to cover was
// acknowledged, or after the sync in flight then completed: every acknowledgement is
// covered within background_sync_ms + about two sync durations.
inline void SsdTier::ScheduleBackgroundSync(Lane& lane, uint32_t lane_index, uint32_t file) {
  SyncState& s = lane.sync[file];
  if (s.in_flight || s.timer_armed || !s.dirty) return;
  if (options_.background_sync_ms == 0 || hurry_syncs_.load()) {
    return SubmitSync(lane, lane_index, file);
  }
  s.timer_armed = true;
  BeginOp();  // the destructor waits for the timer and the sync it starts
  s.timer_ts.tv_sec = options_.background_sync_ms / 1000;
  s.timer_ts.tv_nsec = static_cast<long long>(options_.background_sync_ms % 1000) * 1000000;
  std::lock_guard<std::mutex> lock(lane.sq_mu);
  io_uring_sqe* sqe = lane.ring.Sqe();
  io_uring_prep_timeout(sqe, &s.timer_ts, 0, 0);
  lane.ring.SetData(sqe, &s.timer_io);
  lane.ring.Submit();
}

inline void SsdTier::HurrySyncs(uint32_t lane_index) {
  Lane& lane = *lanes_[lane_index];
  std::lock_guard<std::mutex> lock(lane.sq_mu);
  for (SyncState& s : lane.sync) {
    if (!s.timer_armed) continue;
    // The timeout completes with -ECANCELED and OnSyncTimer starts its sync.
    io_uring_sqe* sqe = lane.ring.Sqe();
    io_uring_prep_timeout_remove(sqe, reinterpret_cast<uintptr_t>(&s.timer_io), 0);
    lane.ring.SetData(sqe, &lane.cancelled);
  }
  lane.ring.Submit();
}

inline void SsdTier::OnSyncTimer(uint32_t lane_index, uint32_t file) {
  Lane& lane = *lanes_[lane_index];
  SyncState& s = lane.sync[file];
  s.timer_armed = false;
  if (!s.in_flight && s.dirty) SubmitSync(lane, lane_index, file);
  EndInflight();  // the timer's (ScheduleBackgroundSync counted it)
}

inline void SsdTier::OnSync(uint32_t lane_index, uint32_t file, int res) {
  Lane& lane = *lanes_[lane_index];
  SyncState& s = lane.sync[file];
  if (options_.faults) res = options_.faults->OnComplete(IoKind::kSync, file, 0, {}, res);
  std::vector<Op*> batch;
  batch.swap(s.batch);
  s.in_flight = false;
  if (!s.waiting.empty()) {
    SubmitSync(lane, lane_index, file);
  } else {
    ScheduleBackgroundSync(lane, lane_index, file);
  }
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
  EndInflight();  // this sync's (SubmitSync counted it)
}

inline void SsdTier::FinishWrite(Op* op, absl::Status status) {
  Record& r = *op->record;
  ReleaseStaging(*lanes_[op->lane], op->staging);
  {
    std::lock_guard<std::mutex> lock(mu_);
    writing_.erase(r.key);
    if (status.ok()) index_.emplace(r.key, op->record);
  }
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
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(record->key);
  if (it != index_.end() && it->second == record) {
    index_.erase(it);
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
  } else if (!op->decode_status.ok() || !op->frame ||
             op->decoded_chunks != op->frame->info().chunk_count) {
    // Every piece has arrived, so every chunk was decoded unless decoding failed.
    DropCorrupt(op->record);
    status = absl::DataLossError(
        absl::StrCat("SSD tier record of '", r.key, "' failed to decode; dropped: ",
                     op->decode_status.ok() ? "frame incomplete" : op->decode_status.message()));
  } else if (op->decode_s > 0) {
    std::lock_guard<std::mutex> lock(profile_mu_);
    Profile& p = profiles_[static_cast<size_t>(h.dtype)];
    p.codec.decompress_bytes_per_s =
        ssd_tier_internal::Ewma(true, p.codec.decompress_bytes_per_s, h.raw_bytes / op->decode_s);
  }
  ReleaseStaging(*lanes_[op->lane], op->staging);
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
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  const Record& r = *it->second;
  return ObjectInfo{r.key, r.header.raw_bytes, r.extent.size,
                    ObjectMeta{r.header.dtype, r.header.user_tag},
                    r.header.codec != tier_internal::kCodecRaw};
}

inline bool SsdTier::Contains(std::string_view key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.contains(key);
}

inline void SsdTier::ForEach(ObjectVisitor visit) const {
  std::vector<RecordPtr> snapshot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    snapshot.reserve(index_.size());
    for (const auto& [key, rec] : index_) snapshot.push_back(rec);
  }
  for (const RecordPtr& r : snapshot) {
    visit(ObjectInfo{r->key, r->header.raw_bytes, r->extent.size,
                     ObjectMeta{r->header.dtype, r->header.user_tag},
                     r->header.codec != tier_internal::kCodecRaw});
  }
}

inline TierStats SsdTier::stats() const {
  TierStats s;
  s.capacity_bytes = capacity_bytes_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.objects = index_.size();
  }
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
  i.codec_helper_joins = codec_helpers_ ? codec_helpers_->joins() : 0;
  i.failed_syncs = counters_.failed_syncs.load();
  return i;
}

}  // namespace mooncake::tier

#endif  // MOONCAKE_TIER_INTERNAL_SSD_TIER_OPS_H_
