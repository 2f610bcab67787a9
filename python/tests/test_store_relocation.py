"""Relocation end to end: a master with --relocation=on and a worker process
(both mooncake_store), and a client that fragments the worker's segment. The
put that needs a contiguous range is served after the worker has copied the
moved objects within its segment: nothing is evicted, and every object reads
back its own bytes."""
import os
import random
import subprocess
import tempfile
import time
import urllib.request

from conftest import BIN_DIR, new_store, stop

KIB = 1 << 10
MIB = 1 << 20


def value(key, size):
    return random.Random(key).randbytes(size)


def metric(http, name):
    text = urllib.request.urlopen(f"http://{http}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def metrics_text(http):
    text = urllib.request.urlopen(f"http://{http}/metrics", timeout=5).read().decode()
    return "\n".join(line for line in text.splitlines()
                     if not line.startswith("#") and ("compaction" in line or "relocat" in line
                                                      or "evict" in line or "used_bytes" in line))


def wait_file(path, proc, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before it was ready")
        if os.path.exists(path):
            return
        time.sleep(0.05)
    raise RuntimeError(f"no ready file {path} after {timeout_s} s")


def test_a_fragmented_put_is_served_by_compaction_not_eviction():
    store_bin = os.path.join(BIN_DIR, "mooncake_store")
    tmp = tempfile.mkdtemp()
    procs = []
    try:
        master_ready = os.path.join(tmp, "master.ready")
        master = subprocess.Popen(
            [store_bin, "--role=master", "--listen=127.0.0.1:0", "--http=127.0.0.1:0",
             "--relocation=on", "--status_interval=0", f"--ready_file={master_ready}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        procs.append(master)
        wait_file(master_ready, master)
        fields = dict(line.split("=", 1) for line in open(master_ready).read().split())
        rpc, http = fields["rpc"], fields["http"]
        ready = os.path.join(tmp, "worker.ready")
        worker = subprocess.Popen(
            [store_bin, "--role=worker", f"--master={rpc}", "--http=",
             "--segment_bytes=8M", "--status_interval=0", f"--ready_file={ready}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        procs.append(worker)
        wait_file(ready, worker)

        s = new_store(rpc, segment=0)
        try:
            # 64 x 100 KiB, then every other one removed: 3.1 MiB free in
            # 100 KiB holes, and the tail of the 8 MiB segment.
            small = [f"small-{i}" for i in range(64)]
            for k in small:
                assert s.put(k, value(k, 100 * KIB)) == 0, k
            for k in small[0::2]:
                assert s.remove(k) == 0, k
            # The first 1.5 MiB fits the tail; the second fits nowhere
            # without moving small objects.
            for k in ("big-0", "big-1"):
                assert s.put(k, value(k, 1536 * KIB)) == 0, k
            deadline = time.monotonic() + 10
            while (metric(http, "mooncake_master_relocations_total") < 1
                   and time.monotonic() < deadline):
                time.sleep(0.05)
            assert metric(http, "mooncake_master_relocations_total") >= 1, metrics_text(http)
            assert metric(http, "mooncake_master_evictions_total") == 0, metrics_text(http)
            for k in small[1::2]:
                assert s.get(k) == value(k, 100 * KIB), k
            for k in ("big-0", "big-1"):
                assert s.get(k) == value(k, 1536 * KIB), k
            done = 'mooncake_master_compactions_total{outcome="done"}'
            deadline = time.monotonic() + 10
            while metric(http, done) < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert metric(http, done) >= 1
            assert metric(http, "mooncake_master_relocations_failed_total") == 0
        finally:
            s.remove_all()
            s.close()
    finally:
        for p in reversed(procs):
            stop(p)
