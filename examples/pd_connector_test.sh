#!/bin/bash
# Runs the C++ PD connector example; it checks every moved element itself.
set -u
out=$("${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-mooncake}/examples/pd_connector" 2>&1)
rc=$?
echo "$out"
[[ $rc -eq 0 ]] || { echo "FAIL: exit status $rc"; exit 1; }
echo "$out" | grep -q "^tcp: .* wrong elements 0, decode blocks reusable now, prefill blocks released 63$" ||
  { echo "FAIL: tcp line"; exit 1; }
echo "$out" | grep -q "^shm: .* wrong elements 0, decode blocks reusable now, prefill blocks released 63$" ||
  { echo "FAIL: shm line"; exit 1; }
echo "PASS"
