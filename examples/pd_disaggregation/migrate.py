#!/usr/bin/env python3
"""Live migration of a decode request between decode instances, over the PD connectors.

A request decoding on instance A moves to instance B without changing a bit of
its output. Each instance is a decode instance (pd_demo.py's) that also holds a
PrefillConnector over its own cache, so it can be the source of another
instance's pull. The protocol, driven by A's migration thread:

  0. B /migrate_in: B allocates blocks for the whole request (prompt and every
     token still to come).
  1. pre-copy (A keeps decoding): the blocks that are full when the migration
     starts never change again. A adds them to its PrefillConnector as chunk
     requests of --chunk-blocks blocks (every layer saved at once); B pulls the
     chunks one after the other, sleeping --chunk-pause-ms between them so that
     A's sender thread and B's receiver do not take the CPU A decodes on.
  2. pause: A's decode thread parks at the next step boundary. A adds the
     blocks written since phase 1 began (the partial block at the start, any
     filled during phase 1, the partial last block) as one request; B /commit
     pulls it, answers, and decodes on from A's last token and position.
  A's blocks are freed when every chunk request has been handed back.
With --copy-nice the connectors' threads run at that nice value, so that under
CPU contention the copy yields to decode.

Failure behaviour: any error before B's /commit answers (B unreachable, dead
or refusing; a pull that fails) aborts A's chunk requests, tells B to drop
the request (best effort) and A goes on decoding: during pre-copy A never
stopped; after the pause A resumes from where it parked. The KV of A's cache
is never written by the migration, so A's tokens stay bit-identical.
B's blocks that a failed pull may still write are freed only after the
connector's reusable_after.

Subcommands:
  instance  one decode instance with migration in and out (used by check and bench)
  check     tiny preset: migrated runs (and the failure cases) against one process
            doing prefill and decode itself, tokens and every logits vector bit for bit
  bench     demo preset: per-token latency before and during the pre-copy, pause,
            migration time and bytes, throttled and unthrottled

Every process uses one torch thread (model.py: bit-exactness needs the same
thread count everywhere).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
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
import model as M  # noqa: E402
import pd_demo as D  # noqa: E402

from mooncake.connector import ConnectorError, DecodeConnector, PrefillConnector  # noqa: E402

HTTP_TIMEOUT_S = 60.0  # every call between instances is bounded
RELEASE_WAIT_S = 10.0  # A waits this long for its chunk requests to be handed back


def threads() -> set[int]:
    """This process's thread ids (Linux)."""
    return {int(t) for t in os.listdir("/proc/self/task")}


class Request:
    """One request decoding on an instance (A's, or B's after a migration).

    The decode thread owns tokens/digests/step_times and `pos`; the migration
    thread reads them only while the decode thread is parked (after `parked`
    is set), which is the pause."""

    def __init__(self, rid: str, blocks: list[int], prompt_len: int, max_new: int):
        self.rid, self.blocks, self.prompt_len, self.max_new = rid, blocks, prompt_len, max_new
        self.tokens: list[int] = []
        self.digests: list[str] = []
        self.step_times: list[tuple[float, float]] = []  # (start, end) of each decode step
        self.pos = prompt_len  # tokens whose KV is in the cache
        self.decode_cpu_s = 0.0  # the decode thread's own CPU time
        self.step_cpu: list[float] = []  # of each step
        self.pause_wanted = threading.Event()
        self.parked = threading.Event()  # parked at a step boundary, or finished
        self.resume = threading.Event()
        self.finished = False
        self.migrated = False
        self.migration: dict = {}
        self.done = threading.Event()  # result ready (decode and migration threads ended)


# --- the instance --------------------------------------------------------------------

