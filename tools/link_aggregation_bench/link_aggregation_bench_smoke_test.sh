#!/bin/bash
# link_aggregation_bench end to end, briefly: it must build its two shaped
# links, print both rates, the ratio and the retry overhead, and leave no
# namespace behind. The figures are not judged here (one short rep on a
# shared machine is noisy); docs/transport.md has the real run.
set -u
bin=tools/link_aggregation_bench/link_aggregation_bench
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }

if [ "$(id -u)" != 0 ]; then
  out=$("$bin" 2>&1) || fail "not root must exit 0: $out"
  echo "$out" | grep -q "^SKIP: " || fail "not root must say SKIP: $out"
  skip "not root: network namespaces and tc need root"
fi
command -v ip >/dev/null && command -v tc >/dev/null || skip "ip/tc (iproute2) not installed"
probe="mcla_probe$$"
ip netns add "$probe" 2>/dev/null || skip "cannot create network namespaces here"
ip netns del "$probe"

out=$("$bin" --reps=1 --batch_mib=16 --rate_mbit=500 --port=$((20000 + $$ % 20000)) 2>&1) ||
  fail "exit status $?: $out"
echo "$out"
echo "$out" | grep -Eq "^one link +[0-9.]+ " || fail "no one-link row"
echo "$out" | grep -Eq "^2 links \(aggregated\) +[0-9.]+ " || fail "no aggregated row"
echo "$out" | grep -Eq "^aggregate / one link: +[0-9.]+x" || fail "no ratio"
echo "$out" | grep -Eq "^retry overhead: +-?[0-9.]+ ms" || fail "no retry overhead"
echo "$out" | grep -q "^machine: " || fail "no machine line"
err=$("$bin" --no_such_flag=1 2>&1) && fail "unknown flag accepted"
ip netns list | grep -q "mcqos_" && fail "namespaces left behind: $(ip netns list)"
echo PASS
