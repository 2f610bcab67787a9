// The chunked frame driver every codec model is built from: it splits the input into
// chunks, runs a per-thread ChunkCoder on each (in parallel when asked), stores a chunk
// raw when coding does not shrink it, checksums every chunk, and lays out the frame
// (mooncake/compress/frame.h). Models differ only in their ChunkCoder.
#ifndef MOONCAKE_COMPRESS_INTERNAL_CHUNKED_CODEC_H_
#define MOONCAKE_COMPRESS_INTERNAL_CHUNKED_CODEC_H_

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/hash.h"
#include "mooncake/compress/codec.h"
#include "mooncake/compress/frame.h"
#include "mooncake/compress/internal/checksum.h"
#include "mooncake/compress/internal/parallel.h"

namespace mooncake::compress_internal {

using compress::CodecId;
using compress::DType;

// One thread's coding state for one codec.
template <typename T>
concept ChunkCoder = requires(T& coder, std::span<const std::byte> raw, DType dtype,
                              std::span<std::byte> out, std::span<const std::byte> payload,
                              size_t readable_after, std::span<std::byte> raw_out) {
  typename T::Config;
  { T::kId } -> std::convertible_to<CodecId>;
  // Codes `raw` into `out` (out.size() < raw.size()). Returns the payload size, or 0 when
  // the coded form would not fit (the chunk is then stored raw).
  { coder.EncodeChunk(raw, dtype, out) } -> std::same_as<size_t>;
  // Decodes a payload into exactly raw_out.size() bytes. `readable_after` bytes past the
  // payload's end may be loaded (never interpreted). Corrupt payloads -> DataLoss.
  { coder.DecodeChunk(payload, readable_after, dtype, raw_out) } -> std::same_as<absl::Status>;
};

template <ChunkCoder Coder>
class ChunkedCodec {
 public:
  using Config = typename Coder::Config;
  static constexpr CodecId kId = Coder::kId;

  ChunkedCodec(compress::CodecOptions options, Config config) : options_(options), config_(config) {
    const absl::Status s = compress::ValidateChunkBytes(options.chunk_bytes);
    MC_ASSERT(s.ok(), "CodecOptions::chunk_bytes out of range (see ValidateChunkBytes)");
    MC_ASSERT(options.threads >= 1 && options.threads <= compress::kMaxCodecThreads,
              "CodecOptions::threads in [1, kMaxCodecThreads]");
  }

  const compress::CodecOptions& options() const { return options_; }
  const Config& config() const { return config_; }

  // Threads the following calls may use (CodecOptions::threads), e.g. fewer while other
  // work holds the CPUs; frames do not depend on it. REQUIRES: 1 <= threads <=
  // compress::kMaxCodecThreads.
  void set_threads(int threads) {
    MC_ASSERT(threads >= 1 && threads <= compress::kMaxCodecThreads,
              "CodecOptions::threads in [1, kMaxCodecThreads]");
    options_.threads = threads;
  }
  // Threads that ran chunks in the last Compress or Decompress* call: 1 when it ran on
  // its caller alone, fewer than threads when pool helpers were busy elsewhere.
  int last_call_threads() const { return last_call_threads_; }

  size_t MaxCompressedSize(size_t n) const {
    return compress::FrameOverheadBytes(compress::ChunkCount(n, options_.chunk_bytes)) + n;
  }

  absl::StatusOr<size_t> Compress(std::span<const std::byte> src, DType dtype,
                                  std::span<std::byte> dst) {
    const size_t need = MaxCompressedSize(src.size());
    if (dst.size() < need) {
      return absl::InvalidArgumentError(absl::StrCat("dst holds ", dst.size(),
                                                     " bytes; compressing ", src.size(),
                                                     " bytes needs MaxCompressedSize = ", need));
    }
    const uint64_t chunks = compress::ChunkCount(src.size(), options_.chunk_bytes);
    if (chunks >= (uint64_t{1} << 32)) {
      return absl::InvalidArgumentError("input needs more than 2^32 chunks; raise chunk_bytes");
    }
    const compress::FrameInfo info{Coder::kId, dtype, src.size(),
                                   static_cast<uint32_t>(options_.chunk_bytes),
                                   static_cast<uint32_t>(chunks)};
    compress::WriteFrameHeader(info, dst);
    const size_t base = compress::FrameOverheadBytes(chunks);
    const int threads = EnsureCoders(chunks);
    size_t end = base;
    last_call_threads_ = 1;
    if (threads <= 1) {
      for (uint32_t i = 0; i < chunks; ++i) end += CompressChunk(0, src, dtype, i, dst, end);
    } else {
      // Each chunk codes into its own slot (a payload never exceeds its raw size), then
      // the payloads are packed down in order.
      sizes_.resize(chunks);
      last_call_threads_ = ParallelFor(
          static_cast<uint32_t>(chunks), threads,
          [&](int worker, uint32_t i) {
            sizes_[i] =
                CompressChunk(worker, src, dtype, i, dst, base + size_t{i} * options_.chunk_bytes);
          },
          options_.pool);
      for (uint32_t i = 0; i < chunks; ++i) {
        const size_t slot = base + size_t{i} * options_.chunk_bytes;
        if (slot != end) std::memmove(dst.data() + end, dst.data() + slot, sizes_[i]);
        end += sizes_[i];
      }
    }
    compress::SealFrameTable(dst, info.chunk_count);
    MC_DASSERT(end <= need, "frame exceeds MaxCompressedSize");
    return end;
  }

