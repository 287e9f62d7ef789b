"""Pruning the frontier of deleted upstream topics (docs/model.md, "Pruning").

Causes on topics a task does not receive are carried in its frontier. The
identity check can only confirm an id dead by its name, so the engine learns the
names of those ids while they are alive (:meth:`ProcessEngine.learn_names`, as
Java's ``AdminTopicIdentitySource`` learns them from its by-id describe); once
they are confirmed deleted, their entries and their names leave the state, and
later headers no longer carry them.
"""

from __future__ import annotations

from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsley.engine.channel import ChannelId, ReceivedMessage
from parsley.engine.engine import ProcessEngine, TopicVerdict
from parsley.engine.store import InMemoryOrderingStore
from parsley.wire import decode_causes, encode_causes

pytestmark = pytest.mark.usefixtures("engine_impl")

R = ChannelId(UUID(int=0x10), 0)
UPSTREAM = [UUID(int=0x100 + i) for i in range(6)]


def restart(records: list[tuple[bytes, bytes | None]]) -> ProcessEngine:
    e = ProcessEngine(InMemoryOrderingStore.from_records(records), received=[R])
    e.bind_names({"r": R.topic_id})
    return e


def test_learned_names_let_deleted_upstream_topics_be_pruned_from_later_headers() -> None:
    log: list[tuple[bytes, bytes | None]] = []
    e = restart(log)
    e.start({})
    causes = {ChannelId(t, p): 3 for t in UPSTREAM[:4] for p in (0, 1)}
    e.receive(ReceivedMessage(R, 0, 0, None, b"x", (("parsley.causes", encode_causes(causes)),)))
    assert e.deliver_next() is not None
    log += e.take_deltas()

    # Seen alive at a restart: the ids have no names yet, so no verdict could ever prune them.
    e = restart(log)
    assert e.unnamed_topic_ids() == frozenset(UPSTREAM[:4])
    e.learn_names({f"u{i}": t for i, t in enumerate(UPSTREAM[:4])} | {"r": UUID(int=0x99)})
    assert e.unnamed_topic_ids() == frozenset()
    assert e.names()["r"] == R.topic_id, "a bound name is never relearned"
    e.start({R: 1})
    log += e.take_deltas()

    # Deleted, then a restart: the names persisted, the identity check judges them dead.
    e = restart(log)
    assert {f"u{i}" for i in range(4)} <= set(e.names())
    e.apply_identity({t: TopicVerdict.DELETED for t in UPSTREAM[:4]})
    e.start({R: 1})
    e.receive(ReceivedMessage(R, 1, 0, None, b"y"))
    assert e.deliver_next() is not None
    assert decode_causes(e.causes_header()) == {R: 1}, "later headers carry none of the four"
    assert set(e.names()) == {"r"}
    log += e.take_deltas()
    assert restart(log).frontier() == {R: 1} and set(restart(log).names()) == {"r"}


@settings(max_examples=150, deadline=None)
@given(
    carried=st.sets(st.sampled_from(UPSTREAM), min_size=1),
    learned=st.sets(st.sampled_from(UPSTREAM)),
    deleted=st.sets(st.sampled_from(UPSTREAM)),
)
def test_property_only_named_and_confirmed_dead_ids_are_pruned(
        carried: set[UUID], learned: set[UUID], deleted: set[UUID]) -> None:
    e = restart([])
    e.start({})
    causes = {ChannelId(t, 0): 1 for t in carried}
    e.receive(ReceivedMessage(R, 0, 0, None, b"x", (("parsley.causes", encode_causes(causes)),)))
    e.deliver_next()
    e.learn_names({f"n{t.int}": t for t in learned})
    # The identity check judges only ids with a name (facts: an unnamed id lingers).
    named = set(e.names().values())
    e.apply_identity({t: TopicVerdict.DELETED for t in deleted if t in named})
    kept = {ch.topic_id for ch in e.frontier()} - {R.topic_id}
    assert kept == carried - (deleted & learned)
    assert not set(e.names().values()) & (deleted & learned)
    assert e.frontier_bytes() == len(e.causes_header())
