#!/bin/bash
# tier_trace_replay's real-SSD runs on a small trace (mooncake/tier/testdata/
# replay_trace.jsonl: 20 conversations that grow turn by turn over a shared
# two-block prompt) with 8 blocks of DRAM over 32 blocks of SSD, so blocks are
# demoted, read back from the SSD file, promoted and evicted from it. Every
# hit is compared byte for byte with what was put; the runs must see no wrong
# block and no failed operation, and must leave no file behind. Then the
# error paths: a directory that does not exist, and bad flags.
set -u
bin=mooncake/tier/tier_trace_replay
trace=mooncake/tier/testdata/replay_trace.jsonl
dir="${TEST_TMPDIR:-$(mktemp -d)}/replay"
mkdir -p "$dir"
fail() { echo "FAIL: $*"; exit 1; }

out=$("$bin" --trace="$trace" --ssd_dir="$dir" --ssd_block_bytes=16384 --dram_tokens=4096 \
  --ssd_tokens=16384 --ssd_compression=never,always) || { echo "$out"; fail "exit status"; }
echo "$out"
echo "$out" | grep -q "^trace .*: 240 requests" || fail "header"
[ "$(echo "$out" | grep -c '^  checks: 0 wrong blocks, 0 failed gets, 0 failed puts, 0 demote failures, 0 SSD I/O errors, 0 corrupt records$')" = 2 ] ||
  fail "both runs must be clean"
for c in never always; do
  row=$(echo "$out" | grep "^real SSD, compression $c ") || fail "no $c row"
  # Blocks were served by the SSD, promoted back, and evicted from the SSD.
  echo "$row" | grep -Eq "SSD hits 0\.[0-9]*[1-9]" || fail "$c: no SSD hits"
  echo "$row" | grep -Eq "promotions [1-9]" || fail "$c: no promotions"
  echo "$row" | grep -Eq "slow evictions [1-9]" || fail "$c: no SSD evictions"
done
echo "$out" | grep -Eq "^  SSD: [1-9][0-9]* writes .*, [1-9][0-9]* compressed\)" ||
  fail "compression always stored no compressed record"
echo "$out" | grep -Eq "by SSD: P50 [0-9.]+ us P99 [0-9.]+ us \([1-9]" || fail "no SSD latencies"
[ -z "$(ls -A "$dir")" ] || fail "the tier file was left behind: $(ls -A "$dir")"

err=$("$bin" --trace="$trace" --ssd_dir="$dir/missing" --ssd_block_bytes=16384 \
  --dram_tokens=4096 --ssd_tokens=16384 --ssd_compression=never 2>&1)
[ $? = 1 ] || fail "a missing directory must exit 1"
echo "$err" | grep -q "SsdTier::Open($dir/missing/tier_trace_replay.ssd)" || fail "open error: $err"
"$bin" --trace="$trace" --ssd_compression=zip >/dev/null 2>&1
[ $? = 2 ] || fail "a bad --ssd_compression must exit 2"
"$bin" --trace="$trace" --ssd_tokens=100 >/dev/null 2>&1
[ $? = 2 ] || fail "--ssd_tokens below one block must exit 2"
"$bin" --trace="$trace" --ssd_dir="$dir" --bogus=1 >/dev/null 2>&1
[ $? = 2 ] || fail "an unknown flag must exit 2"
echo "PASS"