  absl::StatusOr<size_t> Decompress(std::span<const std::byte> frame, std::span<std::byte> dst) {
    absl::StatusOr<compress::FrameView> view = ParseOwn(frame);
    if (!view.ok()) return view.status();
    const uint64_t raw = view->info().raw_bytes;
    if (dst.size() < raw) {
      return absl::InvalidArgumentError(
          absl::StrCat("dst holds ", dst.size(), " bytes; the frame decodes to ", raw));
    }
    if (absl::Status s = DecodeChunks(*view, 0, view->info().chunk_count, 0, dst); !s.ok())
      return s;
    return raw;
  }

  absl::StatusOr<size_t> DecompressRange(std::span<const std::byte> frame, uint64_t offset,
                                         std::span<std::byte> dst) {
    absl::StatusOr<compress::FrameView> view = ParseOwn(frame);
    if (!view.ok()) return view.status();
    const uint64_t raw = view->info().raw_bytes;
    if (offset > raw || dst.size() > raw - offset) {
      return absl::OutOfRangeError(absl::StrCat("range [", offset, ", +", dst.size(),
                                                ") is outside the frame's ", raw, " raw bytes"));
    }
    if (dst.empty()) return 0;
    const uint64_t cb = view->info().chunk_bytes;
    const uint32_t first = static_cast<uint32_t>(offset / cb);
    const uint32_t last = static_cast<uint32_t>((offset + dst.size() - 1) / cb);
    if (absl::Status s = DecodeChunks(*view, first, last + 1, offset, dst); !s.ok()) return s;
    return dst.size();
  }

  // Incremental decoding of a frame whose bytes arrive in order (a disk or network read
  // landing piece by piece), so decoding overlaps the transfer: once the header and chunk
  // table have arrived, parse the frame's full extent with compress::FrameView::Parse
  // (it reads only those; compress::FrameBytesToParse says how many it needs), then call
  // this for each run of chunks whose payloads have arrived. Decodes chunks [first, end)
  // of `view` into dst, which receives the whole frame's raw bytes (dst.size() >=
  // raw_bytes); loads nothing at or past frame byte `arrived`. Every chunk's checksum is
  // verified, as in Decompress.
  absl::Status DecompressChunks(const compress::FrameView& view, uint32_t first, uint32_t end,
                                uint64_t arrived, std::span<std::byte> dst) {
    if (view.info().codec != Coder::kId) {
      return absl::InvalidArgumentError(absl::StrCat(
          "frame was written by codec '", AbslView(compress::CodecName(view.info().codec)),
          "'; this codec decodes '", AbslView(compress::CodecName(Coder::kId)), "' frames"));
    }
    if (dst.size() < view.info().raw_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dst holds ", dst.size(), " bytes; the frame decodes to ", view.info().raw_bytes));
    }
    if (first > end || end > view.info().chunk_count) {
      return absl::OutOfRangeError(absl::StrCat(
          "chunks [", first, ", ", end, ") are outside the frame's ", view.info().chunk_count));
    }
    if (first == end) return absl::OkStatus();
    const compress::ChunkRef& last = view.chunks()[end - 1];
    if (last.payload_offset + last.payload_bytes > arrived) {
      return absl::FailedPreconditionError(absl::StrCat("chunk ", end - 1, " ends at frame byte ",
                                                        last.payload_offset + last.payload_bytes,
                                                        "; only ", arrived, " bytes have arrived"));
    }
    return DecodeChunks(view, first, end, 0, dst.first(view.info().raw_bytes), arrived);
  }

 private:
  struct Worker {
    explicit Worker(const Config& config) : coder(config) {}
    Coder coder;
    std::vector<std::byte> partial;  // a chunk decoded whole when only part is wanted
  };

  // Threads a call over `chunks` chunks uses, with a coder for each.
  int EnsureCoders(uint64_t chunks) {
    uint64_t limit = static_cast<uint64_t>(options_.threads);
    if (options_.pool != nullptr) {
      limit = std::min<uint64_t>(limit, static_cast<uint64_t>(options_.pool->helpers()) + 1);
    }
    const int threads = static_cast<int>(std::min<uint64_t>(limit, chunks));
    while (workers_.size() < static_cast<size_t>(std::max(threads, 1))) {
      workers_.push_back(std::make_unique<Worker>(config_));
    }
    return threads;
  }

  absl::StatusOr<compress::FrameView> ParseOwn(std::span<const std::byte> frame) {
    absl::StatusOr<compress::FrameView> view = compress::FrameView::Parse(frame);
    if (!view.ok()) return view.status();
    if (view->info().codec != Coder::kId) {
      return absl::InvalidArgumentError(absl::StrCat(
          "frame was written by codec '", AbslView(compress::CodecName(view->info().codec)),
          "'; this codec decodes '", AbslView(compress::CodecName(Coder::kId)), "' frames"));
    }
    return view;
  }

