#include "mooncake/connector/kv_layout.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "mooncake/connector/internal/strided_ranges.h"

namespace mooncake::connector {
namespace {

constexpr KvOrder kOrders[] = {KvOrder::kLayerFirst, KvOrder::kLayerFirstHeadMajor,
                               KvOrder::kLayerFirstBlockMajor, KvOrder::kPageFirst};
constexpr KvDtype kDtypes[] = {KvDtype::kBFloat16,   KvDtype::kFloat16, KvDtype::kFloat8E4M3,
                               KvDtype::kFloat8E5M2, KvDtype::kFloat32, KvDtype::kInt8,
                               KvDtype::kUint8};

// A Llama-3-8B-shaped vLLM FlashAttention cache.
KvLayout Llama8B(KvOrder order = KvOrder::kLayerFirst, uint32_t block_size = 16,
                 uint64_t num_blocks = 2048) {
  return KvLayout{.order = order,
                  .dtype = KvDtype::kBFloat16,
                  .num_layers = 32,
                  .num_parts = 2,
                  .block_size = block_size,
                  .num_kv_heads = 8,
                  .head_dim = 128,
                  .num_blocks = num_blocks,
                  .first_head = 0,
                  .total_kv_heads = 8};
}

std::vector<uint64_t> Consecutive(uint64_t first, uint64_t count) {
  std::vector<uint64_t> ids(count);
  std::iota(ids.begin(), ids.end(), first);
  return ids;
}

// The memory orders written out as plain array indexing, independently of
// KvLayout::Strides: the element index of (layer, part, block, row, head, dim).
struct RefLocation {
  uint32_t region;
  uint64_t offset;
};

RefLocation Reference(const KvLayout& l, uint64_t layer, uint64_t part, uint64_t block,
                      uint64_t row, uint64_t head, uint64_t dim) {
  const uint64_t P = l.num_parts, NB = l.num_blocks, BS = l.block_size, NH = l.num_kv_heads,
                 HD = l.head_dim, NL = l.num_layers;
  uint64_t index = 0;
  uint32_t region = static_cast<uint32_t>(layer);
  switch (l.order) {
    case KvOrder::kLayerFirst:  // [part][block][row][head][dim]
      index = (((part * NB + block) * BS + row) * NH + head) * HD + dim;
      break;
    case KvOrder::kLayerFirstHeadMajor:  // [part][block][head][row][dim]
      index = (((part * NB + block) * NH + head) * BS + row) * HD + dim;
      break;
    case KvOrder::kLayerFirstBlockMajor:  // [block][part][row][head][dim]
      index = (((block * P + part) * BS + row) * NH + head) * HD + dim;
      break;
    case KvOrder::kPageFirst:  // [block][layer][part][row][head][dim]
      index = ((((block * NL + layer) * P + part) * BS + row) * NH + head) * HD + dim;
      region = 0;
      break;
  }
  return {region, index * DtypeBytes(l.dtype)};
}

using Regions = std::vector<std::vector<uint8_t>>;

Regions RandomRegions(const KvLayout& l, std::mt19937_64& rng) {
  Regions r(l.NumRegions(), std::vector<uint8_t>(l.RegionBytes()));
  for (auto& region : r) {
    for (auto& b : region) b = static_cast<uint8_t>(rng());
  }
  return r;
}

void ApplyPlan(const std::vector<CopyRange>& plan, const Regions& src, Regions& dst) {
  for (const CopyRange& c : plan) {
    ASSERT_LT(c.src_region, src.size());
    ASSERT_LT(c.dst_region, dst.size());
    ASSERT_LE(c.src_offset + c.length, src[c.src_region].size());
    ASSERT_LE(c.dst_offset + c.length, dst[c.dst_region].size());
    std::memcpy(dst[c.dst_region].data() + c.dst_offset, src[c.src_region].data() + c.src_offset,
                c.length);
  }
}

// Element by element: every (layer, part, token, head both hold, dim).
void ApplyReference(const KvLayout& src, std::span<const uint64_t> src_blocks, const KvLayout& dst,
                    std::span<const uint64_t> dst_blocks, uint64_t first_token, uint64_t num_tokens,
                    std::span<const uint32_t> layers, const Regions& src_mem, Regions& dst_mem) {
  const uint64_t e = DtypeBytes(src.dtype);
  const uint64_t head_lo = std::max(src.first_head, dst.first_head);
  const uint64_t head_hi = std::min(src.Heads().end(), dst.Heads().end());
  for (const uint32_t layer : layers) {
    for (uint32_t part = 0; part < src.num_parts; ++part) {
      for (uint64_t t = first_token; t < first_token + num_tokens; ++t) {
        for (uint64_t g = head_lo; g < head_hi; ++g) {
          for (uint32_t d = 0; d < src.head_dim; ++d) {
            const RefLocation s = Reference(src, layer, part, src_blocks[t / src.block_size],
                                            t % src.block_size, g - src.first_head, d);
            const RefLocation o = Reference(dst, layer, part, dst_blocks[t / dst.block_size],
                                            t % dst.block_size, g - dst.first_head, d);
            std::memcpy(dst_mem[o.region].data() + o.offset, src_mem[s.region].data() + s.offset,
                        e);
          }
        }
      }
    }
  }
}

// Sorted by destination, destinations disjoint, nothing left to merge.
void ExpectCanonical(const std::vector<CopyRange>& plan) {
  for (size_t i = 1; i < plan.size(); ++i) {
    const CopyRange& a = plan[i - 1];
    const CopyRange& b = plan[i];
    ASSERT_TRUE(a.dst_region < b.dst_region ||
                (a.dst_region == b.dst_region && a.dst_offset + a.length <= b.dst_offset))
        << "range " << i << " not sorted or overlapping";
    ASSERT_FALSE(connector_internal::RangeContinues(a, b))
        << "ranges " << i - 1 << "," << i << " should have been merged";
  }
}

uint64_t TotalBytes(const std::vector<CopyRange>& plan) {
  uint64_t total = 0;
  for (const CopyRange& c : plan) total += c.length;
  return total;
}

// ---------------------------------------------------------------------------
// Property test: planned copies == element-by-element reference.

struct TpConfig {
  uint32_t size;
  uint32_t rank;
};

TpConfig RandomTp(uint32_t heads, std::mt19937_64& rng) {
  std::vector<uint32_t> sizes;
  for (uint32_t t : {1u, 2u, 3u, 4u, 8u}) {
    if (TpHeadSlice(heads, 0, t).ok()) sizes.push_back(t);
  }
  const uint32_t size = sizes[rng() % sizes.size()];
  return {size, static_cast<uint32_t>(rng() % size)};
}

std::vector<uint64_t> RandomBlockIds(uint64_t count, uint64_t num_blocks, std::mt19937_64& rng) {
  std::vector<uint64_t> all = Consecutive(0, num_blocks);
  switch (rng() % 4) {
    case 0:  // a fresh request: consecutive ids from some start
      return Consecutive(rng() % (num_blocks - count + 1), count);
    case 1:  // descending
      std::reverse(all.begin(), all.end());
      break;
    default:  // scattered
      std::shuffle(all.begin(), all.end(), rng);
  }
  all.resize(count);
  return all;
}

TEST(PlanTransferProperty, MatchesElementwiseReference) {
  std::mt19937_64 rng(20261204);
  constexpr uint32_t kBlockSizes[] = {1, 2, 3, 4, 5, 8, 16};
  constexpr uint32_t kHeads[] = {1, 2, 4, 6, 8};
  constexpr uint32_t kHeadDims[] = {1, 2, 3, 8};
  int planned = 0, nonempty = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    KvLayout full{.order = kOrders[rng() % 4],
                  .dtype = kDtypes[rng() % 7],
                  .num_layers = 1 + static_cast<uint32_t>(rng() % 3),
                  .num_parts = 1 + static_cast<uint32_t>(rng() % 2),
                  .block_size = kBlockSizes[rng() % 7],
                  .num_kv_heads = kHeads[rng() % 5],
                  .head_dim = kHeadDims[rng() % 4]};
    full.total_kv_heads = full.num_kv_heads;
    KvLayout src_full = full, dst_full = full;
    dst_full.order = kOrders[rng() % 4];
    dst_full.block_size = kBlockSizes[rng() % 7];
    const uint64_t first_token = rng() % 4 == 0 ? rng() % 20 : 0;
    const uint64_t num_tokens = rng() % 50;
    const uint64_t end = first_token + num_tokens;
    const uint64_t src_count = (end + src_full.block_size - 1) / src_full.block_size;
    const uint64_t dst_count = (end + dst_full.block_size - 1) / dst_full.block_size;
    src_full.num_blocks = std::max<uint64_t>(1, src_count + rng() % 5);
    dst_full.num_blocks = std::max<uint64_t>(1, dst_count + rng() % 5);
    const TpConfig stp = RandomTp(full.total_kv_heads, rng);
    const TpConfig dtp = RandomTp(full.total_kv_heads, rng);
    const KvLayout src = *TpShard(src_full, stp.rank, stp.size);
    const KvLayout dst = *TpShard(dst_full, dtp.rank, dtp.size);
    const std::vector<uint64_t> src_blocks = RandomBlockIds(src_count, src.num_blocks, rng);
    const std::vector<uint64_t> dst_blocks = RandomBlockIds(dst_count, dst.num_blocks, rng);
    std::vector<uint32_t> layers;
    for (uint32_t l = 0; l < full.num_layers; ++l) {
      if (rng() % 3 != 0) layers.push_back(l);
    }
    if (layers.empty()) layers.push_back(static_cast<uint32_t>(rng() % full.num_layers));

    SCOPED_TRACE(::testing::Message()
                 << "iter " << iter << " src " << src.DebugString() << " dst " << dst.DebugString()
                 << " tokens [" << first_token << "," << end << ")");
    std::vector<CopyRange> plan;
    ASSERT_TRUE(
        PlanTransferInto(src, src_blocks, dst, dst_blocks, first_token, num_tokens, layers, plan)
            .ok());
    ++planned;
    nonempty += !plan.empty();
    ExpectCanonical(plan);
    const uint64_t common = Intersect(src.Heads(), dst.Heads()).num_heads;
    EXPECT_EQ(TotalBytes(plan), layers.size() * full.num_parts * num_tokens * common *
                                    full.head_dim * DtypeBytes(full.dtype));

    const Regions src_mem = RandomRegions(src, rng);
    Regions want = RandomRegions(dst, rng);
    Regions got = want;
    ApplyReference(src, src_blocks, dst, dst_blocks, first_token, num_tokens, layers, src_mem,
                   want);
    ApplyPlan(plan, src_mem, got);
    ASSERT_TRUE(want == got) << plan.size() << " ranges";
  }
  EXPECT_EQ(planned, 4000);
  EXPECT_GT(nonempty, 2000);  // the generator exercises real copies
}

// ---------------------------------------------------------------------------
// Range counts: contiguity is found and merged.

TEST(PlanTransfer, IdenticalVllmLayoutsConsecutiveBlocksGiveOneRangePerLayerPart) {
  const KvLayout l = Llama8B();
  const auto src_blocks = Consecutive(7, 1024);  // 16K tokens
  const auto dst_blocks = Consecutive(300, 1024);
  for (uint32_t layer : {0u, 17u, 31u}) {
    const std::vector<uint32_t> one = {layer};
    auto plan = PlanTransfer(l, src_blocks, l, dst_blocks, 16384, one);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->size(), 2u);
    for (const CopyRange& c : *plan) {
      EXPECT_EQ(c.src_region, layer);
      EXPECT_EQ(c.dst_region, layer);
      EXPECT_EQ(c.length, 1024u * l.BlockBytes() / 2);
    }
    EXPECT_EQ((*plan)[0].src_offset, 7 * l.BlockBytes() / 2);
    EXPECT_EQ((*plan)[0].dst_offset, 300 * l.BlockBytes() / 2);
    EXPECT_EQ((*plan)[1].dst_offset, (2048 + 300) * l.BlockBytes() / 2);  // the V half
  }
  auto all = PlanTransfer(l, src_blocks, l, dst_blocks, 16384, AllLayers(32));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 64u);
}