class Instance:
    """A decode instance that can move its requests out (source) and in (target)."""

    def __init__(self, args):
        torch.set_num_threads(1)
        self.config = M.ModelConfig.preset(args.preset)
        self.model = M.LlamaModel(self.config, seed=0)
        self.cache, _ = D.make_cache(args, self.config, shared=False)
        layout, bases = D.connector_layout(self.cache, self.config)
        # The connectors' own threads (transport, RPC, sender) run at nice
        # --copy-nice: under CPU contention they yield to the decode thread.
        # Threads they start later inherit it from the thread that starts them.
        before = threads()
        self.dc = DecodeConnector(layout, bases, protocol="tcp")
        self.pc = PrefillConnector(layout, bases, protocol="tcp",
                                   request_timeout_s=args.request_timeout_s)
        for tid in threads() - before:
            # Never below the nice the process already runs at (lowering it
            # needs CAP_SYS_NICE).
            os.setpriority(os.PRIO_PROCESS, tid,
                           max(args.copy_nice, os.getpriority(os.PRIO_PROCESS, tid)))
        self.bs = args.block_size
        self.mu = threading.Lock()  # allocator, requests, incoming, released
        self.requests: dict[str, Request] = {}
        self.incoming: dict[str, dict] = {}  # migrations into this instance, before /commit
        self.released: dict[str, int] = {}  # chunk request id -> status code (PrefillConnector)
        self.counts = {"migrated_out": 0, "migrated_in": 0, "migrations_failed": 0}

    # blocks ------------------------------------------------------------------------
    def allocate(self, n: int) -> list[int]:
        with self.mu:
            return self.cache.allocator.allocate(n)

    def free(self, blocks: list[int], after_s: float = 0.0) -> None:
        """Frees blocks now, or after a failed pull's reusable_after."""
        def go():
            with self.mu:
                self.cache.allocator.free(blocks)
        if after_s > 0:
            threading.Timer(after_s, go).start()
        else:
            go()

    # the request on its first instance (from the prefill) ---------------------------
    def prepare(self, req):
        n, max_new = req["num_tokens"], req["max_new_tokens"]
        blocks = self.allocate(M.blocks_needed(n + max_new - 1, self.bs))
        r = Request(req["request_id"], blocks, n, max_new)
        with self.mu:
            self.requests[r.rid] = r
        self.dc.start_request(r.rid, req["sources"], blocks, n)
        return {"blocks": len(blocks)}

    def start(self, req):
        """The prompt's KV is being pulled; waits for it and starts decoding."""
        r = self.requests[req["request_id"]]
        self.dc.wait_all(r.rid, HTTP_TIMEOUT_S)
        self.dc.end(r.rid)
        r.tokens = [req["first_token"]]
        threading.Thread(target=self.decode_loop, args=(r, req.get("migrate")),
                         daemon=True).start()
        return {"started": True}

    def decode_loop(self, r: Request, migrate: dict | None) -> None:
        mig_thread = None
        while len(r.tokens) < r.max_new:
            last = len(r.tokens) == r.max_new - 1
            if last and mig_thread and migrate.get("wait_at_last_step"):
                # The check's knob: the migration's pause comes before the last step at the
                # latest, whatever the machine's load (else A may finish first).
                while mig_thread.is_alive() and not r.pause_wanted.wait(0.005):
                    pass
            if r.pause_wanted.is_set():
                r.parked.set()
                r.resume.wait()
                if r.migrated:
                    break
                r.pause_wanted.clear()
            t0, c0 = time.time(), time.thread_time()
            logits = self.model.decode_step(r.tokens[-1], r.pos, self.cache, r.blocks)
            r.tokens.append(int(torch.argmax(logits)))
            r.digests.append(D.digest(logits))
            r.pos += 1
            r.step_times.append((t0, time.time()))
            r.step_cpu.append(time.thread_time() - c0)
            r.decode_cpu_s += r.step_cpu[-1]
            if migrate and len(r.step_times) == migrate["after_steps"]:
                mig_thread = threading.Thread(target=self.migrate_out, args=(r, migrate),
                                              daemon=True)
                mig_thread.start()
        r.finished = not r.migrated
        r.parked.set()  # a migration still waiting for the pause sees `finished`
        if mig_thread:
            mig_thread.join()
        if r.migration.get("unreleased", 0) == 0:  # else a pull may still read them: kept
            self.free(r.blocks)
        r.done.set()

    def result(self, req):
        with self.mu:
            r = self.requests[req["request_id"]]
        if not r.done.wait(req.get("timeout_s", 600)):
            raise TimeoutError(f"{r.rid} not done")
        with self.mu:
            del self.requests[r.rid]
        return {"tokens": r.tokens, "steps": r.digests, "step_times": r.step_times,
                "step_cpu": r.step_cpu,
                "migrated": r.migrated, "migration": r.migration, "pos": r.pos}

    # migrating out (A) -----------------------------------------------------------------
    def add_chunk(self, cid: str, blocks: list[int], num_tokens: int) -> None:
        """Offers blocks whose KV is final to a pull; every layer at once."""
        self.pc.add_request(cid, blocks, num_tokens)
        for layer in range(self.config.num_layers):
            self.pc.save_layer(cid, layer)

    def wait_released(self, cids: list[str], timeout_s: float) -> list[str]:
        """Collects the PrefillConnector's hand-backs; returns the ids still held."""
        deadline = time.time() + timeout_s
        while True:
            with self.mu:
                for cid, _blocks, code, _msg in self.pc.take_released():
                    self.released[cid] = code
                left = [c for c in cids if c not in self.released]
                if not left or time.time() > deadline:
                    for c in cids:
                        self.released.pop(c, None)
                    return left
            time.sleep(0.005)

    def migrate_out(self, r: Request, m: dict) -> None:
        """Moves request r to m["target"] (an instance's HTTP address)."""
        target, info, cids = m["target"], r.migration, []
        info.update(start=time.time(), steps_at_start=len(r.step_times))
        try:
            if m.get("fail") == "unreachable":
                target = "127.0.0.1:1"
            out = D.post(target + "/migrate_in", {"request_id": r.rid, "num_blocks": len(r.blocks)},
                         timeout=HTTP_TIMEOUT_S)
            if "error" in out:
                raise RuntimeError(f"migrate_in: {out['error']}")
            bytes0 = self.pc.stats()["bytes_sent"]
            full = r.pos // self.bs  # full now: their KV never changes again
            step = m.get("chunk_blocks") or max(full, 1)
            chunks = [(f"{r.rid}/pre{i}", s, min(step, full - s))
                      for i, s in enumerate(range(0, full, step))]
            for cid, s, n in chunks:
                self.add_chunk(cid, r.blocks[s:s + n], n * self.bs)
                cids.append(cid)
            info["precopy_start"] = time.time()
            cpu0, decode_cpu0 = time.process_time(), r.decode_cpu_s
            out = D.post(target + "/precopy", {
                "request_id": r.rid, "source": self.pc.rpc_address, "chunks": chunks,
                "pause_ms": m.get("chunk_pause_ms", 0), "fail": m.get("fail")},
                timeout=HTTP_TIMEOUT_S)
            if "error" in out:
                raise RuntimeError(f"precopy: {out['error']}")
            # this process's CPU for the copy: all of it but the decode thread's
            a_cpu_s = time.process_time() - cpu0 - (r.decode_cpu_s - decode_cpu0)
            info.update(precopy_end=time.time(), phase1_blocks=full, a_precopy_cpu_s=a_cpu_s,
                        b_precopy_cpu_s=out["cpu_s"],
                        phase1_bytes=self.pc.stats()["bytes_sent"] - bytes0)
            self.pause_and_commit(r, m, target, full, cids)
        except Exception as e:  # the request stays here: A goes on (or resumes)
            info["error"] = f"{type(e).__name__}: {e}"
            self.counts["migrations_failed"] += 1
            for cid in cids:
                try:
                    self.pc.abort(cid, "migration abandoned")
                except ConnectorError:
                    pass  # already handed back
            try:  # best effort: a target that is gone frees nothing
                D.post(target + "/abort_in", {"request_id": r.rid}, timeout=2.0)
            except Exception:  # noqa: BLE001 (any way B is gone: nothing to free there)
                pass
            r.resume.set()
        info["unreleased"] = len(self.wait_released(cids, RELEASE_WAIT_S))

    def pause_and_commit(self, r: Request, m: dict, target: str, full: int,
                         cids: list[str]) -> None:
        """Phase 2: parks the decode thread and hands the request to the target."""
        r.pause_wanted.set()
        r.parked.wait()
        info = r.migration
        info["pause_start"] = time.time()
        if r.finished:
            raise RuntimeError("the request finished before the pause")
        bytes0 = self.pc.stats()["bytes_sent"]
        end = M.blocks_needed(r.pos, self.bs)
        tail = None
        if r.pos > full * self.bs:  # the blocks written since phase 1 began
            tail = (f"{r.rid}/final", full, end - full, r.pos - full * self.bs)
            self.add_chunk(tail[0], r.blocks[full:end], tail[3])
            cids.append(tail[0])
        out = D.post(target + "/commit", {
            "request_id": r.rid, "source": self.pc.rpc_address, "tail": tail, "pos": r.pos,
            "last_token": r.tokens[-1], "max_new_tokens": r.max_new - len(r.tokens),
            "fail": m.get("fail")}, timeout=HTTP_TIMEOUT_S)
        if "error" in out:
            raise RuntimeError(f"commit: {out['error']}")
        info.update(pause_end=time.time(), phase2_blocks=end - full,
                    phase2_bytes=self.pc.stats()["bytes_sent"] - bytes0, resumed_at_pos=r.pos)
        r.migrated = True
        self.counts["migrated_out"] += 1
        r.resume.set()

    # migrating in (B) ------------------------------------------------------------------
    # An incoming migration's state, until /commit or a drop: its blocks, a lock held
    # while a pull writes them (a drop waits for it), and when a failed pull's writes
    # can no longer land.
    def migrate_in(self, req):
        blocks = self.allocate(req["num_blocks"])
        with self.mu:
            self.incoming[req["request_id"]] = {"blocks": blocks, "lock": threading.Lock(),
                                                "reusable_after_s": 0.0}
        return {"blocks": len(blocks)}

    def pull(self, st: dict, cid: str, source: str, first: int, n: int,
             num_tokens: int) -> None:
        """Pulls one chunk request from `source` into blocks first..first+n; raises
        on failure, noting when the blocks may be reused. REQUIRES: st["lock"] held."""
        self.dc.start_request(cid, [source], st["blocks"][first:first + n], num_tokens)
        try:
            self.dc.wait_all(cid, HTTP_TIMEOUT_S)
        except ConnectorError:
            now, after_s = self.dc.end(cid)  # cancels; a source that cannot confirm...
            if not now:  # ...may still write until after_s
                st["reusable_after_s"] = max(st["reusable_after_s"], after_s)
            raise
        self.dc.end(cid)

    def incoming_locked(self, rid: str) -> dict:
        """The incoming migration, its lock acquired; KeyError once dropped."""
        with self.mu:
            st = self.incoming[rid]
        st["lock"].acquire()
        if st.get("dropped"):
            st["lock"].release()
            raise KeyError(f"migration of {rid} was dropped")
        return st

    def precopy(self, req):
        rid, cpu0 = req["request_id"], time.process_time()
        for i, (cid, first, n) in enumerate(req["chunks"]):
            if i and req["pause_ms"]:
                time.sleep(req["pause_ms"] / 1e3)  # the throttle
            st = self.incoming_locked(rid)  # a drop between chunks stops the pre-copy
            try:
                self.pull(st, cid, req["source"], first, n, n * self.bs)
            except ConnectorError:
                self.drop(rid, st)  # the source is gone or refuses: nothing to wait for
                raise
            finally:
                st["lock"].release()
            if req.get("fail") == "die_in_precopy":
                os.kill(os.getpid(), signal.SIGKILL)
        return {"chunks": len(req["chunks"]), "cpu_s": time.process_time() - cpu0}

    def commit(self, req):
        rid = req["request_id"]
        st = self.incoming_locked(rid)
        try:
            if req.get("fail") == "die_at_commit":
                os.kill(os.getpid(), signal.SIGKILL)
            if req["tail"]:
                cid, first, n, num_tokens = req["tail"]
                self.pull(st, cid, req["source"], first, n, num_tokens)
        except ConnectorError:
            self.drop(rid, st)  # A resumes: it gets the error
            raise
        finally:
            st["lock"].release()
        with self.mu:
            del self.incoming[rid]
            r = Request(rid, st["blocks"], req["pos"], req["max_new_tokens"] + 1)
            r.tokens = [req["last_token"]]  # fed first, not part of this side's output
            self.requests[rid] = r
        self.counts["migrated_in"] += 1
        threading.Thread(target=self.decode_loop, args=(r, None), daemon=True).start()
        return {"resumed": True}

    def drop(self, rid: str, st: dict) -> None:
        """Forgets an incoming migration and frees its blocks (after any failed pull's
        reusable_after). REQUIRES: st["lock"] held."""
        with self.mu:
            if self.incoming.get(rid) is st:
                del self.incoming[rid]
        if not st.get("dropped"):
            st["dropped"] = True
            self.free(st["blocks"], st["reusable_after_s"])

    def abort_in(self, req):
        """The source gave up (before /commit answered)."""
        try:
            st = self.incoming_locked(req["request_id"])  # waits for a pull in progress
        except KeyError:
            return {"dropped": False}
        try:
            self.drop(req["request_id"], st)
        finally:
            st["lock"].release()
        return {"dropped": True}

    def stats(self, _req):
        with self.mu:
            used = self.cache.allocator.num_used
        return {"blocks_used": used, "prefill_connector": self.pc.stats(), **self.counts}

    def serve(self) -> None:
        D.serve({"/prepare": self.prepare, "/start": self.start, "/result": self.result,
                 "/migrate_in": self.migrate_in, "/precopy": self.precopy,
                 "/commit": self.commit, "/abort_in": self.abort_in, "/stats": self.stats},
                {"role": "decode", "rpc": self.dc.rpc_address})


