#!/usr/bin/env python3
"""Agent fork: one shared context, many branches, over zero-copy clones in the store pool.

An agent that forks (tree search, parallel tool calls, best-of-n) runs many
continuations of one long context. Each branch needs the context's KV cache as
its own objects (it appends to them, and each branch is removed on its own
schedule), but copying the context once per branch multiplies the pool's use
by the number of branches. `MooncakeDistributedStore.clone_prefix` makes the
copies zero-copy: a clone is a new key that shares the source's stored bytes
(metadata only), and the bytes are freed when the last key referring to them
goes (docs/python.md, "Object groups, clones and queries").

What this program does, with the PD demo's model (examples/pd_disaggregation/
model.py, seeded weights, float32 KV) and a mooncake_master it starts:

  1. Prefills the context (--context tokens) into an SGLang-layout paged cache
     whose page is --page tokens, and puts it into the pool as one object per
     layer per page, `ctx/<layer>/<page>` (K then V of the page's rows: one
     contiguous range of the page-first buffer, so `batch_put_from` sends it
     without a staging copy).
  2. Forks --branches branches, each with ONE `clone_prefix("ctx/",
     "branch<i>/ctx/")` call (timed). Branch i then loads its cloned pages from
     the pool into a zeroed cache (`batch_get_into`), feeds its own suffix
     (--suffix tokens, seeded per branch, so branches diverge), decodes
     --decode tokens greedily, and puts its new pages as
     `branch<i>/new/<layer>/<page>`.
  3. Checks every branch against an independent run in this process without
     the store (a fresh prefill of the context, the same suffix and decode):
     the same tokens and bit-identical logits at every step.
  4. Reads the master's /metrics (mooncake_master_used_bytes, _shared_bytes,
     _cloned_bytes_total): the pool's use after the fork against what
     --branches full copies would use, then removes the context (the bytes stay:
     the clones still refer to them) and every branch, and checks that used
     bytes are back to the figure before the context was put (none leaked).
  5. Bad input: a fork of a context that is not in the pool, and a fork onto a
     branch that exists, are clear errors (ForkError) and clone nothing.

Subcommands:
  check   small sizes (512-token context, 3 branches, 16 tokens), run by
          agent_fork_test.sh; exits 1 on any failed check.
  bench   16K context, 8 branches, 256 tokens: the figures in README.md.
Both take the same flags; every check runs in both.

Torch runs with --threads threads (1 by default) for the store path and the
reference alike: thread counts change the low bits of long reductions
(model.py's docstring).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pd_disaggregation"))
import model as M  # noqa: E402

NOT_FOUND, EXISTS = -704, -705
CODE_NAMES = {NOT_FOUND: "NOT_FOUND", EXISTS: "ALREADY_EXISTS", -600: "INVALID_PARAMS",
              -400: "INVALID_KEY", -706: "FAILED_PRECONDITION"}

CONTEXT_PREFIX = "ctx/"


class ForkError(RuntimeError):
    """A fork the store refused; the message says why and what was left."""


# --- the master and its metrics ------------------------------------------------------

class Master:
    """A mooncake_master on loopback (free ports), stopped by stop()."""

    def __init__(self, binary: str, lease_ms: int):
        self._dir = tempfile.TemporaryDirectory(prefix="agent_fork_")
        ready = os.path.join(self._dir.name, "ready")
        self.proc = subprocess.Popen(
            [binary, "--port=0", "--metrics_port=0", "--rpc_address=127.0.0.1",
             f"--default_kv_lease_ttl={lease_ms}", "--enable_metric_reporting=false",
             f"--ready_file={ready}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while not os.path.exists(ready):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode() if self.proc.poll() is not None else ""
                self.stop()
                raise RuntimeError(f"mooncake_master did not start: {err.strip()}")
            time.sleep(0.05)
        fields = dict(line.split("=", 1) for line in open(ready).read().split())
        self.rpc, self.http = fields["rpc"], fields["http"]

    def metrics(self) -> dict[str, float]:
        """The master's unlabelled series, by name. Gauges are refreshed by the
        master's tick (every 100 ms); settle() waits for one."""
        with urllib.request.urlopen(f"http://{self.http}/metrics", timeout=5) as r:
            text = r.read().decode()
        out = {}
        for m in re.finditer(r"^(mooncake_master_[a-z_]+) (\S+)$", text, re.M):
            out[m.group(1)] = float(m.group(2))
        return out

    def settle(self) -> dict[str, float]:
        """Metrics after the master's gauges have caught up with the calls made so far."""
        time.sleep(0.35)
        return self.metrics()

    def wait_used(self, target: float, timeout_s: float) -> dict[str, float]:
        """Metrics once used bytes reach `target` (frees wait for read leases),
        or at the timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            m = self.settle()
            if m["mooncake_master_used_bytes"] == target or time.monotonic() > deadline:
                return m

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._dir.cleanup()


def used(m: dict[str, float]) -> int:
    return int(m["mooncake_master_used_bytes"])


# --- pages of a page-first cache as pool objects ----------------------------------------

def page_keys(prefix: str, layers: int, pages: range) -> list[str]:
    """Object keys of pages `pages` of every layer under `prefix`: `<prefix><layer>/<page>`."""
    return [f"{prefix}{layer}/{page}" for page in pages for layer in range(layers)]


def page_ranges(cache: M.PagedKVCache, pages: range) -> tuple[list[int], list[int]]:
    """(addresses, sizes) of the (layer, page) objects in page_keys order. In the
    SGLang layout K and V of one (page, layer) are adjacent, so an object is one
    range of the cache's buffer; page p lives in block p."""
    assert cache.layout == "sglang"
    ptrs = [cache.chunk_address(layer, 0, page) for page in pages
            for layer in range(cache.num_layers)]
    return ptrs, [2 * cache.chunk_nbytes] * len(ptrs)


