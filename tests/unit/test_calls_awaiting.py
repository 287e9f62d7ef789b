"""Waits in Python on admin answers, bounded by :func:`workers.calls.awaiting`: they end
with ``CallStalled`` at the bound, not the watchdog's exit (docs/operations.md, "Bounded
client calls")."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from workers import calls, watchdog
from workers.admin import offset_bounds
from workers.calls import WATCHDOG_MARGIN_S, CallStalled, await_future, awaiting, pause
from workers.kafka_errors import ErrorKind


def _never() -> concurrent.futures.Future[Any]:
    return concurrent.futures.Future()


def test_await_future_raises_call_stalled_at_the_deadline_and_waits_no_longer() -> None:
    began = time.monotonic()
    with pytest.raises(CallStalled) as info, awaiting("list_offsets", 0.3):
        await_future(_never(), 30.0)
    took = time.monotonic() - began
    assert 0.3 <= took < 5.0, took
    assert (info.value.call, info.value.bound_s) == ("list_offsets", 0.3)
    assert info.value.kind is ErrorKind.SUBSTRATE_TRANSIENT


def test_an_answer_before_the_deadline_is_returned_and_an_own_timeout_stays_a_timeout() -> None:
    done: concurrent.futures.Future[int] = concurrent.futures.Future()
    done.set_result(7)
    with awaiting("describe_topics", 5.0):
        assert await_future(done, 1.0) == 7
        began = time.monotonic()
        with pytest.raises(concurrent.futures.TimeoutError) as info:
            await_future(_never(), 0.2)  # its own timeout comes first
        assert not isinstance(info.value, CallStalled)
        assert time.monotonic() - began < 5.0


def test_nested_blocks_end_at_the_earliest_deadline_naming_its_call() -> None:
    began = time.monotonic()
    with pytest.raises(CallStalled) as info, awaiting("describe_topics", 0.3), \
            awaiting("list_offsets", 30.0):
        await_future(_never(), 30.0)
    assert info.value.call == "describe_topics" and time.monotonic() - began < 5.0

    with pytest.raises(CallStalled) as info, awaiting("describe_topics", 30.0), \
            awaiting("list_offsets", 0.3):
        await_future(_never(), 30.0)
    assert info.value.call == "list_offsets"

    with awaiting("describe_topics", 30.0):
        outer = calls._caller.deadline
        with awaiting("list_offsets", 0.2):
            assert calls._caller.deadline is not outer
        assert calls._caller.deadline is outer  # the inner block's exit restores it
        with pytest.raises(concurrent.futures.TimeoutError):
            await_future(_never(), 0.4)  # past the inner deadline: it no longer applies


def test_pause_raises_at_a_deadline_passed_and_returns_before_it() -> None:
    with awaiting("list_offsets", 0.4):
        pause(0.05)
        began = time.monotonic()
        with pytest.raises(CallStalled) as info:
            pause(10.0)
        assert time.monotonic() - began < 5.0
        assert info.value.call == "list_offsets"
        with pytest.raises(CallStalled):
            pause(0.0)  # a retry loop's next pause ends it too


def test_the_deadline_is_cleared_after_the_block_also_when_it_raised() -> None:
    with awaiting("list_offsets", 0.1):
        pass
    assert calls._caller.deadline is None
    with pytest.raises(CallStalled), awaiting("list_offsets", 0.1):
        await_future(_never(), 5.0)
    assert calls._caller.deadline is None
    with pytest.raises(KeyError), awaiting("describe_topics", 0.1):
        raise KeyError("x")
    assert calls._caller.deadline is None
    time.sleep(0.15)
    pause(0.01)  # no deadline left behind
    with pytest.raises(concurrent.futures.TimeoutError) as info:
        await_future(_never(), 0.1)
    assert not isinstance(info.value, CallStalled)


def test_the_deadline_is_the_calling_threads_own() -> None:
    seen: list[BaseException] = []

    def other() -> None:
        try:
            await_future(_never(), 0.5)
        except BaseException as exc:  # handed to the test thread
            seen.append(exc)

    with awaiting("list_offsets", 0.1):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(5)
    assert len(seen) == 1 and not isinstance(seen[0], CallStalled)


def test_the_watchdog_is_armed_with_the_margin_over_the_bound() -> None:
    dog = watchdog.Watchdog(lambda a: None, 12, parent_pid=None)  # never started
    watchdog.install(dog)
    try:
        with awaiting("list_offsets"):
            armed = [(a.call, a.bound_s) for a in dog._armed]
        with awaiting("describe_topics", 2.0):
            armed += [(a.call, a.bound_s) for a in dog._armed]
        assert not dog._armed
    finally:
        watchdog.install(None)
    assert armed == [("list_offsets", watchdog.bound_of("list_offsets") + WATCHDOG_MARGIN_S),
                     ("describe_topics", 2.0 + WATCHDOG_MARGIN_S)]


class _SilentAdmin:
    """An AdminClient whose listings are never answered."""

    def __init__(self) -> None:
        self.asked = 0

    def list_offsets(self, request: dict[TopicPartition, Any], **_: Any) -> dict[Any, Any]:
        self.asked += 1
        return {tp: _never() for tp in request}


def test_offset_bounds_ends_with_call_stalled_at_the_bound_and_does_not_retry_it() -> None:
    admin = _SilentAdmin()
    began = time.monotonic()
    with pytest.raises(CallStalled), awaiting("list_offsets", 0.3):
        offset_bounds(admin, TopicPartition("t", 0), "changelog t[0]",  # type: ignore[arg-type]
                      30.0, time.monotonic)
    assert time.monotonic() - began < 5.0
    assert admin.asked == 1
