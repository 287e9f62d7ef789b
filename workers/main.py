"""The task worker process: ``run(spec)`` builds a task's clients and state and runs its loop.

The coordinator spawns one OS process per task with the ``multiprocess``
spawn context, targeting :func:`run` with a :class:`workers.protocol.TaskSpec`.
The worker (docs/operations.md, "Running"):

1. builds a transactional producer and calls ``init_transactions`` first, which
   fences any zombie of the task and aborts its open transaction;
2. restores (``RESTORING``) the ordering store from partition ``i`` of
   ``<app-id>-__parsley.ordering-changelog`` and each declared store from
   partition ``i`` of its changelog, ``read_committed`` to the end, after
   judging the store changelog (:mod:`workers.store_changelogs`);
3. refuses ``ORDERING_STATE_LOST`` when its ordering-changelog partition held no
   records while the group has positions the bootstrap did not write (at every
   rebuild, not only the first); builds the engine over it, binds the received
   topic names to the ids the bootstrap resolved, and runs the identity check
   (docs/model.md, "Pruning");
4. joins group ``<app-id>`` as static member ``<app-id>-task-<i>`` with the
   range assignor; unless its assignment is exactly partition ``i`` of each
   received topic with more than ``i`` partitions it processes nothing and
   reports ``REBALANCING``; on the exact assignment it starts the engine at the
   group's committed offsets (``RUNNING``);
5. loops: consume a batch (up to 500, sized to the handler's measured cost:
   :mod:`workers.pacing`), feed, drain, commit once per commit interval and
   whenever the transaction has been open half of ``transaction.timeout.ms``
   (also between two deliveries of one drain, which then returns to the loop:
   a long drain runs in passes of at most one status interval, the loop
   consuming and reporting between them) (read positions past trailing
   transaction markers once a partition is consumed to its end, with the
   metadata ``parsley.task``); every status interval it drains, retries a
   pending identity check, checks partition counts (every 2 s) and its received
   topics' identities (every 10 s, :mod:`workers.identity`), refuses a member of
   the group that is not one of the process's tasks (``SUBSTRATE_MISCONFIGURED``),
   commits positions that moved past markers since the last commit, and pushes
   status over ZeroMQ.

Every blocking client call runs under the watchdog (:mod:`workers.watchdog`):
past its bound, or still blocked 5 s after SIGTERM, the task reports SUBSTRATE
naming the call and exits; on the coordinator's death it exits at once without
committing (docs/operations.md, "Bounded client calls", "When the coordinator dies").

It stops on SIGTERM (commits what it has, exit 0), on a refusal (aborts,
logs ERROR ``... (failing closed)``, exit ``64 + index of the reason``, so the
coordinator can name the reason even if the final report is lost), a handler
failure (exit 11), a substrate condition (exit 12) or a fenced/fatal client
(exit 13), pushing one
``final`` message first (:mod:`workers.protocol`). An abortable Kafka error
aborts, rebuilds the state from the changelogs and rewinds to the committed
offsets, then goes on.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import psutil
from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from parsley.declarations import (
    application_id,
    group_instance_id,
    ordering_changelog,
    store_changelog,
)
from parsley.engine import engine_type
from parsley.engine.channel import ChannelId
from parsley.engine.engine import ProcessEngine, TopicVerdict, cross_partition_policy
from parsley.refusals import ParsleyFailClosedError, Reason
from workers.assignment import IncompleteAssignment
from workers.changelog import RestoreProgress, read_partition
from workers.client_log import serve_client_logs, with_task_logger
from workers.fetched import split_errors
from workers.frame import HandlerFailure, HandlerFrame
from workers.histogram import HANDLER_BUCKETS_S, BucketCounts
from workers.identity import (
    RECEIVED_CHECK_INTERVAL_S,
    Backoff,
    IdentityChecker,
    apply_received_verdicts,
    settled_detail,
)
from workers.kafka_config import (
    DEFAULT_SESSION_TIMEOUT_MS,
    TRANSACTION_TIMEOUT_MS,
    admin_config,
    consumer_config,
    producer_config,
    restore_consumer_config,
)
from workers.kafka_errors import (
    ErrorKind,
    SubstrateError,
    classify,
    kafka_error_of,
    stop_kind,
    to_exception,
)
from workers.memory import HeapTrimmer, heap_trimmer
from workers.offsets import positions_past_markers, resolve_offset_reset
from workers.ordering_store import SqliteOrderingStore, task_state_dir
from workers.pacing import BATCH_TARGET_FRACTION, MAX_BATCH, BatchSizer, close_after_s
from workers.positions import (
    Member,
    foreign_member_refusal,
    foreign_members,
    lost_positions,
    ordering_state_lost,
)
from workers.protocol import StopKind, TaskSpec, TaskState, exit_code_for
from workers.status import (
    StatusReporter,
    cached_lag,
    final_message,
    push_final,
    status_fields,
)
from workers.step import TaskStep
from workers.store_changelogs import check_task_store_changelogs
from workers.stores import TaskStores
from workers.transaction import TaskTransaction
from workers.watchdog import Action, ActionKind, Watchdog, bounded, install

__all__ = ["Stop", "Worker", "run"]

log = logging.getLogger("parsley.worker")

BATCH: Final = MAX_BATCH
"""Most records per ``consume`` call (fewer for a slow handler: :class:`BatchSizer`)."""
MAX_ABORTABLE_RETRIES: Final = 5
"""Consecutive abortable failures (without a commit between) before the worker gives up."""
SUCCESSOR_WAIT_S: Final = 2 * DEFAULT_SESSION_TIMEOUT_MS / 1000.0
"""How long a worker fenced after a long transaction looks for a successor in the group, s:
a successor joins after its ``init_transactions`` and its restore."""
SHAPE_CHECK_INTERVAL_S: Final = 2.0
"""How often the received topics' partition counts are compared with the bootstrap's, s."""
GROUP_CHECK_INTERVAL_S: Final = 2.0
"""How often the group's members are described for a foreign member, s."""
FOREIGN_MEMBER_GRACE_S: Final = 2.0
"""How long a foreign member may be seen in the group before the refusal, s: with the
check's interval, a foreign member is refused within about one session timeout (6 s)."""
ADMIN_CALL_BOUND_S: Final = 10.0
"""Our own bound on a punctuation's or a rebuild's admin call (its future), s."""
STABLE_OFFSETS_DEADLINE_S: Final = 15.0
"""How long a rebuild waits for the group's committed offsets to be stable, s."""
SETTLED_STOP_GRACE_S: Final = 20.0
"""How long a task runs on after settling a deleted received topic it held nothing from,
s: longer than a sibling task's check interval plus its corroboration (10 s + 1.5 s), so
a sibling holding messages from the topic refuses first (docs/failing-closed.md)."""