def cmd_instance(args) -> None:
    Instance(args).serve()


# --- the driver ----------------------------------------------------------------------

def start_instance(cluster: D.Cluster, args, layout: str) -> dict:
    argv = [sys.executable, os.path.abspath(__file__), "instance", "--preset", args.preset,
            "--layout", layout, "--block-size", "16", "--num-blocks", str(args.num_blocks),
            "--copy-nice", str(args.copy_nice)]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    cluster.procs.append(p)
    line = p.stdout.readline()
    if not line:
        raise RuntimeError("instance did not start")
    return dict(json.loads(line), proc=p)


def run_request(rid: str, prompt: list[int], max_new: int, pre: dict, a: dict,
                migrate: dict | None) -> dict:
    """Prefill -> A (pull, decode); A migrates to B if asked. The whole output."""
    D.post(a["http"] + "/prepare", {"request_id": rid, "num_tokens": len(prompt),
                                    "max_new_tokens": max_new, "sources": [pre["rpc"]]})
    first = D.post(pre["http"] + "/prefill", {"request_id": rid, "tokens": prompt})
    out = D.post(a["http"] + "/start", {"request_id": rid, "first_token": first["first_token"],
                                        "migrate": migrate})
    if "error" in out:
        return out
    ra = D.post(a["http"] + "/result", {"request_id": rid})
    res = {"tokens": ra["tokens"], "steps": ra["steps"], "prefill_logits": first["logits"],
           "a": ra, "migration": ra["migration"], "migrated": ra["migrated"]}
    if ra["migrated"]:
        rb = D.post(migrate["target"] + "/result", {"request_id": rid})
        res["tokens"] = ra["tokens"] + rb["tokens"][1:]
        res["steps"] = ra["steps"] + rb["steps"]
        res["b"] = rb
    return res