TEST(PlanTransfer, PartialLastBlockStillOneRangePerLayerPart) {
  const KvLayout l = Llama8B();
  const std::vector<uint32_t> layer0 = {0};
  auto plan = PlanTransfer(l, Consecutive(0, 63), l, Consecutive(10, 63), 1000, layer0);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 2u);
  EXPECT_EQ((*plan)[0].length, 1000 * l.num_kv_heads * l.HeadBytes());
}

TEST(PlanTransfer, ScatteredBlocksGiveOneRangePerBlockRun) {
  const KvLayout l = Llama8B();
  // Blocks 0-2 and 3-4 are consecutive on both sides; 2 -> 3 is not.
  const std::vector<uint64_t> src_blocks = {5, 6, 7, 40, 41};
  const std::vector<uint64_t> dst_blocks = {100, 101, 102, 9, 10};
  const std::vector<uint32_t> layer0 = {0};
  auto plan = PlanTransfer(l, src_blocks, l, dst_blocks, 80, layer0);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->size(), 4u);  // 2 runs x 2 parts
}

TEST(PlanTransfer, IdenticalPageFirstConsecutivePagesGiveOneRangeForAllLayers) {
  const KvLayout l = Llama8B(KvOrder::kPageFirst);
  auto plan =
      PlanTransfer(l, Consecutive(3, 1024), l, Consecutive(900, 1024), 16384, AllLayers(32));
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 1u);
  EXPECT_EQ((*plan)[0].length, 1024 * 32 * l.BlockBytes());
  EXPECT_EQ((*plan)[0].dst_offset, 900 * 32 * l.BlockBytes());
}

