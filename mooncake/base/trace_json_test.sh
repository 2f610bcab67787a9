#!/bin/bash
# trace_test writes a Chrome trace (spans from several threads, a name with
# control bytes); Python's json module must parse it back, and every event
# must have the fields Perfetto reads.
set -eu
out="${TEST_TMPDIR:-/tmp}/trace.json"
TRACE_JSON_OUT="$out" mooncake/base/trace_test --gtest_filter='*WritesJsonForTheParserCheck*'
/usr/bin/python3 - "$out" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
events = doc["traceEvents"]
spans = [e for e in events if e["ph"] == "X"]
meta = [e for e in events if e["ph"] == "M"]
assert len([e for e in spans if e["name"] == "parse.check"]) == 30, spans
assert any(e["name"] == "control\x01\n" for e in spans), "escaped name lost"
for e in spans:
    assert isinstance(e["ts"], (int, float)) and e["dur"] >= 0, e
    assert {"pid", "tid", "cat", "args"} <= e.keys(), e
    assert {"batch", "slice", "bytes"} <= e["args"].keys(), e
tids = {e["tid"] for e in spans}
assert len(tids) >= 5, tids  # three writers' threads, two tracks of Records
assert tids <= {e["tid"] for e in meta if e["name"] == "thread_name"}, "a thread without a name"
# Every track's events nest (Chrome and Perfetto draw nothing else).
by_tid = {}
for e in spans:
    by_tid.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
for tid, ivs in by_tid.items():
    ivs.sort(key=lambda iv: (iv[0], -iv[1]))
    stack = []
    for start, end in ivs:
        while stack and stack[-1] <= start:
            stack.pop()
        assert not stack or end <= stack[-1] + 1e-3, ("overlap on track", tid, start, end, stack)
        stack.append(end)
overlap = sorted((e["ts"], e["tid"]) for e in spans if e["name"] in ("overlap", "control\x01\n"))
assert overlap[0][1] == overlap[2][1] != overlap[1][1], overlap
print("ok:", len(spans), "spans,", len(tids), "threads")
PY
