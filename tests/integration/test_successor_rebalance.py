"""The successor look does not take a member left in a rebalance for a live successor.

A fenced worker asks the group whether another live member holds its
``group.instance.id`` (:func:`workers.verdicts.live_successor`; docs/operations.md,
"Fenced: a successor or a timeout"). While a group rebalances, a static member that has
sent ``JoinGroup`` stays listed until the rebalance ends, up to its rebalance timeout,
even when no client holds it any more (KIP-345; :class:`workers.admin.GroupView`). In a
3-broker chaos run the broker fenced a task's consumer after a group coordinator's
failover, the member of its own last join stayed listed, the look took it for a
successor, and the task stopped FATAL under ``--restart never``.

Here the member is made on purpose: a static consumer in a child process joins a group
whose other member (a consumer of this test that does not poll) holds the rebalance open,
and the child is killed with its ``JoinGroup`` pending. Before the look required a Stable
group it returned that member once its session timeout had passed. The same look then finds
a real successor: a live static consumer with the id, once the group is Stable.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from devtools.kafka_support import QUIET, CreateTopic
from workers.admin import group_view
from workers.verdicts import live_successor

ROOT = Path(__file__).resolve().parents[2]
SESSION_S = 6.0
INSTANCE = "successor-test-task-0"

pytestmark = pytest.mark.slow  # about 30 s of waiting on the group: not the inner loop

JOINER = """
import sys, time
from confluent_kafka import Consumer
bootstrap, group, topic, instance = sys.argv[1:5]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance,
              "session.timeout.ms": 6000, "max.poll.interval.ms": 300000, "log_level": 0})
c.subscribe([topic])
while True:
    c.poll(0.2)
"""


def _consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "session.timeout.ms": int(SESSION_S * 1000),
                     "max.poll.interval.ms": 120000, **QUIET, **extra})


def _await(what: str, check: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what} within {timeout_s:g} s"
        time.sleep(0.2)


def _listed(admin: AdminClient, group: str) -> tuple[bool, set[str | None]]:
    view = group_view(admin, group, answer_s=10)
    return view.stable, {m.group_instance_id for m in view.members}


def _poll_until(consumer: Consumer, stop: threading.Event) -> threading.Thread:
    """A thread polling ``consumer`` until ``stop`` is set (join it before closing the
    consumer: a consumer closed while another thread polls it may crash)."""
    def run() -> None:
        while not stop.is_set():
            consumer.poll(0.2)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_member_left_in_a_rebalance_is_not_taken_for_a_successor(
        kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
        group_id: str) -> None:
    topic = create_topic().name
    holder = _consumer(kafka_bootstrap, group_id)
    assigned = threading.Event()
    holder.subscribe([topic], on_assign=lambda c, p: assigned.set(),
                     on_revoke=lambda c, p: None)
    try:
        deadline = time.monotonic() + 30
        while not assigned.is_set():
            assert time.monotonic() < deadline, "the holder was assigned within 30 s"
            holder.poll(0.2)
        _await("the group Stable with the holder", lambda: _listed(kafka_admin, group_id)[0])
        # The holder stops polling: the rebalance the joiner starts cannot end until it
        # polls again (its revoke waits for the application).
        joiner = subprocess.Popen([sys.executable, "-c", JOINER, kafka_bootstrap, group_id,
                                   topic, INSTANCE], cwd=ROOT)
        try:
            _await("the joiner listed", lambda: INSTANCE in _listed(kafka_admin, group_id)[1])
        finally:
            joiner.send_signal(signal.SIGKILL)
            joiner.wait(10)
        view = group_view(kafka_admin, group_id, answer_s=10)
        left = [m.member_id for m in view.members if m.group_instance_id == INSTANCE]
        assert not view.stable and left, "the killed joiner stays listed, rebalancing"

        began = time.monotonic()
        found = live_successor(AdminClient({"bootstrap.servers": kafka_bootstrap, **QUIET}),
                               group_id, INSTANCE, None, SESSION_S, 2 * SESSION_S)
        took = time.monotonic() - began
        assert found is None, (
            f"member {found} of a killed consumer, listed only while the group rebalanced, "
            f"was taken for a live successor after {took:.1f} s")
        assert INSTANCE in _listed(kafka_admin, group_id)[1], \
            "the look ended while the left member was still listed (the case under test)"

        # The holder polls again; a live static consumer with the id is a successor.
        stop = threading.Event()
        successor = _consumer(kafka_bootstrap, group_id, **{"group.instance.id": INSTANCE})
        successor.subscribe([topic])
        pollers = [_poll_until(holder, stop), _poll_until(successor, stop)]
        try:
            found = live_successor(AdminClient({"bootstrap.servers": kafka_bootstrap, **QUIET}),
                                   group_id, INSTANCE, None, SESSION_S, 60.0)
            assert found is not None, "the live successor was found"
            assert found not in left, "the successor is the live consumer"
        finally:
            stop.set()
            for thread in pollers:
                thread.join(10)
            successor.close()
    finally:
        holder.close()
