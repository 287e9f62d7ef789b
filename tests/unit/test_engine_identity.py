"""ProcessEngine: name bindings, identity verdicts, pruning, diagnosis, frontier size.

Sources: docs/model.md, "Pruning" (what the engine does with the verdicts), the detail
shapes of docs/runbooks.md, and docs/failing-closed.md, "Diagnosis".
"""

from __future__ import annotations

from uuid import UUID

import pytest

from parsley.engine import state_codec as sc
from parsley.engine.channel import (
    FED_TO_END,
    ChannelId,
    ReceivedMessage,
    kafka_topic_id,
)
from parsley.engine.engine import ProcessEngine, TopicVerdict
from parsley.engine.store import InMemoryOrderingStore
from parsley.refusals import ParsleyFailClosedError, Reason
from parsley.status import Blocker, HeldChannel, TaskDiagnosis
from parsley.wire import encode_causes, encoded_size
from tests.seed_shapes import assert_seed_shape

pytestmark = pytest.mark.usefixtures("engine_impl")

TA, TB, TC, TX, TY = (UUID(int=v) for v in (0xA, 0xB, 0xC, 0xEE, 0xFF))
A = ChannelId(TA, 0)
B = ChannelId(TB, 0)
C = ChannelId(TC, 0)
X = ChannelId(TX, 7)
X2 = ChannelId(TX, 8)
Y = ChannelId(TY, 0)


def msg(ch: ChannelId, pos: int, causes: dict[ChannelId, int] | None = None) -> ReceivedMessage:
    headers = () if causes is None else (("parsley.causes", encode_causes(causes)),)
    return ReceivedMessage(ch, pos, 0, None, b"v", headers)


def engine(store: InMemoryOrderingStore | None = None, start: bool = True) -> ProcessEngine:
    e = ProcessEngine(store if store is not None else InMemoryOrderingStore(), received=[A, B, C])
    if start:
        e.start({})
    return e


def drain(e: ProcessEngine) -> list[tuple[ChannelId, int]]:
    out = []
    while (d := e.deliver_next()) is not None:
        out.append((d.channel, d.position))
    return out


# ------------------------------------------------------------------ names


def test_bind_names_persists_and_restores() -> None:
    store = InMemoryOrderingStore()
    e = engine(store)
    e.bind_names({"a": TA, "b": TB})
    rows = dict(e.take_deltas())
    assert rows[sc.name_key("a")] == sc.encode_binding(TA)
    e.bind_names({"a": TA})
    assert sc.name_key("a") not in dict(e.take_deltas()), "an unchanged binding writes nothing"
    e2 = engine(InMemoryOrderingStore(store.items()), start=False)
    assert dict(e2.names()) == {"a": TA, "b": TB}


def test_bind_names_refuses_a_changed_identity_and_binds_nothing() -> None:
    store = InMemoryOrderingStore()
    e = engine(store)
    e.bind_names({"a": TA})
    e.take_deltas()
    e2 = engine(InMemoryOrderingStore(store.items()), start=False)
    with pytest.raises(ParsleyFailClosedError) as info:
        e2.bind_names({"c": TC, "a": TB})
    assert info.value.reason is Reason.CHANNEL_IDENTITY_CHANGED
    assert info.value.detail.startswith(
        f"topic 'a' now resolves to {B} but this process's state was built against a "
        f"previous incarnation (topic id {kafka_topic_id(TB)} now, topic id "
        f"{kafka_topic_id(TA)} then)")
    assert_seed_shape(Reason.CHANNEL_IDENTITY_CHANGED, info.value.detail)
    assert "c" not in e2.names(), "a refused binding call binds nothing"


def test_known_topic_ids_cover_received_frontier_and_past() -> None:
    e = engine()
    e.receive(msg(A, 0, {X: 1}))
    drain(e)
    assert e.known_topic_ids() == frozenset({TA, TB, TC, TX})


# ------------------------------------------------------------------ identity