TEST(PlanTransfer, DifferentPageSizesStillMergeConsecutiveBlocks) {
  for (uint32_t dst_page : {8u, 32u, 48u}) {
    const KvLayout src = Llama8B(KvOrder::kLayerFirst, 16);
    const KvLayout dst = Llama8B(KvOrder::kLayerFirst, dst_page, 4096);
    const uint64_t dst_count = (16384 + dst_page - 1) / dst_page;
    const std::vector<uint32_t> layer0 = {0};
    auto plan =
        PlanTransfer(src, Consecutive(0, 1024), dst, Consecutive(1, dst_count), 16384, layer0);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->size(), 2u) << "dst page " << dst_page;
  }
}

TEST(PlanTransfer, VllmToSglangPageFirstIsOneRangePerPagePart) {
  const KvLayout src = Llama8B(KvOrder::kLayerFirst, 16);
  const KvLayout dst = Llama8B(KvOrder::kPageFirst, 64);
  const std::vector<uint32_t> layer5 = {5};
  auto plan = PlanTransfer(src, Consecutive(0, 1024), dst, Consecutive(0, 256), 16384, layer5);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 2u * 256);
  for (const CopyRange& c : *plan) {
    EXPECT_EQ(c.length, 64 * 8 * 128 * 2u);  // one dst page of one part
    EXPECT_EQ(c.src_region, 5u);
    EXPECT_EQ(c.dst_region, 0u);
  }
  EXPECT_EQ((*plan)[0].dst_offset, 5 * dst.BlockBytes());  // layer 5 of page 0
}

