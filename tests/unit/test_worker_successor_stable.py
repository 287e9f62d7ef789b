"""Which member the successor look takes for live (:func:`workers.verdicts.live_successor`).

A member counts only once it is still listed the session timeout plus 1 s after it was
first listed with the group ``Stable``. During a rebalance a member that has sent
``JoinGroup`` stays listed up to its rebalance timeout even when no client holds it
(:class:`workers.admin.GroupView`): after a group coordinator's failover the broker fenced
a task's static consumer and the member of the consumer's own last ``JoinGroup`` stayed
listed; the look took it for a live successor and the task stopped FATAL (a 3-broker chaos
run). The describes are scripted here; tests/integration/test_successor_rebalance.py shows
the same on a real broker.
"""

from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupState

from workers import verdicts

INSTANCE = "app-task-0"
SESSION_S = 6.0


class _Clock:
    """A fake monotonic clock that the look's pauses advance."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.now += seconds


class _Group:
    """An admin client whose group answers ``script(t)`` -> (state, member ids holding the
    task's instance id), ``t`` the s since the look began."""

    def __init__(self, clock: _Clock, script: Any) -> None:
        self.clock = clock
        self.script = script
        self.began = clock.now

    def describe_consumer_groups(self, groups: list[str], **_: Any) -> dict[str, Any]:
        state, ids = self.script(self.clock.now - self.began)
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        future.set_result(SimpleNamespace(state=state, members=[
            SimpleNamespace(member_id=i, client_id="c", host="/h", group_instance_id=INSTANCE)
            for i in ids]))
        return {groups[0]: future}


def _look(monkeypatch: pytest.MonkeyPatch, script: Any, wait_s: float = 12.0
          ) -> tuple[str | None, float]:
    clock = _Clock()
    monkeypatch.setattr(verdicts, "time", SimpleNamespace(monotonic=clock.monotonic))
    monkeypatch.setattr(verdicts, "pause", clock.pause)
    began = clock.now
    found = verdicts.live_successor(_Group(clock, script), "app", INSTANCE,  # type: ignore[arg-type]
                                    "mine", SESSION_S, wait_s)
    return found, clock.now - began


PREPARING = ConsumerGroupState.PREPARING_REBALANCING
COMPLETING = ConsumerGroupState.COMPLETING_REBALANCING
STABLE = ConsumerGroupState.STABLE


def test_a_member_listed_only_while_the_group_rebalances_is_not_a_successor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The member of a lost JoinGroup, listed for the whole look (it could be for 300 s).
    found, took = _look(monkeypatch, lambda t: (PREPARING if t < 20 else COMPLETING, ["left"]))
    assert found is None
    assert took <= 12.0 + SESSION_S + 5.0 + 0.5


def test_a_member_that_expires_once_the_group_is_stable_is_not_a_successor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Listed while the group rebalances, then Stable for less than its session timeout.
    found, _ = _look(monkeypatch, lambda t: (PREPARING, ["left"]) if t < 8
                     else (STABLE, ["left"]) if t < 8 + SESSION_S else (STABLE, []))
    assert found is None


def test_a_member_listed_in_a_stable_group_past_its_session_timeout_is_a_successor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    found, took = _look(monkeypatch, lambda t: (STABLE, ["successor"]))
    assert found == "successor"
    assert SESSION_S + 1.0 <= took <= SESSION_S + 2.0


def test_a_successor_found_once_a_rebalance_ends_is_still_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # It joined while the group rebalanced: it counts from the first Stable answer.
    found, took = _look(monkeypatch, lambda t: (PREPARING if t < 9 else STABLE, ["successor"]))
    assert found == "successor"
    assert took >= 9 + SESSION_S + 1.0


def test_rebalances_after_the_first_stable_answer_do_not_start_the_count_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A 1 s rebalance every 4 s (workers restoring, recovering): the successor is found
    # from its first Stable answer. Counting only unbroken Stable spans missed it, and the
    # fenced worker's recovery would then fence the successor in turn.
    found, took = _look(monkeypatch, lambda t: (PREPARING if t % 4 >= 3 else STABLE,
                                                ["successor"]))
    assert found == "successor"
    assert SESSION_S + 1.0 <= took <= SESSION_S + 2.0


def test_members_listed_under_new_ids_again_and_again_end_the_look(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A new member id every 10 s while the group never settles: the look still ends.
    found, took = _look(monkeypatch, lambda t: (PREPARING, [f"joined-{int(t // 10)}"]))
    assert found is None
    assert took <= 12.0 + 2 * SESSION_S + 7.0 + 0.5


def test_this_workers_own_member_is_never_a_successor(monkeypatch: pytest.MonkeyPatch) -> None:
    found, _ = _look(monkeypatch, lambda t: (STABLE, ["mine"]))
    assert found is None


def test_no_member_ends_the_look_at_its_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    found, took = _look(monkeypatch, lambda t: (STABLE, []), wait_s=4.0)
    assert found is None
    assert 4.0 <= took <= 4.5
