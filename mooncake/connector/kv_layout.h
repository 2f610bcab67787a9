// KV-cache layouts and the byte-range transfer planner for prefill -> decode
// (PD) KV transfer.
//
// Vocabulary
//   KvLayout   An engine's paged KV cache described as data: layers, parts per
//              layer (2 = K and V, 1 = one MLA latent tensor), block (page)
//              size in tokens, the KV heads this process holds (a slice of
//              the model's heads under tensor parallelism), head_dim, dtype,
//              the number of blocks, and the memory order. It is the shape
//              two peers exchange (Encode / Decode); it holds no addresses.
//   Region     A layout's memory is NumRegions() equally long regions of
//              RegionBytes() bytes each. Every offset the planner produces is
//              relative to a region; each process keeps its own base address
//              per region (a vLLM worker registers one tensor per layer, so a
//              layer-first layout has one region per layer; SGLang's
//              page-first pool is one region). CheckRegionLengths checks the
//              lengths a process registered against the shape.
//   HeadSlice  [first_head, first_head + num_heads) of the model's KV heads.
//              TP rank r of degree T holds TpHeadSlice(H, r, T).
//   CopyRange  {src_region, src_offset, dst_region, dst_offset, length}: one
//              memcpy / one transport request.
//
// Memory orders (innermost dimension last; `row` is a token within a block,
// every element is head_dim values of dtype):
//   kLayerFirst            per layer: [part][block][row][head][dim]
//                          (vLLM FlashAttention per-layer tensor)
//   kLayerFirstHeadMajor   per layer: [part][block][head][row][dim] (HND)
//   kLayerFirstBlockMajor  per layer: [block][part][row][head][dim]
//                          (vLLM FlashInfer per-layer tensor, NHD)
//   kPageFirst             one region: [block][layer][part][row][head][dim]
//                          (SGLang page-first)
//
// Token placement: token t of a request lives in block blocks[t / block_size]
// at row t % block_size, on each side with that side's block size and block
// list; the two block sizes may differ.
//
// PlanTransfer(src, src_blocks, dst, dst_blocks, num_tokens, layers) returns
// the copies that move tokens [first_token, first_token + num_tokens) of the
// given layers, for every part and for the KV heads both sides hold (the
// intersection of src.Heads() and dst.Heads(); none in common gives an empty
// plan). The result is sorted by (dst_region, dst_offset), destinations are
// disjoint, and no two neighbours are contiguous on both sides (everything
// mergeable is merged). Ranges are as long as the largest run contiguous on
// both sides: identical layouts with consecutive block ids give one range per
// (layer, part) for layer-first orders (head-major adds one per head for a
// partial last block) and one range in all for page-first with whole pages.
// Errors (InvalidArgument unless noted): invalid layouts; dtype, head_dim,
// parts, layers or total heads differ; a block id that holds a moved token is
// >= num_blocks; too few block ids for the tokens; layers not strictly
// ascending or out of range; a destination block id repeated (two copies
// would write the same bytes); ResourceExhausted past kMaxPlanRanges ranges
// (plan per layer for long contexts with split heads).
//
// Complexity: PlanTransfer is O(parts * (chunks + R1) + R1 log R1 + |layers| * R1)
// where chunks <= num_tokens / min(block sizes) + 2 and R1 is the number of
// ranges of one layer before merging; a page-first destination adds a sort of
// all |layers| * R1 ranges. The sorts are skipped when ranges come out sorted
// (ascending destination block ids). Everything else is O(1) or O(ranges
// produced). PlanTransfer allocates its result and one layer's scratch.
//
// Thread-safety: everything here is a pure function of its arguments; all of
// it may run concurrently.
//
// Wire encoding (Encode / Decode), 48 bytes, little-endian, version 1:
//   0  "MCKL" magic         12 u32 num_layers      32 u32 first_head
//   4  u16 version = 1      16 u32 block_size      36 u32 reserved = 0
//   6  u16 size = 48        20 u32 num_kv_heads    40 u64 num_blocks
//   8  u8 order, u8 dtype   24 u32 head_dim
//   10 u8 num_parts         28 u32 total_kv_heads
//   11 u8 reserved = 0
// Decode accepts exactly this: the magic, version 1, size 48 and input length
// 48, zero reserved bytes, known enum codes, and a layout that Validate()s.
#ifndef MOONCAKE_CONNECTOR_KV_LAYOUT_H_
#define MOONCAKE_CONNECTOR_KV_LAYOUT_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/connector/internal/strided_ranges.h"

