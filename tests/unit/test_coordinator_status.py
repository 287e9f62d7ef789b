"""The aggregated process state and the task entry parsers (no broker)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.status import ProcessState, process_state

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