def identical(out: dict, ref) -> bool:
    ref_toks, ref_logits, *_ = ref
    return (out.get("tokens") == ref_toks and out.get("prefill_logits") == ref_logits[0]
            and out.get("steps") == ref_logits[1:])


def blocks_free(instances: list[dict], timeout_s: float = 10.0) -> bool:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if not any(D.post(i["http"] + "/stats", {})["blocks_used"] for i in instances):
            return True
        time.sleep(0.05)
    return False


def cmd_check(args) -> int:
    """Migrated runs and the failure cases against one process, bit for bit."""
    lengths = [int(x) for x in args.lengths.split(",")]
    refs = {n: D.reference(args, M.make_prompt(n, seed=n), args.max_new) for n in lengths}
    cases = [  # (name, B's layout, fail)
        ("vllm16 A -> vllm16 B", "vllm", None),
        ("vllm16 A -> sglang16 B", "sglang", None),
        ("B unreachable: A keeps decoding", "vllm", "unreachable"),
        ("B killed in pre-copy: A keeps decoding", "vllm", "die_in_precopy"),
        ("B killed after the pause: A resumes", "vllm", "die_at_commit"),
    ]
    rows, failures = [], 0
    cluster = D.Cluster()
    try:
        pre = cluster.start(D.instance_args(args, "prefill", "vllm", 16, "tcp"))
        a = start_instance(cluster, args, "vllm")
        for name, b_layout, fail in cases:
            b = start_instance(cluster, args, b_layout)
            for n in lengths:
                m = {"target": b["http"], "after_steps": args.migrate_after, "chunk_blocks": 2,
                     "chunk_pause_ms": 1, "fail": fail, "wait_at_last_step": True}
                out = run_request(f"{name}-{n}", M.make_prompt(n, seed=n), args.max_new, pre,
                                  a, m)
                mig = out.get("migration", {})
                paused = "pause_start" in mig
                ok = (identical(out, refs[n]) and out.get("migrated") == (fail is None)
                      and paused == (fail in (None, "die_at_commit"))
                      and mig.get("unreleased", 1) == 0)
                what = (f"{len(out.get('tokens', []))} tokens, moved at pos "
                        f"{mig.get('resumed_at_pos')}" if fail is None else
                        f"kept on A, {'resumed after the pause' if paused else 'never paused'}")
                rows.append((name, n, what, "bit-identical" if ok else f"DIFFERENT {out}"))
                failures += not ok
                if fail and fail.startswith("die"):
                    try:
                        killed = b["proc"].wait(timeout=10) == -signal.SIGKILL
                    except subprocess.TimeoutExpired:
                        killed = False
                    if not killed:
                        rows.append((name, n, "B was not killed", "FAILED"))
                        failures += 1
                    b = start_instance(cluster, args, b_layout)  # the next length's target
            free_ok = blocks_free([a, b])
            rows.append((name, "-", "blocks after the case", "none used" if free_ok
                         else "LEAKED"))
            failures += not free_ok
            b["proc"].terminate()
    finally:
        cluster.stop()
    width = max(len(r[0]) for r in rows)
    for r in rows:
        print(f"{r[0]:<{width}}  {str(r[1]):>5}  {r[2]:<44} {r[3]}")
    print(f"migrate check: {len(rows) - failures} passed, {failures} failed")
    return 1 if failures else 0


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def bench_row(out: dict, warmup_steps: int) -> dict:
    """One migrated run's figures; times in ms. "before": A's steps that ended
    before the migration started (less the warm-up); "pre-copy": A's steps that
    overlap [migration start, pre-copy end]."""
    mig, a, b = out["migration"], out["a"], out["b"]
    steps = list(zip(a["step_times"], a["step_cpu"]))
    before = [((e - s) * 1e3, c * 1e3) for (s, e), c in steps[warmup_steps:]
              if e <= mig["start"]]
    during = [((e - s) * 1e3, c * 1e3) for (s, e), c in steps
              if e > mig["start"] and s < mig["precopy_end"]]
    row = {"before_n": len(before), "precopy_n": len(during)}
    for name, v in (("before", before), ("precopy", during)):
        row.update({f"{name}_p50": pct([x[0] for x in v], 0.5),
                    f"{name}_p99": pct([x[0] for x in v], 0.99),
                    f"{name}_cpu_p50": pct([x[1] for x in v], 0.5)})
    row["p99_ratio"] = row["precopy_p99"] / row["before_p99"]
    row.update(
        precopy_ms=(mig["precopy_end"] - mig["precopy_start"]) * 1e3,
        a_copy_cpu_ms=mig["a_precopy_cpu_s"] * 1e3, b_copy_cpu_ms=mig["b_precopy_cpu_s"] * 1e3,
        pause_ms=(mig["pause_end"] - mig["pause_start"]) * 1e3,
        # what the client sees: A's last token to B's first
        token_gap_ms=(b["step_times"][0][1] - a["step_times"][-1][1]) * 1e3,
        total_ms=(mig["pause_end"] - mig["start"]) * 1e3,
        phase1_kib=mig["phase1_bytes"] / 1024, phase2_kib=mig["phase2_bytes"] / 1024,
        phase1_blocks=mig["phase1_blocks"], phase2_blocks=mig["phase2_blocks"],
        b_p50=pct([(e - s) * 1e3 for s, e in b["step_times"]], 0.5))
    return row


