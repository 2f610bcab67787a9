// Hashing of BlockKey values inside in-memory hash tables.
#ifndef MOONCAKE_INDEX_INTERNAL_KEY_HASH_H_
#define MOONCAKE_INDEX_INTERNAL_KEY_HASH_H_

#include <cstddef>
#include <cstdint>

#include "mooncake/base/hash.h"

namespace mooncake::index_internal {

// Real block keys are XXH3 outputs, already uniform; one multiply-xorshift
// still spreads hand-made keys ({1, 0}, {2, 0}, ...) so that tests and traces
// with small ids do not cluster in a SwissTable (which reads both the low 7
// bits and the high bits of the hash). Cheaper than absl::Hash's mixing of
// two words, and identical for every index so benchmarks compare structures,
// not hash functions.
struct BlockKeyHash {
  size_t operator()(const Hash128& key) const {
    uint64_t h = (key.low ^ (key.high * 0x9E3779B97F4A7C15ull)) * 0xD6E8FEB86659FD93ull;
    return static_cast<size_t>(h ^ (h >> 32));
  }
};

}  // namespace mooncake::index_internal

#endif  // MOONCAKE_INDEX_INTERNAL_KEY_HASH_H_