namespace mooncake::connector {

// Wire codes; the float codes match compress::DType's.
enum class KvDtype : uint8_t {
  kBFloat16 = 1,
  kFloat16 = 2,
  kFloat8E4M3 = 3,
  kFloat8E5M2 = 4,
  kFloat32 = 5,
  kInt8 = 6,
  kUint8 = 7,
};

// Bytes per element; 0 for a code that names no dtype.
constexpr uint32_t DtypeBytes(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kBFloat16:
    case KvDtype::kFloat16:
      return 2;
    case KvDtype::kFloat8E4M3:
    case KvDtype::kFloat8E5M2:
    case KvDtype::kInt8:
    case KvDtype::kUint8:
      return 1;
    case KvDtype::kFloat32:
      return 4;
  }
  return 0;
}

constexpr std::string_view DtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kBFloat16:
      return "bf16";
    case KvDtype::kFloat16:
      return "fp16";
    case KvDtype::kFloat8E4M3:
      return "fp8_e4m3";
    case KvDtype::kFloat8E5M2:
      return "fp8_e5m2";
    case KvDtype::kFloat32:
      return "fp32";
    case KvDtype::kInt8:
      return "int8";
    case KvDtype::kUint8:
      return "uint8";
  }
  return "unknown";
}

// Wire codes; see the table at the top of this file.
enum class KvOrder : uint8_t {
  kLayerFirst = 1,
  kLayerFirstHeadMajor = 2,
  kLayerFirstBlockMajor = 3,
  kPageFirst = 4,
};

constexpr std::string_view OrderName(KvOrder order) {
  switch (order) {
    case KvOrder::kLayerFirst:
      return "layer_first";
    case KvOrder::kLayerFirstHeadMajor:
      return "layer_first_head_major";
    case KvOrder::kLayerFirstBlockMajor:
      return "layer_first_block_major";
    case KvOrder::kPageFirst:
      return "page_first";
  }
  return "unknown";
}

struct HeadSlice {
  uint32_t first_head = 0;
  uint32_t num_heads = 0;

  uint64_t end() const { return uint64_t{first_head} + num_heads; }
  bool empty() const { return num_heads == 0; }
  friend bool operator==(const HeadSlice&, const HeadSlice&) = default;
};

inline HeadSlice Intersect(HeadSlice a, HeadSlice b) {
  const uint64_t first = std::max(a.first_head, b.first_head);
  const uint64_t end = std::min(a.end(), b.end());
  if (end <= first) return HeadSlice{};
  return HeadSlice{static_cast<uint32_t>(first), static_cast<uint32_t>(end - first)};
}

// The KV heads TP rank `tp_rank` of `tp_size` holds out of `total_kv_heads`:
// [r*H/T, (r+1)*H/T) when T <= H (T must divide H, as engines require), and
// the single replicated head r*H/T when T > H (H must divide T; this is also
// MLA's case, H = 1, where every rank holds the whole latent).
inline absl::StatusOr<HeadSlice> TpHeadSlice(uint32_t total_kv_heads, uint32_t tp_rank,
                                             uint32_t tp_size) {
  if (total_kv_heads == 0 || tp_size == 0) {
    return absl::InvalidArgumentError("TpHeadSlice: total_kv_heads and tp_size must be > 0");
  }
  if (tp_rank >= tp_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("TpHeadSlice: tp_rank ", tp_rank, " is not below tp_size ", tp_size));
  }
  const uint64_t h = total_kv_heads;
  const uint64_t t = tp_size;
  if (t <= h ? h % t != 0 : t % h != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TpHeadSlice: ", total_kv_heads, " KV heads do not split evenly over TP ", tp_size));
  }
  const uint64_t first = tp_rank * h / t;
  return HeadSlice{static_cast<uint32_t>(first), static_cast<uint32_t>(t <= h ? h / t : 1)};
}

// Limits Validate() enforces. With them every region is below 2^52 bytes, so
// no offset arithmetic in this file can overflow.
inline constexpr uint32_t kMaxLayers = 1024;
inline constexpr uint32_t kMaxBlockSize = 1u << 16;  // tokens per block
inline constexpr uint32_t kMaxKvHeads = 1024;
inline constexpr uint32_t kMaxHeadDim = 1u << 16;
inline constexpr uint64_t kMaxBlocks = uint64_t{1} << 40;
inline constexpr uint64_t kMaxRegionBytes = uint64_t{1} << 52;
// Most ranges one PlanTransfer returns (32 bytes each, so 128 MiB).
inline constexpr uint64_t kMaxPlanRanges = uint64_t{1} << 22;
inline constexpr size_t kEncodedLayoutBytes = 48;

