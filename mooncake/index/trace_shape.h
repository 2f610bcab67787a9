// Shape of a request trace as a prefix cache sees it: how much of it is
// reused at all, how far apart reuses are, and how much is shared between
// clients. Used to show that generated traces differ, and printed beside
// hit rates so a reader can tell why a policy wins on one trace and not on
// another.
//
// A block is a prefix (a request's hash ids up to and including it), as in
// TraceChain: equal ids after different prefixes are different blocks.
//
// Thread-safety: pure functions.
#ifndef MOONCAKE_INDEX_TRACE_SHAPE_H_
#define MOONCAKE_INDEX_TRACE_SHAPE_H_

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "mooncake/base/assert.h"
#include "mooncake/index/mooncake_trace.h"

namespace mooncake::index {

struct TraceShape {
  uint64_t requests = 0;
  uint64_t requested_blocks = 0;
  uint64_t distinct_blocks = 0;
  // Requested blocks that were requested before (the hit rate of an
  // unlimited cache).
  double reused_share = 0;
  // Requested blocks that more than one client requests (0 without
  // clients): shared system prompts and documents.
  double cross_client_share = 0;
  // Over reuses: blocks requested since the block's previous request
  // (the distance an LRU cache must span), median and 90th percentile.
  uint64_t reuse_distance_p50 = 0;
  uint64_t reuse_distance_p90 = 0;
};

// `client_of` is empty or names each request's client.
inline TraceShape MeasureTraceShape(std::span<const TraceRequest> trace,
                                    std::span<const uint32_t> client_of = {}) {
  MC_ASSERT(client_of.empty() || client_of.size() == trace.size(), "one client per request");
  struct Block {
    uint64_t last_position;
    uint32_t first_client;
    bool shared;
    uint32_t requests;
  };
  constexpr uint32_t kRoot = ~uint32_t{0};
  absl::flat_hash_map<std::pair<uint32_t, uint64_t>, uint32_t> node_of;  // (parent, id) -> node
  std::vector<Block> blocks;
  std::vector<uint64_t> distances;
  std::vector<uint32_t> nodes;
  TraceShape shape;
  uint64_t position = 0;
  uint64_t reused = 0;
  for (size_t r = 0; r < trace.size(); ++r) {
    const uint32_t client = client_of.empty() ? 0 : client_of[r];
    uint32_t parent = kRoot;
    nodes.clear();
    for (uint64_t id : trace[r].hash_ids) {
      auto [it, fresh] = node_of.try_emplace({parent, id}, static_cast<uint32_t>(blocks.size()));
      if (fresh) {
        blocks.push_back({position, client, false, 0});
      } else {
        Block& b = blocks[it->second];
        ++reused;
        distances.push_back(position - b.last_position);
        b.last_position = position;
        b.shared |= b.first_client != client;
      }
      parent = it->second;
      nodes.push_back(parent);
      ++position;
    }
    for (uint32_t n : nodes) ++blocks[n].requests;
  }
  shape.requests = trace.size();
  shape.requested_blocks = position;
  shape.distinct_blocks = blocks.size();
  if (position > 0) {
    shape.reused_share = static_cast<double>(reused) / static_cast<double>(position);
    uint64_t shared = 0;
    for (const Block& b : blocks) shared += b.shared ? b.requests : 0;
    if (!client_of.empty()) shape.cross_client_share = static_cast<double>(shared) / position;
  }
  if (!distances.empty()) {
    auto quantile = [&](double q) {
      auto nth = distances.begin() + static_cast<ptrdiff_t>(q * (distances.size() - 1));
      std::nth_element(distances.begin(), nth, distances.end());
      return *nth;
    };
    shape.reuse_distance_p50 = quantile(0.5);
    shape.reuse_distance_p90 = quantile(0.9);
  }
  return shape;
}

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_TRACE_SHAPE_H_
