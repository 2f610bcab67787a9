#!/usr/bin/env python3
"""Encoder / prefill / decode (EPD) disaggregation with a hidden-state cache.

A multimodal request (an image and a text prompt) runs in three processes,
each started by this script, with a mooncake_master for the store pool:

  encoder   E: checks the image (RGB uint8, the preset's size), computes its
            media key (docs/block_key_spec.md, "Media blocks": XXH3-128 of the
            raw bytes salted with the encoder id and the preprocessing), and
            asks the pool whether the hidden states are there (is_exist). On a
            hit it skips the encoder. On a miss it runs the vision encoder
            (vision.py), writes the hidden states into a registered slot of its
            hidden-state PrefillConnector (a one-layer, one-part layout of
            [positions, hidden] float32 blocks) for P to pull, and puts them
            into the pool under the media object's key for later hits.
  prefill   P: on a miss pulls the hidden states from E with a DecodeConnector
            into its registered hidden-state buffer; on a hit reads them from
            the pool into the same buffer (get_into; a missing object is a
            clear error). It prefills the image positions then the text, and
            sends each layer's KV to D with a PrefillConnector as soon as it is
            computed (as the PD demo does).
  decode    D: a paged KV cache registered with a DecodeConnector; pulls the
            request's KV from P and decodes.

The driver (check, bench) sends each request to E, D (prepare: allocate and
pull), P, then D (generate), and measures TTFT from the request to D having
the first token and every layer. If P finds the hidden states gone on a hit
(evicted between E's lookup and P's read) the driver asks E again once: E
misses, re-encodes and sends them through the connector.

Subcommands:
  check     tiny presets: the pipeline against one process doing everything
            (tokens, logits, hidden states bit for bit), the cache hit that
            skips the encoder, eviction, bad inputs; exits 1 on any failure.
  bench     demo presets: TTFT of a repeated image with the cache off and on,
            medians over --reps, and the ratio.
  encoder / prefill / decode   one server (used by check and bench).

Every process runs torch with one thread (bit-exactness, see vision.py).
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import subprocess
import sys
import threading
import time

# Every thread computes with one thread: torch.set_num_threads(1) below sets
# only the calling thread's OpenMP count, and a request handler's thread would
# otherwise start with one per core, which rounds long reductions differently
# (bit-exact comparisons need one setting everywhere; model.py).
os.environ["OMP_NUM_THREADS"] = "1"
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "pd_disaggregation"))
import media_key as K  # noqa: E402
import model as M  # noqa: E402
import pd_demo as PD  # noqa: E402  (post, serve, digest, the master launcher)
import vision as V  # noqa: E402

from mooncake.connector import (ConnectorError, DecodeConnector,  # noqa: E402
                                PrefillConnector, layout_for)

MISSING = "MissingHiddenStatesError"


class MissingHiddenStatesError(LookupError):
    """The hidden-state object of a media key is not in the pool."""


def store_client(master: str, segment_bytes: int, local_buffer_bytes: int):
    from mooncake.store import MooncakeDistributedStore
    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", "P2PHANDSHAKE", segment_bytes, local_buffer_bytes, "tcp", "",
                     master)
    if rc != 0:
        raise RuntimeError(f"store setup failed: {rc}")
    return store


def media_namespace(vc: V.VisionConfig) -> K.MediaNamespace:
    return K.MediaNamespace("image", vc.encoder_id, vc.preprocess)


HIDDEN_SLOTS = 4  # E's hidden-state send slots: misses whose pull has not finished yet


def hidden_layout(vc: V.VisionConfig, slots: int):
    """The hidden-state connectors' memory: `slots` blocks of one image's rows.

    A KV-cache-shaped tensor of one layer and one part (as an MLA latent):
    [1 part, slots blocks, positions rows, 1 head, LLM hidden] float32, so block
    b is one image's [positions, hidden] hidden states, contiguous. E sends from
    its slot into P's one block with the same one-range plan as any KV layer."""
    buf = torch.zeros(1, slots, vc.num_tokens, 1, vc.llm_hidden)
    layout, bases = layout_for([buf])
    return buf, layout, bases


# --- E: the encoder instance ---------------------------------------------------------

