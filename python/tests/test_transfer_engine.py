"""mooncake.engine.TransferEngine against peer engines in other processes
(te_peer.py) on loopback: every byte checked by digest on the peer side."""
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from conftest import BIN_DIR, HERE, free_port, stop, wait_port
from mooncake.engine import TransferEngine, TransferOpcode

MiB = 1 << 20
PEER_BYTES = 64 * MiB + MiB


def pattern(seed, size):
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def digest(arr):
    return hashlib.sha256(arr.tobytes()).hexdigest()


class Peer:
    """A te_peer.py process: one managed buffer of `size` bytes at self.addr."""

    def __init__(self, name="127.0.0.1", metadata="P2PHANDSHAKE", size=PEER_BYTES):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "te_peer.py"), name, metadata, str(size)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        info = json.loads(self.proc.stdout.readline() or "{}")
        assert "addr" in info, f"peer failed to start: {info}"
        self.rpc_port, self.addr, self.len, self.first = (
            info["rpc_port"], info["addr"], info["len"], info["first"])
        self.name = name if metadata != "P2PHANDSHAKE" else f"127.0.0.1:{self.rpc_port}"

    def call(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        out = self.proc.stdout.readline()
        if not out:
            raise RuntimeError(f"peer died (rc {self.proc.poll()})")
        return out.strip()

    def digest(self, off, n):
        return self.call(f"digest {off} {n}")

    def close(self):
        if self.proc.poll() is None:
            try:
                self.call("quit")
                self.proc.wait(timeout=10)
            except (RuntimeError, BrokenPipeError, subprocess.TimeoutExpired):
                pass
        stop(self.proc)


@pytest.fixture(scope="module")
def peer():
    p = Peer()
    yield p
    p.close()


@pytest.fixture
def engine():
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    return e


def registered(engine, size, seed=None):
    buf = pattern(seed, size) if seed is not None else np.zeros(size, dtype=np.uint8)
    assert engine.register_memory(buf.ctypes.data, buf.nbytes) == 0
    return buf


@pytest.mark.parametrize("size", [1 * MiB, 16 * MiB, 64 * MiB])
def test_sync_write_then_read_every_byte(engine, peer, size):
    src = registered(engine, size, seed=size)
    assert engine.transfer_sync_write(peer.name, src.ctypes.data, peer.addr + 4096, size) == 0
    assert peer.digest(4096, size) == digest(src)
    back = registered(engine, size)
    assert engine.transfer_sync_read(peer.name, back.ctypes.data, peer.addr + 4096, size) == 0
    assert np.array_equal(back, src)


def test_batch_sync_write_and_read_scattered(engine, peer):
    n, piece = 64, 256 * 1024
    src = registered(engine, n * piece, seed=11)
    # Reversed placement on the peer, so a mix-up of pieces shows.
    remote = [peer.addr + (n - 1 - i) * piece for i in range(n)]
    local = [src.ctypes.data + i * piece for i in range(n)]
    assert engine.batch_transfer_sync_write(peer.name, local, remote, [piece] * n) == 0
    for i in (0, 17, n - 1):
        assert peer.digest((n - 1 - i) * piece, piece) == digest(src[i * piece:(i + 1) * piece])
    back = registered(engine, n * piece)
    local_back = [back.ctypes.data + i * piece for i in range(n)]
    assert engine.batch_transfer_sync_read(peer.name, local_back, remote, [piece] * n) == 0
    assert np.array_equal(back, src)
    assert engine.batch_transfer_sync_write(peer.name, [], [], []) == 0


def test_batch_async_and_status(engine, peer):
    n, piece = 16, 64 * 1024
    src = registered(engine, n * piece, seed=21)
    local = [src.ctypes.data + i * piece for i in range(n)]
    remote = [peer.addr + i * piece for i in range(n)]
    ids = [engine.batch_transfer_async_write(peer.name, local[:8], remote[:8], [piece] * 8),
           engine.batch_transfer_async_write(peer.name, local[8:], remote[8:], [piece] * 8)]
    assert all(i != 0 for i in ids) and ids[0] != ids[1]
    assert engine.get_batch_transfer_status(ids) == 0
    assert peer.digest(0, n * piece) == digest(src)
    assert engine.get_batch_transfer_status(ids) < 0, "ids are released once collected"
    back = registered(engine, n * piece)
    rid = engine.batch_transfer_async_read(peer.name, [back.ctypes.data], [peer.addr], [n * piece])
    assert rid != 0
    assert engine.get_batch_transfer_status([rid]) == 0
    assert np.array_equal(back, src)
    oid = engine.batch_transfer_async(peer.name, [back.ctypes.data], [peer.addr], [piece],
                                      TransferOpcode.Read)
    assert oid != 0 and engine.get_batch_transfer_status([oid]) == 0


def test_transfer_submit_write_and_check_status(engine, peer):
    src = registered(engine, 2 * MiB, seed=31)
    bid = engine.transfer_submit_write(peer.name, src.ctypes.data, peer.addr + MiB, src.nbytes)
    assert bid != 0
    deadline = time.monotonic() + 10
    status = 0
    while status == 0 and time.monotonic() < deadline:
        status = engine.transfer_check_status(bid)
    assert status == 1
    assert peer.digest(MiB, src.nbytes) == digest(src)
    bid = engine.transfer_submit_write(peer.name, src.ctypes.data, peer.addr, 4096)
    assert bid != 0 and engine.get_batch_transfer_status([bid]) == 0
    assert engine.transfer_check_status(bid) == -1, "released"


def test_sync_and_batch_with_opcode(engine, peer):
    src = registered(engine, 8192, seed=41)
    assert engine.transfer_sync(peer.name, src.ctypes.data, peer.addr, 8192,
                                TransferOpcode.Write) == 0
    back = registered(engine, 8192)
    assert engine.batch_transfer_sync(peer.name, [back.ctypes.data], [peer.addr], [8192],
                                      TransferOpcode.READ) == 0
    assert np.array_equal(back, src)


def test_p2p_handshake_binds_the_named_port():
    port = free_port()
    p = Peer(name=f"127.0.0.1:{port}")
    try:
        assert p.rpc_port == port
        e = TransferEngine()
        assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        assert e.get_rpc_port() > 0 and e.get_rpc_port() != port
        assert e.send_probe(f"127.0.0.1:{port}") == 0
        src = registered(e, MiB, seed=51)
        assert e.transfer_sync_write(f"127.0.0.1:{port}", src.ctypes.data, p.addr, MiB) == 0
        assert p.digest(0, MiB) == digest(src)
    finally:
        p.close()


def test_http_metadata_server_resolves_names():
    mport = free_port()
    server = subprocess.Popen([os.path.join(BIN_DIR, "mooncake_http_metadata_server"),
                               f"--port={mport}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(mport, server)
        url = f"http://127.0.0.1:{mport}/metadata"
        # Names, not addresses: the rpc ports are whatever each engine got.
        p = Peer(name="127.0.0.1:17001", metadata=url, size=4 * MiB)
        e = TransferEngine()
        assert e.initialize("127.0.0.1:17002", url, "tcp", "") == 0
        with socket.create_connection(("127.0.0.1", mport)) as s:
            s.sendall(b"GET /metadata?key=mooncake%2Frpc_meta%2F127.0.0.1%3A17001 HTTP/1.1\r\n"
                      b"Host: x\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := s.recv(4096):
                answer += chunk
        meta = json.loads(answer.split(b"\r\n\r\n", 1)[1])
        assert meta == {"ip_or_host_name": "127.0.0.1", "rpc_port": p.rpc_port}
        assert e.get_first_buffer_address("127.0.0.1:17001") == p.addr
        src = registered(e, 4 * MiB, seed=61)
        assert e.transfer_sync_write("127.0.0.1:17001", src.ctypes.data, p.addr, src.nbytes) == 0
        assert p.digest(0, src.nbytes) == digest(src)
        assert e.send_probe("127.0.0.1:17001") == 0
        assert e.send_probe("127.0.0.1:17003") != 0
        p.close()  # deletes its key
        assert e.send_probe("127.0.0.1:17001") != 0
        assert e.transfer_sync_write("127.0.0.1:17001", src.ctypes.data, p.addr, 16) < 0
    finally:
        stop(server)


@pytest.mark.skipif(shutil.which("etcd") is None,
                    reason="etcd is not installed (Debian package etcd-server)")
def test_etcd_metadata_server(tmp_path):
    client_port, peer_port = free_port(), free_port()
    etcd = subprocess.Popen(
        ["etcd", "--data-dir", str(tmp_path / "etcd"),
         f"--listen-client-urls=http://127.0.0.1:{client_port}",
         f"--advertise-client-urls=http://127.0.0.1:{client_port}",
         f"--listen-peer-urls=http://127.0.0.1:{peer_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(client_port, etcd)
        p = Peer(name="127.0.0.1:18001", metadata=f"127.0.0.1:{client_port}", size=MiB)
        e = TransferEngine()
        assert e.initialize("127.0.0.1:18002", f"etcd://127.0.0.1:{client_port}", "tcp", "") == 0
        src = registered(e, MiB, seed=71)
        assert e.transfer_sync_write("127.0.0.1:18001", src.ctypes.data, p.addr, MiB) == 0
        assert p.digest(0, MiB) == digest(src)
        p.close()
        assert e.send_probe("127.0.0.1:18001") != 0
    finally:
        stop(etcd)


def test_first_buffer_address_of_self_and_peer(engine, peer):
    me = f"127.0.0.1:{engine.get_rpc_port()}"
    assert engine.get_first_buffer_address(me) == 0
    addr = engine.allocate_managed_buffer(MiB)
    assert addr != 0
    assert engine.get_first_buffer_address(me) == addr
    assert engine.get_first_buffer_address(peer.name) == peer.addr == peer.first
    assert engine.get_first_buffer_address("127.0.0.1:1") == 0
    assert engine.free_managed_buffer(addr, MiB) == 0
    assert engine.get_first_buffer_address(me) == 0


def test_write_outside_the_peers_memory_is_refused(engine, peer):
    assert peer.call(f"fill {peer.len - MiB} {MiB} 81") == "ok"
    before = peer.digest(peer.len - MiB, MiB)
    src = registered(engine, 8192, seed=82)
    # Crosses the end of the peer's buffer: refused, nothing written.
    assert engine.transfer_sync_write(peer.name, src.ctypes.data, peer.addr + peer.len - 4096,
                                      8192) < 0
    # Before its start and past its end: in no registered buffer.
    assert engine.transfer_sync_write(peer.name, src.ctypes.data, peer.addr - 8192, 4096) < 0
    assert engine.transfer_sync_write(peer.name, src.ctypes.data, peer.addr + peer.len, 16) < 0
    assert engine.transfer_sync_read(peer.name, src.ctypes.data, peer.addr + peer.len - 1, 2) < 0
    assert engine.batch_transfer_async_write(peer.name, [src.ctypes.data],
                                             [peer.addr + peer.len], [16]) == 0
    assert peer.digest(peer.len - MiB, MiB) == before
    # A buffer the peer registers later is found (the handshake is refreshed).
    later = int(peer.call(f"register {MiB}"))
    assert engine.transfer_sync_write(peer.name, src.ctypes.data, later + 100, 8192) == 0


def test_unknown_peer(engine):
    buf = registered(engine, 4096)
    assert engine.batch_transfer_async_write("127.0.0.1:1", [buf.ctypes.data], [4096], [16]) == 0
    assert engine.transfer_submit_write("127.0.0.1:1", buf.ctypes.data, 4096, 16) == 0
    assert engine.transfer_sync_write("127.0.0.1:1", buf.ctypes.data, 4096, 16) < 0
    assert engine.send_probe("127.0.0.1:1") != 0
    assert engine.send_probe("not-an-address") != 0


def test_peer_killed_fails_fast(engine):
    p = Peer(size=4 * MiB)
    try:
        src = registered(engine, MiB, seed=91)
        assert engine.transfer_sync_write(p.name, src.ctypes.data, p.addr, MiB) == 0
        p.proc.send_signal(signal.SIGKILL)
        p.proc.wait()
        start = time.monotonic()
        assert engine.transfer_sync_write(p.name, src.ctypes.data, p.addr, MiB) < 0
        assert engine.transfer_sync_read(p.name, src.ctypes.data, p.addr, MiB) < 0
        assert engine.batch_transfer_async_write(p.name, [src.ctypes.data], [p.addr], [MiB]) == 0
        assert engine.send_probe(p.name) != 0
        assert time.monotonic() - start < 5
    finally:
        stop(p.proc)


def test_blocking_call_releases_the_gil(engine):
    # A listener that never answers: the handshake blocks until its timeout.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    result = []
    t = threading.Thread(
        target=lambda: result.append(engine.send_probe(f"127.0.0.1:{silent.getsockname()[1]}")))
    t.start()
    time.sleep(0.2)
    ticks = 0
    start = time.monotonic()
    while t.is_alive() and time.monotonic() - start < 1.0:
        ticks += 1
    t.join(timeout=30)
    silent.close()
    assert result and result[0] != 0
    assert ticks > 10000, "Python code runs while the engine call blocks"


def test_registration_codes(engine):
    buf = np.zeros(MiB, dtype=np.uint8)
    assert engine.register_memory(buf.ctypes.data, buf.nbytes) == 0
    assert engine.register_memory(buf.ctypes.data + 100, 10) == -7  # ERR_ADDRESS_OVERLAPPED
    assert engine.unregister_memory(buf.ctypes.data + 1) == -3  # ERR_ADDRESS_NOT_REGISTERED
    assert engine.register_memory(0, 10) == -1
    assert engine.unregister_memory(buf.ctypes.data) == 0
    a, b = np.zeros(4096, np.uint8), np.zeros(4096, np.uint8)
    assert engine.batch_register_memory([a.ctypes.data, b.ctypes.data], [4096, 4096]) == 0
    assert engine.batch_unregister_memory([a.ctypes.data, b.ctypes.data]) == 0
    assert engine.register_memory(buf.ctypes.data, 16, "cuda:0") == -1
    assert engine.allocate_managed_buffer(0) == 0
    assert engine.free_managed_buffer(buf.ctypes.data, 16) == -3


def test_local_byte_helpers(engine):
    addr = engine.allocate_managed_buffer(4096)
    assert engine.write_bytes_to_buffer(addr, b"hello world", 11) == 0
    assert engine.read_bytes_from_buffer(addr, 11) == b"hello world"
    assert engine.write_bytes_to_buffer(addr, bytearray(b"HE"), 2) == 0
    assert engine.read_bytes_from_buffer(addr, 5) == b"HEllo"
    assert engine.write_bytes_to_buffer(addr, b"ab", 3) == -1, "length past the data"
    assert engine.write_bytes_to_buffer(0, b"ab", 2) == -1
    with pytest.raises(ValueError):
        engine.read_bytes_from_buffer(0, 4)
    assert engine.free_managed_buffer(addr, 4096) == 0


def test_wrong_argument_types_raise_type_error(engine):
    with pytest.raises(TypeError):
        engine.transfer_sync_write("127.0.0.1:1", "0x10", 16, 16)
    with pytest.raises(TypeError):
        engine.transfer_sync_write(None, 16, 16, 16)
    with pytest.raises(TypeError):
        engine.transfer_sync_read("127.0.0.1:1", -1, 16, 16)
    with pytest.raises(TypeError):
        engine.batch_transfer_sync_write("127.0.0.1:1", ["a"], [1], [1])
    with pytest.raises(TypeError):
        engine.batch_transfer_async_read("127.0.0.1:1", 1, [1], [1])
    with pytest.raises(TypeError):
        engine.get_batch_transfer_status(5)
    with pytest.raises(TypeError):
        engine.register_memory(1.5, 10)
    with pytest.raises(TypeError):
        engine.write_bytes_to_buffer(16, "text", 4)
    with pytest.raises(TypeError):
        engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp")


def test_mismatched_lists_and_bad_lengths(engine, peer):
    buf = registered(engine, 4096)
    assert engine.batch_transfer_sync_write(peer.name, [buf.ctypes.data], [], [16]) < 0
    assert engine.batch_transfer_async_write(peer.name, [buf.ctypes.data], [peer.addr], []) == 0
    assert engine.transfer_sync_write(peer.name, buf.ctypes.data, peer.addr, 0) < 0
    assert engine.transfer_sync_write(peer.name, 0, peer.addr, 16) < 0


def test_initialize_refusals():
    e = TransferEngine()
    assert e.get_rpc_port() == 0
    assert e.register_memory(4096, 4096) == -1, "before initialize"
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == -1
    assert e.initialize("127.0.0.1", "redis://127.0.0.1:1", "tcp", "") == -1
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == -1, "twice"
    assert TransferEngine.TransferOpcode.Write == TransferOpcode.WRITE
