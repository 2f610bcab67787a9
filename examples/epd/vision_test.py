"""Unit tests of vision.py: the encoder's shape and determinism, prefill from
embeddings against LlamaModel.prefill, bad images."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vision as V  # noqa: E402
import model as M  # noqa: E402

torch.set_num_threads(1)
VC = V.VisionConfig.preset("tiny")


def test_encoder_output_shape_and_determinism():
    image = V.make_image(VC, 1)
    a = V.VisionEncoder(VC).encode(image)
    b = V.VisionEncoder(VC).encode(image)
    assert a.shape == (VC.num_tokens, VC.llm_hidden) and a.dtype == torch.float32
    assert torch.equal(a, b), "a fresh encoder with the same seed gives the same bytes"
    assert not torch.equal(a, V.VisionEncoder(VC).encode(V.make_image(VC, 2)))


def test_prefill_embeds_equals_prefill_for_token_embeddings():
    model = M.LlamaModel(M.ModelConfig.preset("tiny"))
    tokens = M.make_prompt(40, seed=3)
    c1, c2 = model.new_cache("vllm", 8, 16), model.new_cache("vllm", 8, 16)
    blocks = [0, 1, 2]
    ref = model.prefill(tokens, c1, blocks)
    got = V.prefill_embeds(model, model.embed[torch.tensor(tokens)], c2, blocks)
    assert torch.equal(ref, got)
    assert all(torch.equal(a, b) for a, b in zip(c1.tensors, c2.tensors))


def test_image_positions_change_the_output():
    model = M.LlamaModel(M.ModelConfig.preset("tiny"))
    enc, text = V.VisionEncoder(VC), M.make_prompt(5, seed=1)
    outs = []
    for seed in (1, 2):
        x = V.prompt_embeds(model, enc.encode(V.make_image(VC, seed)), text)
        assert x.shape == (VC.num_tokens + 5, model.config.hidden_size)
        outs.append(V.prefill_embeds(model, x, model.new_cache("vllm", 4, 16), [0]))
    assert not torch.equal(*outs)


@pytest.mark.parametrize("image,message", [
    (torch.zeros(28, 28, 3, dtype=torch.uint8), "image shape must be"),
    (torch.zeros(56, 56, 4, dtype=torch.uint8), "image shape must be"),
    (torch.zeros(56, 56, 3), "dtype must be uint8"),
])
def test_bad_images_are_refused(image, message):
    with pytest.raises(V.BadImageError, match=message):
        V.VisionEncoder(VC).encode(image)


def test_prefill_embeds_refuses_a_wrong_width():
    model = M.LlamaModel(M.ModelConfig.preset("tiny"))
    with pytest.raises(ValueError, match="input embeddings must be"):
        V.prefill_embeds(model, torch.zeros(4, 8), model.new_cache("vllm", 4, 16), [0])
