// Blocking forms of the Tier calls: start the operation and wait for its
// completion. For tests, tools and callers that have nothing else to do.
//
// REQUIRES: not called from a completion callback of the same tier (the
// callback's thread may be the one that completes this call).
#ifndef MOONCAKE_TIER_BLOCKING_H_
#define MOONCAKE_TIER_BLOCKING_H_

#include <cstddef>
#include <future>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mooncake/tier/tier.h"

namespace mooncake::tier {

template <Tier T>
absl::Status WriteBlocking(T& tier, std::string_view key, std::span<const std::byte> bytes,
                           const ObjectMeta& meta = {}) {
  std::promise<absl::Status> p;
  std::future<absl::Status> f = p.get_future();
  tier.Write(key, bytes, meta, [&p](absl::Status s) { p.set_value(std::move(s)); });
  return f.get();
}

template <Tier T>
absl::StatusOr<ReadResult> ReadBlocking(T& tier, std::string_view key, std::span<std::byte> into) {
  std::promise<absl::StatusOr<ReadResult>> p;
  auto f = p.get_future();
  tier.Read(key, into, [&p](absl::StatusOr<ReadResult> r) { p.set_value(std::move(r)); });
  return f.get();
}

template <Tier T>
absl::Status RemoveBlocking(T& tier, std::string_view key) {
  std::promise<absl::Status> p;
  std::future<absl::Status> f = p.get_future();
  tier.Remove(key, [&p](absl::Status s) { p.set_value(std::move(s)); });
  return f.get();
}

}  // namespace mooncake::tier

#endif  // MOONCAKE_TIER_BLOCKING_H_
