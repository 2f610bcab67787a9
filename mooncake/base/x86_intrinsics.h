// <immintrin.h>, included the one way the project does: GCC 12 warns falsely
// inside its own AVX-512 intrinsics once they are inlined
// (-Wmaybe-uninitialized / -Wuninitialized on _mm512_undefined_*, GCC bug
// 105593), and a diagnostic pragma only covers lines lexed inside it, so every
// include of the intrinsics goes through here. No-op off x86-64.
#ifndef MOONCAKE_BASE_X86_INTRINSICS_H_
#define MOONCAKE_BASE_X86_INTRINSICS_H_

#if defined(__x86_64__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#endif  // MOONCAKE_BASE_X86_INTRINSICS_H_
