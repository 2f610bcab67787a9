"""media_key.py against the vectors of docs/block_key_spec.md, which
mooncake/index/block_key_test.cc checks for the C++ implementation."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import media_key as K  # noqa: E402

SPEC_NS = K.KeyNamespace("Qwen/Qwen2.5-7B-Instruct", "bf16", tp_size=2, tp_rank=1)
SPEC_MEDIA = K.MediaNamespace("image", "vit-demo@1", "448x448 rgb u8")


def test_block_key_vectors():
    root = K.root_key(SPEC_NS, 4)
    assert root.hex() == "03c73d9bfdef376c142f061648fe4ae8"
    keys = K.block_keys(root, 4, [1, 2, 3, 4, 100000, 4294967295, 7, 8, 9])
    assert [k.hex() for k in keys] == ["e10d452b0e99819ef9c311f4a3376dee",
                                       "a8fab85e5e8b91459f6844e6d93c0c64"]


def test_media_key_vectors():
    assert K.media_key_header(SPEC_MEDIA, 16).hex() == (
        "4d434d4b" "01000000" "05000000" "696d616765" "0a000000" "7669742d64656d6f4031"
        "0e000000" "3434387834343820726762207538" "1000000000000000")
    key = K.media_key(SPEC_MEDIA, bytes(range(16)))
    assert key.hex() == "683a0f2c4652588a10297239348ecc4e"
    assert K.object_name(key) == "mcmk-683a0f2c4652588a10297239348ecc4e"
    root = K.root_key(SPEC_NS, 4)
    chain = K.block_keys(root, 4, [1, 2, 0, 0, 0, 0, 0, 7, 8, 9, 10, 11],
                         [K.MediaPlacement(key, 2, 5)])
    assert [k.hex() for k in chain] == ["c02a188d2328fb49770c458a5cf7efff",
                                        "5f136a082b948dec7136cce9d46191f4",
                                        "77f6ae7eea6377b0d4a9068d18e82025"]


def test_salt_and_bytes_change_the_key():
    base = K.media_key(SPEC_MEDIA, b"image")
    assert K.media_key(SPEC_MEDIA, b"image") == base
    assert K.media_key(SPEC_MEDIA, b"imagf") != base
    assert K.media_key(K.MediaNamespace("image", "vit-demo@2", SPEC_MEDIA.preprocess),
                       b"image") != base
    assert K.media_key(K.MediaNamespace("image", SPEC_MEDIA.encoder_id, "224"), b"image") != base
    with pytest.raises(ValueError):
        K.media_key(SPEC_MEDIA, b"")


def test_prompts_differing_only_by_the_image_share_no_later_block():
    root = K.root_key(SPEC_NS, 4)
    a, b = K.media_key(SPEC_MEDIA, b"a"), K.media_key(SPEC_MEDIA, b"b")
    tokens = list(range(100, 108)) + [0] * 8 + list(range(200, 216))
    ka = K.block_keys(root, 4, tokens, [K.MediaPlacement(a, 8, 8)])
    kb = K.block_keys(root, 4, tokens, [K.MediaPlacement(b, 8, 8)])
    plain = K.block_keys(root, 4, tokens)
    assert ka[:2] == kb[:2] == plain[:2]
    assert all(x != y for x, y in zip(ka[2:], kb[2:]))
    with pytest.raises(ValueError):
        K.block_keys(root, 4, tokens, [K.MediaPlacement(a, 30, 4)])
