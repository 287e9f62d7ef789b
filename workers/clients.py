"""A task's Kafka clients: built from its spec, the admin client renewed, closed at the end.

:class:`TaskClients` holds the admin client (with the identity checker over it), the
transactional producer, the restore consumer and the main consumer's configuration (the
main consumer itself is built when the loop starts). It imports nothing of
:mod:`workers.main`.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
import traceback
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from parsley.declarations import application_id
from workers.calls import pause
from workers.client_log import with_task_logger
from workers.identity import IdentityChecker
from workers.kafka_config import (
    DEFAULT_SESSION_TIMEOUT_MS,
    WorkerOwner,
    admin_config,
    consumer_config,
    producer_config,
    restore_consumer_config,
)
from workers.protocol import TaskSpec
from workers.verdicts import live_successor
from workers.watchdog import bounded

__all__ = ["RETIRE_WAIT_S", "TaskClients", "drop_frame_locals", "retire"]

log = logging.getLogger("parsley.worker")


RETIRE_WAIT_S = 5.0
"""How long the retiring thread waits, s, for the worker's thread to let go of a retired
object before it drops its own reference anyway (:func:`retire`)."""


def retire(clients: list[Any], holders: list[Any] | None = None) -> threading.Thread:
    """Close and drop ``clients`` on a daemon thread of their own: a consumer's ``close`` or
    a client's destruction may block on the same wedge that made the worker replace it.

    A consumer is closed (which destroys its librdkafka handle) and a producer purged
    first. ``holders`` are objects that hold the clients (the old transaction account and
    step): they are dropped next, then the clients not yet closed. Before dropping each the
    thread waits, up to :data:`RETIRE_WAIT_S` in all, until its own reference is the last,
    so that the object (a librdkafka client is destroyed with its last reference) is
    destroyed on this thread rather than on the worker's, which still holds the old ones
    for a moment. Both lists are emptied, so the caller holds no reference to them
    afterwards.

    Returns:
        The thread (started), for a caller that must know when the clients are closed.
    """
    doomed_clients = [c for c in clients if c is not None]
    doomed_holders = [h for h in holders or () if h is not None]
    clients.clear()
    if holders is not None:
        holders.clear()

    def close_all() -> None:
        open_clients: list[Any] = []
        while doomed_clients:
            client = doomed_clients.pop()
            if isinstance(client, Consumer):
                try:
                    client.close()
                    continue  # its handle is gone: the object may go anywhere
                except Exception:  # already closed or unusable: dropping it is enough
                    log.debug("closing a retired consumer failed", exc_info=True)
            elif isinstance(client, Producer):
                _purge(client)
            open_clients.append(client)
        client = None  # the loop's name must not keep the last one
        deadline = time.monotonic() + RETIRE_WAIT_S
        for doomed in (doomed_holders, open_clients):
            while doomed:
                obj = doomed.pop()
                _await_sole_reference(obj, deadline)
                del obj

    thread = threading.Thread(target=close_all, name="parsley-retire-clients", daemon=True)
    thread.start()
    return thread


def _references(obj: object) -> int:
    return sys.getrefcount(obj)


def _await_sole_reference(obj: object, deadline: float) -> None:
    """Wait until ``deadline`` (``time.monotonic``) at most for the caller's reference to
    ``obj`` to be its last."""
    while _references(obj) > _SOLE and time.monotonic() < deadline:
        time.sleep(0.02)


def _sole_probe() -> int:
    probe = object()  # held by this name only, passed as close_all passes a retired object
    return _probe_count(probe)


def _probe_count(obj: object) -> int:
    return _references(obj)


_SOLE = _sole_probe()
"""``sys.getrefcount`` of an object held by one name of its caller, measured through the
same calls as :func:`_await_sole_reference` makes (the count differs between Python
versions)."""


def drop_frame_locals(exc: BaseException) -> None:
    """Clear the local variables of the finished frames in the tracebacks of ``exc`` and of
    the exceptions it chains (``traceback.clear_frames``): a fault's traceback keeps every
    frame it unwound, and their locals would keep the clients being replaced alive (file
    names and line numbers stay for the log)."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if current.__traceback__ is not None:
            traceback.clear_frames(current.__traceback__)
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]


def _purge(producer: Producer) -> None:
    """Drop what a retired producer still holds to send, queued or in flight, without
    waiting (``rd_kafka_purge``): its transaction is abandoned (the fresh producer's
    ``init_transactions`` fences it and aborts what the coordinator knows of it), and a
    produce request of its left queued through a broker outage and sent once the broker is
    back would land after that abort, opening a transaction on the partition that no
    coordinator ends (a hanging transaction: its last stable offset never moves again,
    KAFKA-12671)."""
    try:
        producer.purge(in_queue=True, in_flight=True, blocking=False)
    except Exception:  # already destroyed or unusable: nothing of it is sent
        log.debug("purging a retired producer failed", exc_info=True)


def _await_close(closing: threading.Thread, bound_s: float) -> None:
    """Wait up to ``bound_s`` for a retiring thread to end, serving the heartbeat
    (:func:`workers.calls.pause`): a close blocked on a wedge is left to itself."""
    deadline = time.monotonic() + bound_s
    while closing.is_alive() and time.monotonic() < deadline:
        pause(0.1)
    if closing.is_alive():
        log.info("the fenced consumer did not close within %.0f s; looking for a successor "
                 "while it closes", bound_s)


