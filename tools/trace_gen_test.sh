#!/bin/bash
# trace_gen writes the same bytes for the same flags, trace_replay reads them,
# and policy_report prints one summary row per trace.
set -u
fail() { echo "FAIL: $*"; exit 1; }
dir=${TEST_TMPDIR:-/tmp}
tools/trace_gen --preset=mixed --clients=60 --seed=4 --out="$dir/a.jsonl" || fail "trace_gen"
tools/trace_gen --preset=mixed --clients=60 --seed=4 >"$dir/b.jsonl" || fail "trace_gen stdout"
cmp -s "$dir/a.jsonl" "$dir/b.jsonl" || fail "same flags, different bytes"
tools/trace_gen --preset=mixed --clients=60 --seed=5 >"$dir/c.jsonl" || fail "seed 5"
cmp -s "$dir/a.jsonl" "$dir/c.jsonl" && fail "another seed, same bytes"
out=$(tools/trace_replay "$dir/a.jsonl" --capacities=100000,0) || fail "trace_replay on a generated trace"
echo "$out"
echo "$out" | grep -q "^unlimited " || fail "replay table"
out=$(tools/policy_report --trace="$dir/a.jsonl" --capacities=100000 --summary_tokens=100000 \
  --markdown) || fail "policy_report"
echo "$out"
echo "$out" | grep -Eq '^\| a\.jsonl +\| +0\.[0-9]{4}( +\| +[0-9]+\.[0-9]{2}){4} +\| +0\.[0-9]{4} \|$' ||
  fail "summary row"
tools/trace_gen --preset=nope 2>&1 | grep -q "known: chat" || fail "unknown preset message"
tools/trace_gen --preset=chat --clients=0 && fail "zero clients accepted"
echo "PASS"
