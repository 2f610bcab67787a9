// Tensor objects in Mooncake's Python API (put_tensor, get_tensor and their
// _with_tp and batch forms): the dtype names, the TensorMeta a tensor is
// stored with, and the key of a tensor-parallel shard. Written once here for
// the binding (python/store_tensor_binding.cc) and C++ callers alike.
//
// A tensor is stored as its raw row-major bytes (no header inside the value,
// unlike Mooncake, which prefixes a metadata struct); shape and dtype travel
// in the object's TensorMeta, which the master checks at PutStart (shape x
// dtype bytes = size) and returns to readers. So `get(key)` of a tensor
// object returns exactly the tensor's bytes.
//
// Tensor parallelism (Mooncake's layout): put_tensor_with_tp(key, t, tp_size=n,
// split_dim=d) stores torch.chunk(t, n, d)[r] under TpShardKey(key, r) =
// key + "_tp_" + r for every rank r, each with tp_rank = r and tp_size = n in
// its TensorMeta; get_tensor_with_tp(key, tp_rank=r, tp_size=n) reads rank r's
// shard. tp_size <= 1 means the plain key.
//
// Thread-safety: constants and pure functions.
#ifndef MOONCAKE_STORE_COMPAT_TENSOR_META_H_
#define MOONCAKE_STORE_COMPAT_TENSOR_META_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/store/rpc/master.pb.h"

namespace mooncake::compat {

// The most dimensions a stored tensor may have (Mooncake allows 4; TensorMeta
// has no limit, this bounds what a reader allocates from metadata).
inline constexpr size_t kMaxTensorDims = 8;

// torch dtype names (str(torch.float32) without "torch.") and their TensorMeta
// dtype; fp8 names exist only in newer torch builds.
struct DTypeName {
  std::string_view torch_name;
  store::proto::DType dtype;
  uint32_t element_bytes;
};
inline constexpr DTypeName kTensorDTypes[] = {
    {"float32", store::proto::DTYPE_FP32, 4},
    {"bfloat16", store::proto::DTYPE_BF16, 2},
    {"float16", store::proto::DTYPE_FP16, 2},
    {"float8_e4m3fn", store::proto::DTYPE_FP8_E4M3, 1},
    {"float8_e5m2", store::proto::DTYPE_FP8_E5M2, 1},
    {"int8", store::proto::DTYPE_INT8, 1},
    {"uint8", store::proto::DTYPE_UINT8, 1},
};

inline std::optional<DTypeName> DTypeByTorchName(std::string_view name) {
  for (const DTypeName& d : kTensorDTypes) {
    if (d.torch_name == name) return d;
  }
  return std::nullopt;
}

inline std::optional<DTypeName> DTypeByProto(store::proto::DType dtype) {
  for (const DTypeName& d : kTensorDTypes) {
    if (d.dtype == dtype) return d;
  }
  return std::nullopt;
}

// Elements x element_bytes; nullopt when it does not fit 64 bits.
template <typename Dims>
std::optional<uint64_t> TensorBytes(const Dims& shape, uint32_t element_bytes) {
  uint64_t total = element_bytes;
  for (const auto n : shape) {
    if (__builtin_mul_overflow(total, static_cast<uint64_t>(n), &total)) return std::nullopt;
  }
  return total;
}

// The key rank `tp_rank`'s shard of `base_key` is stored under.
inline std::string TpShardKey(std::string_view base_key, int tp_rank) {
  return absl::StrCat(AbslView(base_key), "_tp_", tp_rank);
}

// The TensorMeta of a tensor of `torch_dtype` and `shape` held in `bytes`
// bytes. INVALID_ARGUMENT: an unknown dtype, more than kMaxTensorDims
// dimensions, a shape whose element count x element size is not `bytes`.
inline absl::StatusOr<store::proto::TensorMeta> MakeTensorMeta(std::string_view torch_dtype,
                                                               std::span<const int64_t> shape,
                                                               uint64_t bytes) {
  const std::optional<DTypeName> d = DTypeByTorchName(torch_dtype);
  if (!d.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor dtype ", AbslView(torch_dtype),
        " has no stored form (float32, bfloat16, float16, float8_e4m3fn, float8_e5m2, int8, "
        "uint8)"));
  }
  if (shape.size() > kMaxTensorDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor has ", shape.size(), " dimensions; at most ", kMaxTensorDims));
  }
  store::proto::TensorMeta meta;
  meta.set_dtype(d->dtype);
  for (const int64_t n : shape) {
    if (n < 0) return absl::InvalidArgumentError("tensor shape has a negative dimension");
    meta.add_shape(static_cast<uint64_t>(n));
  }
  if (TensorBytes(meta.shape(), d->element_bytes) != std::optional<uint64_t>(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor of ", bytes, " bytes does not match its shape and dtype"));
  }
  return meta;
}

// Checks `meta` as a reader before allocating from it: a known dtype, at
// most kMaxTensorDims dimensions, shape x element size == `bytes` (the
// object's size). INVALID_ARGUMENT otherwise (also for a compressed value,
// codec != 0: its bytes are not the tensor's).
inline absl::StatusOr<DTypeName> CheckStoredTensor(const store::proto::TensorMeta& meta,
                                                   uint64_t bytes) {
  const std::optional<DTypeName> d = DTypeByProto(meta.dtype());
  if (!d.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("stored tensor has unknown dtype ", static_cast<int>(meta.dtype())));
  }
  if (meta.codec() != 0) {
    return absl::InvalidArgumentError("stored tensor is compressed (codec != 0)");
  }
  if (static_cast<size_t>(meta.shape_size()) > kMaxTensorDims) {
    return absl::InvalidArgumentError("stored tensor has too many dimensions");
  }
  if (TensorBytes(meta.shape(), d->element_bytes) != std::optional<uint64_t>(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("stored tensor's shape and dtype do not match its ", bytes, " bytes"));
  }
  return *d;
}

}  // namespace mooncake::compat

#endif  // MOONCAKE_STORE_COMPAT_TENSOR_META_H_