class TaskClients:
    """The Kafka clients of task ``spec.task``, configured from ``spec``."""

    def __init__(self, spec: TaskSpec) -> None:
        self.spec = spec
        process, task, w = spec.process, spec.task, spec.task_count
        self.app_id = application_id(spec.prefix, process.name)
        # librdkafka's lines through logging, naming the task (workers.client_log).
        self.props: dict[str, Any] = with_task_logger(spec.kafka_properties, self.app_id, task)
        servers, props = spec.bootstrap_servers, self.props
        self.admin = AdminClient(admin_config(servers, props))
        self.producer = self.new_producer()
        self.restore_consumer = self.new_restore_consumer()
        self.consumer_conf = consumer_config(
            servers, spec.prefix, process.name, task, props, task_count=w,
            owner=WorkerOwner(socket.gethostname(), os.getppid()))  # the spawning coordinator
        self.consumer: Consumer | None = None
        self.identity = IdentityChecker(self.admin)
        self.renewals = 0
        """How many times :meth:`renew` replaced the clients."""

    def new_producer(self) -> Producer:
        """A transactional producer with the task's ``transactional.id``."""
        spec = self.spec
        return Producer(producer_config(spec.bootstrap_servers, spec.prefix, spec.process.name,
                                        spec.task, self.props, task_count=spec.task_count))

    def new_restore_consumer(self) -> Consumer:
        """A ``read_committed`` consumer for the changelog reads (no group)."""
        spec = self.spec
        return Consumer(restore_consumer_config(
            spec.bootstrap_servers, spec.prefix, spec.process.name, spec.task, self.props,
            task_count=spec.task_count))

    def renew(self, *, consumer: bool, also: list[Any] | None = None) -> None:
        """Replace the producer, the restore consumer and the admin client with fresh ones of
        the same configuration, and the main consumer too when ``consumer`` (the loop then
        builds and subscribes a new one: :attr:`consumer` is ``None``).

        The old clients are closed and dropped off the main thread (:func:`retire`), with
        ``also`` (objects that hold them, e.g. the old transaction account and step; the list
        is emptied): one may be wedged in a call that never returns (docs/operations.md,
        "The task timeout").
        The caller renews the transaction over the new producer and initialises it, which
        fences the old one.
        """
        old: list[Any] = [self.producer, self.restore_consumer, self.admin]
        if consumer and self.consumer is not None:
            old.append(self.consumer)
            self.consumer = None
        retire(old, also)
        self.producer = self.new_producer()
        self.restore_consumer = self.new_restore_consumer()
        self.renew_admin()
        self.renewals += 1

    def new_admin(self) -> AdminClient:
        """A new AdminClient of the task's configuration."""
        return AdminClient(admin_config(self.spec.bootstrap_servers, self.props))

    def renew_admin(self) -> None:
        """Replace the admin client (and the identity checker over it) with a new one: after
        a broker restart an old one can keep answering with stale leader metadata."""
        self.admin = self.new_admin()
        self.identity = IdentityChecker(self.admin)

    def successor_member(self, wait_s: float, *, drop_consumer: bool = False) -> str | None:
        """Another live member of the group with this task's ``group.instance.id``, if any
        (:func:`workers.verdicts.live_successor`, asked through a fresh AdminClient: after
        a fence the old one may be stale).

        Args:
            wait_s: how long to look for a candidate, s.
            drop_consumer: retire the main consumer before looking (:attr:`consumer` is
                then ``None``, and the loop builds a new one), and wait for its close (at
                most one session timeout), so that nothing of this worker can keep a member
                of its own in the group meanwhile: a consumer fenced for a stale member id
                (a request of its own sent before its last rejoin) may still heart-beat
                the member of that rejoin, which a look begun before the close would see
                in a Stable group past the session timeout. (A member
                its own last join left during a rebalance can outlive it; the look
                passes over that one by counting only a Stable group's members:
                :class:`workers.admin.GroupView`.)

        Returns:
            That member's id, or ``None`` when none proved live.
        """
        session_s = self.session_timeout_ms / 1000.0
        mine = self.member_id()
        if self.consumer is not None and drop_consumer:
            fenced, self.consumer = self.consumer, None  # before its close can revoke
            closing = retire([fenced])
            del fenced
            _await_close(closing, session_s)
        return live_successor(self.new_admin(), self.app_id, self.instance_id, mine, session_s,
                              wait_s)

    @property
    def instance_id(self) -> str:
        """The main consumer's ``group.instance.id``."""
        return str(self.consumer_conf["group.instance.id"])

    @property
    def session_timeout_ms(self) -> int:
        """The main consumer's ``session.timeout.ms``, ms."""
        return int(self.consumer_conf.get("session.timeout.ms", DEFAULT_SESSION_TIMEOUT_MS))

    def member_id(self) -> str | None:
        """The main consumer's member id now, or ``None`` (no consumer, or not joined)."""
        if self.consumer is None:
            return None
        try:
            return self.consumer.memberid() or None
        except (KafkaException, RuntimeError):
            return None

    def close(self, clean: bool) -> None:
        """Close the consumer (static: it stays a member until its session times out), the
        restore consumer, and flush the producer when ``clean``."""
        if self.consumer is not None:
            try:
                with bounded("close"):
                    self.consumer.close()
            except Exception:  # best effort: the worker is ending
                log.debug("consumer close failed", exc_info=True)
        try:
            with bounded("close"):
                self.restore_consumer.close()
        except Exception:
            log.debug("restore consumer close failed", exc_info=True)
        if clean:
            try:
                with bounded("close"):
                    self.producer.flush(5)
            except Exception:  # judged already: a late error must not lose the final report
                log.debug("producer flush at the stop failed", exc_info=True)
