#!/usr/bin/env bash
# Every library header under mooncake/ compiles on its own (includes what it
# uses). Headers of an optional backend are checked when its SDK is present:
# *cuda* headers need /usr/local/cuda, *rdma*/*verbs* headers need
# infiniband/verbs.h. Generated protobuf headers are found under bazel-bin.
set -uo pipefail
root=$(dirname "$(readlink -f WORKSPACE)")
cd "$root"
cuda_inc=${CUDA_PATH:-/usr/local/cuda}/include
flags=(-std=c++20 -fsyntax-only -Wall -Wextra -Werror -I. -Ibazel-bin)
[[ -d "$cuda_inc" ]] && flags+=(-isystem "$cuda_inc")
check() {
  local h=$1
  if g++ "${flags[@]}" -x c++ "$h" -o /dev/null 2>/tmp/hdr_err_$$_"${h//\//_}"; then
    rm -f /tmp/hdr_err_$$_"${h//\//_}"
    return 0
  fi
  echo "FAIL: $h"
  head -20 /tmp/hdr_err_$$_"${h//\//_}"
  rm -f /tmp/hdr_err_$$_"${h//\//_}"
  return 1
}
headers=()
skipped=0
while IFS= read -r h; do
  case "$h" in
    *cuda*) [[ -f "$cuda_inc/cuda_runtime.h" ]] || { skipped=$((skipped + 1)); continue; } ;;
    *rdma* | *verbs*) [[ -f /usr/include/infiniband/verbs.h ]] || { skipped=$((skipped + 1)); continue; } ;;
  esac
  headers+=("$h")
done < <(find mooncake -name '*.h' -not -name '*.pb.h' | sort)
fail=0
for h in "${headers[@]}"; do
  check "$h" || fail=1
done
echo "self-contained: ${#headers[@]} headers checked, $skipped skipped (SDK absent)"
exit $fail
