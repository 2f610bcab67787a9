"""mooncake.connector: the PD connectors from Python (numpy caches here; the
demo in examples/pd_disaggregation runs them on torch tensors across
processes). Both sides live in this process, each with its own transport and
RPC server, as two processes would."""
import numpy as np
import pytest

from mooncake import connector as C


def vllm_cache(layers=3, blocks=32, block_size=16, heads=2, dim=8, seed=None):
    rng = np.random.default_rng(seed)
    return {f"layer.{i}": (rng.standard_normal((2, blocks, block_size, heads, dim))
                           .astype(np.float16) if seed is not None
                           else np.zeros((2, blocks, block_size, heads, dim), np.float16))
            for i in range(layers)}


def shared_vllm_cache(layers=3, blocks=32, block_size=16, heads=2, dim=8):
    """A zeroed vllm_cache whose layers live in memfd memory, as an SHM decode
    side's must (each array keeps its SharedBuffer alive)."""
    shape = (2, blocks, block_size, heads, dim)
    return {f"layer.{i}": np.frombuffer(C.SharedBuffer(int(np.prod(shape)) * 2),
                                        np.float16).reshape(shape)
            for i in range(layers)}


def test_layout_for_vllm_and_sglang_shapes():
    layout, bases = C.layout_for(vllm_cache())
    assert (layout.order, layout.dtype, layout.num_layers, layout.block_size) == (
        "layer_first", "fp16", 3, 16)
    assert layout.num_regions == 3 and len(bases) == 3
    pool = np.zeros((8, 3, 2, 32, 2, 8), np.float32)  # SGLang page-first
    layout, bases = C.layout_for(pool)
    assert (layout.order, layout.block_size, layout.num_blocks, layout.num_regions) == (
        "page_first", 32, 8, 1)
    assert bases == [pool.__array_interface__["data"][0]]


def test_layout_for_refuses_bad_caches():
    with pytest.raises(TypeError):
        C.layout_for([b"not a tensor"])
    with pytest.raises(ValueError):
        C.layout_for(np.zeros((4, 4), np.float16))
    with pytest.raises(ValueError):  # layers of different shapes
        C.layout_for([np.zeros((2, 4, 16, 2, 8), np.float16),
                      np.zeros((2, 5, 16, 2, 8), np.float16)])
    with pytest.raises(ValueError):  # not a KV dtype
        C.layout_for(np.zeros((2, 4, 16, 2, 8), np.complex64))
    with pytest.raises(ValueError):  # non-contiguous
        C.layout_for(np.zeros((2, 4, 16, 2, 16), np.float16)[..., ::2])


