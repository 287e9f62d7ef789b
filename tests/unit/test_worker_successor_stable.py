"""Which member the successor look takes for live (:func:`workers.verdicts.live_successor`).

A member counts only once it is still listed twice the session timeout plus 1 s after it
was first listed with the group ``Stable``, every answer from one group coordinator (a
coordinator that loads the group lists its static members again, heart-beaten or not).
During a rebalance a member that has sent ``JoinGroup`` stays listed up to its rebalance
timeout even when no client holds it (:class:`workers.admin.GroupView`): after a group
coordinator's failover the broker fenced a task's static consumer and the member of the
consumer's own last ``JoinGroup`` stayed listed; the look took it for a live successor and
the task stopped FATAL (a 3-broker chaos run). The describes are scripted here;
tests/integration/test_successor_rebalance.py shows the same on a real broker.
"""

from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException

from workers import verdicts

INSTANCE = "app-task-0"
SESSION_S = 6.0
PROOF_S = 2 * SESSION_S + 1.0
"""How long a member must be listed in a Stable group, on one coordinator, to be live."""


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
    task's instance id[, the group coordinator's node id, 1 if not given]), ``t`` the s since
    the look began; a ``KafkaException`` script answer is raised by the describe."""

    def __init__(self, clock: _Clock, script: Any) -> None:
        self.clock = clock
        self.script = script
        self.began = clock.now

    def describe_consumer_groups(self, groups: list[str], **_: Any) -> dict[str, Any]:
        answer = self.script(self.clock.now - self.began)
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        if isinstance(answer, KafkaException):
            future.set_exception(answer)
            return {groups[0]: future}
        state, ids, *node = answer
        future.set_result(SimpleNamespace(
            state=state, coordinator=SimpleNamespace(id=node[0] if node else 1), members=[
                SimpleNamespace(member_id=i, client_id="c", host="/h",
                                group_instance_id=INSTANCE) for i in ids]))
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
    assert PROOF_S <= took <= PROOF_S + 1.0


def test_a_member_the_brokers_timers_expire_late_is_not_a_successor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Nobody heart-beats it, but a broker on a loaded machine removes it 1.5 s after its
    # session timeout: past the session timeout plus 1 s, which a look once took for live
    # (a chaos run's task stopped FATAL, "fenced by a live successor", with no successor).
    found, _ = _look(monkeypatch, lambda t: (STABLE, ["late"]) if t < SESSION_S + 1.5
                     else (STABLE, []))
    assert found is None


def test_a_member_each_coordinator_reloads_is_not_a_successor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The group coordinator moves (a broker killed, then back): each one loads the group
    # from __consumer_offsets with its static member and gives it a fresh session timeout,
    # so a member nobody heart-beats stays listed in a Stable group across the moves.
    def moves(t: float) -> Any:
        if t >= 22:
            return (STABLE, [])
        if 9 <= t < 10:
            return KafkaException(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))
        return (STABLE, ["reloaded"], 1 if t < 5 else 2 if t < 9 else 3 if t < 16 else 1)

    found, _ = _look(monkeypatch, moves)
    assert found is None


def test_a_successor_across_a_coordinator_move_is_still_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    found, took = _look(monkeypatch, lambda t: (STABLE, ["successor"], 1 if t < 4 else 2))
    assert found == "successor"
    assert 4.0 + PROOF_S <= took <= 4.0 + PROOF_S + 1.0


def test_a_successor_past_one_failed_ask_is_still_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # One ask fails after the look's wait: the count starts again, and the look gives it
    # its full proof from there instead of ending (the worker's recovery would then fence
    # the successor in turn). Found a review of the first version, which ended at 12.5 s.
    def once(t: float) -> Any:
        if 12.5 <= t < 13.0:
            return KafkaException(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))
        return (STABLE, ["successor"])

    found, took = _look(monkeypatch, once)
    assert found == "successor"
    assert 13.0 + PROOF_S <= took <= 13.0 + PROOF_S + 1.0


def test_a_successor_past_a_long_run_of_failed_asks_is_still_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Every ask fails from 12.5 s to 27 s (a coordinator loading the group for long), then
    # the same coordinator answers: the count starts at the last failure, not the first.
    def streak(t: float) -> Any:
        if 12.5 <= t < 27.0:
            return KafkaException(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))
        return (STABLE, ["successor"])

    found, took = _look(monkeypatch, streak)
    assert found == "successor"
    assert 27.0 + PROOF_S <= took <= 27.0 + PROOF_S + 1.0


def test_a_successor_past_a_late_coordinator_move_is_still_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The coordinator moves after the look's wait and first answers mid-rebalance.
    found, took = _look(monkeypatch, lambda t: (STABLE, ["successor"], 1) if t < 12.5
                        else (PREPARING, ["successor"], 2) if t < 15.0
                        else (STABLE, ["successor"], 2))
    assert found == "successor"
    assert 15.0 + PROOF_S <= took <= 15.0 + PROOF_S + 1.0


def test_a_count_started_again_and_again_still_ends_the_look(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A coordinator move every 10 s: never proven, and the look ends at its hard bound.
    found, took = _look(monkeypatch, lambda t: (STABLE, ["reloaded"], int(t // 10)))
    assert found is None
    assert took <= 12.0 + 2 * PROOF_S + 7.0 + 0.5


def test_a_successor_found_once_a_rebalance_ends_is_still_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # It joined while the group rebalanced: it counts from the first Stable answer.
    found, took = _look(monkeypatch, lambda t: (PREPARING if t < 9 else STABLE, ["successor"]))
    assert found == "successor"
    assert took >= 9 + PROOF_S


def test_rebalances_after_the_first_stable_answer_do_not_start_the_count_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A 1 s rebalance every 4 s (workers restoring, recovering): the successor is found
    # from its first Stable answer. Counting only unbroken Stable spans missed it, and the
    # fenced worker's recovery would then fence the successor in turn.
    found, took = _look(monkeypatch, lambda t: (PREPARING if t % 4 >= 3 else STABLE,
                                                ["successor"]))
    assert found == "successor"
    assert PROOF_S <= took <= PROOF_S + 1.0


def test_members_listed_under_new_ids_again_and_again_end_the_look(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A new member id every 10 s while the group never settles: the look still ends.
    found, took = _look(monkeypatch, lambda t: (PREPARING, [f"joined-{int(t // 10)}"]))
    assert found is None
    assert took <= 12.0 + 2 * PROOF_S + 7.0 + 0.5


def test_this_workers_own_member_is_never_a_successor(monkeypatch: pytest.MonkeyPatch) -> None:
    found, _ = _look(monkeypatch, lambda t: (STABLE, ["mine"]))
    assert found is None


def test_no_member_ends_the_look_at_its_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    found, took = _look(monkeypatch, lambda t: (STABLE, []), wait_s=4.0)
    assert found is None
    assert 4.0 <= took <= 4.5
