#!/usr/bin/env bash
# Every C++ source matches the root .clang-format (Google-based).
set -uo pipefail
root=$(dirname "$(readlink -f WORKSPACE)")
cd "$root"
count=$(find mooncake tools examples -type f \( -name '*.h' -o -name '*.cc' \) -not -name '*.pb.*' \
  2>/dev/null | wc -l)
# One clang-format per core, 25 files each; each reports "FILE:LINE:COL: error: code should be
# clang-formatted" for every file that differs.
errors=$(find mooncake tools examples -type f \( -name '*.h' -o -name '*.cc' \) \
  -not -name '*.pb.*' -print0 2>/dev/null |
  xargs -0 -P "$(nproc)" -n 25 clang-format --dry-run --Werror 2>&1 >/dev/null |
  grep -oE '^[^:]+:[0-9]+:[0-9]+: error' | cut -d: -f1 | sort -u)
if [[ -n "$errors" ]]; then
  echo "not clang-formatted (run: clang-format -i FILE):"
  sed 's/^/  /' <<<"$errors"
  exit 1
fi
echo "clang-format: $count files clean"
