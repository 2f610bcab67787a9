"""Fixtures for the mooncake Python package's tests: real processes on
loopback (a mooncake_master, client processes), on free ports, stopped at the
end. MOONCAKE_BIN_DIR names the folder holding the programs (the test runner
sets it to the build tree's tools/)."""
import os
import socket
import subprocess
import sys
import time

import pytest

BIN_DIR = os.environ.get("MOONCAKE_BIN_DIR", "tools")
HERE = os.path.dirname(os.path.abspath(__file__))

# The master's read lease in these tests: short, so lease tests run quickly.
LEASE_TTL_MS = 800


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port} after {timeout_s} s")


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_master(lease_ttl_ms=LEASE_TTL_MS):
    port = free_port()
    cmd = [os.path.join(BIN_DIR, "mooncake_master"), f"--port={port}",
           f"--default_kv_lease_ttl={lease_ttl_ms}", f"--metrics_port={free_port()}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_port(port, proc)
    return proc, f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def master():
    proc, addr = start_master()
    yield addr
    stop(proc)


def new_store(master_addr, segment=64 << 20, buffer=64 << 20, host="127.0.0.1"):
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    rc = s.setup(host, "P2PHANDSHAKE", segment, buffer, "tcp", "", master_addr)
    assert rc == 0, (rc, s.last_error())
    return s


@pytest.fixture
def store(master):
    s = new_store(master)
    yield s
    s.remove_all()
    s.close()


class ClientProcess:
    """Another client process (client_proc.py) that takes one command a line
    on stdin and answers one line on stdout."""

    def __init__(self, master_addr, segment=64 << 20):
        env = dict(os.environ)
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "client_proc.py"), master_addr, str(segment)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.hostname = self.call("hostname")

    def call(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        out = self.proc.stdout.readline()
        if not out:
            raise RuntimeError(f"client process died (rc {self.proc.poll()})")
        return out.rstrip("\n")

    def close(self):
        """Asks the process to close its store (its segment leaves the pool) and exit."""
        if self.proc.poll() is None:
            try:
                self.call("quit")
                self.proc.wait(timeout=20)
            except (RuntimeError, BrokenPipeError, subprocess.TimeoutExpired):
                pass
        stop(self.proc)


@pytest.fixture
def other_client(master):
    c = ClientProcess(master)
    yield c
    c.close()


def pattern(key, size):
    """Deterministic bytes for a key (every byte checked on read)."""
    import hashlib
    seed = hashlib.sha256(key.encode()).digest()
    reps = size // len(seed) + 1
    return (seed * reps)[:size]
