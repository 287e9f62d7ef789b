"""Restoring a task's state from its changelogs: the ordering store, the engine, the stores.

:class:`Restorer` does each step of a restore, in order in :meth:`Restorer.restore`
(docs/architecture.md, "The worker", "Restore"): read partition ``i`` of the ordering
changelog into a fresh :class:`workers.ordering_store.SqliteOrderingStore`, refusing
``ORDERING_STATE_LOST`` when it held no records while the group has positions the
bootstrap did not write; build the engine over it; judge the store changelogs
(:mod:`workers.store_changelogs`) and read each declared store; bind the received topic
names and run the identity check. What was opened is kept in an :class:`OpenState`, so
that it is closed even when a later step fails.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from parsley.engine import engine_type
from parsley.engine.channel import ChannelId
from parsley.engine.cross_partition import cross_partition_policy
from parsley.engine.engine import ProcessEngine
from parsley.task_stores import TaskStores
from workers import checkpoint
from workers.admin import (
    ADMIN_CALL_BOUND_S,
    COORDINATOR_REQUEST_TIMEOUT_S,
    OffsetsStayedUnstable,
    PartitionOffsetError,
    cluster_answers,
    stable_committed_offsets,
)
from workers.calls import awaiting
from workers.changelog import RestoreProgress, read_partition
from workers.clients import TaskClients
from workers.identity import IdentityChecker, apply_received_verdicts
from workers.kafka_errors import ErrorKind, SubstrateError, stop_kind, to_exception
from workers.offsets import Reads
from workers.ordering_store import SqliteOrderingStore, store_cache_factory
from workers.positions import lost_positions, ordering_state_lost
from workers.protocol import StopKind, TaskSpec
from workers.store_changelogs import check_task_store_changelogs

__all__ = ["STABLE_OFFSETS_DEADLINE_S", "Identity", "OpenState", "Restorer"]

log = logging.getLogger("parsley.worker")

STABLE_OFFSETS_DEADLINE_S: Final = 15.0
"""How long a rebuild waits for the group's committed offsets to be stable, s."""


@dataclass(frozen=True, slots=True)
class Identity:
    """What the restore's identity check left: whether names were learned (``None``: there
    was no unnamed id to learn a name for), and the received topics whose identity is
    still pending (retried by the punctuation)."""

    names_learned: bool | None
    pending: dict[str, Any]


@dataclass(slots=True)
class OpenState:
    """What a restore opened: the ordering store, the declared stores' caches and the engine
    over them (``None`` until built). Each store is kept as soon as it is opened, so that
    :meth:`close` closes it even when a later step of the restore failed."""

    store: SqliteOrderingStore | None = None
    stores: TaskStores | None = None
    engine: ProcessEngine | None = None

    def close(self) -> None:
        """Close the stores and drop the engine."""
        if self.store is not None:
            self.store.close()
            self.store = None
        if self.stores is not None:
            self.stores.close()
            self.stores = None
        self.engine = None


