"""A small ViT-style vision encoder and prefill from embeddings, for the EPD demo.

Encoder / prefill / decode (EPD) disaggregation runs a multimodal request's
vision encoder, its LLM prefill and its decode in three processes. This module
is the model side and knows nothing about processes or the store:

  * `VisionConfig` / `VisionEncoder`: an RGB uint8 image [size, size, 3] ->
    normalized patches of `patch` x `patch` pixels -> linear patch embedding +
    learned position embedding -> `num_layers` pre-norm transformer layers
    (bidirectional multi-head attention, GELU MLP) -> final LayerNorm -> a 2x2
    patch merger (four neighbouring patches concatenated, then an MLP) that
    projects to the LLM's hidden size. Output: the image's hidden states,
    [(size / patch / 2)^2, llm_hidden] float32. Seeded weights, as in
    examples/pd_disaggregation/model.py (no real weights are available).
  * `prefill_embeds`: LlamaModel.prefill with the input embeddings given (the
    image's hidden states, then the text's token embeddings) instead of token
    ids. Decode needs no change: a decode step depends only on its token, its
    position and the KV cache bytes (model.py).

Bit-exactness: every op is deterministic on the CPU for a fixed torch thread
count, so an encoder in another process, or hidden states read back from the
store, give the same bytes as one process doing everything; run every process
with the same torch.set_num_threads (1 in the demo).
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections.abc import Sequence

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pd_disaggregation"))
import model as M  # noqa: E402

# CLIP's normalization constants, as most ViT encoders use them.
_MEAN = (0.48145466, 0.4578275, 0.40821073)
_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclasses.dataclass(frozen=True)
class VisionConfig:
    name: str
    image_size: int      # square RGB images of image_size x image_size pixels
    patch: int           # patch side in pixels; image_size % (2 * patch) == 0
    hidden_size: int
    num_layers: int
    num_heads: int
    mlp_ratio: int = 4
    llm_hidden: int = 256  # output width: the LLM's hidden size
    llm_preset: str = "demo"

    def __post_init__(self) -> None:
        assert self.image_size % (2 * self.patch) == 0, "the 2x2 merger needs an even grid"
        assert self.hidden_size % self.num_heads == 0

    @property
    def grid(self) -> int:
        return self.image_size // self.patch

    @property
    def num_patches(self) -> int:
        return self.grid * self.grid

    @property
    def num_tokens(self) -> int:
        """Hidden-state rows per image (LLM positions the image takes)."""
        return self.num_patches // 4

    @property
    def encoder_id(self) -> str:
        """Names the weights (seed 0) and shape: part of the media key."""
        return (f"epd-vit-{self.name}@seed0:d{self.hidden_size}xL{self.num_layers}"
                f"xH{self.num_heads}->llm-{self.llm_preset}")

    @property
    def preprocess(self) -> str:
        """The preprocessing parameters, canonical text: part of the media key."""
        return (f"rgb uint8 {self.image_size}x{self.image_size} patch={self.patch} "
                f"mean={_MEAN} std={_STD}")

    @property
    def hidden_nbytes(self) -> int:
        return self.num_tokens * self.llm_hidden * 4

    @staticmethod
    def preset(name: str) -> "VisionConfig":
        if name not in VISION_PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose from {sorted(VISION_PRESETS)}")
        return VISION_PRESETS[name]


VISION_PRESETS: dict[str, VisionConfig] = {
    # Tests: a 56x56 image, 16 patches, 4 LLM positions; milliseconds.
    "tiny": VisionConfig(name="tiny", image_size=56, patch=14, hidden_size=32, num_layers=2,
                         num_heads=2, llm_hidden=64, llm_preset="tiny"),
    # Demo: a 448x448 image in 1,024 patches of 14x14, merged into 256 LLM positions, as
    # InternVL's and Qwen2-VL's encoders do; ViT-Ti's width and heads, 3 layers. Its FLOPs
    # are about 2.7x the demo LLM's prefill of the image and 32 text tokens, near those small
    # VLMs' ratio (docs/epd.md).
    "demo": VisionConfig(name="demo", image_size=448, patch=14, hidden_size=192, num_layers=3,
                         num_heads=3, llm_hidden=256, llm_preset="demo"),
}


class BadImageError(ValueError):
    """The image is not what the encoder's preprocessing accepts."""


