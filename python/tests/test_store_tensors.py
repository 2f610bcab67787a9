"""MooncakeDistributedStore's tensor calls (put_tensor, get_tensor, the _with_tp
and batch forms, pub_*): round trips of every stored dtype and several shapes,
tensor-parallel split and join, and the inputs they refuse, against a real
master process on loopback."""
import os
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")

from conftest import new_store  # noqa: E402
from mooncake.store import ReplicateConfig  # noqa: E402

OK, INVALID_PARAMS = 0, -600

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int8, torch.uint8]
SHAPES = [(), (7,), (3, 5), (2, 3, 4), (2, 1, 3, 4)]


def sample(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    lo, hi = (-128, 128) if dtype == torch.int8 else (0, 256)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int16).to(dtype)


def same(a, b):
    return a is not None and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def refused(call):
    """Runs call(); returns (result, warning messages)."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = call()
    return r, [str(x.message) for x in w]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_round_trip_keeps_dtype_shape_and_bytes(store, dtype, shape):
    t = sample(shape, dtype, seed=len(shape))
    key = f"rt-{dtype}-{shape}"
    assert store.put_tensor(key, t) == OK
    got = store.get_tensor(key)
    assert same(got, t), (got, t)
    # The value is the tensor's raw bytes: no header inside.
    raw = store.get(key)
    assert len(raw) == t.numel() * t.element_size()
    assert raw == t.reshape(-1).view(torch.uint8).numpy().tobytes()


def test_plain_get_is_the_raw_bytes(store):
    t = torch.arange(10, dtype=torch.float32)
    assert store.put_tensor("raw", t) == OK
    assert store.get("raw") == t.numpy().tobytes()
    assert store.get_size("raw") == 40


def test_get_tensor_miss_is_none_without_a_warning(store):
    r, w = refused(lambda: store.get_tensor("never-put"))
    assert r is None and w == []


def test_get_tensor_of_a_plain_object_is_none_with_a_reason(store):
    assert store.put("plain", b"x" * 16) == OK
    r, w = refused(lambda: store.get_tensor("plain"))
    assert r is None
    assert any("not stored as a tensor" in m for m in w), w


def test_put_tensor_of_an_existing_key_keeps_the_first(store):
    a, b = torch.ones(4), torch.zeros(4)
    assert store.put_tensor("twice", a) == OK
    assert store.put_tensor("twice", b) == OK  # Mooncake's put: existing key, 0
    assert same(store.get_tensor("twice"), a)


@pytest.mark.parametrize("tp_size", [1, 2, 4])
@pytest.mark.parametrize("split_dim", [0, 1])
def test_tp_split_and_join(store, tp_size, split_dim):
    t = sample((8, 12), torch.bfloat16, seed=tp_size * 10 + split_dim)
    key = f"tp-{tp_size}-{split_dim}"
    assert store.put_tensor_with_tp(key, t, tp_rank=0, tp_size=tp_size,
                                    split_dim=split_dim) == OK
    shards = [store.get_tensor_with_tp(key, tp_rank=r, tp_size=tp_size, split_dim=split_dim)
              for r in range(tp_size)]
    for r, s in enumerate(shards):
        assert same(s, torch.chunk(t, tp_size, split_dim)[r].contiguous()), r
    assert same(torch.cat(shards, dim=split_dim), t)
    if tp_size == 1:
        assert same(store.get_tensor(key), t)  # tp_size 1 is the plain key
    else:
        assert store.get_tensor(key) is None
        assert same(store.get_tensor(f"{key}_tp_{tp_size - 1}"), shards[-1])
        objs, rc = store.query_objects(tp_rank=tp_size - 1)
        assert rc == OK
        mine = [o for o in objs if o.key == f"{key}_tp_{tp_size - 1}"]
        assert len(mine) == 1
        assert (mine[0].tp_rank, mine[0].tp_size, mine[0].dtype) == (
            tp_size - 1, tp_size, "bfloat16")
        assert mine[0].shape == list(shards[-1].shape)


def test_tp_of_a_non_contiguous_tensor_stores_contiguous_shards(store):
    t = torch.arange(24, dtype=torch.float32).reshape(4, 6).t()  # not contiguous
    assert store.put_tensor_with_tp("tp-nc", t, tp_size=2, split_dim=1) == OK
    assert same(store.get_tensor_with_tp("tp-nc", tp_rank=1, tp_size=2),
                torch.chunk(t, 2, 1)[1].contiguous())


def test_tp_refusals(store):
    t = torch.zeros(3, 4)
    r, w = refused(lambda: store.put_tensor_with_tp("tp-bad", t, tp_size=4, split_dim=0))
    assert r == INVALID_PARAMS and any("chunks" in m for m in w), w
    r, w = refused(lambda: store.put_tensor_with_tp("tp-bad", t, tp_size=2, split_dim=5))
    assert r == INVALID_PARAMS and w
    r, w = refused(lambda: store.put_tensor_with_tp("tp-bad", b"bytes", tp_size=2))
    assert r == INVALID_PARAMS and w
    assert store.is_exist("tp-bad_tp_0") == 0


def test_batch_put_and_get(store):
    keys = [f"b{i}" for i in range(5)]
    ts = [sample((i + 1, 3), DTYPES[i], seed=i) for i in range(5)]
    assert store.batch_put_tensor(keys, ts) == [OK] * 5
    got = store.batch_get_tensor(keys + ["b-missing"])
    assert [same(g, t) for g, t in zip(got, ts)] == [True] * 5
    assert got[5] is None


def test_batch_put_refuses_per_item_and_mismatched_lengths(store):
    ts = [torch.ones(2), torch.ones(4, dtype=torch.float64), torch.ones(3)]
    r, w = refused(lambda: store.batch_put_tensor(["c0", "c1", "c2"], ts))
    assert r == [OK, INVALID_PARAMS, OK]
    assert any("float64" in m for m in w), w
    r, _ = refused(lambda: store.batch_put_tensor(["d0", "d1"], [torch.ones(1)]))
    assert r == [INVALID_PARAMS, INVALID_PARAMS]
    assert store.is_exist("d0") == 0


def test_batch_tp_forms(store):
    ts = [sample((4, 8), torch.float16, seed=i) for i in range(3)]
    keys = ["bt0", "bt1", "bt2"]
    assert store.batch_put_tensor_with_tp(keys, ts, tp_rank=0, tp_size=2, split_dim=1) == [OK] * 3
    for rank in range(2):
        got = store.batch_get_tensor_with_tp(keys, tp_rank=rank, tp_size=2)
        for g, t in zip(got, ts):
            assert same(g, torch.chunk(t, 2, 1)[rank].contiguous())
    assert [same(g, t) for g, t in
            zip(store.batch_get_tensor_with_tp(["bt-plain"], tp_size=1), ts)] == [False]


@pytest.mark.parametrize("make,reason", [
    (lambda: torch.arange(12, dtype=torch.float32).reshape(3, 4).t(), "not contiguous"),
    (lambda: torch.ones(4, dtype=torch.float64), "float64"),
    (lambda: torch.ones(4, dtype=torch.int32), "int32"),
    (lambda: torch.ones(4, dtype=torch.bool), "bool"),
    (lambda: torch.empty(4, device="meta"), "device 'meta'"),
    (lambda: torch.ones(0), "no elements"),
    (lambda: torch.ones(4).to_sparse(), "dense"),
    (lambda: b"not a tensor", "not a torch.Tensor"),
    (lambda: __import__("numpy").ones(4, dtype="float32"), "not a torch.Tensor"),
], ids=["non-contiguous", "float64", "int32", "bool", "meta-device", "empty", "sparse", "bytes",
        "numpy"])
def test_wrong_inputs_are_invalid_params_with_a_reason(store, make, reason):
    r, w = refused(lambda: store.put_tensor("wrong", make()))
    assert r == INVALID_PARAMS
    assert any(reason in m for m in w), w
    assert store.is_exist("wrong") == 0


def test_pub_tensor_with_a_group_is_invisible_until_commit(store):
    t = torch.ones(8, dtype=torch.uint8)
    cfg = ReplicateConfig(group_ids=["tensor-group"])
    assert store.pub_tensor("pub0", t, cfg) == OK
    assert store.pub_tensor_with_tp("pub1", torch.ones(4, 4), cfg, tp_size=2) == OK
    assert store.get_tensor("pub0") is None
    assert store.commit_group("tensor-group") == OK
    assert same(store.get_tensor("pub0"), t)
    assert same(store.get_tensor_with_tp("pub1", tp_rank=1, tp_size=2), torch.ones(2, 4))
    assert store.remove_group("tensor-group") == 3


def test_pub_tensor_checks_preferred_segments_like_mooncake(store):
    cfg = ReplicateConfig(replica_num=1, preferred_segments=["a", "b"])
    r, w = refused(lambda: store.pub_tensor("pub-bad", torch.ones(2), cfg))
    assert r == INVALID_PARAMS and w


def test_closed_store(master):
    s = new_store(master)
    s.close()
    r, _ = refused(lambda: s.put_tensor("closed", torch.ones(2)))
    assert r < 0
    r, _ = refused(lambda: s.get_tensor("closed"))
    assert r is None


def test_the_module_works_without_torch(master):
    code = r"""
