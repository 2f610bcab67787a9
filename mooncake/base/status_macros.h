// Status propagation macros. Debian's abseil (20220623) ships Status and
// StatusOr but not these.
//
//   RETURN_IF_ERROR(expr);
//     Evaluates `expr` (an absl::Status, or anything with .ok() and a
//     conversion to absl::Status such as StatusOr<T>) once; if it is not OK,
//     returns that Status from the enclosing function (which must return
//     absl::Status or absl::StatusOr<U>).
//
//   ASSIGN_OR_RETURN(lhs, expr);
//     Evaluates `expr` (an absl::StatusOr<T>) once; on error returns its
//     Status, otherwise moves the value into `lhs`. `lhs` may declare a new
//     variable (`ASSIGN_OR_RETURN(auto fd, OpenFile(path));`) or name an
//     existing one. The preprocessor splits arguments at top-level commas, so
//     a type such as `std::pair<int, int>` needs an alias or `auto`. At most
//     one use per line (the temporary's name is made unique with __LINE__).
//
// Both macros are statements; use them only as full statements.
#ifndef MOONCAKE_BASE_STATUS_MACROS_H_
#define MOONCAKE_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mooncake::base_internal {

inline const absl::Status& AsStatus(const absl::Status& status) { return status; }

template <typename T>
const absl::Status& AsStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

}  // namespace mooncake::base_internal

#define MOONCAKE_STATUS_CONCAT_INNER_(a, b) a##b
#define MOONCAKE_STATUS_CONCAT_(a, b) MOONCAKE_STATUS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                                       \
  do {                                                              \
    if (auto&& mooncake_status_ = (expr); !mooncake_status_.ok()) { \
      return ::mooncake::base_internal::AsStatus(mooncake_status_); \
    }                                                               \
  } while (false)

#define MOONCAKE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return std::move(tmp).status();        \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  MOONCAKE_ASSIGN_OR_RETURN_IMPL_(MOONCAKE_STATUS_CONCAT_(mooncake_statusor_, __LINE__), lhs, expr)

#endif  // MOONCAKE_BASE_STATUS_MACROS_H_