def cmd_encoder(args) -> None:
    torch.set_num_threads(1)
    vc = V.VisionConfig.preset(args.vision)
    encoder = V.VisionEncoder(vc, seed=0)
    store = store_client(args.store, args.segment_mib << 20, 16 << 20)
    ns = media_namespace(vc)
    compute, slots_mu = threading.Lock(), threading.Lock()
    # The hidden-state sender: P pulls a miss's hidden states from one of these slots.
    send_buf, layout, bases = hidden_layout(vc, HIDDEN_SLOTS)
    hc = PrefillConnector(layout, bases, protocol="tcp", request_timeout_s=args.send_timeout_s)
    free_slots = list(range(HIDDEN_SLOTS))

    def reap():  # a slot is free again once its pull finished (or expired, or was aborted)
        while True:
            for _tid, blocks, _code, _msg in hc.take_released():
                with slots_mu:
                    free_slots.extend(blocks)
            time.sleep(0.002)

    threading.Thread(target=reap, daemon=True).start()

    def send(tid: str, hidden: torch.Tensor) -> int:
        with slots_mu:
            if not free_slots:
                raise RuntimeError(f"no free hidden-state send slot ({HIDDEN_SLOTS} misses wait "
                                   "for P's pull)")
            slot = free_slots.pop()
        send_buf[0, slot, :, 0, :].copy_(hidden)
        try:
            hc.add_request(tid, [slot], vc.num_tokens)
            hc.save_layer(tid, 0)  # never blocks: sent when P's pull arrives
        except ConnectorError:
            with slots_mu:
                free_slots.append(slot)
            raise
        return slot

    def encode(req):
        raw = base64.b64decode(req["image"])
        V.check_image(vc, req["shape"], req["dtype"], len(raw))
        key = K.media_key(ns, raw)
        name = K.object_name(key)
        use_cache = req.get("use_cache", True)
        with compute:
            t0 = time.perf_counter()
            hit = use_cache and store.is_exist(name) == 1
            out = {"media_key": key.hex(), "object": name, "hit": hit,
                   "num_tokens": vc.num_tokens, "encode_s": 0.0, "hidden": None}
            if not hit:
                image = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(req["shape"])
                hidden = encoder.encode(image)
                out["encode_s"] = time.perf_counter() - t0
                # To P through the connector first (P waits on it), then into the pool.
                tid = req["transfer_id"]
                send(tid, hidden)
                out["transfer_id"], out["source"] = tid, hc.rpc_address
                if use_cache:  # cache off: nothing is kept for later
                    rc = store.put(name, hidden.numpy())
                    if rc != 0:
                        hc.abort(tid, "put into the pool failed")
                        raise RuntimeError(f"put of the hidden states {name} failed: {rc}")
                out["hidden"] = PD.digest(hidden)
            out["lookup_and_encode_s"] = time.perf_counter() - t0
            out["encoder_calls"] = encoder.calls
        return out

    def abort(req):  # the request failed before P pulled: free the slot now
        try:
            hc.abort(req["transfer_id"], "request failed")
        except ConnectorError as e:
            return {"code": e.code}
        return {"code": 0}

    def remove(req):  # what an eviction does to the object; for the check
        return {"rc": store.remove(req["object"], force=True)}

    def stats(_req):
        with slots_mu:
            free = len(free_slots)
        return {"encoder_calls": encoder.calls, "free_send_slots": free, "sender": hc.stats()}

    PD.serve({"/encode": encode, "/abort": abort, "/remove": remove, "/stats": stats},
             {"role": "encoder"})


# --- P: the prefill instance ---------------------------------------------------------