TEST(PlanTransfer, PrefillTp2Rank0ToDecodeTp1SendsItsHalfOfEachTokenRow) {
  const KvLayout full = Llama8B();
  const KvLayout src = *TpShard(full, 0, 2);
  ASSERT_EQ(src.num_kv_heads, 4u);
  const std::vector<uint32_t> layer0 = {0};
  auto plan = PlanTransfer(src, Consecutive(0, 4), full, Consecutive(0, 4), 64, layer0);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 2u * 64);  // one range per (part, token)
  const uint64_t head = full.HeadBytes();
  for (size_t i = 0; i < 64; ++i) {
    const CopyRange& c = (*plan)[i];
    EXPECT_EQ(c.length, 4 * head);
    EXPECT_EQ(c.src_offset, i * 4 * head);  // the src row is all its heads
    EXPECT_EQ(c.dst_offset, i * 8 * head);  // the dst row's heads [0, 4)
  }
}

TEST(PlanTransfer, PrefillTp1ToDecodeTp2Rank1SendsOnlyUpperHeads) {
  const KvLayout full = Llama8B();
  const KvLayout dst = *TpShard(full, 1, 2);
  const std::vector<uint32_t> layer0 = {0};
  auto plan = PlanTransfer(full, Consecutive(0, 4), dst, Consecutive(0, 4), 64, layer0);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 2u * 64);
  const uint64_t head = full.HeadBytes();
  EXPECT_EQ((*plan)[1].src_offset, 1 * 8 * head + 4 * head);
  EXPECT_EQ((*plan)[1].dst_offset, 1 * 4 * head);
  EXPECT_EQ(TotalBytes(*plan), 2 * 64 * 4 * head);
}

TEST(PlanTransfer, HeadMajorTpSplitIsOneRangePerBlockPart) {
  const KvLayout full = Llama8B(KvOrder::kLayerFirstHeadMajor);
  const KvLayout dst = *TpShard(full, 1, 2);
  const std::vector<uint32_t> layer0 = {0};
  auto plan = PlanTransfer(full, Consecutive(0, 8), dst, Consecutive(0, 8), 128, layer0);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->size(), 2u * 8);
  EXPECT_EQ((*plan)[0].length, 4 * 16 * full.HeadBytes());
}

TEST(PlanTransfer, DisjointHeadSlicesGiveAnEmptyPlan) {
  const KvLayout full = Llama8B();
  const std::vector<uint32_t> layer0 = {0};
  auto plan = PlanTransfer(*TpShard(full, 0, 2), Consecutive(0, 1), *TpShard(full, 1, 2),
                           Consecutive(0, 1), 16, layer0);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->empty());
}

TEST(PlanTransfer, MlaLatentReplicatedOverTpRanksMovesWhole) {
  KvLayout mla{.order = KvOrder::kLayerFirst,
               .dtype = KvDtype::kBFloat16,
               .num_layers = 61,
               .num_parts = 1,
               .block_size = 64,
               .num_kv_heads = 1,
               .head_dim = 576,
               .num_blocks = 100,
               .total_kv_heads = 1};
  const KvLayout rank3 = *TpShard(mla, 3, 8);
  EXPECT_EQ(rank3.Heads(), (HeadSlice{0, 1}));
  const std::vector<uint32_t> layer0 = {0};
  auto plan = PlanTransfer(rank3, Consecutive(0, 4), mla, Consecutive(50, 4), 256, layer0);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 1u);
  EXPECT_EQ((*plan)[0].length, 256 * 576 * 2u);
}

