// KvDriver: one client connection of a key-value system under benchmark.
//
// mooncake_bench drives memcached, Redis and the mooncake store through the
// same small interface, so every system runs the identical workload loop
// (harness.h). A driver is one connection (one memcached_st, one
// redisContext, one mooncake Client); the harness gives each client thread
// its own driver.
//
// Semantics:
//   Put(key, value)        stores a copy of `value` under `key`. `key` is new
//                          or was removed: the store's objects are immutable,
//                          so the harness never overwrites.
//   Get(key)               the value's bytes, as the system's own client hands
//                          them to a caller (no extra copy added by the
//                          driver). The view stays valid until the next call
//                          on this driver. NOT_FOUND for a miss.
//   BatchGet(keys, out)    one batched request (memcached mget, Redis MGET,
//                          mooncake BatchGetInto); out[i] is key i's view or
//                          its error. Views stay valid until the next call.
//   BatchPut(keys, values, out)
//                          stores values[i] under keys[i] in one batched
//                          request (memcached: pipelined sets, Redis MSET,
//                          mooncake BatchPut); out[i] is key i's status.
//   Remove(key)            OK or NOT_FOUND.
//   system()               the name printed in the tables ("memcached", ...).
//
// Errors: absl::Status with canonical codes; a connection failure is
// UNAVAILABLE, a reply the driver cannot understand is INTERNAL.
//
// Thread-safety: none. One driver per thread; drivers of the same system
// share nothing and may run concurrently.
#ifndef MOONCAKE_TOOLS_BENCH_KV_DRIVER_H_
#define MOONCAKE_TOOLS_BENCH_KV_DRIVER_H_

#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mooncake::bench {

// Largest batch a BatchGet takes (bounds the harness's per-thread arrays).
inline constexpr size_t kMaxBatchKeys = 256;

template <typename D>
concept KvDriver = requires(D& d, std::string_view key, std::string_view value,
                            std::span<const std::string_view> keys,
                            std::vector<absl::StatusOr<std::string_view>>& out,
                            std::vector<absl::Status>& put_out) {
  { d.system() } -> std::convertible_to<std::string_view>;  // constant per driver
  { d.Put(key, value) } -> std::same_as<absl::Status>;      // one round trip
  { d.Get(key) } -> std::same_as<absl::StatusOr<std::string_view>>;
  // keys.size() <= kMaxBatchKeys; out is resized to keys.size().
  { d.BatchGet(keys, out) } -> std::same_as<void>;
  // keys.size() == values.size() <= kMaxBatchKeys; put_out is resized to keys.size().
  { d.BatchPut(keys, keys, put_out) } -> std::same_as<void>;
  { d.Remove(key) } -> std::same_as<absl::Status>;
};

}  // namespace mooncake::bench

#endif  // MOONCAKE_TOOLS_BENCH_KV_DRIVER_H_
