"""MooncakeDistributedStore's API table, against a real master process and
client processes on loopback; every byte read is checked."""
import hashlib
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from conftest import LEASE_TTL_MS, new_store, pattern, start_master, stop, free_port
from mooncake.store import (BufferHandle, MooncakeDistributedStore, ReplicateConfig,
                            SoftPinAction)

OK, INTERNAL, BUFFER_OVERFLOW, NO_SPACE = 0, -1, -10, -200
INVALID_KEY, INVALID_PARAMS = -400, -600
NOT_FOUND, EXISTS, HAS_LEASE = -704, -705, -706
RPC_FAIL = -900


def registered(store, nbytes):
    buf = np.zeros(nbytes, dtype=np.uint8)
    assert store.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    return buf


# ---- setup, hostname, close ---------------------------------------------------------

def test_hostname_is_host_and_port_in_mooncakes_range(store):
    host, port = store.get_hostname().rsplit(":", 1)
    assert host == "127.0.0.1"
    assert 12300 <= int(port) < 14300


def test_local_hostname_with_port_is_used(master):
    port = free_port()
    s = new_store(master, host=f"127.0.0.1:{port}")
    assert s.get_hostname() == f"127.0.0.1:{port}"
    s.close()


def test_setup_from_dict_with_text_sizes(master):
    s = MooncakeDistributedStore()
    rc = s.setup({"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE",
                  "global_segment_size": "16MB", "local_buffer_size": "16 MB",
                  "protocol": "tcp", "master_server_addr": master})
    assert rc == 0, s.last_error()
    assert s.put("dict-key", b"v" * 100) == 0
    assert s.get("dict-key") == b"v" * 100
    s.remove_all()
    assert s.close() == 0


def test_setup_refuses_percentages_and_unknown_keys(master):
    s = MooncakeDistributedStore()
    assert s.setup({"global_segment_size": "50%", "master_server_addr": master}) != 0
    assert s.setup({"global_segment_sise": "16MB", "master_server_addr": master}) != 0
    assert s.setup("localhost", "P2PHANDSHAKE", "50%", 1 << 20, "tcp", "", master) != 0
    assert s.setup("localhost", "P2PHANDSHAKE", 1 << 20, 1 << 20, "udp", "", master) != 0


def test_close_twice_and_setup_again(master):
    s = new_store(master)
    assert s.put("again", b"x" * 10) == 0
    assert s.close() == 0
    assert s.close() == 0
    assert s.put("again2", b"y") < 0  # closed
    assert s.get("again") == b""
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", master) == 0
    assert s.health_check() == 0
    s.remove_all()
    s.close()


def test_setup_twice_without_close_is_refused(store, master):
    assert store.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", master) != 0
    assert store.health_check() == 0


def test_config_from_environment_and_file(master, tmp_path):
    cfg = tmp_path / "mooncake.json"
    cfg.write_text('{"local_hostname": "127.0.0.1", "global_segment_size": "16MB",'
                   ' "local_buffer_size": "8MB", "protocol": "tcp",'
                   ' "master_server_address": "127.0.0.1:1"}')
    code = ("from mooncake.store import MooncakeDistributedStore as S\n"
            "s = S(); rc = s.setup({})\n"
            "print(rc, s.put('envk', b'abc'), s.get('envk'), s.remove_all(), s.close())\n")
    env = dict(os.environ, MOONCAKE_CONFIG_PATH=str(cfg), MOONCAKE_MASTER=master)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.split()[:3] == ["0", "0", "b'abc'"], out.stdout + out.stderr


def test_qos_link_from_the_environment(master, monkeypatch):
    """MOONCAKE_QOS_LINK puts the store's TCP transfers on the host's shared
    link arbiter (its segment appears in /dev/shm); a link without its rate,
    or an unknown class, fails setup with the reason."""
    link = f"pytest_qos.{os.getpid()}"
    shm = f"/dev/shm/mooncake_qos.{link}"
    monkeypatch.setenv("MOONCAKE_TRANSPORTS", "tcp")
    monkeypatch.setenv("MOONCAKE_QOS_LINK", link)
    bad = MooncakeDistributedStore()
    assert bad.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", master) != OK
    assert "MOONCAKE_QOS_LINK_BYTES_PER_S" in bad.last_error(), bad.last_error()
    monkeypatch.setenv("MOONCAKE_QOS_LINK_BYTES_PER_S", str(10 ** 10))
    monkeypatch.setenv("MOONCAKE_QOS_CLASS", "urgent")
    bad = MooncakeDistributedStore()
    assert bad.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", master) != OK
    assert "MOONCAKE_QOS_CLASS" in bad.last_error(), bad.last_error()
    monkeypatch.setenv("MOONCAKE_QOS_CLASS", "critical")
    s = new_store(master, segment=16 << 20, buffer=16 << 20)
    try:
        assert os.path.exists(shm)
        value = pattern("qos/k", 300_000)
        assert s.put("qos/k", value) == OK
        assert s.get("qos/k") == value
    finally:
        s.remove_all()
        s.close()
        if os.path.exists(shm):
            os.unlink(shm)