// Byte strides of one layout's dimensions within a region; see Strides().
struct KvStrides {
  uint64_t layer = 0;  // 0 when each layer has its own region
  uint64_t part = 0;
  uint64_t block = 0;
  uint64_t row = 0;
  uint64_t head = 0;
  bool region_per_layer = false;
};

struct ByteRange {
  uint32_t region = 0;
  uint64_t offset = 0;
  uint64_t length = 0;

  friend bool operator==(const ByteRange&, const ByteRange&) = default;
};

struct CopyRange {
  uint32_t src_region = 0;
  uint32_t dst_region = 0;
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  uint64_t length = 0;

  friend bool operator==(const CopyRange&, const CopyRange&) = default;
};

// The shape of one process's paged KV cache. A plain value; the accessors
// below REQUIRE Validate().ok() (they assert what memory safety depends on).
struct KvLayout {
  KvOrder order = KvOrder::kLayerFirst;
  KvDtype dtype = KvDtype::kBFloat16;
  uint32_t num_layers = 0;
  uint32_t num_parts = 2;     // 2: K and V; 1: one MLA latent
  uint32_t block_size = 0;    // tokens per block (page)
  uint32_t num_kv_heads = 0;  // heads this process holds
  uint32_t head_dim = 0;
  uint64_t num_blocks = 0;
  // This process's heads are the model's [first_head, first_head +
  // num_kv_heads) of total_kv_heads (TpHeadSlice, or TpShard below).
  uint32_t first_head = 0;
  uint32_t total_kv_heads = 0;

  friend bool operator==(const KvLayout&, const KvLayout&) = default;

  absl::Status Validate() const;

  HeadSlice Heads() const { return HeadSlice{first_head, num_kv_heads}; }
  uint64_t ElementBytes() const { return DtypeBytes(dtype); }
  // One head's vector of one token (head_dim values).
  uint64_t HeadBytes() const { return uint64_t{head_dim} * ElementBytes(); }
  // One block of one layer, all parts: what a block costs per layer.
  uint64_t BlockBytes() const {
    return uint64_t{num_parts} * block_size * num_kv_heads * HeadBytes();
  }
  uint32_t NumRegions() const { return order == KvOrder::kPageFirst ? 1 : num_layers; }
  uint64_t RegionBytes() const {
    const uint64_t per_layer = BlockBytes() * num_blocks;
    return order == KvOrder::kPageFirst ? per_layer * num_layers : per_layer;
  }
  KvStrides Strides() const;

  // Where element `dim` of local head `head` of row `row` of block `block`
  // of (layer, part) lives. REQUIRES: every index below its dimension.
  ByteRange ElementLocation(uint32_t layer, uint32_t part, uint64_t block, uint32_t row,
                            uint32_t head, uint32_t dim) const;

  std::string Encode() const;
  // Parses untrusted bytes; see the wire encoding at the top of this file.
  static absl::StatusOr<KvLayout> Decode(std::string_view bytes);

  std::string DebugString() const;
};

// The layout TP rank `tp_rank` of `tp_size` holds, given the unsharded one
// (`full` holds all heads: first_head 0, num_kv_heads == total_kv_heads).
inline absl::StatusOr<KvLayout> TpShard(const KvLayout& full, uint32_t tp_rank, uint32_t tp_size) {
  RETURN_IF_ERROR(full.Validate());
  if (full.first_head != 0 || full.num_kv_heads != full.total_kv_heads) {
    return absl::InvalidArgumentError("TpShard: the layout is already a shard");
  }
  ASSIGN_OR_RETURN(const HeadSlice slice, TpHeadSlice(full.total_kv_heads, tp_rank, tp_size));
  KvLayout shard = full;
  shard.first_head = slice.first_head;
  shard.num_kv_heads = slice.num_heads;
  return shard;
}

inline std::vector<uint32_t> AllLayers(uint32_t num_layers) {
  std::vector<uint32_t> layers(num_layers);
  for (uint32_t l = 0; l < num_layers; ++l) layers[l] = l;
  return layers;
}

