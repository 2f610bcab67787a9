#!/usr/bin/env bash
# Runs a Python script of this package from the build tree with Debian's
# interpreter: the package from python/ in the runfiles, the programs beside it.
set -euo pipefail
root="${RUNFILES_DIR:-$0.runfiles}/mooncake"
[[ -d "$root" ]] || root="$(cd "$(dirname "$0")" && pwd)/$(basename "$0").runfiles/mooncake"
cd "$root"
script="$1"
shift
export PYTHONPATH="$root/python"
export MOONCAKE_BIN_DIR="$root/tools"
exec /usr/bin/python3 "$script" "$@"
