"""The join watch (workers.join_watch): how long a consumer has been without an assignment."""

from __future__ import annotations

import pickle

from workers.join_watch import JOIN_BOUND_MIN_S, JoinStalled, JoinWatch, join_bound_s
from workers.kafka_errors import ErrorKind


def test_the_bound_is_the_minimum_or_three_session_timeouts() -> None:
    assert join_bound_s(6_000) == JOIN_BOUND_MIN_S
    assert join_bound_s(45_000) == 135.0


def test_a_revoke_with_no_assignment_after_it_is_overdue_at_the_bound() -> None:
    watch = JoinWatch(bound_s=45.0)
    assert watch.overdue(100.0) is None  # never waiting
    watch.revoked(100.0)
    assert watch.overdue(144.9) is None
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


def test_the_stall_is_a_transient_substrate_error_that_pickles() -> None:
    err = JoinWatch(bound_s=3.0, since=0.0, why="was revoked").stalled(4.0)
    assert err.kind is ErrorKind.SUBSTRATE_TRANSIENT
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again, JoinStalled) and again.detail == err.detail


def test_a_wait_counts_from_when_the_cluster_answers_again() -> None:
    watch = JoinWatch(bound_s=45.0)
    watch.revoked(0.0)
    watch.cluster_back(60.0)  # unreachable from before 0 to 60
    assert watch.overdue(60.0) is None
    assert watch.overdue(105.0) == 45.0
    idle = JoinWatch(bound_s=45.0)
    idle.cluster_back(60.0)  # not waiting: nothing begins
    assert idle.overdue(1_000.0) is None
