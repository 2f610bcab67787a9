#!/usr/bin/env bash
# Runs the Python package's pytest suite from the build tree: the package from
# python/ in the runfiles, the programs beside it. Debian's interpreter is the
# one that sees python3-pytest and python3-numpy.
set -euo pipefail
root="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-mooncake}"
cd "$root"
export PYTHONPATH="$root/python"
export MOONCAKE_BIN_DIR="$root/tools"
export PYTHONDONTWRITEBYTECODE=1
out=()
[[ -n "${XML_OUTPUT_FILE:-}" ]] && out=(--junitxml="$XML_OUTPUT_FILE")
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider "${out[@]}" "$@"
