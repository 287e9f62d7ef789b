"""The engine's split-out parts, pure functions over plain data (identity, deltas, diagnose).

The engine tests cover them through ProcessEngine; these pin each function's
own contract and that the old import paths still name the same objects.
"""

from __future__ import annotations

from uuid import UUID

import pytest

from parsley.engine import state_codec as sc
from parsley.engine.channel import ChannelId, kafka_topic_id
from parsley.engine.deliverability import DELIVERABLE, Blocker, Held
from parsley.engine.deltas import changed_rows
from parsley.engine.diagnose import diagnose_task
from parsley.engine.identity import TopicVerdict, deleted_channels, new_bindings
from parsley.refusals import ParsleyFailClosedError, Reason
from parsley.status import Blocker as StatusBlocker
from parsley.status import HeldChannel

A = ChannelId(UUID(int=0xA), 0)
B = ChannelId(UUID(int=0xB), 1)


def test_old_import_paths_name_the_same_objects() -> None:
    import parsley.engine.engine as engine

    assert engine.TopicVerdict is TopicVerdict
    assert "TopicVerdict" in engine.__all__ and "Causes" in engine.__all__


def test_new_bindings_returns_unbound_names_and_refuses_a_changed_one() -> None:
    bound = {"a": A.topic_id}
    assert new_bindings(bound, {"a": A.topic_id, "b": B.topic_id}, [A, B]) == ["b"]
    with pytest.raises(ParsleyFailClosedError) as info:
        new_bindings(bound, {"b": B.topic_id, "a": B.topic_id}, [A, B])
    assert info.value.reason is Reason.CHANNEL_IDENTITY_CHANGED
    assert info.value.detail.startswith(
        f"topic 'a' now resolves to {B} but this process's state was built against a "
        f"previous incarnation (topic id {kafka_topic_id(B.topic_id)} now, topic id "
        f"{kafka_topic_id(A.topic_id)} then); ")


def test_deleted_channels_checks_recreated_first_then_holds() -> None:
    verdicts = {A.topic_id: TopicVerdict.DELETED, B.topic_id: TopicVerdict.ALIVE}
    assert deleted_channels([A, B], {A: 0, B: 3}, verdicts) == [A]
    with pytest.raises(ParsleyFailClosedError) as info:
        deleted_channels([A, B], {A: 2}, verdicts)
    assert info.value.reason is Reason.CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES
    assert info.value.detail.startswith(f"2 received message(s) from {A} remain undelivered")
    with pytest.raises(ParsleyFailClosedError) as info:
        deleted_channels([A, B], {A: 2}, {**verdicts, B.topic_id: TopicVerdict.RECREATED})
    assert info.value.reason is Reason.CHANNEL_IDENTITY_CHANGED


def test_changed_rows_order_and_tombstones() -> None:
    body = (7, b"k", b"v", (("h", b"\x01"),), ((A, 3),))
    rows = changed_rows(
        stamp_version=True,
        bodies={(B, 4): body},
        delivered_holds=[(B, 2)],
        tables=(([A, B], {A: 5}, sc.fed_key), ([B], {B: 1}, sc.frontier_key),
                ([], {}, sc.past_key)),
        changed_names=["x", "gone"],
        names={"x": A.topic_id},
    )
    assert rows == [
        (sc.VERSION_KEY, sc.VERSION_VALUE),
        (sc.held_key(B, 4), sc.encode_held(sc.HeldMessage(*body))),
        (sc.held_key(B, 2), None),
        (sc.fed_key(A), sc.encode_long(5)),
        (sc.fed_key(B), None),
        (sc.frontier_key(B), sc.encode_long(1)),
        (sc.name_key("x"), sc.encode_binding(A.topic_id)),
        (sc.name_key("gone"), None),
    ]
    empty = changed_rows(stamp_version=False, bodies={}, delivered_holds=(), tables=(),
                         changed_names=(), names={})
    assert empty == []


def test_diagnose_task_labels_by_first_bound_name() -> None:
    verdicts = {A: Held((Blocker(B, 9, 4),)), B: DELIVERABLE}
    diagnosis = diagnose_task(
        held=[(A, [5, 6]), (B, [2])],
        verdict_of_head=lambda ch, q: verdicts[ch],
        names={"orders": A.topic_id, "payments": B.topic_id, "alias": B.topic_id},
        frontier_channels=3, frontier_bytes=60, budget_bytes=1000,
    )
    assert diagnosis.held == (
        HeldChannel("orders", 0, 2, 5, (StatusBlocker("payments", 1, 9, 4),)),
        HeldChannel("payments", 1, 1, 2, ()),
    )
    assert (diagnosis.frontier_channels, diagnosis.frontier_bytes, diagnosis.budget_bytes) == (
        3, 60, 1000)
