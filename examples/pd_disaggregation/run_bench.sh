#!/bin/bash
# bazel run -c opt //examples/pd_disaggregation:pd_demo_bench [-- --lengths=1024,8192 --reps=3]
# The TTFT table on the demo preset (see pd_demo.py bench).
set -eu
root="${RUNFILES_DIR:-$0.runfiles}/mooncake"
[[ -d "$root" ]] || root="$(cd "$(dirname "$0")" && pwd)/$(basename "$0").runfiles/mooncake"
root=$(cd "$root" && pwd)
cd "$root"
export PYTHONPATH="$root/python"
exec /usr/bin/python3 examples/pd_disaggregation/pd_demo.py bench \
  --master-bin "$root/tools/mooncake_master" "$@"
