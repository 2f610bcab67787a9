"""Tests of the PD demo model and its paged KV cache (tiny preset).

Where a test moves KV between caches it does so with plain tensor indexing on
the caches' raw tensors, written from the documented layouts only, standing
in for the connector.

Run: /usr/bin/python3 -m pytest examples/pd_disaggregation/model_test.py
"""
from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402  (path set up above)

PROMPT_LEN = 100
NEW_TOKENS = 12
# Tokens a request occupies: the prompt and every generated token but the last.
TOTAL = PROMPT_LEN + NEW_TOKENS - 1


@pytest.fixture(scope="module")
def model() -> M.LlamaModel:
    return M.LlamaModel(M.ModelConfig.preset("tiny"), seed=7)


@pytest.fixture(scope="module")
def prompt() -> list[int]:
    return M.make_prompt(PROMPT_LEN, seed=3)


def scattered_blocks(cache: M.PagedKVCache, n: int, seed: int) -> list[int]:
    """n allocated block ids in a shuffled, non-contiguous order, so tests do
    not pass merely because a request's blocks happen to be adjacent."""
    ids = cache.allocator.allocate(cache.num_blocks)
    order = torch.randperm(len(ids), generator=torch.Generator().manual_seed(seed))
    keep = [ids[i] for i in order[:n].tolist()]
    cache.allocator.free([i for i in ids if i not in keep])
    return keep


def raw_kv(cache: M.PagedKVCache, layer: int, kv: int) -> torch.Tensor:
    """[num_blocks, block_size, heads, head_dim] of one layer's K or V, indexed
    straight from the layout description, not through the cache's methods."""
    if cache.layout == "vllm":
        return cache.kv_caches[cache.layer_names[layer]][kv]
    return cache.kv_caches["kv_buffer"][:, layer, kv]


def copy_kv(src: M.PagedKVCache, src_blocks: list[int], dst: M.PagedKVCache,
            dst_blocks: list[int], num_tokens: int) -> None:
    """Copies K/V of tokens 0..num_tokens-1, every layer, from src's heads into
    the same heads of dst; layouts and block sizes may differ."""
    first, count = src.head_slice
    d_first = first - dst.head_slice[0]
    assert 0 <= d_first and d_first + count <= dst.heads_local
    n_dst = M.blocks_needed(num_tokens, dst.block_size)
    dst_idx = torch.tensor(dst_blocks[:n_dst])
    for layer in range(src.num_layers):
        for kv in (0, 1):
            s = raw_kv(src, layer, kv)[torch.tensor(src_blocks)]
            tokens = s.reshape(-1, count, src.head_dim)[:num_tokens]
            d = raw_kv(dst, layer, kv)
            pages = d[dst_idx]  # a copy; written back whole below
            flat = pages.view(-1, dst.heads_local, dst.head_dim)
            flat[:num_tokens, d_first:d_first + count] = tokens
            d[dst_idx] = pages


def local_run(model: M.LlamaModel, prompt: list[int], layout: str, block_size: int,
              dtype: torch.dtype = torch.float32,
              seed: int = 0) -> tuple[list[int], list[torch.Tensor]]:
    """One process doing prefill and decode itself."""
    cache = model.new_cache(layout, 64, block_size, dtype)
    blocks = scattered_blocks(cache, M.blocks_needed(TOTAL, block_size), seed)
    return model.generate(prompt, NEW_TOKENS, cache, blocks)


