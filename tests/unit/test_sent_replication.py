"""Which sent topics the start warns of (coordinator.bootstrap.replication, pure)."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from coordinator.bootstrap.replication import unreplicated
from coordinator.bootstrap.resolve import ResolvedTopic


def _topic(name: str, replicas: int) -> ResolvedTopic:
    return ResolvedTopic(name, uuid.uuid4(), 1, replicas)


def test_one_replica_on_several_brokers_is_named_and_nothing_else() -> None:
    sent = [_topic("a", 1), _topic("b", 3), _topic("c", 2), _topic("d", 0)]
    assert unreplicated(sent, 3) == ["a"]
    assert unreplicated(sent, 1) == [], "a single broker has no other kind"


@given(st.lists(st.integers(0, 5), max_size=6), st.integers(1, 9))
def test_named_exactly_when_one_replica_and_two_brokers_or_more(
        counts: list[int], brokers: int) -> None:
    sent = [_topic(f"t{i}", n) for i, n in enumerate(counts)]
    expected = sorted(f"t{i}" for i, n in enumerate(counts) if n == 1 and brokers >= 2)
    assert unreplicated(sent, brokers) == expected