// Checks that the regions a process registered, by length, are as many and
// at least as long as `layout` needs.
inline absl::Status CheckRegionLengths(const KvLayout& layout,
                                       std::span<const uint64_t> region_lengths);

// Calls visit(ByteRange) for the bytes of rows [first_row, first_row +
// num_rows) of block `block` of (layer, part), local heads `heads`, in
// increasing offset, each range as long as contiguity allows.
// REQUIRES: layout valid, every index within its dimension.
template <typename Visit>
void ForEachRange(const KvLayout& layout, uint32_t layer, uint32_t part, uint64_t block,
                  uint32_t first_row, uint32_t num_rows, HeadSlice heads, Visit&& visit);

// Calls visit(ByteRange) for one block of one layer, all parts, all rows and
// heads: one range when the order keeps them together (page-first,
// block-major), one per part otherwise.
template <typename Visit>
void ForEachBlockRange(const KvLayout& layout, uint32_t layer, uint64_t block, Visit&& visit);

// The planner; see the top of this file. PlanTransferInto reuses `out`'s
// capacity (cleared first; left empty on error), for per-layer planning.
inline absl::Status PlanTransferInto(const KvLayout& src, std::span<const uint64_t> src_blocks,
                                     const KvLayout& dst, std::span<const uint64_t> dst_blocks,
                                     uint64_t first_token, uint64_t num_tokens,
                                     std::span<const uint32_t> layers, std::vector<CopyRange>& out);

inline absl::StatusOr<std::vector<CopyRange>> PlanTransfer(
    const KvLayout& src, std::span<const uint64_t> src_blocks, const KvLayout& dst,
    std::span<const uint64_t> dst_blocks, uint64_t num_tokens, std::span<const uint32_t> layers);

// ---------------------------------------------------------------------------
// Implementation.

}  // namespace mooncake::connector

namespace mooncake::connector_internal {

inline bool KvMulChecked(uint64_t a, uint64_t b, uint64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}

inline absl::Status CheckLayoutField(const char* field, uint64_t value, uint64_t max) {
  if (value == 0) return absl::InvalidArgumentError(absl::StrCat("KvLayout: ", field, " is 0"));
  if (value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvLayout: ", field, " ", value, " exceeds the limit ", max));
  }
  return absl::OkStatus();
}

inline void PutLayoutLe(std::string& out, size_t at, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out[at + i] = static_cast<char>((value >> (8 * i)) & 0xFF);
}

inline uint64_t GetLayoutLe(std::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= uint64_t{static_cast<uint8_t>(in[at + i])} << (8 * i);
  }
  return v;
}

inline constexpr char kLayoutMagic[4] = {'M', 'C', 'K', 'L'};
inline constexpr uint16_t kLayoutVersion = 1;

}  // namespace mooncake::connector_internal

