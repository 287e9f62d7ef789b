"""Which written topics the start warns of (coordinator.bootstrap.replication, pure)."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.bootstrap.replication import unreplicated, warn_unreplicated


def test_one_replica_on_several_brokers_is_named_and_nothing_else() -> None:
    written = {"a": 1, "b": 3, "c": 2, "d": 0}
    assert unreplicated(written, 3) == ["a"]
    assert unreplicated(written, 1) == [], "a single broker has no other kind"


@given(st.dictionaries(st.text(min_size=1, max_size=3), st.integers(0, 5), max_size=6),
       st.integers(1, 9))
def test_named_exactly_when_one_replica_and_two_brokers_or_more(
        written: dict[str, int], brokers: int) -> None:
    expected = sorted(n for n, r in written.items() if r == 1 and brokers >= 2)
    assert unreplicated(written, brokers) == expected


class _Unreachable:
    def describe_cluster(self, **_: object) -> object:
        raise RuntimeError("no broker answered")


def test_a_failed_broker_count_never_stops_the_start(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="parsley.bootstrap")
    assert warn_unreplicated(_Unreachable(), "app", {"out": 1}) == []  # type: ignore[arg-type]
    assert "not checked" in caplog.text and "no broker answered" in caplog.text
