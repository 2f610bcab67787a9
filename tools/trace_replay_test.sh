#!/bin/bash
# trace_replay on a 4-request trace whose hit rates are worked out by hand
# (mooncake/index/trace_replay_test.cc walks the same trace), and on a
# malformed trace, which must fail with the line and column.
set -u
bin=tools/trace_replay
data=tools/testdata
fail() { echo "FAIL: $*"; exit 1; }

out=$("$bin" "$data/small_trace.jsonl" --capacities=1536,0) || fail "exit status $?"
echo "$out"
# 11 blocks requested; unlimited: 5 hit (0.4545); 3 blocks under LRU: 4 hit.
echo "$out" | grep -q "4 requests, 11 blocks requested, 6 distinct" || fail "header"
echo "$out" | grep -Eq "^1536 +3 +0\.3636 " || fail "LRU at 3 blocks should be 4/11"
# Belady at 3 blocks keeps 0,1,2 (block 3 and 4 are never read again): 5/11.
# Conversation: request 2 is a next turn of request 0 (it extends 0's end) but
# block 2, request 0's demoted tail, went first: 4/11.
echo "$out" | grep -Eq "^1536 +3 +0\.3636 +[0-9.]+ +[0-9.]+ +0\.3636 +[0-9.]+ +0\.4545$" ||
  fail "conversation 4/11 and belady 5/11 at 3 blocks"
echo "$out" | grep -Eq "^unlimited +7( +0\.4545){4} +1\.000 +0\.4545$" || fail "unlimited should be 5/11"
out=$("$bin" "$data/small_trace.jsonl" --capacities=1536 --ablations) || fail "ablations"
echo "$out" | grep -Eq "^no_ghost +0\.[0-9]{4}$" || fail "ablation table"
out=$("$bin" "$data/small_trace.jsonl" --index=hash --capacities=0) || fail "hash index"
echo "$out" | grep -Eq "^unlimited +7 +0\.4545 " || fail "hash index unlimited"

err=$("$bin" "$data/malformed_trace.jsonl" 2>&1) && fail "malformed trace accepted"
echo "$err"
echo "$err" | grep -q "trace line 2, column 36" || fail "error must name line and column"
err=$("$bin" /nonexistent.jsonl 2>&1) && fail "missing file accepted"
echo "$err" | grep -q "cannot open" || fail "missing file message"
err=$("$bin" "$data/small_trace.jsonl" --index=btree 2>&1) && fail "bad flag accepted"
echo "PASS"
