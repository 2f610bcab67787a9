"""Benchmark of mooncake.engine.TransferEngine (docs/python.md, "Transfer engine").

Starts a peer process (this script with --peer: a TransferEngine holding a
64 MiB managed buffer, P2PHANDSHAKE), then measures in one run
batch_transfer_sync_write from Python into the peer for two shapes,
64 x 256 KiB and 16 x 4 MiB, beside the C++ baseline (cpp_transfer_baseline:
a bare TcpTransport with the same lanes per peer, owner in a forked process)
for the same shapes. Each figure is the median of --reps runs of --seconds;
GB/s is 1e9 bytes per second. The last batch of each shape is checked byte
for byte on the peer.

Run: bazel run -c opt //python:transfer_engine_benchmark -- [--seconds=2 --reps=3]
"""
import argparse
import hashlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = [(64, 256 << 10), (16, 4 << 20)]
PEER_BYTES = 64 << 20
LANES = 4  # TransferEngineOptions::lanes_per_peer


def run_peer():
    from mooncake.engine import TransferEngine
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    addr = e.allocate_managed_buffer(PEER_BYTES)
    assert addr != 0
    print(json.dumps({"name": f"127.0.0.1:{e.get_rpc_port()}", "addr": addr}), flush=True)
    for line in sys.stdin:
        parts = line.split()
        if parts and parts[0] == "digest":
            n = int(parts[1])
            print(hashlib.sha256(e.read_bytes_from_buffer(addr, n)).hexdigest(), flush=True)
    return 0


def python_gbps(engine, peer_name, peer_addr, src, n, piece, seconds):
    local = [src.ctypes.data + i * piece for i in range(n)]
    remote = [peer_addr + i * piece for i in range(n)]
    lengths = [piece] * n
    done = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        rc = engine.batch_transfer_sync_write(peer_name, local, remote, lengths)
        if rc != 0:
            raise RuntimeError(f"batch_transfer_sync_write returned {rc}")
        done += n * piece
    return done / (time.monotonic() - start) / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peer:
        return run_peer()

    from mooncake.engine import TransferEngine
    peer = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--peer"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    info = json.loads(peer.stdout.readline())
    engine = TransferEngine()
    assert engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    src = np.random.default_rng(1).integers(0, 256, PEER_BYTES, dtype=np.uint8)
    assert engine.register_memory(src.ctypes.data, src.nbytes) == 0

    py = {}
    for n, piece in SHAPES:
        python_gbps(engine, info["name"], info["addr"], src, n, piece, 0.2)  # warm-up
        py[(n, piece)] = statistics.median(
            python_gbps(engine, info["name"], info["addr"], src, n, piece, args.seconds)
            for _ in range(args.reps))
        peer.stdin.write(f"digest {n * piece}\n")
        peer.stdin.flush()
        got = peer.stdout.readline().strip()
        if got != hashlib.sha256(src[:n * piece].tobytes()).hexdigest():
            raise RuntimeError(f"peer bytes differ after {n} x {piece}")
    peer.stdin.close()
    peer.wait(timeout=30)
    del engine

    baseline = os.path.join(HERE, "cpp_transfer_baseline")
    out = subprocess.run([baseline, f"--seconds={args.seconds}", f"--reps={args.reps}",
                          f"--lanes={LANES}"], check=True, capture_output=True, text=True).stdout
    cpp = {}
    for m in re.finditer(r"shape=(\d+)x(\d+) gbps=([\d.]+)", out):
        cpp[(int(m.group(1)), int(m.group(2)))] = float(m.group(3))

    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} CPUs, "
          f"{platform.system()} {platform.release()}; loopback TCP, {LANES} lanes per peer")
    print(f"median of {args.reps} x {args.seconds:g} s; GB/s = 1e9 B/s")
    print(f"{'batch_transfer_sync_write':<28}{'Python GB/s':>12}{'C++ GB/s':>10}{'ratio':>8}")
    for n, piece in SHAPES:
        p, c = py[(n, piece)], cpp.get((n, piece), float("nan"))
        label = f"{n} x {piece >> 10} KiB" if piece < (1 << 20) else f"{n} x {piece >> 20} MiB"
        print(f"{label:<28}{p:>12.2f}{c:>10.2f}{p / c:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
