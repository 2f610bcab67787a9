// Hash maps and sets keyed by std::string with std::string_view lookups.
// (Debian's abseil has its own absl::string_view, so its default string
// hasher does not accept std::string_view; these functors do.)
#ifndef MOONCAKE_TIER_INTERNAL_STRING_MAP_H_
#define MOONCAKE_TIER_INTERNAL_STRING_MAP_H_

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

namespace mooncake::tier_internal {

struct StringKeyHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct StringKeyEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};

template <typename V>
using StringMap = absl::flat_hash_map<std::string, V, StringKeyHash, StringKeyEq>;
using StringSet = absl::flat_hash_set<std::string, StringKeyHash, StringKeyEq>;

}  // namespace mooncake::tier_internal

#endif  // MOONCAKE_TIER_INTERNAL_STRING_MAP_H_
