#!/bin/bash
# Runs the custom_store example (it verifies every block it reads back,
# decompressing the offload ones, and exits non-zero on any error) and checks
# what it reports: DRR weights 3:1 give interactive about 3/4 of the put bytes
# while both classes wait; the codec shrinks bf16 blocks; S3-FIFO keeps the hot
# blocks through a scan.
set -u
fail() { echo "FAIL: $*"; exit 1; }
out=$(examples/custom_store 2>&1) || fail "exit status $?: $out"
echo "$out"
echo "$out" | grep -q "^OK$" || fail "no OK line"
echo "$out" | grep -q "^verified 48 blocks" || fail "not every block verified"
share=$(echo "$out" | sed -n 's/^interactive share of put bytes while both queued: \([0-9.]*\).*/\1/p')
awk -v s="$share" 'BEGIN { exit !(s >= 0.65 && s <= 0.85) }' || fail "DRR share $share, want ~0.75"
ratio=$(echo "$out" | sed -n 's/.*(codec ratio \([0-9.]*\) on offload)$/\1/p')
awk -v r="$ratio" 'BEGIN { exit !(r > 1.1) }' || fail "codec ratio $ratio"
echo "$out" | grep -Eq "KvAllocator\+S3-FIFO 32/32$" || fail "S3-FIFO should keep every hot block"
echo "PASS"
