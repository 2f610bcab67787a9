// IdentityCodec: frames and checksums, no coding. Every chunk is stored raw, so
// compression costs a checksum and a memcpy; the baseline every other codec is measured
// against, and the format to use when data must stay byte-addressable in place.
#ifndef MOONCAKE_COMPRESS_IDENTITY_CODEC_H_
#define MOONCAKE_COMPRESS_IDENTITY_CODEC_H_

#include <cstddef>
#include <span>

#include "absl/status/status.h"
#include "mooncake/compress/codec.h"
#include "mooncake/compress/internal/chunked_codec.h"

namespace mooncake::compress {
namespace identity_internal {

struct IdentityCoder {
  struct Config {};
  static constexpr CodecId kId = CodecId::kIdentity;

  explicit IdentityCoder(const Config&) {}
  size_t EncodeChunk(std::span<const std::byte>, DType, std::span<std::byte>) { return 0; }
  absl::Status DecodeChunk(std::span<const std::byte>, size_t, DType, std::span<std::byte>) {
    return absl::DataLossError("identity frames store every chunk raw; this one claims coded");
  }
};

}  // namespace identity_internal

class IdentityCodec : public compress_internal::ChunkedCodec<identity_internal::IdentityCoder> {
 public:
  using Coder = identity_internal::IdentityCoder;
  explicit IdentityCodec(CodecOptions options = {})
      : compress_internal::ChunkedCodec<Coder>(options, Coder::Config{}) {}
};
static_assert(Codec<IdentityCodec>);

}  // namespace mooncake::compress

#endif  // MOONCAKE_COMPRESS_IDENTITY_CODEC_H_
