"""A small Llama-style model with a paged KV cache, for the PD disaggregation demo.

Prefill/decode (PD) disaggregation runs a prompt's prefill in one process and
its decode in another: the prefill process computes the prompt's KV cache and
a connector copies the KV blocks into the decode process's paged cache, layer
by layer, while later layers are still computing. This module is the model
side of that demo and knows nothing about the connector:

  * `ModelConfig` / `LlamaModel`: a decoder-only transformer (RMSNorm, RoPE,
    grouped-query attention, SwiGLU MLP) with deterministic seeded weights.
  * `PagedKVCache`: fixed-size blocks in one of two memory layouts,
      "vllm":   one tensor per layer, [2][num_blocks][block_size][heads][head_dim]
                (K at index 0, V at 1), vLLM's FlashAttention layout;
      "sglang": one tensor, [num_pages][num_layers][2][page_size][heads][head_dim]
                (page-first).
    A cache may hold only a slice of the KV heads, as one tensor-parallel rank
    would.
  * `BlockAllocator`: a free list of block ids with accounting.

Token t of a request lives in block `block_ids[t // block_size]`, row
`t % block_size`. In both layouts the K (or V) rows of one (layer, block) are
one contiguous run of `block_size * heads * head_dim` elements
(`PagedKVCache.chunk_address`), which is the unit a connector copies.

Bit-exactness. The demo checks that decode logits after a PD transfer are
bit-identical to one process doing prefill and decode itself. That holds
because:
  * K and V are computed for all heads by the same ops whatever the cache's
    layout, page size or head slice, and only then scattered into the cache;
    so the bytes written per token do not depend on the cache.
  * `decode_step` depends only on its token, its position and the bytes in the
    cache: it gathers the request's tokens into a dense [tokens, heads, dim]
    tensor (the same values whichever blocks hold them) and runs the same
    attention code on it. It keeps no state from prefill.
  * Prefill attention reads K/V after rounding to the cache dtype, exactly as
    decode will read them back, so a bfloat16 cache behaves consistently.
Results are reproducible across processes, but only for the same matmul
backend (`FAST_MATMUL`), CPU type and torch thread count: oneDNN splits long
reductions (attention over many keys) by thread, so 1 and 2 threads differ in
the last bits. Run prefill, decode and any reference with the same
torch.set_num_threads.

Everything runs in float32 on the CPU. The default BLAS of some builds is a
reference implementation (a few GFLOP/s), so matrix products go through
oneDNN (`torch._C._nn.mkldnn_linear`) when PyTorch has it, which is ~20x
faster; set PD_MODEL_MATMUL=blas in the environment to use plain
`torch.nn.functional.linear` instead.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Literal

import torch

Layout = Literal["vllm", "sglang"]
LAYOUTS: tuple[str, ...] = ("vllm", "sglang")

# oneDNN matmul when available (see module docstring). Chosen once per process:
# results must not switch backend halfway through a run.
FAST_MATMUL: bool = (torch.backends.mkldnn.is_available()
                     and os.environ.get("PD_MODEL_MATMUL", "") != "blas")

# Query rows (tokens x heads of a group) per attention block: bounds the score
# matrix to rows x context floats (512 x 8192 x 4 B = 16 MiB) instead of
# T x T; 256..1024 measured fastest at 8K.
_ATTENTION_ROWS = 512


# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape of the model. All attention heads have `head_dim` channels."""
    name: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int          # query heads
    num_kv_heads: int       # key/value heads; num_heads % num_kv_heads == 0
    head_dim: int
    intermediate_size: int  # SwiGLU hidden width
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5

    def __post_init__(self) -> None:
        assert self.num_heads % self.num_kv_heads == 0, "GQA needs whole groups"
        assert self.head_dim % 2 == 0, "RoPE rotates channel pairs"

    @property
    def group_size(self) -> int:
        """Query heads sharing one KV head."""
        return self.num_heads // self.num_kv_heads

    @staticmethod
    def preset(name: str) -> "ModelConfig":
        """Returns a named preset: "tiny" (tests) or "demo" (timed demo)."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}")
        return PRESETS[name]


PRESETS: dict[str, ModelConfig] = {
    # Tests: a few hundred tokens take a few milliseconds.
    "tiny": ModelConfig(name="tiny", vocab_size=512, hidden_size=64, num_layers=2,
                        num_heads=4, num_kv_heads=2, head_dim=16,
                        intermediate_size=128),
    # Demo: prefill of 8K tokens takes a few seconds on one core, long enough
    # for sending layer i while layer i+1 computes to matter (time_prefill.py).
    # At 8K, causal attention (~4 * T^2 * heads * head_dim / 2 FLOPs a layer)
    # dominates, hence only 4 query heads and 4 layers.
    # KV per token: 4 layers x 2 (K, V) x 2 heads x 64 x 4 B = 4 KiB (float32).
    "demo": ModelConfig(name="demo", vocab_size=8192, hidden_size=256, num_layers=4,
                        num_heads=4, num_kv_heads=2, head_dim=64,
                        intermediate_size=704),
}


def make_prompt(length: int, seed: int = 0, vocab_size: int = 512) -> list[int]:
    """Deterministic token ids in [0, vocab_size).

    The default vocab_size is the smallest preset's, so the same prompt is
    valid for every preset.
    """
    assert length >= 0
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (length,), generator=gen).tolist()


def blocks_needed(num_tokens: int, block_size: int) -> int:
    """Blocks that hold `num_tokens` tokens."""
    return -(-num_tokens // block_size)


# --------------------------------------------------------------------------
# Block allocator
# --------------------------------------------------------------------------

class OutOfBlocksError(RuntimeError):
    """Raised when an allocation asks for more blocks than are free."""


class BlockAllocator:
    """A free list of block ids 0..num_blocks-1.

    Ids are handed out lowest first from a fresh allocator, so runs are
    reproducible. Freeing an id that is not allocated is a bug and raises.
    """

    def __init__(self, num_blocks: int) -> None:
        assert num_blocks > 0
        self.num_blocks = num_blocks
        # A stack: pop() from the end, so reverse to hand out 0, 1, 2, ...
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))
        self._used: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return len(self._used)

    def allocate(self, n: int) -> list[int]:
        """Returns n distinct free block ids; raises OutOfBlocksError if short."""
        if n < 0:
            raise ValueError(f"cannot allocate {n} blocks")
        if n > len(self._free):
            raise OutOfBlocksError(f"need {n} blocks, {len(self._free)} free")
        ids = [self._free.pop() for _ in range(n)]
        self._used.update(ids)
        assert self.num_free + self.num_used == self.num_blocks
        return ids

    def free(self, ids: Sequence[int]) -> None:
        """Returns blocks to the free list; each must be allocated, once."""
        ids = list(ids)
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate block id in free()")
        not_used = [i for i in ids if i not in self._used]
        if not_used:
            raise ValueError(f"freeing blocks that are not allocated: {not_used}")
        self._used.difference_update(ids)
        self._free.extend(reversed(ids))
        assert self.num_free + self.num_used == self.num_blocks


# --------------------------------------------------------------------------
# Paged KV cache
# --------------------------------------------------------------------------

def tensor_nbytes(t: torch.Tensor) -> int:
    """Bytes of a tensor's elements (Tensor.nbytes is missing in older torch)."""
    return t.numel() * t.element_size()