class Restorer:
    """The steps of one task's restore, over the worker's clients and topics.

    Args:
        spec: the task's spec.
        app_id: the application id (the group).
        channels: the task's received channels by topic name.
        expected: the task's partitions of its received topics.
        ordering_topic: the ordering changelog.
        store_topics: each declared store's changelog.
        restore_consumer: the ``read_committed`` consumer the changelogs are read with.
        on_progress: called with each changelog read's progress.
        state_dir: the task's local state directory (:func:`workers.ordering_store.task_state_dir`).
    """

    def __init__(self, spec: TaskSpec, app_id: str, channels: Mapping[str, ChannelId],
                 expected: frozenset[tuple[str, int]], ordering_topic: str,
                 store_topics: Mapping[str, str], restore_consumer: Consumer,
                 on_progress: Callable[[RestoreProgress], None], state_dir: Path) -> None:
        self.spec = spec
        self.dir = state_dir
        self.task = spec.task
        self.app_id = app_id
        self.channels = channels
        self.expected = expected
        self.ordering_topic = ordering_topic
        self.store_topics = dict(store_topics)
        self.restore_consumer = restore_consumer
        self.on_progress = on_progress
        self.restores = 0
        """Restores begun by this worker (every one but the first renews the admin client)."""
        self.from_checkpoint = False
        """The last restore trusted the local stores (a clean stop's checkpoint)."""

    def rebuild(self, opened: OpenState, clients: TaskClients, reads: Reads,
                restoring: Callable[[], None], attempts: int = 3) -> Identity:
        """:meth:`restore` into ``opened``, retried on a substrate failure.

        A rebuild (every restore but the first) follows a rebalance or an abort, often a
        broker restart, after which an AdminClient can keep answering with stale leader
        metadata (``FENCED_LEADER_EPOCH`` on every offset listing until its restore
        deadline): each one, and each retry, renews the admin client first.

        Args:
            restoring: called before each attempt (the worker reports ``RESTORING``).
            attempts: tries for a substrate failure.

        Raises:
            As :meth:`restore`, after ``attempts`` tries for a substrate failure.
        """
        for attempt in range(1, attempts + 1):
            restoring()
            opened.close()
            if self.restores:
                clients.renew_admin()
            self.restores += 1
            # The restore's describes and offset listings wait for the controller or the
            # group coordinator: none is asked of a cluster that does not answer
            # (workers.admin.cluster_answers); the caller's recovery backs off instead.
            why = cluster_answers(clients.admin, self.ordering_topic)
            if why is not None:
                raise SubstrateError(ErrorKind.SUBSTRATE_TRANSIENT,
                                     f"restoring {self.ordering_topic}[{self.task}]: {why}")
            try:
                return self.restore(opened, clients.admin, clients.identity, reads.ends,
                                    reads.floors)
            except SubstrateError as exc:
                if attempt == attempts or stop_kind(exc) is StopKind.FATAL:
                    raise
                log.warning("%s task %d: restoring failed (%s); retrying with a fresh admin "
                            "client", self.app_id, self.task, exc.detail)
        raise AssertionError("attempts must be >= 1")

    def restore(self, opened: OpenState, admin: AdminClient, identity: IdentityChecker,
                read_ends: dict[tuple[str, int], int],
                read_floors: dict[tuple[str, int], int]) -> Identity:
        """Every step in order, into ``opened`` (closed first); ``opened.engine`` is set
        once the last step succeeded (docs/architecture.md, "The worker", "Restore").

        Raises:
            ParsleyFailClosedError: the engine's restore refusals, CHANNEL_IDENTITY_CHANGED,
                CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES; ORDERING_STATE_LOST or
                TASK_WIDTH_CHANGED for a store changelog (workers.store_changelogs).
            SubstrateError: a changelog read failed or stalled.
        """
        opened.close()
        trusted = self.from_checkpoint = self.trusted_checkpoint(admin)
        if trusted:  # the local stores are the changelogs' (workers.checkpoint)
            opened.store = SqliteOrderingStore(self.dir / "ordering.sqlite")
        else:
            opened.store = SqliteOrderingStore.create(self.dir)
            self.read_ordering(opened.store, admin)
        engine = self.engine(opened.store)
        store_ids = self.store_ids(admin, engine)
        opened.stores = TaskStores(store_cache_factory(self.dir, kept=trusted),
                                   self.store_topics)
        if not trusted:
            self.read_stores(opened.stores, admin)
        found = self.bind(engine, identity, store_ids, read_ends, read_floors)
        opened.engine = engine
        return found

    # -- the checkpoint of a clean stop (workers.checkpoint) ---------------------------

    def changelog_partitions(self) -> list[tuple[str, int]]:
        """The task's partition of the ordering changelog and of each store changelog."""
        return [(t, self.task) for t in (self.ordering_topic, *self.store_topics.values())]

    def local_files(self) -> list[str]:
        """The task's local store files (:mod:`workers.ordering_store`)."""
        return ["ordering.sqlite", *(f"store-{n}.sqlite" for n in self.store_topics)]

    def trusted_checkpoint(self, admin: AdminClient) -> bool:
        """Take the checkpoint of the last clean stop, if any, and say whether the local
        stores may be used as they are (:meth:`workers.checkpoint.Checkpoint.mismatch`).

        Raises:
            SubstrateError: listing the changelogs failed (the checkpoint is gone: the
                retry restores in full).
        """
        taken = checkpoint.take(self.dir)
        if taken is None:
            return False
        now = checkpoint.listed(admin, self.changelog_partitions())
        why = None if now is None else taken.mismatch(
            self.dir, now, self.changelog_partitions(), self.local_files())
        if why is not None:
            log.info("%s task %d: the checkpoint of the last clean stop is not trusted (%s); "
                     "restoring from the changelogs", self.app_id, self.task, why)
            return False
        log.info("%s task %d: the local stores equal the changelogs as the last clean stop "
                 "left them (checkpoint): no changelog read", self.app_id, self.task)
        return True

    def stop_ends(self, admin: AdminClient) -> list[checkpoint.ChangelogEnd] | None:
        """After a clean stop's last commit: each changelog partition's end, once no
        transaction is open on it (at most 2 s); ``None`` when one stays open."""
        ends = checkpoint.listed(admin, self.changelog_partitions(), settle_s=2.0)
        if ends is None:
            return None
        return [checkpoint.ChangelogEnd(t, i, p, start, end)
                for (t, p), (i, start, end) in ends.items()]

    def write_checkpoint(self, ends: list[checkpoint.ChangelogEnd]) -> None:
        """Record the checkpoint (the local stores closed); a failure is logged only."""
        try:
            checkpoint.write(self.dir, ends, self.local_files())
        except OSError as exc:
            log.warning("%s task %d: no checkpoint written (%s); the next start restores "
                        "from the changelogs", self.app_id, self.task, exc)

    def read_ordering(self, store: SqliteOrderingStore, admin: AdminClient) -> None:
        """Rebuild ``store`` from the task's ordering-changelog partition.

        Raises:
            ParsleyFailClosedError: ``ORDERING_STATE_LOST`` (:meth:`check_state_not_lost`).
            SubstrateError: the read failed or stalled.
        """
        read = 0

        def counted(rows: Iterable[Any]) -> Iterator[Any]:
            nonlocal read
            for row in rows:
                read += 1
                yield row

        store.rebuild(counted(read_partition(
            self.restore_consumer, admin, self.ordering_topic, self.task,
            on_progress=self.on_progress)))
        if read == 0:
            self.check_state_not_lost(admin)

    def engine(self, store: SqliteOrderingStore) -> ProcessEngine:
        """The engine over the restored ``store``."""
        spec = self.spec
        engine: ProcessEngine = engine_type()(
            store, received=self.channels.values(),
            budget_bytes=spec.metadata_budget_bytes, on_warning=log.warning,
            cross_partition=cross_partition_policy(
                {t: spec.partitions[t] for t in spec.process.received_topics},
                spec.cross_partition_causes))
        return engine

    def store_ids(self, admin: AdminClient, engine: ProcessEngine) -> dict[str, Any]:
        """Judge the store changelogs the state binds: each must still hold what was
        written (``ORDERING_STATE_LOST``, ``TASK_WIDTH_CHANGED``); returns their ids."""
        return check_task_store_changelogs(
            admin, list(self.store_topics.values()), engine.names(), self.task,
            self.spec.task_count, app_id=self.app_id)

    def read_stores(self, stores: TaskStores, admin: AdminClient) -> None:
        """Rebuild each declared store from its changelog partition."""
        for name, topic in self.store_topics.items():
            stores.rebuild(name, read_partition(
                self.restore_consumer, admin, topic, self.task, on_progress=self.on_progress))

    def bind(self, engine: ProcessEngine, identity: IdentityChecker, store_ids: Mapping[str, Any],
             read_ends: dict[tuple[str, int], int],
             read_floors: dict[tuple[str, int], int]) -> Identity:
        """Bind the received topics' and stores' names, and run the identity check.

        Raises:
            ParsleyFailClosedError: CHANNEL_IDENTITY_CHANGED,
                CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES.
            CallStalled: the identity check's describes (answers awaited in Python) took
                longer than the ``describe_topics`` bound (:func:`workers.calls.awaiting`):
                the restore is retried with a fresh admin client, then the worker recovers
                in place (docs/operations.md, "Bounded client calls" and "The task timeout").
        """
        spec = self.spec
        engine.bind_names({t: spec.topic_ids[t] for t in self.channels} | dict(store_ids))
        ids = engine.known_topic_ids()
        bindings = {n: i for n, i in engine.names().items() if i in ids}
        with awaiting("describe_topics"):
            result = identity.check(bindings)
        apply_received_verdicts(engine, result.verdicts, self.channels, read_ends, read_floors)
        learned: bool | None = None
        unnamed = engine.unnamed_topic_ids()
        if unnamed:
            # Names of upstream ids are learned while alive, so that their deletion can
            # be confirmed and their frontier entries pruned (docs/model.md, "Pruning").
            before = len(engine.names())
            engine.learn_names(identity.learn_names(unnamed, engine.names()))
            learned = len(engine.names()) > before
        return Identity(learned, dict(result.pending))

    def check_state_not_lost(self, admin: AdminClient) -> None:
        """Refuse ``ORDERING_STATE_LOST`` when the group has positions the bootstrap did not
        write while this task's ordering-changelog partition holds no records.

        The bootstrap's rule (docs/failing-closed.md, ``ORDERING_STATE_LOST``), applied
        at every rebuild of the engine, so a partition emptied under a live process is
        refused, not restarted from empty state. Called only when the partition read no
        records; the open transaction was aborted, so the offsets settle.

        Raises:
            ParsleyFailClosedError: ``ORDERING_STATE_LOST``.
            SubstrateError: the offsets could not be listed, or stayed unstable for
                :data:`STABLE_OFFSETS_DEADLINE_S`.
        """
        committed = self.group_committed(admin)
        suspects = lost_positions(committed, [0] * (self.task + 1))
        if suspects:
            raise ordering_state_lost(suspects[0], self.ordering_topic, True, self.app_id)

    def group_committed(self, admin: AdminClient) -> dict[tuple[str, int], tuple[int, str]]:
        """The group's stable committed positions of this task's partitions, with metadata,
        through the AdminClient (no consumer exists during a first restore), each call
        bounded by :data:`workers.admin.ADMIN_CALL_BOUND_S`.

        Raises:
            SubstrateError: the listing failed, got no answer, or stayed unstable.
        """
        what = "listing the group's committed offsets"
        try:
            return stable_committed_offsets(
                admin, self.app_id, [TopicPartition(t, p) for t, p in sorted(self.expected)],
                deadline_s=STABLE_OFFSETS_DEADLINE_S, retry_s=0.2,
                # Never timed out inside librdkafka: a coordinator request that times out
                # before its client reaches the coordinator aborts the process when it
                # later does (docs/operations.md, "A librdkafka abort during broker outages").
                request_timeout_s=COORDINATOR_REQUEST_TIMEOUT_S,
                answer_s=ADMIN_CALL_BOUND_S + 1,
                retry_coordinator_not_available=False)
        except KafkaException as exc:
            raise to_exception(exc, what) from exc
        except TimeoutError as exc:
            raise SubstrateError(
                ErrorKind.SUBSTRATE_TRANSIENT,
                f"listing the committed offsets of group {self.app_id} took longer than "
                f"{ADMIN_CALL_BOUND_S:g} s") from exc
        except PartitionOffsetError as exc:
            assert exc.partition.error is not None  # set whenever PartitionOffsetError is raised
            raise to_exception(exc.partition.error, what) from None
        except OffsetsStayedUnstable:
            raise SubstrateError(
                ErrorKind.SUBSTRATE_TRANSIENT,
                f"the committed offsets of group {self.app_id} stayed unstable for "
                f"{STABLE_OFFSETS_DEADLINE_S:g} s") from None
