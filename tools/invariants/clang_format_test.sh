#!/usr/bin/env bash
# Every C++ source matches the root .clang-format (Google-based).
set -euo pipefail
root=$(dirname "$(readlink -f WORKSPACE)")
cd "$root"
mapfile -t files < <(find mooncake tools examples -type f \( -name '*.h' -o -name '*.cc' \) \
  -not -name '*.pb.*' 2>/dev/null | sort)
bad=()
for f in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if ((${#bad[@]})); then
  echo "not clang-formatted (run: clang-format -i FILE):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "clang-format: ${#files[@]} files clean"