import sys, warnings
sys.modules["torch"] = None  # import torch now fails
import mooncake.store as ms
s = ms.MooncakeDistributedStore()
assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", sys.argv[1]) == 0
assert s.put("no-torch", b"abc") == 0 and s.get("no-torch") == b"abc"
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    assert s.put_tensor("no-torch-t", b"abc") == -600
    assert s.get_tensor("no-torch") is None
assert any("torch is not importable" in str(x.message) for x in w), [str(x.message) for x in w]
s.remove_all()
s.close()
print("ok")
"""
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", code, master], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_importing_the_module_does_not_import_torch():
    out = subprocess.run([sys.executable, "-c",
                          "import sys, mooncake.store; print('torch' in sys.modules)"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_labels_make_tensors_queryable_by_model_and_layers(store):
    # model / layer_begin / layer_end / block_tokens: keyword-only, not in Mooncake.
    for layer in range(4):
        t = sample((16, 8), torch.bfloat16, seed=layer)
        assert store.put_tensor(f"lab/llama/L{layer}", t, model="llama-x",
                                layer_begin=layer, layer_end=layer + 1, block_tokens=16) == 0
    assert store.put_tensor_with_tp("lab/qwen", sample((8, 8), torch.float16), tp_size=2,
                                    model="qwen-y", layer_begin=0, layer_end=28) == 0
    objs, rc = store.query_objects(model="llama-x")
    assert rc == 0 and len(objs) == 4
    objs, rc = store.query_objects(model="llama-x", layer_begin=1, layer_end=3)
    assert rc == 0 and sorted(o.key for o in objs) == ["lab/llama/L1", "lab/llama/L2"]
    objs, rc = store.query_objects(model="qwen-y", tp_rank=1)
    assert rc == 0 and [o.key for o in objs] == ["lab/qwen_tp_1"]
    # The labels do not change what comes back.
    assert same(store.get_tensor("lab/llama/L2"), sample((16, 8), torch.bfloat16, seed=2))
    # A bad layer range is refused by the master's TensorMeta check.
    assert store.put_tensor("lab/bad", sample((4,), torch.float32), layer_begin=3,
                            layer_end=1) < 0


def test_compressed_tensor_reports_its_raw_size(master, monkeypatch):
    """With MOONCAKE_NETWORK_COMPRESSION=always a bf16 tensor is stored as a
    smaller frame; get_size and query_objects' size give what a read returns
    (the raw tensor), stored_size the bytes in the pool."""
    monkeypatch.setenv("MOONCAKE_NETWORK_COMPRESSION", "always")
    s = new_store(master)
    try:
        g = torch.Generator().manual_seed(7)
        t = (torch.randn((64, 256), generator=g) * 0.02).to(torch.bfloat16)
        raw = t.numel() * t.element_size()
        assert s.put_tensor("zipped", t) == OK
        assert s.get_size("zipped") == raw
        objects, rc = s.query_objects()
        assert rc == OK
        info = [o for o in objects if o.key == "zipped"]
        assert len(info) == 1, objects
        assert info[0].size == raw
        assert info[0].stored_size < raw, info[0].stored_size
        assert same(s.get_tensor("zipped"), t)
    finally:
        s.remove_all()
        s.close()
