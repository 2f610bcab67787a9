// Replaying a request trace through a PrefixCache and measuring the prefix
// hit rate: hit blocks / requested blocks, where a request's hit stops at its
// first missing block, and then all its blocks are inserted or touched.
//
// Thread-safety: Replay mutates the cache it is given; nothing else shared.
#ifndef MOONCAKE_INDEX_TRACE_REPLAY_H_
#define MOONCAKE_INDEX_TRACE_REPLAY_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "mooncake/index/block_key.h"
#include "mooncake/index/prefix_cache.h"

namespace mooncake::index {

struct ReplayStats {
  uint64_t requests = 0;
  uint64_t requested_blocks = 0;
  uint64_t hit_blocks = 0;
  uint64_t evicted_blocks = 0;

  double HitRate() const {
    return requested_blocks == 0 ? 0.0 : static_cast<double>(hit_blocks) / requested_blocks;
  }
};

// Each chain is one request's block keys, root first. The value stored per
// block is the index of the request that inserted it.
template <typename Cache>
ReplayStats Replay(std::span<const std::vector<BlockKey>> chains, Cache& cache) {
  ReplayStats stats;
  std::vector<uint32_t> values;
  std::vector<Evicted<uint32_t>> evicted;
  for (size_t r = 0; r < chains.size(); ++r) {
    const std::vector<BlockKey>& chain = chains[r];
    values.assign(chain.size(), static_cast<uint32_t>(r));
    ++stats.requests;
    stats.requested_blocks += chain.size();
    stats.hit_blocks += cache.LookupLength(chain);
    evicted.clear();
    cache.Insert(chain, values, evicted);
    stats.evicted_blocks += evicted.size();
  }
  return stats;
}

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_TRACE_REPLAY_H_