namespace mooncake::connector {

inline absl::Status KvLayout::Validate() const {
  using connector_internal::CheckLayoutField;
  if (OrderName(order) == "unknown") {
    return absl::InvalidArgumentError(
        absl::StrCat("KvLayout: unknown memory order code ", static_cast<int>(order)));
  }
  if (DtypeBytes(dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvLayout: unknown dtype code ", static_cast<int>(dtype)));
  }
  RETURN_IF_ERROR(CheckLayoutField("num_layers", num_layers, kMaxLayers));
  if (num_parts != 1 && num_parts != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KvLayout: num_parts is ", num_parts, "; it must be 2 (K and V) or 1 (an MLA latent)"));
  }
  RETURN_IF_ERROR(CheckLayoutField("block_size", block_size, kMaxBlockSize));
  RETURN_IF_ERROR(CheckLayoutField("num_kv_heads", num_kv_heads, kMaxKvHeads));
  RETURN_IF_ERROR(CheckLayoutField("head_dim", head_dim, kMaxHeadDim));
  RETURN_IF_ERROR(CheckLayoutField("num_blocks", num_blocks, kMaxBlocks));
  RETURN_IF_ERROR(CheckLayoutField("total_kv_heads", total_kv_heads, kMaxKvHeads));
  if (Heads().end() > total_kv_heads) {
    return absl::InvalidArgumentError(absl::StrCat("KvLayout: heads [", first_head, ", ",
                                                   Heads().end(), ") exceed total_kv_heads ",
                                                   total_kv_heads));
  }
  // BlockBytes cannot overflow under the limits above (< 2^53); the products
  // with num_blocks and num_layers can.
  uint64_t bytes = 0;
  const uint64_t layers = order == KvOrder::kPageFirst ? num_layers : 1;
  if (!connector_internal::KvMulChecked(BlockBytes(), num_blocks, bytes) ||
      !connector_internal::KvMulChecked(bytes, layers, bytes) || bytes > kMaxRegionBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvLayout: a region would exceed ", kMaxRegionBytes, " bytes (", num_blocks,
                     " blocks of ", BlockBytes(), " bytes per layer)"));
  }
  return absl::OkStatus();
}

inline KvStrides KvLayout::Strides() const {
  const uint64_t head = HeadBytes();
  const uint64_t token = head * num_kv_heads;  // all heads of one row
  const uint64_t block_part = token * block_size;
  KvStrides s;
  switch (order) {
    case KvOrder::kLayerFirst:
      s = {.part = block_part * num_blocks, .block = block_part, .row = token, .head = head};
      break;
    case KvOrder::kLayerFirstHeadMajor:
      s = {.part = block_part * num_blocks,
           .block = block_part,
           .row = head,
           .head = head * block_size};
      break;
    case KvOrder::kLayerFirstBlockMajor:
      s = {.part = block_part, .block = block_part * num_parts, .row = token, .head = head};
      break;
    case KvOrder::kPageFirst:
      s = {.layer = block_part * num_parts,
           .part = block_part,
           .block = block_part * num_parts * num_layers,
           .row = token,
           .head = head};
      break;
  }
  s.region_per_layer = order != KvOrder::kPageFirst;
  return s;
}

inline ByteRange KvLayout::ElementLocation(uint32_t layer, uint32_t part, uint64_t block,
                                           uint32_t row, uint32_t head, uint32_t dim) const {
  MC_ASSERT(layer < num_layers && part < num_parts && block < num_blocks && row < block_size &&
                head < num_kv_heads && dim < head_dim,
            "ElementLocation: index out of range");
  const KvStrides s = Strides();
  return ByteRange{
      .region = s.region_per_layer ? layer : 0,
      .offset = layer * s.layer + part * s.part + block * s.block + row * s.row + head * s.head +
                dim * ElementBytes(),
      .length = ElementBytes(),
  };
}

inline std::string KvLayout::Encode() const {
  using connector_internal::PutLayoutLe;
  std::string out(kEncodedLayoutBytes, '\0');
  std::memcpy(out.data(), connector_internal::kLayoutMagic, 4);
  PutLayoutLe(out, 4, connector_internal::kLayoutVersion, 2);
  PutLayoutLe(out, 6, kEncodedLayoutBytes, 2);
  PutLayoutLe(out, 8, static_cast<uint8_t>(order), 1);
  PutLayoutLe(out, 9, static_cast<uint8_t>(dtype), 1);
  PutLayoutLe(out, 10, num_parts, 1);
  PutLayoutLe(out, 12, num_layers, 4);
  PutLayoutLe(out, 16, block_size, 4);
  PutLayoutLe(out, 20, num_kv_heads, 4);
  PutLayoutLe(out, 24, head_dim, 4);
  PutLayoutLe(out, 28, total_kv_heads, 4);
  PutLayoutLe(out, 32, first_head, 4);
  PutLayoutLe(out, 40, num_blocks, 8);
  MC_DASSERT(num_parts <= 0xFF, "num_parts fits its byte (Validate bounds it to 2)");
  return out;
}

inline absl::StatusOr<KvLayout> KvLayout::Decode(std::string_view bytes) {
  using connector_internal::GetLayoutLe;
  if (bytes.size() < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvLayout::Decode: ", bytes.size(), " bytes is too short for a header"));
  }
  if (std::memcmp(bytes.data(), connector_internal::kLayoutMagic, 4) != 0) {
    return absl::InvalidArgumentError("KvLayout::Decode: bad magic (not a KvLayout encoding)");
  }
  const uint64_t version = GetLayoutLe(bytes, 4, 2);
  if (version != connector_internal::kLayoutVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvLayout::Decode: unsupported version ", version, " (this build reads 1)"));
  }
  const uint64_t size = GetLayoutLe(bytes, 6, 2);
  if (size != kEncodedLayoutBytes || bytes.size() != kEncodedLayoutBytes) {
    return absl::InvalidArgumentError(absl::StrCat("KvLayout::Decode: got ", bytes.size(),
                                                   " bytes, header says ", size,
                                                   "; version 1 is exactly ", kEncodedLayoutBytes));
  }
  if (GetLayoutLe(bytes, 11, 1) != 0 || GetLayoutLe(bytes, 36, 4) != 0) {
    return absl::InvalidArgumentError("KvLayout::Decode: reserved bytes are not zero");
  }
  KvLayout layout;
  layout.order = static_cast<KvOrder>(GetLayoutLe(bytes, 8, 1));
  layout.dtype = static_cast<KvDtype>(GetLayoutLe(bytes, 9, 1));
  layout.num_parts = static_cast<uint32_t>(GetLayoutLe(bytes, 10, 1));
  layout.num_layers = static_cast<uint32_t>(GetLayoutLe(bytes, 12, 4));
  layout.block_size = static_cast<uint32_t>(GetLayoutLe(bytes, 16, 4));
  layout.num_kv_heads = static_cast<uint32_t>(GetLayoutLe(bytes, 20, 4));
  layout.head_dim = static_cast<uint32_t>(GetLayoutLe(bytes, 24, 4));
  layout.total_kv_heads = static_cast<uint32_t>(GetLayoutLe(bytes, 28, 4));
  layout.first_head = static_cast<uint32_t>(GetLayoutLe(bytes, 32, 4));
  layout.num_blocks = GetLayoutLe(bytes, 40, 8);
  if (absl::Status s = layout.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("KvLayout::Decode: ", s.message()));
  }
  return layout;
}