class PagedKVCache:
    """KV cache of fixed-size blocks for every layer, in a vLLM or SGLang layout.

    The cache holds KV heads [first, first + count) of `num_kv_heads`
    (`kv_head_slice`); by default all of them. Writes take K/V for all heads
    and keep the slice; reads need all heads present.

    Memory (all tensors contiguous, allocated once, zero-filled):
      "vllm":   `tensors[l]` (= `kv_caches[layer_names[l]]`) has shape
                [2, num_blocks, block_size, count, head_dim].
      "sglang": `buffer` (= `tensors[0]`) has shape
                [num_blocks, num_layers, 2, block_size, count, head_dim].
    """

    def __init__(self, layout: Layout, num_layers: int, num_kv_heads: int,
                 head_dim: int, num_blocks: int, block_size: int,
                 dtype: torch.dtype = torch.float32,
                 kv_head_slice: tuple[int, int] | None = None,
                 alloc: Callable[[tuple[int, ...], torch.dtype], torch.Tensor] | None = None
                 ) -> None:
        """`alloc(shape, dtype)` returns zeroed contiguous memory for one tensor
        (default torch.zeros); a connector whose transport needs its own memory
        (shared memory) passes one."""
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"KV dtype must be float32 or bfloat16, got {dtype}")
        first, count = kv_head_slice if kv_head_slice is not None else (0, num_kv_heads)
        if not (0 <= first and count > 0 and first + count <= num_kv_heads):
            raise ValueError(f"head slice {(first, count)} outside {num_kv_heads} heads")
        assert num_layers > 0 and head_dim > 0 and num_blocks > 0 and block_size > 0
        self.layout: str = layout
        self.num_layers = num_layers
        self.num_kv_heads = num_kv_heads
        self.head_slice: tuple[int, int] = (first, count)
        self.head_dim = head_dim
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.dtype = dtype
        self.allocator = BlockAllocator(num_blocks)
        # vLLM's attention layer names, as its connector sees them.
        self.layer_names: list[str] = [f"model.layers.{l}.self_attn.attn"
                                       for l in range(num_layers)]
        zeros = alloc if alloc is not None else (lambda shape, dt: torch.zeros(shape, dtype=dt))
        if layout == "vllm":
            self.tensors: list[torch.Tensor] = [
                zeros((2, num_blocks, block_size, count, head_dim), dtype)
                for _ in range(num_layers)]
            self.buffer: torch.Tensor | None = None
        else:
            self.buffer = zeros((num_blocks, num_layers, 2, block_size, count, head_dim), dtype)
            self.tensors = [self.buffer]
        assert all(t.is_contiguous() for t in self.tensors)

    @classmethod
    def for_model(cls, config: ModelConfig, layout: Layout, num_blocks: int,
                  block_size: int, dtype: torch.dtype = torch.float32,
                  kv_head_slice: tuple[int, int] | None = None,
                  alloc: Callable[[tuple[int, ...], torch.dtype], torch.Tensor] | None = None
                  ) -> "PagedKVCache":
        """A cache shaped for `config`."""
        return cls(layout, config.num_layers, config.num_kv_heads, config.head_dim,
                   num_blocks, block_size, dtype, kv_head_slice, alloc)

    # --- what a connector registers -------------------------------------

    @property
    def kv_caches(self) -> dict[str, torch.Tensor]:
        """Layer name -> that layer's tensor ("vllm"), as vLLM's register_kv_caches
        receives; for "sglang", the one buffer under the name "kv_buffer"."""
        if self.layout == "vllm":
            return dict(zip(self.layer_names, self.tensors))
        return {"kv_buffer": self.buffer}

    def regions(self) -> list[tuple[str, int, int]]:
        """(name, data_ptr, nbytes) of every tensor, for memory registration."""
        return [(name, t.data_ptr(), tensor_nbytes(t)) for name, t in self.kv_caches.items()]

    @property
    def nbytes(self) -> int:
        return sum(tensor_nbytes(t) for t in self.tensors)

    @property
    def heads_local(self) -> int:
        """KV heads this cache holds."""
        return self.head_slice[1]

    @property
    def chunk_nbytes(self) -> int:
        """Bytes of one (layer, K or V, block): block_size rows of all local heads."""
        return self.block_size * self.heads_local * self.head_dim * self.tensors[0].element_size()

    @property
    def token_nbytes(self) -> int:
        """Bytes of one token's K (or V) row of one layer: all local heads."""
        return self.heads_local * self.head_dim * self.tensors[0].element_size()

    def chunk_address(self, layer: int, kv: int, block_id: int) -> int:
        """Address of the contiguous K (kv=0) or V (kv=1) rows of one block of
        one layer; chunk_nbytes long. Token row r is at + r * token_nbytes, and
        head h (of the local slice) of it at + h * head_dim * element size."""
        assert 0 <= layer < self.num_layers and kv in (0, 1)
        assert 0 <= block_id < self.num_blocks
        if self.layout == "vllm":
            index = kv * self.num_blocks + block_id
            return self.tensors[layer].data_ptr() + index * self.chunk_nbytes
        index = (block_id * self.num_layers + layer) * 2 + kv
        return self.buffer.data_ptr() + index * self.chunk_nbytes

    # --- token access -----------------------------------------------------

    def kv_view(self, layer: int, kv: int) -> torch.Tensor:
        """[num_blocks, block_size, heads_local, head_dim] view of K (kv=0) or
        V (kv=1) of one layer; strided (not contiguous) for "sglang"."""
        assert 0 <= layer < self.num_layers and kv in (0, 1)
        if self.layout == "vllm":
            return self.tensors[layer][kv]
        return self.buffer[:, layer, kv]

    def _slots(self, block_ids: Sequence[int], start: int,
               length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(block, row) index vectors of tokens start..start+length-1."""
        if start < 0 or start + length > len(block_ids) * self.block_size:
            raise ValueError(f"tokens [{start}, {start + length}) do not fit in "
                             f"{len(block_ids)} blocks of {self.block_size}")
        ids = torch.as_tensor(list(block_ids), dtype=torch.long)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.num_blocks):
            raise ValueError(f"block ids must lie in [0, {self.num_blocks})")
        t = torch.arange(start, start + length)
        blocks = ids[t // self.block_size]
        return blocks, t % self.block_size

    def write(self, layer: int, block_ids: Sequence[int], start: int,
              k: torch.Tensor, v: torch.Tensor) -> None:
        """Stores K and V of tokens start..start+T-1 ([T, num_kv_heads, head_dim],
        all heads, already in the cache dtype); keeps this cache's head slice."""
        assert k.shape == v.shape and k.shape[1:] == (self.num_kv_heads, self.head_dim)
        assert k.dtype == self.dtype and v.dtype == self.dtype
        first, count = self.head_slice
        blocks, rows = self._slots(block_ids, start, k.shape[0])
        self.kv_view(layer, 0)[blocks, rows] = k[:, first:first + count]
        self.kv_view(layer, 1)[blocks, rows] = v[:, first:first + count]

    def read(self, layer: int, block_ids: Sequence[int], start: int,
             length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Dense copies of K and V of tokens start..start+length-1,
        [length, heads_local, head_dim] in the cache dtype. The values do not
        depend on which blocks hold the tokens or on the layout."""
        blocks, rows = self._slots(block_ids, start, length)
        return self.kv_view(layer, 0)[blocks, rows], self.kv_view(layer, 1)[blocks, rows]


# --------------------------------------------------------------------------
# Math helpers (shared by every path, so all paths round identically)
# --------------------------------------------------------------------------

class _Weight:
    """A [out, in] matrix, kept dense and, on the oneDNN path, pre-converted."""

    def __init__(self, w: torch.Tensor) -> None:
        self.dense = w.contiguous()
        self.packed = self.dense.to_mkldnn() if FAST_MATMUL else None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x @ W^T for x of shape [rows, in]."""
        if self.packed is not None:
            return torch._C._nn.mkldnn_linear(x.to_mkldnn(), self.packed, None).to_dense()
        return torch.nn.functional.linear(x, self.dense)


def _matmul_t(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b^T for a [m, k] and b [n, k] (both float32)."""
    if FAST_MATMUL:
        return torch._C._nn.mkldnn_linear(a.to_mkldnn(), b.to_mkldnn(), None).to_dense()
    return torch.nn.functional.linear(a, b)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, Llama's rotate-half convention.
    x: [T, heads, dim]; cos, sin: [T, 1, dim]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      q_start: int) -> torch.Tensor:
    """Causal grouped-query attention.

    q: [Tq, Hq, D], already scaled by 1/sqrt(D); query i is at position
    q_start + i. k, v: [q_start + Tq, Hkv, D] float32, keys of positions
    0..q_start+Tq-1. Returns [Tq, Hq, D].

    Prefill (q_start=0) and decode (Tq=1) both use this; work is done per KV
    head and per block of query rows so the score matrix stays small.
    """
    tq, hq, d = q.shape
    tk, hkv, _ = k.shape
    assert tk == q_start + tq and v.shape == k.shape
    g = hq // hkv
    out = torch.empty(tq, hq, d)
    step = max(1, _ATTENTION_ROWS // g)  # query tokens per block
    for h in range(hkv):
        kh = k[:, h].contiguous()       # [Tk, D]
        vh_t = v[:, h].t().contiguous()  # [D, Tk]
        for s in range(0, tq, step):
            e = min(tq, s + step)
            n_keys = q_start + e  # the block's last query sees keys 0..q_start+e-1
            rows = q[s:e, h * g:(h + 1) * g].reshape((e - s) * g, d)
            scores = _matmul_t(rows, kh[:n_keys])  # [(e-s)*g, n_keys]
            # Only keys q_start+s.. can lie in a query's future; row r is query s + r // g.
            query_pos = torch.arange(s, e).repeat_interleave(g).unsqueeze(1)
            key_pos = torch.arange(s, e).unsqueeze(0)
            scores[:, q_start + s:].masked_fill_(key_pos > query_pos, float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            out[s:e, h * g:(h + 1) * g] = _matmul_t(probs, vh_t[:, :n_keys]).view(e - s, g, d)
    return out


# --------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------

@dataclasses.dataclass
class _Layer:
    attn_norm: torch.Tensor
    qkv: _Weight       # [Hq*D + 2*Hkv*D, hidden]: Q, K, V stacked
    o: _Weight         # [hidden, Hq*D]
    mlp_norm: torch.Tensor
    gate_up: _Weight   # [2*intermediate, hidden]: gate, up stacked
    down: _Weight      # [hidden, intermediate]


OnLayerDone = Callable[[int], None]


class LlamaModel:
    """Decoder-only transformer with seeded weights; see the module docstring.

    Every method computes the whole model (all heads) in float32. A cache with
    a head slice only changes which heads are stored.
    """

    def __init__(self, config: ModelConfig, seed: int = 0) -> None:
        self.config = c = config
        gen = torch.Generator().manual_seed(seed)

        def randn(*shape: int, std: float) -> torch.Tensor:
            return torch.randn(*shape, generator=gen) * std

        def norm_weight() -> torch.Tensor:
            # Near 1, not exactly 1, so a wrong norm weight shows in the output.
            return 1.0 + randn(c.hidden_size, std=0.1)

        q_dim, kv_dim = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        h = c.hidden_size
        # std 1/sqrt(fan_in) keeps activations O(1) through random layers.
        self.embed = randn(c.vocab_size, h, std=1.0)
        self.layers = [
            _Layer(attn_norm=norm_weight(),
                   qkv=_Weight(randn(q_dim + 2 * kv_dim, h, std=h ** -0.5)),
                   o=_Weight(randn(h, q_dim, std=q_dim ** -0.5)),
                   mlp_norm=norm_weight(),
                   gate_up=_Weight(randn(2 * c.intermediate_size, h, std=h ** -0.5)),
                   down=_Weight(randn(h, c.intermediate_size,
                                      std=c.intermediate_size ** -0.5)))
            for _ in range(c.num_layers)]
        self.final_norm = norm_weight()
        self.lm_head = _Weight(randn(c.vocab_size, h, std=h ** -0.5))
        # RoPE frequencies of channel pairs (i, i + head_dim/2).
        self._inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2).float()
                                                 / c.head_dim))

    def new_cache(self, layout: Layout, num_blocks: int, block_size: int,
                  dtype: torch.dtype = torch.float32,
                  kv_head_slice: tuple[int, int] | None = None) -> PagedKVCache:
        """A paged cache shaped for this model."""
        return PagedKVCache.for_model(self.config, layout, num_blocks, block_size,
                                      dtype, kv_head_slice)

    # --- pieces of a layer, shared by every path ---------------------------

    def _tokens(self, tokens: Sequence[int] | torch.Tensor) -> torch.Tensor:
        t = torch.as_tensor(tokens, dtype=torch.long).reshape(-1)
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.config.vocab_size):
            raise ValueError(f"token ids must lie in [0, {self.config.vocab_size})")
        return t

    def _rope_tables(self, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of positions start..start+length-1, shaped [T, 1, head_dim].
        Each position's angles depend only on that position, so prefill and
        decode build identical tables for it."""
        pos = torch.arange(start, start + length, dtype=torch.float32)
        angles = torch.outer(pos, self._inv_freq)
        angles = torch.cat((angles, angles), dim=-1).unsqueeze(1)
        return angles.cos(), angles.sin()

    def _project_qkv(self, layer: _Layer, x: torch.Tensor, start: int,
                     kv_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q (scaled, after RoPE) in float32, and K (after RoPE), V in kv_dtype,
        for all heads of tokens at positions start.. . The same ops run whatever
        cache the K/V go to, so the values do not depend on the cache."""
        c = self.config
        t = x.shape[0]
        qkv = layer.qkv(_rms_norm(x, layer.attn_norm, c.rms_eps))
        q_dim, kv_dim = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        q = qkv[:, :q_dim].reshape(t, c.num_heads, c.head_dim)
        k = qkv[:, q_dim:q_dim + kv_dim].reshape(t, c.num_kv_heads, c.head_dim)
        v = qkv[:, q_dim + kv_dim:].reshape(t, c.num_kv_heads, c.head_dim)
        cos, sin = self._rope_tables(start, t)
        q = _rope(q, cos, sin) * (c.head_dim ** -0.5)
        k = _rope(k, cos, sin)
        return q, k.to(kv_dtype).contiguous(), v.to(kv_dtype).contiguous()

    def _finish_layer(self, layer: _Layer, x: torch.Tensor,
                      attn: torch.Tensor) -> torch.Tensor:
        """Output projection, residual, and the SwiGLU MLP block."""
        c = self.config
        x = x + layer.o(attn.reshape(x.shape[0], c.num_heads * c.head_dim))
        gate_up = layer.gate_up(_rms_norm(x, layer.mlp_norm, c.rms_eps))
        gate, up = gate_up[:, :c.intermediate_size], gate_up[:, c.intermediate_size:]
        return x + layer.down(torch.nn.functional.silu(gate) * up)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(_rms_norm(x, self.final_norm, self.config.rms_eps))

    # --- public API -----------------------------------------------------------

    @torch.inference_mode()
    def prefill(self, tokens: Sequence[int] | torch.Tensor, cache: PagedKVCache,
                block_ids: Sequence[int],
                on_layer_done: OnLayerDone | None = None) -> torch.Tensor:
        """Runs the prompt, writes every layer's K/V into `cache` at `block_ids`
        (token t -> block block_ids[t // block_size], row t % block_size) and
        returns the logits of the last position, [vocab_size].

        on_layer_done(i) is called right after layer i's K/V are in the cache,
        before layer i+1 starts, so a connector can send layer i meanwhile.
        Layer i's blocks are not written again by this call.
        """
        ids = self._tokens(tokens)
        assert ids.numel() > 0, "empty prompt"
        self._check_cache(cache)
        x = self.embed[ids]
        for i, layer in enumerate(self.layers):
            q, k, v = self._project_qkv(layer, x, 0, cache.dtype)
            cache.write(i, block_ids, 0, k, v)
            if on_layer_done is not None:
                on_layer_done(i)
            # Attend to K/V as stored (rounded to the cache dtype), as decode will.
            x = self._finish_layer(layer, x, _causal_attention(q, k.float(), v.float(), 0))
        return self._logits(x[-1:])[0]

    @torch.inference_mode()
    def decode_step(self, token: int, position: int, cache: PagedKVCache,
                    block_ids: Sequence[int]) -> torch.Tensor:
        """Runs one token at `position`: appends its K/V to the cache and
        attends over positions 0..position read back from the cache (which must
        hold every KV head). Returns its logits, [vocab_size].

        The result depends only on (token, position) and the cache bytes of
        positions 0..position-1, never on which blocks hold them or how the
        cache was filled.
        """
        assert position >= 0
        self._check_cache(cache)
        if cache.head_slice != (0, self.config.num_kv_heads):
            raise ValueError(f"decode needs all KV heads; cache holds {cache.head_slice}")
        x = self.embed[self._tokens([token])]
        for i, layer in enumerate(self.layers):
            q, k, v = self._project_qkv(layer, x, position, cache.dtype)
            cache.write(i, block_ids, position, k, v)
            k_all, v_all = cache.read(i, block_ids, 0, position + 1)
            x = self._finish_layer(layer, x,
                                   _causal_attention(q, k_all.float(), v_all.float(), position))
        return self._logits(x)[0]

    def generate_from_cache(self, first_token: int, prompt_len: int,
                            max_new_tokens: int, cache: PagedKVCache,
                            block_ids: Sequence[int], greedy: bool = True,
                            seed: int = 0) -> tuple[list[int], list[torch.Tensor]]:
        """Decodes after a prefill whose K/V are already in `cache` (by this
        process or copied in). `first_token` is the token chosen from the
        prefill logits; it is fed at position prompt_len.

        Returns (new tokens including first_token, logits of each decode step);
        max_new_tokens tokens in all, so max_new_tokens - 1 decode steps.
        """
        assert max_new_tokens >= 1
        gen = torch.Generator().manual_seed(seed)
        tokens, step_logits = [first_token], []
        for step in range(max_new_tokens - 1):
            logits = self.decode_step(tokens[-1], prompt_len + step, cache, block_ids)
            step_logits.append(logits)
            tokens.append(self._choose(logits, greedy, gen))
        return tokens, step_logits

    def generate(self, prompt: Sequence[int] | torch.Tensor, max_new_tokens: int,
                 cache: PagedKVCache, block_ids: Sequence[int], greedy: bool = True,
                 seed: int = 0) -> tuple[list[int], list[torch.Tensor]]:
        """Prefill, then decode. Returns (max_new_tokens new tokens, the logits
        each was chosen from: the prefill's, then each decode step's).
        block_ids must hold len(prompt) + max_new_tokens - 1 tokens.
        Greedy picks the argmax; otherwise samples with a generator seeded by
        `seed` (the prefill pick uses the same generator first)."""
        assert max_new_tokens >= 1
        gen = torch.Generator().manual_seed(seed)
        ids = self._tokens(prompt)
        first_logits = self.prefill(ids, cache, block_ids)
        first = self._choose(first_logits, greedy, gen)
        tokens, rest = self.generate_from_cache(first, ids.numel(), max_new_tokens, cache,
                                                block_ids, greedy, seed + 1)
        return tokens, [first_logits] + rest

    @torch.inference_mode()
    def forward_reference(self, tokens: Sequence[int] | torch.Tensor,
                          kv_dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Logits of every position, [T, vocab_size], with plain dense
        attention and no paged cache. K/V are rounded to kv_dtype as a cache of
        that dtype would. For checking the paged paths."""
        ids = self._tokens(tokens)
        x = self.embed[ids]
        for layer in self.layers:
            q, k, v = self._project_qkv(layer, x, 0, kv_dtype)
            x = self._finish_layer(layer, x, _causal_attention(q, k.float(), v.float(), 0))
        return self._logits(x)

    # --- helpers ------------------------------------------------------------

    def _check_cache(self, cache: PagedKVCache) -> None:
        c = self.config
        if (cache.num_layers, cache.num_kv_heads, cache.head_dim) != (
                c.num_layers, c.num_kv_heads, c.head_dim):
            raise ValueError("cache shape does not match the model config")

    @staticmethod
    def _choose(logits: torch.Tensor, greedy: bool, gen: torch.Generator) -> int:
        if greedy:
            return int(torch.argmax(logits))
        return int(torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=gen))
