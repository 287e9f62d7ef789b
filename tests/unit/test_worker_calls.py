"""Client calls off the main thread, each bounded by the worker (workers/calls.py)."""

from __future__ import annotations

import threading
import time

import pytest

from workers import calls
from workers.calls import CallStalled, call, set_heartbeat
from workers.kafka_errors import ErrorKind, classify, stop_kind
from workers.protocol import StopKind


def test_a_call_returns_what_the_function_returned_and_runs_off_the_main_thread() -> None:
    where: list[str] = []

    def fn(a: int, *, b: int) -> int:
        where.append(threading.current_thread().name)
        return a + b

    assert call("committed", fn, 2, b=3) == 5
    assert where == ["parsley-client-call"]


def test_an_error_of_the_call_is_raised_as_it_was() -> None:
    class Boom(Exception):
        pass

    def fn() -> None:
        raise Boom("x")

    with pytest.raises(Boom, match="x"):
        call("committed", fn)


def test_a_call_past_its_bound_raises_call_stalled_and_the_next_call_gets_a_fresh_thread() -> None:
    release = threading.Event()
    stuck_thread: list[threading.Thread] = []

    def wedged() -> None:
        stuck_thread.append(threading.current_thread())
        release.wait(10)

    began = time.monotonic()
    with pytest.raises(CallStalled) as info:
        call("flush", wedged, bound_s=0.3)
    took = time.monotonic() - began
    assert 0.3 <= took < 2.0
    stalled = info.value
    assert (stalled.call, stalled.bound_s) == ("flush", 0.3)
    assert "flush did not return within 0.3 s" in stalled.detail
    # A transient substrate fault: the worker recovers from it in place.
    assert classify(stalled).kind is ErrorKind.SUBSTRATE_TRANSIENT
    assert stop_kind(stalled) is StopKind.SUBSTRATE
    # The wedged thread is abandoned: the next call does not queue behind it.
    assert call("flush", lambda: threading.current_thread()) is not stuck_thread[0]
    release.set()
    stuck_thread[0].join(5)
    assert not stuck_thread[0].is_alive(), "an abandoned thread ends once its call returns"


@pytest.mark.slow
def test_the_heartbeat_runs_on_the_waiting_thread_while_a_call_waits() -> None:
    beats: list[str] = []
    set_heartbeat(lambda: beats.append(threading.current_thread().name))
    try:
        call("flush", time.sleep, 1.2, bound_s=5)
    finally:
        set_heartbeat(None)
    assert len(beats) >= 2
    assert set(beats) == {threading.current_thread().name}


def test_a_call_stalled_pickles_with_its_call_and_bound() -> None:
    import pickle

    again = pickle.loads(pickle.dumps(CallStalled("commit_transaction", 25.0)))
    assert (again.call, again.bound_s) == ("commit_transaction", 25.0)
    assert calls.WATCHDOG_MARGIN_S > 0


def test_calls_from_two_threads_never_queue_behind_each_other() -> None:
    release = threading.Event()
    results: dict[str, object] = {}

    def wedged() -> None:
        try:
            call("flush", release.wait, 10, bound_s=0.5)
        except CallStalled as exc:
            results["wedged"] = exc

    other = threading.Thread(target=wedged)
    other.start()
    time.sleep(0.1)
    began = time.monotonic()
    results["quick"] = call("committed", lambda: "answered", bound_s=0.4)
    assert time.monotonic() - began < 0.3
    other.join(5)
    release.set()
    assert results["quick"] == "answered"
    assert isinstance(results["wedged"], CallStalled)
