"""A fenced static member's consumer is retired before the successor check looks.

``TaskClients.successor_member(drop_consumer=True)`` (what ``Worker`` passes when
``member_fenced``) retires the consumer first, so that nothing of this worker keeps a member
in the group while it looks, and the look begins once that consumer has closed (or after
one session timeout): a consumer fenced for a stale member id may still heart-beat the
member of its last rejoin until it is closed. (The look also counts only members listed in
a Stable group: tests/unit/test_worker_successor_stable.py.)
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from workers import clients as clients_module
from workers.clients import TaskClients


class _Consumer:
    def memberid(self) -> str:
        return "mine-1"


def _clients(consumer: _Consumer) -> TaskClients:
    clients = TaskClients.__new__(TaskClients)
    clients.consumer_conf = {"group.instance.id": "app-p-task-000", "session.timeout.ms": 6000}
    clients.consumer = consumer  # type: ignore[assignment]
    clients.app_id = "app-p"
    clients.new_admin = lambda: None  # type: ignore[method-assign]
    return clients


@pytest.mark.parametrize("drop", [True, False])
def test_the_consumer_is_retired_before_the_look_only_when_asked(
        drop: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = _Consumer()
    clients = _clients(consumer)
    asked: list[tuple[Any, ...]] = []
    retired: list[Any] = []

    def look(admin: Any, group: str, instance: str, mine: str | None, session_s: float,
             wait_s: float) -> str | None:
        asked.append((group, instance, mine, session_s, clients.consumer is None,
                      consumer in retired))
        return None

    monkeypatch.setattr(clients_module, "live_successor", look)
    def retire(doomed: list[Any]) -> threading.Thread:
        retired.extend(doomed)
        closed = threading.Thread(target=lambda: None)
        closed.start()
        return closed

    monkeypatch.setattr(clients_module, "retire", retire)
    assert clients.successor_member(30.0, drop_consumer=drop) is None
    assert asked == [("app-p", "app-p-task-000", "mine-1", 6.0, drop, drop)]
    assert (clients.consumer is None) == drop


class _SlowClose(_Consumer):
    """A consumer whose close takes ``close_s`` (a fenced consumer still heart-beating)."""

    def __init__(self, close_s: float) -> None:
        self.close_s = close_s
        self.closed_at: float | None = None

    def close(self) -> None:
        time.sleep(self.close_s)
        self.closed_at = time.monotonic()


@pytest.mark.slow  # waits out a session timeout of 2 s
@pytest.mark.parametrize(("close_s", "waits"), [(0.5, True), (30.0, False)])
def test_the_look_begins_once_the_fenced_consumer_closed_or_after_a_session_timeout(
        close_s: float, waits: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clients_module, "Consumer", _SlowClose)  # retire closes Consumers
    consumer = _SlowClose(close_s)
    clients = _clients(consumer)
    clients.consumer_conf["session.timeout.ms"] = 2000
    began = time.monotonic()
    looked: list[float] = []

    def look(*args: Any, **kwargs: Any) -> str | None:
        looked.append(time.monotonic())
        return None

    monkeypatch.setattr(clients_module, "live_successor", look)
    assert clients.successor_member(30.0, drop_consumer=True) is None
    if waits:
        assert consumer.closed_at is not None and looked[0] >= consumer.closed_at
    else:  # a close blocked on a wedge: the look begins after one session timeout
        assert consumer.closed_at is None and looked[0] - began >= 2.0
