#!/bin/bash
# mooncake_bench --quick with tiny sizes against real memcached, redis-server
# (installed by tools/setup.sh) and tools/mooncake_store: every system must
# produce put and get rows with data moved and no wrong bytes, the fill run
# must report every system, the JSON must parse, and bad flags must fail with
# a message.
set -u
bin=tools/mooncake_bench
out=${TEST_TMPDIR:-/tmp}/bench.json
fail() { echo "FAIL: $*"; exit 1; }

"$bin" --quick --sizes=4K,64K --clients=1,2 --batches=1,4 --working_set_mb=2 \
  --fill_capacity_mb=8 --fill_value=256K --fill_ssd_mb=64 --json="$out" --progress_s=0.5 \
  >"$TEST_TMPDIR/stdout" 2>"$TEST_TMPDIR/stderr" || {
  cat "$TEST_TMPDIR/stdout" "$TEST_TMPDIR/stderr"
  fail "exit status $?"
}
cat "$TEST_TMPDIR/stdout"
grep -q "^progress: " "$TEST_TMPDIR/stderr" || fail "no progress line on stderr"
grep -q "^targets" "$TEST_TMPDIR/stdout" || fail "no targets table"
grep -q "^where the CPU went" "$TEST_TMPDIR/stdout" || fail "no CPU table"

python3 - "$out" <<'PY' || fail "JSON check"
import json, sys
doc = json.load(open(sys.argv[1]))
rows = doc["rows"]
systems = ["memcached", "redis", "store-tcp", "store-shm"]
for s in systems:
    for op in ("put", "get"):
        mine = [r for r in rows if r["system"] == s and r["op"] == op]
        assert mine, f"no {op} rows for {s}"
        for r in mine:
            assert r["items_per_s"] > 0, f"{s} {op} moved nothing: {r}"
            assert r["verify_failures"] == 0, f"{s} returned wrong bytes: {r}"
            assert r["errors"] == 0, f"{s} {op} errors: {r['first_error']}"
            # The columns agree with each other and with the repetitions.
            want_gb = r["items_per_s"] * r["value_bytes"] / 1e9
            assert abs(r["gb_per_s"] - want_gb) <= 0.01 * want_gb + 1e-6, (want_gb, r)
            assert 0 < r["p50_us"] <= r["p99_us"] <= r["p999_us"], f"percentiles out of order: {r}"
            reps = r["reps"]
            assert reps and all(p["bytes"] == p["items"] * r["value_bytes"] for p in reps), r
            for p in reps:
                assert abs(p["items"] / p["seconds"] - p["items_per_s"]) <= 0.01 * p["items_per_s"], p
            rates = [p["items_per_s"] for p in reps]
            assert min(rates) <= r["items_per_s"] <= max(rates), (rates, r["items_per_s"])
    cells = {(r["value_bytes"], r["clients"], r["batch"]) for r in rows if r["system"] == s}
    assert len(cells) >= 2 * 2 * 2 - 0, f"{s}: cells {sorted(cells)}"
for r in rows:
    if r["system"].startswith("store"):
        assert r["vs_memcached"] is not None and r["vs_redis"] is not None, r
    # --quick phases are shorter than the 0.5 s CPU window floor: figures may
    # be null (unset), never negative.
    for k in ("server_cores", "client_cores", "idle_cores", "steal_cores", "cpu_us_per_item"):
        assert r[k] is None or r[k] >= 0, (k, r)
fill = {f["system"]: f for f in doc["fill"]}
for s in ("memcached", "redis", "store-tcp"):
    assert s in fill, f"no fill result for {s}"
    f = fill[s]
    assert f["readback_keys"] > 0 and 0 <= f["hit_rate"] <= 1, f
    assert f["readback_bad"] == 0, f
assert fill["store-tcp"]["util_samples"] > 0, fill["store-tcp"]
# The same DRAM with an SSD tier under it keeps what the DRAM-only store evicts.
ssd = fill["store+ssd"]
assert ssd["readback_bad"] == 0 and ssd["failed_puts"] == 0, ssd
assert ssd["hit_rate"] > fill["store-tcp"]["hit_rate"], (ssd, fill["store-tcp"])
# Issue #9's nine targets, then issue #41's nine small-object targets.
assert len(doc["targets"]) == 18, [t["name"] for t in doc["targets"]]
assert doc["targets"][9]["name"] == "get 64 KiB x8 b16 store-tcp vs memcached", doc["targets"][9]
print("JSON ok:", len(rows), "rows")
PY

err=$("$bin" --sizes=12Q 2>&1) && fail "bad size accepted"
echo "$err" | grep -q "sizes" || fail "bad size message: $err"
err=$("$bin" --systems=mysql 2>&1) && fail "unknown system accepted"
echo "$err" | grep -q "unknown 'mysql'" || fail "unknown system message: $err"
# Negative store client options are refused before any run (they would wrap
# in the unsigned options), and so are out-of-range ones, in the client's and
# its transport's words: exit 2, before any server starts.
for bad in --store_tcp_lanes=-1 --store_tcp_slice_kib=-1 --store_tcp_whole_lanes=-1 \
  --store_tcp_spread_min_kib=-1; do
  err=$("$bin" --quick --systems=store-tcp "$bad" 2>&1) && fail "$bad accepted"
  echo "$err" | grep -q -- "${bad%%=*} must be >= 0" || fail "$bad message: $err"
done
for bad in --store_tcp_lanes=0 --store_tcp_lanes=65 --store_tcp_slice_kib=2; do
  err=$("$bin" --quick --systems=store-tcp --fill=false "$bad" 2>&1)
  rc=$?
  [[ $rc -eq 2 ]] || fail "$bad: exit $rc, want 2 (before any run): $err"
  echo "$err" | grep -q -- "--store_tcp_\*: TcpTransport options: lanes_per_peer in \[1, 64\]" ||
    fail "$bad message: $err"
  echo "$err" | grep -q "^progress" && fail "$bad: a run started: $err"
done
err=$("$bin" --quick --systems=store-tcp --store_binary=/nonexistent 2>&1) && fail "missing store accepted"
echo "$err" | grep -q "nonexistent" || fail "missing store message: $err"
echo PASS