inline std::string KvLayout::DebugString() const {
  return absl::StrCat("KvLayout{", AbslView(OrderName(order)), " ", AbslView(DtypeName(dtype)),
                      " layers=", num_layers, " parts=", num_parts, " block_size=", block_size,
                      " heads=[", first_head, ",", Heads().end(), ")/", total_kv_heads,
                      " head_dim=", head_dim, " blocks=", num_blocks, "}");
}

inline absl::Status CheckRegionLengths(const KvLayout& layout,
                                       std::span<const uint64_t> region_lengths) {
  RETURN_IF_ERROR(layout.Validate());
  if (region_lengths.size() != layout.NumRegions()) {
    return absl::InvalidArgumentError(absl::StrCat("the layout has ", layout.NumRegions(),
                                                   " regions, ", region_lengths.size(),
                                                   " were registered"));
  }
  for (size_t i = 0; i < region_lengths.size(); ++i) {
    if (region_lengths[i] < layout.RegionBytes()) {
      return absl::InvalidArgumentError(absl::StrCat("region ", i, " is ", region_lengths[i],
                                                     " bytes; the layout needs ",
                                                     layout.RegionBytes()));
    }
  }
  return absl::OkStatus();
}

template <typename Visit>
void ForEachRange(const KvLayout& layout, uint32_t layer, uint32_t part, uint64_t block,
                  uint32_t first_row, uint32_t num_rows, HeadSlice heads, Visit&& visit) {
  MC_ASSERT(layer < layout.num_layers && part < layout.num_parts && block < layout.num_blocks,
            "ForEachRange: layer, part or block out of range");
  MC_ASSERT(
      uint64_t{first_row} + num_rows <= layout.block_size && heads.end() <= layout.num_kv_heads,
      "ForEachRange: rows or heads out of range");
  const KvStrides s = layout.Strides();
  const uint32_t region = s.region_per_layer ? layer : 0;
  const uint64_t base = layer * s.layer + part * s.part + block * s.block + first_row * s.row +
                        heads.first_head * s.head;
  connector_internal::ForEachGridRun(
      base, base, layout.HeadBytes(), {num_rows, s.row, s.row}, {heads.num_heads, s.head, s.head},
      [&](uint64_t offset, uint64_t, uint64_t length) {
        MC_DASSERT(offset + length <= layout.RegionBytes(), "range inside its region");
        visit(ByteRange{region, offset, length});
      });
}

template <typename Visit>
void ForEachBlockRange(const KvLayout& layout, uint32_t layer, uint64_t block, Visit&& visit) {
  std::optional<ByteRange> pending;
  for (uint32_t part = 0; part < layout.num_parts; ++part) {
    ForEachRange(layout, layer, part, block, 0, layout.block_size,
                 HeadSlice{0, layout.num_kv_heads}, [&](const ByteRange& r) {
                   if (pending && pending->offset + pending->length == r.offset) {
                     pending->length += r.length;
                     return;
                   }
                   if (pending) visit(*pending);
                   pending = r;
                 });
  }
  if (pending) visit(*pending);
}

}  // namespace mooncake::connector

