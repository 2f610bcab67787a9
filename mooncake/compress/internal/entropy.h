// Order-0 entropy: the bound a static per-byte entropy coder cannot beat.
#ifndef MOONCAKE_COMPRESS_INTERNAL_ENTROPY_H_
#define MOONCAKE_COMPRESS_INTERNAL_ENTROPY_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "mooncake/compress/codec.h"

namespace mooncake::compress_internal {

// Bits needed to code `total` symbols with the given 256-symbol histogram at its order-0
// entropy: sum over symbols of -count * log2(count / total).
inline double EntropyBits(const uint64_t (&counts)[256], uint64_t total) {
  if (total == 0) return 0;
  double bits = 0;
  const double inv = 1.0 / static_cast<double>(total);
  for (uint64_t c : counts) {
    if (c != 0) bits -= static_cast<double>(c) * std::log2(static_cast<double>(c) * inv);
  }
  return bits;
}

// The order-0 bound of `data` read as `dtype`, in bytes: each byte plane (byte j of every
// element) coded at its own order-0 entropy, a tail shorter than one element stored raw.
// For kBytes this is the plain byte entropy. Samples every `stride`-th element (1 = all).
inline double PlaneEntropyBoundBytes(std::span<const std::byte> data, compress::DType dtype,
                                     size_t stride = 1) {
  const size_t elem = compress::ElementSize(dtype);
  const size_t n = data.size() / elem;
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  double bytes = static_cast<double>(data.size() - n * elem);
  for (size_t plane = 0; plane < elem; ++plane) {
    uint64_t counts[256] = {};
    uint64_t total = 0;
    for (size_t i = 0; i < n; i += stride, ++total) ++counts[p[i * elem + plane]];
    if (total != 0) bytes += EntropyBits(counts, total) / 8 * (static_cast<double>(n) / total);
  }
  return bytes;
}

}  // namespace mooncake::compress_internal

#endif  // MOONCAKE_COMPRESS_INTERNAL_ENTROPY_H_
