"""The start's group rules (no broker): the wait's bound and the refusal naming each member."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from coordinator.bootstrap import group
from coordinator.bootstrap.common import StartError, StartRetryableError
from coordinator.bootstrap.group import (
    GroupMember,
    await_group_vacated,
    leave_window_s,
    members_remain,
    session_timeout_ms,
)
from parsley.refusals import ParsleyFailClosedError, Reason
from tests.seed_shapes import assert_seed_shape
from workers.kafka_config import DEFAULT_SESSION_TIMEOUT_MS


def test_the_wait_is_twice_the_session_timeout_the_workers_run_with() -> None:
    assert session_timeout_ms({}) == DEFAULT_SESSION_TIMEOUT_MS
    assert leave_window_s({}) == 2 * DEFAULT_SESSION_TIMEOUT_MS / 1000
    assert session_timeout_ms({"session.timeout.ms": 10_000}) == 10_000
    assert leave_window_s({"consumer.session.timeout.ms": "30000"}) == 60.0
    assert session_timeout_ms({"session.timeout.ms": "9000",
                               "consumer.session.timeout.ms": " 45000 "}) == 45_000
    with pytest.raises(ValueError, match="integer"):
        session_timeout_ms({"session.timeout.ms": "soon"})
    with pytest.raises(ValueError, match=">= 1"):
        session_timeout_ms({"session.timeout.ms": 0})


def test_the_refusal_names_each_member_and_the_remedy() -> None:
    foreign = GroupMember("console-consumer-1-abc", "console-consumer-1", "/10.0.0.9")
    twin = GroupMember("shop-p-task-000-x", "shop-p-task-000", "/10.0.0.8", "shop-p-task-000")
    err = members_remain("shop-p", [twin, foreign], 12.0, 6000, "k1:9092")
    assert err.reason is Reason.SUBSTRATE_MISCONFIGURED
    d = err.detail
    assert_seed_shape(Reason.SUBSTRATE_MISCONFIGURED, d)
    assert d.startswith("the group join has been refused as a protocol conflict for longer "
                        "than 12 s, "), d
    assert "group 'shop-p' still holds 2 member(s)" in d and "after 12 s" in d
    assert "6000 ms" in d
    assert ("client id 'console-consumer-1' on host /10.0.0.9, member id "
            "console-consumer-1-abc") in d
    assert ("client id 'shop-p-task-000' on host /10.0.0.8, group.instance.id shop-p-task-000 "
            "(an instance id of this process's workers)") in d
    assert "another coordinator" not in d, "which run a member belongs to is not known"
    assert "after 12 s from its first answer" in d
    assert d.index("console-consumer-1") < d.index("shop-p-task-000"), "sorted by client id"
    assert "kafka-consumer-groups --bootstrap-server k1:9092 --describe --group shop-p " \
           "--members" in d
    assert "runbook: SUBSTRATE_MISCONFIGURED" in d


OWN = GroupMember("shop-p-task-000-x", "shop-p-task-000", "/10.0.0.8", "shop-p-task-000")
FOREIGN = GroupMember("console-consumer-1-abc", "console-consumer-1", "/10.0.0.9")


def _wait(monkeypatch: pytest.MonkeyPatch,
          answers: Sequence[tuple[float, list[GroupMember] | None]],
          window_s: float = 12.0) -> float:
    """Runs the wait on a fake clock: ``answers`` gives (until s, the describe's answer)."""
    now = [0.0]

    def members(admin: Any, group: str) -> list[GroupMember] | None:
        return next(a for until, a in answers if now[0] < until)

    def sleep(s: float) -> None:
        now[0] += s

    monkeypatch.setattr(group, "group_members", members)
    return await_group_vacated(None, "shop-p", window_s,  # type: ignore[arg-type]
                               session_ms=6000, bootstrap_servers="k1:9092", sleep=sleep,
                               clock=lambda: now[0])


def test_the_window_starts_when_the_group_first_answers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The group's coordinator loads for 8 s, then our previous worker stays 11 s more
    # (its session restarted when the group loaded): 19 s in all, inside 12 s from the
    # first answer.
    waited = _wait(monkeypatch, [(8.0, None), (19.0, [OWN]), (1e9, [])])
    assert 19.0 <= waited < 19.6


def test_own_members_that_outlive_the_window_are_a_retryable_start_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(StartRetryableError) as e:
        _wait(monkeypatch, [(3.0, None), (1e9, [OWN])])
    d = str(e.value)
    assert "still holds 1 member(s) with this process's own group.instance.id" in d
    assert "group.instance.id shop-p-task-000 (an instance id of this process's workers)" in d
    assert "another coordinator" not in d and d.endswith("Retry this start.")
    assert not isinstance(e.value, ParsleyFailClosedError)


def test_a_foreign_member_that_stays_is_refused_naming_ours_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ParsleyFailClosedError) as e:
        _wait(monkeypatch, [(1e9, [OWN, FOREIGN])])
    assert e.value.reason is Reason.SUBSTRATE_MISCONFIGURED
    assert "console-consumer-1" in e.value.detail and "shop-p-task-000" in e.value.detail


def test_a_group_that_never_answers_is_a_start_error_within_the_window(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(StartError, match="did not answer a describe within 12 s") as e:
        _wait(monkeypatch, [(1e9, None)])
    assert not isinstance(e.value, StartRetryableError)


def _wait_foreign(monkeypatch: pytest.MonkeyPatch,
                  answers: Sequence[tuple[float, list[GroupMember] | None]],
                  window_s: float = 12.0) -> float:
    """:func:`group.await_foreign_members_gone` on a fake clock, as :func:`_wait`."""
    now = [0.0]

    def members(admin: Any, group_id: str) -> list[GroupMember] | None:
        return next(a for until, a in answers if now[0] < until)

    def sleep(s: float) -> None:
        now[0] += s

    monkeypatch.setattr(group, "group_members", members)
    return group.await_foreign_members_gone(
        None, "shop-p", window_s, session_ms=6000,  # type: ignore[arg-type]
        bootstrap_servers="k1:9092", sleep=sleep, clock=lambda: now[0])


def test_a_join_start_accepts_the_peers_workers_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # --join: the peer coordinators' workers carry this process's own instance ids and stay.
    peer = GroupMember("shop-p-task-001-y", "shop-p-task-001", "/10.0.0.9", "shop-p-task-001")
    assert _wait_foreign(monkeypatch, [(1e9, [OWN, peer])]) == 0.0


def test_a_join_start_waits_for_a_foreign_member_and_then_refuses_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # It leaves after 5 s: accepted; it stays: SUBSTRATE_MISCONFIGURED naming it alone.
    assert _wait_foreign(monkeypatch, [(5.0, [OWN, FOREIGN]), (1e9, [OWN])]) >= 5.0
    with pytest.raises(ParsleyFailClosedError) as info:
        _wait_foreign(monkeypatch, [(1e9, [OWN, FOREIGN])])
    assert info.value.reason is Reason.SUBSTRATE_MISCONFIGURED
    assert "console-consumer-1" in info.value.detail
    assert "shop-p-task-000" not in info.value.detail


def test_a_join_start_fails_plainly_when_the_group_never_answers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(StartError, match="did not answer a describe"):
        _wait_foreign(monkeypatch, [(1e9, None)])
