"""The worker's task stores (sqlite cache + open-transaction writes) and its status pushes."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
import zmq

from parsley.frame import SerializedWrite
from parsley.refusals import Reason
from parsley.task_stores import TaskStores
from workers.changelog import RestoreProgress
from workers.ordering_store import store_cache_factory
from workers.protocol import StopKind, TaskState
from workers.status import StatusReporter, status_fields


def test_reads_see_the_open_transaction_first_and_a_delete_as_absence(tmp_path: Path) -> None:
    stores = TaskStores(store_cache_factory(tmp_path), ["s"])
    assert stores.rebuild("s", [(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"c", b"x"),
                                (b"c", None)]) == 2
    assert (stores.get("s", b"a"), stores.get("s", b"b"), stores.get("s", b"c")) == \
        (b"3", b"2", None)
    stores.apply([SerializedWrite("s", b"a", b"4"), SerializedWrite("s", b"b", None),
                  SerializedWrite("s", b"a", b"5")])
    assert stores.get("s", b"a") == b"5" and stores.get("s", b"b") is None
    assert stores.pending() == {"s": {b"a": b"5", b"b": None}}  # merged, latest per key
    stores.discard()
    assert stores.get("s", b"a") == b"3" and stores.get("s", b"b") == b"2"
    stores.apply([SerializedWrite("s", b"a", b"6"), SerializedWrite("s", b"b", None)])
    stores.committed()
    assert stores.pending() == {}
    assert stores.get("s", b"a") == b"6" and stores.get("s", b"b") is None
    stores.close()


def test_a_new_task_stores_never_trusts_the_previous_cache(tmp_path: Path) -> None:
    first = TaskStores(store_cache_factory(tmp_path), ["s"])
    first.apply([SerializedWrite("s", b"k", b"v")])
    first.committed()
    first.close()
    again = TaskStores(store_cache_factory(tmp_path), ["s"])
    assert again.get("s", b"k") is None  # rebuilt from the changelog only
    again.close()


def test_in_memory_task_stores_keep_no_file_and_list_what_get_sees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    stores = TaskStores(None, ["s"])  # parsley.testing's stores
    stores.apply([SerializedWrite("s", b"b", b"1"), SerializedWrite("s", b"a", b"2")])
    stores.committed()
    stores.apply([SerializedWrite("s", b"c", b"3"), SerializedWrite("s", b"b", None)])
    assert list(stores.items("s")) == [(b"a", b"2"), (b"c", b"3")]  # ascending, pending first
    stores.discard()
    assert list(stores.items("s")) == [(b"a", b"2"), (b"b", b"1")]
    stores.close()
    assert list(tmp_path.iterdir()) == []


def test_status_and_final_messages_have_the_protocol_shape() -> None:
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    reporter = StatusReporter(f"tcp://127.0.0.1:{port}", "proc", 3)
    reporter.status(TaskState.RUNNING, {"held": [], "held_total": 0, "lag": 5})
    reporter.final(StopKind.REFUSAL, Reason.RESERVED_HEADER_USED, "detail")
    reporter.close()
    assert pull.poll(5000)
    status = orjson.loads(pull.recv())
    assert pull.poll(5000)
    final = orjson.loads(pull.recv())
    pull.close()
    ctx.term()
    assert {k: status[k] for k in ("kind", "process", "task", "pid", "state", "lag")} == {
        "kind": "status", "process": "proc", "task": 3, "pid": os.getpid(),
        "state": "RUNNING", "lag": 5}
    assert status["rss_bytes"] > 0 and isinstance(status["cpu_percent"], float)
    assert final == {"kind": "final", "process": "proc", "task": 3, "pid": os.getpid(),
                     "sent_ms": final["sent_ms"], "stop_kind": "REFUSAL",
                     "refusal_reason": "RESERVED_HEADER_USED", "failure_detail": "detail"}


def test_status_fields_sum_restore_progress_over_the_changelogs_without_an_engine() -> None:
    restore = {
        "o": RestoreProgress("o", 2, start_offset=10, end_offset=30, position=30,
                             records_read=15, done=True),
        "s": RestoreProgress("s", 2, start_offset=0, end_offset=8, position=3,
                             records_read=3, done=False),
    }
    fields = status_fields(engine=None, budget_bytes=4096, restore=restore, delivered=7,
                           lag=None, commits=2, commit_latency_ms=1.5)
    assert fields == {
        "held": [], "frontier_channels": 0, "frontier_bytes": 0, "budget_bytes": 4096,
        "cross_partition_causes": 0, "waited": 0,
        "held_total": 0, "lag": None, "delivered": 7, "commits": 2, "commit_latency_ms": 1.5,
        "restore": {"records": 18, "position": 23, "end": 28, "done": False,
                    "checkpoint": False},
    }
    assert status_fields(engine=None, budget_bytes=1, restore={}, delivered=0, lag=0,
                         commits=0, commit_latency_ms=None)["restore"] is None
    # A restore that trusted a clean stop's checkpoint read nothing, and says so.
    assert status_fields(engine=None, budget_bytes=1, restore={}, delivered=0, lag=0,
                         commits=0, commit_latency_ms=None, from_checkpoint=True)["restore"] \
        == {"records": 0, "position": 0, "end": 0, "done": True, "checkpoint": True}
