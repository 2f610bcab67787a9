#include "mooncake/compress/codec.h"

#include <cstddef>
#include <span>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "mooncake/compress/identity_codec.h"

namespace mooncake::compress {
namespace {

using Bytes = std::span<const std::byte>;
using MutBytes = std::span<std::byte>;

// One broken type per requirement; the concept must reject each.
struct NoId {
  size_t MaxCompressedSize(size_t) const;
  absl::StatusOr<size_t> Compress(Bytes, DType, MutBytes);
  absl::StatusOr<size_t> Decompress(Bytes, MutBytes);
  absl::StatusOr<size_t> DecompressRange(Bytes, uint64_t, MutBytes);
};
struct MutableMaxSize {
  static constexpr CodecId kId = CodecId::kIdentity;
  size_t MaxCompressedSize(size_t);  // not const
  absl::StatusOr<size_t> Compress(Bytes, DType, MutBytes);
  absl::StatusOr<size_t> Decompress(Bytes, MutBytes);
  absl::StatusOr<size_t> DecompressRange(Bytes, uint64_t, MutBytes);
};
struct CompressWithoutDType {
  static constexpr CodecId kId = CodecId::kIdentity;
  size_t MaxCompressedSize(size_t) const;
  absl::StatusOr<size_t> Compress(Bytes, MutBytes);
  absl::StatusOr<size_t> Decompress(Bytes, MutBytes);
  absl::StatusOr<size_t> DecompressRange(Bytes, uint64_t, MutBytes);
};
struct DecompressReturnsSize {
  static constexpr CodecId kId = CodecId::kIdentity;
  size_t MaxCompressedSize(size_t) const;
  absl::StatusOr<size_t> Compress(Bytes, DType, MutBytes);
  size_t Decompress(Bytes, MutBytes);
  absl::StatusOr<size_t> DecompressRange(Bytes, uint64_t, MutBytes);
};
struct NoDecompressRange {
  static constexpr CodecId kId = CodecId::kIdentity;
  size_t MaxCompressedSize(size_t) const;
  absl::StatusOr<size_t> Compress(Bytes, DType, MutBytes);
  absl::StatusOr<size_t> Decompress(Bytes, MutBytes);
};
struct Complete {
  static constexpr CodecId kId = CodecId::kIdentity;
  size_t MaxCompressedSize(size_t) const;
  absl::StatusOr<size_t> Compress(Bytes, DType, MutBytes);
  absl::StatusOr<size_t> Decompress(Bytes, MutBytes);
  absl::StatusOr<size_t> DecompressRange(Bytes, uint64_t, MutBytes);
};

static_assert(!Codec<NoId>);
static_assert(!Codec<MutableMaxSize>);
static_assert(!Codec<CompressWithoutDType>);
static_assert(!Codec<DecompressReturnsSize>);
static_assert(!Codec<NoDecompressRange>);
static_assert(Codec<Complete>);
static_assert(Codec<IdentityCodec>);

TEST(DTypeTest, ElementSizesAndNames) {
  EXPECT_EQ(ElementSize(DType::kBytes), 1u);
  EXPECT_EQ(ElementSize(DType::kBFloat16), 2u);
  EXPECT_EQ(ElementSize(DType::kFloat16), 2u);
  EXPECT_EQ(ElementSize(DType::kFloat8E4M3), 1u);
  EXPECT_EQ(ElementSize(DType::kFloat8E5M2), 1u);
  EXPECT_EQ(ElementSize(DType::kFloat32), 4u);
  EXPECT_EQ(DTypeName(DType::kBFloat16), "bf16");
  EXPECT_EQ(CodecName(CodecId::kBytePlane), "byteplane");
}

}  // namespace
}  // namespace mooncake::compress