TEST(PlanTransfer, FirstTokenSkipsTheCachedPrefix) {
  const KvLayout l = Llama8B();
  std::vector<CopyRange> plan;
  const std::vector<uint32_t> layer0 = {0};
  // Tokens [40, 64): the first two blocks' ids are not even looked at.
  const std::vector<uint64_t> blocks = {~uint64_t{0}, ~uint64_t{0}, 5, 6};
  ASSERT_TRUE(PlanTransferInto(l, blocks, l, blocks, 40, 24, layer0, plan).ok());
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].src_offset, (5 * 16 + 8) * 8 * l.HeadBytes());
  EXPECT_EQ(plan[0].length, 24 * 8 * l.HeadBytes());
}

TEST(PlanTransfer, RepeatedSourceBlockIsFine) {
  const KvLayout l = Llama8B();
  const std::vector<uint32_t> layer0 = {0};
  auto plan = PlanTransfer(l, std::vector<uint64_t>{3, 3}, l, Consecutive(0, 2), 32, layer0);
  EXPECT_TRUE(plan.ok()) << plan.status();
}

// ---------------------------------------------------------------------------
// Errors.

void ExpectInvalid(const absl::Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find(needle), std::string::npos)
      << "message \"" << s.message() << "\" lacks \"" << needle << "\"";
}

TEST(PlanTransferErrors, DtypeMismatchNamesBoth) {
  KvLayout a = Llama8B(), b = Llama8B();
  b.dtype = KvDtype::kFloat8E4M3;
  const std::vector<uint32_t> layer0 = {0};
  const auto s = PlanTransfer(a, Consecutive(0, 1), b, Consecutive(0, 1), 16, layer0).status();
  ExpectInvalid(s, "bf16");
  ExpectInvalid(s, "fp8_e4m3");
}

TEST(PlanTransferErrors, ShapeMismatches) {
  const std::vector<uint32_t> layer0 = {0};
  const auto blocks = Consecutive(0, 1);
  KvLayout a = Llama8B(), b = Llama8B();
  b.head_dim = 64;
  ExpectInvalid(PlanTransfer(a, blocks, b, blocks, 16, layer0).status(), "head_dim");
  b = Llama8B();
  b.num_parts = 1;
  ExpectInvalid(PlanTransfer(a, blocks, b, blocks, 16, layer0).status(), "num_parts");
  b = Llama8B();
  b.num_layers = 40;
  ExpectInvalid(PlanTransfer(a, blocks, b, blocks, 16, layer0).status(), "num_layers");
  b = Llama8B();
  b.total_kv_heads = b.num_kv_heads = 16;
  ExpectInvalid(PlanTransfer(a, blocks, b, blocks, 16, layer0).status(), "total_kv_heads");
  b = Llama8B();
  b.block_size = 0;
  ExpectInvalid(PlanTransfer(a, blocks, b, blocks, 16, layer0).status(), "dst layout");
}

TEST(PlanTransferErrors, BadBlockIds) {
  const KvLayout l = Llama8B(KvOrder::kLayerFirst, 16, 100);
  const std::vector<uint32_t> layer0 = {0};
  ExpectInvalid(
      PlanTransfer(l, std::vector<uint64_t>{1, 2, 3, 100}, l, Consecutive(0, 4), 64, layer0)
          .status(),
      "src_blocks[3] = 100");
  ExpectInvalid(
      PlanTransfer(l, Consecutive(0, 4), l, std::vector<uint64_t>{~uint64_t{0}}, 16, layer0)
          .status(),
      "dst_blocks[0]");
  ExpectInvalid(PlanTransfer(l, Consecutive(0, 3), l, Consecutive(0, 4), 64, layer0).status(),
                "need 4 blocks");
  ExpectInvalid(
      PlanTransfer(l, Consecutive(0, 4), l, std::vector<uint64_t>{7, 8, 7, 9}, 64, layer0).status(),
      "appears twice");
}

TEST(PlanTransferErrors, BadLayers) {
  const KvLayout l = Llama8B();
  const auto blocks = Consecutive(0, 1);
  ExpectInvalid(PlanTransfer(l, blocks, l, blocks, 16, {}).status(), "no layers");
  const std::vector<uint32_t> out_of_range = {32};
  ExpectInvalid(PlanTransfer(l, blocks, l, blocks, 16, out_of_range).status(), "layer 32");
  const std::vector<uint32_t> unsorted = {3, 1};
  ExpectInvalid(PlanTransfer(l, blocks, l, blocks, 16, unsorted).status(), "ascending");
  const std::vector<uint32_t> repeated = {1, 1};
  ExpectInvalid(PlanTransfer(l, blocks, l, blocks, 16, repeated).status(), "ascending");
}

TEST(PlanTransferErrors, TokenCountOverflow) {
  const KvLayout l = Llama8B();
  std::vector<CopyRange> plan;
  const std::vector<uint32_t> layer0 = {0};
  const auto blocks = Consecutive(0, 1);
  ExpectInvalid(PlanTransferInto(l, blocks, l, blocks, ~uint64_t{0}, 2, layer0, plan), "overflows");
}