def cmd_bench(args) -> int:
    n = int(args.lengths.split(",")[0])
    prompt = M.make_prompt(n, seed=n)
    ref = D.reference(args, prompt, args.max_new)
    modes = [("throttled", args.chunk_blocks, args.chunk_pause_ms), ("unthrottled", 0, 0)]
    rows: dict[str, list] = {name: [] for name, _, _ in modes}
    same = True
    cluster = D.Cluster()
    try:
        pre = cluster.start(D.instance_args(args, "prefill", "vllm", 16, "tcp"))
        a = start_instance(cluster, args, "vllm")
        b = start_instance(cluster, args, "vllm")
        # Warm-up (not counted): B's first decode steps in a fresh process are slow.
        run_request("warmup", prompt, 12, pre, a,
                    {"target": b["http"], "after_steps": 4, "wait_at_last_step": True})
        for rep in range(args.reps):
            for name, chunk, pause in modes:
                m = {"target": b["http"], "after_steps": args.migrate_after,
                     "chunk_blocks": chunk, "chunk_pause_ms": pause}
                out = run_request(f"{name}{rep}", prompt, args.max_new, pre, a, m)
                if not out.get("migrated"):
                    raise RuntimeError(f"not migrated: {out.get('migration')}")
                same &= identical(out, ref)
                row = bench_row(out, args.warmup_steps)
                rows[name].append(row)
                print(json.dumps(dict(row, mode=name, rep=rep, identical=identical(out, ref))),
                      flush=True)
    finally:
        cluster.stop()
    print_table(args, n, rows, same)
    return 0 if same else 1


