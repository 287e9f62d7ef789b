"""A ``--join`` coordinator's gained tasks: which worker exits count as the task moving,
and the bootstrap running off the membership thread (no broker; docs/operations.md,
"Several coordinators")."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

from confluent_kafka import TopicPartition

from coordinator.config import ParsleyConfig
from coordinator.runtime.coordinators_group import MAX_POLL_INTERVAL_MS, membership_consumer_config
from coordinator.runtime.membership import _ProcessMembership
from coordinator.runtime.supervisor.exits import fenced_by_successor
from tests.seed_shapes import assert_seed_shape
from workers.protocol import StopKind
from workers.verdicts import Stop, successor_stop


class _Supervisor:
    def __init__(self) -> None:
        self.assigned: list[set[int]] = []
        self.failed: list[str] = []

    def assign_tasks(self, name: str, plan: Any, tasks: set[int]) -> None:
        self.assigned.append(set(tasks))

    def release_tasks(self, name: str, tasks: set[int], deadline_s: float) -> Any:
        return SimpleNamespace(summary=lambda: "stopped")

    def fail_process(self, name: str, reason: Any, detail: str) -> None:
        self.failed.append(detail)


def _membership(bootstrap_s: float) -> tuple[_ProcessMembership, _Supervisor, threading.Event]:
    sup = _Supervisor()
    config = ParsleyConfig("k1:9092", "shop")
    m = _ProcessMembership(config, SimpleNamespace(name="shipper"),  # type: ignore[arg-type]
                           sup, 5.0, None)  # type: ignore[arg-type]
    release = threading.Event()

    def slow(tasks: set[int], lead: bool) -> Any:
        release.wait(bootstrap_s)
        return SimpleNamespace(tasks=tasks)

    m._bootstrap = slow  # type: ignore[method-assign]
    return m, sup, release


def _assign(m: _ProcessMembership, *tasks: int) -> None:
    m._on_assign(None, [TopicPartition(m.group, t) for t in tasks])  # type: ignore[arg-type]


def _drive(m: _ProcessMembership, until_s: float = 10.0) -> None:
    """Call the between-polls step as the membership thread does until no bootstrap runs."""
    end = time.monotonic() + until_s
    while time.monotonic() < end:
        m._bootstrap_pending()
        if m.attempt is None:
            return
        time.sleep(0.01)
    raise AssertionError("the bootstrap did not end")


def test_only_a_successor_fence_is_the_task_moving() -> None:
    worker = SimpleNamespace(successor_member=lambda wait: "consumer-7", app_id="shop-shipper")
    fenced = successor_stop(Stop(StopKind.FATAL, None, "fenced"), worker, "")  # type: ignore[arg-type]
    assert fenced is not None
    assert fenced_by_successor(fenced.kind, fenced.detail)
    for detail in ("worker error TypeError: 'NoneType' object is not callable",
                   "worker error PanicException: index out of bounds",
                   "fatal producer error: _FENCED", None):
        assert not fenced_by_successor(StopKind.FATAL, detail)
    assert not fenced_by_successor(StopKind.SUBSTRATE, fenced.detail)


def test_the_membership_consumer_sets_its_poll_interval() -> None:
    cfg = membership_consumer_config(ParsleyConfig("k1:9092", "shop"), "shipper")
    assert cfg["max.poll.interval.ms"] == MAX_POLL_INTERVAL_MS
    cfg = membership_consumer_config(ParsleyConfig("k1:9092", "shop"), "shipper",
                                     stop_deadline_s=600)
    assert cfg["max.poll.interval.ms"] >= 1_200_000


def test_a_slow_bootstrap_does_not_block_the_poll_and_a_lost_task_is_not_spawned() -> None:
    m, sup, release = _membership(bootstrap_s=30.0)
    _assign(m, 0, 1)
    started = time.monotonic()
    m._bootstrap_pending()
    assert time.monotonic() - started < 1.0  # returned to polling at once
    assert m.attempt is not None
    m._on_lost(None, [TopicPartition(m.group, 1)])  # type: ignore[arg-type]
    release.set()
    _drive(m)
    assert sup.assigned == [{0}] and not sup.failed


def test_a_task_lost_and_gained_again_during_its_bootstrap_is_bootstrapped_again() -> None:
    m, sup, release = _membership(bootstrap_s=30.0)
    _assign(m, 2)
    m._bootstrap_pending()
    m._on_lost(None, [TopicPartition(m.group, 2)])  # type: ignore[arg-type]
    _assign(m, 2)  # a new assignment: the bootstrap's view of it is stale
    release.set()
    _drive(m)
    assert sup.assigned == [] and m.pending.tasks == {2}
    _drive(m)  # a fresh bootstrap for the new assignment
    assert sup.assigned == [{2}]


def test_a_bootstrap_past_its_bound_stops_the_process() -> None:
    m, sup, release = _membership(bootstrap_s=30.0)
    m.bound_s = 0.2
    _assign(m, 0)
    m._bootstrap_pending()
    time.sleep(0.3)
    m._bootstrap_pending()
    release.set()
    assert sup.assigned == [] and len(sup.failed) == 1 and "did not end within" in sup.failed[0]


def test_a_fenced_task_still_assigned_here_stops_the_process_and_is_not_respawned() -> None:
    m, sup, _release = _membership(bootstrap_s=0.0)
    _assign(m, 3)
    _drive(m)
    assert sup.assigned == [{3}]
    m.session_s = 0.05
    assert m.fenced(3)
    time.sleep(0.15)
    m._check_fenced()
    _drive(m)
    assert sup.assigned == [{3}] and len(sup.failed) == 1 and "still assigns" in sup.failed[0]


def test_a_fenced_task_the_group_took_away_is_not_a_failure() -> None:
    m, sup, _release = _membership(bootstrap_s=0.0)
    _assign(m, 4)
    _drive(m)
    m.session_s = 0.05
    assert m.fenced(4)
    m._on_lost(None, [TopicPartition(m.group, 4)])  # type: ignore[arg-type]
    time.sleep(0.15)
    m._check_fenced()
    assert not sup.failed


def _worker(app: str, task: int) -> Any:
    from workers.positions import GroupMember

    return GroupMember(f"m{task}", "rdkafka", "/127.0.0.1", f"{app}-task-{task}")


def _check(monkeypatch: Any, groups: dict[str, list[Any]], window_s: float) -> None:
    import coordinator.runtime.coordinators_group as membership

    monkeypatch.setattr(membership, "group_members", lambda admin, g: groups.get(g, []))
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    proc = SimpleNamespace(name="shipper")
    membership.refuse_beside_plain_coordinator(
        ParsleyConfig("k1:9092", "shop"), [proc], window_s,  # type: ignore[list-item]
        admin=object(), sleep=sleep, clock=lambda: now[0])


def test_a_join_start_beside_a_plain_coordinator_is_refused_naming_its_workers(
        monkeypatch: Any) -> None:
    import pytest

    from parsley.refusals import ParsleyFailClosedError, Reason

    app = "shop-shipper"
    with pytest.raises(ParsleyFailClosedError) as err:
        _check(monkeypatch, {app: [_worker(app, 0), _worker(app, 1)]}, window_s=20.0)
    assert err.value.reason is Reason.SUBSTRATE_MISCONFIGURED
    assert f"{app}-task-1" in err.value.detail and "without --join" in err.value.detail
    assert_seed_shape(Reason.SUBSTRATE_MISCONFIGURED, err.value.detail)


def test_a_join_start_beside_joined_coordinators_or_none_goes_on(monkeypatch: Any) -> None:
    from workers.positions import GroupMember

    app = "shop-shipper"
    peer = GroupMember("c1", "parsley-coordinator|h|1|ipc:///x", "/127.0.0.1", None)
    _check(monkeypatch, {app: [_worker(app, 0)], app + "-__parsley.coordinators": [peer]},
           window_s=20.0)
    _check(monkeypatch, {}, window_s=20.0)


def test_a_peer_describe_is_bounded_by_our_own_deadline() -> None:
    import concurrent.futures

    import pytest

    from coordinator.bootstrap.common import StartError
    from coordinator.runtime.peers import DESCRIBE_BOUND_S, LIBRARY_REQUEST_TIMEOUT_S, _within

    assert LIBRARY_REQUEST_TIMEOUT_S > DESCRIBE_BOUND_S
    never: concurrent.futures.Future[Any] = concurrent.futures.Future()
    started = time.monotonic()
    with pytest.raises(StartError, match="no answer within"):
        _within(never, "describing group 'g'", time.monotonic() + 0.2)
    assert time.monotonic() - started < 2.0