def cmd_prefill(args) -> None:
    torch.set_num_threads(1)
    vc = V.VisionConfig.preset(args.vision)
    config = M.ModelConfig.preset(vc.llm_preset)
    model = M.LlamaModel(config, seed=0)
    cache = M.PagedKVCache.for_model(config, "vllm", args.num_blocks, args.block_size)
    layout, bases = PD.connector_layout(cache, config)
    pc = PrefillConnector(layout, bases, protocol="tcp")
    store = store_client(args.store, args.segment_mib << 20, 16 << 20)
    # One image's hidden states, float32: the hidden-state receiver's one block (E writes
    # into it on a miss) and the target of get_into on a hit.
    recv_buf, hlayout, hbases = hidden_layout(vc, 1)
    hidden_buf = recv_buf.view(-1)
    assert hidden_buf.numel() * 4 == vc.hidden_nbytes
    hc = DecodeConnector(hlayout, hbases, protocol="tcp")
    if store.register_buffer(hidden_buf.data_ptr(), vc.hidden_nbytes) != 0:
        raise RuntimeError("register_buffer of the hidden-state buffer failed")
    compute, blocks_mu = threading.Lock(), threading.Lock()
    received = {"transfers": 0, "bytes": 0}  # hidden states that came through the connector

    def reap():  # frees the blocks of requests the connector hands back
        while True:
            for _rid, blocks, _code, _msg in pc.take_released():
                with blocks_mu:
                    cache.allocator.free(blocks)
            time.sleep(0.01)

    threading.Thread(target=reap, daemon=True).start()

    def receive_hidden(tid: str, source: str, num_tokens: int) -> torch.Tensor:
        if num_tokens != vc.num_tokens:
            raise ValueError(f"this prefill takes images of {vc.num_tokens} positions, "
                             f"got {num_tokens}")
        hc.start_request(tid, [source], [0], num_tokens)
        try:
            hc.wait_all(tid, args.hidden_timeout_s)
        finally:
            reusable_now, after_s = hc.end(tid)
            if not reusable_now:  # a write may still land: let it, before reusing the buffer
                time.sleep(after_s)
        received["transfers"] += 1
        received["bytes"] += vc.hidden_nbytes
        return hidden_buf.view(vc.num_tokens, vc.llm_hidden)

    def load_hidden(name: str, num_tokens: int) -> torch.Tensor:
        if num_tokens != vc.num_tokens:
            raise ValueError(f"this prefill takes images of {vc.num_tokens} positions, "
                             f"got {num_tokens}")
        n = store.get_into(name, hidden_buf.data_ptr(), vc.hidden_nbytes)
        if n == -704:
            raise MissingHiddenStatesError(
                f"hidden-state object {name} is not in the store pool (never encoded, or "
                "evicted): send the image to the encoder again")
        if n != vc.hidden_nbytes:
            raise RuntimeError(f"reading hidden-state object {name}: got {n}, expected "
                               f"{vc.hidden_nbytes} bytes ([{vc.num_tokens}, {vc.llm_hidden}] "
                               "float32)")
        return hidden_buf.view(vc.num_tokens, vc.llm_hidden)

    def prefill(req):
        rid, tokens = req["request_id"], req["tokens"]
        with compute:
            t0 = time.perf_counter()
            if req.get("hidden_source"):  # a miss: E sends them through the connector
                via = "connector"
                hidden = receive_hidden(req["transfer_id"], req["hidden_source"],
                                        req["num_media_tokens"])
            else:  # a hit: from the pool
                via = "pool"
                hidden = load_hidden(req["object"], req["num_media_tokens"])
            load_s = time.perf_counter() - t0
            x = V.prompt_embeds(model, hidden, tokens)  # copies: the buffer is free again
            hidden_digest = PD.digest(hidden)
            with blocks_mu:
                blocks = cache.allocator.allocate(M.blocks_needed(x.shape[0], args.block_size))
            pc.add_request(rid, blocks, x.shape[0])
            t1 = time.perf_counter()
            logits = V.prefill_embeds(model, x, cache, blocks,
                                      lambda layer: pc.save_layer(rid, layer))
            compute_s = time.perf_counter() - t1
        return {"first_token": int(torch.argmax(logits)), "logits": PD.digest(logits),
                "hidden": hidden_digest, "hidden_via": via, "prompt_len": x.shape[0],
                "load_s": load_s,
                "compute_s": compute_s, "done_at": time.time()}

    def stats(_req):
        with blocks_mu:
            return {"blocks_used": cache.allocator.num_used, "connector": pc.stats(),
                    "hidden_received": dict(received), "hidden_receiver": hc.stats()}

    PD.serve({"/prefill": prefill, "/stats": stats}, {"role": "prefill", "rpc": pc.rpc_address})


# --- D: the decode instance ----------------------------------------------------------