# ---- writes ---------------------------------------------------------------------------

def test_put_get_buffer_types(store):
    values = {
        "bytes": b"\x00\x01abc" * 1000,
        "bytearray": bytearray(b"z" * 4097),
        "memoryview": memoryview(b"m" * 300),
        "numpy": np.arange(1024, dtype=np.float32),
    }
    for k, v in values.items():
        assert store.put(key=k, value=v, config=None) == 0
        assert store.get(k) == bytes(memoryview(v).cast("B"))


def test_put_of_existing_key_keeps_value_and_upsert_replaces(store):
    assert store.put("k1", b"first") == 0
    assert store.put("k1", b"second") == 0
    assert store.get("k1") == b"first"
    assert store.upsert("k1", b"third, longer") == 0
    assert store.get("k1") == b"third, longer"
    assert store.upsert("fresh", b"new") == 0
    assert store.get("fresh") == b"new"


def test_put_parts_stores_the_concatenation(store):
    header = bytes(range(28))
    kv = np.arange(4096, dtype=np.uint16)
    assert store.put_parts("parts", header, kv, b"tail") == 0
    assert store.get("parts") == header + kv.tobytes() + b"tail"
    assert store.put_parts("parts2", b"a", config=ReplicateConfig()) == 0


def test_put_batch_returns_one_code(store):
    keys = [f"pb{i}" for i in range(20)]
    vals = [pattern(k, 1000 + i) for i, k in enumerate(keys)]
    assert store.put_batch(keys, vals) == 0
    assert store.get_batch(keys) == vals
    assert store.put_batch(keys, vals[:-1]) == INVALID_PARAMS
    assert store.put_batch([], []) == 0


def test_put_from_and_batch_put_from(store):
    buf = registered(store, 1 << 20)
    buf[:] = np.frombuffer(pattern("pf", 1 << 20), dtype=np.uint8)
    base = buf.ctypes.data
    assert store.put_from("pf", base, 4096) == 0
    assert store.get("pf") == buf[:4096].tobytes()
    keys = ["bpf0", "bpf1", "bpf2"]
    codes = store.batch_put_from(keys, [base, base + 8192, base + 65536], [100, 200, 300])
    assert codes == [0, 0, 0]
    assert store.get("bpf1") == buf[8192:8392].tobytes()
    assert store.upsert_from("pf", base + 10, 50) == 0
    assert store.get("pf") == buf[10:60].tobytes()
    assert store.batch_upsert_from(["bpf0"], [base + 1], [7]) == [0]
    assert store.get("bpf0") == buf[1:8].tobytes()


def test_batch_calls_with_mismatched_lists_fail_every_entry(store):
    buf = registered(store, 4096)
    p = buf.ctypes.data
    assert store.batch_put_from(["a", "b"], [p], [1, 1]) == [INVALID_PARAMS] * 2
    assert store.batch_get_into(["a", "b"], [p, p], [1]) == [INVALID_PARAMS] * 2
    assert store.batch_put_from([], [], []) == []
    assert store.batch_get_into([], [], []) == []
    assert store.batch_is_exist([]) == []
    assert store.batch_remove([]) == []


def test_local_buffer_size_zero_put_fails_and_leaves_no_object(master):
    s = new_store(master, buffer=0)
    assert s.put("nobuf", b"x" * 100) == BUFFER_OVERFLOW
    assert s.is_exist("nobuf") == 0
    buf = registered(s, 4096)
    assert s.put_from("nobuf2", buf.ctypes.data, 100) == 0  # registered memory needs no staging
    s.remove_all()
    s.close()


def test_value_larger_than_staging_buffer(master):
    s = new_store(master, buffer=1 << 20)
    assert s.put("big", b"x" * (2 << 20)) == BUFFER_OVERFLOW
    assert s.is_exist("big") == 0
    s.close()


# ---- reads ----------------------------------------------------------------------------

