#include "mooncake/index/block_key.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/hash.h"

namespace mooncake::index {
namespace {

// The namespace and tokens of docs/block_key_spec.md's test vectors.
KeyNamespace SpecNamespace() {
  return KeyNamespace{
      .model_id = "Qwen/Qwen2.5-7B-Instruct", .dtype = "bf16", .tp_size = 2, .tp_rank = 1};
}

std::string Hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

TEST(BlockKeyTest, RootMessageByteLayout) {
  auto msg = RootKeyMessage(SpecNamespace(), 4);
  ASSERT_TRUE(msg.ok());
  EXPECT_EQ(Hex(*msg),
            "4d43424b"  // "MCBK"
            "01000000"  // version 1
            "04000000"  // block_tokens 4
            "02000000"  // tp_size 2
            "01000000"  // tp_rank 1
            "18000000"  // len("Qwen/Qwen2.5-7B-Instruct") = 24
            "5177656e2f5177656e322e352d37422d496e737472756374"
            "04000000"
            "62663136"    // "bf16"
            "00000000"    // lora_id ""
            "00000000");  // salt ""
}

// Reproduced independently with `xxhsum -H2` over the hex messages in the spec.
constexpr char kSpecRoot[] = "03c73d9bfdef376c142f061648fe4ae8";
constexpr char kSpecKey0[] = "e10d452b0e99819ef9c311f4a3376dee";
constexpr char kSpecKey1[] = "a8fab85e5e8b91459f6844e6d93c0c64";

// The vectors in docs/block_key_spec.md; regenerate the doc if these change
// (they must not: the key is a published format).
TEST(BlockKeyTest, SpecVectors) {
  auto keyer = BlockKeyer::Create(SpecNamespace(), 4);
  ASSERT_TRUE(keyer.ok());
  EXPECT_EQ(keyer->root().ToHex(), StableHash128(*RootKeyMessage(SpecNamespace(), 4)).ToHex());
  const std::vector<uint32_t> tokens = {1, 2, 3, 4, 100000, 0xFFFFFFFF, 7, 8, 9};
  const std::vector<BlockKey> keys = keyer->Compute(tokens);
  ASSERT_EQ(keys.size(), 2u) << "the partial third block has no key";
  EXPECT_EQ(keyer->root().ToHex(), kSpecRoot);
  EXPECT_EQ(keys[0].ToHex(), kSpecKey0);
  EXPECT_EQ(keys[1].ToHex(), kSpecKey1);
}

TEST(BlockKeyTest, SpecVectorsWithLoraSaltAndExtraKeys) {
  const KeyNamespace ns{.model_id = "m", .dtype = "fp8", .lora_id = "lora-7", .salt = "tenant-a"};
  auto keyer = BlockKeyer::Create(ns, 16);
  ASSERT_TRUE(keyer.ok());
  std::vector<uint32_t> tokens(32);
  for (uint32_t i = 0; i < tokens.size(); ++i) tokens[i] = i;
  const auto keys = keyer->Compute(tokens);
  EXPECT_EQ(keyer->root().ToHex(), "f0f50f0236edbdcf518d3d182b052c91");
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0].ToHex(), "afd96126eb6dc517912e30766b75791a");
  EXPECT_EQ(keys[1].ToHex(), "14559bd7f9d904ed684c37a880860a24");
  auto spec = BlockKeyer::Create(SpecNamespace(), 4);
  const uint32_t block[4] = {5, 6, 7, 8};
  const uint64_t extra = 0x0102030405060708ull;
  EXPECT_EQ(spec->Next(spec->root(), block, {&extra, 1}).ToHex(),
            "177a643bac09311ac285c444edb04a9a");
}

TEST(BlockKeyTest, BlockMessageIsParentThenLittleEndianTokens) {
  auto keyer = BlockKeyer::Create(SpecNamespace(), 4);
  ASSERT_TRUE(keyer.ok());
  const BlockKey root = keyer->root();
  unsigned char msg[16 + 16];
  for (int i = 0; i < 8; ++i) {
    msg[i] = static_cast<unsigned char>(root.low >> (8 * i));
    msg[8 + i] = static_cast<unsigned char>(root.high >> (8 * i));
  }
  const uint32_t tokens[4] = {1, 2, 3, 0xA1B2C3D4};
  for (int t = 0; t < 4; ++t) {
    for (int i = 0; i < 4; ++i)
      msg[16 + 4 * t + i] = static_cast<unsigned char>(tokens[t] >> (8 * i));
  }
  EXPECT_EQ(keyer->Next(root, tokens), StableHash128(msg, sizeof(msg)));
}

