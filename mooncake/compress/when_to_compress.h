// The when-to-compress rule: compress a transfer only when it lowers the transfer time.
//
// A transfer of n raw bytes over a link (network path or disk) of L bytes/s takes n / L
// uncompressed. Compressed with ratio r, at c raw bytes/s to compress and d raw bytes/s to
// decompress (each with all the threads the caller gives the codec), the stages are:
//   compress n/c  ->  send n/(r*L)  ->  decompress n/d.
// Pipelined (chunk k+1 compresses while chunk k is on the wire, which the chunked frame
// allows) the time is set by the slowest stage plus one chunk through the others:
//   T = (n - chunk)/min(c, r*L, d) + chunk*(1/c + 1/(r*L) + 1/d)      (n > chunk)
// Sequential (compress everything, then send, then decompress):
//   T = n/c + n/(r*L) + n/d.
// Compression is chosen when T < (1 - min_saving) * n/L; min_saving keeps a codec from
// being picked for a gain smaller than measurement noise. With pipelining and large n
// this reduces to: compress iff c, d and r*L all exceed L * (1 + margin), i.e. the codec
// must outrun the link on both ends. For an SSD tier, L is the device bandwidth of the
// direction that matters (write for puts, read for gets) and c/d the CPU cost on the
// storing host.
//
// Thread-safety: pure functions.
#ifndef MOONCAKE_COMPRESS_WHEN_TO_COMPRESS_H_
#define MOONCAKE_COMPRESS_WHEN_TO_COMPRESS_H_

#include <algorithm>
#include <cstdint>

#include "mooncake/base/assert.h"

namespace mooncake::compress {

// A codec's measured behaviour on some data. Speeds count raw bytes per second.
struct CodecProfile {
  double ratio = 1;  // raw bytes / compressed bytes
  double compress_bytes_per_s = 0;
  double decompress_bytes_per_s = 0;
};

enum class Overlap : uint8_t { kPipelined, kSequential };

struct TransferDecision {
  bool compress = false;
  double raw_seconds = 0;
  double compressed_seconds = 0;
};

// REQUIRES: link_bytes_per_s > 0; codec speeds and ratio > 0; 0 <= min_saving < 1.
inline TransferDecision DecideCompression(uint64_t raw_bytes, double link_bytes_per_s,
                                          const CodecProfile& codec,
                                          Overlap overlap = Overlap::kPipelined,
                                          uint64_t chunk_bytes = 256 << 10,
                                          double min_saving = 0.05) {
  MC_ASSERT(link_bytes_per_s > 0, "link bandwidth must be positive");
  MC_ASSERT(codec.ratio > 0 && codec.compress_bytes_per_s > 0 && codec.decompress_bytes_per_s > 0,
            "codec profile must be positive");
  MC_ASSERT(min_saving >= 0 && min_saving < 1, "min_saving in [0, 1)");
  const double n = static_cast<double>(raw_bytes);
  const double c = codec.compress_bytes_per_s;
  const double wire = codec.ratio * link_bytes_per_s;  // raw bytes/s the link carries
  const double d = codec.decompress_bytes_per_s;
  TransferDecision out;
  out.raw_seconds = n / link_bytes_per_s;
  const double per_byte = 1 / c + 1 / wire + 1 / d;
  if (overlap == Overlap::kSequential || n <= static_cast<double>(chunk_bytes)) {
    out.compressed_seconds = n * per_byte;
  } else {
    const double chunk = static_cast<double>(chunk_bytes);
    out.compressed_seconds = (n - chunk) / std::min({c, wire, d}) + chunk * per_byte;
  }
  out.compress = raw_bytes > 0 && out.compressed_seconds < (1 - min_saving) * out.raw_seconds;
  return out;
}

}  // namespace mooncake::compress

#endif  // MOONCAKE_COMPRESS_WHEN_TO_COMPRESS_H_