TEST(PlanTransferErrors, TooManyRangesIsResourceExhausted) {
  // NHD -> HND moves one head-row per range: 16K tokens x 8 heads x 2 parts
  // per layer, over the limit for 32 layers at once, fine for one.
  const KvLayout src = Llama8B(KvOrder::kLayerFirst);
  const KvLayout dst = Llama8B(KvOrder::kLayerFirstHeadMajor);
  const auto blocks = Consecutive(0, 1024);
  auto all = PlanTransfer(src, blocks, dst, blocks, 16384, AllLayers(32));
  EXPECT_EQ(all.status().code(), absl::StatusCode::kResourceExhausted) << all.status();
  const std::vector<uint32_t> layer0 = {0};
  auto one = PlanTransfer(src, blocks, dst, blocks, 16384, layer0);
  ASSERT_TRUE(one.ok());
  // The last head-row of a block continues into the next block's first on
  // both sides: 1023 such joins per part.
  EXPECT_EQ(one->size(), 16384u * 8 * 2 - 2 * 1023);
}

TEST(PlanTransferErrors, OutputClearedOnError) {
  const KvLayout l = Llama8B();
  std::vector<CopyRange> plan(5);
  const std::vector<uint32_t> bad = {99};
  const auto blocks = Consecutive(0, 1);
  EXPECT_FALSE(PlanTransferInto(l, blocks, l, blocks, 0, 16, bad, plan).ok());
  EXPECT_TRUE(plan.empty());
}

// ---------------------------------------------------------------------------
// Layout shape, mapping, head slices.

TEST(KvLayout, ValidateNamesTheBadField) {
  EXPECT_TRUE(Llama8B().Validate().ok());
  KvLayout l = Llama8B();
  l.num_layers = 0;
  ExpectInvalid(l.Validate(), "num_layers is 0");
  l = Llama8B();
  l.num_layers = kMaxLayers + 1;
  ExpectInvalid(l.Validate(), "exceeds the limit");
  l = Llama8B();
  l.num_parts = 3;
  ExpectInvalid(l.Validate(), "num_parts");
  l = Llama8B();
  l.head_dim = 0;
  ExpectInvalid(l.Validate(), "head_dim is 0");
  l = Llama8B();
  l.num_blocks = 0;
  ExpectInvalid(l.Validate(), "num_blocks is 0");
  l = Llama8B();
  l.total_kv_heads = 0;
  ExpectInvalid(l.Validate(), "total_kv_heads is 0");
  l = Llama8B();
  l.first_head = 4;
  ExpectInvalid(l.Validate(), "exceed total_kv_heads");
  l = Llama8B();
  l.dtype = static_cast<KvDtype>(0);
  ExpectInvalid(l.Validate(), "unknown dtype");
  l = Llama8B();
  l.order = static_cast<KvOrder>(9);
  ExpectInvalid(l.Validate(), "unknown memory order");
  // Every field within its own limit, the product past kMaxRegionBytes.
  l = Llama8B(KvOrder::kPageFirst);
  l.num_blocks = kMaxBlocks;
  ExpectInvalid(l.Validate(), "a region would exceed");
  l.order = KvOrder::kLayerFirst;
  ExpectInvalid(l.Validate(), "a region would exceed");
}

TEST(KvLayout, SizesAndRegions) {
  const KvLayout l = Llama8B();
  EXPECT_EQ(l.HeadBytes(), 256u);
  EXPECT_EQ(l.BlockBytes(), 2u * 16 * 8 * 256);
  EXPECT_EQ(l.NumRegions(), 32u);
  EXPECT_EQ(l.RegionBytes(), 2048 * l.BlockBytes());
  const KvLayout p = Llama8B(KvOrder::kPageFirst);
  EXPECT_EQ(p.NumRegions(), 1u);
  EXPECT_EQ(p.RegionBytes(), 32 * 2048 * p.BlockBytes());
  std::vector<uint64_t> lengths(32, l.RegionBytes());
  EXPECT_TRUE(CheckRegionLengths(l, lengths).ok());
  lengths[7] -= 1;
  ExpectInvalid(CheckRegionLengths(l, lengths), "region 7");
  lengths.pop_back();
  ExpectInvalid(CheckRegionLengths(l, lengths), "32 regions");
}