def test_recreated_received_topic_refuses() -> None:
    e = engine()
    with pytest.raises(ParsleyFailClosedError) as info:
        e.apply_identity({TB: TopicVerdict.RECREATED})
    assert info.value.reason is Reason.CHANNEL_IDENTITY_CHANGED
    assert info.value.detail.startswith(
        f"the topic of received channel {B} was deleted and recreated under the same name "
        f"while this process ran (topic id {kafka_topic_id(TB)} partition 0, a topic whose "
        "name this task does not know); ")
    assert_seed_shape(Reason.CHANNEL_IDENTITY_CHANGED, info.value.detail)


def test_deleted_received_topic_with_held_messages_refuses() -> None:
    e = engine()
    e.receive(msg(B, 0, {A: 0}))
    e.receive(msg(B, 1, {A: 0}))
    with pytest.raises(ParsleyFailClosedError) as info:
        e.apply_identity({TB: TopicVerdict.DELETED})
    assert info.value.reason is Reason.CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES
    assert info.value.detail.startswith(
        f"2 received message(s) from {B} remain undelivered but the channel's topic no "
        "longer exists; their place in causal order can no longer be preserved. The channel "
        f"was topic id {kafka_topic_id(TB)} partition 0, a topic whose name this task does "
        "not know. ")
    assert_seed_shape(Reason.CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES, info.value.detail)
    assert e.covered(B) == 1, "a refused report changes nothing"


def test_deleted_received_topic_with_nothing_held_is_fed_to_end_and_releases_waiters() -> None:
    e = engine()
    e.receive(msg(C, 0, {B: 40}))
    assert drain(e) == []
    e.apply_identity({TB: TopicVerdict.DELETED})
    assert e.covered(B) == FED_TO_END and e.settled(B) == FED_TO_END
    assert drain(e) == [(C, 0)], "every cause on a deleted channel is settled"
    rows = dict(e.take_deltas())
    assert rows[sc.fed_key(B)] == sc.encode_long(FED_TO_END), "the sentinel is stored verbatim"


def test_dead_and_recreated_topics_are_pruned_from_frontier_and_past_only() -> None:
    e = engine()
    e.take_deltas()
    e.receive(msg(A, 0, {X: 3, X2: 4, Y: 5, B: 9}))
    drain(e)
    e.receive(msg(B, 9))
    drain(e)
    before = e.frontier_bytes()
    e.take_deltas()
    e.apply_identity({TX: TopicVerdict.DELETED, TY: TopicVerdict.RECREATED,
                      TB: TopicVerdict.ALIVE})
    assert dict(e.frontier()) == {A: 0, B: 9}
    assert dict(e.delivered_past()) == {B: 9}
    assert e.frontier_bytes() == encoded_size(dict(e.frontier())) < before
    assert e.causes_header() == encode_causes({A: 0, B: 9})
    rows = dict(e.take_deltas())
    for ch in (X, X2, Y):
        assert rows[sc.frontier_key(ch)] is None and rows[sc.past_key(ch)] is None
    assert sc.fed_key(B) not in rows, "an ALIVE verdict changes nothing"
    # A pruned channel named again is merged again.
    e.receive(msg(A, 1, {X: 3}))
    assert e.frontier()[X] == 3


def test_identity_before_start_feeds_into_the_floor() -> None:
    e = engine(start=False)
    e.apply_identity({TC: TopicVerdict.DELETED})
    e.start({})
    assert e.session_floor(C) == FED_TO_END
    with pytest.raises(ParsleyFailClosedError) as info:
        e.receive(msg(C, 0))
    assert info.value.reason is Reason.OUT_OF_ORDER_FEED


# ------------------------------------------------------------------ diagnosis


