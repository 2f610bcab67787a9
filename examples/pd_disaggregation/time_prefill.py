"""Times prefill of the demo model for several prompt lengths.

The PD demo wants an 8K-token prefill to take at least a second, so that
sending layer i while layer i+1 computes visibly overlaps. Prints one line per
length: the median of --repeats runs (one run from 8K tokens up), and the KV
bytes written.

Run: /usr/bin/python3 examples/pd_disaggregation/time_prefill.py [--threads 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as pd_model  # noqa: E402  (path set up above)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="demo", choices=sorted(pd_model.PRESETS))
    parser.add_argument("--threads", type=int, default=1,
                        help="torch.set_num_threads; results differ in the last bits by count")
    parser.add_argument("--layout", default="vllm", choices=pd_model.LAYOUTS)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--kv-dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--lengths", default="1024,2048,4096,8192",
                        help="comma-separated prompt lengths")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs per length below 8K (median is printed)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    config = pd_model.ModelConfig.preset(args.preset)
    model = pd_model.LlamaModel(config, seed=0)
    lengths = [int(n) for n in args.lengths.split(",")]
    kv_dtype = getattr(torch, args.kv_dtype)
    cache = model.new_cache(args.layout, pd_model.blocks_needed(max(lengths), args.block_size),
                            args.block_size, kv_dtype)
    block_ids = cache.allocator.allocate(cache.num_blocks)
    print(f"preset={config.name} layers={config.num_layers} hidden={config.hidden_size} "
          f"heads={config.num_heads}/{config.num_kv_heads}x{config.head_dim} "
          f"vocab={config.vocab_size} threads={args.threads} "
          f"matmul={'onednn' if pd_model.FAST_MATMUL else 'blas'} layout={args.layout} "
          f"block_size={args.block_size} kv_dtype={args.kv_dtype}")

    # Warm up once so first-call setup is not counted against 1K.
    model.prefill(pd_model.make_prompt(64, seed=1, vocab_size=config.vocab_size),
                  cache, block_ids)
    for n in lengths:
        prompt = pd_model.make_prompt(n, seed=n, vocab_size=config.vocab_size)
        runs = 1 if n >= 8192 else args.repeats
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            model.prefill(prompt, cache, block_ids)
            times.append(time.perf_counter() - start)
        kv_bytes = n * config.num_layers * 2 * cache.token_nbytes
        print(f"prefill {n:6d} tokens: {statistics.median(times):7.3f} s "
              f"(median of {runs}; KV {kv_bytes / 2**20:.1f} MiB)", flush=True)


if __name__ == "__main__":
    main()
