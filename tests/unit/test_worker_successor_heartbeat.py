"""A fenced worker's look for a successor keeps its status coming (workers.verdicts).

The look (``live_successor``) may run for a session timeout and more: it waits for a
candidate member to prove live. The coordinator kills a worker that sends no report for
``stale_task_ms`` (coordinator/config.py), so a look that does not serve the heartbeat
turns a broker's fence into a crash that spends the restart budget: seen in the 30-minute
cluster soak, where a worker fenced by the broker after a coordinator restart went 6 s
without a report. Here the describes answer at once, so only the waits between them can
serve the heartbeat.
"""

from __future__ import annotations

import concurrent.futures
import time
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupState

from workers.calls import set_heartbeat
from workers.verdicts import live_successor


class _Group:
    """An admin client whose group is always Stable with one member of the task's instance id."""

    def __init__(self, instance: str) -> None:
        self.instance = instance
        self.describes = 0

    def describe_consumer_groups(self, groups: list[str], **_: Any) -> dict[str, Any]:
        self.describes += 1
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        future.set_result(SimpleNamespace(state=ConsumerGroupState.STABLE, members=[
            SimpleNamespace(member_id="other", client_id="c", host="/h",
                            group_instance_id=self.instance)]))
        return {groups[0]: future}


@pytest.mark.slow
def test_the_look_for_a_successor_serves_the_heartbeat_while_it_waits() -> None:
    beats: list[float] = []
    group = _Group("app-task-0")
    set_heartbeat(lambda: beats.append(time.monotonic()))
    try:
        started = time.monotonic()
        found = live_successor(group, "app", "app-task-0", "mine",  # type: ignore[arg-type]
                               session_s=2.0, wait_s=1.0)
        took = time.monotonic() - started
    finally:
        set_heartbeat(None)
    assert found == "other"
    assert took >= 5.0, "the candidate is given two session timeouts + 1 s to prove live"
    # Each wait between two describes serves the heartbeat (counted, not timed: a loaded
    # machine may stretch any gap); before, none did, and the whole look was silent.
    assert group.describes >= 4
    assert len(beats) >= group.describes - 1, (len(beats), group.describes)