class Stop(Exception):
    """How the worker ends: a stop kind, a refusal reason, a detail."""

    def __init__(self, kind: StopKind, reason: Reason | None, detail: str | None) -> None:
        super().__init__(f"{kind.value}: {detail}")
        self.kind = kind
        self.reason = reason
        self.detail = detail


def stop_of(exc: BaseException) -> Stop:
    """Classify an exception into the worker's :class:`Stop` (never from message text).

    ``ParsleyFailClosedError`` (anywhere on the cause chain) -> REFUSAL with its
    reason; ``HandlerFailure`` -> APPLICATION; ``SubstrateError``/``KafkaException``
    -> FATAL (fenced or fatal) or SUBSTRATE; any other exception is a worker bug,
    reported FATAL so that it is never restarted blindly.
    """
    if isinstance(exc, Stop):
        return exc
    refusal = ParsleyFailClosedError.find_in(exc)
    if refusal is not None:
        return Stop(StopKind.REFUSAL, refusal.reason, refusal.detail)
    if isinstance(exc, HandlerFailure):
        return Stop(StopKind.APPLICATION, None, str(exc))
    if not isinstance(exc, SubstrateError) and kafka_error_of(exc) is not None:
        # A KafkaException, or an exception carrying one on its cause chain: confluent-kafka
        # raises SystemError "<callback> returned a result with an exception set" from a
        # flush whose delivery callback ran while the client's own error (e.g. _FENCED) was
        # pending; the Kafka error beneath it is what happened.
        exc = to_exception(kafka_error_of(exc) or exc)
    if isinstance(exc, SubstrateError):
        return Stop(stop_kind(exc) or StopKind.SUBSTRATE, None, exc.detail)
    return Stop(StopKind.FATAL, None, f"worker error {type(exc).__name__}: {exc}")


