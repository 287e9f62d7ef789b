"""The task worker process: ``run(spec)`` builds a task's worker and runs its loop until a stop.

The coordinator spawns one OS process per task targeting :func:`run` with a
:class:`workers.protocol.TaskSpec`. The :class:`Worker` initialises its transactions,
restores its state (:mod:`workers.restore`), joins the group as a static member
(:mod:`workers.rebalance`), then loops: consume, feed, drain, commit, and every status
interval the punctuation (guards: :mod:`workers.guards`; status: :mod:`workers.task_status`).
Its clients are :mod:`workers.clients`'; how it ends, :mod:`workers.verdicts`'. A fault a
restart would cure is recovered in place within the task timeout (:meth:`Worker._recover`).
Every blocking client call is bounded by the worker (:mod:`workers.calls`,
:mod:`workers.watchdog`). The steps and the exit codes in full: docs/architecture.md, "The
worker" (and docs/operations.md, "Running", "The task timeout").
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from parsley.declarations import group_instance_id, ordering_changelog, store_changelog
from parsley.engine.channel import ChannelId
from parsley.engine.engine import ProcessEngine
from parsley.frame import HandlerFrame
from workers.admin import ADMIN_CALL_BOUND_S, cluster_answers, group_view
from workers.calls import CallStalled, awaiting, set_heartbeat
from workers.changelog import RestoreProgress
from workers.client_log import serve_client_logs
from workers.clients import TaskClients, drop_frame_locals
from workers.consumer_errors import consumer_error
from workers.fetched import split_errors
from workers.guards import DeletionGuard, GroupGuard, ShapeGuard
from workers.hold_figures import HoldFigures, consumer_positions
from workers.identity import Backoff, apply_received_verdicts
from workers.join_watch import JoinStalled, JoinWatch, join_bound_s, left_out
from workers.kafka_config import TRANSACTION_TIMEOUT_MS
from workers.kafka_errors import ErrorKind, SubstrateError, classify
from workers.offsets import Reads, committed_positions, positions_past_markers
from workers.ordering_store import task_state_dir
from workers.pacing import BATCH_TARGET_FRACTION, MAX_BATCH, BatchSizer, close_after_s
from workers.positions import engine_start_positions
from workers.process_setup import set_up_process, start_watchdog
from workers.protocol import StopKind, TaskSpec, TaskState, exit_code_for
from workers.rebalance import Assignment
from workers.restore import OpenState, Restorer
from workers.status import StatusReporter, cached_lag, status_fields
from workers.step import TaskStep
from workers.task_status import Counters, StatusClock
from workers.task_timeout import TaskTimedOut, TaskTimeout
from workers.transaction import TaskTransaction
from workers.verdicts import Stop, abort_and_log, ending, in_place_verdict, unmasked
from workers.watchdog import bounded

__all__ = ["Worker", "run"]

log = logging.getLogger("parsley.worker")

BATCH: Final = MAX_BATCH
"""Most records per ``consume`` call (fewer for a slow handler: :class:`BatchSizer`)."""
MAX_ABORTABLE_RETRIES: Final = 5
"""Consecutive abortable failures (without a commit between) met with an abort and a rebuild
over the same producer; past them the recovery renews the clients."""
_CONSUMER_CALLS: Final = frozenset({"committed", "offset reset check"})
"""Calls of the main consumer: when one stalls, the consumer is renewed too."""
IDLE_PROGRESS_S: Final = 5.0
"""How long a stalled task must run idle and caught up for that to count as progress, s."""


def _schedule_of(guard: str) -> property:
    """The ``next_check`` of the worker's attribute ``guard`` (monotonic s), read and set."""
    return property(lambda self: getattr(self, guard).next_check,
                    lambda self, when: setattr(getattr(self, guard), "next_check", when))


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
        self.should_stop = should_stop
        process = self.process = spec.process
        self.task = task = spec.task
        self.clients = TaskClients(spec)
        self.app_id = app_id = self.clients.app_id
        self.txn = TaskTransaction(self.clients.producer)
        self.state = TaskState.STARTING
        self.received = list(process.received_topics)
        self.expected = frozenset((t, task) for t in self.received if spec.partitions[t] > task)
        self.channels = {t: ChannelId(spec.topic_ids[t], task) for t, _ in sorted(self.expected)}
        self.ordering_topic = ordering_changelog(spec.prefix, process.name)
        self.store_topics = {s.name: store_changelog(spec.prefix, process.name, s.name)
                             for s in process.declared_stores}
        self.opened = OpenState()
        self.restore: dict[str, RestoreProgress] = {}
        self.restorer = Restorer(spec, app_id, self.channels, self.expected, self.ordering_topic,
                                 self.store_topics, self.clients.restore_consumer,
                                 self._progress, task_state_dir(spec.state_dir, app_id, task))
        self.step: TaskStep | None = None
        self.needs_rebuild = False
        self.rebalance = Assignment(app_id, task, self.expected)
        self.backoff = Backoff(first_s=spec.status_interval_ms / 1000.0)
        self.pending_identity: dict[str, Any] = {}
        self.names_learned = False
        self.counters = Counters()
        self.status = StatusClock(reporter, spec.status_interval_ms / 1000.0)
        self.hold_figures = HoldFigures(spec.status_interval_ms / 1000.0)
        self.abortable_in_a_row = 0
        self.reads = Reads()
        self.shape_guard = ShapeGuard({t: spec.partitions[t] for t in self.received})
        self.group_guard = GroupGuard(app_id, task, frozenset(
            group_instance_id(spec.prefix, process.name, t, spec.task_count)
            for t in range(spec.task_count)))
        self.deletion_guard = DeletionGuard(app_id, task, self.channels, self.reads.ends,
                                            self.reads.floors)
        self.checkpoint_ends: list[Any] | None = None
        """The changelogs' ends after a clean stop's last commit (``workers.checkpoint``)."""
        self.unfed = False
        """Whether the consumer returned records the step has not been fed yet (its
        position counts them): :meth:`_past_markers` commits nothing past markers then."""
        self.member_fenced = False
        """Whether the consumer reported its static member fenced or failed (see
        :func:`workers.verdicts.timed_out`)."""
        self.sizer = BatchSizer(close_after_s(TRANSACTION_TIMEOUT_MS) * BATCH_TARGET_FRACTION)
        self.task_timeout = TaskTimeout(spec.task_timeout_ms / 1000.0)
        """The stall clock of the in-place recovery (docs/operations.md, "The task timeout")."""
        self.idle_since: float | None = None
        """Since when (monotonic s) the task, stalled, has run idle and caught up: held
        :data:`IDLE_PROGRESS_S`, that counts as progress."""
        self.unreachable_since: float | None = None
        """When the periodic checks last found the cluster not answering (monotonic s)."""
        self.came_back_after: float | None = None
        """How long the cluster had not answered, once it answers again (s), until the
        clients are renewed."""
        self.join_watch = JoinWatch(join_bound_s(self.clients.session_timeout_ms))
        """How long the consumer has been without an assignment (workers.join_watch)."""

    @property
    def consumer(self) -> Consumer | None:
        """The main consumer, once the loop built it."""
        return self.clients.consumer

    @property
    def engine(self) -> ProcessEngine | None:
        """The engine the last restore built, if it succeeded."""
        return self.opened.engine

    @property
    def delivered_before(self) -> int:
        """Messages delivered in committed transactions of earlier steps."""
        return self.counters.delivered_before

    # The guards' schedules, monotonic s (tests set them to force or skip a check).
    next_shape_check = _schedule_of("shape_guard")
    next_group_check = _schedule_of("group_guard")
    next_received_check = _schedule_of("deletion_guard")

    # -- state -------------------------------------------------------------------

    def _restoring(self) -> None:
        self.state = TaskState.RESTORING
        self.restore = {}

    def _progress(self, p: RestoreProgress) -> None:
        self.restore[p.topic] = p
        self._maybe_status()
        self._stop_if_asked()  # a restore holds nothing open: a stop may end it

    def build_state(self, attempts: int = 3) -> None:
        """Restore the state from the changelogs and build a new step over it
        (:meth:`workers.restore.Restorer.rebuild`, which names what it raises)."""
        found = self.restorer.rebuild(self.opened, self.clients, self.reads, self._restoring,
                                      attempts)
        if found.names_learned is not None:
            self.names_learned = found.names_learned
        self.pending_identity = found.pending
        if self.pending_identity:
            self.backoff.failed(time.monotonic())
        engine, stores = self.opened.engine, self.opened.stores
        assert engine is not None and stores is not None
        self.counters.new_step(self.step)
        self.step = TaskStep(
            task=self.task, engine=engine, frame=HandlerFrame(self.process, self.task, stores),
            stores=stores, txn=self.txn, channels=self.channels,
            ordering_topic=self.ordering_topic, store_topics=self.store_topics,
            close_after_s=close_after_s(TRANSACTION_TIMEOUT_MS), close=self._commit,
            pass_s=self.spec.status_interval_ms / 1000.0, read_ends=self.reads.ends)
        self.needs_rebuild = False
        self.state = TaskState.REBALANCING

    def start_engine(self, *, seek: bool) -> None:
        """Start the engine at the group's committed read positions (and rewind to them);
        a position a task committed past markers it never fed starts the engine at its
        coverage + 1 (:func:`workers.positions.engine_start_positions`)."""
        assert self.engine is not None and self.consumer is not None
        found = committed_positions(self.consumer, self.expected)
        committed = self.reads.started({key: off for key, (off, _m) in found.items()})
        engine = self.engine
        starts = engine_start_positions(
            found, {(t, p): engine.covered(self.channels[t]) for (t, p) in found})
        engine.start({self.channels[t]: off for (t, _p), off in starts.items()})
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
        lowered = {f"{t}-{p}": o for (t, p), o in starts.items() if o < committed[(t, p)]}
        log.info("%s task %d running from committed positions %s%s", self.app_id, self.task,
                 {f"{t}-{p}": o for (t, p), o in committed.items()},
                 f" (the engine from {lowered}: offsets past markers it never fed)"
                 if lowered else "")
        # Say so now, not at the next status period: an operator (and the coordinator's
        # view) sees the task running as soon as it is.
        self._maybe_status(force=True)

    # -- group membership (workers.rebalance) -----------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if consumer is not self.clients.consumer:
            return  # a retired consumer closing on its own thread (workers.clients.retire)
        self.join_watch.assigned()
        self.rebalance.on_assign(consumer, partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if consumer is not self.clients.consumer:
            return  # a retired consumer closing on its own thread: nothing of ours is its
        if self.engine is not None and self.engine.started:
            self.needs_rebuild = True
        self.rebalance.on_revoke(partitions, self.txn.abort)
        if self.opened.stores is not None:
            self.opened.stores.discard()
        self.rebalance.revoked()
        self.join_watch.revoked(time.monotonic())
        self.state = TaskState.REBALANCING

    def _handle_assignment(self) -> None:
        exact = self.rebalance.take_change()
        if not exact:
            self.state = TaskState.REBALANCING
            return
        if self.needs_rebuild or self.engine is None or self.engine.started:
            self.build_state()
        self.start_engine(seek=False)
        # The group settled and the state was read: a wait for siblings is not a fault of
        # this task's, so the stall clock of an earlier recovery stops here.
        self.task_timeout.progressed()

    # -- errors ----------------------------------------------------------------------

    def _consumer_error(self, err: KafkaError, msg: Any) -> None:
        def fenced() -> None:
            self.member_fenced = True
        consumer_error(err, msg, consumer=self.consumer, expected=self.expected,
                       group_id=self.app_id, on_fenced=fenced, on_missing=self._topic_missing)

    def _topic_missing(self) -> bool:
        """A received topic reported missing: the deletion check names a deletion (refused
        if messages wait); ``True`` when it settled one."""
        if self.engine is None or self.step is None:
            return False
        self._before_blocking("deletion check")
        self._check_received()
        return self.deletion_guard.settled is not None

    # -- status (workers.task_status) -------------------------------------------------

    def _maybe_status(self, force: bool = False) -> None:
        self.status.maybe(self.state, self.status_fields, force)

    def status_fields(self) -> dict[str, Any]:
        """The ``status`` message's fields besides kind, process, task, pid, sent_ms, state,
        rss and cpu (:mod:`workers.protocol`; built by :func:`workers.status.status_fields`).
        The lag reads cached watermarks only (:func:`workers.status.cached_lag`)."""
        consumer = self.consumer
        lag = (cached_lag(consumer, self.expected, self.reads.start)
               if consumer is not None and self.state is TaskState.RUNNING else None)
        return status_fields(
            engine=self.engine, budget_bytes=self.spec.metadata_budget_bytes,
            restore=self.restore, delivered=self.counters.delivered(self.step), lag=lag,
            commits=self.txn.commits, commit_latency_ms=self.txn.last_commit_ms,
            from_checkpoint=self.restorer.from_checkpoint,
            classify=lambda d: self.hold_figures.classify(
                d, self.clients.admin, consumer_positions(consumer, self.reads.read))) | {
                "metrics": self.metric_fields(),
                "recovery": self.task_timeout.status(time.monotonic()),
                "recoveries": self.task_timeout.recoveries}

    def metric_fields(self) -> dict[str, Any]:
        """The ``metrics`` field (:meth:`workers.task_status.Counters.metric_fields`)."""
        return self.counters.metric_fields(self.step, self.txn)

    # -- the loop ----------------------------------------------------------------------

    def _punctuate(self) -> None:
        """The status punctuation: drain, then the slow checks, each after a commit of the
        open transaction (:meth:`_before_blocking`), then the status push
        (docs/architecture.md, "The worker", "The punctuation")."""
        now = time.monotonic()
        clients = self.clients
        serve_client_logs(clients.admin, clients.producer, clients.restore_consumer)
        step = self.step
        running = self.state is TaskState.RUNNING and step is not None
        status_s = self.spec.status_interval_ms / 1000.0
        if running:
            assert step is not None
            self._drain()
        shape = self.consumer is not None and self.shape_guard.due(now, status_s)
        group = self.consumer is not None and self.group_guard.due(now, status_s)
        deletion = step is not None and self.engine is not None and self.deletion_guard.due(now)
        identity = running and bool(self.pending_identity) and self.backoff.due(now)
        rejoin = self.state is TaskState.REBALANCING and self.join_watch.look_due(now)
        if (shape or group or deletion or identity or rejoin) and not self._cluster_answers():
            shape = group = deletion = identity = rejoin = False
        if rejoin and self.join_watch.look_due(now):  # the cluster back restarts the count
            self._check_rejoin(now)
        if shape:
            self._before_blocking("shape check")
            self.shape_guard.check(clients.admin)
        if group:
            self._before_blocking("group check")
            self.group_guard.check(clients.admin, now)
        if deletion:
            self._before_blocking("deletion check")
            self._check_received()
        if identity:
            assert self.engine is not None and step is not None
            self._before_blocking("identity check")
            # Its answers are awaited in Python: past the bound, CallStalled and a recovery
            # in place (workers.calls.awaiting), never the watchdog's exit.
            with awaiting("describe_topics"):
                result = clients.identity.check(self.pending_identity)
            gone = None
            if result.verdicts:
                # A pending received topic judged deleted now is weighed as the running
                # check weighs it (held, read past coverage, or settled).
                gone = apply_received_verdicts(self.engine, result.verdicts, self.channels,
                                               self.reads.ends, self.reads.floors)
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
        if self.came_back_after is not None and not self.txn.open:
            # After a broker restart the transactional producer keeps a stale coordinator and
            # its next send_offsets_to_transaction blocks past any timeout (librdkafka issues
            # 5456, 5511): renew the clients now, while nothing is open, rather than wait for
            # the next commit to stall on its bound.
            # Raised for _guarded to recover: these frames hold the old clients.
            away, self.came_back_after = self.came_back_after, None
            raise SubstrateError(
                ErrorKind.SUBSTRATE_TRANSIENT,
                f"the cluster answers again after {away:.1f} s without: renewing the task's "
                "clients before its next transaction")
        self._maybe_status()

    def _cluster_answers(self) -> bool:
        """Whether the cluster answers a metadata request with a controller: the periodic
        checks' describes wait for the controller or the group coordinator, and one that
        times out while the cluster is unreachable can abort the process inside librdkafka
        (docs/operations.md, "A librdkafka abort during broker outages"), so they are
        skipped until it answers."""
        why = cluster_answers(self.clients.admin, self.received[0])
        if why is None:
            if self.unreachable_since is not None:
                self.came_back_after = time.monotonic() - self.unreachable_since
                self.unreachable_since = None
                self.join_watch.restart(time.monotonic())
            return True
        if self.unreachable_since is None:
            self.unreachable_since = time.monotonic()
            log.info("%s task %d: %s; the periodic checks wait until it answers", self.app_id,
                     self.task, why)
        return False

    def _check_rejoin(self, now: float) -> None:
        """The consumer has had no assignment for the join bound: look at the group, and
        renew the consumer once the group settled without this task's member
        (:func:`workers.join_watch.left_out`). A describe that fails or is not answered in
        time (bounded at :data:`workers.admin.ADMIN_CALL_BOUND_S` + 1 s) judges nothing and
        is logged at WARNING; the next look is :data:`workers.join_watch.LOOK_INTERVAL_S`
        after this one ends, and :data:`workers.join_watch.BLIND_LOOKS` in a row without an
        answer renew the consumer (and the admin client) anyway.

        Raises:
            JoinStalled: the group settled without the task's member, or the looks got no
                answer (recovered in place).
        """
        try:
            with awaiting("describe_consumer_groups"):
                view = group_view(self.clients.admin, self.app_id,
                                  answer_s=ADMIN_CALL_BOUND_S + 1)
        except (KafkaException, TimeoutError, CallStalled) as exc:
            log.warning("%s task %d: describing group %s for the join bound got no answer: "
                        "%s", self.app_id, self.task, self.app_id, exc)
            view = None
        if view is not None and left_out(view, self.clients.instance_id,
                                         self.clients.member_id()):
            raise self.join_watch.stalled(now)
        if self.join_watch.looked(time.monotonic(), answered=view is not None):
            raise self.join_watch.stalled(time.monotonic())  # renews the admin client too

    def _check_received(self) -> None:
        """The running task's identity check of its received topics
        (:meth:`workers.guards.DeletionGuard.check`, which names what it raises)."""
        assert self.engine is not None and self.step is not None

        def release() -> None:
            assert self.step is not None
            self.step.touch()
            self._drain()
            self._commit()

        self.deletion_guard.check(self.clients.identity, self.engine,
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
                self.task_timeout.progressed()
                self.reads.read.update(sent)
                self.counters.committed(step)
        finally:
            self.counters.commit_s += time.perf_counter() - began

    def _drain(self) -> int:
        """One drain pass, timed (:meth:`workers.task_status.Counters.timed_drain`)."""
        assert self.step is not None
        return self.counters.timed_drain(self.step)

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
        the position of what was returned to the loop, which is all fed unless
        :attr:`unfed` (a fetched batch's error handled before its records are fed, which
        may commit): then none, or the commit would pass records never fed."""
        if self.unfed:
            return {}
        assert self.consumer is not None and self.step is not None
        got = self.consumer.position([TopicPartition(t, p) for t, p in sorted(self.expected)])
        known = {**self.reads.read, **self.step.pending_positions}
        return positions_past_markers({(tp.topic, tp.partition): tp.offset for tp in got}, known)

    # -- recovery in place (docs/operations.md, "The task timeout") -------------------

    def _open(self) -> None:
        """Initialise the transactions (fencing the task's previous producer and aborting
        its open transaction), restore the state, and subscribe a consumer if none is."""
        self.txn.init()
        self.build_state()
        if self.clients.consumer is None:
            self._open_consumer()

    def _guarded(self, step: Callable[[], None]) -> None:
        """Run ``step``; on a fault a restart would cure, recover in place (:meth:`_recover`,
        outside the ``except``, which would hold the fault's frames)."""
        try:
            step()
            return
        except Exception as exc:
            failed = exc
        self._recover(failed)

    def _recover(self, exc: Exception) -> None:
        """Recover in place from ``exc``, retrying with backoff until the task timeout.

        An abortable error is first met with an abort, a rebuild and a rewind over the same
        producer (at most :data:`MAX_ABORTABLE_RETRIES` in a row without a commit). Any
        other recoverable fault, or a light recovery that failed, drops the task's clients
        for fresh ones (the main consumer too when it was fenced or wedged), initialises
        the transactions (fencing the old producer, aborting its open transaction),
        rebuilds the state from the changelogs and rewinds to the committed offsets.

        Raises:
            Stop: a stop was asked while recovering (clean: nothing was open), or the
                verdict on an error not recovered (:func:`workers.verdicts.in_place_verdict`).
            TaskTimedOut: no progress for the task timeout (a SUBSTRATE stop).
        """
        light = True
        while True:
            # The fault's frames' locals (the step, the transaction, the consumer) would keep
            # the clients being replaced alive (workers.clients.retire).
            drop_frame_locals(exc)
            exc = unmasked(exc, self)  # its details, and what is raised, name what happened
            verdict = in_place_verdict(exc, self)
            if verdict is not None:
                if verdict is exc or verdict.kind in (StopKind.REFUSAL, StopKind.APPLICATION):
                    raise exc  # workers.verdicts.ending reports it (an ACL refusal completed)
                raise verdict from exc  # weighed already: the successor asked, the timeout
            detail = getattr(exc, "detail", None) or f"{type(exc).__name__}: {exc}"
            if light and classify(exc).kind is ErrorKind.ABORTABLE \
                    and self.abortable_in_a_row < MAX_ABORTABLE_RETRIES:
                self.abortable_in_a_row += 1
                log.warning("%s task %d: aborting and rebuilding after an abortable error: %s",
                            self.app_id, self.task, detail)
                try:
                    self.txn.abort()
                    self._rebuild_and_rewind()
                    return
                except Exception as again:
                    exc = again
                    continue
            light = False
            try:
                delay = self.task_timeout.failed(time.monotonic(), detail)
            except TaskTimedOut as out:
                raise out from exc
            self.state = TaskState.RECOVERING
            log.warning("%s task %d: recovering in place (attempt %d, %.1f s of the %g s task "
                        "timeout): %s", self.app_id, self.task, self.task_timeout.attempts,
                        time.monotonic() - (self.task_timeout.since or 0.0),
                        self.task_timeout.timeout_s, detail)
            self._pause(delay)
            try:
                renew_consumer = self.member_fenced or self.task_timeout.renews_consumer or (
                    isinstance(exc, CallStalled) and exc.call in _CONSUMER_CALLS) or isinstance(
                    exc, JoinStalled)
                exc = None  # type: ignore[assignment]  # its traceback holds the old clients
                self._renew(consumer=renew_consumer)
                self.task_timeout.recovered()
                log.info("%s task %d: recovered in place (fresh clients, state rebuilt from the "
                         "changelogs, rewound to the committed offsets)", self.app_id, self.task)
                return
            except Exception as again:
                exc = again

    def _stop_if_asked(self) -> None:
        """Raise a clean :class:`Stop` if one was asked (while recovering: nothing is open)."""
        if self.should_stop():
            raise Stop(StopKind.CLEAN, None, None)

    def _pause(self, delay_s: float) -> None:
        """Wait ``delay_s`` before a recovery attempt, reporting status.

        Raises:
            Stop: a clean stop was asked (nothing is open while the task recovers).
        """
        until = time.monotonic() + delay_s
        while True:
            self._stop_if_asked()
            self._maybe_status()
            left = until - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(0.1, left))

    def _renew(self, *, consumer: bool) -> None:
        """Fresh clients, transactions initialised, state rebuilt, positions rewound.

        Raises:
            Stop: a clean stop was asked (checked between the steps; nothing is open).
        """
        self.txn.initialised = False  # retired: its fatal error is not the fresh one's
        if self.opened.stores is not None:
            self.opened.stores.discard()
        old = [self.txn, self.step]  # they hold the old producer: dropped off this thread
        self.counters.new_step(self.step)  # what the old step committed still counts
        self.step = None
        self.clients.renew(consumer=consumer, also=old)
        self.txn = self.txn.renewed(self.clients.producer)
        self.restorer.restore_consumer = self.clients.restore_consumer
        if consumer:
            self.member_fenced = False
            self.rebalance = Assignment(self.app_id, self.task, self.expected)
        self._maybe_status(force=True)
        self._stop_if_asked()
        self.txn.init()
        self._stop_if_asked()
        self._rebuild_and_rewind()
        if self.clients.consumer is None:
            self._open_consumer()
        # The renewal is the one a cluster answering again asked for, and a kept consumer,
        # not polled meanwhile, could not be handed an assignment: its wait counts from now.
        self.came_back_after = None
        self.join_watch.restart(time.monotonic())

    def _rebuild_and_rewind(self) -> None:
        """Rebuild the state from the changelogs; with the exact assignment, start the engine
        at the committed offsets and seek the consumer to them."""
        if self.opened.stores is not None:
            self.opened.stores.discard()
        self.build_state()
        if self.rebalance.exact and self.clients.consumer is not None:
            self.start_engine(seek=True)

    def _open_consumer(self) -> None:
        consumer = self.clients.consumer = Consumer(self.clients.consumer_conf)
        consumer.subscribe(self.received, on_assign=self._on_assign,
                           on_revoke=self._on_revoke, on_lost=self._on_revoke)
        self.join_watch.subscribed(time.monotonic())

    def run(self) -> None:
        """Initialise and loop until a stop; raises :class:`Stop` or the error that ended it."""
        self._maybe_status(force=True)
        set_heartbeat(self._heartbeat)
        self._guarded(self._open)
        interval = self.spec.commit_interval_ms / 1000.0
        while not self.should_stop():
            self._guarded(lambda: self._iterate(interval))
        # Clean stop: commit what was fed and delivered, and positions past markers.
        if self.state is TaskState.RUNNING and self.step is not None:
            self._drain()
            self._commit()
            self._commit_past_markers()
            # The local stores now equal the changelogs: what close() records
            # (workers.checkpoint).
            self.checkpoint_ends = self.restorer.stop_ends(self.clients.admin)
        raise Stop(StopKind.CLEAN, None, None)

    def _idle_progress(self, fetched: bool) -> None:
        """Stop the stall clock once the task, RUNNING with nothing open, has fetched nothing
        and had no lag on any of its partitions for :data:`IDLE_PROGRESS_S`: idle and caught
        up, so nothing is left for a recurring fault to fail on. Never one empty fetch: the
        first after a rewind is nearly always empty."""
        consumer = self.consumer
        idle = (not fetched and not self.txn.open and self.state is TaskState.RUNNING
                and consumer is not None
                and cached_lag(consumer, self.expected, self.reads.start) == 0)
        now = time.monotonic()
        if not idle:
            self.idle_since = None
        elif self.idle_since is None:
            self.idle_since = now
        elif now - self.idle_since >= IDLE_PROGRESS_S:
            self.idle_since = None
            self.task_timeout.progressed()

    def _heartbeat(self) -> None:
        """While a client call waits (:func:`workers.calls.call`): status when due."""
        self._maybe_status()

    def _iterate(self, interval: float) -> None:
        consumer = self.clients.consumer
        assert consumer is not None
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
        if self.task_timeout.stalled:
            self._idle_progress(bool(messages))
        if messages:
            good, errors = split_errors(messages)
            # The consumer's position already counts these records: no commit past markers
            # until they are fed (an error's handling may commit first).
            self.unfed = bool(good)
            for msg in errors:
                self._consumer_error(msg.error(), msg)
            if good and self.state is TaskState.RUNNING:
                assert self.step is not None
                began = time.monotonic()
                self.step.feed(good)
                self.unfed = False
                self.sizer.observe(self._drain(), time.monotonic() - began)
                draining = False
            self.unfed = False  # not running: they are read again from the committed position
        if draining and self.state is TaskState.RUNNING:
            # The previous pass ended mid-drain (its time ran out or it committed): go on.
            assert step is not None and step is self.step
            self._drain()
        if txn.open and time.monotonic() - txn.opened_at >= interval:
            self._commit()
        if time.monotonic() >= self.status.next_at:
            self._punctuate()

    def successor_member(self, wait_s: float) -> str | None:
        """:meth:`workers.clients.TaskClients.successor_member` (for the fence verdicts); a
        fenced static member's consumer is retired first (``drop_consumer``)."""
        return self.clients.successor_member(wait_s, drop_consumer=self.member_fenced)

    def close(self, clean: bool) -> None:
        """Close the clients (:meth:`workers.clients.TaskClients.close`) and the stores."""
        self.clients.close(clean)
        self.opened.close()
        if clean and self.checkpoint_ends is not None:
            self.restorer.write_checkpoint(self.checkpoint_ends)


def run(spec: TaskSpec) -> int:
    """Run task ``spec.task`` until it stops; the target of the coordinator's spawned process.

    SIGTERM asks for a clean stop: the worker commits what it fed and delivered, closes its
    clients and exits 0. Every stop pushes one ``final`` message to ``spec.status_endpoint``.

    Returns:
        :func:`workers.protocol.exit_code_for` of the stop kind and refusal reason (read back
        by :func:`workers.protocol.exit_verdict`); in a ``multiprocess`` child it exits with
        that code instead (``SystemExit``), so ``Process.exitcode`` carries it.
    """
    spawned = set_up_process(spec)
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
        judged = unmasked(exc, worker)  # a producer's fatal error raised as another exception
        outcome = dog.outcome = ending(judged, worker)
        abort_and_log(outcome, judged, worker, f"{spec.prefix}-{spec.process.name}", spec.task)
        del judged  # as `exc`: its traceback holds this frame
    if worker is not None:
        try:
            worker._maybe_status(force=True)
        except Exception:
            log.debug("last status failed", exc_info=True)
        # A stop asked while recovering flushes nothing: the producer may be the wedged one.
        worker.close(outcome.kind is StopKind.CLEAN
                     and worker.state not in (TaskState.RECOVERING, TaskState.RESTORING))
    reporter.final(outcome.kind, outcome.reason, outcome.detail,
                   metrics=None if worker is None else worker.metric_fields())
    reporter.close()
    code = exit_code_for(outcome.kind, outcome.reason)
    if spawned:
        logging.shutdown()
        raise SystemExit(code)
    return code

