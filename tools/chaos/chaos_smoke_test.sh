#!/bin/bash
# A bounded, seeded chaos campaign (tools/chaos/chaos): 3 HA masters on etcd,
# 3 workers, 8 clients, every fault kind, then the standalone checker over its
# history. Needs root (namespaces, tc, a loop mount): SKIPs (exit 0) without.
# CHAOS_SEED and CHAOS_SECONDS override the seed and length (default 1, 90 s).
set -u
chaos=$1 checker=$2 store=$3
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: the chaos campaign needs root (network namespaces, tc netem, mounts)"
  exit 0
fi
for tool in ip tc etcd mkfs.ext4; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool is not installed"
    exit 0
  fi
done
dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/chaos_smoke.XXXXXX")
seed=${CHAOS_SEED:-1}
"$chaos" --seed="$seed" --seconds="${CHAOS_SECONDS:-90}" --ha=true --workers=3 --clients=8 \
  --store_binary="$store" --dir="$dir" --history="$dir/history.jsonl"
rc=$?
if [ $rc -ne 0 ]; then
  echo "FAIL: chaos exited $rc (seed $seed); logs in $dir"
  tail -n 30 "$dir"/*.log 2>/dev/null | tail -n 120
  exit 1
fi
# The standalone checker must agree with the campaign's own verdict, and the
# history must hold operations and faults (a campaign that did nothing fails).
out=$("$checker" "$dir/history.jsonl") || { echo "$out"; echo "FAIL: checker"; exit 1; }
echo "$out" | grep -q "^PASS$" || { echo "$out"; exit 1; }
ops=$(grep -c '"t":"op"' "$dir/history.jsonl")
faults=$(grep -c '"t":"fault"' "$dir/history.jsonl")
if [ "$ops" -lt 1000 ] || [ "$faults" -lt 10 ]; then
  echo "FAIL: only $ops operations and $faults faults in the history"
  exit 1
fi
# Nothing of the campaign may be left behind: every mc<pid> namespace or
# bridge must belong to a campaign that still runs (a concurrent one).
for name in $(ip netns list | awk '{print $1}'; ip -o link show type bridge | awk -F': ' '{print $2}'); do
  pid=$(echo "$name" | sed -n 's/^mc\([0-9][0-9]*\)[nb].*/\1/p')
  if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
    echo "FAIL: $name left behind"
    exit 1
  fi
done
if mount | grep -q "$dir/ssd"; then echo "FAIL: the tier filesystem is still mounted"; exit 1; fi
echo "PASS: $ops operations, $faults faults (seed $seed), nothing left behind"
rm -rf "$dir"
