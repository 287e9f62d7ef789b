"""ProcessEngine's batch calls (``feed_records``, ``deliver_batch``) against the one-record
calls they stand for: same deliveries, same headers, same deltas (docs/performance.md,
"Engine")."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from confluent_kafka import Message

from parsley.engine.channel import ChannelId, ReceivedMessage
from parsley.engine.engine import ProcessEngine
from parsley.engine.feed import FeedOutcome
from parsley.engine.store import InMemoryOrderingStore
from parsley.refusals import ParsleyFailClosedError, Reason
from parsley.wire import encode_causes

pytestmark = pytest.mark.usefixtures("engine_impl")

A = ChannelId(UUID(int=0xA), 0)
B = ChannelId(UUID(int=0xB), 0)
NAMES = {"a": A, "b": B}
TOPIC_OF = {A: "a", B: "b"}


class Record:
    """The accessor methods of ``confluent_kafka.Message`` that a feed reads."""

    def __init__(self, topic: str, offset: int, headers: list[tuple[str, bytes]] | None) -> None:
        self._t, self._o, self._h = topic, offset, headers

    def topic(self) -> str:
        return self._t

    def offset(self) -> int:
        return self._o

    def timestamp(self) -> tuple[int, int]:
        return (1, 1000 + self._o)

    def key(self) -> bytes:
        return b"k%d" % self._o

    def value(self) -> bytes:
        return b"v%d" % self._o

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._h


def records() -> list[Record]:
    # b@i waits for a@i; a arrives after b, so every b is held, then released.
    out = []
    for i in range(20):
        out.append(Record("b", i, [("parsley.causes", encode_causes({A: i})), ("app", b"x")]))
    for i in range(20):
        out.append(Record("a", i, None))
    return out


def engine() -> ProcessEngine:
    e = ProcessEngine(InMemoryOrderingStore(), received=(A, B))
    e.start({})
    return e


def test_feed_records_and_deliver_batch_match_receive_and_deliver_next() -> None:
    one, many = engine(), engine()
    outcomes = []
    for r in records():
        h = r.headers()
        outcomes.append(one.receive(ReceivedMessage(
            NAMES[r.topic()], r.offset(), r.timestamp()[1], r.key(), r.value(),
            tuple(h) if h else ())))
    expected = []
    while (d := one.deliver_next()) is not None:
        expected.append((d.channel, d.position, d.timestamp_ms, d.key, d.value, d.headers,
                         one.causes_header()))

    fed, duplicates, last = many.feed_records(records(), NAMES)
    assert (fed, duplicates) == (40, outcomes.count(FeedOutcome.DUPLICATE_DROPPED))
    assert last == {"b": 19, "a": 19}
    got = []
    while batch := many.deliver_batch(7):
        assert len(batch) <= 7
        got.extend(batch)
    assert got == expected
    assert len(got) == 40
    assert many.take_deltas() == one.take_deltas()



class ShiftedValue(Message):
    """A ``Message`` subclass overriding one accessor: it must be called, not ``Message``'s."""

    def value(self) -> bytes:
        return b"shifted"


def test_feed_records_reads_real_messages_and_calls_a_subclass_override() -> None:
    # The native engine calls confluent-kafka's own Message accessors through their
    # descriptors; a subclass's override (or a fake) must still be what is called.
    def message(cls: type[Message], r: Record) -> Message:
        return cls(topic=r.topic(), partition=0, offset=r.offset(), key=r.key(),
                   value=r.value(), headers=r.headers(), timestamp=r.timestamp())

    kinds = (Message, ShiftedValue, None)  # None: the plain fake itself
    mixed: list[Any] = [r if (k := kinds[i % 3]) is None else message(k, r)
                        for i, r in enumerate(records())]
    fed = engine()
    assert fed.feed_records(mixed, NAMES)[:2] == (40, 0)
    got = []
    while batch := fed.deliver_batch(64):
        got.extend(batch)
    by_position = {(ch, q): value for ch, q, _, _, value, _, _ in got}
    for i, r in enumerate(records()):
        want = b"shifted" if i % 3 == 1 else r.value()
        assert by_position[(NAMES[r.topic()], r.offset())] == want

def test_feed_records_raises_the_first_refusal() -> None:
    e = engine()
    bad = [Record("a", 0, None), Record("a", 1, [("parsley.causes", b"\xff")])]
    with pytest.raises(ParsleyFailClosedError) as info:
        e.feed_records(bad, NAMES)
    assert info.value.reason is Reason.UNDECODABLE_METADATA
