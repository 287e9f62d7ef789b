"""A fenced static member's consumer is retired before the successor check looks.

``TaskClients.successor_member(drop_consumer=True)`` (what ``Worker`` passes when
``member_fenced``) retires the consumer first, so that nothing of this worker keeps a member
in the group while it looks. (That alone did not cure the self-fence a 3-broker chaos run
showed after a group coordinator failover: the look now counts only a Stable group's
members, tests/unit/test_worker_successor_stable.py.)
"""

from __future__ import annotations

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
    monkeypatch.setattr(clients_module, "retire", lambda doomed: retired.extend(doomed))
    assert clients.successor_member(30.0, drop_consumer=drop) is None
    assert asked == [("app-p", "app-p-task-000", "mine-1", 6.0, drop, drop)]
    assert (clients.consumer is None) == drop
