// ZstdCodec: each chunk compressed by zstd at a fixed level, with one compression and one
// decompression context per thread, created once and reused for every chunk and call.
// Dtype-blind: the general-purpose baseline (and the right choice for non-float data).
#ifndef MOONCAKE_COMPRESS_ZSTD_CODEC_H_
#define MOONCAKE_COMPRESS_ZSTD_CODEC_H_

#include <zstd.h>

#include <cstddef>
#include <span>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/compress/codec.h"
#include "mooncake/compress/internal/chunked_codec.h"

namespace mooncake::compress {
namespace zstd_internal {

class ZstdCoder {
 public:
  struct Config {
    int level = 1;
  };
  static constexpr CodecId kId = CodecId::kZstd;

  explicit ZstdCoder(const Config& config) : cctx_(ZSTD_createCCtx()), dctx_(ZSTD_createDCtx()) {
    MC_ASSERT(cctx_ != nullptr && dctx_ != nullptr, "out of memory creating zstd contexts");
    const size_t rc = ZSTD_CCtx_setParameter(cctx_, ZSTD_c_compressionLevel, config.level);
    MC_ASSERT(!ZSTD_isError(rc), "invalid zstd level");
    // The frame already checksums and sizes every chunk.
    ZSTD_CCtx_setParameter(cctx_, ZSTD_c_checksumFlag, 0);
    ZSTD_CCtx_setParameter(cctx_, ZSTD_c_contentSizeFlag, 0);
  }
  ~ZstdCoder() {
    ZSTD_freeCCtx(cctx_);
    ZSTD_freeDCtx(dctx_);
  }
  ZstdCoder(const ZstdCoder&) = delete;
  ZstdCoder& operator=(const ZstdCoder&) = delete;

  size_t EncodeChunk(std::span<const std::byte> raw, DType, std::span<std::byte> out) {
    const size_t rc = ZSTD_compress2(cctx_, out.data(), out.size(), raw.data(), raw.size());
    return ZSTD_isError(rc) ? 0 : rc;  // dstSize_tooSmall: does not beat raw
  }

  absl::Status DecodeChunk(std::span<const std::byte> payload, size_t, DType,
                           std::span<std::byte> raw_out) {
    const size_t rc =
        ZSTD_decompressDCtx(dctx_, raw_out.data(), raw_out.size(), payload.data(), payload.size());
    if (ZSTD_isError(rc)) {
      return absl::DataLossError(absl::StrCat("zstd: ", ZSTD_getErrorName(rc)));
    }
    if (rc != raw_out.size()) {
      return absl::DataLossError(
          absl::StrCat("zstd payload decodes to ", rc, " bytes, expected ", raw_out.size()));
    }
    return absl::OkStatus();
  }

 private:
  ZSTD_CCtx* cctx_;
  ZSTD_DCtx* dctx_;
};

}  // namespace zstd_internal

class ZstdCodec : public compress_internal::ChunkedCodec<zstd_internal::ZstdCoder> {
 public:
  using Coder = zstd_internal::ZstdCoder;
  explicit ZstdCodec(int level = 1, CodecOptions options = {})
      : compress_internal::ChunkedCodec<Coder>(options, Coder::Config{level}) {
    MC_ASSERT(level >= ZSTD_minCLevel() && level <= ZSTD_maxCLevel(), "zstd level out of range");
  }
  explicit ZstdCodec(CodecOptions options, int level = 1) : ZstdCodec(level, options) {}
};
static_assert(Codec<ZstdCodec>);

}  // namespace mooncake::compress

#endif  // MOONCAKE_COMPRESS_ZSTD_CODEC_H_