TABLES = [  # (title, [(column, key, format)])
    ("A's per-token latency, ms (CPU: the decode thread's own CPU time per step)", [
        ("p50 before", "before_p50", ".1f"), ("P99 before", "before_p99", ".1f"),
        ("p50 in pre-copy", "precopy_p50", ".1f"), ("P99 in pre-copy", "precopy_p99", ".1f"),
        ("P99 in pre-copy / before", "p99_ratio", ".2f"), ("steps before", "before_n", ".0f"),
        ("steps in pre-copy", "precopy_n", ".0f"), ("CPU p50 before", "before_cpu_p50", ".1f"),
        ("CPU p50 in pre-copy", "precopy_cpu_p50", ".1f")]),
    ("The migration, ms and KiB (copy CPU: A's other threads and B's process, pre-copy)", [
        ("pre-copy", "precopy_ms", ".1f"), ("copy CPU A", "a_copy_cpu_ms", ".1f"),
        ("copy CPU B", "b_copy_cpu_ms", ".1f"), ("pause", "pause_ms", ".1f"),
        ("token gap at the move", "token_gap_ms", ".1f"), ("total", "total_ms", ".1f"),
        ("phase 1 KiB", "phase1_kib", ",.0f"), ("phase 1 blocks", "phase1_blocks", ".0f"),
        ("phase 2 KiB", "phase2_kib", ",.0f"), ("phase 2 blocks", "phase2_blocks", ".0f"),
        ("B step p50", "b_p50", ".1f")]),
]


