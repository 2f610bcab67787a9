#!/bin/bash
# bazel run -c opt //examples/epd:epd_bench [-- --reps=7]
# TTFT of a repeated image with the hidden-state cache off and on (epd_demo.py bench).
set -eu
root="${RUNFILES_DIR:-$0.runfiles}/mooncake"
[[ -d "$root" ]] || root="$(cd "$(dirname "$0")" && pwd)/$(basename "$0").runfiles/mooncake"
root=$(cd "$root" && pwd)
cd "$root"
export PYTHONPATH="$root/python"
exec /usr/bin/python3 examples/epd/epd_demo.py bench \
  --master-bin "$root/tools/mooncake_master" "$@"
