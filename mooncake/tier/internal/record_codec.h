// RecordCodec: compression of the SSD tier's records. Decides per write
// whether to compress (Compression and the measured codec speed against the
// device), compresses a payload into the record's staging, and decodes a
// compressed record's frame chunks as its pieces arrive from the device.
//
// It owns the codec threads: a pool of codec_threads - 1 helpers that every
// codec call of the tier shares (one record's chunks on several cores), the
// writers' coders (a free list, so a write reuses one), and the profile per
// dtype (ratio, compress and decode speed; an EWMA of what writes and reads
// measured) that the kAuto rule reads. Each lane's decoder is the lane's own
// (its reaper's); DecodeArrived runs it with this codec's threads.
//
// Thread-safety: every call may run concurrently (Compress on writers'
// threads, DecodeArrived and NoteDecode on reapers). One lock (mu_) over the
// free list and the profiles, held for a pop, a push or a profile update, never
// across a codec call: a leaf in SsdTier's lock order (ssd_tier.h). The codec
// calls in progress are an atomic count (CodecCall).
#ifndef MOONCAKE_TIER_INTERNAL_RECORD_CODEC_H_
#define MOONCAKE_TIER_INTERNAL_RECORD_CODEC_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/fork_join_pool.h"
#include "mooncake/base/mutex.h"
#include "mooncake/compress/adaptive_codec.h"
#include "mooncake/compress/byte_plane_codec.h"
#include "mooncake/compress/when_to_compress.h"
#include "mooncake/tier/internal/ssd_format.h"
#include "mooncake/tier/tier.h"

namespace mooncake::tier_internal {

struct RecordCodecOptions {
  tier::Compression compression = tier::Compression::kAuto;
  uint32_t codec_chunk_bytes = 256 << 10;  // raw bytes per frame chunk
  uint32_t codec_threads = 1;              // resolved: >= 1
  int usable_cpus = 1;                     // the CPUs the process may use
  uint32_t lanes = 1;                      // reapers that decode at once
};

// Where the decode of one compressed record stands (DecodeArrived).
struct DecodeProgress {
  std::optional<compress::FrameView> frame;  // parsed once its table has arrived
  uint32_t decoded_chunks = 0;               // chunks [0, decoded_chunks) are in `into`
  absl::Status status;                       // the first failure; decoding stops there
  double decode_s = 0;  // thread-seconds: each call's wall time x the threads that ran it
  // Every chunk decoded and none failed.
  bool done() const { return status.ok() && frame && decoded_chunks == frame->info().chunk_count; }
};

class RecordCodec {
 public:
  // A payload compressed by less than this (1/50 of its size) is stored raw.
  static constexpr uint64_t kMinSavingDivisor = 50;

  explicit RecordCodec(RecordCodecOptions options)
      : options_(options),
        helpers_(std::make_unique<ForkJoinPool>(static_cast<int>(options.codec_threads) - 1)) {
    MC_ASSERT(options_.codec_threads >= 1, "RecordCodec needs at least one thread");
  }
  RecordCodec(const RecordCodec&) = delete;
  RecordCodec& operator=(const RecordCodec&) = delete;

  // Options for a codec that uses this one's helpers (each call sets its threads).
  compress::CodecOptions codec_options() const {
    return compress::CodecOptions{.chunk_bytes = options_.codec_chunk_bytes,
                                  .threads = static_cast<int>(options_.codec_threads),
                                  .pool = helpers_.get()};
  }
  // The device read bandwidth the kAuto rule weighs decoding against. REQUIRES: set once,
  // before any ShouldCompress that may run concurrently (SsdTier::Open sets it).
  void set_device_read_bytes_per_s(double bytes_per_s) { device_read_bytes_per_s_ = bytes_per_s; }
  uint64_t helper_joins() const { return helpers_->joins(); }

  // Whether a payload of `raw_bytes` of `dtype` is worth compressing.
  bool ShouldCompress(compress::DType dtype, uint64_t raw_bytes) {
    if (options_.compression == tier::Compression::kNever || dtype == compress::DType::kBytes ||
        raw_bytes < 4 * kBlockBytes) {
      return false;
    }
    if (options_.compression == tier::Compression::kAlways) return true;
    compress::CodecProfile codec;
    {
      MutexLock lock(&mu_);
      const Profile& p = profiles_[static_cast<size_t>(dtype)];
      if (!p.measured) return true;
      codec = p.codec;
    }
    // The rule is applied to the read path, where compression pays (fewer bytes from the
    // device): a read decodes while its later pieces are still being read (pipelined, in
    // grains of one frame chunk), on every lane's reaper at once (each joined by the idle
    // codec helpers), and never compresses, so the compress speed (paid once, on the
    // writer's thread) is not one of its stages. The profile holds one thread's decode
    // speed (a record's thread-seconds); reads on all lanes together decode on the reapers
    // and the helpers, at most one per usable CPU.
    codec.decompress_bytes_per_s *= static_cast<double>(
        std::min<size_t>(static_cast<size_t>(options_.usable_cpus),
                         options_.lanes + static_cast<size_t>(helpers_->helpers())));
    codec.compress_bytes_per_s = std::numeric_limits<double>::infinity();
    return compress::DecideCompression(raw_bytes, device_read_bytes_per_s_, codec,
                                       compress::Overlap::kPipelined, options_.codec_chunk_bytes)
        .compress;
  }

