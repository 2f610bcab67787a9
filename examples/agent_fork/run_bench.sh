#!/bin/bash
# bazel run -c opt //examples/agent_fork:agent_fork_bench [-- --decode=64]
# The full-size fork (agent_fork.py bench): a 16K-token context, 8 branches,
# 256 decoded tokens each; clone latency, pool bytes against 8 copies, tokens
# identical to an independent run, leak check.
set -eu
root="${RUNFILES_DIR:-$0.runfiles}/mooncake"
[[ -d "$root" ]] || root="$(cd "$(dirname "$0")" && pwd)/$(basename "$0").runfiles/mooncake"
root=$(cd "$root" && pwd)
cd "$root"
export PYTHONPATH="$root/python"
exec /usr/bin/python3 examples/agent_fork/agent_fork.py bench \
  --master-bin "$root/tools/mooncake_master" "$@"
