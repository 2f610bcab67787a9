#!/usr/bin/env bash
# Every library header under mooncake/ compiles on its own (includes what it
# uses). Headers of an optional backend are checked when its SDK is present:
# *cuda* headers need /usr/local/cuda, *rdma*/*verbs* headers need
# infiniband/verbs.h. Generated protobuf headers come in as this test's data
# and are found in its runfiles tree. A header that is only a part of another
# (an implementation split out of a long header) says so with
#   // IWYU pragma: private, include "mooncake/<pkg>/<parent>.h"
# and is checked through its parent instead.
set -uo pipefail
runfiles=$PWD
root=$(dirname "$(readlink -f WORKSPACE)")
cd "$root"
cuda_inc=${CUDA_PATH:-/usr/local/cuda}/include
# The warning flags of MOONCAKE_DEFAULT_COPTS (bazel/copts.bzl).
flags=(-std=c++20 -fsyntax-only -Wall -Wextra -Werror -Wno-missing-field-initializers -I. -I"$runfiles")
[[ -d "$cuda_inc" ]] && flags+=(-isystem "$cuda_inc")
check() {
  local h=$1 err
  if err=$(g++ "${flags[@]}" -x c++ "$h" -o /dev/null 2>&1); then return 0; fi
  printf 'FAIL: %s\n%s\n' "$h" "$(head -20 <<<"$err")"
  return 1
}
headers=()
skipped=0
parts=0
while IFS= read -r h; do
  case "$h" in
    *cuda*) [[ -f "$cuda_inc/cuda_runtime.h" ]] || { skipped=$((skipped + 1)); continue; } ;;
    *rdma* | *verbs*) [[ -f /usr/include/infiniband/verbs.h ]] || { skipped=$((skipped + 1)); continue; } ;;
  esac
  if grep -q 'IWYU pragma: private, include' "$h"; then
    parts=$((parts + 1))
    continue
  fi
  headers+=("$h")
done < <(find mooncake -name '*.h' -not -name '*.pb.h' | sort)

# One compiler per core; each job's output is collected whole, so failures
# do not interleave.
jobs=$(nproc)
fail=0
running=0
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT
for i in "${!headers[@]}"; do
  (check "${headers[$i]}" >"$results/$i" 2>&1 || touch "$results/$i.failed") &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n
    running=$((running - 1))
  fi
done
wait
for i in "${!headers[@]}"; do
  if [[ -e "$results/$i.failed" ]]; then
    cat "$results/$i"
    fail=1
  fi
done
echo "self-contained: ${#headers[@]} headers checked, $parts parts of other headers, $skipped skipped (SDK absent)"
exit $fail