def code_text(rc: int) -> str:
    return f"{rc} {CODE_NAMES.get(rc, '')}".strip()


def put_pages(store, cache: M.PagedKVCache, prefix: str, pages: range) -> int:
    """Puts pages `pages` of every layer; returns the bytes put."""
    keys = page_keys(prefix, cache.num_layers, pages)
    ptrs, sizes = page_ranges(cache, pages)
    rcs = store.batch_put_from(keys, ptrs, sizes)
    bad = [(k, rc) for k, rc in zip(keys, rcs) if rc != 0]
    if bad:
        raise RuntimeError(f"batch_put_from: {len(bad)} of {len(keys)} failed, first "
                           f"{bad[0][0]}: {code_text(bad[0][1])}")
    return sum(sizes)


def get_pages(store, cache: M.PagedKVCache, prefix: str, pages: range) -> int:
    """Reads pages `pages` of every layer into `cache`; returns the bytes read."""
    keys = page_keys(prefix, cache.num_layers, pages)
    ptrs, sizes = page_ranges(cache, pages)
    got = store.batch_get_into(keys, ptrs, sizes)
    bad = [(k, n) for k, n, size in zip(keys, got, sizes) if n != size]
    if bad:
        raise RuntimeError(f"batch_get_into: {len(bad)} of {len(keys)} short, first "
                           f"{bad[0][0]}: {code_text(bad[0][1])}")
    return sum(sizes)


def fork(store, context_prefix: str, branch_prefix: str) -> int:
    """Clones every object under `context_prefix` to `branch_prefix` + the rest of
    its key, in one master call; returns how many. All or nothing."""
    n = store.clone_prefix(context_prefix, branch_prefix)
    if n == NOT_FOUND:
        raise ForkError(f"cannot fork {branch_prefix!r}: no context under {context_prefix!r} "
                        f"in the pool (clone_prefix: {code_text(n)}); nothing was cloned")
    if n == EXISTS:
        raise ForkError(f"cannot fork {branch_prefix!r}: a key under it already exists "
                        f"(clone_prefix: {code_text(n)}); nothing was cloned")
    if n < 0:
        raise ForkError(f"cannot fork {branch_prefix!r} from {context_prefix!r}: "
                        f"clone_prefix: {code_text(n)}; nothing was cloned")
    return n


# --- the model side -------------------------------------------------------------------

def continue_branch(model: M.LlamaModel, cache: M.PagedKVCache, blocks: list[int],
                    context_len: int, suffix: list[int], decode: int) -> tuple[list[int], str]:
    """Feeds `suffix` after the context's KV in `cache`, then decodes `decode`
    tokens greedily. Returns (decoded tokens, SHA-256 of every step's logits)."""
    assert suffix and decode >= 1
    h = hashlib.sha256()
    position = context_len
    for token in suffix[:-1]:
        h.update(model.decode_step(token, position, cache, blocks).numpy().tobytes())
        position += 1
    logits = model.decode_step(suffix[-1], position, cache, blocks)
    out = []
    while True:
        h.update(logits.numpy().tobytes())
        out.append(int(torch.argmax(logits)))
        if len(out) == decode:
            return out, h.hexdigest()
        position += 1
        logits = model.decode_step(out[-1], position, cache, blocks)