def test_transfer_between_layouts_moves_every_row():
    src = vllm_cache(seed=1)
    dst = np.zeros((40, 3, 2, 8, 2, 8), np.float16)  # page-first, page 8
    pc = C.PrefillConnector(*C.layout_for(src))
    dc = C.DecodeConnector(*C.layout_for(dst))
    n = 150
    src_blocks = [31 - b for b in range(10)]
    dst_blocks = [2 * b + 1 for b in range(19)]
    dc.start_request("r", [pc.rpc_address], dst_blocks, n)
    pc.add_request("r", src_blocks, n)
    for layer in range(3):
        pc.save_layer("r", layer)
        dc.wait_layer("r", layer, timeout_s=10)
    dc.wait_all("r", timeout_s=10)
    assert dc.end("r") == (True, 0.0)
    for layer in range(3):
        for t in range(n):
            want = src[f"layer.{layer}"][:, src_blocks[t // 16], t % 16]
            got = dst[dst_blocks[t // 8], layer, :, t % 8]
            assert np.array_equal(want, got), (layer, t)
    released = []
    for _ in range(200):
        released += pc.take_released()
        if released:
            break
        import time
        time.sleep(0.01)
    assert [(r[0], r[1], r[2]) for r in released] == [("r", src_blocks, 0)]
    assert pc.stats()["blocks_held"] == 0
    assert dc.stats()["requests_finished"] == 1


def test_errors_raise_connector_error_with_codes():
    pc = C.PrefillConnector(*C.layout_for(vllm_cache(seed=2)))
    dc = C.DecodeConnector(*C.layout_for(vllm_cache()))
    with pytest.raises(C.ConnectorError) as e:
        dc.wait_layer("nope", 0, timeout_s=0.01)
    assert e.value.code == C.NOT_FOUND
    with pytest.raises(C.ConnectorError) as e:
        pc.add_request("x", [32], 10)  # block out of the cache
    assert e.value.code == C.INVALID_ARGUMENT
    with pytest.raises(C.ConnectorError) as e:
        dc.start_request("y", ["127.0.0.1:1"], [0], 10)  # nobody listens
    assert e.value.code == C.UNAVAILABLE
    dc.start_request("z", [pc.rpc_address], [0], 10)
    pc.add_request("z", [0], 10)
    pc.abort("z", "engine out of memory")
    with pytest.raises(C.ConnectorError) as e:
        dc.wait_all("z", timeout_s=10)
    assert e.value.code == C.ABORTED and "engine out of memory" in e.value.message
    with pytest.raises(TypeError):
        pc.add_request("w", "not a list", 10)
    with pytest.raises(ValueError):
        C.PrefillConnector(C.layout_for(vllm_cache())[0], [0, 0, 0])
    with pytest.raises(ValueError):
        C.DecodeConnector(C.layout_for(vllm_cache())[0], [1], protocol="rdma")


def test_wait_is_bounded_by_its_timeout():
    import time
    pc = C.PrefillConnector(*C.layout_for(vllm_cache(seed=3)))
    dc = C.DecodeConnector(*C.layout_for(vllm_cache()))
    dc.start_request("slow", [pc.rpc_address], [0, 1], 20)
    t0 = time.monotonic()
    with pytest.raises(C.ConnectorError) as e:
        dc.wait_layer("slow", 0, timeout_s=0.3)  # the prefill never added it
    assert e.value.code == C.DEADLINE_EXCEEDED
    assert time.monotonic() - t0 < 3
    assert dc.end("slow")[0]  # the cancel was confirmed: blocks reusable now


@pytest.mark.parametrize("protocol", ["tcp", "shm"])
def test_token_file_guards_the_connectors(tmp_path, monkeypatch, protocol):
    """MOONCAKE_AUTH_TOKEN_FILE: both sides with the token move every row; a
    decode side without it, or with another cluster's, is refused at its pull
    (UNAUTHENTICATED) and its cache stays untouched. Over shared memory the
    segment socket takes the token too."""
    def token_file(name, secret):
        path = tmp_path / name
        path.write_text(f"cluster {secret}\n")
        path.chmod(0o600)
        return str(path)
    ours = token_file("ours", "0123456789abcdef0123456789abcdef")
    theirs = token_file("theirs", "fedcba9876543210fedcba9876543210")
    src = vllm_cache(seed=4)
    monkeypatch.setenv("MOONCAKE_AUTH_TOKEN_FILE", ours)
    pc = C.PrefillConnector(*C.layout_for(src), protocol=protocol)
    for env in (None, theirs):
        if env is None:
            monkeypatch.delenv("MOONCAKE_AUTH_TOKEN_FILE")
        else:
            monkeypatch.setenv("MOONCAKE_AUTH_TOKEN_FILE", env)
        dst = vllm_cache() if protocol == "tcp" else shared_vllm_cache()
        dc = C.DecodeConnector(*C.layout_for(dst), protocol=protocol)
        with pytest.raises(C.ConnectorError) as e:
            dc.start_request("x", [pc.rpc_address], [0, 1], 20)
        assert e.value.code == C.UNAUTHENTICATED, e.value.message
        assert not any(v.any() for v in dst.values())
    monkeypatch.setenv("MOONCAKE_AUTH_TOKEN_FILE", ours)
    dst = vllm_cache() if protocol == "tcp" else shared_vllm_cache()
    dc = C.DecodeConnector(*C.layout_for(dst), protocol=protocol)
    dc.start_request("r", [pc.rpc_address], [0, 1], 20)
    pc.add_request("r", [2, 3], 20)
    for layer in range(3):
        pc.save_layer("r", layer)
    dc.wait_all("r", timeout_s=10)
    assert dc.end("r") == (True, 0.0)
    for layer in range(3):
        for t in range(20):
            assert np.array_equal(src[f"layer.{layer}"][:, 2 + t // 16, t % 16],
                                  dst[f"layer.{layer}"][:, t // 16, t % 16])
    monkeypatch.setenv("MOONCAKE_AUTH_TOKEN_FILE", str(tmp_path / "missing"))
    with pytest.raises(RuntimeError, match="MOONCAKE_AUTH_TOKEN_FILE"):
        C.DecodeConnector(*C.layout_for(vllm_cache()))
