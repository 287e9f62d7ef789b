"""Tables for the delivery decision (docs/model.md "Decision rule")."""

from __future__ import annotations

from uuid import UUID

import pytest

from parsley.engine.channel import ChannelId
from parsley.engine.deliverability import DELIVERABLE, Blocker, Held, decide

A = ChannelId(UUID(int=1), 0)
A1 = ChannelId(UUID(int=1), 1)
B = ChannelId(UUID(int=2), 0)
X = ChannelId(UUID(int=9), 3)  # never received

RECEIVED = frozenset({A, A1, B})

# (label, causes, settled, expected blockers as (channel, required, settled))
TABLE = [
    ("no causes", {}, {}, ()),
    ("cause outside the received set is ignored", {X: 10**12}, {}, ()),
    ("settled exactly at the required position", {A: 5}, {A: 5}, ()),
    ("settled above the required position", {A: 5}, {A: 9}, ()),
    ("settled one below blocks", {A: 5}, {A: 4}, ((A, 5, 4),)),
    ("unknown settled blocks, settled None", {A: 0}, {}, ((A, 0, None),)),
    ("settled -1 (head at position 0) blocks position 0", {A: 0}, {A: -1}, ((A, 0, -1),)),
    (
        "every blocker named, in cause order",
        {A: 3, A1: 7, B: 1, X: 4},
        {A: 2, A1: 7, B: 0},
        ((A, 3, 2), (B, 1, 0)),
    ),
    ("fed-to-end settles everything", {B: 2**63 - 2}, {B: 2**63 - 1}, ()),
]


@pytest.mark.parametrize(("label", "causes", "settled", "expected"), TABLE,
                         ids=[row[0] for row in TABLE])
def test_decision_table(label: str, causes: dict[ChannelId, int], settled: dict[ChannelId, int],
                        expected: tuple[tuple[ChannelId, int, int | None], ...]) -> None:
    verdict = decide(causes, RECEIVED, settled)
    if not expected:
        assert verdict is DELIVERABLE, f"{label}: expected deliverable, got {verdict}"
        assert verdict.deliverable
    else:
        assert isinstance(verdict, Held), f"{label}: expected held, got {verdict}"
        assert not verdict.deliverable
        assert verdict.blockers == tuple(Blocker(c, r, s) for c, r, s in expected), label


def test_settled_may_be_a_function_and_causes_pairs() -> None:
    calls: list[ChannelId] = []

    def settled(ch: ChannelId) -> int | None:
        calls.append(ch)
        return {A: 1}.get(ch)

    verdict = decide([(A, 1), (B, 0), (X, 5)], RECEIVED, settled)
    assert verdict == Held((Blocker(B, 0, None),))
    assert X not in calls, "a channel outside the received set must not even be looked up"


def test_decide_is_pure() -> None:
    causes = {A: 3, B: 1}
    settled = {A: 3}
    decide(causes, RECEIVED, settled)
    assert causes == {A: 3, B: 1} and settled == {A: 3}, "decide mutated its inputs"
