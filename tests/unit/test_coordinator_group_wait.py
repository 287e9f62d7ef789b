"""The start's group rules (no broker): the wait's bound and the refusal naming each member."""

from __future__ import annotations

import pytest

from coordinator.bootstrap.group import (
    GroupMember,
    leave_window_s,
    members_remain,
    session_timeout_ms,
)
from parsley.refusals import Reason
from workers.kafka import DEFAULT_SESSION_TIMEOUT_MS


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
    assert "group 'shop-p' still holds 2 member(s)" in d and "after 12 s" in d
    assert "6000 ms" in d
    assert ("client id 'console-consumer-1' on host /10.0.0.9, member id "
            "console-consumer-1-abc") in d
    assert ("client id 'shop-p-task-000' on host /10.0.0.8, group.instance.id shop-p-task-000 "
            "(a worker of this process that another coordinator runs)") in d
    assert d.index("console-consumer-1") < d.index("shop-p-task-000"), "sorted by client id"
    assert "kafka-consumer-groups --bootstrap-server k1:9092 --describe --group shop-p " \
           "--members" in d
    assert "runbook: SUBSTRATE_MISCONFIGURED" in d