TEST(BlockKeyTest, ExtraKeysFollowTheTokens) {
  auto keyer = BlockKeyer::Create(SpecNamespace(), 1);
  ASSERT_TRUE(keyer.ok());
  const uint32_t token = 5;
  const uint64_t extra = 0x0102030405060708ull;
  StableHasher128 h;
  h.UpdateU64(keyer->root().low);
  h.UpdateU64(keyer->root().high);
  const unsigned char le_token[4] = {5, 0, 0, 0};
  h.Update(le_token, 4);
  h.UpdateU64(extra);
  EXPECT_EQ(keyer->Next(keyer->root(), {&token, 1}, {&extra, 1}), h.Digest());
  EXPECT_NE(keyer->Next(keyer->root(), {&token, 1}, {&extra, 1}),
            keyer->Next(keyer->root(), {&token, 1}));
}

TEST(BlockKeyTest, LongBlocksStreamToTheSameKey) {
  // 2048 tokens = 8 KiB: past the stack buffer, so Next() streams.
  auto keyer = BlockKeyer::Create(SpecNamespace(), 2048);
  ASSERT_TRUE(keyer.ok());
  std::vector<uint32_t> tokens(2048);
  for (uint32_t i = 0; i < tokens.size(); ++i) tokens[i] = i * 2654435761u;
  std::string msg(16 + 4 * tokens.size(), '\0');
  for (int i = 0; i < 8; ++i) {
    msg[i] = static_cast<char>(keyer->root().low >> (8 * i));
    msg[8 + i] = static_cast<char>(keyer->root().high >> (8 * i));
  }
  for (size_t t = 0; t < tokens.size(); ++t) {
    for (int i = 0; i < 4; ++i) msg[16 + 4 * t + i] = static_cast<char>(tokens[t] >> (8 * i));
  }
  EXPECT_EQ(keyer->Next(keyer->root(), tokens), StableHash128(msg));
}

TEST(BlockKeyTest, ChainsContinueAcrossCalls) {
  auto keyer = BlockKeyer::Create(SpecNamespace(), 4);
  ASSERT_TRUE(keyer.ok());
  std::vector<uint32_t> tokens(40);
  for (uint32_t i = 0; i < tokens.size(); ++i) tokens[i] = i;
  const auto all = keyer->Compute(tokens);
  std::vector<BlockKey> tail(5);
  keyer->Compute(std::span<const uint32_t>(tokens).subspan(20), all[4], tail);
  EXPECT_EQ(std::vector<BlockKey>(all.begin() + 5, all.end()), tail);
}

TEST(BlockKeyTest, NamespaceFieldsSeparateCaches) {
  const KeyNamespace base = SpecNamespace();
  auto root = [](const KeyNamespace& ns, uint32_t bt = 4) {
    return BlockKeyer::Create(ns, bt)->root();
  };
  KeyNamespace other = base;
  other.dtype = "fp8";
  EXPECT_NE(root(base), root(other));
  other = base;
  other.tp_rank = 0;
  EXPECT_NE(root(base), root(other));
  other = base;
  other.salt = "tenant-a";
  EXPECT_NE(root(base), root(other));
  other = base;
  other.lora_id = "adapter-1";
  EXPECT_NE(root(base), root(other));
  EXPECT_NE(root(base, 4), root(base, 8));
  // Length prefixes keep field boundaries unambiguous.
  KeyNamespace a = base, b = base;
  a.model_id = "ab";
  a.dtype = "c";
  b.model_id = "a";
  b.dtype = "bc";
  EXPECT_NE(root(a), root(b));
}