def assert_bit_identical(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert torch.equal(x, y), f"step {i} differs by {(x - y).abs().max().item()}"


@pytest.mark.parametrize("layout", M.LAYOUTS)
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_paged_decode_matches_reference(model, prompt, layout, block_size, dtype):
    tokens, logits = local_run(model, prompt, layout, block_size, dtype)
    assert len(tokens) == NEW_TOKENS and len(logits) == NEW_TOKENS
    reference = model.forward_reference(prompt + tokens[:-1], kv_dtype=dtype)
    for step, got in enumerate(logits):
        want = reference[PROMPT_LEN - 1 + step]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert tokens[step] == int(torch.argmax(want))


def test_generate_is_deterministic(prompt):
    # Fresh models from the same seed, different block placement.
    a = local_run(M.LlamaModel(M.ModelConfig.preset("tiny"), seed=7), prompt, "vllm", 16, seed=1)
    b = local_run(M.LlamaModel(M.ModelConfig.preset("tiny"), seed=7), prompt, "vllm", 16, seed=2)
    assert a[0] == b[0]
    assert_bit_identical(a[1], b[1])


def test_sampling_is_seeded(model, prompt):
    def run(seed: int) -> list[int]:
        cache = model.new_cache("sglang", 16, 16)
        blocks = cache.allocator.allocate(M.blocks_needed(TOTAL, 16))
        return model.generate(prompt, NEW_TOKENS, cache, blocks, greedy=False, seed=seed)[0]
    assert run(5) == run(5)


@pytest.mark.parametrize("layout", M.LAYOUTS)
def test_two_head_sliced_prefills_fill_a_full_cache(model, prompt, layout):
    want_tokens, want_logits = local_run(model, prompt, layout, 16)

    kv_heads = model.config.num_kv_heads
    decode = model.new_cache(layout, 64, 16)
    decode_blocks = scattered_blocks(decode, M.blocks_needed(TOTAL, 16), seed=11)
    for rank in range(kv_heads):  # one KV head per simulated TP rank
        prefill = model.new_cache(layout, 64, 16, kv_head_slice=(rank, 1))
        blocks = scattered_blocks(prefill, M.blocks_needed(PROMPT_LEN, 16), seed=20 + rank)
        first_logits = model.prefill(prompt, prefill, blocks)
        # Every rank computes the whole model: same logits as the full run.
        assert torch.equal(first_logits, want_logits[0])
        copy_kv(prefill, blocks, decode, decode_blocks, PROMPT_LEN)

    tokens, logits = model.generate_from_cache(int(torch.argmax(first_logits)), PROMPT_LEN,
                                               NEW_TOKENS, decode, decode_blocks)
    assert tokens == want_tokens
    assert_bit_identical(logits, want_logits[1:])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_vllm_prefill_into_sglang_decode_with_other_page_size(model, prompt, dtype):
    want_tokens, want_logits = local_run(model, prompt, "sglang", 32, dtype)

    prefill = model.new_cache("vllm", 64, 16, dtype)
    prefill_blocks = scattered_blocks(prefill, M.blocks_needed(PROMPT_LEN, 16), seed=4)
    first = int(torch.argmax(model.prefill(prompt, prefill, prefill_blocks)))
    decode = model.new_cache("sglang", 64, 32, dtype)
    decode_blocks = scattered_blocks(decode, M.blocks_needed(TOTAL, 32), seed=5)
    copy_kv(prefill, prefill_blocks, decode, decode_blocks, PROMPT_LEN)

    tokens, logits = model.generate_from_cache(first, PROMPT_LEN, NEW_TOKENS, decode,
                                               decode_blocks)
    assert tokens == want_tokens
    assert_bit_identical(logits, want_logits[1:])


def test_decode_needs_every_kv_head(model):
    cache = model.new_cache("vllm", 4, 16, kv_head_slice=(1, 1))
    with pytest.raises(ValueError):
        model.decode_step(1, 0, cache, [0])


def test_on_layer_done_runs_once_per_layer_after_its_kv_is_written(model, prompt):
    cache = model.new_cache("vllm", 16, 16)
    blocks = cache.allocator.allocate(M.blocks_needed(PROMPT_LEN, 16))
    calls: list[int] = []
    snapshots: list[torch.Tensor] = []

    def on_layer_done(layer: int) -> None:
        calls.append(layer)
        snapshots.append(cache.tensors[layer].clone())
        if layer + 1 < cache.num_layers:  # the next layer is not written yet
            assert not cache.tensors[layer + 1].any()

    model.prefill(prompt, cache, blocks, on_layer_done=on_layer_done)
    assert calls == list(range(model.config.num_layers))
    for layer, snap in enumerate(snapshots):  # complete when announced
        assert snap.any() and torch.equal(snap, cache.tensors[layer])


def test_block_allocator_accounting():
    alloc = M.BlockAllocator(8)
    assert (alloc.num_free, alloc.num_used) == (8, 0)
    a = alloc.allocate(3)
    assert a == [0, 1, 2]
    b = alloc.allocate(5)
    assert len(set(a + b)) == 8 and (alloc.num_free, alloc.num_used) == (0, 8)
    with pytest.raises(M.OutOfBlocksError):
        alloc.allocate(1)
    alloc.free(a)
    assert (alloc.num_free, alloc.num_used) == (3, 5)
    with pytest.raises(ValueError):
        alloc.free(a)  # double free
    with pytest.raises(ValueError):
        alloc.free([b[0], b[0]])
    assert sorted(alloc.allocate(3)) == sorted(a)
    assert alloc.allocate(0) == [] and alloc.num_free == 0


@pytest.mark.parametrize("layout", M.LAYOUTS)
def test_cache_tensors_match_the_documented_layout(layout):
    cfg = M.ModelConfig.preset("tiny")
    cache = M.PagedKVCache.for_model(cfg, layout, num_blocks=6, block_size=32,
                                     dtype=torch.bfloat16, kv_head_slice=(1, 1))
    if layout == "vllm":
        assert len(cache.kv_caches) == cfg.num_layers == len(cache.tensors)
        for t in cache.tensors:
            assert t.shape == (2, 6, 32, 1, cfg.head_dim)
    else:
        assert cache.buffer.shape == (6, cfg.num_layers, 2, 32, 1, cfg.head_dim)
    assert all(t.is_contiguous() and t.dtype == torch.bfloat16 for t in cache.tensors)
    assert sum(n for _, _, n in cache.regions()) == cache.nbytes == (
        cfg.num_layers * 2 * 6 * cache.chunk_nbytes)
    for layer in range(cfg.num_layers):
        for kv in (0, 1):
            for block in range(6):
                chunk = raw_kv(cache, layer, kv)[block]
                assert chunk.is_contiguous()
                assert chunk.data_ptr() == cache.chunk_address(layer, kv, block)
                assert M.tensor_nbytes(chunk) == cache.chunk_nbytes


@pytest.mark.parametrize("q_start, tq", [(0, 37), (29, 8), (40, 1)])
def test_blocked_attention_matches_dense_attention(monkeypatch, q_start, tq):
    # Small blocks, so prefill-sized inputs take the multi-block path.
    monkeypatch.setattr(M, "_ATTENTION_ROWS", 8)
    gen = torch.Generator().manual_seed(q_start + tq)
    hq, hkv, d = 4, 2, 16
    q = torch.randn(tq, hq, d, generator=gen)
    k = torch.randn(q_start + tq, hkv, d, generator=gen)
    v = torch.randn(q_start + tq, hkv, d, generator=gen)
    got = M._causal_attention(q, k, v, q_start)

    kk = k.repeat_interleave(hq // hkv, dim=1)  # [Tk, Hq, D]
    vv = v.repeat_interleave(hq // hkv, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.double(), kk.double())
    future = torch.arange(q_start + tq)[None, :] > torch.arange(q_start, q_start + tq)[:, None]
    probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    want = torch.einsum("hqk,khd->qhd", probs, vv.double()).float()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
