#!/bin/bash
# bazel run -c opt //examples/pd_disaggregation:migrate_bench [-- --reps=3 --lengths=2048]
# The live-migration table on the demo preset (see migrate.py bench).
set -eu
root="${RUNFILES_DIR:-$0.runfiles}/mooncake"
[[ -d "$root" ]] || root="$(cd "$(dirname "$0")" && pwd)/$(basename "$0").runfiles/mooncake"
root=$(cd "$root" && pwd)
cd "$root"
export PYTHONPATH="$root/python"
exec /usr/bin/python3 examples/pd_disaggregation/migrate.py bench "$@"