TEST(KvLayout, ElementLocationMatchesReferenceForEveryOrder) {
  std::mt19937_64 rng(7);
  for (const KvOrder order : kOrders) {
    const KvLayout l{.order = order,
                     .dtype = KvDtype::kFloat32,
                     .num_layers = 3,
                     .num_parts = 2,
                     .block_size = 5,
                     .num_kv_heads = 3,
                     .head_dim = 7,
                     .num_blocks = 11,
                     .first_head = 3,
                     .total_kv_heads = 6};
    ASSERT_TRUE(l.Validate().ok());
    for (int i = 0; i < 500; ++i) {
      const uint32_t layer = rng() % 3, part = rng() % 2, row = rng() % 5, head = rng() % 3,
                     dim = rng() % 7;
      const uint64_t block = rng() % 11;
      const ByteRange got = l.ElementLocation(layer, part, block, row, head, dim);
      const RefLocation want = Reference(l, layer, part, block, row, head, dim);
      ASSERT_EQ(got.region, want.region);
      ASSERT_EQ(got.offset, want.offset);
      ASSERT_EQ(got.length, 4u);
    }
  }
}

TEST(KvLayout, ForEachBlockRange) {
  const auto ranges_of = [](const KvLayout& l, uint32_t layer, uint64_t block) {
    std::vector<ByteRange> out;
    ForEachBlockRange(l, layer, block, [&](const ByteRange& r) { out.push_back(r); });
    return out;
  };
  const KvLayout page = Llama8B(KvOrder::kPageFirst);
  EXPECT_EQ(ranges_of(page, 3, 10),
            (std::vector<ByteRange>{{0, (10 * 32 + 3) * page.BlockBytes(), page.BlockBytes()}}));
  const KvLayout block_major = Llama8B(KvOrder::kLayerFirstBlockMajor);
  EXPECT_EQ(ranges_of(block_major, 3, 10),
            (std::vector<ByteRange>{{3, 10 * page.BlockBytes(), page.BlockBytes()}}));
  for (const KvOrder order : {KvOrder::kLayerFirst, KvOrder::kLayerFirstHeadMajor}) {
    const KvLayout l = Llama8B(order);
    const uint64_t half = l.BlockBytes() / 2;
    EXPECT_EQ(ranges_of(l, 3, 10),
              (std::vector<ByteRange>{{3, 10 * half, half}, {3, (2048 + 10) * half, half}}));
  }
}

TEST(KvLayout, ForEachRangeOfAHeadSliceIsOneRangePerRowInTokenMajorOrders) {
  const KvLayout l = Llama8B();
  std::vector<ByteRange> out;
  ForEachRange(l, 0, 1, 2, 3, 4, HeadSlice{2, 3}, [&](const ByteRange& r) { out.push_back(r); });
  ASSERT_EQ(out.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(out[i].offset, l.ElementLocation(0, 1, 2, static_cast<uint32_t>(3 + i), 2, 0).offset);
    EXPECT_EQ(out[i].length, 3 * l.HeadBytes());
  }
  const KvLayout hnd = Llama8B(KvOrder::kLayerFirstHeadMajor);
  out.clear();
  ForEachRange(hnd, 0, 1, 2, 0, 16, HeadSlice{2, 3}, [&](const ByteRange& r) { out.push_back(r); });
  ASSERT_EQ(out.size(), 1u);  // whole rows of consecutive heads are contiguous
  EXPECT_EQ(out[0].length, 3 * 16 * hnd.HeadBytes());
}

TEST(HeadSlice, TpHeadSlice) {
  EXPECT_EQ(*TpHeadSlice(8, 0, 2), (HeadSlice{0, 4}));
  EXPECT_EQ(*TpHeadSlice(8, 1, 2), (HeadSlice{4, 4}));
  EXPECT_EQ(*TpHeadSlice(8, 7, 8), (HeadSlice{7, 1}));
  EXPECT_EQ(*TpHeadSlice(2, 3, 4), (HeadSlice{1, 1}));  // replicated heads
  EXPECT_EQ(*TpHeadSlice(1, 5, 8), (HeadSlice{0, 1}));  // MLA
  ExpectInvalid(TpHeadSlice(8, 0, 3).status(), "do not split evenly");
  ExpectInvalid(TpHeadSlice(3, 0, 4).status(), "do not split evenly");
  ExpectInvalid(TpHeadSlice(8, 2, 2).status(), "tp_rank 2");
  ExpectInvalid(TpHeadSlice(0, 0, 1).status(), "must be > 0");
  EXPECT_EQ(Intersect({0, 4}, {2, 4}), (HeadSlice{2, 2}));
  EXPECT_TRUE(Intersect({0, 4}, {4, 4}).empty());
}

TEST(HeadSlice, TpShardRejectsAShard) {
  const KvLayout shard = *TpShard(Llama8B(), 1, 4);
  EXPECT_EQ(shard.Heads(), (HeadSlice{2, 2}));
  EXPECT_EQ(shard.total_kv_heads, 8u);
  ExpectInvalid(TpShard(shard, 0, 2).status(), "already a shard");
}

// ---------------------------------------------------------------------------
// Wire encoding.