  // Codes chunk i into dst at `at`; returns the payload size and fills the table entry.
  size_t CompressChunk(int worker, std::span<const std::byte> src, DType dtype, uint32_t i,
                       std::span<std::byte> dst, size_t at) {
    const size_t cb = options_.chunk_bytes;
    const std::span<const std::byte> raw =
        src.subspan(size_t{i} * cb, std::min(cb, src.size() - size_t{i} * cb));
    const uint64_t checksum = ChunkChecksum(raw.data(), raw.size());
    size_t coded = workers_[worker]->coder.EncodeChunk(raw, dtype, dst.subspan(at, raw.size() - 1));
    MC_ASSERT(coded < raw.size(), "a coded payload must be smaller than its chunk");
    const bool stored = coded == 0;
    if (stored) {
      std::memcpy(dst.data() + at, raw.data(), raw.size());
      coded = raw.size();
    }
    compress::WriteChunkEntry(dst, i, static_cast<uint32_t>(coded), stored, checksum);
    return coded;
  }

  // Decodes chunks [first, end) into dst, which starts at raw byte `offset`.
  // Bytes at or past frame byte `readable_end` are never loaded.
  absl::Status DecodeChunks(const compress::FrameView& view, uint32_t first, uint32_t end,
                            uint64_t offset, std::span<std::byte> dst,
                            uint64_t readable_end = UINT64_MAX) {
    const int threads = EnsureCoders(end - first);
    last_call_threads_ = 1;
    if (threads <= 1) {
      for (uint32_t i = first; i < end; ++i) {
        if (absl::Status s = DecodeChunk(0, view, i, offset, dst, readable_end); !s.ok()) return s;
      }
      return absl::OkStatus();
    }
    std::vector<absl::Status> errors(end - first);
    last_call_threads_ = ParallelFor(
        end - first, threads,
        [&](int worker, uint32_t k) {
          errors[k] = DecodeChunk(worker, view, first + k, offset, dst, readable_end);
        },
        options_.pool);
    for (absl::Status& s : errors) {
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status DecodeChunk(int worker, const compress::FrameView& view, uint32_t i, uint64_t offset,
                           std::span<std::byte> dst, uint64_t readable_end) {
    const compress::ChunkRef& c = view.chunks()[i];
    Worker& w = *workers_[worker];
    // The part of this chunk the caller wants, in chunk and in dst coordinates.
    const uint64_t lo = std::max(c.raw_offset, offset);
    const uint64_t hi = std::min<uint64_t>(c.raw_offset + c.raw_bytes, offset + dst.size());
    MC_DASSERT(lo < hi, "chunk overlaps the range");
    const bool whole = lo == c.raw_offset && hi == c.raw_offset + c.raw_bytes;
    std::span<std::byte> out;
    if (whole) {
      out = dst.subspan(c.raw_offset - offset, c.raw_bytes);
    } else {
      w.partial.resize(c.raw_bytes);
      out = std::span<std::byte>(w.partial);
    }
    const std::span<const std::byte> payload = view.Payload(c);
    // Coders that can compute the checksum while writing the output (two-byte dtypes in
    // BytePlaneCodec) hand it back; every other chunk is hashed after decoding.
    std::optional<uint64_t> checksum;
    if (c.stored_raw) {
      std::memcpy(out.data(), payload.data(), c.raw_bytes);
    } else {
      const uint64_t payload_end = c.payload_offset + c.payload_bytes;
      MC_DASSERT(payload_end <= readable_end, "chunk payload has arrived");
      const size_t readable_after =
          std::min<uint64_t>(view.frame().size(), readable_end) - payload_end;
      absl::Status s;
      if constexpr (requires {
                      w.coder.DecodeChunk(payload, readable_after, view.info().dtype, out,
                                          &checksum);
                    }) {
        s = w.coder.DecodeChunk(payload, readable_after, view.info().dtype, out, &checksum);
      } else {
        s = w.coder.DecodeChunk(payload, readable_after, view.info().dtype, out);
      }
      if (!s.ok()) return absl::Status(s.code(), absl::StrCat("chunk ", i, ": ", s.message()));
    }
    if (!checksum.has_value()) checksum = ChunkChecksum(out.data(), out.size());
    if (*checksum != c.checksum) {
      return absl::DataLossError(absl::StrCat("chunk ", i, " (raw bytes [", c.raw_offset, ", ",
                                              c.raw_offset + c.raw_bytes,
                                              ")) fails its XXH3 checksum: the frame is corrupt"));
    }
    if (!whole) std::memcpy(dst.data() + (lo - offset), out.data() + (lo - c.raw_offset), hi - lo);
    return absl::OkStatus();
  }

  compress::CodecOptions options_;
  Config config_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<size_t> sizes_;
  int last_call_threads_ = 1;
};

}  // namespace mooncake::compress_internal

#endif  // MOONCAKE_COMPRESS_INTERNAL_CHUNKED_CODEC_H_
