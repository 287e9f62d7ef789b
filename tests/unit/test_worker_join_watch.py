"""The join bound (workers.join_watch): how long a consumer has been without an assignment,
and when its group shows it left out."""

from __future__ import annotations

import pickle

from workers.admin import GroupView
from workers.join_watch import (
    BLIND_LOOKS,
    JOIN_BOUND_MIN_S,
    LOOK_INTERVAL_S,
    JoinStalled,
    JoinWatch,
    join_bound_s,
    left_out,
)
from workers.kafka_errors import ErrorKind
from workers.positions import GroupMember

ME = "app-relay-task-000"


def test_the_bound_is_the_minimum_or_three_session_timeouts() -> None:
    assert join_bound_s(6_000) == JOIN_BOUND_MIN_S
    assert join_bound_s(45_000) == 135.0


def test_a_revoke_with_no_assignment_after_it_is_overdue_at_the_bound() -> None:
    watch = JoinWatch(bound_s=45.0)
    assert watch.overdue(100.0) is None  # never waiting
    watch.revoked(100.0)
    assert watch.overdue(144.9) is None
    assert not watch.look_due(144.9)
    assert watch.overdue(145.0) == 45.0
    assert "since it was revoked" in watch.stalled(150.0).detail
    assert "50 s" in watch.stalled(150.0).detail


def test_any_assignment_ends_the_wait() -> None:
    watch = JoinWatch(bound_s=45.0)
    watch.revoked(0.0)
    watch.assigned()
    assert watch.overdue(1_000.0) is None


def test_a_revoke_keeps_a_wait_under_way_and_a_subscribe_begins_one_afresh() -> None:
    watch = JoinWatch(bound_s=45.0)
    watch.subscribed(0.0)
    watch.revoked(30.0)  # still the wait that began at the subscribe
    assert watch.overdue(45.0) == 45.0
    assert "since it subscribed" in watch.stalled(45.0).detail
    watch.subscribed(50.0)  # a fresh consumer
    assert watch.overdue(60.0) is None
    assert watch.overdue(95.0) == 45.0


def test_a_wait_counts_again_from_a_restart() -> None:
    watch = JoinWatch(bound_s=45.0)
    watch.revoked(0.0)
    watch.restart(60.0)  # the cluster answered again, or a recovery kept the consumer
    assert watch.overdue(60.0) is None
    assert watch.overdue(105.0) == 45.0
    idle = JoinWatch(bound_s=45.0)
    idle.restart(60.0)  # not waiting: nothing begins
    assert idle.overdue(1_000.0) is None


def test_a_look_that_renews_nothing_waits_the_look_interval() -> None:
    watch = JoinWatch(bound_s=45.0)
    watch.revoked(0.0)
    assert watch.look_due(50.0)
    assert not watch.looked(50.0, answered=True)
    assert not watch.look_due(50.0 + LOOK_INTERVAL_S - 0.1)
    assert watch.look_due(50.0 + LOOK_INTERVAL_S)


def _member(instance: str | None) -> GroupMember:
    return GroupMember(f"{instance}-m", "client", "/127.0.0.1", instance)


def test_a_group_settled_without_the_task_s_member_leaves_it_out() -> None:
    assert left_out(GroupView(False, [], settled=True), ME)  # Empty (or Dead)
    assert left_out(GroupView(True, [_member("app-relay-task-001")], settled=True),
                    ME)  # Stable, siblings


def test_a_rebalance_under_way_or_a_member_with_the_instance_id_is_waited_for() -> None:
    # A rebalance waits for members that do not poll (a sibling restoring, a slow handler).
    assert not left_out(GroupView(False, [_member("app-relay-task-001")], rebalancing=True), ME)
    # The coordinator still counts this task's member, or a successor holds the id.
    assert not left_out(GroupView(True, [_member(ME)], settled=True), ME)


def test_the_stall_is_a_transient_substrate_error_that_pickles_and_never_says_minus_0() -> None:
    err = JoinWatch(bound_s=3.0, since=0.0, why="was revoked").stalled(4.0)
    assert err.kind is ErrorKind.SUBSTRATE_TRANSIENT
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again, JoinStalled) and again.detail == err.detail
    assert "for 0 s" in JoinWatch(bound_s=3.0, since=5.0).stalled(4.0).detail


def test_only_a_known_settled_state_leaves_the_member_out() -> None:
    # An UNKNOWN state (neither settled nor rebalancing) judges nothing.
    assert not left_out(GroupView(False, [], rebalancing=False, settled=False), ME)


def test_looks_without_an_answer_renew_after_the_blind_limit() -> None:
    watch = JoinWatch(bound_s=45.0)
    watch.revoked(0.0)
    for i in range(BLIND_LOOKS - 1):
        assert not watch.looked(50.0 + i, answered=False)
    assert not watch.looked(60.0, answered=True)  # an answer resets the count
    for i in range(BLIND_LOOKS - 1):
        assert not watch.looked(70.0 + i, answered=False)
    assert watch.looked(80.0, answered=False)
    assert f"{BLIND_LOOKS} looks at its group got no answer" in watch.stalled(80.0).detail
    assert watch.blind == 0


def test_the_consumer_s_own_member_listed_in_a_stable_group_without_an_assignment_is_wedged(
) -> None:
    own = GroupMember("m-1", "client", "/127.0.0.1", ME)
    stable = GroupView(True, [own], settled=True)
    assert left_out(stable, ME, mine="m-1")  # joined and synced, yet never assigned
    assert not left_out(stable, ME, mine="m-2")  # an earlier member, or a successor
    assert not left_out(stable, ME, mine=None)  # no member id of its own to compare
    # Empty or Dead with the member listed is no Stable group: wait.
    assert not left_out(GroupView(False, [own], settled=True), ME, mine="m-1")
