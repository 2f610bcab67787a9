// The per-chunk checksum, XXH3-64 with seed 0 (docs/frame_format.md), at AVX2 speed
// where the CPU has it: mooncake/base/fast_hash.h, which also makes xxHash's internals
// (accumulate, scramble) visible to internal/merge_checksum.h.
#ifndef MOONCAKE_COMPRESS_INTERNAL_CHECKSUM_H_
#define MOONCAKE_COMPRESS_INTERNAL_CHECKSUM_H_

#include <cstddef>
#include <cstdint>

#include "mooncake/base/fast_hash.h"

#if defined(MOONCAKE_BASE_XXH3_AVX2)
#define MOONCAKE_COMPRESS_XXH3_AVX2 1
#endif

namespace mooncake::compress_internal {

#if defined(MOONCAKE_COMPRESS_XXH3_AVX2)
using hash_internal::HasAvx2;
#endif

// XXH3-64 (seed 0) of data[0, len): what the frame stores for each chunk.
inline uint64_t ChunkChecksum(const void* data, size_t len) { return FastStableHash64(data, len); }

// Whether ChunkChecksum uses the AVX2 kernels on this machine (for benchmarks and tests).
inline bool ChunkChecksumUsesAvx2() { return FastStableHash64UsesAvx2(); }

}  // namespace mooncake::compress_internal

#endif  // MOONCAKE_COMPRESS_INTERNAL_CHECKSUM_H_
