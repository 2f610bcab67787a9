"""An engine's host KV cache backed by the store, in SGLang HiCache's shape.

A host KV pool (a numpy array, pages of K and V for every layer) is
registered with the store once. Each page is named by a chained hash of its
tokens (page i's key covers tokens 0..(i+1)*PAGE), as "{model}_{hash}_{tp}_k"
and "_v". Request A computes its pages and backs up those the store lacks
(batch_is_exist, then batch_put_from straight from the pool). Request B
shares a prefix with A: the engine asks which of its leading pages are
cached, loads them with batch_get_into into free pages of its pool, and
computes only the rest. Every loaded byte is checked.

Run: a master (mooncake_master --port=50051), then
  PYTHONPATH=<dir holding the mooncake package> /usr/bin/python3 \
      examples/hicache_style.py 127.0.0.1:50051
"""
import hashlib
import sys

import numpy as np

from mooncake.store import MooncakeDistributedStore

PAGE_TOKENS = 16
LAYERS, HEADS, HEAD_DIM = 4, 2, 64
PAGE_BYTES = LAYERS * PAGE_TOKENS * HEADS * HEAD_DIM * 2  # bf16 K (or V) of one page
POOL_PAGES = 64
MODEL, TP_RANK = "demo-model", 0


def page_hashes(tokens):
    """Chained hash per full page: page i depends on every token before it."""
    out, parent = [], b""
    for i in range(len(tokens) // PAGE_TOKENS):
        page = np.asarray(tokens[i * PAGE_TOKENS:(i + 1) * PAGE_TOKENS], dtype="<u4").tobytes()
        parent = hashlib.sha256(parent + page).digest()
        out.append(parent.hex()[:32])
    return out


def keys_of(h):
    return [f"{MODEL}_{h}_{TP_RANK}_k", f"{MODEL}_{h}_{TP_RANK}_v"]


def compute_kv(tokens, page):
    """Stands in for the model's prefill: deterministic K and V of one page."""
    seed = int.from_bytes(hashlib.sha256(np.asarray(
        tokens[:(page + 1) * PAGE_TOKENS], dtype="<u4").tobytes()).digest()[:8], "little")
    return np.random.default_rng(seed).integers(0, 256, size=(2, PAGE_BYTES), dtype=np.uint8)


def main():
    master = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051"
    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "", master)
    if rc != 0:
        print(f"setup failed: {rc} {store.last_error()}")
        return 1
    pool = np.zeros((POOL_PAGES, 2, PAGE_BYTES), dtype=np.uint8)  # [page][k/v][bytes]
    assert store.register_buffer(pool.ctypes.data, pool.nbytes) == 0
    system = list(range(1000, 1000 + 100))                 # a shared 100-token system prompt
    a = system + list(range(5000, 5060))                    # 160 tokens: 10 pages
    b = system + list(range(7000, 7050))                    # 150 tokens: 9 pages, 6 shared

    # Request A: prefill every page into pool slots 0..9, back up what is missing.
    ha = page_hashes(a)
    for i in range(len(ha)):
        pool[i] = compute_kv(a, i)
    keys, ptrs = [], []
    for i, h in enumerate(ha):
        for j, key in enumerate(keys_of(h)):
            keys.append(key)
            ptrs.append(pool[i, j].ctypes.data)
    exist = store.batch_is_exist(keys)
    missing = [n for n, e in enumerate(exist) if e != 1]
    codes = store.batch_put_from([keys[n] for n in missing], [ptrs[n] for n in missing],
                                 [PAGE_BYTES] * len(missing))
    if any(c != 0 for c in codes):
        print(f"backup failed: {codes}")
        return 1
    print(f"request A: {len(a)} tokens, {len(ha)} pages, backed up {len(missing) // 2} pages")

    # Request B: how many leading pages are cached, then load them into slots 20.. of the pool.
    hb = page_hashes(b)
    keys = [k for h in hb for k in keys_of(h)]
    exist = store.batch_is_exist(keys)
    hit = 0
    while hit < len(hb) and exist[2 * hit] == 1 and exist[2 * hit + 1] == 1:
        hit += 1
    base = 20
    got = store.batch_get_into(keys[:2 * hit],
                               [pool[base + i, j].ctypes.data for i in range(hit) for j in (0, 1)],
                               [PAGE_BYTES] * (2 * hit))
    loaded = sum(1 for g in got if g > 0) // 2
    for i in range(hit):
        if not np.array_equal(pool[base + i], compute_kv(b, i)):
            print(f"page {i} of request B differs from what prefill computes")
            return 1
    print(f"request B: {len(b)} tokens, {len(hb)} pages, {hit} cached ({hit * PAGE_TOKENS} tokens);"
          f" prefill computes {len(b) - hit * PAGE_TOKENS}")
    print(f"loaded and verified {loaded} pages ({loaded * 2 * PAGE_BYTES >> 10} KiB) "
          f"into the host pool")
    print(f"cleared {store.remove_all()} objects")
    store.close()
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
