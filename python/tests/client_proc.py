"""A second client process for the tests: sets up a MooncakeDistributedStore
with its own segment and runs commands from stdin, one line each:
  hostname                      -> its get_hostname()
  put KEY SIZE [REPLICAS]       -> put of the deterministic pattern; the code
  get KEY                       -> "SIZE SHA256" of what get returned
  get_into KEY SIZE             -> what get_into into a registered buffer returned,
                                   then the SHA256 of the bytes read
  exist KEY                     -> is_exist
  quit
"""
import hashlib
import sys

import numpy as np

from mooncake.store import MooncakeDistributedStore, ReplicateConfig


def pattern(key, size):
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def main():
    master, segment = sys.argv[1], int(sys.argv[2])
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", segment, 64 << 20, "tcp", "", master)
    if rc != 0:
        print(f"setup failed {rc} {s.last_error()}", flush=True)
        return 1
    buf = np.zeros(16 << 20, dtype=np.uint8)
    assert s.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        cmd = parts[0]
        if cmd == "quit":
            print("bye", flush=True)
            break
        if cmd == "hostname":
            out = s.get_hostname()
        elif cmd == "put":
            cfg = ReplicateConfig()
            if len(parts) > 3:
                cfg.replica_num = int(parts[3])
            out = str(s.put(parts[1], pattern(parts[1], int(parts[2])), cfg))
        elif cmd == "get":
            v = s.get(parts[1])
            out = f"{len(v)} {hashlib.sha256(v).hexdigest()}"
        elif cmd == "get_into":
            n = s.get_into(parts[1], buf.ctypes.data, int(parts[2]))
            digest = hashlib.sha256(buf[:max(n, 0)].tobytes()).hexdigest()
            out = f"{n} {digest}"
        elif cmd == "exist":
            out = str(s.is_exist(parts[1]))
        else:
            out = "unknown"
        print(out, flush=True)
    s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
