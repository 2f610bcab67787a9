// Bridges between std:: vocabulary types and Debian's abseil.
//
// Debian's libabsl-dev (20220623) is built with ABSL_OPTION_USE_STD_* = 0, so
// absl::string_view, absl::optional and absl::variant are abseil's own types,
// not aliases of the std ones. mooncake's APIs use the std types; code that
// passes a std::string_view to absl::StrCat, absl::Status or an absl container
// lookup converts it with AbslView(). (std::string converts to both.)
#ifndef MOONCAKE_BASE_ABSL_COMPAT_H_
#define MOONCAKE_BASE_ABSL_COMPAT_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace mooncake {

inline absl::string_view AbslView(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

inline std::string_view StdView(absl::string_view s) {
  return std::string_view(s.data(), s.size());
}

}  // namespace mooncake

#endif  // MOONCAKE_BASE_ABSL_COMPAT_H_
