"""mooncake.store against an HA master cluster (docs/ha.md): two
mooncake_master --enable_ha on a real etcd; the client's master_server_addr is
etcd://...; the leader is SIGKILLed and the client's objects stay readable."""
import os
import shutil
import signal
import subprocess
import time

import pytest

from conftest import BIN_DIR, free_port, new_store, pattern, stop, wait_port

pytestmark = pytest.mark.skipif(shutil.which("etcd") is None,
                                reason="etcd is not installed (Debian package etcd-server)")


@pytest.fixture
def etcd(tmp_path):
    client_port, peer_port = free_port(), free_port()
    proc = subprocess.Popen(
        ["etcd", "--data-dir", str(tmp_path / "etcd"),
         "--listen-client-urls", f"http://127.0.0.1:{client_port}",
         "--advertise-client-urls", f"http://127.0.0.1:{client_port}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
         "--initial-cluster", f"default=http://127.0.0.1:{peer_port}",
         "--election-timeout=500", "--heartbeat-interval=100"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(client_port, proc)
    yield f"127.0.0.1:{client_port}"
    stop(proc)


def start_ha_master(etcd_addr, cluster):
    port = free_port()
    cmd = [os.path.join(BIN_DIR, "mooncake_master"), f"--port={port}",
           f"--metrics_port={free_port()}", "--enable_ha", "--ha_backend_type=etcd",
           f"--ha_backend_connstring={etcd_addr}", f"--cluster_id={cluster}",
           "--ha_lease_ttl_ms=1000"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_port(port, proc)
    return proc, f"127.0.0.1:{port}"


def leader_of(etcd_addr, cluster):
    out = subprocess.run(["etcdctl", f"--endpoints={etcd_addr}", "get", "--print-value-only",
                          f"/mooncake/ha/{cluster}/leader"],
                         env=dict(os.environ, ETCDCTL_API="3"), capture_output=True, text=True)
    return out.stdout.strip()


def wait_leader(etcd_addr, cluster, not_addr=None, timeout_s=15.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        addr = leader_of(etcd_addr, cluster)
        if addr and addr != not_addr:
            return addr
        time.sleep(0.05)
    raise RuntimeError("no leader elected")


@pytest.mark.skipif(shutil.which("etcdctl") is None, reason="etcdctl is not installed")
def test_objects_survive_a_killed_leader(etcd):
    masters = [start_ha_master(etcd, "pyha") for _ in range(2)]
    try:
        leader = wait_leader(etcd, "pyha")
        store = new_store(f"etcd://{etcd}/pyha")
        try:
            keys = [f"ha-{i}" for i in range(20)]
            for k in keys:
                assert store.put(k, pattern(k, 4096 + len(k))) == 0
            victim = next(p for p, a in masters if a == leader)
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            start = time.monotonic()
            wait_leader(etcd, "pyha", not_addr=leader)
            for k in keys:
                assert store.get(k) == pattern(k, 4096 + len(k)), k
            rto = time.monotonic() - start
            assert store.put("after-failover", b"x" * 1000) == 0
            assert store.get("after-failover") == b"x" * 1000
            print(f"reads served again {rto:.2f} s after the leader was killed")
        finally:
            store.close()
    finally:
        for p, _ in masters:
            stop(p)


def test_bad_ha_address_is_refused(etcd):
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    # A cluster with no master: setup fails with a clear code, no hang past its timeout.
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "",
                 f"etcd://{etcd}/nobody")
    assert rc != 0
    s2 = MooncakeDistributedStore()
    assert s2.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "",
                    f"etcd://{etcd}/bad name") != 0