TEST(BlockKeyTest, BadNamespacesAreRejected) {
  EXPECT_EQ(BlockKeyer::Create(KeyNamespace{}, 16).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockKeyer::Create(SpecNamespace(), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  KeyNamespace ns = SpecNamespace();
  ns.tp_rank = 2;
  EXPECT_EQ(BlockKeyer::Create(ns, 16).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BlockKeyTest, CheckedTokenIds) {
  auto keyer = BlockKeyer::Create(SpecNamespace(), 2);
  ASSERT_TRUE(keyer.ok());
  const std::vector<int64_t> good = {1, 2, 3, 4, 5};
  const std::vector<uint32_t> good32 = {1, 2, 3, 4, 5};
  EXPECT_EQ(*keyer->ComputeChecked(std::span<const int64_t>(good)), keyer->Compute(good32));
  const std::vector<int64_t> negative = {1, -2};
  EXPECT_EQ(keyer->ComputeChecked(std::span<const int64_t>(negative)).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<int64_t> big = {1, int64_t{1} << 32};
  EXPECT_FALSE(keyer->ComputeChecked(std::span<const int64_t>(big)).ok());
  // Ids past the last full block are not keyed, so not checked either.
  const std::vector<int32_t> partial = {1, 2, -1};
  EXPECT_TRUE(keyer->ComputeChecked(std::span<const int32_t>(partial)).ok());
}

TEST(BlockKeyTest, NextRejectsAWrongBlockSize) {
  auto keyer = BlockKeyer::Create(SpecNamespace(), 4);
  ASSERT_TRUE(keyer.ok());
  const uint32_t three[3] = {1, 2, 3};
  EXPECT_DEATH(keyer->Next(keyer->root(), three), "exactly one block");
}

// docs/block_key_spec.md, "Media blocks": the media namespace and input of the vectors.
MediaNamespace SpecMedia() {
  return MediaNamespace{
      .modality = "image", .encoder_id = "vit-demo@1", .preprocess = "448x448 rgb u8"};
}

std::vector<unsigned char> SpecMediaBytes() {
  std::vector<unsigned char> bytes(16);
  for (unsigned char i = 0; i < 16; ++i) bytes[i] = i;
  return bytes;
}

TEST(BlockKeyTest, MediaKeyHeaderByteLayout) {
  auto header = MediaKeyHeader(SpecMedia(), 16);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(Hex(*header),
            "4d434d4b"  // "MCMK"
            "01000000"  // version 1
            "05000000"
            "696d616765"  // "image"
            "0a000000"
            "7669742d64656d6f4031"  // "vit-demo@1"
            "0e000000"
            "3434387834343820726762207538"  // "448x448 rgb u8"
            "1000000000000000");            // u64 media_bytes = 16
}

// Also produced by examples/epd/media_key.py, which builds the bytes itself.
constexpr char kSpecMediaKey[] = "683a0f2c4652588a10297239348ecc4e";
constexpr char kSpecMediaChain[3][33] = {"c02a188d2328fb49770c458a5cf7efff",
                                         "5f136a082b948dec7136cce9d46191f4",
                                         "77f6ae7eea6377b0d4a9068d18e82025"};

TEST(BlockKeyTest, MediaKeySpecVector) {
  const std::vector<unsigned char> media = SpecMediaBytes();
  auto key = ComputeMediaKey(SpecMedia(), media);
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(key->ToHex(), kSpecMediaKey);
  EXPECT_EQ(*key, StableHash128(*MediaKeyHeader(SpecMedia(), 16) +
                                std::string(media.begin(), media.end())));
}

TEST(BlockKeyTest, MediaKeyDependsOnBytesEncoderAndPreprocessing) {
  const std::vector<unsigned char> media = SpecMediaBytes();
  const MediaKey base = *ComputeMediaKey(SpecMedia(), media);
  EXPECT_EQ(*ComputeMediaKey(SpecMedia(), media), base) << "a repeated image maps to one key";
  std::vector<unsigned char> flipped = media;
  flipped[7] ^= 1;
  EXPECT_NE(*ComputeMediaKey(SpecMedia(), flipped), base);
  MediaNamespace other = SpecMedia();
  other.encoder_id = "vit-demo@2";
  EXPECT_NE(*ComputeMediaKey(other, media), base);
  other = SpecMedia();
  other.preprocess = "224x224 rgb u8";
  EXPECT_NE(*ComputeMediaKey(other, media), base);
  other = SpecMedia();
  other.modality = "video";
  EXPECT_NE(*ComputeMediaKey(other, media), base);
  EXPECT_EQ(ComputeMediaKey(SpecMedia(), {}).status().code(), absl::StatusCode::kInvalidArgument);
  other = SpecMedia();
  other.encoder_id = "";
  EXPECT_EQ(ComputeMediaKey(other, media).status().code(), absl::StatusCode::kInvalidArgument);
}

// Tokens 1, 2, then 5 placeholders (id 0) for the image at [2, 7), then 7..11.
TEST(BlockKeyTest, MediaInTheChainSpecVectors) {
  auto keyer = BlockKeyer::Create(SpecNamespace(), 4);
  ASSERT_TRUE(keyer.ok());
  const MediaKey image = *ComputeMediaKey(SpecMedia(), SpecMediaBytes());
  const std::vector<uint32_t> tokens = {1, 2, 0, 0, 0, 0, 0, 7, 8, 9, 10, 11};
  const MediaPlacement placement{.key = image, .offset = 2, .length = 5};
  auto keys = keyer->ComputeWithMedia(tokens, {&placement, 1});
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_EQ(keys->size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*keys)[i].ToHex(), kSpecMediaChain[i]) << i;
  // Blocks 0 and 1 overlap the image and carry its key; block 2 only chains.
  const uint64_t halves[2] = {image.low, image.high};
  const std::span<const uint32_t> t(tokens);
  EXPECT_EQ((*keys)[0], keyer->Next(keyer->root(), t.subspan(0, 4), halves));
  EXPECT_EQ((*keys)[1], keyer->Next((*keys)[0], t.subspan(4, 4), halves));
  EXPECT_EQ((*keys)[2], keyer->Next((*keys)[1], t.subspan(8, 4)));
}

TEST(BlockKeyTest, PromptsThatDifferOnlyByTheImageShareNoLaterBlock) {
  auto keyer = BlockKeyer::Create(SpecNamespace(), 4);
  ASSERT_TRUE(keyer.ok());
  std::vector<unsigned char> other_bytes = SpecMediaBytes();
  other_bytes[0] = 0xff;
  const MediaKey a = *ComputeMediaKey(SpecMedia(), SpecMediaBytes());
  const MediaKey b = *ComputeMediaKey(SpecMedia(), other_bytes);
  // 8 text tokens, the image at [8, 16), 16 text tokens.
  std::vector<uint32_t> tokens(32, 0);
  for (uint32_t i = 0; i < 8; ++i) tokens[i] = 100 + i;
  for (uint32_t i = 16; i < 32; ++i) tokens[i] = 100 + i;
  const MediaPlacement pa{.key = a, .offset = 8, .length = 8};
  const MediaPlacement pb{.key = b, .offset = 8, .length = 8};
  const auto ka = *keyer->ComputeWithMedia(tokens, {&pa, 1});
  const auto kb = *keyer->ComputeWithMedia(tokens, {&pb, 1});
  const auto plain = keyer->Compute(tokens);
  ASSERT_EQ(ka.size(), 8u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(ka[i], kb[i]) << "the text before the image is shared";
    EXPECT_EQ(ka[i], plain[i]);
  }
  for (size_t i = 2; i < ka.size(); ++i) {
    EXPECT_NE(ka[i], kb[i]) << "block " << i << " after the image must differ";
    EXPECT_NE(ka[i], plain[i]);
  }
  EXPECT_EQ(*keyer->ComputeWithMedia(tokens, {}), plain);
}

TEST(BlockKeyTest, MediaPlacementsAreValidated) {
  auto keyer = BlockKeyer::Create(SpecNamespace(), 4);
  ASSERT_TRUE(keyer.ok());
  const std::vector<uint32_t> tokens(12, 0);
  const MediaKey k = *ComputeMediaKey(SpecMedia(), SpecMediaBytes());
  auto code = [&](std::vector<MediaPlacement> media) {
    return keyer->ComputeWithMedia(tokens, media).status().code();
  };
  EXPECT_EQ(code({{k, 0, 4}, {k, 4, 8}}), absl::StatusCode::kOk);
  EXPECT_EQ(code({{k, 0, 0}}), absl::StatusCode::kInvalidArgument);             // empty
  EXPECT_EQ(code({{k, 4, 4}, {k, 0, 4}}), absl::StatusCode::kInvalidArgument);  // unsorted
  EXPECT_EQ(code({{k, 0, 5}, {k, 4, 4}}), absl::StatusCode::kInvalidArgument);  // overlapping
  EXPECT_EQ(code({{k, 10, 3}}), absl::StatusCode::kInvalidArgument);            // past the end
  EXPECT_EQ(code({{k, 13, 1}}), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mooncake::index
