"""``workers.fetched.split_errors``: the reference and the native twin split a consumed
batch the same way (same records, same order, no copy when nothing failed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message
from hypothesis import given, settings
from hypothesis import strategies as st

from parsley.native import BUILT
from workers.fetched import split_errors_py

SPLITTERS: list[tuple[str, Callable[[list[Any]], tuple[list[Any], list[Any]]]]] = [
    ("python", split_errors_py)]
if BUILT is not None:
    SPLITTERS.append(("native", BUILT.split_errors))


def _record(i: int, failed: bool) -> Message:
    if failed:
        return Message(topic="t", partition=0, error=KafkaError(KafkaError._PARTITION_EOF))
    return Message(topic="t", partition=0, offset=i, value=b"v%d" % i)


@pytest.mark.parametrize("name, split", SPLITTERS, ids=[n for n, _ in SPLITTERS])
def test_no_error_hands_the_batch_back_as_it_is(name: str, split: Any) -> None:
    batch = [_record(i, False) for i in range(5)]
    good, errors = split(batch)
    assert good is batch and errors == []


@pytest.mark.parametrize("name, split", SPLITTERS, ids=[n for n, _ in SPLITTERS])
def test_a_value_without_error_method_raises(name: str, split: Any) -> None:
    with pytest.raises(AttributeError):
        split([_record(0, False), object()])


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), max_size=40))
def test_both_split_every_batch_alike(failed: list[bool]) -> None:
    batch = [_record(i, f) for i, f in enumerate(failed)]
    expected_good = [m for m in batch if m.error() is None]
    expected_errors = [m for m in batch if m.error() is not None]
    for _, split in SPLITTERS:
        good, errors = split(batch)
        assert [id(m) for m in good] == [id(m) for m in expected_good]
        assert [id(m) for m in errors] == [id(m) for m in expected_errors]


class _FailedAnyway(Message):
    """A ``Message`` subclass whose own ``error()`` must be the one called."""

    def error(self) -> KafkaError:
        return KafkaError(KafkaError._PARTITION_EOF)


@pytest.mark.parametrize("name, split", SPLITTERS, ids=[n for n, _ in SPLITTERS])
def test_a_subclass_override_of_error_is_called(name: str, split: Any) -> None:
    # The native twin calls Message.error through its descriptor; a subclass is called by
    # name, so its override decides.
    batch = [_record(0, False), _FailedAnyway(topic="t", partition=0, offset=1),
             _record(2, False), _record(3, True)]
    good, errors = split(batch)
    assert good == [batch[0], batch[2]] and errors == [batch[1], batch[3]]
