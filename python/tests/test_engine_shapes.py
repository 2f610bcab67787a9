"""The call shapes inference engines make against Mooncake Store, run against
a real master and two client processes; every byte checked."""
import os
import subprocess
import sys
import textwrap

import numpy as np

from conftest import BIN_DIR, free_port, new_store, pattern, stop, wait_port
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

PAGE_BYTES = 16 << 10
PAGES = 64

# The second process of the HiCache test: reads the pages the first stored
# into its own registered host pool, and reports the leading complete pages
# and a digest of what it read.
HICACHE_READER = textwrap.dedent("""
    import hashlib, sys
    import numpy as np
    from mooncake.store import MooncakeDistributedStore
    master, prefix, n, page = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 32 << 20, 16 << 20, "tcp", "", master) == 0
    pool = np.zeros((n, 2, page), dtype=np.uint8)
    assert s.register_buffer(pool.ctypes.data, pool.nbytes) == 0
    keys, ptrs, sizes = [], [], []
    for i in range(n):
        for j, kv in enumerate(("k", "v")):
            keys.append(f"{prefix}_{i:08x}_0_{kv}")
            ptrs.append(pool[i, j].ctypes.data)
            sizes.append(page)
    got = s.batch_get_into(keys, ptrs, sizes)
    hits = [g > 0 for g in got]
    leading = 0
    while leading < n and hits[2 * leading] and hits[2 * leading + 1]:
        leading += 1
    print(leading, hashlib.sha256(pool[:leading].tobytes()).hexdigest())
    s.close()
""")


def test_sglang_hicache_shape(master):
    store = new_store(master)
    try:
        pool = np.random.default_rng(7).integers(0, 256, size=(PAGES, 2, PAGE_BYTES),
                                                 dtype=np.uint8)
        assert store.register_buffer(pool.ctypes.data, pool.nbytes) == 0
        prefix = "model-x"

        def page_keys(i):
            return [f"{prefix}_{i:08x}_0_k", f"{prefix}_{i:08x}_0_v"]

        def backup(pages):
            keys, ptrs, sizes = [], [], []
            for i in pages:
                for j, key in enumerate(page_keys(i)):
                    keys.append(key)
                    ptrs.append(pool[i, j].ctypes.data)
                    sizes.append(PAGE_BYTES)
            exist = store.batch_is_exist(keys)
            missing = [n for n, e in enumerate(exist) if e != 1]
            codes = store.batch_put_from([keys[n] for n in missing], [ptrs[n] for n in missing],
                                         [sizes[n] for n in missing])
            assert codes == [0] * len(missing)
            return len(missing)

        assert backup(range(40)) == 80
        assert backup(range(48)) == 16          # only the 8 missing pages go out
        # Another process reads the prefix back into its own host pool.
        out = subprocess.run([sys.executable, "-c", HICACHE_READER, master, prefix, str(PAGES),
                              str(PAGE_BYTES)], capture_output=True, text=True, timeout=120)
        leading, digest = out.stdout.split()
        assert int(leading) == 48, out.stderr
        import hashlib
        assert digest == hashlib.sha256(pool[:48].tobytes()).hexdigest()
        # A hole at page 10 ends the leading run there.
        assert store.remove(page_keys(10)[1]) == 0
        out = subprocess.run([sys.executable, "-c", HICACHE_READER, master, prefix, str(PAGES),
                              str(PAGE_BYTES)], capture_output=True, text=True, timeout=120)
        assert int(out.stdout.split()[0]) == 10
        assert store.remove_all() == 95
        assert store.batch_is_exist(page_keys(0)) == [0, 0]
    finally:
        store.close()


def test_lmcache_shape(master, other_client):
    store = new_store(master)
    try:
        buf = np.zeros(4 << 20, dtype=np.uint8)
        assert store.register_buffer(buf.ctypes.data, buf.nbytes) == 0
        chunk = 256 << 10
        keys = [f"lmcache@model@1@0@{i:064x}" for i in range(8)]
        for i, key in enumerate(keys):
            buf[i * chunk:(i + 1) * chunk] = np.frombuffer(pattern(key, chunk), dtype=np.uint8)
            cfg = ReplicateConfig(replica_num=1, preferred_segment=store.get_hostname())
            assert store.put_from(key, buf.ctypes.data + i * chunk, chunk, cfg) == 0
        # Read back into a second region: n <= 0 is a miss.
        dst = np.zeros(len(keys) * chunk, dtype=np.uint8)
        assert store.register_buffer(dst.ctypes.data, dst.nbytes) == 0
        got = store.batch_get_into(keys + ["lmcache@absent"],
                                   [dst.ctypes.data + i * chunk for i in range(8)] +
                                   [dst.ctypes.data], [chunk] * 9)
        assert got[:8] == [chunk] * 8 and got[8] <= 0
        assert dst.tobytes() == buf[:8 * chunk].tobytes()
        # The other process reads the same objects over TCP from this one's segment.
        size, digest = other_client.call(f"get {keys[3]}").split()
        import hashlib
        assert int(size) == chunk
        assert digest == hashlib.sha256(pattern(keys[3], chunk)).hexdigest()
        # put_parts with a 28-byte header, read back with batch_get_buffer.
        header = np.arange(28, dtype=np.uint8).tobytes()
        kv = pattern("kvbytes", 100000)
        assert store.put_parts("lm-parts", header, kv) == 0
        handles = store.batch_get_buffer(["lm-parts", "lm-absent"])
        assert bytes(memoryview(handles[0])) == header + kv
        assert handles[1] is None
    finally:
        store.remove_all()
        store.close()


def test_dummy_client_attaches_to_mooncake_client_daemon(master):
    port = free_port()
    daemon = subprocess.Popen(
        [os.path.join(BIN_DIR, "mooncake_client"), f"--master_server_address={master}",
         "--global_segment_size=32MB", f"--port={port}", "--host=127.0.0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_port(port, daemon)
        d = MooncakeDistributedStore()
        assert d.setup_dummy(16 << 20, 16 << 20, f"127.0.0.1:{port}") == 0
        daemon_segment = d.get_hostname()
        v = pattern("dummy", 1 << 20)
        assert d.put("dummy", v) == 0
        assert d.get("dummy") == v
        # The object lives in the daemon's pool: another client reads it, and it
        # outlives the dummy client.
        other = new_store(master, segment=0)
        assert other.get("dummy") == v
        assert d.close() == 0
        assert other.get("dummy") == v
        # Asking for more than the daemon has is refused.
        assert MooncakeDistributedStore().setup_dummy(64 << 20, 1 << 20,
                                                      f"127.0.0.1:{port}") != 0
        assert daemon_segment.startswith("127.0.0.1:")
        other.remove_all()
        other.close()
    finally:
        stop(daemon)
    assert MooncakeDistributedStore().setup_dummy(1 << 20, 1 << 20, f"127.0.0.1:{port}") != 0


def test_mooncake_client_refuses_unimplemented_flags():
    out = subprocess.run([os.path.join(BIN_DIR, "mooncake_client"), "--device_names=mlx5_0"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "device_names" in out.stderr
