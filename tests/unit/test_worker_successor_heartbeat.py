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

from workers.calls import set_heartbeat
from workers.verdicts import live_successor


class _Group:
    """An admin client whose group always holds one member with the task's instance id."""

    def __init__(self, instance: str) -> None:
        self.instance = instance

    def describe_consumer_groups(self, groups: list[str], **_: Any) -> dict[str, Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        future.set_result(SimpleNamespace(members=[SimpleNamespace(
            member_id="other", client_id="c", host="/h", group_instance_id=self.instance)]))
        return {groups[0]: future}


def test_the_look_for_a_successor_serves_the_heartbeat_while_it_waits() -> None:
    beats: list[float] = []
    set_heartbeat(lambda: beats.append(time.monotonic()))
    try:
        started = time.monotonic()
        found = live_successor(_Group("app-task-0"), "app", "app-task-0", "mine",  # type: ignore[arg-type]
                               session_s=2.0, wait_s=1.0)
        took = time.monotonic() - started
    finally:
        set_heartbeat(None)
    assert found == "other"
    assert took >= 3.0, "the candidate is given its session timeout + 1 s to prove live"
    gaps = [b - a for a, b in zip([started, *beats], [*beats, started + took], strict=True)]
    assert max(gaps) < 1.0, f"no heartbeat for {max(gaps):.1f} s of a {took:.1f} s look"
