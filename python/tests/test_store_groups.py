"""Object groups (ReplicateConfig.group_ids, commit_group, remove_group), clones
(clone, clone_prefix) and query_objects, against a real master process on
loopback; every byte read is checked."""
import pytest

from conftest import pattern
from mooncake.store import ReplicateConfig

OK, INVALID_KEY, INVALID_PARAMS = 0, -400, -600
NOT_FOUND, EXISTS = -704, -705


def group(*ids):
    return ReplicateConfig(group_ids=list(ids))


# ---- groups ---------------------------------------------------------------------------

def test_members_are_invisible_until_commit_group(store):
    keys = ["g1/a", "g1/b", "g1/c"]
    for k in keys:
        assert store.put(k, pattern(k, 1000), group("g1")) == OK
    assert [store.get(k) for k in keys] == [b""] * 3
    assert store.batch_is_exist(keys) == [0, 0, 0]
    assert store.commit_group("g1") == OK
    assert [store.get(k) for k in keys] == [pattern(k, 1000) for k in keys]


def test_one_group_id_covers_every_key_of_a_batch(store):
    keys = ["g2/a", "g2/b"]
    assert store.put_batch(keys, [pattern(k, 500) for k in keys], group("g2")) == OK
    assert store.get("g2/a") == b""
    assert store.commit_group("g2") == OK
    assert store.get_batch(keys) == [pattern(k, 500) for k in keys]


def test_one_group_id_per_key(store):
    keys = ["g3/a", "g3/b", "g3/c"]
    assert store.put_batch(keys, [pattern(k, 300) for k in keys], group("g3x", "g3y", "")) == OK
    assert store.get("g3/c") == pattern("g3/c", 300)  # "" joins no group
    assert store.commit_group("g3x") == OK
    assert store.get("g3/a") == pattern("g3/a", 300)
    assert store.get("g3/b") == b""
    assert store.commit_group("g3y") == OK
    assert store.get("g3/b") == pattern("g3/b", 300)


def test_other_group_id_counts_are_invalid_params_and_store_nothing(store):
    keys = ["g4/a", "g4/b", "g4/c"]
    values = [pattern(k, 100) for k in keys]
    assert store.put_batch(keys, values, group("x", "y")) == INVALID_PARAMS
    assert store.batch_is_exist(keys) == [0, 0, 0]
    assert store.put("g4/a", values[0], group("x", "y")) == INVALID_PARAMS
    assert store.upsert("g4/a", values[0], group("x")) == INVALID_PARAMS
    assert store.put("g4/a", values[0], group("x" * 257)) == INVALID_PARAMS
    assert store.is_exist("g4/a") == 0


def test_group_ids_with_put_from(store):
    import numpy as np
    buf = np.frombuffer(bytearray(pattern("g5", 2048)), dtype=np.uint8)
    assert store.register_buffer(buf.ctypes.data, buf.nbytes) == OK
    ptrs = [buf.ctypes.data, buf.ctypes.data + 1024]
    assert store.batch_put_from(["g5/a", "g5/b"], ptrs, [1024, 1024], group("g5a", "g5b")) == [
        OK, OK]
    assert store.commit_group("g5b") == OK
    assert store.get("g5/a") == b""
    assert store.get("g5/b") == pattern("g5", 2048)[1024:]
    assert store.unregister_buffer(buf.ctypes.data) == OK


def test_remove_group_removes_every_member(store):
    keys = ["g6/a", "g6/b", "g6/c"]
    for k in keys:
        assert store.put(k, pattern(k, 400), group("g6")) == OK
    assert store.commit_group("g6") == OK
    assert store.remove_group("g6") == 3
    assert store.batch_is_exist(keys) == [0, 0, 0]
    assert store.get("g6/a") == b""
    assert store.remove_group("g6") == NOT_FOUND


def test_remove_group_of_uncommitted_members(store):
    assert store.put("g7/a", b"a" * 10, group("g7")) == OK
    assert store.remove_group("g7") == 1
    assert store.commit_group("g7") == NOT_FOUND


def test_group_calls_refuse_bad_ids(store):
    assert store.commit_group("never-made") == NOT_FOUND
    assert store.commit_group("") == INVALID_PARAMS
    assert store.remove_group("") == INVALID_PARAMS
    assert store.commit_group("x" * 257) == INVALID_PARAMS


# ---- clones ---------------------------------------------------------------------------

