#!/bin/bash
# Runs the prefix_lookup example (it verifies the fetched bytes itself) and
# checks the counts, worked out by hand: A = 100 shared + 60 own tokens = 10
# blocks of 16, 8 published; B = 100 shared + 50 own = 9 blocks, of which
# blocks 0-5 (tokens 0-95) lie inside the shared prefix, block 6 does not.
set -u
fail() { echo "FAIL: $*"; exit 1; }
out=$(examples/prefix_lookup 2>&1) || fail "exit status $?: $out"
echo "$out"
echo "$out" | grep -q "^prompt A: 8 of 10 blocks cached$" || fail "A should match its 8 published blocks"
echo "$out" | grep -q "^prompt B: 150 tokens, 9 full blocks, 6 cached (96 tokens); prefill computes 54$" ||
  fail "B should match 6 blocks"
echo "$out" | grep -q "^fetched and verified 6 blocks (96 KiB) into the KV buffer with 2 master RPCs" ||
  fail "the load should take the replicas from one prefix query (+ one lease release)"
echo "$out" | grep -q "^OK$" || fail "no OK line"
echo "PASS"
