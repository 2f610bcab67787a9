"""create_copy_task / create_move_task / query_task (Mooncake's replica task
API, docs/python.md) against a real master process: three stores on loopback
each contribute a segment named by its hostname; the master has the source
worker copy the bytes (mooncake/store/worker/copy_agent.h)."""
import time

import pytest

from conftest import new_store, pattern
from mooncake.store import ReplicateConfig, TaskStatus, TaskType

OK, INVALID_KEY, INVALID_PARAMS, NOT_FOUND = 0, -400, -600, -704


def wait_task(store, task_id, timeout_s=20.0):
    """Polls query_task until the task ends; returns its last answer."""
    deadline = time.monotonic() + timeout_s
    while True:
        info, rc = store.query_task(task_id)
        assert rc == OK, rc
        assert info.id == task_id
        if info.status in (TaskStatus.SUCCESS, TaskStatus.FAILED) or time.monotonic() > deadline:
            return info
        time.sleep(0.05)


@pytest.fixture
def stores(master):
    s = [new_store(master) for _ in range(3)]
    yield s
    s[0].remove_all()
    for x in s:
        x.close()


def put_on(store, key, value, segment):
    c = ReplicateConfig()
    c.preferred_segment = segment
    assert store.put(key, value, c) == OK


def test_copy_to_a_named_segment_then_move(stores):
    a, b, c = stores
    key, value = "task-key", pattern("task-key", 300_000)
    put_on(a, key, value, a.get_hostname())

    task_id, rc = a.create_copy_task(key, [b.get_hostname()])
    assert rc == OK
    assert isinstance(task_id, tuple) and len(task_id) == 2 and task_id != (0, 0)
    info = wait_task(a, task_id)
    assert info.status == TaskStatus.SUCCESS, info.message
    assert info.type == TaskType.REPLICA_COPY
    assert info.created_at_ms_epoch <= info.last_updated_at_ms_epoch
    assert isinstance(info.assigned_client, str)  # the copying worker, when the master says
    assert b.get(key) == value

    task_id, rc = b.create_move_task(key, a.get_hostname(), c.get_hostname())
    assert rc == OK
    info = wait_task(b, task_id)
    assert info.status == TaskStatus.SUCCESS, info.message
    assert info.type == TaskType.REPLICA_MOVE
    # Readable with the source's segment gone from the pool.
    a.close()
    assert c.get(key) == value


def test_bad_arguments_and_unknown_tasks_are_error_codes(stores):
    a = stores[0]
    assert a.create_copy_task("", ["x"]) == ((0, 0), INVALID_KEY)
    assert a.create_copy_task("k", [])[1] == INVALID_PARAMS
    assert a.create_move_task("k", "", "y")[1] == INVALID_PARAMS
    assert a.create_copy_task("absent", [stores[1].get_hostname()]) == ((0, 0), NOT_FOUND)
    assert a.query_task((0, 987_654_321)) == (None, NOT_FOUND)
    assert a.query_task((1, 2)) == (None, INVALID_PARAMS)  # not an id this store makes


def test_enums_keep_mooncakes_values():
    assert int(TaskType.REPLICA_COPY) == 0 and int(TaskType.REPLICA_MOVE) == 1
    assert [int(s) for s in (TaskStatus.PENDING, TaskStatus.PROCESSING, TaskStatus.FAILED,
                             TaskStatus.SUCCESS)] == [0, 1, 2, 3]
