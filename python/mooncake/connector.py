"""PD connectors for Python engines: prefill -> decode KV transfer.

A decode instance registers its paged KV cache and pulls a request's KV from
the prefill instance(s); the prefill instance writes each layer into the
decode cache with one-sided transport writes as soon as the layer is computed.
See docs/connector.md for the protocol, the layouts and the failure semantics.

    from mooncake.connector import DecodeConnector, PrefillConnector, layout_for

    # prefill process
    layout, bases = layout_for(kv_caches)             # vLLM: {layer_name: tensor}
    pc = PrefillConnector(layout, bases, protocol="tcp")
    pc.add_request("r1", blocks, num_tokens)
    ...after layer i's KV is written: pc.save_layer("r1", i)

    # decode process
    dc = DecodeConnector(layout, bases, protocol="tcp")
    dc.start_request("r1", [prefill_rpc_address], blocks, num_tokens)
    dc.wait_layer("r1", i, timeout_s=30)   # raises ConnectorError: recompute instead
    dc.end("r1")
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from mooncake import _connector
from mooncake._connector import KvLayout, SharedBuffer

__all__ = [
    "ConnectorError",
    "DecodeConnector",
    "KvLayout",
    "PrefillConnector",
    "SharedBuffer",
    "layout_for",
]

# absl status codes, as ConnectorError.code carries them.
CANCELLED = 1
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
ABORTED = 10
UNAVAILABLE = 14
UNAUTHENTICATED = 16


class ConnectorError(RuntimeError):
    """A connector call failed; `code` is the absl status code."""

    def __init__(self, code: int, message: str):
        super().__init__(f"[{code}] {message}")
        self.code = code
        self.message = message


def _check(result) -> None:
    code, message = result[0], result[1]
    if code != 0:
        raise ConnectorError(code, message)


def _tensor_info(t):
    """(data_ptr, nbytes, shape, dtype name) of a torch tensor or numpy array."""
    if hasattr(t, "data_ptr"):  # torch
        if not t.is_contiguous():
            raise ValueError("KV cache tensors must be contiguous")
        return t.data_ptr(), t.numel() * t.element_size(), tuple(t.shape), str(t.dtype)
    if hasattr(t, "__array_interface__"):  # numpy
        if not t.flags["C_CONTIGUOUS"]:
            raise ValueError("KV cache arrays must be C-contiguous")
        return t.__array_interface__["data"][0], t.nbytes, tuple(t.shape), str(t.dtype)
    raise TypeError(f"expected a torch tensor or numpy array, got {type(t).__name__}")


def layout_for(kv_caches, order: str | None = None, first_head: int = 0,
               total_kv_heads: int = 0) -> tuple[KvLayout, list[int]]:
    """The layout and region base addresses of an engine's KV cache.

    kv_caches: vLLM's per-layer dict {layer_name: tensor} (or a list) of shape
      [2, num_blocks, block_size, kv_heads, head_dim] (order "vllm"), or
      [2, num_blocks, kv_heads, block_size, head_dim] with
      order="layer_first_head_major"; or one SGLang page-first tensor of shape
      [num_pages, num_layers, 2, page_size, kv_heads, head_dim] (order "sglang").
    first_head / total_kv_heads: which KV heads of the model this process holds
      (tensor parallelism); by default all of them.
    """
    if isinstance(kv_caches, Mapping):
        tensors = list(kv_caches.values())
    elif isinstance(kv_caches, (list, tuple)):
        tensors = list(kv_caches)
    else:
        tensors = [kv_caches]
    infos = [_tensor_info(t) for t in tensors]
    shape, dtype = infos[0][2], infos[0][3]
    if any(i[2] != shape or i[3] != dtype for i in infos):
        raise ValueError("every layer's KV tensor must have the same shape and dtype")
    if len(shape) == 6:  # SGLang page-first: one tensor for every layer
        if len(infos) != 1:
            raise ValueError("a page-first KV cache is one tensor")
        pages, layers, parts, page, heads, dim = shape
        layout = KvLayout(order or "sglang", dtype, layers, page, heads, dim, pages, parts,
                          first_head, total_kv_heads)
    elif len(shape) == 5:
        parts, blocks, a, b, dim = shape
        order = order or "vllm"
        heads, block_size = (a, b) if order == "layer_first_head_major" else (b, a)
        layout = KvLayout(order, dtype, len(infos), block_size, heads, dim, blocks, parts,
                          first_head, total_kv_heads)
    else:
        raise ValueError(f"unsupported KV tensor shape {shape}")
    for _, nbytes, _, _ in infos:
        if nbytes < layout.region_bytes:
            raise ValueError("a KV tensor is smaller than its layout says")
    return layout, [i[0] for i in infos]


class PrefillConnector:
    """The prefill side: serves decode pulls and writes layers as they finish."""

    def __init__(self, layout: KvLayout, bases: Sequence[int], protocol: str = "tcp",
                 rpc_host: str = "127.0.0.1", rpc_port: int = 0,
                 request_timeout_s: float = 120.0):
        self._c = _connector.PrefillConnector(layout, list(bases), protocol, rpc_host,
                                              rpc_port, request_timeout_s)

    @property
    def rpc_address(self) -> str:
        """Where decode instances send their pulls ("host:port")."""
        return self._c.rpc_address

    def add_request(self, request_id: str, blocks: Iterable[int], num_tokens: int) -> None:
        _check(self._c.add_request(request_id, list(blocks), num_tokens))

    def save_layer(self, request_id: str, layer: int) -> None:
        """Layer `layer` is in the request's blocks: send it (never blocks)."""
        _check(self._c.save_layer(request_id, layer))

    def abort(self, request_id: str, reason: str = "aborted") -> None:
        _check(self._c.abort(request_id, reason))

    def take_released(self) -> list[tuple[str, list[int], int, str]]:
        """Requests that ended since the last call: (id, blocks, code, message).

        The engine frees these blocks; code 0 means every pull finished."""
        return self._c.take_released()

    def stats(self) -> dict:
        return self._c.stats()


class DecodeConnector:
    """The decode side: registers the KV cache and pulls requests into it."""

    def __init__(self, layout: KvLayout, bases: Sequence[int], protocol: str = "tcp",
                 rpc_host: str = "127.0.0.1", rpc_port: int = 0, tp_rank: int = 0,
                 tp_ranks: int = 1):
        self._c = _connector.DecodeConnector(layout, list(bases), protocol, rpc_host, rpc_port,
                                             tp_rank, tp_ranks)

    @property
    def rpc_address(self) -> str:
        return self._c.rpc_address

    def start_request(self, request_id: str, sources: Sequence[str], blocks: Iterable[int],
                      num_tokens: int) -> None:
        """Pulls from every source (one per prefill TP rank); raises on refusal."""
        _check(self._c.start_request(request_id, list(sources), list(blocks), num_tokens))

    def wait_layer(self, request_id: str, layer: int, timeout_s: float = 30.0) -> None:
        _check(self._c.wait_layer(request_id, layer, timeout_s))

    def wait_all(self, request_id: str, timeout_s: float = 30.0) -> None:
        _check(self._c.wait_all(request_id, timeout_s))

    def end(self, request_id: str) -> tuple[bool, float]:
        """Forgets the request, cancelling unfinished pulls.

        Returns (reusable_now, reusable_after_s): whether the request's blocks
        may be reused at once, else after how many seconds no write of it can
        land any more."""
        code, message, now, after_s = self._c.end(request_id)
        if code == NOT_FOUND:
            raise ConnectorError(code, message)
        return now, after_s

    def stats(self) -> dict:
        return self._c.stats()
