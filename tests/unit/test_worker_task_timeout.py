"""The task timeout's stall clock and backoff (workers/task_timeout.py), pure."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers.kafka_errors import ErrorKind
from workers.task_timeout import MAX_BACKOFF_S, TaskTimedOut, TaskTimeout


def test_the_first_attempt_is_at_once_then_the_wait_doubles_up_to_its_cap() -> None:
    clock = TaskTimeout(timeout_s=1000.0)
    delays = [clock.failed(float(i), "down") for i in range(8)]
    assert delays == [0.0, 1.0, 2.0, 4.0, 8.0, MAX_BACKOFF_S, MAX_BACKOFF_S, MAX_BACKOFF_S]
    assert clock.attempts == 8


def test_past_the_timeout_the_failure_is_the_stop_naming_the_setting_and_the_cause() -> None:
    clock = TaskTimeout(timeout_s=300.0)
    clock.failed(10.0, "first")
    clock.failed(100.0, "second")
    with pytest.raises(TaskTimedOut) as info:
        clock.failed(310.5, "send_offsets_to_transaction did not return within 25 s")
    detail = info.value.detail
    assert info.value.kind is ErrorKind.SUBSTRATE_TRANSIENT
    assert detail.startswith("no progress for 300.5 s (task_timeout_ms=300000)")
    assert "2 recovery attempt(s)" in detail
    assert detail.endswith("send_offsets_to_transaction did not return within 25 s")


def test_progress_stops_the_clock_and_the_backoff_starts_again() -> None:
    clock = TaskTimeout(timeout_s=60.0)
    for t in (0.0, 1.0, 2.0):
        clock.failed(t, "down")
    assert clock.stalled
    assert clock.status(12.34) == {"stalled_s": 12.3, "attempts": 3, "timeout_s": 60.0,
                                   "cause": "down"}
    clock.recovered()
    assert clock.stalled, "a completed recovery is not yet progress"
    clock.progressed()
    assert not clock.stalled and clock.status(20.0) is None
    assert clock.failed(100.0, "again") == 0.0
    assert clock.recoveries == 1
    clock.failed(159.0, "again")  # 59 s after the new first failure: still within
    with pytest.raises(TaskTimedOut):
        clock.failed(160.0, "again")


@given(st.lists(st.floats(min_value=0.0, max_value=50.0), min_size=1, max_size=40),
       st.floats(min_value=1.0, max_value=400.0))
def test_a_wait_never_reaches_past_the_timeout(gaps: list[float], timeout_s: float) -> None:
    clock = TaskTimeout(timeout_s=timeout_s)
    now = 0.0
    for gap in gaps:
        now += gap
        try:
            delay = clock.failed(now, "x")
        except TaskTimedOut:
            assert clock.since is not None and now - clock.since >= timeout_s
            return
        assert delay >= 0.0
        assert clock.since is not None and now + delay <= clock.since + timeout_s + 1e-9


def test_the_second_attempt_without_progress_renews_the_consumer_and_progress_resets_it() -> None:
    clock = TaskTimeout(timeout_s=300.0)
    assert not clock.renews_consumer
    clock.failed(0.0, "a commit's delivery timed out")
    assert not clock.renews_consumer  # the first attempt keeps the group member
    clock.recovered()
    assert not clock.renews_consumer  # a completed recovery is not progress
    clock.failed(10.0, "reading the group's committed offsets: _TIMED_OUT")
    assert clock.renews_consumer
    clock.failed(40.0, "again")
    assert clock.renews_consumer
    clock.progressed()
    clock.failed(100.0, "a new stall")
    assert not clock.renews_consumer