def test_get_miss_is_empty_bytes_and_buffer_none(store):
    assert store.get("absent") == b""
    assert store.get_buffer("absent") is None
    assert store.get_batch(["absent"]) == [b""]
    assert store.batch_get_buffer(["absent"]) == [None]


def test_get_buffer_handle(store):
    v = pattern("gb", 100000)
    assert store.put("gb", v) == 0
    h = store.get_buffer("gb")
    assert isinstance(h, BufferHandle)
    assert h.size() == len(v) == len(h) == h.len()
    assert bytes(memoryview(h)) == v
    assert h.ptr() != 0
    hs = store.batch_get_buffer(["gb", "absent"])
    assert bytes(memoryview(hs[0])) == v and hs[1] is None


def test_get_into_sizes_and_errors(store):
    v = pattern("gi", 50000)
    assert store.put("gi", v) == 0
    buf = registered(store, 1 << 20)
    assert store.get_into("gi", buf.ctypes.data, buf.nbytes) == len(v)
    assert buf[:len(v)].tobytes() == v
    assert store.get_into("gi", buf.ctypes.data, 100) < 0          # too small
    assert store.get_into("absent", buf.ctypes.data, 100) == NOT_FOUND
    unregistered = np.zeros(1 << 20, dtype=np.uint8)
    assert store.get_into("gi", unregistered.ctypes.data, unregistered.nbytes) < 0
    assert store.get_into("gi", buf.ctypes.data + buf.nbytes - 10, 100) < 0  # past the buffer
    r = store.batch_get_into(["gi", "absent"], [buf.ctypes.data, buf.ctypes.data + 60000],
                             [60000, 60000])
    assert r[0] == len(v) and r[1] == NOT_FOUND


def test_get_into_ranges(store):
    a, b = pattern("ra", 10000), pattern("rb", 5000)
    assert store.put("ra", a) == 0 and store.put("rb", b) == 0
    buf0 = registered(store, 65536)
    buf1 = registered(store, 4096)
    res = store.get_into_ranges(
        [buf0.ctypes.data, buf1.ctypes.data],
        [["ra", "rb"], ["rb"]],
        [[[0, 100], [20000]], [[0]]],
        [[[0, 5000], [4000]], [[0]]],
        [[[50, 200], [1000]], [[4096]]])
    assert res == [[[50, 200], [1000]], [[4096]]]
    assert buf0[:50].tobytes() == a[:50]
    assert buf0[100:300].tobytes() == a[5000:5200]
    assert buf0[20000:21000].tobytes() == b[4000:5000]
    assert buf1[:4096].tobytes() == b[:4096]
    # Past the object's end, past the buffer, a missing key, mismatched shapes: that entry only.
    res = store.get_into_ranges(
        [buf1.ctypes.data],
        [["ra", "rb", "absent", "ra"]],
        [[[0], [4000], [0], [0, 1]]],
        [[[9999], [0], [0], [0]]],
        [[[2], [200], [10], [1, 1]]])
    assert res[0][0] == [INVALID_PARAMS]
    assert res[0][1] == [INVALID_PARAMS]
    assert res[0][2] == [NOT_FOUND]
    assert all(x == INVALID_PARAMS for x in res[0][3])


# ---- registration ---------------------------------------------------------------------

def test_register_and_unregister(store):
    buf = np.zeros(8192, dtype=np.uint8)
    p = buf.ctypes.data
    assert store.register_buffer(p, 8192) == 0
    assert store.register_buffer(p + 100, 10) < 0   # overlaps
    assert store.unregister_buffer(p + 1) < 0       # not a start
    assert store.unregister_buffer(p) == 0
    assert store.unregister_buffer(p) < 0
    assert store.register_buffer(p, 0) < 0


# ---- queries and removal --------------------------------------------------------------

def test_exist_size_and_batch_exist(store):
    assert store.put("e1", b"x" * 123) == 0
    assert store.is_exist("e1") == 1
    assert store.is_exist("e2") == 0
    assert store.get_size("e1") == 123
    assert store.get_size("e2") == NOT_FOUND
    keys = [f"be{i}" for i in range(300)]
    assert store.put_batch(keys[::2], [b"v"] * 150) == 0
    assert store.batch_is_exist(keys) == [1 if i % 2 == 0 else 0 for i in range(300)]


def test_remove_codes(store):
    assert store.put("r1", b"abc") == 0
    assert store.remove("r1") == 0
    assert store.remove("r1") == NOT_FOUND
    assert store.get("r1") == b""
    assert store.put_batch(["r2", "r3"], [b"a", b"b"]) == 0
    assert store.batch_remove(["r2", "r3", "r4"]) == [0, 0, NOT_FOUND]


