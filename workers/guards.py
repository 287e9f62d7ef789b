"""The running task's periodic guards: partition shape, group members, received topics.

Each guard keeps its own schedule (``next_check``, monotonic s) and state, and is given
what it reads at each call (the worker's current admin client, identity checker,
engine): it imports nothing of :mod:`workers.main`. The worker's punctuation calls a
due guard after committing its open transaction (docs/architecture.md, "The worker",
"The punctuation").

* :class:`ShapeGuard`: a received topic's partition count changed (SUBSTRATE).
* :class:`GroupGuard`: a member of the group that is not one of the process's tasks
  (``SUBSTRATE_MISCONFIGURED``).
* :class:`DeletionGuard`: a received topic deleted or recreated (:mod:`workers.identity`),
  refused when messages from it are held, else a SUBSTRATE stop after a grace.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import Final

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from parsley.engine.channel import ChannelId
from parsley.engine.engine import ProcessEngine
from parsley.engine.identity import TopicVerdict
from workers.admin import ADMIN_CALL_BOUND_S, group_members, partition_count
from workers.calls import CallStalled, awaiting
from workers.identity import (
    RECEIVED_CHECK_INTERVAL_S,
    IdentityChecker,
    apply_received_verdicts,
    settled_detail,
)
from workers.positions import foreign_member_refusal, foreign_members
from workers.protocol import StopKind
from workers.verdicts import Stop

__all__ = [
    "FOREIGN_MEMBER_GRACE_S",
    "GROUP_CHECK_INTERVAL_S",
    "SETTLED_STOP_GRACE_S",
    "SHAPE_CHECK_INTERVAL_S",
    "DeletionGuard",
    "GroupGuard",
    "ShapeGuard",
]

log = logging.getLogger("parsley.worker")

SHAPE_CHECK_INTERVAL_S: Final = 2.0
"""How often the received topics' partition counts are compared with the bootstrap's, s."""
GROUP_CHECK_INTERVAL_S: Final = 2.0
"""How often the group's members are described for a foreign member, s."""
FOREIGN_MEMBER_GRACE_S: Final = 2.0
"""How long a foreign member may be seen in the group before the refusal, s: with the
check's interval, a foreign member is refused within about one session timeout (6 s)."""
SETTLED_STOP_GRACE_S: Final = 20.0
"""How long a task runs on after settling a deleted received topic it held nothing from,
s: longer than a sibling task's check interval plus its corroboration (10 s + 1.5 s), so
a sibling holding messages from the topic refuses first (docs/failing-closed.md)."""


class ShapeGuard:
    """Stops (SUBSTRATE) when a received topic's partition count differs from the bootstrap's.

    Asks the worker's AdminClient, one topic per request, never the consumer: a
    consumer's metadata request waits behind its outstanding Fetch long-poll
    (``fetch.wait.max.ms``), which stalled the loop 0.45 s per check (measured: 452 ms
    median through the consumer with a fetch outstanding, 0.7 ms through the
    AdminClient).

    Args:
        partitions: each received topic's partition count at the start.
    """

    def __init__(self, partitions: Mapping[str, int]) -> None:
        self.partitions = dict(partitions)
        self.next_check = 0.0

    def due(self, now: float, status_interval_s: float) -> bool:
        """Whether a check is due; if so, schedules the next one (at most once per
        :data:`SHAPE_CHECK_INTERVAL_S`, never more often than the status interval)."""
        if now < self.next_check:
            return False
        self.next_check = now + max(SHAPE_CHECK_INTERVAL_S, status_interval_s)
        return True

    def check(self, admin: AdminClient) -> None:
        """Compare each received topic's partition count with the start's.

        Raises:
            Stop: a partition count changed (docs/runbooks.md, "A partition was added while
                the process ran").
        """
        for topic, before in self.partitions.items():
            try:
                now = partition_count(admin, topic, timeout_s=5)
            except (KafkaException, CallStalled):
                return  # an unreachable cluster is not a shape change
            if now is None:
                continue
            if now != before:
                raise Stop(
                    StopKind.SUBSTRATE, None,
                    f"the partition shape of the process's topics changed while it ran: "
                    f"received topic {topic} had {before} partition(s) at start and has {now} "
                    "now; restart the process (the start re-resolves the topics and pre-commits "
                    "new partitions)")


