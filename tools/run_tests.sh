#!/usr/bin/env bash
# Runs every mooncake test and prints a summary ending in "N passed, N failed".
#
# The counts come from Bazel's Build Event Protocol file of this invocation
# (per-target status) and the test.xml each test wrote (per-case results), so
# a target that fails to build, times out or crashes is counted as failed,
# never silently dropped. Incompatible targets (RDMA/CUDA without their
# config) are counted as skipped.
#
# Extra arguments go to `bazel test` (e.g. --config=asan); MOONCAKE_TEST_TARGETS
# narrows the target pattern (default //...).
set -uo pipefail
cd "$(dirname "$0")/.."

bep=$(mktemp /tmp/mooncake_bep.XXXXXX.json)
trap 'rm -f "$bep"' EXIT

bazel test ${MOONCAKE_TEST_TARGETS:-//...} --build_tests_only --keep_going --build_event_json_file="$bep" "$@"
bazel_rc=$?

python3 tools/test_summary.py "$bep" "$bazel_rc"