def cmd_decode(args) -> None:
    torch.set_num_threads(1)
    vc = V.VisionConfig.preset(args.vision)
    config = M.ModelConfig.preset(vc.llm_preset)
    model = M.LlamaModel(config, seed=0)
    cache = M.PagedKVCache.for_model(config, "vllm", args.num_blocks, args.block_size)
    layout, bases = PD.connector_layout(cache, config)
    dc = DecodeConnector(layout, bases, protocol="tcp")
    mu = threading.Lock()
    pending: dict[str, list[int]] = {}

    def prepare(req):
        rid = req["request_id"]
        with mu:
            blocks = cache.allocator.allocate(
                M.blocks_needed(req["num_tokens"] + req["max_new_tokens"] - 1, args.block_size))
            pending[rid] = blocks
        dc.start_request(rid, req["sources"], blocks, req["num_tokens"])
        return {"blocks": len(blocks)}

    def release(rid: str) -> None:
        with mu:
            blocks = pending.pop(rid)
        reusable_now, after_s = dc.end(rid)
        if not reusable_now:  # a source that could not confirm may still write: wait it out
            time.sleep(after_s)
        with mu:
            cache.allocator.free(blocks)

    def generate(req):
        rid = req["request_id"]
        try:
            dc.wait_all(rid, req.get("timeout_s", 60))
        except ConnectorError:
            release(rid)
            raise
        kv_ready = time.time()
        with mu:
            blocks = pending[rid]
        toks, step_logits = model.generate_from_cache(req["first_token"], req["prompt_len"],
                                                      req["max_new_tokens"], cache, blocks)
        release(rid)
        return {"tokens": toks, "steps": [PD.digest(x) for x in step_logits],
                "kv_ready": kv_ready}

    def abort(req):
        release(req["request_id"])
        return {}

    def stats(_req):
        with mu:
            return {"blocks_used": cache.allocator.num_used}

    PD.serve({"/prepare": prepare, "/generate": generate, "/abort": abort, "/stats": stats},
             {"role": "decode", "rpc": dc.rpc_address})


# --- the driver ------------------------------------------------------------------------

def Cluster() -> PD.Cluster:
    """PD.Cluster, starting this script's servers."""
    return PD.Cluster(os.path.abspath(__file__))


def start_epd(args, cluster: PD.Cluster) -> dict:
    master = cluster.start_master(args.master_bin)
    common = ["--vision", args.vision, "--store", master]
    return {"master": master,
            "E": cluster.start(["encoder"] + common),
            "P": cluster.start(["prefill"] + common),
            "D": cluster.start(["decode"] + common)}


def image_request(image: torch.Tensor) -> dict:
    return {"image": base64.b64encode(image.contiguous().numpy().tobytes()).decode(),
            "shape": list(image.shape), "dtype": str(image.dtype).replace("torch.", "")}


def run_request(procs: dict, rid: str, image: dict, tokens: list[int], max_new: int,
                use_cache: bool = True, evict_before_prefill: bool = False) -> dict:
    """One request through E, D (prepare), P, D (generate). Returns what each
    said, the TTFT, or {"error", "stage"}. evict_before_prefill (for the
    check) removes the hidden states from the pool between E's answer and P's
    read, as an eviction at that moment would."""
    E, P, D = procs["E"]["http"], procs["P"]["http"], procs["D"]["http"]
    t0 = time.time()

    def prefill_request(e: dict) -> dict:  # on a miss P pulls from E, on a hit reads the pool
        r = {"request_id": rid, "object": e["object"], "num_media_tokens": e["num_tokens"],
             "tokens": tokens}
        if not e["hit"]:
            r.update(transfer_id=e["transfer_id"], hidden_source=e["source"])
        return r

    e = PD.post(E + "/encode", dict(image, use_cache=use_cache, transfer_id=f"{rid}/hs0"))
    if "error" in e:
        return {"error": e["error"], "stage": "encode"}
    n = e["num_tokens"] + len(tokens)
    prep = PD.post(D + "/prepare", {"request_id": rid, "num_tokens": n,
                                    "max_new_tokens": max_new, "sources": [procs["P"]["rpc"]]})
    if "error" in prep:
        if not e["hit"]:
            PD.post(E + "/abort", {"transfer_id": e["transfer_id"]})
        return {"error": prep["error"], "stage": "prepare"}
    if evict_before_prefill:
        PD.post(E + "/remove", {"object": e["object"]})
    p = PD.post(P + "/prefill", prefill_request(e))
    reencoded = False
    if MISSING in p.get("error", ""):  # a hit evicted before P's read: encode again, once
        e = PD.post(E + "/encode", dict(image, use_cache=True, transfer_id=f"{rid}/hs1"))
        p = PD.post(P + "/prefill", prefill_request(e)) if "error" not in e else e
        reencoded = True
    if "error" in p:
        if "transfer_id" in e:  # P may not have pulled: free E's slot now
            PD.post(E + "/abort", {"transfer_id": e["transfer_id"]})
        PD.post(D + "/abort", {"request_id": rid})
        return {"error": p["error"], "stage": "prefill"}
    g = PD.post(D + "/generate", {"request_id": rid, "first_token": p["first_token"],
                                  "prompt_len": p["prompt_len"], "max_new_tokens": max_new})
    if "error" in g:
        return {"error": g["error"], "stage": "generate"}
    return {"encode": e, "prefill": p, "tokens": g["tokens"],
            "logits": [p["logits"]] + g["steps"], "ttft_s": g["kv_ready"] - t0,
            "reencoded": reencoded}