def print_table(args, n: int, rows: dict, same: bool) -> None:
    print(f"\nLive migration, {args.preset} preset, {n}-token prompt, {args.max_new} tokens, "
          f"migration after {args.migrate_after} steps on A; TCP, 1 torch thread per process; "
          f"median of {args.reps} runs, each figure its own median")
    print(f"throttled: chunks of {args.chunk_blocks} blocks of 16 tokens, "
          f"{args.chunk_pause_ms:g} ms between chunks; unthrottled: one request, no pause")
    for title, cols in TABLES:
        print(f"\n{title}\n| mode | " + " | ".join(c[0] for c in cols) + " |")
        print("|---" * (len(cols) + 1) + "|")
        for mode, rs in rows.items():
            cells = [format(sorted(r[key] for r in rs)[len(rs) // 2], fmt) for _, key, fmt in cols]
            print(f"| {mode} | " + " | ".join(cells) + " |")
    print(f"\ntokens and every logits vector vs an unmigrated run: "
          f"{'bit-identical' if same else 'DIFFERENT'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("instance")
    p.add_argument("--preset", default="tiny")
    p.add_argument("--layout", default="vllm", choices=["vllm", "sglang"])
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--num-blocks", type=int, default=1024)
    p.add_argument("--request-timeout-s", type=float, default=120.0)
    p.add_argument("--copy-nice", type=int, default=0,
                   help="nice value of the connectors' threads (0..19)")
    p.add_argument("--heads", help=argparse.SUPPRESS)  # D.make_cache reads it: all heads
    for name in ("check", "bench"):
        p = sub.add_parser(name)
        p.add_argument("--preset", default="tiny" if name == "check" else "demo")
        p.add_argument("--lengths", default="17,300" if name == "check" else "2048",
                       help="prompt lengths (bench: the first)")
        p.add_argument("--max-new", type=int, default=24 if name == "check" else 256)
        p.add_argument("--migrate-after", type=int, default=8 if name == "check" else 128,
                       help="decode steps on A before the migration starts")
        p.add_argument("--num-blocks", type=int, default=1024)
        p.add_argument("--request-timeout-s", type=float, default=120.0)
        p.add_argument("--reps", type=int, default=3)
        p.add_argument("--chunk-blocks", type=int, default=8)
        p.add_argument("--chunk-pause-ms", type=float, default=10.0)
        p.add_argument("--copy-nice", type=int, default=0,
                       help="nice value of the instances' connector threads")
        p.add_argument("--warmup-steps", type=int, default=4,
                       help="A's first steps, left out of the 'before' figures")
    args = ap.parse_args()
    return {"instance": cmd_instance, "check": cmd_check, "bench": cmd_bench}[args.cmd](args) or 0


if __name__ == "__main__":
    sys.exit(main())
