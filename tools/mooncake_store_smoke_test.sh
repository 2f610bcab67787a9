#!/usr/bin/env bash
# The reference store binary end to end, as README command 1 and
# tools/mooncake_bench use it: start it (demo on, ports 0, ready file), read
# /health and /metrics, check the demo's puts and gets went through the
# master, check the HTTP error answers, bad flags (exit 2), a port in use
# (exit 1, saying so), then SIGTERM -> exit 0 within a bound.
set -euo pipefail
bin=${MOONCAKE_STORE:-tools/mooncake_store}
tmp=${TEST_TMPDIR:-$(mktemp -d)}
out=$tmp/store.out
ready=$tmp/ready
pid=

fail() {
  echo "FAIL: $*"
  [[ -f $out ]] && { echo "--- store output:"; cat "$out"; }
  [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null
  exit 1
}

# HTTP over bash's /dev/tcp (python3 or curl would do, but start slowly on a
# loaded CI machine): prints "<status>\n<body>". $1 host:port, $2 the raw
# request with printf %b escapes.
http() {
  local resp
  exec 3<>"/dev/tcp/${1%:*}/${1##*:}"
  printf '%b' "$2" >&3
  resp=$(cat <&3)
  exec 3<&-
  local status_line=${resp%%$'\r\n'*}
  status_line=${status_line#* }
  printf '%s\n%s' "${status_line%% *}" "${resp#*$'\r\n\r\n'}"
}
get() { http "$1" "GET $2 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"; }

# ---- Bad flags: a clear message and exit 2 -----------------------------------
for args in "--role=bogus" "--no_such_flag=1" "--segment_bytes=12Q" "--listen=nocolon" \
            "--replicas=x" "--low_watermark=0.99" "--tenants=a" "--ssd_compression=zip" \
            "--eviction_policy=mru" "positional"; do
  set +e
  msg=$("$bin" $args --http= --demo=false 2>&1)
  rc=$?
  set -e
  [[ $rc -eq 2 ]] || fail "$args: exit $rc, want 2 (output: $msg)"
  [[ -n $msg ]] || fail "$args: no message"
done
echo "ok   bad flags exit 2 with a message"

# ---- Start with the demo -------------------------------------------------------
"$bin" --listen=127.0.0.1:0 --http=127.0.0.1:0 --segment_bytes=64M --demo \
  --eviction_policy=s3fifo --status_interval=1s --ready_file="$ready" >"$out" 2>&1 &
pid=$!
for _ in $(seq 300); do
  [[ -f $ready ]] && break
  kill -0 "$pid" 2>/dev/null || fail "the store exited before it was ready"
  sleep 0.1
done
[[ -f $ready ]] || fail "no ready file within 30 s"
rpc=$(sed -n 's/^rpc=//p' "$ready")
hp=$(sed -n 's/^http=//p' "$ready")
[[ $(sed -n 's/^pid=//p' "$ready") == "$pid" ]] || fail "ready file pid is not the store's"
[[ $rpc == 127.0.0.1:* && ${rpc#*:} != 0 ]] || fail "ready file rpc=$rpc"
[[ $hp == 127.0.0.1:* && ${hp#*:} != 0 ]] || fail "ready file http=$hp"
grep -q '^demo: ok' "$out" || fail "demo did not report ok"
grep -q '^serving; Ctrl-C to stop' "$out" || fail "no serving line"
grep -q "master RPC   $rpc" "$out" || fail "banner does not say where the master listens"
grep -q "eviction s3fifo" "$out" || fail "banner does not name the eviction policy"
echo "ok   started: rpc=$rpc http=$hp, demo ok"

# ---- /health and /metrics ----------------------------------------------------------
h=$(get "$hp" /health)
[[ $h == $'200\nok' ]] || fail "/health: $h"
m=$(get "$hp" /metrics)
[[ $(head -1 <<<"$m") == 200 ]] || fail "/metrics status"
committed=$(sed -n 's/^mooncake_master_puts_total{result="committed"} //p' <<<"$m")
hits=$(sed -n 's/^mooncake_master_gets_total{result="hit"} //p' <<<"$m")
[[ ${committed:-0} -gt 0 && ${hits:-0} -ge $committed ]] ||
  fail "demo puts/gets not in metrics (committed=$committed hits=$hits)"
for family in mooncake_master_capacity_bytes mooncake_master_worker_used_bytes \
              mooncake_master_segment_fragmentation 'mooncake_rpc_server_latency_seconds_bucket{method="PutStart",le="0.001"}' \
              mooncake_worker_segments_mounted mooncake_node_healthy 'mooncake_node_info{role="all"'; do
  grep -qF "$family" <<<"$m" || fail "/metrics lacks $family"
done
echo "ok   /health 200 ok; /metrics has $(grep -c '^# TYPE' <<<"$m") families, $committed puts committed"

# ---- HTTP error answers ----------------------------------------------------------
[[ $(get "$hp" /nope | head -1) == 404 ]] || fail "unknown path is not 404"
[[ $(http "$hp" 'POST /health HTTP/1.1\r\n\r\n' | head -1) == 405 ]] || fail "POST is not 405"
[[ $(http "$hp" 'garbage\r\n\r\n' | head -1) == 400 ]] || fail "garbage is not 400"
big="GET / HTTP/1.1\\r\\nX: $(printf 'a%.0s' $(seq 10000))\\r\\n\\r\\n"
[[ $(http "$hp" "$big" | head -1) == 431 ]] || fail "a 10 KB head is not 431"
echo "ok   404, 405, 400, 431"

# ---- Port in use: a clear error and exit 1 -------------------------------------------
set +e
msg=$("$bin" --listen="$rpc" --http= --demo=false 2>&1)
rc=$?
set -e
[[ $rc -eq 1 ]] || fail "second store on $rpc: exit $rc, want 1"
grep -q "already in use" <<<"$msg" || fail "port in use message: $msg"
echo "ok   port in use: exit 1 ($msg)"

# ---- Status line, then SIGTERM -> exit 0 within 10 s -------------------------------
sleep 1.2
grep -q '^status: objects=' "$out" || fail "no status line"
kill -TERM "$pid"
for _ in $(seq 100); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$pid" 2>/dev/null && fail "still running 10 s after SIGTERM"
set +e
wait "$pid"
rc=$?
set -e
pid=
[[ $rc -eq 0 ]] || fail "exit $rc after SIGTERM, want 0"
grep -q '^stopped' "$out" || fail "no 'stopped' line"
[[ ! -e $ready ]] || fail "ready file left behind"
echo "ok   SIGTERM: exit 0"
cat "$out"