class GroupGuard:
    """Refuses a member of the group that is not one of the process's own tasks.

    The tasks are static members whose ``group.instance.id`` is one of
    ``own_members``; any other member takes partitions from them and may commit
    positions they never read (the group-protocol conflict of docs/runbooks.md,
    ``SUBSTRATE_MISCONFIGURED``). A member seen for :data:`FOREIGN_MEMBER_GRACE_S` is
    refused. The wait for the describe's answer is bounded by
    :data:`workers.admin.ADMIN_CALL_BOUND_S` + 1 s, and the whole describe by its
    ``describe_consumer_groups`` bound (:func:`workers.calls.awaiting`: past it,
    :class:`workers.calls.CallStalled`, not the watchdog's exit); a describe that fails or
    is not answered in time judges nothing. The request itself never times out inside
    librdkafka (:data:`workers.admin.COORDINATOR_REQUEST_TIMEOUT_S`: one that did could
    abort the process once the group coordinator is reached again).
    """

    def __init__(self, app_id: str, task: int, own_members: Collection[str]) -> None:
        self.app_id = app_id
        self.task = task
        self.own_members = frozenset(own_members)
        self.foreign_seen: dict[str, float] = {}  # member id -> when first seen, monotonic s
        self.next_check = 0.0

    def due(self, now: float, status_interval_s: float) -> bool:
        """Whether a check is due; if so, schedules the next one."""
        if now < self.next_check:
            return False
        self.next_check = now + max(GROUP_CHECK_INTERVAL_S, status_interval_s)
        return True

    def check(self, admin: AdminClient, now: float) -> None:
        """Describe the group and weigh its foreign members.

        Raises:
            ParsleyFailClosedError: ``SUBSTRATE_MISCONFIGURED`` naming the foreign
                members' client ids and hosts.
        """
        try:
            with awaiting("describe_consumer_groups"):
                members = group_members(admin, self.app_id, answer_s=ADMIN_CALL_BOUND_S + 1)
        except (KafkaException, TimeoutError, CallStalled) as exc:
            log.debug("describing group %s failed: %s", self.app_id, exc)
            return
        foreign = foreign_members(members, self.own_members)
        seen = self.foreign_seen
        for gone in set(seen) - {m.member_id for m in foreign}:
            del seen[gone]
        for m in foreign:
            seen.setdefault(m.member_id, now)
        if foreign:
            longest = now - min(seen[m.member_id] for m in foreign)
            if longest >= FOREIGN_MEMBER_GRACE_S:
                raise foreign_member_refusal(foreign, self.app_id, longest)
            log.warning("%s task %d: foreign member(s) in the group: %s", self.app_id,
                        self.task, [(m.client_id, m.host) for m in foreign])


class DeletionGuard:
    """The running task's identity check of its received topics (:mod:`workers.identity`).

    Once a deleted received topic the task held nothing from is settled (what that
    released committed), the task stops (SUBSTRATE) :data:`SETTLED_STOP_GRACE_S` later,
    so that a sibling task holding messages from the topic refuses first.

    Args:
        channels: the task's received channels by topic name.
        read_ends: past the last record fed, over the process's life (shared with the
            worker, which updates it).
        read_floors: the highest committed read position seen at a start (likewise).
    """

    def __init__(self, app_id: str, task: int, channels: Mapping[str, ChannelId],
                 read_ends: dict[tuple[str, int], int],
                 read_floors: dict[tuple[str, int], int]) -> None:
        self.app_id = app_id
        self.task = task
        self.channels = channels
        self.read_ends = read_ends
        self.read_floors = read_floors
        self.settled: tuple[float, str] | None = None  # (when, detail): a deletion settled
        self.next_check = 0.0

    def due(self, now: float) -> bool:
        """Whether a check is due; if so, schedules the next one."""
        if now < self.next_check:
            return False
        self.next_check = now + RECEIVED_CHECK_INTERVAL_S
        return True

    def check(self, identity: IdentityChecker, engine: ProcessEngine, *, running: bool,
              rebuild: Callable[[], None], release: Callable[[], None]) -> None:
        """Describe the received topics and weigh the verdicts.

        Args:
            identity: the worker's current identity checker.
            engine: the worker's engine.
            running: whether the task runs (not between assignments).
            rebuild: rebuilds the worker's state from the changelogs (between
                assignments the engine may hold aborted feeds: the committed state is
                judged, as at initialisation).
            release: touches the step, drains and commits what a settled deletion
                released.

        Raises:
            ParsleyFailClosedError: CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES for a
                deleted received topic whose messages are held; CHANNEL_IDENTITY_CHANGED
                for one recreated under its name.
            Stop: SUBSTRATE, :data:`SETTLED_STOP_GRACE_S` after a settled deletion
                (docs/failing-closed.md).
            CallStalled: the describes (answers awaited in Python, asked again until the
                checker's deadline) took longer than the ``describe_topics`` bound
                (:func:`workers.calls.awaiting`); the worker recovers in place rather than
                exit (docs/operations.md, "Bounded client calls" and "The task timeout").
        """
        if self.settled is not None:
            since, detail = self.settled
            if time.monotonic() - since >= SETTLED_STOP_GRACE_S:
                raise Stop(StopKind.SUBSTRATE, None, detail)
            return
        with awaiting("describe_topics"):
            result = identity.check({t: ch.topic_id for t, ch in self.channels.items()})
        if not running:
            gone = None
            if any(v is not TopicVerdict.ALIVE for v in result.verdicts.values()):
                rebuild()
                gone = settled_detail(result.verdicts, self.channels)
        else:
            gone = apply_received_verdicts(engine, result.verdicts, self.channels,
                                           self.read_ends, self.read_floors)
            if gone is not None:
                release()
        if gone is not None:
            self.settle(gone)

    def settle(self, gone: str) -> None:
        """Stop :data:`SETTLED_STOP_GRACE_S` from now for the settled deletion ``gone``."""
        if self.settled is not None:
            return
        # A sibling task may hold messages from the topic: its refusal, within one
        # check interval, must be what the process reports, not this stop.
        self.settled = (time.monotonic(), gone)
        self.next_check = time.monotonic() + SETTLED_STOP_GRACE_S
        log.warning("%s task %d: %s Stopping in %g s.", self.app_id, self.task, gone,
                    SETTLED_STOP_GRACE_S)
