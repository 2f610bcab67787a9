"""A transfer-engine peer process for the tests: initializes a
mooncake.engine.TransferEngine, allocates one managed buffer (registered) and
prints one JSON line {"rpc_port", "addr", "len", "first"}; then runs commands
from stdin, one line each, answering one line:
  fill OFF LEN SEED    -> fills [addr+OFF, +LEN) with pattern(SEED), "ok"
  digest OFF LEN       -> sha256 hex of [addr+OFF, +LEN)
  register LEN         -> registers a new numpy buffer of LEN zero bytes; its address
  quit
Usage: te_peer.py LOCAL_SERVER_NAME METADATA_SERVER BUFFER_BYTES
"""
import hashlib
import json
import sys

import numpy as np

from mooncake.engine import TransferEngine


def pattern(seed, size):
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def main():
    name, metadata, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    engine = TransferEngine()
    rc = engine.initialize(name, metadata, "tcp", "")
    if rc != 0:
        print(json.dumps({"error": rc}), flush=True)
        return 1
    addr = engine.allocate_managed_buffer(size)
    view = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * size).from_address(addr))
    kept = []
    print(json.dumps({"rpc_port": engine.get_rpc_port(), "addr": addr, "len": size,
                      "first": engine.get_first_buffer_address(name)}), flush=True)
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "quit":
            break
        if parts[0] == "fill":
            off, n, seed = map(int, parts[1:4])
            view[off:off + n] = pattern(seed, n)
            out = "ok"
        elif parts[0] == "digest":
            off, n = int(parts[1]), int(parts[2])
            out = hashlib.sha256(view[off:off + n].tobytes()).hexdigest()
        elif parts[0] == "register":
            buf = np.zeros(int(parts[1]), dtype=np.uint8)
            kept.append(buf)
            rc = engine.register_memory(buf.ctypes.data, buf.nbytes)
            out = str(buf.ctypes.data) if rc == 0 else f"error {rc}"
        else:
            out = "unknown"
        print(out, flush=True)
    print("bye", flush=True)
    del engine  # unpublishes its metadata key before the process exits
    return 0


if __name__ == "__main__":
    sys.exit(main())
