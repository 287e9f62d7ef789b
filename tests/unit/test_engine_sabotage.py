"""Each sabotage mode really is broken, in the way its name says (and only then).

The simulator's meta-tests prove the oracle catches them; these pin that each
fault shows on a minimal feed where the sound engine behaves correctly.
"""

from __future__ import annotations

from uuid import UUID

import pytest

from parsley.engine.channel import ChannelId, ReceivedMessage
from parsley.engine.engine import ProcessEngine
from parsley.engine.sabotage import Sabotage, engine_class
from parsley.engine.store import InMemoryOrderingStore
from parsley.wire import encode_causes

pytestmark = pytest.mark.usefixtures("engine_impl")

A = ChannelId(UUID(int=0xA), 0)
B = ChannelId(UUID(int=0xB), 0)
C = ChannelId(UUID(int=0xC), 0)


def msg(ch: ChannelId, pos: int, causes: dict[ChannelId, int]) -> ReceivedMessage:
    return ReceivedMessage(ch, pos, 0, None, b"v", (("parsley.causes", encode_causes(causes)),))


def drain(e: ProcessEngine) -> list[tuple[ChannelId, int]]:
    out = []
    while (d := e.deliver_next()) is not None:
        out.append((d.channel, d.position))
    return out


def run(mode: Sabotage | None) -> tuple[list[tuple[ChannelId, int]], list[tuple[ChannelId, int]]]:
    """Hold C@0 on two causes, restart, then settle both causes."""
    cls = engine_class(mode)
    e = cls(InMemoryOrderingStore(), received=[A, B, C])
    e.start({})
    e.receive(msg(C, 0, {A: 0, B: 0}))
    first = drain(e)
    log = list(e.take_deltas())
    e2 = cls(InMemoryOrderingStore.from_records(log), received=[A, B, C])
    e2.start({C: 1})
    e2.receive(msg(B, 0, {}))
    second = drain(e2)
    e2.receive(msg(A, 0, {}))
    second += drain(e2)
    return first, second


def test_sound_engine_holds_then_delivers_after_both_causes() -> None:
    assert engine_class(None) is ProcessEngine
    assert run(None) == ([], [(B, 0), (A, 0), (C, 0)])


def test_eager_delivery_ignores_causes() -> None:
    first, _ = run(Sabotage.EAGER_DELIVERY)
    assert first == [(C, 0)], "the eager engine must deliver C@0 before its causes"


def test_ignore_one_cause_delivers_after_one_of_two_causes() -> None:
    _, second = run(Sabotage.IGNORE_ONE_CAUSE)
    assert second == [(B, 0), (C, 0), (A, 0)], "C@0 must overtake its cause A@0"


def test_drop_held_on_restart_loses_the_held_message() -> None:
    first, second = run(Sabotage.DROP_HELD_ON_RESTART)
    assert first == [] and second == [(B, 0), (A, 0)], "C@0 must be lost across the restart"


def test_every_mode_has_a_distinct_class() -> None:
    classes = {engine_class(m) for m in Sabotage}
    assert len(classes) == len(Sabotage) and ProcessEngine not in classes
    with pytest.raises(ValueError):
        engine_class("nope")  # type: ignore[arg-type]
