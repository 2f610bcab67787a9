#!/usr/bin/env bash
# The demo with a small pool: every object leaves the preempted worker, no
# read fails or returns wrong bytes, and a read is served by the new worker.
set -euo pipefail
demo="${TEST_SRCDIR}/${TEST_WORKSPACE}/examples/preemption/preemption_demo"
out="$("$demo" --objects=60 --value_kib=64 --deadline_ms=10000 2>&1)" || {
  echo "$out"
  exit 1
}
echo "$out"
grep -q "drain done: " <<<"$out"
grep -q "reads: [0-9]* ok, 0 failed, 0 wrong" <<<"$out"
grep -q "worker 1 0, lost 0" <<<"$out"
grep -qx "PASS" <<<"$out"