def test_clone_reads_the_same_bytes_and_outlives_its_source(store):
    v = pattern("src", 64 << 10)
    assert store.put("c/src", v) == OK
    assert store.clone(["c/src"], ["c/dst"]) == OK
    assert store.get("c/dst") == v
    assert store.remove("c/src") == OK
    assert store.get("c/src") == b""
    assert store.get("c/dst") == v


def test_clone_is_all_or_nothing(store):
    assert store.put("c2/a", b"a" * 100) == OK
    assert store.put("c2/taken", b"t" * 100) == OK
    assert store.clone(["c2/a", "c2/missing"], ["c2/a2", "c2/m2"]) == NOT_FOUND
    assert store.batch_is_exist(["c2/a2", "c2/m2"]) == [0, 0]
    assert store.clone(["c2/a", "c2/a"], ["c2/a3", "c2/taken"]) == EXISTS
    assert store.is_exist("c2/a3") == 0
    assert store.get("c2/taken") == b"t" * 100


def test_clone_refuses_bad_arguments(store):
    assert store.clone(["a"], ["b", "c"]) == INVALID_PARAMS
    assert store.clone([], []) == INVALID_PARAMS
    assert store.clone([""], ["b"]) == INVALID_KEY
    assert store.clone_prefix("", "x/") == INVALID_PARAMS
    assert store.clone_prefix("x/", "x/") == INVALID_PARAMS


def test_clone_of_an_uncommitted_member_is_not_found(store):
    assert store.put("c3/m", b"m" * 10, group("c3")) == OK
    assert store.clone(["c3/m"], ["c3/m2"]) == NOT_FOUND
    assert store.remove_group("c3") == 1


def test_clone_prefix(store):
    keys = ["p/src/0", "p/src/1", "p/src/2"]
    for k in keys:
        assert store.put(k, pattern(k, 2000)) == OK
    assert store.put("p/other", b"o") == OK
    assert store.clone_prefix("p/src/", "p/dst/") == 3
    for k in keys:
        assert store.get(k.replace("p/src/", "p/dst/")) == pattern(k, 2000)
    assert store.is_exist("p/dst/other") == 0
    assert store.clone_prefix("p/src/", "p/dst/") == EXISTS  # all or nothing, again
    assert store.clone_prefix("p/none/", "p/n2/") == NOT_FOUND  # no key matches


def test_clone_keeps_a_tensor_readable_as_a_tensor(store):
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float16).reshape(3, 4)
    assert store.put_tensor("ct/src", t) == OK
    assert store.clone(["ct/src"], ["ct/dst"]) == OK
    got = store.get_tensor("ct/dst")
    assert got is not None and got.dtype == t.dtype and torch.equal(got, t)


# ---- query_objects --------------------------------------------------------------------

def test_query_objects_filters_and_pages(store):
    torch = pytest.importorskip("torch")
    for i in range(3):
        assert store.put_tensor_with_tp(f"q/t{i}", torch.ones(4, 2), tp_size=2) == OK
    assert store.put("q/plain", b"p" * 10) == OK
    objs, rc = store.query_objects()
    assert rc == OK
    keys = [o.key for o in objs]
    assert keys == sorted(keys)
    assert {"q/plain", "q/t0_tp_0", "q/t2_tp_1"} <= set(keys)
    rank1, rc = store.query_objects(tp_rank=1)
    assert rc == OK
    assert [o.key for o in rank1 if o.key.startswith("q/")] == [f"q/t{i}_tp_1" for i in range(3)]
    assert all(o.has_tensor and o.tp_size == 2 and o.shape == [2, 2] for o in rank1)
    first, rc = store.query_objects(limit=2)
    assert rc == OK and len(first) == 2
    rest, rc = store.query_objects(start_after=first[-1].key)
    assert rc == OK
    assert [o.key for o in first + rest] == keys
    none, rc = store.query_objects(model="no-such-model")
    assert (none, rc) == ([], OK)


def test_query_objects_hides_uncommitted_members(store):
    assert store.put("q2/m", b"m" * 10, group("q2")) == OK
    objs, _ = store.query_objects()
    assert "q2/m" not in [o.key for o in objs]
    assert store.commit_group("q2") == OK
    objs, _ = store.query_objects()
    assert "q2/m" in [o.key for o in objs]


def test_query_objects_refuses_half_a_layer_range(store):
    assert store.query_objects(layer_begin=2) == ([], INVALID_PARAMS)
    assert store.query_objects(layer_begin=4, layer_end=2) == ([], INVALID_PARAMS)
    assert store.query_objects(tp_rank=-2) == ([], INVALID_PARAMS)
    objs, rc = store.query_objects(layer_begin=0, layer_end=4)
    assert rc == OK
