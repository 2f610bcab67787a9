#!/usr/bin/env bash
# The HA failover campaign, short: 3 leader kills, 2 leader isolations
# (SIGSTOP past the lease, then SIGCONT: the old leader must step down and
# follow), a rolling restart of the 3 masters, a cold restart of all 3. Each run fails (non-zero) on a lost or
# wrong object or a cluster that does not recover; the JSON is checked too,
# so a run that silently did nothing fails.
set -euo pipefail
campaign=$1
store=$2
tmp=${TEST_TMPDIR:-$(mktemp -d)}

fail() {
  echo "FAIL: $*"
  exit 1
}

run() {
  local mode=$1
  shift
  echo "=== --mode=$mode $*"
  "$campaign" --store_binary="$store" --mode="$mode" --clients=8 --keys_per_client=16 \
    --warmup_ms=500 --interval_ms=200 --json="$tmp/$mode.json" "$@" ||
    fail "--mode=$mode exited $?"
  grep -q '"passed": true' "$tmp/$mode.json" || fail "$mode: not passed"
  grep -q '"lost": 0,' "$tmp/$mode.json" || fail "$mode: lost objects"
  grep -q '"wrong": 0,' "$tmp/$mode.json" || fail "$mode: wrong objects"
  grep -q "\"events\": $events," "$tmp/$mode.json" || fail "$mode: want $events events"
  grep -q '"ops_ok": 0,' "$tmp/$mode.json" && fail "$mode: no client call succeeded"
  grep -q '"keys_checked": 128,' "$tmp/$mode.json" || fail "$mode: final check incomplete"
  grep -q '"fencing": "[0-9]* batches from' "$tmp/$mode.json" || fail "$mode: no fencing check"
  return 0
}

events=3 run kill --kills=3
events=2 run isolate --kills=2
events=3 run rolling --rounds=1
events=1 run cold --rounds=1
echo "PASS"
