#!/bin/bash
# qos_arbiter_bench end to end, briefly: it must build its shaped link, run
# every phase and print the table. The figures are not judged here (a short
# run on a shared machine is noisy); docs/transport.md has the real run.
set -u
bin=tools/qos_arbiter_bench/qos_arbiter_bench
fail() { echo "FAIL: $*"; exit 1; }

skip() { echo "SKIP: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "not root: network namespaces and tc need root"
command -v ip >/dev/null && command -v tc >/dev/null || skip "ip/tc (iproute2) not installed"
probe="mcqos_probe$$"
ip netns add "$probe" 2>/dev/null || skip "cannot create network namespaces here"
ip netns del "$probe"

out=$("$bin" --reps=1 --seconds=1 --warmup_s=0.3 --port=$((20000 + $$ % 20000)) 2>&1) ||
  fail "exit status $?: $out"
echo "$out"
for phase in "unloaded" "bulk alone" "bulk alone+arb" "loaded" "loaded+arb"; do
  echo "$out" | grep -Eq "^$(printf '%s' "$phase" | sed 's/+/\\+/') +[0-9.-]" || fail "no row '$phase'"
done
echo "$out" | grep -Eq "^critical P99 loaded / unloaded: +[0-9.]+x" || fail "no P99 ratio"
echo "$out" | grep -Eq "^bulk with arbiter / bulk alone: +[0-9.]+" || fail "no bulk ratio"
echo "$out" | grep -q "^machine: " || fail "no machine line"

err=$("$bin" --no_such_flag=1 2>&1) && fail "unknown flag accepted"
echo "$err" | grep -q "unknown or malformed flag" || fail "flag message: $err"
ip netns list | grep -q "mcqos_" && fail "namespaces left behind: $(ip netns list)"
echo PASS