namespace mooncake::connector_internal {

using connector::CopyRange;
using connector::HeadSlice;
using connector::KvLayout;
using connector::KvStrides;

inline absl::Status CheckLayoutsCompatible(const KvLayout& src, const KvLayout& dst) {
  if (absl::Status s = src.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("src layout: ", s.message()));
  }
  if (absl::Status s = dst.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("dst layout: ", s.message()));
  }
  if (src.dtype != dst.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV dtypes differ: src ", AbslView(DtypeName(src.dtype)), ", dst ",
        AbslView(DtypeName(dst.dtype)), " (the planner copies bytes; it does not convert)"));
  }
  const auto differ = [](const char* what, uint64_t a, uint64_t b) {
    return absl::InvalidArgumentError(absl::StrCat(what, " differs: src ", a, ", dst ", b));
  };
  if (src.head_dim != dst.head_dim) return differ("head_dim", src.head_dim, dst.head_dim);
  if (src.num_parts != dst.num_parts) return differ("num_parts", src.num_parts, dst.num_parts);
  if (src.num_layers != dst.num_layers) {
    return differ("num_layers", src.num_layers, dst.num_layers);
  }
  if (src.total_kv_heads != dst.total_kv_heads) {
    return differ("total_kv_heads", src.total_kv_heads, dst.total_kv_heads);
  }
  return absl::OkStatus();
}

// Checks that `blocks` covers tokens [first, end) and that every block id
// holding one of them is below num_blocks.
inline absl::Status CheckBlockIds(const char* side, const KvLayout& layout,
                                  std::span<const uint64_t> blocks, uint64_t first, uint64_t end) {
  const uint64_t needed = end / layout.block_size + (end % layout.block_size != 0);
  if (blocks.size() < needed) {
    return absl::InvalidArgumentError(absl::StrCat(side, ": ", end, " tokens need ", needed,
                                                   " blocks of ", layout.block_size, ", got ",
                                                   blocks.size(), " block ids"));
  }
  for (uint64_t i = first / layout.block_size; i < needed; ++i) {
    if (blocks[i] >= layout.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat(side, "_blocks[", i, "] = ", blocks[i],
                                                     " is out of range: the layout has ",
                                                     layout.num_blocks, " blocks"));
    }
  }
  return absl::OkStatus();
}

inline absl::Status CheckLayerList(const KvLayout& src, std::span<const uint32_t> layers) {
  if (layers.empty()) return absl::InvalidArgumentError("no layers to transfer");
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] >= src.num_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", layers[i], " is out of range: the model has ", src.num_layers));
    }
    if (i > 0 && layers[i] <= layers[i - 1]) {
      return absl::InvalidArgumentError("layers must be strictly ascending");
    }
  }
  return absl::OkStatus();
}

// The ranges of one layer with layer index 0 and region 0 on both sides (the
// per-layer shift is added by the caller), coalesced in emission order.
inline absl::Status PlanLayerTemplate(const KvLayout& src, std::span<const uint64_t> src_blocks,
                                      const KvLayout& dst, std::span<const uint64_t> dst_blocks,
                                      uint64_t first, uint64_t end, HeadSlice heads,
                                      uint64_t max_ranges, std::vector<CopyRange>& out) {
  const KvStrides s = src.Strides();
  const KvStrides d = dst.Strides();
  const uint64_t src_head0 = (heads.first_head - src.first_head) * s.head;
  const uint64_t dst_head0 = (heads.first_head - dst.first_head) * d.head;
  const connector_internal::GridDim head_dim{heads.num_heads, s.head, d.head};
  for (uint32_t part = 0; part < src.num_parts; ++part) {
    // A chunk is a run of tokens within one block on both sides.
    for (uint64_t t = first; t < end;) {
      const uint64_t src_row = t % src.block_size;
      const uint64_t dst_row = t % dst.block_size;
      const uint64_t n = std::min({src.block_size - src_row, dst.block_size - dst_row, end - t});
      const uint64_t src_at =
          part * s.part + src_blocks[t / src.block_size] * s.block + src_row * s.row + src_head0;
      const uint64_t dst_at =
          part * d.part + dst_blocks[t / dst.block_size] * d.block + dst_row * d.row + dst_head0;
      connector_internal::ForEachGridRun(
          src_at, dst_at, src.HeadBytes(), {n, s.row, d.row}, head_dim,
          [&](uint64_t so, uint64_t dof, uint64_t len) {
            // Past the limit, stop growing; the error is returned below.
            if (out.size() <= max_ranges) {
              connector_internal::AppendCoalesced(out, CopyRange{0, 0, so, dof, len});
            }
          });
      if (out.size() > max_ranges) {
        return absl::ResourceExhaustedError(
            absl::StrCat("the plan exceeds ", connector::kMaxPlanRanges,
                         " ranges; plan fewer layers or tokens per call"));
      }
      t += n;
    }
  }
  return absl::OkStatus();
}

}  // namespace mooncake::connector_internal

