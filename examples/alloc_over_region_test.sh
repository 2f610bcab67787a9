#!/bin/bash
# Runs the alloc_over_region example; it checks its own blocks' bytes and
# exits non-zero on any error. Here: the figures it prints make sense.
set -u
fail() { echo "FAIL: $*"; exit 1; }
out=$(examples/alloc_over_region) || fail "exit status $?: $out"
echo "$out"
echo "$out" | grep -q "^OK$" || fail "no OK line"
echo "$out" | grep -Eq "^verified [0-9]+ live blocks" || fail "no verification line"
# 64 MiB of 64 KiB blocks with a few odd sizes: the region fills almost whole.
util=$(echo "$out" | sed -n 's/^utilization at first refusal: \([0-9.]*\).*/\1/p')
[[ -n "$util" ]] || fail "no utilization line"
awk -v u="$util" 'BEGIN { exit !(u >= 0.95 && u <= 1.0) }' || fail "utilization $util < 0.95"
echo "$out" | grep -Eq "^all freed: +used +0\.00 MiB.* live +0 " || fail "not empty at the end"
echo "PASS"