  // Compresses `raw` into the memory out(max) returns (at least max bytes) and returns the
  // stored size, or nullopt when compression failed or saves under 1/50 (the caller then
  // stores it raw, in memory of its own). Updates the dtype's profile; its first
  // compression also decodes once, to learn the decode speed before any read.
  template <typename Out>
  std::optional<uint64_t> Compress(std::span<const std::byte> raw, compress::DType dtype,
                                   Out&& out) {
    using Clock = std::chrono::steady_clock;
    std::unique_ptr<compress::AdaptiveCodec<>> coder = TakeCoder();
    const uint64_t max = std::max<uint64_t>(coder->MaxCompressedSize(raw.size()), raw.size());
    const std::span<std::byte> dst = out(max);
    MC_ASSERT(dst.size() >= max, "RecordCodec::Compress: out() gave too little memory");
    absl::StatusOr<size_t> n;
    double compress_s = 0;
    {
      const CodecCall call(*this);
      coder->set_threads(call.threads());
      const auto t0 = Clock::now();
      n = coder->Compress(raw, dtype, dst);
      compress_s = CodecThreadSeconds(t0, *coder);
    }
    if (n.ok()) {
      double decompress_bytes_per_s = 0;
      if (!measured(dtype)) {
        // With this thread's own coder: the lanes' decoders belong to their reapers.
        std::vector<std::byte> check(raw.size());
        const CodecCall call(*this);
        coder->set_threads(call.threads());
        const auto t1 = Clock::now();
        absl::StatusOr<size_t> back = coder->Decompress(dst.first(*n), check);
        decompress_bytes_per_s = back.ok() ? raw.size() / CodecThreadSeconds(t1, *coder) : 1;
      }
      MutexLock lock(&mu_);
      Profile& p = profiles_[static_cast<size_t>(dtype)];
      if (!p.measured && decompress_bytes_per_s > 0) {
        p.codec.decompress_bytes_per_s = decompress_bytes_per_s;
      }
      p.codec.ratio = Ewma(p.measured, p.codec.ratio, double(raw.size()) / double(*n));
      p.codec.compress_bytes_per_s =
          Ewma(p.measured, p.codec.compress_bytes_per_s, raw.size() / compress_s);
      p.measured = true;
    }
    GiveBackCoder(std::move(coder));
    if (!n.ok() || *n >= raw.size() - raw.size() / kMinSavingDivisor) return std::nullopt;
    return *n;
  }

  // Decodes, with `decoder`, the frame chunks of a record (header `h`, stored bytes at
  // `stored`) whose payloads lie in its first `arrived` stored bytes (which landed in
  // order) into `into`. The first failure is kept in p.status and ends decoding.
  void DecodeArrived(compress::BytePlaneCodec& decoder, const RecordHeader& h,
                     const std::byte* stored, uint64_t arrived, std::span<std::byte> into,
                     DecodeProgress& p) {
    if (!p.status.ok()) return;
    if (h.codec != static_cast<uint8_t>(compress::CodecId::kBytePlane)) {
      p.status = absl::DataLossError(
          absl::StrCat("uses codec ", h.codec, ", which this build does not decode"));
      return;
    }
    const std::span<const std::byte> frame(stored, h.stored_bytes);
    if (!p.frame) {
      const uint64_t need = compress::FrameBytesToParse(frame.first(arrived));
      if ((need == 0 || need > arrived) && arrived < h.stored_bytes) return;
      absl::StatusOr<compress::FrameView> view = compress::FrameView::Parse(frame);
      if (!view.ok()) {
        p.status = view.status();
        return;
      }
      if (view->info().raw_bytes != h.raw_bytes) {
        p.status = absl::DataLossError(absl::StrCat("frame holds ", view->info().raw_bytes,
                                                    " raw bytes, the record says ", h.raw_bytes));
        return;
      }
      p.frame.emplace(*std::move(view));
    }
    const std::vector<compress::ChunkRef>& chunks = p.frame->chunks();
    uint32_t end = p.decoded_chunks;
    while (end < chunks.size() &&
           chunks[end].payload_offset + chunks[end].payload_bytes <= arrived) {
      ++end;
    }
    if (end == p.decoded_chunks) return;
    const CodecCall call(*this);
    decoder.set_threads(call.threads());
    const auto t0 = std::chrono::steady_clock::now();
    p.status =
        decoder.DecompressChunks(*p.frame, p.decoded_chunks, end, arrived, into.first(h.raw_bytes));
    p.decode_s += CodecThreadSeconds(t0, decoder);
    p.decoded_chunks = end;
  }

