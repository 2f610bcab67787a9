#!/usr/bin/env bash
# mooncake_master and mooncake_http_metadata_server as processes, the way
# scripts written for Mooncake Store start them: Mooncake's flag names on
# free ports, a worker (mooncake_store --role=worker) joining the master and
# a client's puts and gets through it, Mooncake flags this master does not
# implement refused by name (exit 2), the metadata server's answers (on the
# master with --enable_http_metadata_server and standalone), then signals ->
# exit 0.
set -euo pipefail
master_bin=tools/mooncake_master
meta_bin=tools/mooncake_http_metadata_server
store_bin=tools/mooncake_store
client=mooncake/store/node/store_client
source tools/testing/process_helpers.sh

# $1 host:port, $2 method, $3 target, $4 body (PUT)
req() {
  local extra=""
  [[ $2 == PUT ]] && extra="Content-Length: ${#4}\\r\\n"
  http "$1" "$2 $3 HTTP/1.1\\r\\nHost: x\\r\\n$extra\\r\\n${4:-}"
}

# GET/PUT/DELETE/404/400/411/413/405 and URL-decoded keys against $1.
check_metadata() {
  local hp=$1 r
  [[ $(req "$hp" GET "/metadata?key=mooncake/ram/a" | head -1) == 404 ]] || fail "$hp: absent key not 404"
  r=$(req "$hp" PUT "/metadata?key=mooncake%2Fram%2Fa" '{"segment":"a"}')
  [[ $(head -1 <<<"$r") == 200 ]] || fail "$hp: PUT: $r"
  r=$(req "$hp" GET "/metadata?key=mooncake/ram/a")
  [[ $r == $'200\n{"segment":"a"}' ]] || fail "$hp: GET after PUT: $r"
  [[ $(req "$hp" PUT "/metadata?key=mooncake/ram/a" 'v2' | head -1) == 200 ]] || fail "$hp: replace"
  r=$(req "$hp" GET "/metadata?key=mooncake%2Fram%2Fa")
  [[ $r == $'200\nv2' ]] || fail "$hp: GET after replace: $r"
  [[ $(req "$hp" PUT "/metadata?key=a+b" 'sp' | head -1) == 200 ]] || fail "$hp: PUT a+b"
  [[ $(req "$hp" GET "/metadata?key=a%20b") == $'200\nsp' ]] || fail "$hp: '+' is not a space"
  [[ $(req "$hp" DELETE "/metadata?key=mooncake/ram/a" | head -1) == 200 ]] || fail "$hp: DELETE"
  [[ $(req "$hp" DELETE "/metadata?key=mooncake/ram/a" | head -1) == 404 ]] || fail "$hp: DELETE again"
  [[ $(req "$hp" GET "/metadata?key=mooncake/ram/a" | head -1) == 404 ]] || fail "$hp: GET deleted"
  [[ $(req "$hp" GET "/metadata" | head -1) == 400 ]] || fail "$hp: no key is not 400"
  [[ $(req "$hp" GET "/metadata?key=%zz" | head -1) == 400 ]] || fail "$hp: bad escape is not 400"
  [[ $(http "$hp" 'PUT /metadata?key=k HTTP/1.1\r\n\r\n' | head -1) == 411 ]] ||
    fail "$hp: PUT without length is not 411"
  [[ $(http "$hp" 'PUT /metadata?key=k HTTP/1.1\r\nContent-Length: 16777217\r\n\r\n' | head -1) == 413 ]] ||
    fail "$hp: 16 MiB + 1 is not 413"
  [[ $(http "$hp" 'PUT /metadata?key=k HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n' |
       head -1) == 501 ]] || fail "$hp: chunked is not 501"
  [[ $(http "$hp" 'POST /metadata?key=k HTTP/1.1\r\n\r\n' | head -1) == 405 ]] || fail "$hp: POST"
}

