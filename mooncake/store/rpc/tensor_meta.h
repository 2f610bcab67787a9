// The byte size a TensorMeta describes: one rule for the master (which checks
// a put's size against it) and the client (which sizes a compressed object's
// decoded value by it).
#ifndef MOONCAKE_STORE_RPC_TENSOR_META_H_
#define MOONCAKE_STORE_RPC_TENSOR_META_H_

#include <cstdint>
#include <optional>

#include "mooncake/store/rpc/master.pb.h"

namespace mooncake::rpc {

// Bytes per element of a dtype; 0 for DTYPE_UNSPECIFIED (and unknown values).
inline uint64_t DTypeBytes(store::proto::DType d) {
  switch (d) {
    case store::proto::DTYPE_FP32:
      return 4;
    case store::proto::DTYPE_BF16:
    case store::proto::DTYPE_FP16:
      return 2;
    case store::proto::DTYPE_FP8_E4M3:
    case store::proto::DTYPE_FP8_E5M2:
    case store::proto::DTYPE_INT8:
    case store::proto::DTYPE_UINT8:
      return 1;
    default:
      return 0;
  }
}

// Element count x element bytes of `t` (the raw tensor, whatever its codec);
// nullopt without a shape or a known dtype, or on a 64-bit overflow.
inline std::optional<uint64_t> TensorBytes(const store::proto::TensorMeta& t) {
  const uint64_t elem = DTypeBytes(t.dtype());
  if (elem == 0 || t.shape_size() == 0) return std::nullopt;
  uint64_t bytes = elem;
  for (const uint64_t d : t.shape()) {
    if (d != 0 && bytes > UINT64_MAX / d) return std::nullopt;
    bytes *= d;
  }
  return bytes;
}

// The size a read of an object returns: its raw tensor when it is stored
// compressed (codec != 0), else the stored size.
inline uint64_t ValueBytes(uint64_t stored_bytes, const store::proto::TensorMeta* t) {
  if (t == nullptr || t->codec() == 0) return stored_bytes;
  return TensorBytes(*t).value_or(stored_bytes);
}

}  // namespace mooncake::rpc

#endif  // MOONCAKE_STORE_RPC_TENSOR_META_H_
