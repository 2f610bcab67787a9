"""Benchmark of the mooncake Python package (docs/python.md, "Performance").

Starts a real mooncake_master and a worker process (mooncake_store
--role=worker), puts the values from Python (MOONCAKE_TRANSPORTS=tcp, so
reads take TCP, not shared memory), then measures in one run:
  1. batch_get_into from Python, one thread, against the C++ client
     (cpp_batch_get_benchmark) reading the same batches: 64 x 256 KiB and
     16 x 4 MiB;
  2. the same from 8 Python threads (each its own buffer) against one thread,
     beside 8 C++ threads against one (what the machine allows); a
     1 x 64 KiB batch shows the scaling where round trips, not the CPU, bound it;
  3. batch_is_exist of 1,024 keys: keys/s and master RPCs per call.
Each figure is the median of --reps repetitions; ratios are paired per
repetition, and the median ratio is printed.

Run: bazel run -c opt //python:store_benchmark -- [--seconds=2 --reps=5]
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout_s=20):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} never opened")


def python_batch_get(store, keys, nbytes, seconds, threads):
    """GB/s of batch_get_into from `threads` Python threads, each reading the
    whole batch into its own registered buffer, for `seconds`."""
    bufs = []
    for _ in range(threads):
        b = np.zeros(len(keys) * nbytes, dtype=np.uint8)
        assert store.register_buffer(b.ctypes.data, b.nbytes) == 0
        bufs.append(b)
    done = [0] * threads
    bad = []
    start = time.monotonic()

    def run(t):
        base = bufs[t].ctypes.data
        ptrs = [base + i * nbytes for i in range(len(keys))]
        sizes = [nbytes] * len(keys)
        while time.monotonic() - start < seconds:
            r = store.batch_get_into(keys, ptrs, sizes)
            if any(x != nbytes for x in r):
                bad.append(r)
                return
            done[t] += 1

    ths = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    elapsed = time.monotonic() - start
    for b in bufs:
        store.unregister_buffer(b.ctypes.data)
    if bad:
        raise RuntimeError(f"a read failed: {bad[0][:4]}")
    return sum(done) * len(keys) * nbytes / elapsed / 1e9


def cpp_batch_get(binary, master, prefix, count, nbytes, seconds, threads=1):
    out = subprocess.run([binary, f"--master={master}", f"--prefix={prefix}", f"--count={count}",
                          f"--bytes={nbytes}", f"--seconds={seconds}", f"--threads={threads}"],
                         capture_output=True, text=True, timeout=seconds + 60)
    m = re.search(r"gbps=([0-9.]+)", out.stdout)
    if out.returncode != 0 or m is None:
        raise RuntimeError(f"C++ baseline failed: {out.stdout} {out.stderr}")
    return float(m.group(1))


def master_rpcs(metrics_port):
    """The master's served RPC count from its /metrics (all methods)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()
    total = 0
    for line in text.decode().splitlines():
        if line.startswith("mooncake_rpc_server_requests_total") or \
                line.startswith("mooncake_rpc_server_calls_total"):
            if 'method="BatchExists"' in line:
                total += int(float(line.rsplit(" ", 1)[1]))
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin_dir", default=os.environ.get("MOONCAKE_BIN_DIR", "tools"))
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=8)
    args = ap.parse_args()
    # Reads between processes on one host would take shared memory; measure
    # the network path (the C++ baseline inherits the same setting).
    os.environ["MOONCAKE_TRANSPORTS"] = "tcp"
    from mooncake.store import MooncakeDistributedStore

    mport, hport, wport = free_port(), free_port(), free_port()
    master_exe = os.path.join(args.bin_dir, "mooncake_master")
    procs = []
    if os.path.exists(master_exe):
        procs.append(subprocess.Popen([master_exe, f"--port={mport}",
                                       f"--metrics_port={hport}"], stdout=subprocess.DEVNULL))
    else:
        procs.append(subprocess.Popen([os.path.join(args.bin_dir, "mooncake_store"),
                                       "--role=master", f"--listen=127.0.0.1:{mport}",
                                       f"--http=127.0.0.1:{hport}", "--demo=false"],
                                      stdout=subprocess.DEVNULL))
    master = f"127.0.0.1:{mport}"
    try:
        wait_port(mport)
        procs.append(subprocess.Popen(
            [os.path.join(args.bin_dir, "mooncake_store"), "--role=worker", f"--master={master}",
             "--segment_bytes=512M", f"--http=127.0.0.1:{wport}",
             "--reserve_memory=false"], stdout=subprocess.DEVNULL))
        wait_port(wport)
        time.sleep(0.5)
        store = MooncakeDistributedStore()
        rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 64 << 20, "tcp", "", master)
        assert rc == 0, store.last_error()
        cpp = os.path.join(HERE, "cpp_batch_get_benchmark")
        print(f"machine: {os.cpu_count()} cores; {args.reps} reps of {args.seconds} s; "
              f"values held by a worker process, read over TCP")
        t = args.threads
        print(f"{'batch':>14} {'C++ GB/s':>9} {'Py 1T GB/s':>10} {'Py/C++':>7} "
              f"{f'Py {t}T GB/s':>11} {f'Py {t}T/1T':>10} {f'C++ {t}T/1T':>11}")
        for count, nbytes in ((64, 256 << 10), (16, 4 << 20), (1, 64 << 10)):
            prefix = f"b{count}x{nbytes}_"
            keys = [f"{prefix}{i}" for i in range(count)]
            data = np.random.default_rng(count).integers(0, 256, size=nbytes, dtype=np.uint8)
            for k in keys:
                assert store.put(k, data) == 0, k
            cpp_r, one_r, many_r, cpp_many_r = [], [], [], []
            for _ in range(args.reps):
                cpp_r.append(cpp_batch_get(cpp, master, prefix, count, nbytes, args.seconds))
                one_r.append(python_batch_get(store, keys, nbytes, args.seconds, 1))
                many_r.append(python_batch_get(store, keys, nbytes, args.seconds, t))
                cpp_many_r.append(cpp_batch_get(cpp, master, prefix, count, nbytes, args.seconds, t))
            ratio = statistics.median(o / c for o, c in zip(one_r, cpp_r))
            scale = statistics.median(m / o for m, o in zip(many_r, one_r))
            cpp_scale = statistics.median(m / o for m, o in zip(cpp_many_r, cpp_r))
            label = f"{count} x {nbytes >> 10} KiB"
            print(f"{label:>14} {statistics.median(cpp_r):9.3f} {statistics.median(one_r):10.3f} "
                  f"{ratio:7.2f} {statistics.median(many_r):11.3f} {scale:10.2f} "
                  f"{cpp_scale:11.2f}", flush=True)
        keys = [f"exist{i}" for i in range(1024)]
        assert store.put_batch(keys[::2], [b"x"] * 512) == 0
        rates, rpcs = [], []
        for _ in range(args.reps):
            before = master_rpcs(hport)
            n = 0
            start = time.monotonic()
            while time.monotonic() - start < args.seconds:
                r = store.batch_is_exist(keys)
                assert r[0] == 1 and r[1] == 0
                n += 1
            rates.append(n * 1024 / (time.monotonic() - start))
            rpcs.append((master_rpcs(hport) - before) / n)
        print(f"batch_is_exist of 1024 keys: {statistics.median(rates):,.0f} keys/s "
              f"(median of {args.reps}); BatchExists RPCs per call: {statistics.median(rpcs):.2f}")
        store.remove_all()
        store.close()
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