class Worker:
    """One task's worker: clients, state, loop. Built and run by :func:`run`.

    Args:
        spec: the task's spec.
        reporter: where status goes (``None``: nowhere, for in-process use).
        should_stop: returns ``True`` once a clean stop was asked for (SIGTERM).
    """

    def __init__(
        self,
        spec: TaskSpec,
        reporter: StatusReporter | None,
        should_stop: Callable[[], bool],
    ) -> None:
        self.spec = spec
        self.reporter = reporter
        self.should_stop = should_stop
        process = spec.process
        self.process = process
        self.app_id = application_id(spec.prefix, process.name)
        self.task = spec.task
        self.state = TaskState.STARTING
        self.received = list(process.received_topics)
        self.expected = frozenset(
            (t, self.task) for t in self.received if spec.partitions[t] > self.task
        )
        self.channels = {
            t: ChannelId(spec.topic_ids[t], self.task) for t, _ in sorted(self.expected)
        }
        self.ordering_topic = ordering_changelog(spec.prefix, process.name)
        self.store_topics = {
            s.name: store_changelog(spec.prefix, process.name, s.name)
            for s in process.declared_stores
        }
        self.dir = task_state_dir(spec.state_dir, self.app_id, self.task)
        # librdkafka's lines through logging, naming the task (workers.client_log).
        self.client_props = props = with_task_logger(spec.kafka_properties, self.app_id,
                                                     self.task)
        W = spec.task_count
        self.admin = AdminClient(admin_config(spec.bootstrap_servers, props))
        self.producer = Producer(producer_config(
            spec.bootstrap_servers, spec.prefix, process.name, self.task, props, task_count=W))
        self.txn = TaskTransaction(self.producer)
        self.restore_consumer = Consumer(restore_consumer_config(
            spec.bootstrap_servers, spec.prefix, process.name, self.task, props, task_count=W))
        self.consumer_conf = consumer_config(
            spec.bootstrap_servers, spec.prefix, process.name, self.task, props, task_count=W)
        self.consumer: Consumer | None = None
        self.identity = IdentityChecker(self.admin)
        self.backoff = Backoff(first_s=spec.status_interval_ms / 1000.0)
        self.pending_identity: dict[str, Any] = {}
        self.names_learned = False
        self.store: SqliteOrderingStore | None = None
        self.stores: TaskStores | None = None
        self.engine: ProcessEngine | None = None
        self.step: TaskStep | None = None
        self.restore: dict[str, RestoreProgress] = {}
        self.assignment: frozenset[tuple[str, int]] = frozenset()
        self.assignment_changed = False
        self.incomplete = IncompleteAssignment()
        self.needs_rebuild = False
        self.callback_error: BaseException | None = None
        self.delivered_before = 0
        self.commits_before = 0
        self.fed_committed = 0
        """Records fed in transactions that committed, over every step of this worker."""
        self._fed_mark = 0  # the current step's ``fed`` at its last commit
        self._commit_s = 0.0  # time spent in :meth:`_commit`, s (taken out of drain timing)
        self.handler_latency = BucketCounts(HANDLER_BUCKETS_S)
        """Per drain pass, its time per delivered message (see :meth:`_drain`)."""
        self.abortable_in_a_row = 0
        self.next_shape_check = 0.0
        self.next_received_check = 0.0
        self.settled: tuple[float, str] | None = None  # (when, detail): a deletion settled
        self.start_positions: dict[tuple[str, int], int] = {}
        self.read_positions: dict[tuple[str, int], int] = {}
        # Past the last record fed, over the process's life (TaskStep.read_ends): what an
        # aborted read reached, for the deletion check (identity.unread_on_deleted).
        self.read_ends: dict[tuple[str, int], int] = {}
        # The highest committed read position seen at a start in this life: nothing below
        # it was read uncommitted by this process (identity.unread_on_deleted).
        self.read_floors: dict[tuple[str, int], int] = {}
        me = psutil.Process()
        self._trim = HeapTrimmer(heap_trimmer(), lambda: int(me.memory_info().rss))
        self.restores = 0
        self.next_group_check = 0.0
        self.own_members = frozenset(
            group_instance_id(spec.prefix, process.name, t, W) for t in range(W))
        self.foreign_seen: dict[str, float] = {}
        self.member_fenced = False
        """Whether the consumer reported its static member fenced or failed (see
        :func:`_timed_out`)."""
        self.sizer = BatchSizer(close_after_s(TRANSACTION_TIMEOUT_MS) * BATCH_TARGET_FRACTION)

    # -- state -------------------------------------------------------------------

    def _progress(self, p: RestoreProgress) -> None:
        self.restore[p.topic] = p
        self._maybe_status()

    def build_state(self, attempts: int = 3) -> None:
        """:meth:`restore_state`, retried with a fresh AdminClient on a substrate failure.

        After a broker restart an AdminClient can keep answering with stale leader
        metadata (``FENCED_LEADER_EPOCH`` on every offset listing until its restore
        deadline); a new client fetches fresh metadata.

        Raises:
            As :meth:`restore_state`, after ``attempts`` tries for a substrate failure.
        """
        for attempt in range(1, attempts + 1):
            try:
                self.restore_state()
                return
            except SubstrateError as exc:
                if attempt == attempts or stop_kind(exc) is StopKind.FATAL:
                    raise
                log.warning("%s task %d: restoring failed (%s); retrying with a fresh admin "
                            "client", self.app_id, self.task, exc.detail)

    def _fresh_admin(self) -> None:
        self.admin = AdminClient(admin_config(self.spec.bootstrap_servers,
                                              self.client_props))
        self.identity = IdentityChecker(self.admin)

    def restore_state(self) -> None:
        """Restore the ordering store and the declared stores from partition ``i`` of their
        changelogs, build the engine, bind names and run the identity check.

        Raises:
            ParsleyFailClosedError: the engine's restore refusals, CHANNEL_IDENTITY_CHANGED,
                CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES; ORDERING_STATE_LOST or
                TASK_WIDTH_CHANGED for a store changelog (workers.store_changelogs).
            SubstrateError: a changelog read failed or stalled.
        """
        self.state = TaskState.RESTORING
        self.restore = {}
        self._close_state()
        spec = self.spec
        if self.restores:
            # A rebuild follows a rebalance or an abort, often a broker restart: a fresh
            # AdminClient has fresh leader metadata (see build_state).
            self._fresh_admin()
        self.restores += 1
        self.store = SqliteOrderingStore.create(self.dir)
        read = 0

        def counted(rows: Any) -> Any:
            nonlocal read
            for row in rows:
                read += 1
                yield row

        self.store.rebuild(counted(read_partition(
            self.restore_consumer, self.admin, self.ordering_topic, self.task,
            on_progress=self._progress)))
        if read == 0:
            self._check_state_not_lost()
        engine: ProcessEngine = engine_type()(
            self.store, received=self.channels.values(),
            budget_bytes=spec.metadata_budget_bytes, on_warning=log.warning,
            cross_partition=cross_partition_policy(
                {t: spec.partitions[t] for t in self.received},
                spec.cross_partition_causes))
        # A store changelog the state binds must still hold what was written (ORDERING_STATE_LOST).
        store_ids = check_task_store_changelogs(
            self.admin, list(self.store_topics.values()), engine.names(), self.task,
            spec.task_count, app_id=self.app_id)
        self.stores = TaskStores(self.dir, self.store_topics)
        for name, topic in self.store_topics.items():
            self.stores.rebuild(name, read_partition(
                self.restore_consumer, self.admin, topic, self.task, on_progress=self._progress))
        engine.bind_names({t: spec.topic_ids[t] for t in self.channels} | store_ids)
        ids = engine.known_topic_ids()
        bindings = {n: i for n, i in engine.names().items() if i in ids}
        with bounded("describe_topics"):
            result = self.identity.check(bindings)
        apply_received_verdicts(engine, result.verdicts, self.channels, self.read_ends,
                                self.read_floors)
        unnamed = engine.unnamed_topic_ids()
        if unnamed:
            # Names of upstream ids are learned while alive, so that their deletion can
            # be confirmed and their frontier entries pruned (docs/model.md, "Pruning").
            before = len(engine.names())
            engine.learn_names(self.identity.learn_names(unnamed, engine.names()))
            self.names_learned = len(engine.names()) > before
        self.pending_identity = dict(result.pending)
        if self.pending_identity:
            self.backoff.failed(time.monotonic())
        self.engine = engine
        frame = HandlerFrame(self.process, self.task, self.stores)
        if self.step is not None:
            # Only what was committed: an aborted transaction's deliveries are made again.
            self.delivered_before += self.step.delivered_committed
        self._fed_mark = 0
        self.step = TaskStep(
            task=self.task, engine=engine, frame=frame, stores=self.stores, txn=self.txn,
            channels=self.channels, ordering_topic=self.ordering_topic,
            store_topics=self.store_topics,
            close_after_s=close_after_s(TRANSACTION_TIMEOUT_MS), close=self._commit,
            pass_s=self.spec.status_interval_ms / 1000.0, read_ends=self.read_ends)
        self.needs_rebuild = False
        self.state = TaskState.REBALANCING

    def _check_state_not_lost(self) -> None:
        """Refuse ``ORDERING_STATE_LOST`` when the group has positions the bootstrap did not
        write while this task's ordering-changelog partition holds no records.

        The bootstrap's rule (docs/failing-closed.md, ``ORDERING_STATE_LOST``),
        applied at every rebuild of the engine (first start, crash respawn,
        abort-and-rebuild, rebalance), so a partition emptied under a live process
        is refused, not restarted from empty state. Called only when the partition
        read no records; the open transaction was aborted (``init_transactions``
        or the abort before a rebuild), so the offsets settle.

        Raises:
            ParsleyFailClosedError: ``ORDERING_STATE_LOST``.
            SubstrateError: the offsets could not be listed, or stayed unstable for
                :data:`STABLE_OFFSETS_DEADLINE_S`.
        """
        committed = self._group_committed()
        suspects = lost_positions(committed, [0] * (self.task + 1))
        if suspects:
            raise ordering_state_lost(suspects[0], self.ordering_topic, True, self.app_id)

    def _group_committed(self) -> dict[tuple[str, int], tuple[int, str]]:
        """The group's stable committed positions of this task's partitions, with metadata,
        through the AdminClient (no consumer exists during a first restore), each call
        bounded by :data:`ADMIN_CALL_BOUND_S`."""
        tps = [TopicPartition(t, p) for t, p in sorted(self.expected)]
        deadline = time.monotonic() + STABLE_OFFSETS_DEADLINE_S
        while True:
            try:
                request = [ConsumerGroupTopicPartitions(self.app_id, tps)]
                future = self.admin.list_consumer_group_offsets(
                    request, require_stable=True, request_timeout=ADMIN_CALL_BOUND_S)[self.app_id]
                result = future.result(timeout=ADMIN_CALL_BOUND_S + 1)
            except KafkaException as exc:
                err = kafka_error_of(exc)
                if err is None or err.code() not in (KafkaError.UNSTABLE_OFFSET_COMMIT,
                                                     KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                                     KafkaError.NOT_COORDINATOR):
                    raise to_exception(exc, "listing the group's committed offsets") from exc
            except TimeoutError as exc:
                raise SubstrateError(
                    ErrorKind.SUBSTRATE_TRANSIENT,
                    f"listing the committed offsets of group {self.app_id} took longer than "
                    f"{ADMIN_CALL_BOUND_S:g} s") from exc
            else:
                out: dict[tuple[str, int], tuple[int, str]] = {}
                unstable = False
                for tp in result.topic_partitions:
                    if tp.error is not None:
                        if tp.error.code() != KafkaError.UNSTABLE_OFFSET_COMMIT:
                            raise to_exception(tp.error, "listing the group's committed offsets")
                        unstable = True
                        continue
                    if tp.offset >= 0:
                        out[(tp.topic, tp.partition)] = (tp.offset, tp.metadata or "")
                if not unstable:
                    return out
            if time.monotonic() > deadline:
                raise SubstrateError(
                    ErrorKind.SUBSTRATE_TRANSIENT,
                    f"the committed offsets of group {self.app_id} stayed unstable for "
                    f"{STABLE_OFFSETS_DEADLINE_S:g} s")
            time.sleep(0.2)

    def _close_state(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None
        if self.stores is not None:
            self.stores.close()
            self.stores = None
        self.engine = None

    def _committed(self) -> dict[tuple[str, int], int]:
        assert self.consumer is not None
        tps = [TopicPartition(t, p) for t, p in sorted(self.expected)]
        try:
            with bounded("committed"):
                got = self.consumer.committed(tps, timeout=30)
        except KafkaException as exc:
            raise to_exception(exc, "reading the group's committed offsets") from exc
        return {(tp.topic, tp.partition): tp.offset for tp in got}

    def start_engine(self, *, seek: bool) -> None:
        """Start the engine at the group's committed read positions (and rewind to them)."""
        assert self.engine is not None and self.consumer is not None
        committed = self._committed()
        self.start_positions = dict(committed)
        for key, off in committed.items():
            if off > self.read_floors.get(key, -1):
                self.read_floors[key] = off
        self.read_positions = {k: v for k, v in committed.items() if v >= 0}
        self.engine.start({
            self.channels[t]: off for (t, _p), off in committed.items()
            if off != OFFSET_INVALID and off >= 0
        })
        if seek:
            for (t, p), off in committed.items():
                if off >= 0:
                    self.consumer.seek(TopicPartition(t, p, off))
        self.state = TaskState.RUNNING
        self.incomplete.running()
        if self.names_learned and self.step is not None:
            # Learned names are committed even when nothing arrives: an id that dies
            # before the next step would otherwise be unnamed again at the next start.
            self.step.touch()
            self.names_learned = False
        log.info("%s task %d running from committed positions %s", self.app_id, self.task,
                 {f"{t}-{p}": o for (t, p), o in committed.items()})
        # Say so now, not at the next status period: an operator (and the coordinator's
        # view) sees the task running as soon as it is.
        self._maybe_status(force=True)

    # -- group membership ----------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assignment = frozenset((tp.topic, tp.partition) for tp in partitions)
        self.assignment_changed = True
        log.info("%s task %d assigned %s", self.app_id, self.task,
                 [f"{tp.topic}-{tp.partition}" for tp in partitions])
        if not partitions:
            return
        if self.assignment != self.expected:
            consumer.pause(partitions)
        else:
            consumer.resume(partitions)  # a pause from an earlier assignment must not stick

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info("%s task %d revoked %s", self.app_id, self.task,
                 [f"{tp.topic}-{tp.partition}" for tp in partitions])
        if self.engine is not None and self.engine.started:
            self.needs_rebuild = True
        try:
            self.txn.abort()
        except BaseException as exc:  # re-raised from the loop
            self.callback_error = exc
        if self.stores is not None:
            self.stores.discard()
        self.assignment = frozenset()
        self.assignment_changed = True
        self.state = TaskState.REBALANCING

    def _handle_assignment(self) -> None:
        self.assignment_changed = False
        if self.assignment != self.expected:
            self.state = TaskState.REBALANCING
            level = self.incomplete.assigned(bool(self.assignment), time.monotonic())
            if level is not None:  # INFO at a start: the siblings are still joining
                log.log(level, "%s task %d was assigned %s, not exactly %s: processing nothing "
                        "until the missing members %s", self.app_id, self.task,
                        sorted(self.assignment), sorted(self.expected),
                        "rejoin" if level == logging.WARNING else "join")
            return
        if self.needs_rebuild or self.engine is None or self.engine.started:
            self.build_state()
        self.start_engine(seek=False)

    # -- errors ----------------------------------------------------------------------

    def _consumer_error(self, err: KafkaError, msg: Any) -> None:
        code = err.code()
        if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            topic, partition = msg.topic(), msg.partition()
            if topic is None or partition is None or partition < 0:
                topic, partition = sorted(self.expected)[0]
            assert self.consumer is not None
            with bounded("offset reset check"):
                refusal = resolve_offset_reset(self.consumer, topic, partition,
                                               group_id=self.app_id, timeout_s=15.0)
            raise refusal
        if code == KafkaError._PARTITION_EOF:
            return
        verdict = classify(err)  # a fenced static member: _FATAL, fatal() false -> FATAL
        if stop_kind(verdict) is StopKind.FATAL:
            self.member_fenced = True
            raise SubstrateError(verdict.kind, f"the task's group member was fenced or failed: "
                                 f"{verdict.name}: {verdict.text}", code)
        if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
                    KafkaError._UNKNOWN_TOPIC, KafkaError.TOPIC_AUTHORIZATION_FAILED):
            if self.engine is not None and self.step is not None:
                self._before_blocking("deletion check")
                self._check_received()  # a deletion is named, and refused if messages wait
                if self.settled is not None:
                    return  # settled: the check's grace decides the stop
            raise SubstrateError(
                ErrorKind.SUBSTRATE_TRANSIENT,
                f"a received topic is missing or unreadable ({err.name()}: {err.str()}); "
                "restart the process once the topic is restored (the start re-resolves it)",
                code)
        # Transient fetch/connection errors: librdkafka retries them itself.
        log.debug("consumer error (retried by the client): %s", err)

    def _check_shape(self) -> None:
        """Stop (SUBSTRATE) when a received topic's partition count differs from the bootstrap's.

        Asks the worker's AdminClient, one topic per request (a cluster-wide listing
        costs ~0.2 s on a busy broker), never the consumer: a consumer's metadata
        request waits behind its outstanding Fetch long-poll (``fetch.wait.max.ms``),
        which stalled the loop 0.45 s per check (measured: 452 ms median through the
        consumer with a fetch outstanding, 0.7 ms through the AdminClient). Called from
        :meth:`_punctuate`, at most once per :data:`SHAPE_CHECK_INTERVAL_S` (and never
        more often than the status interval).

        Raises:
            Stop: a partition count changed (docs/runbooks.md, "A partition was added while the
                process ran").
        """
        for topic in self.received:
            try:
                with bounded("list_topics"):
                    meta = self.admin.list_topics(topic=topic, timeout=5).topics.get(topic)
            except KafkaException:
                return  # an unreachable cluster is not a shape change
            if meta is None or meta.error is not None:
                continue
            now = len(meta.partitions)
            before = self.spec.partitions[topic]
            if now != before:
                raise Stop(
                    StopKind.SUBSTRATE, None,
                    f"the partition shape of the process's topics changed while it ran: "
                    f"received topic {topic} had {before} partition(s) at start and has {now} "
                    "now; restart the process (the start re-resolves the topics and pre-commits "
                    "new partitions)")

    # -- status ----------------------------------------------------------------------

    _next_status = 0.0

    def _maybe_status(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now < self._next_status:
            return
        self._next_status = now + self.spec.status_interval_ms / 1000.0
        if self.reporter is None:
            return
        # Free heap back to the system first, so the status's rss_bytes is what is in use
        # (workers.memory: glibc keeps a burst's freed records otherwise).
        self._trim.maybe(now)
        self.reporter.status(self.state, self.status_fields())

    def _lag(self) -> int | None:
        if self.consumer is None or self.state is not TaskState.RUNNING:
            return None
        return cached_lag(self.consumer, self.expected, self.start_positions)

    def status_fields(self) -> dict[str, Any]:
        """The ``status`` message's fields besides kind, process, task, pid, sent_ms, state,
        rss and cpu (:mod:`workers.protocol`; built by :func:`workers.status.status_fields`)."""
        return status_fields(
            engine=self.engine, budget_bytes=self.spec.metadata_budget_bytes,
            restore=self.restore,
            delivered=self.delivered_before + (self.step.delivered if self.step else 0),
            lag=self._lag(), commits=self.txn.commits,
            commit_latency_ms=self.txn.last_commit_ms) | {"metrics": self.metric_fields()}

    def metric_fields(self) -> dict[str, Any]:
        """This worker's counters and histograms, the ``metrics`` field of its status and
        final messages (:mod:`workers.protocol`; docs/operations.md, "Metrics").

        Each counts from this worker's start and never decreases; the coordinator adds
        up the task's successive workers. ``received`` and ``delivered`` count what
        committed transactions carry (an aborted transaction's records are fed and
        delivered again, and counted then).
        """
        step = self.step
        return {
            "received": self.fed_committed,
            "delivered": self.delivered_before + (step.delivered_committed if step else 0),
            "commits": self.txn.commits,
            "aborts": self.txn.aborts,
            "transaction_seconds": self.txn.durations.to_json(),
            "handler_seconds": self.handler_latency.to_json(),
        }

    # -- the loop ----------------------------------------------------------------------

    def _punctuate(self) -> None:
        """The status punctuation: drain, then the slow checks, then the status push.

        No blocking network call runs while a transaction is open (transaction.timeout.ms
        is 10 s; an identity describe may wait up to 15 s plus its 500 ms-spaced
        corroboration, a shape check up to 5 s): what was fed and delivered is committed
        first (:meth:`_before_blocking`), and the checks that may open a transaction again
        (an identity verdict's deltas, the final drain) come after them. The lag in the
        status reads cached watermarks only (:meth:`_lag`).
        """
        now = time.monotonic()
        serve_client_logs(self.admin, self.producer, self.restore_consumer)
        step = self.step
        running = self.state is TaskState.RUNNING and step is not None
        if running:
            assert step is not None
            self._drain()
        if now >= self.next_shape_check and self.consumer is not None:
            self.next_shape_check = now + max(SHAPE_CHECK_INTERVAL_S,
                                              self.spec.status_interval_ms / 1000.0)
            self._before_blocking("shape check")
            self._check_shape()
        if now >= self.next_group_check and self.consumer is not None:
            self.next_group_check = now + max(GROUP_CHECK_INTERVAL_S,
                                              self.spec.status_interval_ms / 1000.0)
            self._before_blocking("group check")
            self._check_group(now)
        if step is not None and self.engine is not None and now >= self.next_received_check:
            self.next_received_check = now + RECEIVED_CHECK_INTERVAL_S
            self._before_blocking("deletion check")
            self._check_received()
        if running and self.pending_identity and self.backoff.due(now):
            assert self.engine is not None and step is not None
            self._before_blocking("identity check")
            with bounded("describe_topics"):
                result = self.identity.check(self.pending_identity)
            gone = None
            if result.verdicts:
                # A pending received topic judged deleted now is weighed as the running
                # check weighs it (held, read past coverage, or settled).
                gone = apply_received_verdicts(self.engine, result.verdicts, self.channels,
                                               self.read_ends, self.read_floors)
                step.touch()
            self.pending_identity = dict(result.pending)
            if self.pending_identity:
                self.backoff.failed(time.monotonic())
            self._drain()
            if gone is not None:
                self._commit()
                self._settled(gone)
        if running:
            self._commit_past_markers()
        self._maybe_status()

    def _check_received(self) -> None:
        """The running task's identity check of its received topics (workers.identity).

        Raises:
            ParsleyFailClosedError: CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES for a
                deleted received topic whose messages are held; CHANNEL_IDENTITY_CHANGED
                for one recreated under its name.
            Stop: SUBSTRATE, :data:`SETTLED_STOP_GRACE_S` after a deleted received topic
                with nothing held was settled and what that released committed
                (docs/failing-closed.md).
        """
        assert self.engine is not None and self.step is not None
        if self.settled is not None:
            since, detail = self.settled
            if time.monotonic() - since >= SETTLED_STOP_GRACE_S:
                raise Stop(StopKind.SUBSTRATE, None, detail)
            return
        with bounded("describe_topics"):
            result = self.identity.check({t: ch.topic_id for t, ch in self.channels.items()})
        if self.state is not TaskState.RUNNING:
            # Between assignments (a deletion can revoke the topic's partitions first) the
            # engine may hold aborted feeds: judge the committed state, as initialisation does.
            gone = None
            if any(v is not TopicVerdict.ALIVE for v in result.verdicts.values()):
                self.build_state()
                gone = settled_detail(result.verdicts, self.channels)
        else:
            gone = apply_received_verdicts(self.engine, result.verdicts, self.channels,
                                           self.read_ends, self.read_floors)
            if gone is not None:
                self.step.touch()
                self._drain()
                self._commit()
        if gone is not None:
            self._settled(gone)

    def _settled(self, gone: str) -> None:
        """Stop :data:`SETTLED_STOP_GRACE_S` from now for the settled deletion ``gone``."""
        if self.settled is not None:
            return
        # A sibling task may hold messages from the topic: its refusal, within one
        # check interval, must be what the process reports, not this stop.
        self.settled = (time.monotonic(), gone)
        self.next_received_check = time.monotonic() + SETTLED_STOP_GRACE_S
        log.warning("%s task %d: %s Stopping in %g s.", self.app_id, self.task, gone,
                    SETTLED_STOP_GRACE_S)

    on_blocking: Callable[[str, bool], None] | None = None
    """A seam for tests: called as ``(what, transaction_open)`` right before each blocking
    admin call of the punctuation (``what``: ``"shape check"``, ``"group check"``,
    ``"deletion check"`` or ``"identity check"``)."""

    def _before_blocking(self, what: str) -> None:
        """Commit the open transaction, if any, before a blocking call named ``what``.

        Raises:
            SubstrateError: the commit failed (classified, as from the loop's commit).
        """
        if self.txn.open and self.step is not None and self.consumer is not None:
            self._commit()
        if self.on_blocking is not None:
            self.on_blocking(what, self.txn.open)

    def _commit(self) -> None:
        assert self.step is not None and self.consumer is not None
        step = self.step
        began = time.perf_counter()
        try:
            if self.state is TaskState.RUNNING:
                step.advance_positions(self._past_markers())
            sent = dict(step.pending_positions)
            if step.commit(self.consumer.consumer_group_metadata()):
                self.abortable_in_a_row = 0
                self.read_positions.update(sent)
                self.fed_committed += step.fed - self._fed_mark
                self._fed_mark = step.fed
        finally:
            self._commit_s += time.perf_counter() - began

    def _drain(self) -> int:
        """One :meth:`TaskStep.drain` pass, timed for the handler latency histogram.

        The pass's time, less any commit made inside it, divided by the messages it
        delivered, is counted once per delivered message: two clock reads per pass,
        nothing per message (docs/operations.md, "Metrics"). It covers the engine's
        delivery decision, the handler, its store writes and handing its sends to the
        producer.

        Returns:
            How many messages the pass delivered.
        """
        assert self.step is not None
        commit_s = self._commit_s
        began = time.perf_counter()
        count = self.step.drain()
        if count:
            spent = time.perf_counter() - began - (self._commit_s - commit_s)
            self.handler_latency.observe(max(0.0, spent) / count, count)
        return count

    def _commit_past_markers(self) -> None:
        """With no transaction open, commit positions that moved past transaction markers
        (or aborted records) after the last commit: a transaction of read positions only
        (docs/failing-closed.md, "Read positions")."""
        if self.txn.open or self.step is None or self.consumer is None:
            return
        if self._past_markers():
            self.step.touch()
            self._commit()

    def _past_markers(self) -> dict[tuple[str, int], int]:
        """Positions to commit past trailing transaction markers and aborted records
        (:func:`workers.offsets.positions_past_markers`). ``Consumer.position`` is local:
        the position of what was returned to the loop, all of which was fed."""
        assert self.consumer is not None and self.step is not None
        got = self.consumer.position([TopicPartition(t, p) for t, p in sorted(self.expected)])
        known = {**self.read_positions, **self.step.pending_positions}
        return positions_past_markers({(tp.topic, tp.partition): tp.offset for tp in got}, known)

    def _check_group(self, now: float) -> None:
        """Refuse a member of the group that is not one of the process's own tasks.

        The tasks are static members whose ``group.instance.id`` is the process's
        (:data:`own_members`); any other member takes partitions from them and may
        commit positions they never read (the group-protocol conflict of
        docs/runbooks.md, ``SUBSTRATE_MISCONFIGURED``). A member seen for
        :data:`FOREIGN_MEMBER_GRACE_S` is refused. The describe is bounded by
        :data:`ADMIN_CALL_BOUND_S`; a describe that fails or times out judges nothing.

        Raises:
            ParsleyFailClosedError: ``SUBSTRATE_MISCONFIGURED`` naming the foreign
                members' client ids and hosts.
        """
        try:
            with bounded("describe_consumer_groups"):
                future = self.admin.describe_consumer_groups(
                    [self.app_id], request_timeout=ADMIN_CALL_BOUND_S)[self.app_id]
                desc = future.result(timeout=ADMIN_CALL_BOUND_S + 1)
        except (KafkaException, TimeoutError) as exc:
            log.debug("describing group %s failed: %s", self.app_id, exc)
            return
        members = [Member(m.member_id, m.client_id, m.host, m.group_instance_id)
                   for m in (desc.members or [])]
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

    def _recover(self, exc: SubstrateError) -> None:
        """Abort, rebuild the state from the changelogs, rewind to the committed offsets."""
        self.abortable_in_a_row += 1
        if self.abortable_in_a_row > MAX_ABORTABLE_RETRIES:
            raise exc
        log.warning("%s task %d: aborting and rebuilding after an abortable error: %s",
                    self.app_id, self.task, exc.detail)
        self.txn.abort()
        if self.stores is not None:
            self.stores.discard()
        self.build_state()
        if self.assignment == self.expected:
            self.start_engine(seek=True)

    def run(self) -> None:
        """Initialise and loop until a stop; raises :class:`Stop` or the error that ended it."""
        self._maybe_status(force=True)
        self.txn.init()
        self.build_state()
        self.consumer = Consumer(self.consumer_conf)
        self.consumer.subscribe(self.received, on_assign=self._on_assign,
                                on_revoke=self._on_revoke, on_lost=self._on_revoke)
        interval = self.spec.commit_interval_ms / 1000.0
        consumer = self.consumer
        while not self.should_stop():
            try:
                self._iterate(consumer, interval)
            except SubstrateError as exc:
                if exc.kind is not ErrorKind.ABORTABLE:
                    raise
                self._recover(exc)
            except KafkaException as exc:
                mapped = to_exception(exc, "in the task's loop")
                if isinstance(mapped, SubstrateError) and mapped.kind is ErrorKind.ABORTABLE:
                    self._recover(mapped)
                else:
                    raise mapped from exc
        # Clean stop: commit what was fed and delivered, and positions past markers.
        if self.state is TaskState.RUNNING and self.step is not None:
            self._drain()
            self._commit()
            self._commit_past_markers()
        raise Stop(StopKind.CLEAN, None, None)

    def _iterate(self, consumer: Consumer, interval: float) -> None:
        txn = self.txn
        step = self.step
        draining = step is not None and step.more and self.state is TaskState.RUNNING
        if draining:
            timeout = 0.0  # a drain continues: poll the consumer, do not wait on it
        elif txn.open:
            timeout = max(0.0, min(0.1, txn.opened_at + interval - time.monotonic()))
        else:
            timeout = 0.1
        with bounded("consume"):
            messages = consumer.consume(num_messages=self.sizer.size(), timeout=timeout)
        if self.callback_error is not None:
            failure, self.callback_error = self.callback_error, None
            raise failure
        if self.assignment_changed:
            self._handle_assignment()
        elif self.state is TaskState.REBALANCING:
            waited = self.incomplete.overdue(time.monotonic())
            if waited is not None:
                log.warning("%s task %d has been assigned %s, not exactly %s, for %.0f s "
                            "since its start: processing nothing until the missing members "
                            "join", self.app_id, self.task, sorted(self.assignment),
                            sorted(self.expected), waited)
        if messages:
            good, errors = split_errors(messages)
            for msg in errors:
                self._consumer_error(msg.error(), msg)
            if good and self.state is TaskState.RUNNING:
                assert self.step is not None
                began = time.monotonic()
                self.step.feed(good)
                self.sizer.observe(self._drain(), time.monotonic() - began)
                draining = False
        if draining and self.state is TaskState.RUNNING:
            # The previous pass ended mid-drain (its time ran out or it committed): go on.
            assert step is not None and step is self.step
            self._drain()
        if txn.open and time.monotonic() - txn.opened_at >= interval:
            self._commit()
        if time.monotonic() >= self._next_status:
            self._punctuate()

    def successor_member(self, wait_s: float) -> str | None:
        """Another live member of the group with this task's ``group.instance.id``, if any.

        Asks the group (a fresh AdminClient: after a fence the old one may be stale) every
        0.5 s; each ask is bounded (``describe_consumer_groups``). A member counts as live
        only once it is still there one session timeout (plus 1 s) after it was first
        seen: a member left behind by this worker's own consumer expires by then, a
        successor heart-beats.

        Args:
            wait_s: how long to look for a candidate, s (a candidate found late is
                still given its session timeout to prove live).

        Returns:
            That member's id, or ``None`` when none proved live.
        """
        instance = self.consumer_conf["group.instance.id"]
        session_s = int(self.consumer_conf.get("session.timeout.ms",
                                               DEFAULT_SESSION_TIMEOUT_MS)) / 1000.0
        mine: str | None = None
        if self.consumer is not None:
            try:
                mine = self.consumer.memberid()
            except (KafkaException, RuntimeError):
                mine = None
        admin = AdminClient(admin_config(self.spec.bootstrap_servers,
                                         self.client_props))
        deadline = time.monotonic() + wait_s
        seen: dict[str, float] = {}
        while True:
            now = time.monotonic()
            try:
                with bounded("describe_consumer_groups"):
                    desc = admin.describe_consumer_groups(
                        [self.app_id], request_timeout=5)[self.app_id].result(timeout=10)
                present = {str(m.member_id) for m in desc.members
                           if m.group_instance_id == instance and m.member_id != mine}
                seen = {m: seen.get(m, now) for m in present}
                for member, first in seen.items():
                    if now - first >= session_s + 1.0:
                        return member
            except (KafkaException, TimeoutError) as exc:
                log.debug("describing group %s: %s", self.app_id, exc)
            if now >= deadline and not seen:
                return None
            if seen and now >= max(deadline, min(seen.values()) + session_s + 5.0):
                return None
            time.sleep(0.5)

    def close(self, clean: bool) -> None:
        """Close the clients: the consumer (static: it stays a member until its session
        times out), the producer (flushed when ``clean``) and the admin client."""
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
            with bounded("close"):
                self.producer.flush(5)
        self._close_state()


def _timed_out(outcome: Stop, worker: Worker, fenced: bool = False) -> Stop:
    """A fenced producer: its own transaction timed out (SUBSTRATE), or a successor (FATAL).

    The broker aborts a transaction open past ``transaction.timeout.ms`` and bumps the
    producer epoch, and the client then reports ``_FENCED`` exactly as for a newer
    worker of the task (librdkafka folds the broker's fencing errors into one code).
    The open transaction's age alone cannot tell them apart: a live successor may
    fence a worker whose transaction is old too, and calling that restartable would
    let two owners of a task fence each other in a restart loop. So:

    * transaction not open, or open no longer than the timeout: a successor; FATAL,
      naming the live successor when ``fenced`` (the error was a fencing one) and one
      holds the task's ``group.instance.id`` (so that a coordinator can tell the task
      moved from a failure), else as it was;
    * older: the consumer group is asked (:meth:`Worker.successor_member`) whether
      another live member holds this task's ``group.instance.id``: if so, FATAL,
      naming it; if not, the timeout explains the fencing: a substrate stop that a
      restart resolves (docs/runbooks.md, "The cluster was unreachable": "a transaction
      timeout"; docs/operations.md, "Fenced: a successor or a timeout").
    """
    if worker.member_fenced:
        return _member_fenced(outcome, worker)
    txn = worker.txn
    age_s = time.monotonic() - txn.opened_at if txn.open else 0.0
    if age_s * 1000 <= TRANSACTION_TIMEOUT_MS:
        return (_successor_stop(outcome, worker, "") if fenced else None) or outcome
    fatal = _successor_stop(outcome, worker, f" (the transaction was open {age_s:.1f} s)")
    if fatal is not None:
        return fatal
    return Stop(
        StopKind.SUBSTRATE, None,
        f"the task's transaction was open {age_s:.1f} s, past transaction.timeout.ms="
        f"{TRANSACTION_TIMEOUT_MS}, and the broker aborted it (a stalled handler or loop); "
        f"no other member holds the task's group.instance.id; nothing of it was committed; "
        f"restart: {outcome.detail}")


def _successor_stop(outcome: Stop, worker: Worker, context: str) -> Stop | None:
    """FATAL naming the live successor that holds this task's ``group.instance.id``
    (asked for up to :data:`SUCCESSOR_WAIT_S`), or ``None`` when there is none.

    A successor fences a static member by joining with its ``group.instance.id``
    (KIP-345); another worker then owns the task, so this one is not restarted.
    ``context`` is added after the id (e.g. the transaction's age).
    """
    successor = worker.successor_member(SUCCESSOR_WAIT_S)
    if successor is None:
        return None
    return Stop(
        StopKind.FATAL, None,
        f"fenced by a live successor: member {successor} of group {worker.app_id} holds "
        f"this task's group.instance.id{context}; another worker owns the task, so this "
        f"one is not restarted: {outcome.detail}")


def _member_fenced(outcome: Stop, worker: Worker) -> Stop:
    """The task's static consumer member was fenced: by a successor (FATAL) or by the
    broker itself (SUBSTRATE).

    A successor fences a static member by joining with its ``group.instance.id``
    (KIP-345), so it is then a live member of the group. After a broker restart the
    broker was also seen to fence a worker's own member with no other worker running
    ("Static consumer fenced by other consumer with same group.instance.id"): when no
    other live member holds the id within :data:`SUCCESSOR_WAIT_S`, a restart resolves
    it (docs/operations.md, "Fenced: a successor or a timeout").
    """
    fatal = _successor_stop(outcome, worker, "")
    if fatal is not None:
        return fatal
    return Stop(
        StopKind.SUBSTRATE, None,
        f"the task's static group member was fenced, but no other live member holds its "
        f"group.instance.id (the broker re-registered it, as after a broker restart); "
        f"nothing more was committed; restart: {outcome.detail}")


def _configure_logging(spec: TaskSpec) -> None:
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(
            level=logging.INFO, stream=sys.stderr,
            format=f"%(asctime)s %(levelname)s [{spec.prefix}-{spec.process.name} "
                   f"task {spec.task} pid %(process)d] %(name)s: %(message)s")


def _in_spawned_child() -> bool:
    return _spawning_parent_pid() is not None


def _spawning_parent_pid() -> int | None:
    """The pid of the coordinator that spawned this worker, or ``None`` when not spawned."""
    try:
        import multiprocess  # type: ignore[import-untyped]

        parent = multiprocess.parent_process()
    except Exception:
        return None
    return None if parent is None else parent.pid


def _start_watchdog(spec: TaskSpec, main_thread: bool) -> Watchdog:
    """Start and install the task's :class:`workers.watchdog.Watchdog`.

    On a call past its bound, or a stop blocked in one, it pushes the task's final
    report (SUBSTRATE, the detail naming the call) on its own socket and exits with the
    SUBSTRATE code; on the coordinator's death it exits at once, reporting to no one.
    """
    code = exit_code_for(StopKind.SUBSTRATE)
    dog: Watchdog

    def on_fatal(action: Action) -> None:
        name = f"{spec.prefix}-{spec.process.name} task {spec.task}"
        if action.kind is ActionKind.PARENT_GONE:
            log.error("%s exiting: %s", name, action.detail)
            return
        kind: StopKind = StopKind.SUBSTRATE
        reason: Reason | None = None
        detail: str | None = action.detail
        decided = dog.outcome
        if decided is not None:
            # The worker had already stopped (a clean stop had committed); only its closing
            # blocked: report why it stopped, naming what then blocked.
            kind, reason = decided.kind, decided.reason
            blocked = action.detail.split(";")[0]
            detail = None if kind is StopKind.CLEAN else f"{decided.detail}; then {blocked}"
            log.warning("%s: %s while closing", name, blocked)
            dog.exit_code = exit_code_for(kind, reason)
        log.error("%s stopped (%s): %s", name, kind.value, detail)
        push_final(spec.status_endpoint, final_message(
            spec.process.name, spec.task, os.getpid(), kind, reason, detail))

    dog = Watchdog(on_fatal, code, _spawning_parent_pid())
    dog.start(signals=main_thread)
    install(dog)
    return dog


def run(spec: TaskSpec) -> int:
    """Run task ``spec.task`` until it stops; the target of the coordinator's spawned process.

    SIGTERM asks for a clean stop: the worker commits what it fed and
    delivered, closes its clients and exits 0. Every stop pushes one ``final``
    message to ``spec.status_endpoint`` first.

    Args:
        spec: the task's spec, resolved by the bootstrap.

    Returns:
        :func:`workers.protocol.exit_code_for` of the stop kind and refusal
        reason (read back by :func:`workers.protocol.exit_verdict`). In a
        process spawned by ``multiprocess`` it exits with that code instead
        (``SystemExit``), so ``Process.exitcode`` carries it.
    """
    _configure_logging(spec)
    stop_asked = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop_asked
        stop_asked = True

    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:
        signal.signal(signal.SIGTERM, on_term)
    dog = _start_watchdog(spec, main_thread)
    reporter = StatusReporter(spec.status_endpoint, spec.process.name, spec.task)
    worker: Worker | None = None
    outcome: Stop
    try:
        worker = Worker(spec, reporter, lambda: stop_asked)
        worker.run()
        outcome = Stop(StopKind.CLEAN, None, None)  # pragma: no cover - run always raises
    except BaseException as exc:  # every end is classified and reported
        outcome = stop_of(exc)
        if outcome.kind is StopKind.FATAL and worker is not None:
            outcome = _timed_out(outcome, worker,
                                 fenced=classify(exc).kind is ErrorKind.FENCED)
        dog.outcome = outcome
        if outcome.kind is not StopKind.CLEAN and worker is not None:
            try:
                worker.txn.abort()
            except Exception:
                log.debug("abort after the stop failed", exc_info=True)
        if outcome.kind is StopKind.REFUSAL:
            assert outcome.reason is not None
            log.error("%s-%s task %d stopped: %s: %s (failing closed)", spec.prefix,
                      spec.process.name, spec.task, outcome.reason.name, outcome.detail)
        elif outcome.kind is not StopKind.CLEAN:
            log.error("%s-%s task %d stopped (%s): %s", spec.prefix, spec.process.name,
                      spec.task, outcome.kind.value, outcome.detail,
                      exc_info=not isinstance(exc, Stop | SubstrateError | HandlerFailure))
    if worker is not None:
        try:
            worker._maybe_status(force=True)
        except Exception:
            log.debug("last status failed", exc_info=True)
        worker.close(outcome.kind is StopKind.CLEAN)
    reporter.final(outcome.kind, outcome.reason, outcome.detail,
                   metrics=None if worker is None else worker.metric_fields())
    reporter.close()
    code = exit_code_for(outcome.kind, outcome.reason)
    if _in_spawned_child():
        logging.shutdown()
        raise SystemExit(code)
    return code

