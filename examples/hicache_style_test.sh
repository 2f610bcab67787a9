#!/bin/bash
# Runs the hicache_style example against a real mooncake_master on a free
# port and checks its counts: A = 160 tokens = 10 pages, all backed up; B
# shares the 100-token prefix, so its first 6 pages (96 tokens) are cached.
set -u
fail() { echo "FAIL: $*"; exit 1; }
root="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-mooncake}"
cd "$root"
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
metrics=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
tools/mooncake_master --port="$port" --metrics_port="$metrics" >/dev/null 2>&1 &
master=$!
trap 'kill $master 2>/dev/null; wait $master 2>/dev/null' EXIT
for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break
  sleep 0.1
done
out=$(PYTHONPATH="$root/python" /usr/bin/python3 examples/hicache_style.py "127.0.0.1:$port" 2>&1) ||
  fail "exit status $?: $out"
echo "$out"
echo "$out" | grep -q "^request A: 160 tokens, 10 pages, backed up 10 pages$" || fail "A backs up 10 pages"
echo "$out" | grep -q "^request B: 150 tokens, 9 pages, 6 cached (96 tokens); prefill computes 54$" ||
  fail "B should find its 6 shared pages"
echo "$out" | grep -q "^loaded and verified 6 pages" || fail "6 pages loaded"
echo "$out" | grep -q "^cleared 20 objects$" || fail "remove_all clears A's 20 objects"
echo "$out" | grep -q "^OK$" || fail "no OK line"
echo "PASS"