def test_remove_while_another_client_holds_a_lease(store, other_client):
    assert store.put("leased", pattern("leased", 4096)) == 0
    size, digest = other_client.call("get leased").split()
    assert size == "4096" and digest == hashlib.sha256(pattern("leased", 4096)).hexdigest()
    assert store.remove("leased") == HAS_LEASE
    assert store.is_exist("leased") == 1
    time.sleep(LEASE_TTL_MS / 1000 + 0.3)
    assert store.remove("leased") == 0
    assert store.put("leased2", b"x" * 10) == 0
    other_client.call("get leased2")
    assert store.remove("leased2", force=True) == 0


def test_remove_by_regex_and_remove_all(store):
    keys = [f"rx_{i}" for i in range(10)] + ["other_1", "other_2"]
    assert store.put_batch(keys, [b"v"] * len(keys)) == 0
    assert store.remove_by_regex(r"rx_[0-4]") == 5
    assert store.batch_is_exist(keys) == [0] * 5 + [1] * 7
    assert store.remove_by_regex("(") < 0
    assert store.remove_all() == 7
    assert store.batch_is_exist(keys) == [0] * 12


# ---- ReplicateConfig ------------------------------------------------------------------

def test_replicate_config_fields_and_str():
    c = ReplicateConfig()
    assert c.replica_num == 1
    assert c.soft_pin_action == SoftPinAction.PRESERVE
    assert c.soft_pin_ttl_ms is None
    assert c.with_hard_pin is False
    assert c.preferred_segment == "" and c.preferred_segments == []
    assert c.prefer_alloc_in_same_node is False and c.group_ids == []
    c.replica_num = 2
    c.soft_pin_action = SoftPinAction.ENABLE
    c.soft_pin_ttl_ms = 1000
    c.preferred_segments = ["a:1"]
    s = str(c)
    assert "replica_num=2" in s and "ENABLE" in s and "1000" in s and "a:1" in s
    c.soft_pin_ttl_ms = None
    assert c.soft_pin_ttl_ms is None
    c.soft_pin_ttl_ms = 2 ** 63
    for bad in (-1, 2 ** 63 + 1, "10", 1.5):
        with pytest.raises(TypeError):
            c.soft_pin_ttl_ms = bad
    with pytest.raises(TypeError):
        c.replica_num = -1
    k = ReplicateConfig(replica_num=3, preferred_segment="h:1")
    assert k.replica_num == 3 and k.preferred_segment == "h:1"


def test_ttl_without_enable_is_invalid(store):
    c = ReplicateConfig()
    c.soft_pin_ttl_ms = 100
    assert store.put("ttl", b"x", c) == INVALID_PARAMS
    c.soft_pin_action = SoftPinAction.DISABLE
    assert store.put("ttl", b"x", c) == INVALID_PARAMS
    c.soft_pin_action = SoftPinAction.ENABLE
    assert store.put("ttl", b"x", c) == 0
    c = ReplicateConfig()
    c.replica_num = 0
    assert store.put("r0", b"x", c) == INVALID_PARAMS


def test_replicas_land_on_distinct_segments(master):
    a, b = new_store(master), new_store(master)
    try:
        c = ReplicateConfig()
        c.replica_num = 2
        v = pattern("two", 200000)
        assert a.put("two", v, c) == 0
        b.close()        # one of the two segments goes
        assert a.get("two") == v
        c1 = ReplicateConfig()
        c1.preferred_segment = a.get_hostname()
        assert a.put("pref", v, c1) == 0
        a.close()        # the only copy was in a's segment
        b = new_store(master)
        assert b.get("pref") == b""
        assert b.get("two") == b""  # both segments are gone now
    finally:
        b.remove_all()
        a.close()
        b.close()


def test_pins_survive_eviction(master):
    s = new_store(master, segment=8 << 20, buffer=8 << 20)
    try:
        hard = ReplicateConfig()
        hard.with_hard_pin = True
        soft = ReplicateConfig()
        soft.soft_pin_action = SoftPinAction.ENABLE
        v = pattern("pin", 512 << 10)
        assert s.put("hard", v, hard) == 0
        assert s.put("soft", v, soft) == 0
        for i in range(40):  # 20 MiB through an 8 MiB pool
            assert s.put(f"fill{i}", pattern(f"fill{i}", 512 << 10)) in (0, NO_SPACE)
        assert s.get("hard") == v
        assert s.get("soft") == v
    finally:
        s.remove_all()
        s.close()


