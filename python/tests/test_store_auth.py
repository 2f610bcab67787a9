"""Access control end to end (docs/security.md): a master and a worker
(mooncake_store) with an auth token file, and Python clients that prove a
tenant's token through MOONCAKE_AUTH_TOKEN_FILE over the TCP transport. A
tenant reads its own objects and nothing of another tenant's; a client
without a token or with a wrong secret gets a clear refusal and no data; the
HTTP actions need the cluster secret."""
import os
import subprocess
import tempfile
import urllib.error
import urllib.request

import pytest

from conftest import BIN_DIR, new_store, stop
from test_store_relocation import wait_file

CLUSTER = "c0ffee00c0ffee00c0ffee00c0ffee00"
ALICE = "a11ce000a11ce000a11ce000a11ce000"
BOB = "b0b00000b0b00000b0b00000b0b00000"


def token_file(directory, name, lines):
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(f"{n} {s}\n" for n, s in lines))
    return path


@pytest.fixture(scope="module")
def cluster():
    tmp = tempfile.mkdtemp()
    server = token_file(tmp, "server.tokens",
                        [("cluster", CLUSTER), ("tenant:alice", ALICE), ("tenant:bob", BOB)])
    files = {
        "alice": token_file(tmp, "alice.tokens", [("tenant:alice", ALICE)]),
        "bob": token_file(tmp, "bob.tokens", [("tenant:bob", BOB)]),
        "wrong": token_file(tmp, "wrong.tokens", [("tenant:alice", "f" * 32)]),
    }
    store_bin = os.path.join(BIN_DIR, "mooncake_store")
    procs = []
    try:
        master_ready = os.path.join(tmp, "master.ready")
        master = subprocess.Popen(
            [store_bin, "--role=master", "--listen=127.0.0.1:0", "--http=127.0.0.1:0",
             "--tenant=alice:32M", "--tenant=bob:32M", f"--auth_token_file={server}",
             "--status_interval=0", f"--ready_file={master_ready}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        procs.append(master)
        wait_file(master_ready, master)
        fields = dict(line.split("=", 1) for line in open(master_ready).read().split())
        rpc = fields["rpc"]
        worker_ready = os.path.join(tmp, "worker.ready")
        worker = subprocess.Popen(
            [store_bin, "--role=worker", f"--master={rpc}", "--http=127.0.0.1:0",
             "--segment_bytes=32M", f"--auth_token_file={server}", "--status_interval=0",
             f"--ready_file={worker_ready}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        procs.append(worker)
        wait_file(worker_ready, worker)
        worker_fields = dict(line.split("=", 1) for line in open(worker_ready).read().split())
        yield {"rpc": rpc, "http": worker_fields["http"], "files": files}
    finally:
        for p in reversed(procs):
            stop(p)


def client_as(cluster, who, monkeypatch):
    """A pure client (no segment of its own) proving `who`'s token over TCP."""
    if who is None:
        monkeypatch.delenv("MOONCAKE_AUTH_TOKEN_FILE", raising=False)
    else:
        monkeypatch.setenv("MOONCAKE_AUTH_TOKEN_FILE", cluster["files"][who])
    monkeypatch.setenv("MOONCAKE_TRANSPORTS", "tcp")
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", cluster["rpc"])
    return s, rc


def test_tenants_read_their_own_objects_and_nothing_of_each_other(cluster, monkeypatch):
    alice, rc = client_as(cluster, "alice", monkeypatch)
    assert rc == 0, alice.last_error()
    bob, rc = client_as(cluster, "bob", monkeypatch)
    assert rc == 0, bob.last_error()
    try:
        value = os.urandom(256 << 10)
        assert alice.put("alice/doc", value) == 0, alice.last_error()
        assert alice.get("alice/doc") == value
        assert alice.is_exist("alice/doc") == 1
        # Bob can neither read, probe, remove nor overwrite it.
        assert bob.get("alice/doc") == b""
        assert bob.is_exist("alice/doc") == 0
        assert bob.remove("alice/doc") != 0
        # A put or upsert of a key another tenant holds stores nothing (the
        # Python API reports a stored key as success, as Mooncake's does).
        bob.put("alice/doc", b"x" * 1024)
        bob.upsert("alice/doc", b"x" * 1024)
        assert bob.get("alice/doc") == b""
        assert bob.remove_all() == 0  # removes only bob's (none)
        assert alice.get("alice/doc") == value
        # Bob's own objects work as usual.
        assert bob.put("bob/doc", b"b" * 4096) == 0, bob.last_error()
        assert bob.get("bob/doc") == b"b" * 4096
        assert alice.get("bob/doc") == b""
    finally:
        alice.remove_all()
        bob.remove_all()
        alice.close()
        bob.close()


def test_no_token_and_a_wrong_secret_get_a_clear_refusal_and_no_data(cluster, monkeypatch):
    alice, rc = client_as(cluster, "alice", monkeypatch)
    assert rc == 0, alice.last_error()
    try:
        assert alice.put("secret", b"s" * 8192) == 0, alice.last_error()
        anon, rc = client_as(cluster, None, monkeypatch)
        assert rc != 0
        assert "authentication required" in anon.last_error(), anon.last_error()
        assert anon.get("secret") == b""  # never set up: nothing to read with
        wrong, rc = client_as(cluster, "wrong", monkeypatch)
        assert rc != 0
        assert "wrong secret" in wrong.last_error(), wrong.last_error()
        assert alice.get("secret") == b"s" * 8192
    finally:
        alice.remove_all()
        alice.close()


def test_http_actions_need_the_cluster_secret(cluster):
    url = f"http://{cluster['http']}/trace?seconds=1"

    def post(headers):
        req = urllib.request.Request(url, data=b"", method="POST", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    status, body = post({})
    assert status == 401 and "Authorization: Bearer" in body, (status, body)
    assert post({"Authorization": f"Bearer {ALICE}"})[0] == 401  # a tenant's secret is not enough
    assert post({"Authorization": "Bearer "})[0] == 401
    assert post({"Authorization": f"Bearer {CLUSTER}"})[0] == 200
    # /metrics stays open for scrapers.
    with urllib.request.urlopen(f"http://{cluster['http']}/metrics", timeout=5) as r:
        assert r.status == 200