  // A record of `raw_bytes` of `dtype` took `decode_s` thread-seconds to decode.
  void NoteDecode(compress::DType dtype, uint64_t raw_bytes, double decode_s) {
    if (decode_s <= 0) return;
    MutexLock lock(&mu_);
    Profile& p = profiles_[static_cast<size_t>(dtype)];
    p.codec.decompress_bytes_per_s =
        Ewma(true, p.codec.decompress_bytes_per_s, raw_bytes / decode_s);
  }
  // The dtype's profile, once a write has measured it.
  std::optional<compress::CodecProfile> profile(compress::DType dtype) const {
    MutexLock lock(&mu_);
    const Profile& p = profiles_[static_cast<size_t>(dtype)];
    return p.measured ? std::optional(p.codec) : std::nullopt;
  }

 private:
  struct Profile {
    bool measured = false;
    compress::CodecProfile codec;
  };

  // Counts a codec call in progress for its lifetime and gives it its threads: one per CPU
  // that no other codec call of this tier holds (at least its own, at most codec_threads).
  // More threads than CPUs would not go faster, and a reaper waiting for a preempted
  // helper's chunk takes no completions meanwhile. The count is a snapshot: a call keeps
  // the helpers that joined it until it ends.
  class CodecCall {
   public:
    explicit CodecCall(RecordCodec& codec) : active_(codec.calls_) {
      // Relaxed: a heuristic count; nothing is published through it.
      const int calls = active_.fetch_add(1, std::memory_order_relaxed) + 1;
      threads_ = std::clamp(codec.options_.usable_cpus - calls + 1, 1,
                            static_cast<int>(codec.options_.codec_threads));
    }
    ~CodecCall() { active_.fetch_sub(1, std::memory_order_relaxed); }
    CodecCall(const CodecCall&) = delete;
    CodecCall& operator=(const CodecCall&) = delete;
    int threads() const { return threads_; }

   private:
    std::atomic<int>& active_;
    int threads_ = 1;
  };

  static double SecondsSince(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // Thread-seconds of the codec call that began at t0: its wall time (floored, so a coarse
  // clock gives no infinite speed) times the threads that ran it.
  template <typename Codec>
  static double CodecThreadSeconds(std::chrono::steady_clock::time_point t0, const Codec& codec) {
    return std::max(SecondsSince(t0), 1e-9) * codec.last_call_threads();
  }
  static double Ewma(bool has_old, double old_value, double sample) {
    return has_old ? 0.8 * old_value + 0.2 * sample : sample;
  }

  std::unique_ptr<compress::AdaptiveCodec<>> TakeCoder() {
    {
      MutexLock lock(&mu_);
      if (!coders_.empty()) {
        std::unique_ptr<compress::AdaptiveCodec<>> c = std::move(coders_.back());
        coders_.pop_back();
        return c;
      }
    }
    return std::make_unique<compress::AdaptiveCodec<>>(codec_options());
  }
  void GiveBackCoder(std::unique_ptr<compress::AdaptiveCodec<>> coder) {
    MutexLock lock(&mu_);
    coders_.push_back(std::move(coder));
  }
  bool measured(compress::DType dtype) const {
    MutexLock lock(&mu_);
    return profiles_[static_cast<size_t>(dtype)].measured;
  }

  const RecordCodecOptions options_;
  double device_read_bytes_per_s_ = 1e9;  // see set_device_read_bytes_per_s
  // Declared before the coders that use it, so destroyed after them.
  std::unique_ptr<ForkJoinPool> helpers_;
  std::atomic<int> calls_{0};  // codec calls in progress (CodecCall)
  mutable Mutex mu_;
  std::vector<std::unique_ptr<compress::AdaptiveCodec<>>> coders_ ABSL_GUARDED_BY(mu_);
  std::array<Profile, compress::kDTypeCount> profiles_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::tier_internal

#endif  // MOONCAKE_TIER_INTERNAL_RECORD_CODEC_H_
