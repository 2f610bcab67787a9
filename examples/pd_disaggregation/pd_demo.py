#!/usr/bin/env python3
"""Prefill/decode disaggregation on a real transformer, over mooncake's connectors.

Three kinds of processes, each started by this script:

  prefill   runs prompts (model.py) and serves the decode side's pulls with a
            mooncake.connector.PrefillConnector: layer i is sent while layer
            i+1 computes (save_layer in on_layer_done). With --store it also
            saves a request's pages into the mooncake store pool.
  decode    holds a paged KV cache registered with a DecodeConnector; for a
            request it pulls the KV from the prefill instance(s), waits, and
            decodes. When the transfer fails (the prefill died, a timeout) it
            recomputes the prompt itself. With --store it loads the longest
            cached prefix from the pool instead (one prefix query, one batch
            read straight into its pages) and computes only the rest.
  proxy     sends each request to prefill, then decode (the vLLM toy proxy's
            shape) and times it.

Subcommands:
  check     starts everything (a mooncake_master for the store cases), runs
            every correctness case and the failure case, prints a table,
            exits 1 on any difference. Reduced sizes by default (tests).
  bench     the TTFT table: recompute vs PD transfer vs store prefix load,
            by prompt length, with bytes moved and GB/s.
  prefill / decode / proxy   one server (used by check and bench).

Every process runs the model with one torch thread: results are bit-exact
across processes only for the same thread count (model.py).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Every thread computes with one thread: torch.set_num_threads(1) below sets
# only the calling thread's OpenMP count, and a request handler's thread would
# otherwise start with one per core, which rounds long reductions differently
# (bit-exact comparisons need one setting everywhere; model.py).
os.environ["OMP_NUM_THREADS"] = "1"
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import model as M  # noqa: E402

from mooncake.connector import (  # noqa: E402
    ConnectorError, DecodeConnector, PrefillConnector, SharedBuffer, layout_for)


# --- small helpers -------------------------------------------------------------

def digest(t: torch.Tensor) -> str:
    """A logits tensor's exact bytes, hashed: equal digests = bit-identical."""
    return hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()[:20]


