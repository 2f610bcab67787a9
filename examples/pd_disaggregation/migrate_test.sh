#!/bin/bash
# Live migration of a decode request (migrate.py check) on the tiny preset:
# a prefill and two decode instances on loopback; the request moves from A to
# B mid-generation, and its tokens and every logits vector must equal those of
# one process doing prefill and decode itself. Also the failure cases: B
# unreachable, B killed during the pre-copy, B killed after A paused (A keeps
# or resumes decoding, bit-identically), with no block left in use.
set -u
root="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-mooncake}"
cd "$root"
export PYTHONPATH="$root/python"
/usr/bin/python3 -c 'import torch' 2>/dev/null || {
  echo "FAIL: python3-torch is not installed (bash tools/setup.sh installs it)"
  exit 1
}
/usr/bin/python3 examples/pd_disaggregation/migrate.py check ||
  { echo "FAIL: migrate check"; exit 1; }
echo "PASS"
