#!/usr/bin/env bash
# The reference store binary end to end, as README command 1 and
# tools/mooncake_bench use it: start it (demo on, ports 0, ready file), read
# /health and /metrics, check the demo's puts and gets went through the
# master, check the HTTP error answers, bad flags (exit 2), a port in use
# (exit 1, saying so), then SIGTERM -> exit 0 within a bound.
set -euo pipefail
bin=${MOONCAKE_STORE:-tools/mooncake_store}
source tools/testing/process_helpers.sh
out=$tmp/store.out
ready=$tmp/ready
pid=

fail() {
  echo "FAIL: $*"
  [[ -f $out ]] && { echo "--- store output:"; cat "$out"; }
  [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null
  exit 1
}

# The UTC time that starts each running line (--log_timestamps, the default).
ts='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z '

# ---- Bad flags: a clear message and exit 2 -----------------------------------
for args in "--role=bogus" "--no_such_flag=1" "--segment_bytes=12Q" "--listen=nocolon" \
            "--replicas=x" "--low_watermark=0.99" "--tenants=a" "--ssd_compression=zip" \
            "--eviction_policy=mru" "--hot_reads=-1" "--hot_max_fraction=2" \
            "--repair_within_ms=-5" "--route_policy=/no/such/policy" "positional" \
            "--allocator=slab" "--kv_block_bytes=1M" "--allocator=kv --kv_block_bytes=0" \
            "--tenant=a" "--tenant=a:1G:fast" "--tenant=a:1G --tenant=a:2G" \
            "--tenants=a:2G:1G --tenant=a:512M" "--relocation=maybe" \
            "--relocation=on --ha_etcd=http://127.0.0.1:1" "--qos_link=eth0" \
            "--qos_link=eth0 --qos_link_bytes_per_s=-1" "--route_source=tpu3" \
            "--route_source=numa-1"; do
  set +e
  msg=$("$bin" $args --http= --demo=false 2>&1)
  rc=$?
  set -e
  [[ $rc -eq 2 ]] || fail "$args: exit $rc, want 2 (output: $msg)"
  [[ -n $msg ]] || fail "$args: no message"
done
echo "ok   bad flags exit 2 with a message"

# ---- --route_policy: a bad line is a flag error; a good one prints the routes --
printf 'latency spread sideways\n' >"$tmp/bad.policy"
set +e
msg=$("$bin" --route_policy="$tmp/bad.policy" --only_check_args 2>&1)
rc=$?
set -e
[[ $rc -eq 2 && $msg == *"line 1"* ]] || fail "bad policy: exit $rc: $msg"
printf '# defaults\nbulk spread all\n' >"$tmp/good.policy"
msg=$("$bin" --route_policy="$tmp/good.policy" --only_check_args 2>&1) || fail "good policy: $msg"
echo "ok   --route_policy parses at flag time"

# ---- --version, -h, --only_check_args and the start warnings ------------------
v=$("$bin" --version 2>&1) || fail "--version exited $?"
[[ $v == "mooncake_store "* ]] || fail "--version: $v"
set +e
h=$("$bin" -h 2>&1)
set -e
grep -q -- "--segment_bytes" <<<"$h" || fail "-h does not list the flags: $h"
for arg in --only_check_args --only_check_args=true --only_check_args=yes -only_check_args=1; do
  msg=$("$bin" $arg --segment_bytes=64M 2>&1) || fail "$arg: exit $?"
  [[ $msg == "flags ok" ]] || fail "$arg: $msg"
done
set +e
msg=$("$bin" --only_check_args=maybe 2>&1)
rc=$?
[[ $rc -eq 2 ]] || fail "--only_check_args=maybe: exit $rc, want 2 ($msg)"
msg=$("$bin" --only_check_args --role=bogus 2>&1)
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "--only_check_args --role=bogus: exit $rc, want 2"
msg=$("$bin" --only_check_args --replicas=2 --listen=0.0.0.0:0 2>&1) || fail "warnings: exit $?"
grep -q "warning: --replicas=2: role all has one worker" <<<"$msg" || fail "no replicas warning: $msg"
grep -q "warning: --listen=0.0.0.0:0 accepts remote clients" <<<"$msg" ||
  fail "no loopback worker_host warning: $msg"
grep -q "^flags ok" <<<"$msg" || fail "warnings: $msg"
msg=$("$bin" --only_check_args --allocator=kv --kv_block_bytes=64K,1M --tenants=c:1G:512M \
  --tenant=a:1G:10M --tenant b:2G --tenant=c:2G:1M 2>&1) || fail "kv and --tenant: exit $? ($msg)"
[[ $msg == *"flags ok"* ]] || fail "kv and --tenant: $msg"
echo "ok   --version, -h, --only_check_args (true/yes/1; maybe is exit 2), start warnings"

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
grep -qE "^${ts}serving; Ctrl-C to stop" "$out" || fail "no serving line (with its time)"
grep -q "master RPC   $rpc" "$out" || fail "banner does not say where the master listens"
grep -q "eviction s3fifo, allocator tlsf" "$out" || fail "banner does not name the policy, allocator"
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
grep -qE "^${ts}status: objects=" "$out" || fail "no status line (with its time)"
kill -TERM "$pid"
await_exit "$pid"
pid=
[[ $rc -eq 0 ]] || fail "exit $rc after SIGTERM, want 0"
grep -qE "^${ts}stopped" "$out" || fail "no 'stopped' line (with its time)"
[[ ! -e $ready ]] || fail "ready file left behind"
echo "ok   SIGTERM: exit 0"
cat "$out"

# ---- --allocator=kv and --tenant: the demo's every byte through KV slabs --------
# With --route_policy too: the worker takes this host's bulk plan (its NICs'
# addresses, or --worker_host when none has one) and says so.
"$bin" --listen=127.0.0.1:0 --http=127.0.0.1:0 --segment_bytes=64M --demo \
  --allocator=kv --kv_block_bytes=64K,1M,4M --tenant=acme:1G:64M --status_interval=0 \
  --relocation=on --route_policy="$tmp/good.policy" --ready_file="$ready" >"$out" 2>&1 &
pid=$!
for _ in $(seq 300); do
  [[ -f $ready ]] && break
  kill -0 "$pid" 2>/dev/null || fail "the kv store exited before it was ready: $(cat "$out")"
  sleep 0.1
done
[[ -f $ready ]] || fail "kv: no ready file within 30 s"
grep -q '^demo: ok' "$out" || fail "kv: demo did not report ok"
grep -qE "^route: (the worker's TCP transport follows the bulk plan|TCP stays on --worker_host|no bulk plan)" \
  "$out" || fail "kv: --route_policy did not say how the worker is bound: $(cat "$out")"
grep -q "allocator kv" "$out" || fail "kv: banner does not name the allocator"
grep -q "acme 1.0GiB at 64.0MiB/s" "$out" || fail "kv: banner does not show acme's rate"
hp=$(sed -n 's/^http=//p' "$ready")
m=$(get "$hp" /metrics)
grep -q 'mooncake_master_tenant_rate_limited_total{tenant="acme"} 0' <<<"$m" ||
  fail "kv: no rate_limited series for acme"
grep -q 'mooncake_master_compactions_total{outcome="started"} 0' <<<"$m" ||
  fail "kv: --relocation=on but no compactions series"
kill -TERM "$pid"
await_exit "$pid"
pid=
[[ $rc -eq 0 ]] || fail "kv: exit $rc after SIGTERM, want 0"
echo "ok   --allocator=kv --relocation=on --route_policy with the demo, --tenant's rate in the banner and /metrics"

# ---- README command 1 as written: no flags at all --------------------------------
# The embedded default: master on 127.0.0.1:50051, HTTP on 127.0.0.1:9090, a
# 1 GiB segment, the demo; Ctrl-C (SIGINT) stops it. Fixed ports may be taken
# on a shared machine, and a small runner may not have the 1 GiB: then the
# store must say so and exit 1, and the step is skipped.
out=$tmp/default.out
"$bin" >"$out" 2>&1 &
pid=$!
for _ in $(seq 600); do
  grep -q 'serving; Ctrl-C to stop' "$out" && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if ! kill -0 "$pid" 2>/dev/null; then
  set +e
  wait "$pid"
  rc=$?
  set -e
  pid=
  [[ $rc -eq 1 ]] && grep -qE 'already in use|memory' "$out" || fail "no-flag start: exit $rc"
  echo "skip no-flag start: a default port or the 1 GiB is not available here ($(tail -1 "$out"))"
else
  grep -q 'master RPC   127.0.0.1:50051 ' "$out" || fail "no-flag start: master not on 50051"
  grep -q '^demo: ok' "$out" || fail "no-flag start: demo not ok"
  h=$(get 127.0.0.1:9090 /health)
  [[ $h == $'200\nok' ]] || fail "no-flag start: /health on 9090: $h"
  kill -INT "$pid"
  await_exit "$pid"
  pid=
  [[ $rc -eq 0 ]] || fail "no-flag start: exit $rc after SIGINT, want 0"
  grep -qE "^${ts}received SIGINT: shutting down" "$out" || fail "no-flag start: no SIGINT line"
  echo "ok   no flags (README command 1): 127.0.0.1:50051 and :9090, demo ok, Ctrl-C exit 0"
fi

# ---- Signals: SIGHUP stops it, unless nohup ignored SIGHUP; a second signal ----
# cuts a slow shutdown short (128 + signal); a worker's join is an event.
# $1 output file, $2 ready file, the rest the arguments; sets $pid.
start() {
  local o=$1 r=$2
  shift 2
  rm -f "$r"
  "$bin" --demo=false --segment_bytes=64M --http= --ready_file="$r" "$@" >"$o" 2>&1 &
  pid=$!
  for _ in $(seq 300); do
    [[ -f $r ]] && return 0
    kill -0 "$pid" 2>/dev/null || { out=$o; fail "the store exited before it was ready"; }
    sleep 0.1
  done
  out=$o
  fail "no ready file within 30 s"
}

out=$tmp/hup.out
start "$out" "$tmp/hup.ready" --listen=127.0.0.1:0 --log_timestamps=false
kill -HUP "$pid"
await_exit "$pid"
pid=
[[ $rc -eq 0 ]] || fail "exit $rc after SIGHUP, want 0"
grep -q '^received SIGHUP: shutting down' "$out" || fail "no SIGHUP line (unstamped)"
echo "ok   SIGHUP: exit 0; --log_timestamps=false leaves lines unstamped"

out=$tmp/nohup.out
(trap '' HUP && exec "$bin" --demo=false --segment_bytes=64M --http= --listen=127.0.0.1:0 \
   --ready_file="$tmp/nohup.ready" >"$out" 2>&1) &
pid=$!
for _ in $(seq 300); do [[ -f $tmp/nohup.ready ]] && break; sleep 0.1; done
[[ -f $tmp/nohup.ready ]] || fail "nohup store: no ready file"
kill -HUP "$pid"
sleep 1
kill -0 "$pid" 2>/dev/null || fail "a store started with SIGHUP ignored stopped on SIGHUP"
kill -INT "$pid"
await_exit "$pid"
pid=
[[ $rc -eq 0 ]] || fail "nohup store: exit $rc after SIGINT, want 0"
grep -qE "^${ts}received SIGINT: shutting down" "$out" || fail "no SIGINT line"
echo "ok   SIGHUP ignored at start (nohup) stays ignored; SIGINT: exit 0"

# A master and a worker; the master stopped (SIGSTOP) holds the worker's
# unmount, and a second SIGTERM ends the worker at once with 143.
mout=$tmp/master.out
start "$mout" "$tmp/master.ready" --role=master --listen=127.0.0.1:0
master_pid=$pid
mrpc=$(sed -n 's/^rpc=//p' "$tmp/master.ready")
start "$tmp/worker.out" "$tmp/worker.ready" --role=worker --master="$mrpc"
worker_pid=$pid
for _ in $(seq 50); do
  grep -qE "^${ts}event: worker joined: " "$mout" && break
  sleep 0.1
done
out=$mout
grep -qE "^${ts}event: worker joined: .*\(1 segments?\)" "$mout" || fail "master: no worker-joined event"
# SIGSTOP takes effect asynchronously: until every thread of the master has
# stopped, one already running (say, woken by the worker's request) can still
# answer the unmount. Signal the worker only once the whole master is stopped.
master_stopped() {
  local f s
  for f in /proc/"$master_pid"/task/*/stat; do
    s=$(<"$f") 2>/dev/null || return 1
    s=${s##*) }
    [[ ${s%% *} == T ]] || return 1
  done
}
kill -STOP "$master_pid"
for _ in $(seq 100); do master_stopped && break; sleep 0.01; done
master_stopped || { kill -CONT "$master_pid"; fail "master not stopped 1 s after SIGSTOP"; }
kill -TERM "$worker_pid"
sleep 0.5
kill -0 "$worker_pid" 2>/dev/null || {
  kill -CONT "$master_pid"
  out=$tmp/worker.out
  fail "worker exited before its unmount could finish (master stopped)"
}
kill -TERM "$worker_pid"
pid=$worker_pid
out=$tmp/worker.out
await_exit "$worker_pid"
[[ $rc -eq 143 ]] || { kill -CONT "$master_pid"; fail "second SIGTERM: exit $rc, want 143"; }
grep -qE "^${ts}received SIGTERM again: exiting now" "$out" || fail "no second-signal line"
[[ ! -e $tmp/worker.ready ]] || fail "ready file left behind after the second signal"
kill -CONT "$master_pid"
pid=$master_pid
out=$mout
kill -TERM "$master_pid"
await_exit "$master_pid"
pid=
[[ $rc -eq 0 ]] || fail "master: exit $rc after SIGTERM"
echo "ok   worker joined event; second SIGTERM during a held shutdown: exit 143"