def post(url: str, body: dict, timeout: float = 600.0) -> dict:
    req = urllib.request.Request("http://" + url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:  # the server's {"error": ...}
        return json.loads(e.read() or b"{}") or {"error": str(e)}


def serve(routes: dict, ready: dict) -> None:
    """Serves POST <path> {json} -> json on a free port; prints `ready` + the
    address as one JSON line (what the parent waits for), then serves."""
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            fn = routes.get(self.path)
            if fn is None:
                self.send_error(404)
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
            try:
                out, code = fn(body), 200
            except Exception as e:  # reported to the caller, the server goes on
                out, code = {"error": f"{type(e).__name__}: {e}"}, 500
            data = json.dumps(out).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ready = dict(ready, http=f"127.0.0.1:{server.server_address[1]}")
    print(json.dumps(ready), flush=True)
    server.serve_forever()


def parse_heads(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    first, count = (int(x) for x in text.split(","))
    return first, count


def make_cache(args, config: M.ModelConfig, shared: bool) -> tuple[M.PagedKVCache, list]:
    """The process's paged cache; in memfd memory when the transport is SHM."""
    keep: list = []
    alloc = None
    if shared:
        def alloc(shape, dtype):
            nbytes = math.prod(shape) * torch.tensor([], dtype=dtype).element_size()
            buf = SharedBuffer(nbytes)
            keep.append(buf)
            return torch.frombuffer(buf, dtype=dtype).view(shape)
    cache = M.PagedKVCache.for_model(config, args.layout, args.num_blocks, args.block_size,
                                     torch.float32, parse_heads(args.heads), alloc)
    return cache, keep


def connector_layout(cache: M.PagedKVCache, config: M.ModelConfig):
    first, _ = cache.head_slice
    return layout_for(cache.kv_caches, first_head=first, total_kv_heads=config.num_kv_heads)


# --- the store pool: canonical page keys, one prefix query, one batch read ------

class PagePool:
    """A request's KV pages in the mooncake store, engine-layout independent.

    Key of page i: a hash chain over the token ids of pages 0..i (so a key
    names a whole prefix) under the model's name. Value: for every layer, K
    then V, the page's rows [rows][heads][head_dim] (float32), the rows of a
    last partial page only. Loading reads each cached page straight into the
    decode cache's blocks (get_into_ranges: no staging copy)."""

    def __init__(self, master: str, cache: M.PagedKVCache, config: M.ModelConfig,
                 segment_bytes: int):
        from mooncake.store import MooncakeDistributedStore
        self.store = MooncakeDistributedStore()
        rc = self.store.setup("127.0.0.1", "P2PHANDSHAKE", segment_bytes, 64 << 20, "tcp", "",
                              master)
        if rc != 0:
            raise RuntimeError(f"store setup failed: {rc}")
        self.cache, self.config = cache, config
        for t in cache.tensors:
            rc = self.store.register_buffer(t.data_ptr(), M.tensor_nbytes(t))
            if rc != 0:
                raise RuntimeError(f"register_buffer failed: {rc}")
        self.row_bytes = cache.token_nbytes  # one token's (layer, K|V) row

    def keys(self, tokens: list[int]) -> list[str]:
        bs, h, out = self.cache.block_size, hashlib.sha256(self.config.name.encode()), []
        for i in range(0, len(tokens), bs):
            h = h.copy()
            h.update(torch.tensor(tokens[i:i + bs], dtype=torch.int64).numpy().tobytes())
            out.append(f"pd-demo/{h.hexdigest()[:32]}")
        return out

    def save(self, tokens: list[int], blocks: list[int]) -> int:
        bs, saved = self.cache.block_size, 0
        for i, key in enumerate(self.keys(tokens)):
            rows = min(bs, len(tokens) - i * bs)
            parts = []
            for layer in range(self.config.num_layers):
                for kv in (0, 1):
                    chunk = self.cache.kv_view(layer, kv)[blocks[i]]
                    parts.append(chunk[:rows].contiguous().numpy())
            rc = self.store.put_parts(key, *parts)
            if rc != 0:  # a put of a key already stored returns 0 (Mooncake's rule)
                raise RuntimeError(f"put_parts({key}) = {rc}")
            saved += 1
        return saved

    def load_prefix(self, tokens: list[int], blocks: list[int], max_tokens: int) -> int:
        """Loads the longest cached prefix of the first max_tokens tokens into
        `blocks` (a page's leading rows when max_tokens ends inside it);
        returns the tokens loaded."""
        bs, n = self.cache.block_size, len(tokens)
        keys = self.keys(tokens)[:-(-max_tokens // bs)]
        if not keys:
            return 0
        hits = 0
        for ok in self.store.batch_is_exist(keys):  # one master RPC
            if ok != 1:
                break
            hits += 1
        if hits == 0:
            return 0
        keys = keys[:hits]
        L = self.config.num_layers
        # Buffer-major: every cache tensor gets, per page, the ranges it holds.
        ptrs, all_keys, dsts, srcs, sizes = [], [], [], [], []
        for t_index, t in enumerate(self.cache.tensors):
            layers = [t_index] if self.cache.layout == "vllm" else list(range(L))
            ptrs.append(t.data_ptr())
            all_keys.append(keys)
            d, s, z = [], [], []
            for i in range(hits):
                stored_rows = min(bs, n - i * bs)  # the value holds this many rows
                rows = min(bs, max_tokens - i * bs)  # of which these are wanted
                dd, ss, zz = [], [], []
                for layer in layers:
                    for kv in (0, 1):
                        dd.append(self.cache.chunk_address(layer, kv, blocks[i]) - t.data_ptr())
                        ss.append((layer * 2 + kv) * stored_rows * self.row_bytes)
                        zz.append(rows * self.row_bytes)
                d.append(dd)
                s.append(ss)
                z.append(zz)
            dsts.append(d)
            srcs.append(s)
            sizes.append(z)
        got = self.store.get_into_ranges(ptrs, all_keys, dsts, srcs, sizes)  # one batch read
        for per_buffer in got:
            for per_key in per_buffer:
                if any(n < 0 for n in per_key):
                    raise RuntimeError(f"get_into_ranges failed: {per_key}")
        return min(hits * bs, max_tokens)


# --- the prefill instance ---------------------------------------------------------

def cmd_prefill(args) -> None:
    torch.set_num_threads(1)
    config = M.ModelConfig.preset(args.preset)
    model = M.LlamaModel(config, seed=0)
    cache, _ = make_cache(args, config, shared=False)
    layout, bases = connector_layout(cache, config)
    pc = PrefillConnector(layout, bases, protocol=args.protocol,
                          request_timeout_s=args.request_timeout_s)
    pool = PagePool(args.store, cache, config, 512 << 20) if args.store else None
    compute = threading.Lock()  # one prompt at a time on the compute stream
    blocks_mu = threading.Lock()
    released = {"requests": 0, "blocks": 0, "expired_requests": 0, "expired_blocks": 0}

    def reap():  # frees the blocks of requests the connector hands back
        while True:
            for _rid, blocks, code, _msg in pc.take_released():
                with blocks_mu:
                    cache.allocator.free(blocks)
                released["requests"] += 1
                released["blocks"] += len(blocks)
                if code == 4:  # DEADLINE_EXCEEDED: the decode side never finished
                    released["expired_requests"] += 1
                    released["expired_blocks"] += len(blocks)
            time.sleep(0.01)

    threading.Thread(target=reap, daemon=True).start()

    def prefill(req):
        rid, tokens = req["request_id"], req["tokens"]
        transfer, overlap = req.get("transfer", True), req.get("overlap", True)
        die_after = req.get("die_after_layer")
        with compute:
            with blocks_mu:
                blocks = cache.allocator.allocate(M.blocks_needed(len(tokens), args.block_size))
            if transfer:
                pc.add_request(rid, blocks, len(tokens))
            pending = []

            def on_layer_done(layer):
                if die_after is not None and layer == die_after:
                    os.kill(os.getpid(), signal.SIGKILL)  # the failure case: killed mid-transfer
                if transfer and overlap:
                    pc.save_layer(rid, layer)
                else:
                    pending.append(layer)

            t0 = time.perf_counter()
            logits = model.prefill(tokens, cache, blocks, on_layer_done)
            compute_s = time.perf_counter() - t0
            if transfer:
                for layer in pending:
                    pc.save_layer(rid, layer)
            done_at = time.time()
            saved_pages = pool.save(tokens, blocks) if pool and req.get("store_save") else 0
            if not transfer:
                with blocks_mu:
                    cache.allocator.free(blocks)
        return {"first_token": int(torch.argmax(logits)), "logits": digest(logits),
                "compute_s": compute_s, "done_at": done_at, "saved_pages": saved_pages}

    def stats(_req):
        with blocks_mu:
            used = cache.allocator.num_used
        return {"connector": pc.stats(), "blocks_used": used, "released": dict(released)}

    serve({"/prefill": prefill, "/stats": stats}, {"role": "prefill", "rpc": pc.rpc_address})


# --- the decode instance ------------------------------------------------------------

def cmd_decode(args) -> None:
    torch.set_num_threads(1)
    config = M.ModelConfig.preset(args.preset)
    model = M.LlamaModel(config, seed=0)
    cache, _keep = make_cache(args, config, shared=args.protocol == "shm")
    layout, bases = connector_layout(cache, config)
    dc = DecodeConnector(layout, bases, protocol=args.protocol, tp_rank=args.tp_rank,
                         tp_ranks=args.tp_ranks)
    pool = PagePool(args.store, cache, config, 64 << 20) if args.store else None
    mu = threading.Lock()
    pending: dict[str, dict] = {}
    quarantine: list[tuple[float, list[int]]] = []  # blocks a dead source might still write
    counts = {"recomputed": 0, "quarantined_blocks": 0}

    def allocate(n: int) -> list[int]:
        """Blocks for a request; when only quarantined blocks would make up
        the difference, waits until they may be reused (bounded by their
        reusable_after)."""
        while True:
            with mu:
                now = time.time()
                for entry in [q for q in quarantine if q[0] <= now]:
                    quarantine.remove(entry)
                    cache.allocator.free(entry[1])
                if cache.allocator.num_free >= n or not quarantine:
                    return cache.allocator.allocate(n)
                wake = min(q[0] for q in quarantine)
            time.sleep(max(0.0, min(wake - time.time(), 1.0)))

    def free(blocks: list[int]) -> None:
        with mu:
            cache.allocator.free(blocks)

    def prepare(req):
        rid, n, max_new = req["request_id"], req["num_tokens"], req["max_new_tokens"]
        blocks = allocate(M.blocks_needed(n + max_new - 1, args.block_size))
        st = {"blocks": blocks, "pulled": True, "error": None}
        try:
            dc.start_request(rid, req["sources"], blocks, n)
        except ConnectorError as e:
            st.update(pulled=False, error=str(e))
        with mu:
            pending[rid] = st
        return {"pulled": st["pulled"], "error": st["error"]}

    def finish(tokens, first_token, blocks, max_new, prefill_logits=None):
        toks, step_logits = model.generate_from_cache(first_token, len(tokens), max_new, cache,
                                                      blocks)
        free(blocks)
        return {"tokens": toks, "steps": [digest(x) for x in step_logits],
                "prefill_logits": prefill_logits}

    def recompute(tokens, blocks):
        logits = model.prefill(tokens, cache, blocks)
        return int(torch.argmax(logits)), digest(logits)

    def generate(req):
        rid, tokens, max_new = req["request_id"], req["tokens"], req["max_new_tokens"]
        with mu:
            st = pending.pop(rid)
        blocks, error, recomputed = st["blocks"], st["error"], False
        first_token, prefill_logits = req.get("first_token"), None
        if st["pulled"]:
            try:
                if req.get("layer_wise"):
                    for layer in range(config.num_layers):
                        dc.wait_layer(rid, layer, req.get("timeout_s", 60))
                dc.wait_all(rid, req.get("timeout_s", 60))
                dc.end(rid)
            except ConnectorError as e:
                error = str(e)
                reusable_now, after_s = dc.end(rid)
                if not reusable_now:  # a source that could not confirm may still write
                    with mu:
                        quarantine.append((time.time() + after_s, blocks))
                        counts["quarantined_blocks"] += len(blocks)
                    blocks = allocate(len(blocks))
                st["pulled"] = False
        if not st["pulled"] or first_token is None:
            first_token, prefill_logits = recompute(tokens, blocks)
            recomputed = True
            counts["recomputed"] += 1
        kv_ready = time.time()
        if req.get("digest_only"):  # a head-sliced rank cannot decode alone: report its KV
            h = hashlib.sha256()
            for layer in range(config.num_layers):
                k, v = cache.read(layer, blocks, 0, len(tokens))
                h.update(k.numpy().tobytes())
                h.update(v.numpy().tobytes())
            free(blocks)
            return {"kv_digest": h.hexdigest()[:20], "kv_ready": kv_ready, "error": error}
        out = finish(tokens, first_token, blocks, max_new, prefill_logits)
        out.update(kv_ready=kv_ready, recomputed=recomputed, error=error)
        return out

    def recompute_only(req):
        tokens, max_new = req["tokens"], req["max_new_tokens"]
        blocks = allocate(M.blocks_needed(len(tokens) + max_new - 1, args.block_size))
        t0 = time.time()
        first_token, prefill_logits = recompute(tokens, blocks)
        kv_ready = time.time()
        out = finish(tokens, first_token, blocks, max_new, prefill_logits)
        out.update(kv_ready=kv_ready, started=t0, recomputed=True)
        return out

    def from_store(req):
        """Loads the longest cached prefix (at most n - 1 tokens: the last
        one's logits are computed here) and computes the rest token by token."""
        tokens, max_new = req["tokens"], req["max_new_tokens"]
        n = len(tokens)
        blocks = allocate(M.blocks_needed(n + max_new - 1, args.block_size))
        t0 = time.time()
        loaded = pool.load_prefix(tokens, blocks, n - 1)
        t_loaded = time.time()
        logits = None
        if n - loaded > 2 * args.block_size:  # too little cached: a real prefill
            logits = model.prefill(tokens, cache, blocks)
        else:
            for pos in range(loaded, n):
                logits = model.decode_step(tokens[pos], pos, cache, blocks)
        kv_ready = time.time()
        out = finish(tokens, int(torch.argmax(logits)), blocks, max_new, digest(logits))
        out.update(kv_ready=kv_ready, started=t0, load_s=t_loaded - t0, loaded_tokens=loaded,
                   loaded_bytes=loaded * cache.token_nbytes * 2 * config.num_layers)
        return out

    def stats(_req):
        with mu:
            used = cache.allocator.num_used
            quarantined = sum(len(b) for _, b in quarantine)
        return {"connector": dc.stats(), "blocks_used": used, "quarantined": quarantined,
                **counts}

    serve({"/prepare": prepare, "/generate": generate, "/recompute": recompute_only,
           "/from_store": from_store, "/stats": stats},
          {"role": "decode", "rpc": dc.rpc_address})


# --- the proxy ---------------------------------------------------------------------

def cmd_proxy(args) -> None:
    prefills = [json.loads(x) for x in args.prefill]  # {"http", "rpc"} per prefill rank
    decodes = [json.loads(x) for x in args.decode]

    def parallel(fn, items):
        results, threads = [None] * len(items), []
        for i, item in enumerate(items):
            def run(i=i, item=item):
                try:
                    results[i] = fn(item)
                except Exception as e:  # a dead instance: reported, the request goes on
                    results[i] = {"error": f"{type(e).__name__}: {e}"}
            threads.append(threading.Thread(target=run))
            threads[-1].start()
        for t in threads:
            t.join()
        return results

    def generate(req):
        rid, tokens, max_new = req["request_id"], req["tokens"], req["max_new_tokens"]
        mode = req.get("mode", "pd")
        t0 = time.time()
        if mode == "recompute":
            out = post(decodes[0]["http"] + "/recompute",
                       {"tokens": tokens, "max_new_tokens": max_new})
            out["ttft_s"] = out["kv_ready"] - t0
            return out
        if mode == "store":
            out = post(decodes[0]["http"] + "/from_store",
                       {"tokens": tokens, "max_new_tokens": max_new})
            out["ttft_s"] = out["kv_ready"] - t0
            return out
        if mode == "store_save":  # prefill only, saving the pages into the pool
            return post(prefills[0]["http"] + "/prefill",
                        {"request_id": rid, "tokens": tokens, "transfer": False,
                         "store_save": True})
        sources = [p["rpc"] for p in prefills]
        prep = parallel(lambda d: post(d["http"] + "/prepare",
                                       {"request_id": rid, "num_tokens": len(tokens),
                                        "max_new_tokens": max_new, "sources": sources}),
                        decodes)
        pre = parallel(lambda p: post(p["http"] + "/prefill",
                                      {"request_id": rid, "tokens": tokens,
                                       "overlap": req.get("overlap", True),
                                       "die_after_layer": req.get("die_after_layer")}),
                       prefills)
        first = pre[0].get("first_token")
        gen = parallel(lambda d: post(d["http"] + "/generate",
                                      {"request_id": rid, "tokens": tokens,
                                       "max_new_tokens": max_new, "first_token": first,
                                       "digest_only": req.get("digest_only", False),
                                       "timeout_s": req.get("timeout_s", 60)}),
                       decodes)
        out = dict(gen[0])
        out["ranks"] = gen
        out["prepare"] = prep
        out["prefill"] = pre
        if out.get("prefill_logits") is None:
            out["prefill_logits"] = pre[0].get("logits")
        done = [p["done_at"] for p in pre if "done_at" in p]
        out["ttft_s"] = max(done + [g.get("kv_ready", 0) for g in gen]) - t0
        out["prefill_compute_s"] = max((p.get("compute_s", 0) for p in pre), default=0)
        return out

    serve({"/generate": generate}, {"role": "proxy"})


# --- the driver: start processes, run cases -----------------------------------------

class Cluster:
    """Starts and stops the demo's processes; each prints one ready line.
    `script` is the program whose servers `start` runs (default: this one)."""

    def __init__(self, script: str = os.path.abspath(__file__)):
        self.procs: list[subprocess.Popen] = []
        self.script = script

    def start(self, argv: list[str]) -> dict:
        p = subprocess.Popen([sys.executable, self.script] + argv,
                             stdout=subprocess.PIPE, text=True)
        self.procs.append(p)
        line = p.stdout.readline()
        if not line:
            raise RuntimeError(f"{argv[0]} did not start")
        info = json.loads(line)
        info["proc"] = p
        return info

    def start_master(self, master_bin: str) -> str:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        p = subprocess.Popen([master_bin, f"--rpc_port={port}", "--rpc_address=127.0.0.1",
                              "--metrics_port=0", "--enable_metric_reporting=false"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return f"127.0.0.1:{port}"
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("mooncake_master did not start")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def instance_args(args, role, layout, block_size, protocol, heads=None, tp=(0, 1), store=None):
    argv = [role, "--preset", args.preset, "--layout", layout, "--block-size", str(block_size),
            "--protocol", protocol,
            # --num-blocks counts blocks of 16 tokens: the same tokens whatever the page size
            "--num-blocks", str(max(1, args.num_blocks * 16 // block_size)),
            "--request-timeout-s", str(args.request_timeout_s)]
    if heads:
        argv += ["--heads", f"{heads[0]},{heads[1]}"]
    if role == "decode":
        argv += ["--tp-rank", str(tp[0]), "--tp-ranks", str(tp[1])]
    if store:
        argv += ["--store", store]
    return argv


def reference(args, prompt, max_new):
    """One process doing prefill and decode itself: tokens, logits digests."""
    torch.set_num_threads(1)
    config = M.ModelConfig.preset(args.preset)
    model = M.LlamaModel(config, seed=0)
    cache = model.new_cache("vllm", M.blocks_needed(len(prompt) + max_new, 16) + 1, 16)
    blocks = list(range(M.blocks_needed(len(prompt) + max_new - 1, 16)))
    toks, logits = model.generate(prompt, max_new, cache, blocks)
    return toks, [digest(x) for x in logits], cache, blocks, model


def prefix_cached_reference(args, prompt, max_new):
    """What the store case's decode computes, in one process: the prompt's K/V
    as a prefill computed them (what the pool holds), the last prompt token
    computed again by a decode step (its logits choose the first token), then
    decode. Not `reference`: on some CPUs oneDNN rounds a one-row product
    differently from the same row inside a prefill's product, so the first
    token's logits by decode step and by prefill may differ in the last bits
    although every KV byte moved exactly."""
    torch.set_num_threads(1)
    config = M.ModelConfig.preset(args.preset)
    model = M.LlamaModel(config, seed=0)
    n = len(prompt)
    cache = model.new_cache("vllm", M.blocks_needed(n + max_new, 16) + 1, 16)
    blocks = list(range(M.blocks_needed(n + max_new - 1, 16)))
    model.prefill(prompt, cache, blocks)
    logits = model.decode_step(prompt[-1], n - 1, cache, blocks)
    toks, steps = model.generate_from_cache(int(torch.argmax(logits)), n, max_new, cache, blocks)
    return toks, [digest(logits)] + [digest(x) for x in steps]


def kv_slice_digest(cache, blocks, n, num_layers, heads):
    first, count = heads
    h = hashlib.sha256()
    for layer in range(num_layers):
        k, v = cache.read(layer, blocks, 0, n)
        h.update(k[:, first:first + count].contiguous().numpy().tobytes())
        h.update(v[:, first:first + count].contiguous().numpy().tobytes())
    return h.hexdigest()[:20]


def cmd_check(args) -> int:
    config = M.ModelConfig.preset(args.preset)
    half = config.num_kv_heads // 2
    # (name, prefill instances [(layout, block, heads)], decode ranks [(layout, block, heads)],
    #  protocol)
    cases = [
        ("tcp vllm16 -> vllm16", [("vllm", 16, None)], [("vllm", 16, None)], "tcp"),
        ("shm vllm16 -> vllm16", [("vllm", 16, None)], [("vllm", 16, None)], "shm"),
        ("tcp sglang32 -> vllm16", [("sglang", 32, None)], [("vllm", 16, None)], "tcp"),
        ("tcp vllm16 -> sglang8", [("vllm", 16, None)], [("sglang", 8, None)], "tcp"),
        ("tcp prefill TP2 -> decode TP1", [("vllm", 16, (0, half)), ("sglang", 32, (half, half))],
         [("vllm", 16, None)], "tcp"),
        ("tcp prefill TP1 -> decode TP2", [("vllm", 16, None)],
         [("vllm", 16, (0, half)), ("sglang", 32, (half, half))], "tcp"),
    ]
    lengths = [int(x) for x in args.lengths.split(",")]
    failures, rows = 0, []
    refs = {n: reference(args, M.make_prompt(n, seed=n), args.max_new) for n in lengths}
    cluster = Cluster()
    try:
        master = cluster.start_master(args.master_bin) if args.master_bin else None
        for name, pre_specs, dec_specs, protocol in cases:
            if args.cases and args.cases not in name:
                continue
            prefills = [cluster.start(instance_args(args, "prefill", l, b, protocol, h))
                        for l, b, h in pre_specs]
            decodes = [cluster.start(instance_args(args, "decode", l, b, protocol, h,
                                                   (i, len(dec_specs))))
                       for i, (l, b, h) in enumerate(dec_specs)]
            proxy = cluster.start(["proxy"] + sum([["--prefill", json.dumps(
                {"http": p["http"], "rpc": p["rpc"]})] for p in prefills], []) + sum(
                [["--decode", json.dumps({"http": d["http"], "rpc": d["rpc"]})]
                 for d in decodes], []))
            sliced = any(h for _, _, h in dec_specs)
            for n in lengths:
                ref_toks, ref_logits, ref_cache, ref_blocks, _ = refs[n]
                out = post(proxy["http"] + "/generate",
                           {"request_id": f"{name}-{n}", "tokens": M.make_prompt(n, seed=n),
                            "max_new_tokens": args.max_new, "digest_only": sliced})
                if sliced:
                    ok = all(r.get("kv_digest") == kv_slice_digest(
                        ref_cache, ref_blocks, n, config.num_layers,
                        h or (0, config.num_kv_heads)) and not r.get("error")
                        for r, (_, _, h) in zip(out["ranks"], dec_specs))
                    what = "KV of each rank's heads"
                else:
                    ok = (out.get("tokens") == ref_toks
                          and out.get("prefill_logits") == ref_logits[0]
                          and out.get("steps") == ref_logits[1:] and not out.get("recomputed"))
                    what = f"{len(ref_toks)} tokens, {len(ref_logits)} logits"
                failures += not ok
                rows.append((name, n, what, "bit-identical" if ok else f"DIFFERENT {out}"))
            cluster_stats_ok = wait_blocks_free(prefills, decodes)
            failures += not cluster_stats_ok
            if not cluster_stats_ok:
                rows.append((name, "-", "blocks after the case", "LEAKED"))
            for p in prefills + decodes + [proxy]:
                p["proc"].terminate()
                p["proc"].wait()
        if master and (not args.cases or args.cases in "store"):
            failures += store_case(args, cluster, master, lengths, rows)
        failures += failure_case(args, cluster, lengths[-1], refs[lengths[-1]], rows)
    finally:
        cluster.stop()
    width = max(len(r[0]) for r in rows)
    for r in rows:
        print(f"{r[0]:<{width}}  {str(r[1]):>6}  {r[2]:<28} {r[3]}")
    print(f"pd_demo check: {len(rows) - failures} passed, {failures} failed")
    return 1 if failures else 0


def wait_blocks_free(prefills, decodes, timeout_s: float = 10.0) -> bool:
    """Zero leaked blocks, by the instances' own accounting."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        used = [post(p["http"] + "/stats", {})["blocks_used"] for p in prefills + decodes]
        if not any(used):
            return True
        time.sleep(0.05)
    return False


def store_case(args, cluster, master, lengths, rows) -> int:
    """The prefill saves pages into the pool; the decode loads them and is
    compared with prefix_cached_reference."""
    pre = cluster.start(instance_args(args, "prefill", "vllm", 16, "tcp", store=master))
    dec = cluster.start(instance_args(args, "decode", "sglang", 16, "tcp", store=master))
    failures = 0
    for n in lengths:
        prompt = M.make_prompt(n, seed=n)
        ref_toks, ref_logits = prefix_cached_reference(args, prompt, args.max_new)
        post(pre["http"] + "/prefill", {"request_id": f"s{n}", "tokens": prompt,
                                        "transfer": False, "store_save": True})
        out = post(dec["http"] + "/from_store", {"tokens": prompt, "max_new_tokens": args.max_new})
        ok = (out.get("tokens") == ref_toks and out.get("prefill_logits") == ref_logits[0]
              and out.get("steps") == ref_logits[1:] and out.get("loaded_tokens") == n - 1)
        failures += not ok
        rows.append(("store vllm16 -> pool -> sglang16", n,
                     f"{out.get('loaded_tokens')} tokens loaded",
                     "bit-identical" if ok else f"DIFFERENT {out}"))
    pre["proc"].terminate()
    dec["proc"].terminate()
    return failures


def failure_case(args, cluster, n, ref, rows) -> int:
    """The prefill process is killed mid-transfer: the decode side recomputes
    and answers correctly; a prefill request nobody pulls is freed after the
    timeout (its counter shows it)."""
    ref_toks, ref_logits, *_ = ref
    pre = cluster.start(instance_args(args, "prefill", "vllm", 16, "tcp"))
    dec = cluster.start(instance_args(args, "decode", "vllm", 16, "tcp"))
    proxy = cluster.start(["proxy", "--prefill", json.dumps({"http": pre["http"], "rpc": pre["rpc"]}),
                           "--decode", json.dumps({"http": dec["http"], "rpc": dec["rpc"]})])
    config = M.ModelConfig.preset(args.preset)
    t0 = time.time()
    out = post(proxy["http"] + "/generate",
               {"request_id": "killed", "tokens": M.make_prompt(n, seed=n),
                "max_new_tokens": args.max_new, "die_after_layer": config.num_layers // 2})
    took = time.time() - t0
    try:
        killed = pre["proc"].wait(timeout=10) == -signal.SIGKILL
    except subprocess.TimeoutExpired:
        killed = False
    ok = (out.get("tokens") == ref_toks and out.get("steps") == ref_logits[1:]
          and out.get("recomputed") and killed)
    rows.append(("prefill killed mid-transfer", n, f"recomputed in {took:.1f} s",
                 "bit-identical" if ok else f"DIFFERENT (killed={killed}) {out}"))
    dstats = post(dec["http"] + "/stats", {})
    leak_ok = dstats["blocks_used"] == dstats["quarantined"]
    rows.append(("  decode blocks after it", "-", f"{dstats['quarantined']} quarantined",
                 "no leak" if leak_ok else f"LEAKED {dstats}"))
    # A prefill request the decode side never pulls: freed after the timeout.
    pre2 = cluster.start(instance_args(args, "prefill", "vllm", 16, "tcp"))
    post(pre2["http"] + "/prefill", {"request_id": "orphan", "tokens": M.make_prompt(n, seed=1)})
    held = M.blocks_needed(n, 16)  # its blocks (the clock started at its last layer)
    time.sleep(args.request_timeout_s)
    deadline = time.time() + 10  # the connector sweeps every 50 ms; a loaded machine lags
    while True:
        s = post(pre2["http"] + "/stats", {})
        timeout_ok = (s["blocks_used"] == 0
                      and s["released"]["expired_blocks"] == held
                      and s["connector"]["requests_expired"] == 1)
        if timeout_ok or time.time() > deadline:
            break
        time.sleep(0.05)
    rows.append(("unpulled request, timeout", n,
                 f"{held} blocks freed after {args.request_timeout_s:g} s",
                 "ok (requests_expired=1)" if timeout_ok else f"NOT FREED {s}"))
    for p in (dec, proxy, pre2):
        p["proc"].terminate()
    return (not ok) + (not leak_ok) + (not timeout_ok)


def cmd_bench(args) -> int:
    """TTFT by prompt length: recompute, PD (overlap on/off), store prefix load."""
    config = M.ModelConfig.preset(args.preset)
    lengths = [int(x) for x in args.lengths.split(",")]
    cluster = Cluster()
    rows = []
    try:
        master = cluster.start_master(args.master_bin) if args.master_bin else None
        pre = cluster.start(instance_args(args, "prefill", "vllm", 16, args.protocol, store=master))
        dec = cluster.start(instance_args(args, "decode", "vllm", 16, args.protocol, store=master))
        proxy = cluster.start(["proxy", "--prefill", json.dumps({"http": pre["http"], "rpc": pre["rpc"]}),
                               "--decode", json.dumps({"http": dec["http"], "rpc": dec["rpc"]})])
        for n in lengths:
            prompt = M.make_prompt(n, seed=n)
            rec, pd_on, pd_off, store, compute = [], [], [], [], []
            tail_on, tail_off = [], []  # TTFT - that request's own prefill compute
            for rep in range(args.reps):
                r = post(dec["http"] + "/recompute", {"tokens": prompt, "max_new_tokens": 2})
                rec.append(r["kv_ready"] - r["started"])
                on = post(proxy["http"] + "/generate", {"request_id": f"on{n}.{rep}",
                                                        "tokens": prompt, "max_new_tokens": 2})
                pd_on.append(on["ttft_s"])
                compute.append(on["prefill_compute_s"])
                tail_on.append(on["ttft_s"] - on["prefill_compute_s"])
                off = post(proxy["http"] + "/generate", {"request_id": f"off{n}.{rep}",
                                                         "tokens": prompt, "max_new_tokens": 2,
                                                         "overlap": False})
                pd_off.append(off["ttft_s"])
                tail_off.append(off["ttft_s"] - off["prefill_compute_s"])
                if master:
                    if rep == 0:
                        post(pre["http"] + "/prefill", {"request_id": f"s{n}", "tokens": prompt,
                                                        "transfer": False, "store_save": True})
                    s = post(dec["http"] + "/from_store", {"tokens": prompt, "max_new_tokens": 2})
                    store.append((s["kv_ready"] - s["started"], s["load_s"], s["loaded_bytes"]))
            med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
            kv_bytes = n * (config.num_layers * 2 * config.num_kv_heads * config.head_dim * 4)
            row = {"tokens": n, "kv_mib": kv_bytes / 2**20, "compute_s": med(compute),
                   "recompute_s": med(rec), "pd_s": med(pd_on), "pd_no_overlap_s": med(pd_off),
                   "tail_s": med(tail_on), "tail_no_overlap_s": med(tail_off)}
            if store:
                st = sorted(store)[len(store) // 2]
                row.update(store_s=st[0], store_load_s=st[1],
                           store_gbps=st[2] / st[1] / 1e9 if st[1] > 0 else 0)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        cluster.stop()
    print(f"\nTTFT by prompt length ({args.preset} preset, {args.protocol}, 1 torch thread, "
          f"median of {args.reps}; decode recompute = (a), PD transfer = (b), store = (c))")
    print("tail = TTFT minus the same request's prefill compute: the transfer time not hidden;"
          " transfer GB/s = KV bytes / tail without overlap")
    print(f"{'tokens':>7} {'KV MiB':>7} {'prefill compute':>16} {'(a) recompute':>14} "
          f"{'(b) PD':>8} {'PD/compute':>11} {'tail':>8} {'tail no overlap':>16} "
          f"{'transfer GB/s':>14} {'(c) store':>10} {'(a)/(c)':>8} {'load GB/s':>10}")
    for r in rows:
        store_s = r.get("store_s")
        gbps = r["kv_mib"] * 2**20 / r["tail_no_overlap_s"] / 1e9
        print(f"{r['tokens']:>7} {r['kv_mib']:>7.1f} {r['compute_s']:>15.3f}s "
              f"{r['recompute_s']:>13.3f}s {r['pd_s']:>7.3f}s {r['pd_s'] / r['compute_s']:>10.3f}x "
              f"{r['tail_s'] * 1e3:>6.1f}ms {r['tail_no_overlap_s'] * 1e3:>14.1f}ms {gbps:>14.2f} "
              + (f"{store_s:>9.3f}s {r['recompute_s'] / store_s:>7.1f}x {r['store_gbps']:>9.2f}"
                 if store_s else f"{'-':>10} {'-':>8} {'-':>10}"))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("prefill", "decode"):
        p = sub.add_parser(name)
        p.add_argument("--preset", default="tiny")
        p.add_argument("--layout", default="vllm", choices=["vllm", "sglang"])
        p.add_argument("--block-size", type=int, default=16)
        p.add_argument("--num-blocks", type=int, default=1024)
        p.add_argument("--protocol", default="tcp", choices=["tcp", "shm"])
        p.add_argument("--heads", help="first,count: this rank's KV heads (TP)")
        p.add_argument("--tp-rank", type=int, default=0)
        p.add_argument("--tp-ranks", type=int, default=1)
        p.add_argument("--request-timeout-s", type=float, default=120.0)
        p.add_argument("--store", help="mooncake_master address: use the store pool")
    p = sub.add_parser("proxy")
    p.add_argument("--prefill", action="append", required=True)
    p.add_argument("--decode", action="append", required=True)
    for name in ("check", "bench"):
        p = sub.add_parser(name)
        p.add_argument("--preset", default="tiny" if name == "check" else "demo")
        p.add_argument("--lengths", default="1,17,300" if name == "check" else "1024,2048,4096,8192")
        p.add_argument("--max-new", type=int, default=8)
        p.add_argument("--num-blocks", type=int, default=1024)
        p.add_argument("--request-timeout-s", type=float, default=2.0 if name == "check" else 120.0)
        p.add_argument("--master-bin", help="mooncake_master: adds the store cases")
        p.add_argument("--protocol", default="tcp", choices=["tcp", "shm"])
        p.add_argument("--reps", type=int, default=3)
        p.add_argument("--json-out")
        p.add_argument("--cases", help="check: run only the cases whose name contains this")
    args = ap.parse_args()
    return {"prefill": cmd_prefill, "decode": cmd_decode, "proxy": cmd_proxy,
            "check": cmd_check, "bench": cmd_bench}[args.cmd](args) or 0


if __name__ == "__main__":
    sys.exit(main())
