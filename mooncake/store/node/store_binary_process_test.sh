#!/usr/bin/env bash
# The store binary as separate processes, the way an operator runs it on many
# hosts: one --role=master and two --role=worker processes, a client putting
# objects with two replicas (so both workers hold them), getting them back
# over TCP and SHM, then one worker stopped with SIGTERM (graceful unmount):
# the objects are still read from the other. Then a third worker with an SSD
# tier (--ssd_path) takes more than its DRAM holds and reads the evicted
# objects back from SSD, and everything exits 0.
set -euo pipefail
bin=tools/mooncake_store
client=mooncake/store/node/store_client
source tools/testing/process_helpers.sh

metric() { sed -n "s/^$2 //p" <<<"$1"; }

"$bin" --role=master --listen=127.0.0.1:0 --http=127.0.0.1:0 --status_interval=0 \
  --ready_file="$tmp/master.ready" >"$tmp/master.out" 2>&1 &
pids+=($!)
wait_ready "$tmp/master.ready" "${pids[0]}"
master=$(sed -n 's/^rpc=//p' "$tmp/master.ready")
master_http=$(sed -n 's/^http=//p' "$tmp/master.ready")

for w in 1 2; do
  "$bin" --role=worker --master="$master" --http=127.0.0.1:0 --segment_bytes=32M \
    --status_interval=0 --ready_file="$tmp/worker$w.ready" >"$tmp/worker$w.out" 2>&1 &
  pids+=($!)
done
wait_ready "$tmp/worker1.ready" "${pids[1]}"
wait_ready "$tmp/worker2.ready" "${pids[2]}"
grep -q '^rpc=$' "$tmp/worker1.ready" || fail "a worker's ready file names an rpc address"
w1_http=$(sed -n 's/^http=//p' "$tmp/worker1.ready")

m=$(get "$master_http" /metrics)
[[ $(metric "$m" mooncake_master_workers) == 2 ]] || fail "master sees $(metric "$m" mooncake_master_workers) workers"
[[ $(metric "$m" mooncake_master_capacity_bytes) == $((64 << 20)) ]] || fail "capacity"
[[ $(get "$w1_http" /health) == $'200\nok' ]] || fail "worker 1 health"
echo "ok   master $master with 2 workers (64 MiB)"

"$client" put "$master" obj 24 200000 2 tcp || fail "puts"
m=$(get "$master_http" /metrics)
used=$(grep -c '^mooncake_master_worker_used_bytes{worker=.*} [1-9]' <<<"$m" || true)
[[ $used == 2 ]] || fail "bytes on $used workers, want 2"
"$client" get "$master" obj 24 200000 tcp || fail "gets over tcp"
"$client" get "$master" obj 24 200000 shm || fail "gets over shm"
echo "ok   24 objects x 2 replicas on both workers, read back over TCP and SHM"

kill -TERM "${pids[1]}"
wait "${pids[1]}" || fail "worker 1 exit $? after SIGTERM"
grep -qE '^[0-9T:.-]+Z stopped' "$tmp/worker1.out" || fail "worker 1 did not say stopped"
m=$(get "$master_http" /metrics)
[[ $(metric "$m" mooncake_master_segments) == 1 ]] || fail "worker 1's segment still mounted"
"$client" get "$master" obj 24 200000 tcp || fail "gets after worker 1 left"
echo "ok   worker 1 left gracefully (exit 0); every object read from worker 2"

kill -TERM "${pids[2]}"
wait "${pids[2]}" || fail "worker 2 exit $? after SIGTERM"
echo "ok   worker 2 exits 0 on SIGTERM"

# A worker with an SSD tier under 4 MiB of DRAM: 24 x 200 KB objects do not
# fit, the oldest go to SSD (its file), and reading them loads them back.
"$bin" --role=worker --master="$master" --http=127.0.0.1:0 --segment_bytes=4M \
  --ssd_path="$tmp/w3.tier" --ssd_bytes=64M --status_interval=0 \
  --ready_file="$tmp/worker3.ready" >"$tmp/worker3.out" 2>&1 &
pids+=($!)
wait_ready "$tmp/worker3.ready" "${pids[3]}"
grep -q 'SSD tier' "$tmp/worker3.out" || fail "worker 3 does not show its SSD tier"
"$client" put "$master" ssd 24 200000 1 tcp || fail "puts past DRAM"
m=$(get "$master_http" /metrics)
offloads=$(metric "$m" 'mooncake_master_tier_tasks_total{kind="offload",result="ok"}')
[[ ${offloads:-0} -ge 4 ]] || fail "only ${offloads:-0} offloads"
"$client" get "$master" ssd 4 200000 tcp || fail "gets of the objects on SSD"
m=$(get "$master_http" /metrics)
loads=$(metric "$m" 'mooncake_master_tier_tasks_total{kind="load",result="ok"}')
[[ ${loads:-0} -ge 4 ]] || fail "only ${loads:-0} loads"
echo "ok   worker 3 with an SSD tier: $offloads offloads, $loads loads, every byte checked"

for i in 3 0; do
  kill -TERM "${pids[$i]}"
  wait "${pids[$i]}" || fail "process $i exit $? after SIGTERM"
done
pids=()
echo "ok   master and worker 3 exit 0 on SIGTERM"
