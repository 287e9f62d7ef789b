"""The aggregated process state and the task entry parsers (no broker)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.control.status import (
    ProcessState,
    TaskStatus,
    process_state,
    task_status_from_report,
)

STATES = st.sampled_from([None, "STARTING", "RESTORING", "RUNNING", "REBALANCING"])


def test_a_task_waiting_for_its_respawn_keeps_the_process_out_of_running() -> None:
    assert process_state(2, {0: "RUNNING", 1: "RUNNING"}) is ProcessState.RUNNING
    # task 1 crashed: its entry is gone until the respawned worker reports
    assert process_state(2, {0: "RUNNING"}) is ProcessState.STARTING
    assert process_state(2, {}) is ProcessState.STARTING
    assert process_state(2, {0: "RUNNING", 1: None}) is ProcessState.STARTING
    assert process_state(1, {0: "RESTORING"}) is ProcessState.REBALANCING
    assert process_state(1, {0: "RUNNING", 7: "STARTING"}) is ProcessState.RUNNING


@given(st.integers(min_value=1, max_value=6), st.dictionaries(
    st.integers(min_value=0, max_value=7), STATES))
def test_running_only_when_every_task_reports_running(width: int, states: dict) -> None:  # type: ignore[type-arg]
    got = process_state(width, states)
    every = [states.get(i) for i in range(width)]
    assert (got is ProcessState.RUNNING) == all(s == "RUNNING" for s in every)
    if any(s is None or s == "STARTING" for s in every):
        assert got is ProcessState.STARTING
    assert got is not ProcessState.STOPPED


REPORT = {"kind": "status", "process": "p", "task": 1, "pid": 4321, "sent_ms": 0,
          "state": "RUNNING",
          "held": [{"topic": "b", "partition": 1, "count": 2, "head": 7,
                    "blockers": [{"topic": "a", "partition": 1, "required": 3,
                                  "settled": None}]}],
          "held_total": 2, "frontier_channels": 2, "frontier_bytes": 54,
          "budget_bytes": 262144, "lag": 5,
          "restore": {"records": 3, "position": 3, "end": 3, "done": True},
          "delivered": 9, "commits": 4, "commit_latency_ms": 1.5, "rss_bytes": 1,
          "cpu_percent": 0.5}


def test_a_report_becomes_the_entry_that_its_json_round_trips() -> None:
    entry = task_status_from_report(REPORT, age_ms=700, status_interval_ms=200,
                                    rss_bytes=30_000_000)
    assert entry.task == 1 and entry.pid == 4321 and entry.lag == 5
    assert entry.held_count == 2 and entry.held[0].blockers[0].settled is None
    assert entry.rss_bytes == 30_000_000, "the coordinator's measure wins"
    assert entry.cpu_percent == 0.5, "else the worker's own figure"
    assert entry.updated_ms_ago == 700 and entry.stale, "700 ms > 3 x 200 ms"
    assert TaskStatus.from_json(entry.to_json()) == entry
    fresh = task_status_from_report(REPORT, age_ms=-5, status_interval_ms=200)
    assert fresh.updated_ms_ago == 0 and not fresh.stale and fresh.rss_bytes == 1


def test_a_malformed_report_raises_what_the_supervisor_logs() -> None:
    for bad in ({**REPORT, "held": [{"topic": "b"}]}, {**REPORT, "lag": "x"},
                {k: v for k, v in REPORT.items() if k != "pid"}):
        with pytest.raises((KeyError, TypeError, ValueError)):
            task_status_from_report(bad, age_ms=0, status_interval_ms=200)


def test_task_and_process_states_are_str_enums_that_keep_the_json_strings() -> None:
    from coordinator.control.status import ProcessStatus, TaskState

    entry = task_status_from_report(REPORT, age_ms=0, status_interval_ms=200)
    assert entry.state is TaskState.RUNNING and entry.to_json()["state"] == "RUNNING"
    proc = ProcessStatus(ProcessState.RUNNING, None, None, (entry,))
    assert isinstance(proc.state, str) and isinstance(entry.state, str)
    assert proc.to_json()["state"] == "RUNNING" and entry.state == "RUNNING"
    assert ProcessStatus.from_json(proc.to_json()).tasks[0].state is TaskState.RUNNING
    with pytest.raises(ValueError):
        TaskStatus.from_json({**entry.to_json(), "state": "DANCING"})


def test_caught_up_is_running_fresh_lag_zero_and_nothing_held() -> None:
    from dataclasses import replace

    from coordinator.control.status import ProcessStatus, TaskState

    done = replace(task_status_from_report(REPORT, age_ms=0, status_interval_ms=200),
                   held=(), lag=0)
    assert done.caught_up and done.to_json()["caught_up"] is True
    for not_yet in (replace(done, lag=None), replace(done, lag=1), replace(done, stale=True),
                    replace(done, state=TaskState.RESTORING),
                    task_status_from_report(REPORT, age_ms=0, status_interval_ms=200)):
        assert not not_yet.caught_up, not_yet
    behind = replace(done, task=2, lag=4)
    assert ProcessStatus(ProcessState.RUNNING, None, None, (done,)).caught_up
    assert not ProcessStatus(ProcessState.RUNNING, None, None, (done, behind)).caught_up
    assert not ProcessStatus(ProcessState.STARTING, None, None, (done,)).caught_up
    assert not ProcessStatus(ProcessState.RUNNING, None, None, ()).caught_up
    assert ProcessStatus(ProcessState.RUNNING, None, None, (done,)).to_json()["caught_up"]
