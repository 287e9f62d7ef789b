"""The task worker process: ``run(spec)`` builds a task's clients and state and runs its loop.

The coordinator spawns one OS process per task with the ``multiprocess`` spawn context,
targeting :func:`run` with a :class:`workers.protocol.TaskSpec`. The worker initialises
its transactions (fencing any zombie of the task), restores its state
(:mod:`workers.restore`), joins the group as a static member and processes only on its
exact assignment (:mod:`workers.rebalance`), then loops: consume, feed, drain, commit,
and every status interval the guards (:mod:`workers.guards`) and a status push. The
steps in full: docs/architecture.md, "The worker" (and docs/operations.md, "Running").

Every blocking client call runs under the watchdog (:mod:`workers.process_setup`,
:mod:`workers.watchdog`). It stops on SIGTERM (commits what it has, exit 0), on a
refusal (aborts, logs ERROR ``... (failing closed)``, exit ``64 + index of the reason``),
a handler failure (exit 11), a substrate condition (exit 12) or a fenced/fatal client
(exit 13), pushing one ``final`` message first (:mod:`workers.protocol`); the verdicts
are :mod:`workers.verdicts`'. An abortable Kafka error aborts, rebuilds the state from
the changelogs and rewinds to the committed offsets, then goes on.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import psutil
from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
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
from parsley.engine.channel import ChannelId
from parsley.engine.engine import ProcessEngine
from parsley.frame import HandlerFailure, HandlerFrame
from parsley.task_stores import TaskStores
from workers.changelog import RestoreProgress
from workers.client_log import serve_client_logs, with_task_logger
from workers.fetched import split_errors
from workers.guards import DeletionGuard, GroupGuard, ShapeGuard
from workers.histogram import HANDLER_BUCKETS_S, BucketCounts
from workers.identity import Backoff, IdentityChecker, apply_received_verdicts
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
    offset_reset,
    partition_eof,
    stop_kind,
    to_exception,
    topic_missing_or_unreadable,
)
from workers.memory import HeapTrimmer, heap_trimmer
from workers.offsets import positions_past_markers, resolve_offset_reset
from workers.ordering_store import SqliteOrderingStore, store_cache_factory, task_state_dir
from workers.pacing import BATCH_TARGET_FRACTION, MAX_BATCH, BatchSizer, close_after_s
from workers.process_setup import configure_logging, in_spawned_child, start_watchdog
from workers.protocol import StopKind, TaskSpec, TaskState, exit_code_for
from workers.rebalance import Assignment
from workers.restore import Restorer
from workers.status import StatusReporter, cached_lag, status_fields
from workers.step import TaskStep
from workers.transaction import TaskTransaction
from workers.verdicts import Stop, live_successor, stop_of, timed_out
from workers.watchdog import bounded

__all__ = ["Worker", "run"]

log = logging.getLogger("parsley.worker")

BATCH: Final = MAX_BATCH
"""Most records per ``consume`` call (fewer for a slow handler: :class:`BatchSizer`)."""
MAX_ABORTABLE_RETRIES: Final = 5
"""Consecutive abortable failures (without a commit between) before the worker gives up."""


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
        self.restorer = Restorer(spec, self.app_id, self.channels, self.expected,
                                 self.ordering_topic, self.store_topics, self.restore_consumer,
                                 self._progress)
        self.rebalance = Assignment(self.app_id, self.task, self.expected)
        self.needs_rebuild = False
        self.delivered_before = 0
        self.fed_committed = 0
        """Records fed in transactions that committed, over every step of this worker."""
        self._fed_mark = 0  # the current step's ``fed`` at its last commit
        self._commit_s = 0.0  # time spent in :meth:`_commit`, s (taken out of drain timing)
        self.handler_latency = BucketCounts(HANDLER_BUCKETS_S)
        """Per drain pass, its time per delivered message (see :meth:`_drain`)."""
        self.abortable_in_a_row = 0
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
        self.shape_guard = ShapeGuard({t: spec.partitions[t] for t in self.received})
        self.group_guard = GroupGuard(self.app_id, self.task, frozenset(
            group_instance_id(spec.prefix, process.name, t, W) for t in range(W)))
        self.deletion_guard = DeletionGuard(self.app_id, self.task, self.channels,
                                            self.read_ends, self.read_floors)
        self.member_fenced = False
        """Whether the consumer reported its static member fenced or failed (see
        :func:`workers.verdicts.timed_out`)."""
        self.sizer = BatchSizer(close_after_s(TRANSACTION_TIMEOUT_MS) * BATCH_TARGET_FRACTION)

    # The guards' schedules, monotonic s (tests set them to force or skip a check).
    @property
    def next_shape_check(self) -> float:
        return self.shape_guard.next_check

    @next_shape_check.setter
    def next_shape_check(self, when: float) -> None:
        self.shape_guard.next_check = when

    @property
    def next_group_check(self) -> float:
        return self.group_guard.next_check

    @next_group_check.setter
    def next_group_check(self, when: float) -> None:
        self.group_guard.next_check = when

    @property
    def next_received_check(self) -> float:
        return self.deletion_guard.next_check

    @next_received_check.setter
    def next_received_check(self, when: float) -> None:
        self.deletion_guard.next_check = when

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
        changelogs, build the engine, bind names and run the identity check
        (:class:`workers.restore.Restorer`; docs/architecture.md, "The worker", "Restore").

        Raises:
            ParsleyFailClosedError: the engine's restore refusals, CHANNEL_IDENTITY_CHANGED,
                CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES; ORDERING_STATE_LOST or
                TASK_WIDTH_CHANGED for a store changelog (workers.store_changelogs).
            SubstrateError: a changelog read failed or stalled.
        """
        self.state = TaskState.RESTORING
        self.restore = {}
        self._close_state()
        if self.restores:
            # A rebuild follows a rebalance or an abort, often a broker restart: a fresh
            # AdminClient has fresh leader metadata (see build_state).
            self._fresh_admin()
        self.restores += 1
        restorer = self.restorer
        self.store = SqliteOrderingStore.create(self.dir)  # kept at once: closed if a step fails
        restorer.read_ordering(self.store, self.admin)
        engine = restorer.engine(self.store)
        store_ids = restorer.store_ids(self.admin, engine)
        self.stores = TaskStores(store_cache_factory(self.dir), self.store_topics)
        restorer.read_stores(self.stores, self.admin)
        found = restorer.bind(engine, self.identity, store_ids, self.read_ends, self.read_floors)
        if found.names_learned is not None:
            self.names_learned = found.names_learned
        self.pending_identity = found.pending
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
        self.rebalance.incomplete.running()
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

    # -- group membership (workers.rebalance) -----------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.rebalance.on_assign(consumer, partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.engine is not None and self.engine.started:
            self.needs_rebuild = True
        self.rebalance.on_revoke(partitions, self.txn.abort)
        if self.stores is not None:
            self.stores.discard()
        self.rebalance.revoked()
        self.state = TaskState.REBALANCING

    def _handle_assignment(self) -> None:
        exact = self.rebalance.take_change()
        if not exact:
            self.state = TaskState.REBALANCING
            return
        if self.needs_rebuild or self.engine is None or self.engine.started:
            self.build_state()
        self.start_engine(seek=False)

    # -- errors ----------------------------------------------------------------------

    def _consumer_error(self, err: KafkaError, msg: Any) -> None:
        if offset_reset(err):
            topic, partition = msg.topic(), msg.partition()
            if topic is None or partition is None or partition < 0:
                topic, partition = sorted(self.expected)[0]
            assert self.consumer is not None
            with bounded("offset reset check"):
                refusal = resolve_offset_reset(self.consumer, topic, partition,
                                               group_id=self.app_id, timeout_s=15.0)
            raise refusal
        if partition_eof(err):
            return
        verdict = classify(err)  # a fenced static member: _FATAL, fatal() false -> FATAL
        if stop_kind(verdict) is StopKind.FATAL:
            self.member_fenced = True
            raise SubstrateError(verdict.kind, f"the task's group member was fenced or failed: "
                                 f"{verdict.name}: {verdict.text}", err.code())
        if topic_missing_or_unreadable(err):
            if self.engine is not None and self.step is not None:
                self._before_blocking("deletion check")
                self._check_received()  # a deletion is named, and refused if messages wait
                if self.deletion_guard.settled is not None:
                    return  # settled: the check's grace decides the stop
            raise SubstrateError(
                ErrorKind.SUBSTRATE_TRANSIENT,
                f"a received topic is missing or unreadable ({err.name()}: {err.str()}); "
                "restart the process once the topic is restored (the start re-resolves it)",
                err.code())
        # Transient fetch/connection errors: librdkafka retries them itself.
        log.debug("consumer error (retried by the client): %s", err)


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
        status_s = self.spec.status_interval_ms / 1000.0
        if running:
            assert step is not None
            self._drain()
        if self.consumer is not None and self.shape_guard.due(now, status_s):
            self._before_blocking("shape check")
            self.shape_guard.check(self.admin)
        if self.consumer is not None and self.group_guard.due(now, status_s):
            self._before_blocking("group check")
            self.group_guard.check(self.admin, now)
        if step is not None and self.engine is not None and self.deletion_guard.due(now):
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
                self.deletion_guard.settle(gone)
        if running:
            self._commit_past_markers()
        self._maybe_status()

    def _check_received(self) -> None:
        """The running task's identity check of its received topics
        (:meth:`workers.guards.DeletionGuard.check`, which names what it raises)."""
        assert self.engine is not None and self.step is not None

        def release() -> None:
            assert self.step is not None
            self.step.touch()
            self._drain()
            self._commit()

        self.deletion_guard.check(self.identity, self.engine,
                                  running=self.state is TaskState.RUNNING,
                                  rebuild=self.build_state, release=release)

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
        if self.rebalance.exact:
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
        self.rebalance.take_error()
        if self.rebalance.changed:
            self._handle_assignment()
        elif self.state is TaskState.REBALANCING:
            self.rebalance.warn_if_overdue()
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
        """Another live member of the group with this task's ``group.instance.id``, if any
        (:func:`workers.verdicts.live_successor`, asked through a fresh AdminClient: after
        a fence the old one may be stale).

        Args:
            wait_s: how long to look for a candidate, s.

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
        return live_successor(admin, self.app_id, instance, mine, session_s, wait_s)

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
    configure_logging(spec)
    stop_asked = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop_asked
        stop_asked = True

    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:
        signal.signal(signal.SIGTERM, on_term)
    dog = start_watchdog(spec, main_thread)
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
            outcome = timed_out(outcome, worker,
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
    if in_spawned_child():
        logging.shutdown()
        raise SystemExit(code)
    return code