def reference(vc: V.VisionConfig, image: torch.Tensor, tokens: list[int], max_new: int) -> dict:
    """One process doing encoder, prefill and decode: hidden states, tokens, logits."""
    torch.set_num_threads(1)
    config = M.ModelConfig.preset(vc.llm_preset)
    model = M.LlamaModel(config, seed=0)
    hidden = V.VisionEncoder(vc, seed=0).encode(image)
    x = V.prompt_embeds(model, hidden, tokens)
    n = x.shape[0]
    cache = model.new_cache("vllm", M.blocks_needed(n + max_new, 16), 16)
    blocks = list(range(M.blocks_needed(n + max_new - 1, 16)))
    logits = V.prefill_embeds(model, x, cache, blocks)
    first = int(torch.argmax(logits))
    toks, steps = model.generate_from_cache(first, n, max_new, cache, blocks)
    return {"hidden": PD.digest(hidden), "tokens": toks,
            "logits": [PD.digest(logits)] + [PD.digest(s) for s in steps]}


def same(out: dict, ref: dict) -> bool:
    """Tokens, every logits vector and the hidden states P used, bit for bit
    (and E's, when it encoded)."""
    return ("error" not in out and out["tokens"] == ref["tokens"]
            and out["logits"] == ref["logits"] and out["prefill"]["hidden"] == ref["hidden"]
            and out["encode"]["hidden"] in (None, ref["hidden"]))