# ---- bad input ------------------------------------------------------------------------

def test_wrong_types_raise_type_error(store):
    with pytest.raises(TypeError):
        store.put(123, b"x")
    with pytest.raises(TypeError):
        store.put("k", 123)
    with pytest.raises(TypeError):
        store.put("k", "a str is not bytes")
    with pytest.raises(TypeError):
        store.put("k", b"x", config="nope")
    with pytest.raises(TypeError):
        store.put("k", b"x", unknown=1)
    with pytest.raises(TypeError):
        store.get_into("k", "ptr", 1)
    with pytest.raises(TypeError):
        store.batch_get_into("k", [1], [1])
    with pytest.raises(TypeError):
        store.register_buffer(-1, 10)
    with pytest.raises(TypeError):
        store.put_batch(["a"], [object()])


def test_bad_nested_lists_and_sizes_raise_type_error_or_return_codes(store, master):
    with pytest.raises(TypeError):
        store.get_into_ranges([0], [[1]], [[[0]]], [[[0]]], [[[1]]])     # a key that is no str
    with pytest.raises(TypeError):
        store.get_into_ranges([0], [["k"]], [[[-1]]], [[[0]]], [[[1]]])  # a negative offset
    with pytest.raises(TypeError):
        store.get_into_ranges([0], ["k"], [[[0]]], [[[0]]], [[[1]]])     # not a list of lists
    s = MooncakeDistributedStore()
    assert s.setup({"global_segment_size": -1, "master_server_addr": master}) == INVALID_PARAMS
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", -1, 1 << 20, "tcp", "", master) == INVALID_PARAMS
    with pytest.raises(TypeError):
        s.setup({"global_segment_size": 1.5, "master_server_addr": master})


def test_bad_keys_sizes_and_pointers_return_codes(store):
    assert store.put("", b"x") == INVALID_KEY
    assert store.put("k" * 5000, b"x") == INVALID_KEY
    assert store.get("k" * 5000) == b""
    assert store.is_exist("") == INVALID_KEY
    assert store.remove("") == INVALID_KEY
    assert store.batch_is_exist(["ok", ""]) == [0, INVALID_KEY]
    assert store.put("empty", b"") == INVALID_PARAMS
    assert store.put_from("k", 12345, 10) == INVALID_PARAMS      # not registered
    assert store.get_into("k", 0, 10) < 0
    assert store.get_size("") == INVALID_KEY


def test_closed_store_returns_negative_codes(master):
    s = MooncakeDistributedStore()
    assert s.put("k", b"x") < 0
    assert s.get("k") == b""
    assert s.is_exist("k") < 0
    assert s.health_check() != 0
    assert s.remove_all() < 0
    assert s.batch_is_exist(["a", "b"]) == [INTERNAL, INTERNAL]
    assert s.get_hostname() == ""


def test_master_down_gives_rpc_fail_within_deadline():
    proc, addr = start_master()
    s = new_store(addr)
    assert s.put("before", b"x") == 0
    stop(proc)
    t = time.monotonic()
    assert s.is_exist("before") == RPC_FAIL
    assert s.put("after", b"y") == RPC_FAIL
    assert time.monotonic() - t < 2 * 2.5 + 1  # two calls, each within the 2 s RPC deadline
    assert s.health_check() != 0
    s.close()
    t = time.monotonic()
    assert MooncakeDistributedStore().setup("127.0.0.1", "P2PHANDSHAKE", 1 << 20, 1 << 20,
                                            "tcp", "", addr) == RPC_FAIL
    assert time.monotonic() - t < 3


def test_killed_client_process_leaves_master_serving(store, master):
    other = __import__("conftest").ClientProcess(master)
    assert other.call("put victim 10000") == "0"
    assert store.get("victim") == pattern("victim", 10000)
    other.proc.kill()
    other.proc.wait()
    assert store.put("survivor", b"s" * 1000) == 0
    assert store.get("survivor") == b"s" * 1000
    assert store.get("victim") in (b"", pattern("victim", 10000))  # never wrong bytes
    third = __import__("conftest").ClientProcess(master)
    try:
        assert third.call("put third 1000") == "0"
        assert store.get("third") == pattern("third", 1000)
    finally:
        third.close()


# ---- threads --------------------------------------------------------------------------

def test_threads_share_one_store(store):
    errors = []

    def work(t):
        try:
            for i in range(30):
                k = f"t{t}_{i}"
                v = pattern(k, 3000 + i)
                assert store.put(k, v) == 0
                assert store.get(k) == v
        except AssertionError as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
