#!/bin/bash
# master_tier_replay on a small trace (mooncake/tier/testdata/replay_trace.jsonl:
# 240 requests) with 8 blocks of DRAM over 32 blocks of SSD, so the master
# offloads, loads and drops copies for room under both policies: every row is
# printed, no put fails, no load is given up, and the tier adds hits over the
# same DRAM alone. Then bad flags exit 2.
set -u
bin=mooncake/store/master/master_tier_replay
trace=mooncake/tier/testdata/replay_trace.jsonl
fail() { echo "FAIL: $*"; exit 1; }

out=$("$bin" --trace="$trace" --dram_tokens=4096 --ssd_tokens=16384) || { echo "$out"; fail "exit status"; }
echo "$out"
echo "$out" | grep -q "^trace .*: 240 requests" || fail "header"
[ "$(echo "$out" | grep -c "failed puts 0 load waits [0-9]* (gave up 0)$")" = 5 ] ||
  fail "five rows, none with a failed put or a load given up"
total() { echo "$out" | grep "^$1" | sed -n 's/.* total \([0-9.]*\) .*/\1/p'; }
for p in store s3fifo; do
  over=$(echo "$out" | grep "^$p: DRAM 4096 over SSD 16384 ") || fail "no $p row over the SSD"
  echo "$over" | grep -Eq "SSD hits 0\.[0-9]*[1-9]" || fail "$p: no SSD hits"
  echo "$over" | grep -Eq "loads [1-9][0-9]* SSD evictions [1-9]" || fail "$p: no loads or SSD evictions"
  echo "$over" | grep -Eq "load waits [1-9]" || fail "$p: no request waited for a load"
  awk -v a="$(total "$p: DRAM 4096 over")" -v b="$(total "$p: DRAM 4096 only")" \
    'BEGIN { exit !(a > b) }' || fail "$p: the SSD tier added no hits"
done
echo "$out" | grep -q "^store: DRAM 20480 only " || fail "no DRAM-only baseline of the same total size"

"$bin" --trace="$trace" --bogus=1 >/dev/null 2>&1
[ $? = 2 ] || fail "an unknown flag must exit 2"
"$bin" --trace="$trace" --ssd_tokens=100 >/dev/null 2>&1
[ $? = 2 ] || fail "--ssd_tokens below a block must exit 2"
"$bin" --trace=/nonexistent.jsonl >/dev/null 2>&1
[ $? = 1 ] || fail "a missing trace must exit 1"
echo PASS
