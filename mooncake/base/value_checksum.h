// ValueChecksum: the store's object checksum, built from 64 KiB chunk digests
// so that a receiver can hash each chunk the moment it lands, while its bytes
// are still in the core's cache, instead of reading the whole value back from
// memory afterwards.
//
//   C = kDigestChunkBytes (64 KiB), n = ceil(size / C) (0 for an empty value)
//   d_k = StableHash64(value[k C, min((k + 1) C, size)))      chunk digests
//   ValueChecksum(value) = StableHash64(le64(d_0) .. le64(d_{n-1}) le64(size))
//
// The format is fixed (docs/client.md, "Checksums"): clients put it, the master
// keeps it, workers and clients verify it.
//
// Digests on landing. A TransferRequest may carry an array of n digest slots
// (transport.h). The caller sets every slot to kNoDigest; a transport that
// moves the bytes with the CPU writes d_k into slot k once chunk k's bytes are
// final in the destination; ValueChecksumWith computes the slots still
// kNoDigest and combines. A chunk whose true digest equals kNoDigest is simply
// computed again: the result is the same either way.
#ifndef MOONCAKE_BASE_VALUE_CHECKSUM_H_
#define MOONCAKE_BASE_VALUE_CHECKSUM_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mooncake/base/fast_hash.h"

namespace mooncake {

inline constexpr uint64_t kDigestChunkBytes = uint64_t{64} << 10;
inline constexpr uint64_t kNoDigest = 0x6e6f2d6469676573ULL;  // "no-diges"

// How many chunk digests a value of `size` bytes has.
constexpr uint64_t DigestChunkCount(uint64_t size) {
  return (size + kDigestChunkBytes - 1) / kDigestChunkBytes;
}

inline uint64_t ChunkDigest(const void* data, size_t len) { return FastStableHash64(data, len); }

namespace value_checksum_internal {

// The combine over n digests. `digest(k)` gives d_k. Up to 63 chunks (~4 MiB)
// the le64 string is built on the stack and hashed in one shot; longer ones
// stream it (same bytes, same result).
template <typename DigestOf>
uint64_t Combine(uint64_t size, DigestOf digest) {
  const uint64_t n = DigestChunkCount(size);
  const auto put_le64 = [](unsigned char* p, uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
  };
  constexpr uint64_t kOnStack = 63;
  if (n <= kOnStack) {
    unsigned char buf[(kOnStack + 1) * 8];
    for (uint64_t k = 0; k < n; ++k) put_le64(buf + 8 * k, digest(k));
    put_le64(buf + 8 * n, size);
    return FastStableHash64(buf, 8 * (n + 1));
  }
  FastStableHasher64 h;
  unsigned char b[8];
  for (uint64_t k = 0; k < n; ++k) {
    put_le64(b, digest(k));
    h.Update(b, sizeof(b));
  }
  put_le64(b, size);
  h.Update(b, sizeof(b));
  return h.Digest();
}

}  // namespace value_checksum_internal

// The checksum from all n digests of a value of `size` bytes.
inline uint64_t CombineChunkDigests(const uint64_t* digests, uint64_t size) {
  return value_checksum_internal::Combine(size, [digests](uint64_t k) { return digests[k]; });
}

// Writes the digest of every chunk of [data, data + len) into digests[0, n):
// for a range that starts on a chunk boundary of its value and ends on one or
// at the value's end.
inline void DigestChunks(const void* data, uint64_t len, uint64_t* digests) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (uint64_t off = 0, k = 0; off < len; off += kDigestChunkBytes, ++k) {
    digests[k] = ChunkDigest(p + off, std::min(kDigestChunkBytes, len - off));
  }
}

// memcpy(dst, src, len) a chunk at a time, digesting each chunk of dst as it
// is copied (CopyAndStableHash64: one pass where the CPU has AVX2 or AVX-512;
// digests: DigestChunkCount(len) slots, or null). Each digest is of the bytes
// dst holds, even if src changes during the copy.
inline void CopyAndDigest(void* dst, const void* src, uint64_t len, uint64_t* digests) {
  if (digests == nullptr) {
    if (len > 0) std::memcpy(dst, src, len);  // an empty value may have null pointers
    return;
  }
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  for (uint64_t off = 0, k = 0; off < len; off += kDigestChunkBytes, ++k) {
    const uint64_t n = std::min(kDigestChunkBytes, len - off);
    digests[k] = CopyAndStableHash64(d + off, s + off, n);
  }
}

// The checksum of `size` bytes at `data`, using every slot of `digests` that
// is not kNoDigest (null: none) and computing the rest.
inline uint64_t ValueChecksumWith(const void* data, uint64_t size, const uint64_t* digests) {
  const auto* p = static_cast<const unsigned char*>(data);
  return value_checksum_internal::Combine(size, [&](uint64_t k) {
    const uint64_t d = digests != nullptr ? digests[k] : kNoDigest;
    if (d != kNoDigest) return d;
    const uint64_t from = k * kDigestChunkBytes;
    return ChunkDigest(p + from, std::min(kDigestChunkBytes, size - from));
  });
}

inline uint64_t ValueChecksum(const void* data, uint64_t size) {
  return ValueChecksumWith(data, size, nullptr);
}

// Checksum formats (store::proto::ChecksumFormat): how a stored checksum was
// computed. kChecksumWholeXxh3 is what writers before ValueChecksum sent (and what a
// writer that sets no format means); readers verify either.
inline constexpr uint32_t kChecksumWholeXxh3 = 0;
inline constexpr uint32_t kChecksumChunked = 1;

inline bool KnownChecksumFormat(uint32_t format) {
  return format == kChecksumWholeXxh3 || format == kChecksumChunked;
}

// Whether `size` bytes at `data` have checksum `want` in `format` (digests:
// slots taken on landing, or null; used by the chunked format only). An
// unknown format never matches: check KnownChecksumFormat first.
inline bool ChecksumMatches(uint32_t format, const void* data, uint64_t size,
                            const uint64_t* digests, uint64_t want) {
  switch (format) {
    case kChecksumChunked:
      return ValueChecksumWith(data, size, digests) == want;
    case kChecksumWholeXxh3:
      return FastStableHash64(data, size) == want;
    default:
      return false;
  }
}

}  // namespace mooncake

#endif  // MOONCAKE_BASE_VALUE_CHECKSUM_H_