def cmd_check(args) -> int:
    vc = V.VisionConfig.preset(args.vision)
    text = M.make_prompt(args.text_tokens, seed=7)
    images = {name: V.make_image(vc, seed) for name, seed in (("A", 1), ("B", 2), ("C", 3))}
    refs = {name: reference(vc, img, text, args.max_new) for name, img in images.items()}
    rows, failures = [], 0

    def row(name, ok, detail):
        nonlocal failures
        failures += not ok
        rows.append((name, "ok" if ok else "FAIL", detail))

    cluster = Cluster()
    try:
        procs = start_epd(args, cluster)
        E, P = procs["E"]["http"], procs["P"]["http"]
        req = {name: image_request(img) for name, img in images.items()}
        calls = lambda: PD.post(E + "/stats", {})["encoder_calls"]  # noqa: E731

        def moved():  # hidden states through the connectors: (P received, bytes; E sent bytes)
            pr = PD.post(P + "/stats", {})["hidden_received"]
            return pr["transfers"], pr["bytes"], PD.post(E + "/stats", {})["sender"]["bytes_sent"]

        def case(name, rid, image, use_cache, want_hit, want_calls, want_reencoded=False):
            before = moved()
            out = run_request(procs, rid, req[image], text, args.max_new, use_cache,
                              evict_before_prefill=want_reencoded)
            n = calls()
            # A miss (and the re-encode after an eviction) reaches P through the connector:
            # one transfer of one image's [positions, hidden] float32 rows, sent by E and
            # received by P; a hit is read from the pool and moves nothing through it.
            via = "pool" if want_hit else "connector"
            k = 0 if want_hit else 1
            delta = tuple(b - a for a, b in zip(before, moved()))
            want_delta = (k, k * vc.hidden_nbytes, k * vc.hidden_nbytes)
            ok = (same(out, refs[image]) and out["encode"]["hit"] == want_hit
                  and n == want_calls and out["reencoded"] == want_reencoded
                  and out["prefill"]["hidden_via"] == via and delta == want_delta)
            if ok:
                row(name, ok, f"hit={out['encode']['hit']} encoder_calls={n} via {via} "
                              f"({delta[1]} B through the connector); "
                              f"{len(out['tokens'])} tokens, {len(out['logits'])} logits, "
                              f"hidden states {out['prefill']['hidden']}: bit-identical")
            else:
                row(name, ok, f"DIFFERENT (encoder_calls={n}, connector transfers/bytes "
                              f"received/bytes sent {delta}, want {want_delta}): {out}"[:600])
            return out

        a1 = case("image A, first time: miss, encoded", "a1", "A", True, False, 1)
        case("image A again: hit, encoder skipped", "a2", "A", True, True, 1)
        b1 = case("image B, same text: miss, encoded", "b1", "B", True, False, 2)
        case("image A, cache off: encoded", "a3", "A", False, False, 3)
        # Media keys and the prompt's block keys: the image changes every block from its own.
        if "error" not in a1 and "error" not in b1:
            ka, kb = a1["encode"]["media_key"], b1["encode"]["media_key"]
            # 4-token blocks: several blocks even on the tiny preset.
            root = K.root_key(K.KeyNamespace(vc.llm_preset, "fp32"), 4)
            prompt = [0] * vc.num_tokens + text
            chains = [K.block_keys(root, 4, prompt, [K.MediaPlacement(
                K.Key128(int(k[16:], 16), int(k[:16], 16)), 0, vc.num_tokens)]) for k in (ka, kb)]
            ok = ka != kb and all(x != y for x, y in zip(*chains)) and len(chains[0]) > 0
            row("media keys A != B; no shared block key", ok,
                f"{ka[:8]}.. vs {kb[:8]}.., {len(chains[0])} blocks each")
        # Eviction: the object is removed from the pool; the next request re-encodes.
        obj = a1["encode"]["object"] if "error" not in a1 else ""
        rc = PD.post(E + "/remove", {"object": obj}).get("rc")
        row("hidden states of A removed from the pool", rc == 0, f"remove rc={rc}")
        case("image A after eviction: miss, encoded", "a4", "A", True, False, 4)
        case("image C, first time: miss, encoded", "c1", "C", True, False, 5)
        # A hit evicted between E's lookup and P's read (an image P has only received through
        # the connector, never read from the pool: a reader's lease keeps a removed object
        # readable until it ends): P reports it, E re-encodes and sends it.
        case("image C hit, evicted before P's read: re-encoded", "c2", "C", True, False, 6,
             want_reencoded=True)
        # A missing object at P (evicted between E's lookup and P's read): a clear error.
        miss = PD.post(P + "/prefill", {
            "request_id": "m1", "object": "mcmk-" + "0" * 32,
            "num_media_tokens": vc.num_tokens, "tokens": text})
        row("P: missing hidden-state object", MISSING in miss.get("error", "")
            and "not in the store pool" in miss.get("error", ""), miss.get("error", "no error"))
        # Bad images: a clear error from E, nothing encoded.
        before = calls()
        small = V.make_image(V.VisionConfig(name="x", image_size=vc.image_size - 2 * vc.patch,
                                            patch=vc.patch, hidden_size=8, num_layers=1,
                                            num_heads=1), 4)
        bad = [("wrong size", image_request(small), "image shape must be"),
               ("wrong dtype (float32)", image_request(images["A"].float()), "dtype must be uint8"),
               ("truncated bytes", dict(req["A"], image=base64.b64encode(
                   base64.b64decode(req["A"]["image"])[:-3]).decode()), "expected")]
        for name, body, want in bad:
            out = run_request(procs, f"bad-{name}", body, text, args.max_new)
            row(f"E: bad image, {name}", want in out.get("error", "")
                and out.get("stage") == "encode", out.get("error", f"no error: {out}")[:200])
        row("bad images did not run the encoder", calls() == before, f"encoder_calls={calls()}")
        # Nothing leaked: every block back on P and D.
        deadline, used = time.time() + 10, None
        while time.time() < deadline:
            used = [PD.post(procs[r]["http"] + "/stats", {})["blocks_used"] for r in ("P", "D")]
            if not any(used):
                break
            time.sleep(0.05)
        row("blocks in use on P, D after the check", not any(used), f"{used}")
        # Every hidden-state send slot back on E (each miss's pull finished).
        while time.time() < deadline:
            st = PD.post(E + "/stats", {})
            if st["free_send_slots"] == HIDDEN_SLOTS:
                break
            time.sleep(0.05)
        row("hidden-state send slots free on E after the check",
            st["free_send_slots"] == HIDDEN_SLOTS,
            f"{st['free_send_slots']} of {HIDDEN_SLOTS}; sender {st['sender']}")
    finally:
        cluster.stop()
    width = max(len(r[0]) for r in rows)
    for r in rows:
        print(f"{r[0]:<{width}}  {r[1]:<4}  {r[2]}")
    print(f"epd_demo check: {len(rows) - failures} passed, {failures} failed")
    return 1 if failures else 0