def check_image(config: VisionConfig, shape: Sequence[int], dtype: str, nbytes: int) -> None:
    """Raises BadImageError unless the image is [size, size, 3] uint8 of the right length."""
    want = (config.image_size, config.image_size, 3)
    if dtype != "uint8":
        raise BadImageError(f"image dtype must be uint8 (RGB bytes), got {dtype}")
    if tuple(shape) != want:
        raise BadImageError(f"image shape must be {list(want)} (height, width, RGB), "
                            f"got {list(shape)}")
    if nbytes != math.prod(want):
        raise BadImageError(f"image has {nbytes} bytes, expected {math.prod(want)} "
                            f"for shape {list(want)}")


def make_image(config: VisionConfig, seed: int) -> torch.Tensor:
    """A deterministic test image: smooth gradients plus noise, uint8 [S, S, 3]."""
    gen = torch.Generator().manual_seed(seed)
    s = config.image_size
    yy, xx = torch.meshgrid(torch.arange(s), torch.arange(s), indexing="ij")
    base = torch.stack([(xx * 255) // s, (yy * 255) // s, ((xx + yy) * 127) // s], dim=-1)
    noise = torch.randint(0, 64, (s, s, 3), generator=gen)
    return ((base + noise + seed * 37) % 256).to(torch.uint8)


@dataclasses.dataclass
class _Block:
    norm1_w: torch.Tensor
    norm1_b: torch.Tensor
    qkv: M._Weight
    qkv_b: torch.Tensor
    proj: M._Weight
    proj_b: torch.Tensor
    norm2_w: torch.Tensor
    norm2_b: torch.Tensor
    fc1: M._Weight
    fc1_b: torch.Tensor
    fc2: M._Weight
    fc2_b: torch.Tensor


class VisionEncoder:
    """See the module docstring. `calls` counts encode() calls."""

    def __init__(self, config: VisionConfig, seed: int = 0) -> None:
        self.config = c = config
        gen = torch.Generator().manual_seed(seed + 1000)

        def randn(*shape: int, std: float) -> torch.Tensor:
            return torch.randn(*shape, generator=gen) * std

        d, pdim, mlp = c.hidden_size, 3 * c.patch * c.patch, c.mlp_ratio * c.hidden_size
        self.patch_embed = M._Weight(randn(d, pdim, std=pdim ** -0.5))
        self.patch_bias = randn(d, std=0.02)
        self.pos_embed = randn(c.num_patches, d, std=0.02)
        self.blocks = [
            _Block(norm1_w=1.0 + randn(d, std=0.1), norm1_b=randn(d, std=0.02),
                   qkv=M._Weight(randn(3 * d, d, std=d ** -0.5)), qkv_b=randn(3 * d, std=0.02),
                   proj=M._Weight(randn(d, d, std=d ** -0.5)), proj_b=randn(d, std=0.02),
                   norm2_w=1.0 + randn(d, std=0.1), norm2_b=randn(d, std=0.02),
                   fc1=M._Weight(randn(mlp, d, std=d ** -0.5)), fc1_b=randn(mlp, std=0.02),
                   fc2=M._Weight(randn(d, mlp, std=mlp ** -0.5)), fc2_b=randn(d, std=0.02))
            for _ in range(c.num_layers)]
        self.final_w, self.final_b = 1.0 + randn(d, std=0.1), randn(d, std=0.02)
        self.merge1 = M._Weight(randn(c.llm_hidden, 4 * d, std=(4 * d) ** -0.5))
        self.merge1_b = randn(c.llm_hidden, std=0.02)
        self.merge2 = M._Weight(randn(c.llm_hidden, c.llm_hidden, std=c.llm_hidden ** -0.5))
        self.merge2_b = randn(c.llm_hidden, std=0.02)
        self.mean = torch.tensor(_MEAN).view(1, 1, 3)
        self.std = torch.tensor(_STD).view(1, 1, 3)
        self.calls = 0

    def patches(self, image: torch.Tensor) -> torch.Tensor:
        """uint8 [S, S, 3] -> normalized float32 patches [grid*grid, 3*patch*patch],
        row-major over the grid, each patch's pixels (row, column, channel)."""
        c = self.config
        check_image(c, image.shape, str(image.dtype).replace("torch.", ""),
                    image.numel() * image.element_size())
        x = (image.float() / 255.0 - self.mean) / self.std
        g, p = c.grid, c.patch
        x = x.view(g, p, g, p, 3).permute(0, 2, 1, 3, 4).reshape(g * g, p * p * 3)
        return x.contiguous()

    def _attention(self, blk: _Block, x: torch.Tensor) -> torch.Tensor:
        c = self.config
        t, d = x.shape
        hd = d // c.num_heads
        qkv = blk.qkv(x) + blk.qkv_b
        q = qkv[:, :d] * (hd ** -0.5)
        k, v = qkv[:, d:2 * d], qkv[:, 2 * d:]
        out = torch.empty(t, d)
        for h in range(c.num_heads):
            s = slice(h * hd, (h + 1) * hd)
            scores = M._matmul_t(q[:, s].contiguous(), k[:, s].contiguous())  # [T, T]
            probs = torch.softmax(scores, dim=-1)
            out[:, s] = M._matmul_t(probs, v[:, s].t().contiguous())
        return blk.proj(out) + blk.proj_b

    @torch.inference_mode()
    def encode(self, image: torch.Tensor) -> torch.Tensor:
        """The image's hidden states, [num_tokens, llm_hidden] float32, contiguous."""
        self.calls += 1
        c = self.config
        ln = torch.nn.functional.layer_norm
        x = self.patch_embed(self.patches(image)) + self.patch_bias + self.pos_embed
        d = c.hidden_size
        for blk in self.blocks:
            x = x + self._attention(blk, ln(x, (d,), blk.norm1_w, blk.norm1_b))
            h = ln(x, (d,), blk.norm2_w, blk.norm2_b)
            x = x + blk.fc2(torch.nn.functional.gelu(blk.fc1(h) + blk.fc1_b)) + blk.fc2_b
        x = ln(x, (d,), self.final_w, self.final_b)
        g = c.grid
        # 2x2 merge: the four patches of each 2x2 cell, concatenated, row-major over cells.
        x = x.view(g // 2, 2, g // 2, 2, d).permute(0, 2, 1, 3, 4).reshape(c.num_tokens, 4 * d)
        x = torch.nn.functional.gelu(self.merge1(x.contiguous()) + self.merge1_b)
        return (self.merge2(x) + self.merge2_b).contiguous()


@torch.inference_mode()
def prefill_embeds(model: M.LlamaModel, x: torch.Tensor, cache: M.PagedKVCache,
                   block_ids: Sequence[int],
                   on_layer_done: M.OnLayerDone | None = None) -> torch.Tensor:
    """LlamaModel.prefill over input embeddings x [T, hidden] (position t holds
    x[t]): writes every layer's K/V into `cache` and returns the last
    position's logits. The same ops in the same order as LlamaModel.prefill."""
    c = model.config
    if x.dim() != 2 or x.shape[1] != c.hidden_size or x.shape[0] == 0:
        raise ValueError(f"input embeddings must be [T > 0, {c.hidden_size}], got "
                         f"{list(x.shape)}")
    model._check_cache(cache)
    x = x.float().contiguous()
    for i, layer in enumerate(model.layers):
        q, k, v = model._project_qkv(layer, x, 0, cache.dtype)
        cache.write(i, block_ids, 0, k, v)
        if on_layer_done is not None:
            on_layer_done(i)
        x = model._finish_layer(layer, x, M._causal_attention(q, k.float(), v.float(), 0))
    return model._logits(x[-1:])[0]


def prompt_embeds(model: M.LlamaModel, hidden: torch.Tensor,
                  tokens: Sequence[int]) -> torch.Tensor:
    """The prefill input: the image's hidden states, then the text's embeddings."""
    return torch.cat([hidden, model.embed[model._tokens(tokens)]], dim=0)
