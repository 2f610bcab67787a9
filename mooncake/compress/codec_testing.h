// Conformance kit for the Codec concept. Every model instantiates it in one line:
//
//   INSTANTIATE_TYPED_TEST_SUITE_P(Zstd, CodecConformanceTest, ::testing::Types<ZstdCodec>);
//
// A model must be constructible from CodecOptions alone.
#ifndef MOONCAKE_COMPRESS_CODEC_TESTING_H_
#define MOONCAKE_COMPRESS_CODEC_TESTING_H_

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "mooncake/base/fork_join_pool.h"
#include "mooncake/compress/codec.h"
#include "mooncake/compress/frame.h"
#include "mooncake/compress/identity_codec.h"
#include "mooncake/compress/kv_data_testing.h"
#include "mooncake/compress/zstd_codec.h"

namespace mooncake::compress {

inline constexpr DType kAllDTypes[] = {DType::kBytes,      DType::kBFloat16,   DType::kFloat16,
                                       DType::kFloat8E4M3, DType::kFloat8E5M2, DType::kFloat32};

// Compresses into a MaxCompressedSize buffer; returns the frame.
template <Codec C>
std::vector<std::byte> CompressToVector(C& codec, std::span<const std::byte> src, DType dtype) {
  std::vector<std::byte> frame(codec.MaxCompressedSize(src.size()));
  absl::StatusOr<size_t> n = codec.Compress(src, dtype, frame);
  EXPECT_TRUE(n.ok()) << n.status();
  frame.resize(n.ok() ? *n : 0);
  return frame;
}

// Three kinds of content: KV-like floats, uniform random bytes, a constant.
inline std::vector<std::byte> TestContent(int kind, size_t bytes, DType dtype, uint64_t seed) {
  if (kind == 0) return SyntheticKvBytes(bytes, dtype, seed);
  std::vector<std::byte> out(bytes, std::byte{0x3C});
  if (kind == 1) {
    TestRng rng(seed);
    for (auto& b : out) b = static_cast<std::byte>(rng.Next());
  }
  return out;
}

template <typename C>
class CodecConformanceTest : public ::testing::Test {};
TYPED_TEST_SUITE_P(CodecConformanceTest);

TYPED_TEST_P(CodecConformanceTest, RoundTripsEveryDTypeSizeAndContent) {
  TypeParam codec(CodecOptions{.chunk_bytes = 4096});
  const size_t sizes[] = {0, 1, 2, 3, 7, 255, 4095, 4096, 4097, 3 * 4096 + 5, 20001};
  for (DType dtype : kAllDTypes) {
    for (size_t size : sizes) {
      for (int kind = 0; kind < 3; ++kind) {
        SCOPED_TRACE(testing::Message()
                     << DTypeName(dtype) << " size " << size << " kind " << kind);
        const std::vector<std::byte> raw = TestContent(kind, size, dtype, size + 7);
        const std::vector<std::byte> frame = CompressToVector(codec, raw, dtype);
        ASSERT_LE(frame.size(), codec.MaxCompressedSize(size));
        absl::StatusOr<FrameInfo> info = ReadFrameInfo(frame);
        ASSERT_TRUE(info.ok()) << info.status();
        EXPECT_EQ(info->raw_bytes, size);
        EXPECT_EQ(info->dtype, dtype);
        EXPECT_EQ(info->codec, TypeParam::kId);
        std::vector<std::byte> back(size + 3, std::byte{0xEE});
        absl::StatusOr<size_t> n = codec.Decompress(frame, back);
        ASSERT_TRUE(n.ok()) << n.status();
        ASSERT_EQ(*n, size);
        back.resize(size);
        ASSERT_TRUE(back == raw);
      }
    }
  }
}

TYPED_TEST_P(CodecConformanceTest, ThreadsAndChunkSizesGiveIdenticalFrames) {
  const std::vector<std::byte> raw = SyntheticKvBytes(70001, DType::kBFloat16, 3);
  TypeParam one(CodecOptions{.chunk_bytes = 8192, .threads = 1});
  TypeParam two(CodecOptions{.chunk_bytes = 8192, .threads = 2});
  TypeParam four(CodecOptions{.chunk_bytes = 8192, .threads = 4});
  ForkJoinPool helpers(2);
  TypeParam pooled(CodecOptions{.chunk_bytes = 8192, .threads = 4, .pool = &helpers});
  const std::vector<std::byte> frame = CompressToVector(one, raw, DType::kBFloat16);
  EXPECT_TRUE(CompressToVector(two, raw, DType::kBFloat16) == frame);
  EXPECT_TRUE(CompressToVector(four, raw, DType::kBFloat16) == frame);
  EXPECT_TRUE(CompressToVector(pooled, raw, DType::kBFloat16) == frame);
  for (TypeParam* codec : {&one, &two, &four, &pooled}) {
    std::vector<std::byte> back(raw.size());
    ASSERT_TRUE(codec->Decompress(frame, back).ok());
    EXPECT_TRUE(back == raw);
  }
  for (size_t chunk : {size_t{4096}, size_t{64} << 10, size_t{1} << 20}) {
    TypeParam codec(CodecOptions{.chunk_bytes = chunk, .threads = 2});
    const std::vector<std::byte> f = CompressToVector(codec, raw, DType::kBFloat16);
    std::vector<std::byte> back(raw.size());
    ASSERT_TRUE(codec.Decompress(f, back).ok());
    EXPECT_TRUE(back == raw) << "chunk " << chunk;
  }
}

TYPED_TEST_P(CodecConformanceTest, DecompressesSubRanges) {
  const std::vector<std::byte> raw = SyntheticKvBytes(50000, DType::kFloat16, 5);
  TypeParam codec(CodecOptions{.chunk_bytes = 4096, .threads = 2});
  const std::vector<std::byte> frame = CompressToVector(codec, raw, DType::kFloat16);
  TestRng rng(11);
  for (int i = 0; i < 200; ++i) {
    const size_t offset = rng.Next() % (raw.size() + 1);
    const size_t len = rng.Next() % (raw.size() - offset + 1) % 20000;
    std::vector<std::byte> part(len);
    absl::StatusOr<size_t> n = codec.DecompressRange(frame, offset, part);
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_EQ(*n, len);
    ASSERT_TRUE(std::equal(part.begin(), part.end(), raw.begin() + offset)) << offset << "+" << len;
  }
  std::vector<std::byte> one(1);
  EXPECT_EQ(codec.DecompressRange(frame, raw.size(), one).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(codec.DecompressRange(frame, ~uint64_t{0}, one).status().code(),
            absl::StatusCode::kOutOfRange);
}

TYPED_TEST_P(CodecConformanceTest, EveryTruncationIsAnError) {
  const std::vector<std::byte> raw = SyntheticKvBytes(9000, DType::kBFloat16, 9);
  TypeParam codec(CodecOptions{.chunk_bytes = 4096});
  const std::vector<std::byte> frame = CompressToVector(codec, raw, DType::kBFloat16);
  std::vector<std::byte> back(raw.size());
  for (size_t len = 0; len < frame.size(); ++len) {
    absl::StatusOr<size_t> n = codec.Decompress(std::span(frame).first(len), back);
    ASSERT_FALSE(n.ok()) << "prefix of " << len << " bytes decoded";
  }
  std::vector<std::byte> longer = frame;
  longer.push_back(std::byte{0});
  EXPECT_EQ(codec.Decompress(longer, back).status().code(), absl::StatusCode::kInvalidArgument);
}

TYPED_TEST_P(CodecConformanceTest, CorruptionIsDetectedOrHarmless) {
  const std::vector<std::byte> raw = SyntheticKvBytes(9000, DType::kBFloat16, 13);
  TypeParam codec(CodecOptions{.chunk_bytes = 4096});
  const std::vector<std::byte> frame = CompressToVector(codec, raw, DType::kBFloat16);
  std::vector<std::byte> back(raw.size());
  int detected = 0;
  for (size_t pos = 0; pos < frame.size(); ++pos) {
    for (uint8_t bit : {uint8_t{0x01}, uint8_t{0x80}}) {
      std::vector<std::byte> bad = frame;
      bad[pos] ^= std::byte{bit};
      absl::StatusOr<size_t> n = codec.Decompress(bad, back);
      if (n.ok()) {
        ASSERT_TRUE(back == raw) << "flip at " << pos << " decoded to wrong bytes";
      } else {
        ++detected;
        const absl::StatusCode code = n.status().code();
        ASSERT_TRUE(code == absl::StatusCode::kDataLoss ||
                    code == absl::StatusCode::kInvalidArgument)
            << n.status();
      }
    }
  }
  // Only padding bits may flip unnoticed.
  EXPECT_GE(detected, static_cast<int>(2 * frame.size() * 95 / 100));
}

TYPED_TEST_P(CodecConformanceTest, RejectsForeignInputAndSmallBuffers) {
  TypeParam codec(CodecOptions{.chunk_bytes = 4096});
  const std::vector<std::byte> raw = SyntheticKvBytes(5000, DType::kBFloat16, 17);
  std::vector<std::byte> too_small(codec.MaxCompressedSize(raw.size()) - 1);
  EXPECT_EQ(codec.Compress(raw, DType::kBFloat16, too_small).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<std::byte> frame = CompressToVector(codec, raw, DType::kBFloat16);
  std::vector<std::byte> short_dst(raw.size() - 1);
  EXPECT_EQ(codec.Decompress(frame, short_dst).status().code(), absl::StatusCode::kInvalidArgument);

  std::vector<std::byte> back(raw.size());
  std::vector<std::byte> garbage = TestContent(1, 300, DType::kBytes, 1);
  EXPECT_EQ(codec.Decompress(garbage, back).status().code(), absl::StatusCode::kInvalidArgument);
  // A well-formed frame of another codec names that codec in the error.
  std::vector<std::byte> foreign;
  if (TypeParam::kId == CodecId::kIdentity) {
    ZstdCodec other(CodecOptions{.chunk_bytes = 4096});
    foreign = CompressToVector(other, raw, DType::kBFloat16);
  } else {
    IdentityCodec other(CodecOptions{.chunk_bytes = 4096});
    foreign = CompressToVector(other, raw, DType::kBFloat16);
  }
  const absl::Status s = codec.Decompress(foreign, back).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("written by codec"), absl::string_view::npos) << s;
}

// Models built on the chunked frame driver also decode a frame as it arrives
// (DecompressChunks); others skip this test.
template <typename C>
concept DecodesIncrementally = requires(C& c, const FrameView& v, std::span<std::byte> d) {
  { c.DecompressChunks(v, uint32_t{0}, uint32_t{0}, uint64_t{0}, d) } -> std::same_as<absl::Status>;
};

// The frame lands in a buffer piece by piece (the rest is garbage, as in a read still in
// flight); chunks are decoded as soon as their payloads are in.
template <typename C>
void DecodeAsFrameArrives(C& codec, const std::vector<std::byte>& frame, size_t piece,
                          std::span<std::byte> out, uint32_t* decoded) {
  std::vector<std::byte> landing(frame.size(), std::byte{0xEE});
  std::optional<FrameView> view;
  *decoded = 0;
  for (size_t arrived = 0; arrived < frame.size();) {
    const size_t next = std::min(frame.size(), arrived + piece);
    std::copy(frame.begin() + arrived, frame.begin() + next, landing.begin() + arrived);
    arrived = next;
    if (!view) {
      const uint64_t need = FrameBytesToParse(std::span(landing).first(arrived));
      if (need == 0 || need > arrived) continue;
      absl::StatusOr<FrameView> parsed = FrameView::Parse(landing);
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      view.emplace(*std::move(parsed));
    }
    uint32_t end = *decoded;
    while (end < view->chunks().size() &&
           view->chunks()[end].payload_offset + view->chunks()[end].payload_bytes <= arrived) {
      ++end;
    }
    const absl::Status s = codec.DecompressChunks(*view, *decoded, end, arrived, out);
    ASSERT_TRUE(s.ok()) << s << " at " << arrived << " of " << frame.size();
    *decoded = end;
  }
}

TYPED_TEST_P(CodecConformanceTest, DecodesChunksAsTheFrameArrives) {
  if constexpr (!DecodesIncrementally<TypeParam>) {
    GTEST_SKIP() << "this model has no DecompressChunks";
  } else {
    TypeParam codec(CodecOptions{.chunk_bytes = 4096});
    ForkJoinPool helpers(1);  // decodes several chunks per call on two threads
    TypeParam pooled(CodecOptions{.chunk_bytes = 4096, .threads = 2, .pool = &helpers});
    for (int kind = 0; kind < 3; ++kind) {
      const std::vector<std::byte> raw = TestContent(kind, 10 * 4096 + 77, DType::kBFloat16, 21);
      const std::vector<std::byte> frame = CompressToVector(codec, raw, DType::kBFloat16);
      const uint32_t chunks = static_cast<uint32_t>(ChunkCount(raw.size(), 4096));
      for (size_t piece : {size_t{1}, size_t{333}, size_t{4096}, size_t{3 * 4096}, frame.size()}) {
        for (TypeParam* c : {&codec, &pooled}) {
          SCOPED_TRACE(testing::Message()
                       << "kind " << kind << " piece " << piece << (c == &pooled ? " pooled" : ""));
          std::vector<std::byte> out(raw.size());
          uint32_t decoded = 0;
          DecodeAsFrameArrives(*c, frame, piece, out, &decoded);
          EXPECT_EQ(decoded, chunks);
          ASSERT_TRUE(out == raw);
        }
      }
      absl::StatusOr<FrameView> view = FrameView::Parse(frame);
      ASSERT_TRUE(view.ok()) << view.status();
      std::vector<std::byte> out(raw.size());
      // A chunk whose payload has not arrived, chunks past the end, a short dst.
      EXPECT_EQ(codec.DecompressChunks(*view, 0, 1, FrameOverheadBytes(chunks), out).code(),
                absl::StatusCode::kFailedPrecondition);
      EXPECT_EQ(codec.DecompressChunks(*view, 0, chunks + 1, frame.size(), out).code(),
                absl::StatusCode::kOutOfRange);
      std::vector<std::byte> short_out(raw.size() - 1);
      EXPECT_EQ(codec.DecompressChunks(*view, 0, 1, frame.size(), short_out).code(),
                absl::StatusCode::kInvalidArgument);
      // A flipped payload byte fails that chunk (or, in padding, changes nothing).
      const ChunkRef& c3 = view->chunks()[3];
      std::vector<std::byte> bad = frame;
      bad[c3.payload_offset + c3.payload_bytes / 2] ^= std::byte{0x10};
      absl::StatusOr<FrameView> bad_view = FrameView::Parse(bad);
      ASSERT_TRUE(bad_view.ok()) << bad_view.status();
      const absl::Status s = codec.DecompressChunks(*bad_view, 3, 4, bad.size(), out);
      if (s.ok()) {
        EXPECT_TRUE(
            std::equal(out.begin() + 3 * 4096, out.begin() + 4 * 4096, raw.begin() + 3 * 4096));
      } else {
        EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
      }
      // The same chunk among others decoded on two threads gives the same verdict.
      const absl::Status pooled_s = pooled.DecompressChunks(*bad_view, 0, chunks, bad.size(), out);
      EXPECT_EQ(pooled_s.code(), s.code()) << pooled_s;
    }
  }
}

REGISTER_TYPED_TEST_SUITE_P(CodecConformanceTest, RoundTripsEveryDTypeSizeAndContent,
                            ThreadsAndChunkSizesGiveIdenticalFrames, DecompressesSubRanges,
                            EveryTruncationIsAnError, CorruptionIsDetectedOrHarmless,
                            RejectsForeignInputAndSmallBuffers, DecodesChunksAsTheFrameArrives);

}  // namespace mooncake::compress

#endif  // MOONCAKE_COMPRESS_CODEC_TESTING_H_