# ---- Flags: Mooncake flags not implemented, unknown and bad ones exit 2 -----------
for args in "--v=1" "--allocation_strategy=random" "--root_fs_dir=/tmp" \
            "--enable_gc" "--client_ttl=10" "--rpc_enable_tcp_no_delay=true"; do
  set +e
  msg=$("$master_bin" $args 2>&1)
  rc=$?
  set -e
  name=${args%%=*}
  name=${name#--}
  name=${name#no}
  [[ $rc -eq 2 ]] || fail "$args: exit $rc, want 2 ($msg)"
  grep -q -- "--$name is a Mooncake flag this program does not implement" <<<"$msg" ||
    fail "$args: message does not name it: $msg"
done
for args in "--bogus=1" "--port=70000" "--port=x" "--eviction_ratio=0.95" \
            "--eviction_high_watermark_ratio=1.5" "--default_kv_lease_ttl=0" "--max_threads=0" \
            "--rpc_address=nohost" "--flagfile=/dev/null" "--undefok=enable_ha" "positional" \
            "--enable_ha" "--etcd_endpoints=127.0.0.1:2379" "--enable_ha --ha_backend_type=zk" \
            "--enable_ha --ha_backend_connstring=127.0.0.1:1 --cluster_id=bad!" \
            "--memory_allocator=slab" "--kv_block_bytes=2M" \
            "--memory_allocator=cachelib --kv_block_bytes=2X"; do
  set +e
  msg=$("$master_bin" $args 2>&1)
  rc=$?
  set -e
  [[ $rc -eq 2 && -n $msg ]] || fail "$args: exit $rc, want 2 with a message ($msg)"
done
v=$("$master_bin" --version 2>&1) || fail "--version exited $?"
[[ $v == "mooncake_master "* ]] || fail "--version: $v"
echo "ok   mooncake_master: unimplemented Mooncake flags refused by name, bad flags exit 2"

# ---- The master with Mooncake's flags, a worker, a client --------------------------
port=$(free_port)
metrics=$(free_port)
meta=$(free_port)
"$master_bin" --port="$port" --metrics_port="$metrics" --max_threads=2 \
  --default_kv_lease_ttl=7000 --eviction_high_watermark_ratio=0.9 --eviction_ratio=0.1 \
  --enable_http_metadata_server --http_metadata_server_port="$meta" \
  --ready_file="$tmp/master.ready" >"$tmp/master.out" 2>&1 &
master_pid=$!
pids+=("$master_pid")
wait_ready "$tmp/master.ready" "$master_pid"
[[ $(sed -n 's/^rpc=//p' "$tmp/master.ready") == "127.0.0.1:$port" ]] || fail "rpc not on --port"
[[ $(sed -n 's/^http=//p' "$tmp/master.ready") == "127.0.0.1:$metrics" ]] ||
  fail "metrics not on --metrics_port"
[[ $(sed -n 's/^metadata=//p' "$tmp/master.ready") == "127.0.0.1:$meta" ]] ||
  fail "metadata not on --http_metadata_server_port"
grep -q "master RPC   127.0.0.1:$port   (2 handler threads" "$tmp/master.out" || fail "banner: RPC"
grep -q "7000 ms by default; eviction from 0.9 down to 0.8" "$tmp/master.out" ||
  fail "banner: lease and watermarks"
grep -q "allocator    tlsf (TLSF)" "$tmp/master.out" || fail "banner: default allocator"

"$store_bin" --role=worker --master="127.0.0.1:$port" --http= --segment_bytes=64M \
  --status_interval=0 --ready_file="$tmp/worker.ready" >"$tmp/worker.out" 2>&1 &
worker_pid=$!
pids+=("$worker_pid")
wait_ready "$tmp/worker.ready" "$worker_pid"
out=$("$client" put "127.0.0.1:$port" obj 8 100000 1 tcp 2>&1) || fail "client put: $out"
out=$("$client" get "127.0.0.1:$port" obj 8 100000 tcp 2>&1) || fail "client get: $out"
[[ $(http "127.0.0.1:$metrics" 'GET /health HTTP/1.1\r\n\r\n') == $'200\nok' ]] || fail "/health"
m=$(http "127.0.0.1:$metrics" 'GET /metrics HTTP/1.1\r\n\r\n')
committed=$(sed -n 's/^mooncake_master_puts_total{result="committed"} //p' <<<"$m")
[[ ${committed:-0} -ge 8 ]] || fail "8 puts not in the master's metrics ($committed)"
grep -q 'mooncake_node_info{role="master"' <<<"$m" || fail "/metrics: not a master"
echo "ok   mooncake_master --port=$port --metrics_port=$metrics: a worker joined, 8 puts and gets"

check_metadata "127.0.0.1:$meta"
echo "ok   --enable_http_metadata_server on :$meta: GET/PUT/DELETE, 400/404/405/411/413/501"

# ---- --memory_allocator=cachelib: KV block slabs, a worker, puts and gets ------------
"$master_bin" --port=0 --metrics_port=0 --memory_allocator=cachelib --kv_block_bytes=100000 \
  --ready_file="$tmp/kv.ready" >"$tmp/kv.out" 2>&1 &
kv_pid=$!
pids+=("$kv_pid")
wait_ready "$tmp/kv.ready" "$kv_pid"
kv_rpc=$(sed -n 's/^rpc=//p' "$tmp/kv.ready")
grep -q "allocator    kv (KV block slabs over TLSF)" "$tmp/kv.out" || fail "banner: cachelib"
"$store_bin" --role=worker --master="$kv_rpc" --http= --segment_bytes=64M \
  --status_interval=0 --ready_file="$tmp/kvw.ready" >"$tmp/kvw.out" 2>&1 &
kvw_pid=$!
pids+=("$kvw_pid")
wait_ready "$tmp/kvw.ready" "$kvw_pid"
out=$("$client" put "$kv_rpc" kvobj 8 100000 1 tcp 2>&1) || fail "cachelib: client put: $out"
out=$("$client" get "$kv_rpc" kvobj 8 100000 tcp 2>&1) || fail "cachelib: client get: $out"
kill -TERM "$kvw_pid"
await_exit "$kvw_pid"
kill -TERM "$kv_pid"
await_exit "$kv_pid"
[[ $rc -eq 0 ]] || fail "cachelib master: exit $rc after SIGTERM"
echo "ok   --memory_allocator=cachelib --kv_block_bytes=100000: 8 puts and gets"

# ---- Port in use: exit 1, saying so --------------------------------------------------
set +e
msg=$("$master_bin" --port="$port" --metrics_port=0 2>&1)
rc=$?
set -e
[[ $rc -eq 1 ]] && grep -q "already in use" <<<"$msg" || fail "RPC port in use: exit $rc ($msg)"
set +e
msg=$("$master_bin" --port=0 --metrics_port=0 --enable_http_metadata_server \
  --http_metadata_server_port="$meta" 2>&1)
rc=$?
set -e
[[ $rc -eq 1 ]] && grep -q "http_metadata_server_port=$meta.*already in use" <<<"$msg" ||
  fail "metadata port in use: exit $rc ($msg)"
echo "ok   ports in use: exit 1"

# ---- Signals: worker SIGTERM, master SIGINT -> 0 -----------------------------------
kill -TERM "$worker_pid"
await_exit "$worker_pid"
[[ $rc -eq 0 ]] || fail "worker: exit $rc after SIGTERM"
kill -INT "$master_pid"
await_exit "$master_pid"
[[ $rc -eq 0 ]] || fail "master: exit $rc after SIGINT"
grep -q "received SIGINT: shutting down" "$tmp/master.out" || fail "no shutdown line"
grep -q "Z stopped$" "$tmp/master.out" || fail "no stopped line"
[[ ! -f $tmp/master.ready ]] || fail "ready file left behind"
echo "ok   worker SIGTERM and master SIGINT: exit 0"

# ---- The standalone metadata server -------------------------------------------------
for args in "--port=x" "--port=-1" "--host=name" "--enable_ha" "--max_value_bytes=0" \
            "--max_total_bytes=1M" "positional"; do
  set +e
  msg=$("$meta_bin" $args 2>&1)
  rc=$?
  set -e
  [[ $rc -eq 2 && -n $msg ]] || fail "metadata server $args: exit $rc, want 2 ($msg)"
done
# --port=0: the server takes a free port itself and names it in its ready
# file (a port picked here could be taken by another test before it binds).
"$meta_bin" --port=0 --ready_file="$tmp/meta.ready" >"$tmp/meta.out" 2>&1 &
meta_pid=$!
pids+=("$meta_pid")
wait_ready "$tmp/meta.ready" "$meta_pid"
mport=$(sed -n 's/^http=127\.0\.0\.1://p' "$tmp/meta.ready")
[[ $mport =~ ^[0-9]+$ && $mport -ne 0 ]] || fail "no port in the ready file: $(cat "$tmp/meta.ready")"
check_metadata "127.0.0.1:$mport"
[[ $(req "127.0.0.1:$mport" GET "/health" | head -1) == 404 ]] || fail "only /metadata is served"
kill -TERM "$meta_pid"
await_exit "$meta_pid"
[[ $rc -eq 0 ]] || fail "metadata server: exit $rc after SIGTERM"
grep -q "stopped (1 keys" "$tmp/meta.out" || fail "no stopped line: $(cat "$tmp/meta.out")"
echo "ok   mooncake_http_metadata_server --port=$mport: GET/PUT/DELETE, errors, SIGTERM exit 0"
echo PASS
