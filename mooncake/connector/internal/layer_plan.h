// What both connector sides check of a request's shape, and the one-layer
// plan the prefill side sends per SaveLayer.
#ifndef MOONCAKE_CONNECTOR_INTERNAL_LAYER_PLAN_H_
#define MOONCAKE_CONNECTOR_INTERNAL_LAYER_PLAN_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/connector/connector.h"
#include "mooncake/connector/kv_layout.h"

namespace mooncake::connector_internal {

// A request id, its blocks and token count against the layout that holds them.
inline absl::Status CheckRequestShape(const connector::KvLayout& layout,
                                      std::string_view request_id, std::span<const uint64_t> blocks,
                                      uint64_t num_tokens) {
  if (request_id.empty() || request_id.size() > connector::kMaxRequestIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request id of ", request_id.size(), " bytes: want 1 to ", connector::kMaxRequestIdBytes));
  }
  if (blocks.empty() || blocks.size() > connector::kMaxBlocksPerRequest) {
    return absl::InvalidArgumentError(absl::StrCat("request '", AbslView(request_id),
                                                   "': ", blocks.size(), " blocks; want 1 to ",
                                                   connector::kMaxBlocksPerRequest));
  }
  for (uint64_t b : blocks) {
    if (b >= layout.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("request '", AbslView(request_id), "': block ",
                                                     b, " of a cache of ", layout.num_blocks));
    }
  }
  if (num_tokens == 0 || num_tokens > blocks.size() * uint64_t{layout.block_size}) {
    return absl::InvalidArgumentError(absl::StrCat("request '", AbslView(request_id),
                                                   "': ", num_tokens, " tokens in ", blocks.size(),
                                                   " blocks of ", layout.block_size));
  }
  return absl::OkStatus();
}

// The copies that move `layer` of the request's first `num_tokens` tokens.
inline absl::StatusOr<std::vector<connector::CopyRange>> PlanLayer(
    const connector::KvLayout& src, std::span<const uint64_t> src_blocks,
    const connector::KvLayout& dst, std::span<const uint64_t> dst_blocks, uint64_t num_tokens,
    uint32_t layer) {
  const uint32_t layers[1] = {layer};
  return connector::PlanTransfer(src, src_blocks, dst, dst_blocks, num_tokens, layers);
}

}  // namespace mooncake::connector_internal

#endif  // MOONCAKE_CONNECTOR_INTERNAL_LAYER_PLAN_H_