def test_diagnose_names_count_head_and_every_blocker() -> None:
    e = engine()
    e.bind_names({"a": TA, "b": TB})
    e.receive(msg(A, 3, {A: 0}))  # its own channel below itself: settled(A) = 2
    drain(e)
    e.receive(msg(B, 5, {A: 9, C: 0, X: 1}))
    e.receive(msg(B, 6))
    d = e.diagnose()
    assert d == TaskDiagnosis(
        held=(HeldChannel("b", 0, 2, 5, (Blocker("a", 0, 9, 3),
                                         Blocker(str(TC), 0, 0, None))),),
        frontier_channels=3,
        frontier_bytes=encoded_size({A: 9, C: 0, X: 1}),
        budget_bytes=262_144,
    )
    assert d.to_json() == {
        "held": [{"topic": "b", "partition": 0, "count": 2, "head": 5, "blockers": [
            {"topic": "a", "partition": 0, "required": 9, "settled": 3,
             "class": None, "last_stable": None, "end": None},  # classed by the worker
            {"topic": str(TC), "partition": 0, "required": 0, "settled": None,
             "class": None, "last_stable": None, "end": None}]}],
        "frontier_channels": 3,
        "frontier_bytes": d.frontier_bytes,
        "budget_bytes": 262_144,
        "cross_partition_causes": 0,
        "waited": 0,  # no delivery pass has decided B@5 yet
    }


def test_diagnose_a_deliverable_head_has_no_blockers() -> None:
    e = engine()
    e.receive(msg(A, 0))
    d = e.diagnose()
    assert d.held == (HeldChannel(str(TA), 0, 1, 0, ()),)
    assert d.held[0].deliverable
    drain(e)
    assert e.diagnose().held == ()


def test_diagnose_reads_a_persisted_head_from_the_store() -> None:
    store = InMemoryOrderingStore()
    e = engine(store)
    e.receive(msg(B, 0, {A: 2}))
    e.take_deltas()
    e2 = engine(InMemoryOrderingStore(store.items()))
    (held,) = e2.diagnose().held
    assert held.blockers == (Blocker(str(TA), 0, 2, None),)


# ------------------------------------------------------------------ frontier size


def test_frontier_bytes_tracks_the_encoding_through_growth_and_pruning() -> None:
    e = ProcessEngine(InMemoryOrderingStore(), received=[A])
    e.start({})
    assert e.frontier_bytes() == 2 == len(e.causes_header())
    topics = [UUID(int=0x100 + t) for t in range(3)]
    pos = 0
    for t, topic in enumerate(topics):
        for p in (0, 1, 127, 128, 300, 20000, 2**31 - 1)[: 3 + 2 * t]:
            e.receive(msg(A, pos, {ChannelId(topic, p): 5}))
            pos += 1
            assert e.frontier_bytes() == len(e.causes_header()) == encoded_size(e.frontier())
    e.apply_identity({topics[1]: TopicVerdict.DELETED})
    assert e.frontier_bytes() == len(e.causes_header()) == encoded_size(e.frontier())


def test_identical_header_bytes_merge_again_after_a_prune() -> None:
    # The engine skips re-merging header bytes it merged before (the frontier only grows
    # between prunes) and re-merging the same delivered causes into the past; a prune
    # must reset both shortcuts.
    e = engine()
    header = (("parsley.causes", encode_causes({X: 3, A: 0})),)
    e.receive(ReceivedMessage(B, 0, 0, None, None, header))
    e.receive(ReceivedMessage(A, 0, 0, None, None, ()))
    drain(e)
    e.apply_identity({TX: TopicVerdict.DELETED})
    assert X not in e.frontier() and X not in e.delivered_past()
    e.receive(ReceivedMessage(B, 1, 0, None, None, header))
    assert drain(e) == [(B, 1)]
    assert e.frontier()[X] == 3, "the same bytes must merge again after a prune"
    assert e.delivered_past()[X] == 3, "the same causes must reach the past again"


def test_header_value_may_be_a_bytearray() -> None:
    e = engine()
    raw = bytearray(encode_causes({A: 0}))
    e.receive(ReceivedMessage(B, 0, 0, None, None, (("parsley.causes", raw),)))  # type: ignore[arg-type]
    e.receive(ReceivedMessage(A, 0, 0, None, None, ()))
    assert drain(e) == [(A, 0), (B, 0)]


def test_budget_warning_without_a_callback_is_silent() -> None:
    e = ProcessEngine(InMemoryOrderingStore(), received=[A], budget_bytes=30)
    e.start({})
    e.receive(msg(A, 0, {X: 1}))  # 28 of 30 bytes: past 80%, nobody to tell
    assert e.frontier_bytes() == 28
