"""Media keys and media blocks in the block-key chain, in Python.

The byte layout is docs/block_key_spec.md ("Media blocks"); the C++
implementation is mooncake/index/block_key.h (`ComputeMediaKey`,
`BlockKeyer::ComputeWithMedia`). This module builds the same bytes itself and
hashes them with the system libxxhash (XXH3-128, seed 0) through ctypes, so
the test vectors check two independent implementations against each other.

    key = media_key(MediaNamespace("image", "vit@1", "448x448 rgb u8"), raw_bytes)
    object_name(key)  # the store key of the hidden states: "mcmk-<32 hex>"
"""
from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import struct
from collections.abc import Sequence

MEDIA_KEY_VERSION = 1
BLOCK_KEY_VERSION = 1


class _XXH128(ctypes.Structure):
    _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]


def _load_xxhash() -> ctypes.CDLL:
    for name in (ctypes.util.find_library("xxhash"), "libxxhash.so.0"):
        if name:
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
    else:
        raise ImportError("libxxhash is not installed (Debian package libxxhash0)")
    lib.XXH3_128bits.restype = _XXH128
    lib.XXH3_128bits.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return lib


_XXH = _load_xxhash()


@dataclasses.dataclass(frozen=True)
class Key128:
    """A 128-bit XXH3 value: the (low64, high64) halves XXH3-128 returns."""
    low: int
    high: int

    def hex(self) -> str:
        """Canonical hex (xxhsum -H2): high half first, 32 lowercase digits."""
        return f"{self.high:016x}{self.low:016x}"


def xxh3_128(data: bytes | bytearray | memoryview) -> Key128:
    buf = bytes(data)
    h = _XXH.XXH3_128bits(buf, len(buf))
    return Key128(h.low64, h.high64)


def _field(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<I", len(b)) + b


@dataclasses.dataclass(frozen=True)
class MediaNamespace:
    """What makes the same media bytes give different hidden states."""
    modality: str    # "image", "audio", "video"
    encoder_id: str  # encoder and projector weights, name and revision
    preprocess: str  # preprocessing parameters, one canonical text


def media_key_header(ns: MediaNamespace, media_bytes: int) -> bytes:
    if not ns.modality:
        raise ValueError("MediaNamespace.modality is empty")
    if not ns.encoder_id:
        raise ValueError("MediaNamespace.encoder_id is empty")
    return (b"MCMK" + struct.pack("<I", MEDIA_KEY_VERSION) + _field(ns.modality)
            + _field(ns.encoder_id) + _field(ns.preprocess) + struct.pack("<Q", media_bytes))


def media_key(ns: MediaNamespace, media: bytes | bytearray | memoryview) -> Key128:
    """The key of one media input's hidden states: its raw bytes, salted."""
    media = bytes(media)
    if not media:
        raise ValueError("media input is empty")
    return xxh3_128(media_key_header(ns, len(media)) + media)


def object_name(key: Key128) -> str:
    """The store key of a media item's hidden states (what examples/epd uses)."""
    return f"mcmk-{key.hex()}"


@dataclasses.dataclass(frozen=True)
class KeyNamespace:
    model_id: str
    dtype: str
    tp_size: int = 1
    tp_rank: int = 0
    lora_id: str = ""
    salt: str = ""


def root_key(ns: KeyNamespace, block_tokens: int) -> Key128:
    if not ns.model_id or block_tokens <= 0 or not 0 <= ns.tp_rank < ns.tp_size:
        raise ValueError("invalid key namespace")
    return xxh3_128(b"MCBK" + struct.pack("<IIII", BLOCK_KEY_VERSION, block_tokens, ns.tp_size,
                                          ns.tp_rank)
                    + _field(ns.model_id) + _field(ns.dtype) + _field(ns.lora_id)
                    + _field(ns.salt))


@dataclasses.dataclass(frozen=True)
class MediaPlacement:
    """A media item at `length` placeholder positions from `offset`."""
    key: Key128
    offset: int
    length: int


def block_keys(root: Key128, block_tokens: int, tokens: Sequence[int],
               media: Sequence[MediaPlacement] = ()) -> list[Key128]:
    """The keys of every full block; a block overlapping media items carries
    each item's (low, high), in order, as its extras."""
    end = 0
    for i, m in enumerate(media):
        if m.length <= 0 or m.offset < end or m.offset + m.length > len(tokens):
            raise ValueError(f"media item {i} at [{m.offset}, +{m.length}) is empty, overlaps "
                             f"the previous item or lies outside the {len(tokens)} tokens")
        end = m.offset + m.length
    keys, parent = [], root
    for i in range(len(tokens) // block_tokens):
        begin, stop = i * block_tokens, (i + 1) * block_tokens
        msg = struct.pack("<QQ", parent.low, parent.high)
        msg += struct.pack(f"<{block_tokens}I", *tokens[begin:stop])
        for m in media:
            if m.offset < stop and m.offset + m.length > begin:
                msg += struct.pack("<QQ", m.key.low, m.key.high)
        parent = xxh3_128(msg)
        keys.append(parent)
    return keys