namespace mooncake::connector {

inline absl::Status PlanTransferInto(const KvLayout& src, std::span<const uint64_t> src_blocks,
                                     const KvLayout& dst, std::span<const uint64_t> dst_blocks,
                                     uint64_t first_token, uint64_t num_tokens,
                                     std::span<const uint32_t> layers,
                                     std::vector<CopyRange>& out) {
  out.clear();
  RETURN_IF_ERROR(connector_internal::CheckLayoutsCompatible(src, dst));
  RETURN_IF_ERROR(connector_internal::CheckLayerList(src, layers));
  uint64_t end = 0;
  if (__builtin_add_overflow(first_token, num_tokens, &end)) {
    return absl::InvalidArgumentError("first_token + num_tokens overflows");
  }
  RETURN_IF_ERROR(connector_internal::CheckBlockIds("src", src, src_blocks, first_token, end));
  RETURN_IF_ERROR(connector_internal::CheckBlockIds("dst", dst, dst_blocks, first_token, end));
  const HeadSlice heads = Intersect(src.Heads(), dst.Heads());
  if (num_tokens == 0 || heads.empty()) return absl::OkStatus();

  std::vector<CopyRange> layer0;
  RETURN_IF_ERROR(connector_internal::PlanLayerTemplate(src, src_blocks, dst, dst_blocks,
                                                        first_token, end, heads,
                                                        kMaxPlanRanges / layers.size(), layer0));
  // Sorting one layer's ranges once keeps the result sorted when each layer
  // has its own destination region; only page-first destinations (layers
  // interleaved in a page) need the sort after the shift.
  if (std::optional<size_t> i = connector_internal::SortAndCoalesce(layer0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "two copies write the same destination bytes (offset ", layer0[*i].dst_offset, " of layer ",
        layers[0], "'s part of the region): a dst block id appears twice"));
  }
  const KvStrides s = src.Strides();
  const KvStrides d = dst.Strides();
  out.reserve(layer0.size() * layers.size());
  for (const uint32_t layer : layers) {
    const uint32_t src_region = s.region_per_layer ? layer : 0;
    const uint32_t dst_region = d.region_per_layer ? layer : 0;
    for (const CopyRange& r : layer0) {
      connector_internal::AppendCoalesced(
          out, CopyRange{src_region, dst_region, r.src_offset + layer * s.layer,
                         r.dst_offset + layer * d.layer, r.length});
    }
  }
  // Layers occupy disjoint bytes, so the shifted copies cannot overlap.
  const bool disjoint = !connector_internal::SortAndCoalesce(out).has_value();
  MC_ASSERT(disjoint, "layers' destinations are disjoint");
  const uint64_t src_bytes = src.RegionBytes();
  const uint64_t dst_bytes = dst.RegionBytes();
  for (const CopyRange& r : out) {
    MC_ASSERT(r.src_region < src.NumRegions() && r.src_offset + r.length <= src_bytes,
              "planned source range inside its region");
    MC_ASSERT(r.dst_region < dst.NumRegions() && r.dst_offset + r.length <= dst_bytes,
              "planned destination range inside its region");
  }
  return absl::OkStatus();
}

inline absl::StatusOr<std::vector<CopyRange>> PlanTransfer(
    const KvLayout& src, std::span<const uint64_t> src_blocks, const KvLayout& dst,
    std::span<const uint64_t> dst_blocks, uint64_t num_tokens, std::span<const uint32_t> layers) {
  std::vector<CopyRange> out;
  RETURN_IF_ERROR(PlanTransferInto(src, src_blocks, dst, dst_blocks, 0, num_tokens, layers, out));
  return out;
}

}  // namespace mooncake::connector

#endif  // MOONCAKE_CONNECTOR_KV_LAYOUT_H_
