#!/bin/bash
# The PD demo's checks on the tiny preset (a few hundred tokens): the model's
# own tests, then pd_demo.py check, which starts prefill, decode and proxy
# processes (and a mooncake_master for the store cases) on loopback and
# compares every case bit for bit with one process doing prefill and decode.
set -u
root="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-mooncake}"
cd "$root"
export PYTHONPATH="$root/python"
/usr/bin/python3 -c 'import torch' 2>/dev/null || {
  echo "FAIL: python3-torch is not installed (bash tools/setup.sh installs it)"
  exit 1
}
/usr/bin/python3 -m pytest -q -p no:cacheprovider examples/pd_disaggregation/model_test.py ||
  { echo "FAIL: model_test"; exit 1; }
/usr/bin/python3 examples/pd_disaggregation/pd_demo.py check \
  --master-bin "$root/tools/mooncake_master" || { echo "FAIL: pd_demo check"; exit 1; }
echo "PASS"