# --- the run ----------------------------------------------------------------------------

class Run:
    """One fork experiment: sizes, model, the checks that failed so far."""

    def __init__(self, args):
        if args.context % args.page:
            raise SystemExit(f"--context ({args.context}) must be a multiple of --page "
                             f"({args.page})")
        self.args = args
        self.config = M.ModelConfig.preset(args.preset)
        self.model = M.LlamaModel(self.config, seed=0)
        self.layers = self.config.num_layers
        vocab = self.config.vocab_size
        self.context = M.make_prompt(args.context, seed=1, vocab_size=vocab)
        self.suffixes = [M.make_prompt(args.suffix, seed=100 + i, vocab_size=vocab)
                         for i in range(args.branches)]
        self.total = args.context + args.suffix + args.decode  # tokens a branch holds
        self.ctx_pages = range(args.context // args.page)
        # A branch's new KV rows: positions context .. total-2 (the last token is not fed).
        self.new_pages = range(self.ctx_pages.stop, M.blocks_needed(self.total - 1, args.page))
        self.failures: list[str] = []

    def check(self, ok: bool, what: str) -> None:
        print(f"  [{'ok' if ok else 'FAIL'}] {what}")
        if not ok:
            self.failures.append(what)

    def new_cache(self, tokens: int) -> tuple[M.PagedKVCache, list[int]]:
        pages = M.blocks_needed(tokens, self.args.page)
        return M.PagedKVCache.for_model(self.config, "sglang", pages, self.args.page), \
            list(range(pages))

    def branch(self, cache: M.PagedKVCache, blocks: list[int], i: int) -> tuple[list[int], str]:
        return continue_branch(self.model, cache, blocks, self.args.context, self.suffixes[i],
                               self.args.decode)

    def references(self) -> list[tuple[list[int], str]]:
        """The independent run: no store; a fresh prefill, then each branch on a copy of it."""
        t = time.perf_counter()
        cache, blocks = self.new_cache(self.total)
        n = len(self.ctx_pages)
        self.model.prefill(self.context, cache, blocks[:n])
        context_kv = cache.buffer[:n].clone()
        refs = []
        for i in range(self.args.branches):
            cache.buffer[n:].zero_()
            cache.buffer[:n].copy_(context_kv)
            refs.append(self.branch(cache, blocks, i))
        print(f"reference (one process, no store): {time.perf_counter() - t:.1f} s")
        return refs

    def put_context(self, store, cache, blocks) -> tuple[int, float, torch.Tensor]:
        """Prefills and puts the context; returns (bytes, put seconds, page 0's KV)."""
        t = time.perf_counter()
        self.model.prefill(self.context, cache, blocks[:len(self.ctx_pages)])
        prefill_s = time.perf_counter() - t
        t = time.perf_counter()
        ctx_bytes = put_pages(store, cache, CONTEXT_PREFIX, self.ctx_pages)
        put_s = time.perf_counter() - t
        print(f"context: prefill {prefill_s:.2f} s, put {self.layers * len(self.ctx_pages)} "
              f"objects ({ctx_bytes / 2**20:.1f} MiB) in {put_s * 1e3:.1f} ms")
        return ctx_bytes, put_s, cache.buffer[0].clone()

    def fork_branches(self, store, cache, blocks) -> tuple[list[float], int, list]:
        """One clone call per branch, then load, continue and put the new pages.
        Returns (clone seconds per branch, bytes of the new pages, (tokens, digest)s)."""
        clone_s, branch_bytes, results = [], 0, []
        want = self.layers * len(self.ctx_pages)
        for i in range(self.args.branches):
            prefix = f"branch{i}/"
            t = time.perf_counter()
            n = fork(store, CONTEXT_PREFIX, prefix + CONTEXT_PREFIX)
            clone_s.append(time.perf_counter() - t)
            if n != want:
                raise RuntimeError(f"clone_prefix cloned {n} objects, expected {want}")
            cache.buffer.zero_()  # whatever the branch uses comes from the pool
            t = time.perf_counter()
            loaded = get_pages(store, cache, prefix + CONTEXT_PREFIX, self.ctx_pages)
            load_s = time.perf_counter() - t
            t = time.perf_counter()
            tokens, digest = self.branch(cache, blocks, i)
            decode_s = time.perf_counter() - t
            branch_bytes += put_pages(store, cache, prefix + "new/", self.new_pages)
            results.append((tokens, digest))
            print(f"branch {i}: clone {n} objects {clone_s[-1] * 1e3:.2f} ms, load "
                  f"{loaded / 2**20:.1f} MiB {load_s * 1e3:.1f} ms, decode {decode_s:.2f} s, "
                  f"{self.layers * len(self.new_pages)} new objects; tokens {tokens[:6]}...")
        return clone_s, branch_bytes, results

    def check_bad_forks(self, store, master: Master, before: dict[str, float]) -> None:
        """Forks the store must refuse, with a clear error, cloning nothing."""
        for src, dst, want in (("no-such-context/", "branchX/ctx/", "no context under"),
                               (CONTEXT_PREFIX, "branch0/" + CONTEXT_PREFIX, "already exists")):
            try:
                fork(store, src, dst)
                self.check(False, f"fork {src!r} -> {dst!r} refused")
            except ForkError as e:
                self.check(want in str(e), f"fork {src!r} -> {dst!r} refused: {e}")
        after = master.settle()
        self.check(used(after) == used(before) and after["mooncake_master_objects"]
                   == before["mooncake_master_objects"],
                   "the refused forks left the pool as it was")

    def remove_everything(self, store, master: Master, m0, m_fork, first_page) -> int:
        """Removes the context (its bytes stay while clones refer to them), then every
        branch; returns the bytes still used beyond the starting figure `m0`."""
        L, args = self.layers, self.args
        rcs = store.batch_remove(page_keys(CONTEXT_PREFIX, L, self.ctx_pages), True)
        m = master.settle()
        self.check(all(rc == 0 for rc in rcs) and used(m) == used(m_fork),
                   f"context removed: pool used unchanged "
                   f"({(used(m) - used(m0)) / 2**20:.2f} MiB), the branches hold its bytes")
        probe = torch.zeros_like(first_page[0])  # layer 0 of page 0: [2, page, heads, dim]
        store.register_buffer(probe.data_ptr(), M.tensor_nbytes(probe))
        n = store.get_into(page_keys("branch0/" + CONTEXT_PREFIX, L, range(1))[0],
                           probe.data_ptr(), M.tensor_nbytes(probe))
        store.unregister_buffer(probe.data_ptr())
        self.check(n == M.tensor_nbytes(probe) and torch.equal(probe, first_page[0]),
                   "a clone still reads the context's bytes after the context is removed")
        for i in range(args.branches):
            keys = (page_keys(f"branch{i}/" + CONTEXT_PREFIX, L, self.ctx_pages)
                    + page_keys(f"branch{i}/new/", L, self.new_pages))
            rcs = store.batch_remove(keys, True)  # force: reads' leases may still be live
            if any(rc != 0 for rc in rcs):
                self.failures.append(f"batch_remove of branch {i}: {sorted(set(rcs))}")
        m_end = master.wait_used(used(m0), timeout_s=args.lease_ms / 1e3 + 10)
        leaked = used(m_end) - used(m0)
        self.check(leaked == 0 and m_end["mooncake_master_shared_bytes"] == 0
                   and m_end["mooncake_master_objects"] == m0["mooncake_master_objects"],
                   f"everything removed: pool used back to its starting figure ({used(m0)} B), "
                   f"{leaked} B leaked, shared bytes "
                   f"{int(m_end['mooncake_master_shared_bytes'])}")
        return leaked


def run(args) -> int:
    torch.set_num_threads(args.threads)
    r = Run(args)
    L, nb = r.layers, args.branches
    print(f"agent fork: preset {r.config.name}, context {args.context} tokens, {nb} branches "
          f"x ({args.suffix} suffix + {args.decode} decoded tokens), page {args.page} tokens, "
          f"{L} layers x {len(r.ctx_pages)} pages = {L * len(r.ctx_pages)} context objects, "
          f"torch threads {args.threads}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}")
    refs = r.references()

    from mooncake.store import MooncakeDistributedStore
    master = Master(args.master_bin, args.lease_ms)
    store = MooncakeDistributedStore()
    try:
        rc = store.setup("127.0.0.1", "P2PHANDSHAKE", args.segment_mib << 20, 16 << 20, "tcp",
                         "", master.rpc)
        if rc != 0:
            raise RuntimeError(f"store setup failed: {rc} {store.last_error()}")
        m0 = master.settle()
        cache, blocks = r.new_cache(r.total)
        if store.register_buffer(cache.buffer.data_ptr(), cache.nbytes) != 0:
            raise RuntimeError("register_buffer failed")
        ctx_bytes, put_s, first_page = r.put_context(store, cache, blocks)
        clone_s, branch_bytes, results = r.fork_branches(store, cache, blocks)
        m_fork = master.settle()

        print("checks:")
        same = [results[i] == refs[i] for i in range(nb)]
        r.check(all(same), f"tokens and every step's logits identical to the independent run: "
                           f"{sum(same)}/{nb} branches")
        distinct = len({tuple(tokens) for tokens, _ in results})
        r.check(distinct == nb or args.decode < 2,
                f"branches diverge: {distinct} distinct continuations of {nb}")
        used_fork = used(m_fork) - used(m0)
        copies = nb * ctx_bytes + branch_bytes
        shared = int(m_fork["mooncake_master_shared_bytes"] - m0["mooncake_master_shared_bytes"])
        cloned = int(m_fork["mooncake_master_cloned_bytes_total"]
                     - m0["mooncake_master_cloned_bytes_total"])
        r.check(used_fork < 1.5 * (ctx_bytes + branch_bytes),
                f"pool used after the fork {used_fork / 2**20:.2f} MiB < 1.5 x (context "
                f"{ctx_bytes / 2**20:.2f} MiB + branch pages {branch_bytes / 2**20:.2f} MiB)")
        r.check(shared == nb * ctx_bytes and cloned == shared,
                f"mooncake_master_shared_bytes {shared / 2**20:.2f} MiB and _cloned_bytes_total "
                f"{cloned / 2**20:.2f} MiB = {nb} x context")
        r.check_bad_forks(store, master, m_fork)
        leaked = r.remove_everything(store, master, m0, m_fork, first_page)

        med = statistics.median(clone_s)
        print("summary:")
        print(f"  clone latency per branch (one clone_prefix of {L * len(r.ctx_pages)} keys, "
              f"{ctx_bytes / 2**20:.1f} MiB): median {med * 1e3:.2f} ms (min "
              f"{min(clone_s) * 1e3:.2f}, max {max(clone_s) * 1e3:.2f}) over {nb} branches; "
              f"baseline in the same run: putting the context's pages (what a copy per branch "
              f"would write) took {put_s * 1e3:.1f} ms, {put_s / med:.0f}x the median clone")
        print(f"  pool used after the fork: {used_fork / 2**20:.2f} MiB; {nb} full copies would "
              f"use {copies / 2**20:.2f} MiB ({nb} x {ctx_bytes / 2**20:.2f} MiB context + "
              f"{branch_bytes / 2**20:.2f} MiB branch pages): {copies / used_fork:.2f}x less")
        print(f"  tokens identical to the independent run: {'yes' if all(same) else 'no'}")
        print(f"  leaked after removing everything: {leaked} B")
    finally:
        store.close()
        master.stop()
    if args.cmd == "bench" and args.decode < 256:
        print(f"note: {args.decode} decoded tokens per branch, not the full 256")
    if r.failures:
        print(f"FAIL: {len(r.failures)} check(s) failed: " + "; ".join(r.failures))
        return 1
    print("OK")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sizes = {"check": dict(context=512, branches=3, decode=16, page=64, segment_mib=64),
             "bench": dict(context=16384, branches=8, decode=256, page=256, segment_mib=256)}
    for name, d in sizes.items():
        p = sub.add_parser(name)
        p.add_argument("--master-bin", required=True, help="the mooncake_master program")
        p.add_argument("--preset", default="demo", help="model preset (model.py)")
        p.add_argument("--context", type=int, default=d["context"], help="context tokens")
        p.add_argument("--branches", type=int, default=d["branches"])
        p.add_argument("--suffix", type=int, default=4, help="tokens of each branch's own suffix")
        p.add_argument("--decode", type=int, default=d["decode"], help="tokens decoded per branch")
        p.add_argument("--page", type=int, default=d["page"], help="tokens per page object")
        p.add_argument("--segment-mib", type=int, default=d["segment_mib"],
                       help="the memory this process gives the pool")
        p.add_argument("--lease-ms", type=int, default=500, help="the master's read lease")
        p.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    if args.branches < 1 or args.decode < 1 or args.suffix < 1 or args.context < args.page:
        parser.error("need --branches, --decode, --suffix >= 1 and --context >= --page")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