def machine() -> str:
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} CPUs, torch {torch.__version__}"


def cmd_bench(args) -> int:
    vc = V.VisionConfig.preset(args.vision)
    text = M.make_prompt(args.text_tokens, seed=7)
    image = V.make_image(vc, 1)
    ref = reference(vc, image, text, args.max_new)
    body = image_request(image)
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    cluster = Cluster()
    try:
        procs = start_epd(args, cluster)
        warm = run_request(procs, "warm", body, text, args.max_new)  # fills the cache
        if "error" in warm:
            print(f"FAIL: {warm}")
            return 1
        for rep in range(args.reps):
            for mode in ("off", "on"):
                out = run_request(procs, f"{mode}{rep}", body, text, args.max_new,
                                  use_cache=mode == "on")
                if not same(out, ref) or out["encode"]["hit"] != (mode == "on"):
                    print(f"FAIL: rep {rep} cache {mode} differs from one process: {out}")
                    return 1
                runs[mode].append(out)
    finally:
        cluster.stop()
    off = med([r["ttft_s"] for r in runs["off"]])
    on = med([r["ttft_s"] for r in runs["on"]])
    print(f"EPD TTFT of a repeated image ({vc.image_size}x{vc.image_size} image -> "
          f"{vc.num_tokens} positions, {len(text)} text tokens; vision '{vc.name}', LLM "
          f"'{vc.llm_preset}'; 1 torch thread per process; median of {args.reps})")
    print(f"machine: {machine()}")
    for mode, label in (("off", "cache off (baseline)"), ("on", "cache on (hit)")):
        r = runs[mode]
        print(f"  {label:<21} TTFT {med([x['ttft_s'] for x in r]) * 1e3:7.1f} ms   "
              f"encode {med([x['encode']['encode_s'] for x in r]) * 1e3:6.1f} ms   "
              f"E total {med([x['encode']['lookup_and_encode_s'] for x in r]) * 1e3:6.1f} ms   "
              f"P load {med([x['prefill']['load_s'] for x in r]) * 1e3:5.2f} ms   "
              f"P prefill {med([x['prefill']['compute_s'] for x in r]) * 1e3:6.1f} ms")
    print(f"  ratio (cache off / on): {off / on:.2f}x; tokens and logits bit-identical to one "
          "process in every run")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"off_ttft_s": off, "on_ttft_s": on, "ratio": off / on,
                       "machine": machine(), "reps": args.reps}, f, indent=1)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("encoder", "prefill", "decode"):
        p = sub.add_parser(name)
        p.add_argument("--vision", default="tiny", help="vision preset (its LLM preset follows)")
        p.add_argument("--store", required=True, help="mooncake_master address")
        p.add_argument("--segment-mib", type=int, default=64, help="memory given to the pool")
        p.add_argument("--block-size", type=int, default=16)
        p.add_argument("--num-blocks", type=int, default=256)
        p.add_argument("--send-timeout-s", type=float, default=30.0,
                       help="E: how long a miss's hidden states wait for P's pull")
        p.add_argument("--hidden-timeout-s", type=float, default=30.0,
                       help="P: how long it waits for a miss's hidden states from E")
    for name in ("check", "bench"):
        p = sub.add_parser(name)
        p.add_argument("--vision", default="tiny" if name == "check" else "demo")
        p.add_argument("--master-bin", required=True, help="the mooncake_master program")
        p.add_argument("--text-tokens", type=int, default=17 if name == "check" else 32)
        p.add_argument("--max-new", type=int, default=8 if name == "check" else 2)
        p.add_argument("--reps", type=int, default=7)
        p.add_argument("--json-out")
    args = ap.parse_args()
    return {"encoder": cmd_encoder, "prefill": cmd_prefill, "decode": cmd_decode,
            "check": cmd_check, "bench": cmd_bench}[args.cmd](args) or 0


if __name__ == "__main__":
    sys.exit(main())
