// Assertions with cost levels.
//
// Programmer errors (a broken invariant, a precondition the caller violated)
// are assertions, never Status. Three levels, chosen by one constexpr value:
//
//   MC_ASSERT(cond, msg)   level 0 "always": cheap checks that guard memory
//                          safety; on in every build, including -c opt.
//   MC_DASSERT(cond, msg)  level 1 "debug": on unless NDEBUG (fastbuild, dbg,
//                          sanitizer builds); O(1) checks on hot paths.
//   MC_EASSERT(cond, msg)  level 2 "expensive": O(n) invariant walks; on only
//                          when MOONCAKE_ASSERT_LEVEL >= 2 is defined.
//
// A failed assertion prints the condition, the message, file and line to
// stderr and aborts. `msg` is a string literal (or anything convertible to
// const char*); it is evaluated only on failure.
//
// The level defaults to 1 without NDEBUG and 0 with it; define
// MOONCAKE_ASSERT_LEVEL (0, 1 or 2) to override. Disabled assertions still
// type-check their condition (it sits in a discarded `if constexpr` branch) but
// never evaluate it.
#ifndef MOONCAKE_BASE_ASSERT_H_
#define MOONCAKE_BASE_ASSERT_H_

#include <cstdio>
#include <cstdlib>

#ifndef MOONCAKE_ASSERT_LEVEL
#ifdef NDEBUG
#define MOONCAKE_ASSERT_LEVEL 0
#else
#define MOONCAKE_ASSERT_LEVEL 1
#endif
#endif

namespace mooncake {

enum class AssertLevel : int { kAlways = 0, kDebug = 1, kExpensive = 2 };

inline constexpr int kAssertLevel = MOONCAKE_ASSERT_LEVEL;

inline constexpr bool AssertEnabled(AssertLevel level) {
  return static_cast<int>(level) <= kAssertLevel;
}

namespace base_internal {

[[noreturn]] inline void AssertFail(const char* condition, const char* message, const char* file,
                                    int line) {
  std::fprintf(stderr, "%s:%d: mooncake assertion failed: %s (%s)\n", file, line, condition,
               message);
  std::fflush(stderr);
  std::abort();
}

}  // namespace base_internal
}  // namespace mooncake

#define MOONCAKE_ASSERT_IMPL_(level, cond, msg)                                \
  do {                                                                         \
    if constexpr (::mooncake::AssertEnabled(level)) {                          \
      if (!(cond)) [[unlikely]] {                                              \
        ::mooncake::base_internal::AssertFail(#cond, msg, __FILE__, __LINE__); \
      }                                                                        \
    }                                                                          \
  } while (false)

#define MC_ASSERT(cond, msg) MOONCAKE_ASSERT_IMPL_(::mooncake::AssertLevel::kAlways, cond, msg)
#define MC_DASSERT(cond, msg) MOONCAKE_ASSERT_IMPL_(::mooncake::AssertLevel::kDebug, cond, msg)
#define MC_EASSERT(cond, msg) MOONCAKE_ASSERT_IMPL_(::mooncake::AssertLevel::kExpensive, cond, msg)

#endif  // MOONCAKE_BASE_ASSERT_H_