TEST(KvLayoutCodec, TestVector) {
  KvLayout l = *TpShard(Llama8B(KvOrder::kPageFirst, 64, 0x010203), 1, 2);
  const std::string want(
      "MCKL"
      "\x01\x00\x30\x00"                   // version 1, size 48
      "\x04\x01\x02\x00"                   // page_first, bf16, 2 parts, reserved
      "\x20\x00\x00\x00"                   // 32 layers
      "\x40\x00\x00\x00"                   // block_size 64
      "\x04\x00\x00\x00"                   // 4 local heads
      "\x80\x00\x00\x00"                   // head_dim 128
      "\x08\x00\x00\x00"                   // 8 heads in all
      "\x04\x00\x00\x00"                   // first head 4
      "\x00\x00\x00\x00"                   // reserved
      "\x03\x02\x01\x00\x00\x00\x00\x00",  // num_blocks
      48);
  EXPECT_EQ(l.Encode(), want);
  EXPECT_EQ(*KvLayout::Decode(want), l);
}

TEST(KvLayoutCodec, RoundTripEveryOrderAndDtype) {
  for (const KvOrder order : kOrders) {
    for (const KvDtype dtype : kDtypes) {
      KvLayout l = Llama8B(order);
      l.dtype = dtype;
      auto back = KvLayout::Decode(l.Encode());
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(*back, l);
    }
  }
}

TEST(KvLayoutCodec, EveryTruncationAndExtensionFails) {
  const std::string good = Llama8B().Encode();
  for (size_t n = 0; n < good.size(); ++n) {
    auto r = KvLayout::Decode(std::string_view(good).substr(0, n));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << n;
  }
  ExpectInvalid(KvLayout::Decode(good + '\0').status(), "got 49 bytes");
}

TEST(KvLayoutCodec, MalformedFieldsFailWithReasons) {
  const std::string good = Llama8B().Encode();
  auto with = [&](size_t at, char byte) {
    std::string s = good;
    s[at] = byte;
    return KvLayout::Decode(s).status();
  };
  ExpectInvalid(with(0, 'X'), "bad magic");
  ExpectInvalid(with(4, 2), "unsupported version 2");
  ExpectInvalid(with(6, 47), "header says 47");
  ExpectInvalid(with(11, 1), "reserved");
  ExpectInvalid(with(37, 1), "reserved");
  ExpectInvalid(with(8, 9), "unknown memory order");
  ExpectInvalid(with(9, 0), "unknown dtype");
  ExpectInvalid(with(10, 3), "num_parts");
  ExpectInvalid(with(14, 1), "num_layers");  // 65536 + 32 layers
}

TEST(KvLayoutCodec, EverySingleByteChangeFailsOrReencodesExactly) {
  const std::string good = Llama8B().Encode();
  for (size_t at = 0; at < good.size(); ++at) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string s = good;
      s[at] = static_cast<char>(s[at] ^ (1 << bit));
      auto r = KvLayout::Decode(s);
      if (r.ok()) {
        EXPECT_EQ(r->Encode(), s);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Range arithmetic.

TEST(StridedRanges, GridFoldsContiguousAxes) {
  using connector_internal::ForEachGridRun;
  std::vector<CopyRange> out;
  auto collect = [&](uint64_t s, uint64_t d, uint64_t n) { out.push_back({0, 0, s, d, n}); };
  ForEachGridRun(0, 100, 4, {3, 8, 8}, {2, 4, 4}, collect);  // rows of 2 elements, packed
  EXPECT_EQ(out, (std::vector<CopyRange>{{0, 0, 0, 100, 24}}));
  out.clear();
  ForEachGridRun(0, 0, 4, {3, 8, 16}, {2, 4, 4}, collect);  // dst rows padded
  EXPECT_EQ(out.size(), 3u);
  out.clear();
  ForEachGridRun(0, 0, 4, {2, 4, 8}, {2, 8, 4}, collect);  // a transpose: 4 single elements
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[1].dst_offset, 4u);  // dst ascending
  out.clear();
  ForEachGridRun(0, 0, 4, {0, 4, 4}, {2, 4, 4}, collect);
  EXPECT_TRUE(out.empty());
}

TEST(StridedRanges, SortAndCoalesce) {
  std::vector<CopyRange> v = {{0, 0, 10, 10, 5}, {0, 0, 0, 0, 10}, {0, 1, 0, 0, 3}};
  EXPECT_FALSE(connector_internal::SortAndCoalesce(v).has_value());
  EXPECT_EQ(v, (std::vector<CopyRange>{{0, 0, 0, 0, 15}, {0, 1, 0, 0, 3}}));
  std::vector<CopyRange> overlap = {{0, 0, 0, 0, 10}, {0, 0, 50, 9, 1}};
  EXPECT_EQ(connector_internal::SortAndCoalesce(overlap), std::optional<size_t>(1));
}

}  // namespace
}  // namespace mooncake::connector
