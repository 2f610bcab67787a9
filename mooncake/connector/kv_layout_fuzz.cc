// Feeds arbitrary bytes to KvLayout::Decode. Decode must return a Status,
// never crash or read past the input; what it accepts must be a valid layout
// that re-encodes to the very same bytes, and the planner must handle it: a
// plan between the decoded layout and itself (and a different memory order)
// stays inside the regions (PlanTransfer asserts that).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mooncake/base/assert.h"
#include "mooncake/connector/kv_layout.h"

namespace mooncake {

std::vector<std::string> FuzzSeeds() {
  using connector::KvDtype;
  using connector::KvLayout;
  using connector::KvOrder;
  const KvLayout vllm{.order = KvOrder::kLayerFirst,
                      .dtype = KvDtype::kBFloat16,
                      .num_layers = 32,
                      .num_parts = 2,
                      .block_size = 16,
                      .num_kv_heads = 4,
                      .head_dim = 128,
                      .num_blocks = 4096,
                      .first_head = 4,
                      .total_kv_heads = 8};
  KvLayout sglang = vllm;
  sglang.order = KvOrder::kPageFirst;
  sglang.block_size = 64;
  KvLayout mla = vllm;
  mla.num_parts = 1;
  mla.num_kv_heads = mla.total_kv_heads = 1;
  mla.first_head = 0;
  mla.head_dim = 576;
  mla.dtype = KvDtype::kFloat8E4M3;
  mla.order = KvOrder::kLayerFirstBlockMajor;
  KvLayout hnd = vllm;
  hnd.order = KvOrder::kLayerFirstHeadMajor;
  hnd.dtype = KvDtype::kFloat32;
  return {vllm.Encode(), sglang.Encode(), mla.Encode(), hnd.Encode()};
}

}  // namespace mooncake

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using mooncake::connector::KvLayout;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<KvLayout> layout = KvLayout::Decode(bytes);
  if (!layout.ok()) return 0;
  MC_ASSERT(layout->Validate().ok(), "Decode returns only valid layouts");
  MC_ASSERT(layout->Encode() == bytes, "decode/encode round trip");

  // Two blocks, the first and the last, and the tokens they hold (bounded so
  // one input stays fast).
  const std::vector<uint64_t> blocks = {layout->num_blocks - 1, 0};
  const uint64_t tokens = std::min<uint64_t>(uint64_t{2} * layout->block_size, 64);
  const std::vector<uint32_t> layers = {0, layout->num_layers - 1};
  const std::span<const uint32_t> used(layers.data(), layout->num_layers > 1 ? 2 : 1);
  std::vector<mooncake::connector::CopyRange> plan;
  absl::Status s = mooncake::connector::PlanTransferInto(*layout, blocks, *layout, blocks, 0,
                                                         tokens, used, plan);
  MC_ASSERT(s.ok() || layout->num_blocks == 1, "planning a valid layout onto itself succeeds");
  KvLayout other = *layout;
  other.order = layout->order == mooncake::connector::KvOrder::kPageFirst
                    ? mooncake::connector::KvOrder::kLayerFirst
                    : mooncake::connector::KvOrder::kPageFirst;
  if (other.Validate().ok()) {
    (void)mooncake::connector::PlanTransferInto(*layout, blocks, other, blocks, 0, tokens, used,
                                                plan);
  }
  return 0;
}
