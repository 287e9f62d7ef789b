"""Several coordinators share a process's tasks through a consumer group of coordinators.

With ``--join`` (docs/operations.md, "Several coordinators") the coordinators of one
prefix are, per process, the members of consumer group
``<prefix>-<process>-__parsley.coordinators``, whose partition ``i`` stands for task ``i``
(no record is ever written to it); the ``cooperative-sticky`` assignor (KIP-429) moves only
the tasks that must move. Assigned partitions are tasks gained (bootstrapped on a thread of
their own, then spawned: :meth:`Supervisor.assign_tasks`); revoked or lost ones are tasks
that move away, stopped inside the revocation callback (:meth:`Supervisor.release_tasks`).
Every blocking client call is bounded. The whole procedure is in docs/architecture.md,
"The coordinator", "Several coordinators: membership".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from confluent_kafka import Consumer, KafkaException, TopicPartition

from coordinator.bootstrap import (
    ProcessPlan,
    StartError,
    bootstrap_process,
    progress_logger,
    resolve_topics,
)
from coordinator.bootstrap.clients import new_admin
from coordinator.bootstrap.common import check_reachable, with_client_logger
from coordinator.bootstrap.group import (
    leave_window_s,
    session_timeout_ms,
)
from coordinator.config import ParsleyConfig
from coordinator.runtime.coordinators_group import (
    coordinators_group,
    ensure_coordinators_topics,
    membership_consumer_config,
    refuse_beside_plain_coordinator,
)
from coordinator.runtime.supervisor import Supervisor
from parsley.declarations import Process, task_width, validate_declarations
from parsley.refusals import ParsleyFailClosedError

__all__ = [
    "Membership",
    "start_joined",
]

log = logging.getLogger("parsley.coordinator.membership")

POLL_S: Final = 0.2
"""s one ``poll`` of the membership consumer may block."""
RETRY_FIRST_S: Final = 1.0
"""s before retrying a gained task's bootstrap the first time; doubles up to
:data:`RETRY_CAP_S`."""
RETRY_CAP_S: Final = 8.0
"""The longest wait between two bootstrap attempts of gained tasks, s."""
BOOTSTRAP_BOUND_FLOOR_S: Final = 120.0
"""The least time a gained task's bootstrap may take before it is abandoned, s; the
bound is the larger of this and four session timeouts (the group window is two)."""


def bootstrap_bound_s(session_s: float) -> float:
    """How long a gained task's bootstrap may run before it is abandoned, s (pure):
    the larger of :data:`BOOTSTRAP_BOUND_FLOOR_S` and ``4 * session_s``."""
    return max(BOOTSTRAP_BOUND_FLOOR_S, 4 * session_s)


@dataclass
class _Pending:
    tasks: set[int]
    attempts: int = 0
    next_at: float = 0.0


@dataclass
class _Attempt:
    """One bootstrap running on its own thread: the tasks, the assignment epoch of each
    when it began, and its outcome once ``done`` is set."""

    tasks: set[int]
    epochs: dict[int, int]
    started: float
    done: threading.Event
    plan: ProcessPlan | None = None
    error: BaseException | None = None
    polled_after: bool = False


class _ProcessMembership:
    """One process's membership: its consumer, its thread, the tasks it owns."""

    def __init__(self, config: ParsleyConfig, process: Process, supervisor: Supervisor,
                 stop_deadline_s: float, group_window_s: float | None,
                 client_id: str | None = None) -> None:
        self.config = config
        self.client_id = client_id
        self.process = process
        self.supervisor = supervisor
        self.stop_deadline_s = stop_deadline_s
        self.group_window_s = group_window_s
        self.group = coordinators_group(config.application_id_prefix, process.name)
        self.session_s = session_timeout_ms(config.kafka_properties) / 1000.0
        self.owned: set[int] = set()  # assigned by the group (spawned or pending)
        self.pending = _Pending(set())
        self.epoch: dict[int, int] = {}  # task -> count of assignments of it here
        self.attempt: _Attempt | None = None
        self.fence_checks: dict[int, float] = {}  # task -> monotonic s to check it moved
        self.bound_s = bootstrap_bound_s(self.session_s)
        self.lock = threading.Lock()
        self.closing = threading.Event()
        self.closed = threading.Event()
        self.consumer: Consumer | None = None
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"parsley-membership-{process.name}")
        self.moves: list[tuple[float, str, list[int]]] = []

    # -- callbacks (run inside poll, on the membership thread) -----------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gained = {tp.partition for tp in partitions}
        if not gained:
            return
        with self.lock:
            self.owned |= gained
            self.pending.tasks |= gained
            for t in gained:
                self.epoch[t] = self.epoch.get(t, 0) + 1
                self.fence_checks.pop(t, None)
            self.pending.attempts, self.pending.next_at = 0, 0.0
        self.moves.append((time.monotonic(), "assigned", sorted(gained)))
        log.info("%s: assigned task(s) %s by the coordinators' group (now owns %s)",
                 self.group, sorted(gained), sorted(self.owned))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._release({tp.partition for tp in partitions}, "revoked")

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._release({tp.partition for tp in partitions}, "lost")

    def _release(self, tasks: set[int], how: str) -> None:
        if not tasks:
            return
        with self.lock:
            self.owned -= tasks
            self.pending.tasks -= tasks
            for t in tasks:
                self.fence_checks.pop(t, None)
        self.moves.append((time.monotonic(), how, sorted(tasks)))
        started = time.monotonic()
        report = self.supervisor.release_tasks(self.process.name, tasks, self.stop_deadline_s)
        log.info("%s: task(s) %s %s: their workers stopped in %.1f s (%s)", self.group,
                 sorted(tasks), how, time.monotonic() - started, report.summary())

    # -- the thread --------------------------------------------------------------------

    def _run(self) -> None:
        try:
            consumer = Consumer(with_client_logger(
                membership_consumer_config(self.config, self.process.name, self.client_id,
                                           self.stop_deadline_s)))
            self.consumer = consumer
            consumer.subscribe([self.group], on_assign=self._on_assign,
                               on_revoke=self._on_revoke, on_lost=self._on_lost)
            while not self.closing.is_set():
                try:
                    consumer.poll(POLL_S)
                except KafkaException as exc:
                    log.warning("%s: membership poll: %s", self.group, exc)
                self._bootstrap_pending()
                self._check_fenced()
            with self.lock:
                mine = set(self.owned)
            self._release(mine, "released at the coordinator's stop")
            consumer.close()  # leaves the group: the peers take the tasks
        except Exception:
            log.exception("%s: the membership thread failed", self.group)
        finally:
            self.closed.set()

    def _bootstrap_pending(self) -> None:
        """Start the bootstrap of the pending tasks on a thread of its own, or act on the
        one that ended (called between polls; never blocks)."""
        attempt = self.attempt
        if attempt is not None:
            if attempt.done.is_set() and attempt.polled_after:
                self.attempt = None
                self._finish(attempt)
            elif attempt.done.is_set():
                attempt.polled_after = True  # act after one more poll (on_lost delivered)
            elif time.monotonic() - attempt.started > self.bound_s:
                self._abandon(attempt)
            return
        with self.lock:
            tasks = set(self.pending.tasks)
            due = tasks and time.monotonic() >= self.pending.next_at
            lead = 0 in self.owned
            epochs = {t: self.epoch.get(t, 0) for t in tasks}
        if not due:
            return
        attempt = _Attempt(tasks, epochs, time.monotonic(), threading.Event())
        self.attempt = attempt

        def run() -> None:
            try:
                attempt.plan = self._bootstrap(tasks, lead)
            except BaseException as exc:  # handed to the membership thread
                attempt.error = exc
            finally:
                attempt.done.set()

        threading.Thread(target=run, daemon=True,
                         name=f"parsley-bootstrap-{self.process.name}").start()

    def _abandon(self, attempt: _Attempt) -> None:
        """A bootstrap past :attr:`bound_s`: stop the process here (fail closed); the
        thread is left to end on its own clients' bounds."""
        self.attempt = None
        with self.lock:
            self.pending.tasks -= attempt.tasks
        detail = (f"the bootstrap of task(s) {sorted(attempt.tasks)} of '{self.process.name}' "
                  f"did not end within {self.bound_s:.0f} s (the bound: four session "
                  f"timeouts, at least {BOOTSTRAP_BOUND_FLOOR_S:.0f} s); the tasks were "
                  f"not started here")
        log.error("%s: %s (failing closed)", self.group, detail)
        self.supervisor.fail_process(self.process.name, None, detail)

    def _finish(self, attempt: _Attempt) -> None:
        """Act on an ended bootstrap: spawn the tasks still assigned here in the same
        assignment (epoch) it began in; retry or refuse on an error."""
        tasks, exc = attempt.tasks, attempt.error
        if isinstance(exc, ParsleyFailClosedError):
            log.error("%s: the bootstrap of task(s) %s refused: %s (failing closed)",
                      self.group, sorted(tasks), exc)
            with self.lock:
                self.pending.tasks -= tasks
            self.supervisor.fail_process(self.process.name, exc.reason, exc.detail)
            return
        if isinstance(exc, (StartError, OSError)):
            with self.lock:
                self.pending.attempts += 1
                delay = min(RETRY_CAP_S, RETRY_FIRST_S * 2 ** (self.pending.attempts - 1))
                self.pending.next_at = time.monotonic() + delay
            log.warning("%s: the bootstrap of task(s) %s did not complete (%s); again in "
                        "%.1f s", self.group, sorted(tasks), exc, delay)
            return
        if exc is not None:
            log.error("%s: the bootstrap of task(s) %s failed: %r (failing closed)",
                      self.group, sorted(tasks), exc)
            with self.lock:
                self.pending.tasks -= tasks
            self.supervisor.fail_process(
                self.process.name, None,
                f"the bootstrap of task(s) {sorted(tasks)} failed: {exc!r}")
            return
        assert attempt.plan is not None
        with self.lock:
            # Still assigned here, in the assignment the bootstrap began in (a poll ran
            # since the bootstrap ended, so a revocation or loss has been delivered).
            still = {t for t in tasks
                     if t in self.owned and self.epoch.get(t, 0) == attempt.epochs[t]}
            self.pending.tasks -= still
        if still != tasks:
            log.warning("%s: task(s) %s moved while their bootstrap ran; not started here",
                        self.group, sorted(tasks - still))
        if still:
            self.supervisor.assign_tasks(self.process.name, attempt.plan, still)
            self.moves.append((time.monotonic(), "spawned", sorted(still)))

    def _check_fenced(self) -> None:
        """A task whose worker was fenced by a successor but which the group still
        assigns here after twice the session timeout: two owners, fail closed."""
        now = time.monotonic()
        with self.lock:
            due = [t for t, at in self.fence_checks.items() if now >= at]
            for t in due:
                del self.fence_checks[t]
            stuck = sorted(t for t in due if t in self.owned)
        if stuck:
            detail = (f"the worker(s) of task(s) {stuck} of '{self.process.name}' were "
                      f"fenced by a successor, but the coordinators' group still assigns "
                      f"them here after {2 * self.session_s:.0f} s: another coordinator or "
                      f"worker runs them outside the group (docs/operations.md, \"Several "
                      f"coordinators\")")
            log.error("%s: %s (failing closed)", self.group, detail)
            self.supervisor.fail_process(self.process.name, None, detail)

    def _bootstrap(self, tasks: set[int], lead: bool) -> ProcessPlan:
        """Bootstrap ``tasks`` on clients of this attempt's own (StartRetryableError is a
        StartError)."""
        admin = new_admin(self.config)
        try:
            check_reachable(admin, self.config.bootstrap_servers)
            names = {c.name for c in (*(i.channel for i in self.process.inputs),
                                      *self.process.outputs)}
            topics = resolve_topics(admin, names)
            return bootstrap_process(self.config, self.process, topics, admin,
                                     on_progress=progress_logger(),
                                     group_window_s=self.group_window_s,
                                     tasks=tasks, lead=lead)
        finally:
            del admin

    def fenced(self, task: int) -> bool:
        """A worker of ``task`` stopped fenced by a live successor
        (:func:`coordinator.runtime.supervisor.exits.fenced_by_successor`): this coordinator
        lost the task, and hears so at its next poll (``on_lost``).

        If the group still assigns the task here after twice the session timeout, the
        process stops here as failed (:meth:`_check_fenced`): it is never started again
        on that account.

        Returns:
            ``True``: the exit is the task moving, not a failure (yet).
        """
        with self.lock:
            owned = task in self.owned
            if owned:
                self.pending.tasks.discard(task)
                self.fence_checks[task] = time.monotonic() + 2 * self.session_s
        self.moves.append((time.monotonic(), "fenced", [task]))
        if owned:
            log.warning("%s: task %d's worker was fenced by a successor; if the group still "
                        "assigns it here in %.0f s the process stops here", self.group, task,
                        2 * self.session_s)
        else:
            log.info("%s: task %d's worker was fenced by its successor on the coordinator "
                     "the group moved it to", self.group, task)
        return True

    def rebootstrap(self) -> ProcessPlan:
        """The bootstrap of every task owned now (a restart through the bootstrap)."""
        with self.lock:
            tasks, lead = set(self.owned), 0 in self.owned
        # No fence here: the owned set includes tasks gained and still being bootstrapped,
        # whose workers may start meanwhile, and a previous owner's worker may live on
        # until it hears its loss; each worker fences its own task at its start.
        return self._bootstrap(tasks, lead)


class Membership:
    """Every process's membership of its coordinators' group (module docstring).

    Args:
        config: the configuration.
        processes: the declared processes (validated).
        supervisor: the supervisor, started with no task owned.
        stop_deadline_s: SIGTERM-to-SIGKILL deadline for revoked tasks, s.
        group_window_s: as :func:`coordinator.bootstrap.bootstrap_process`.
        client_id: the members' ``client.id``
            (:func:`coordinator.runtime.peers.coordinator_client_id`).
        task_counts: ``{process: W}``, kept for the application's status.
    """

    def __init__(self, config: ParsleyConfig, processes: Sequence[Process],
                 supervisor: Supervisor, *, stop_deadline_s: float,
                 group_window_s: float | None = None, client_id: str | None = None,
                 task_counts: Mapping[str, int] | None = None) -> None:
        self._members = {p.name: _ProcessMembership(config, p, supervisor, stop_deadline_s,
                                                    group_window_s, client_id)
                         for p in processes}
        self.task_counts: dict[str, int] = dict(task_counts or {})

    def start(self) -> None:
        """Join every process's coordinators' group (returns at once; assignments follow)."""
        for m in self._members.values():
            m.thread.start()

    def owned(self) -> dict[str, list[int]]:
        """``{process: task indexes assigned to this coordinator}``."""
        out: dict[str, list[int]] = {}
        for name, m in self._members.items():
            with m.lock:
                out[name] = sorted(m.owned)
        return out

    def moves(self) -> dict[str, list[tuple[float, str, list[int]]]]:
        """``{process: [(monotonic s, "assigned"|"spawned"|"revoked"|"lost"|..., tasks)]}``."""
        return {name: list(m.moves) for name, m in self._members.items()}

    def rebootstrap(self, name: str) -> ProcessPlan:
        """The bootstrap of process ``name``'s owned tasks (``Supervisor``'s ``rebootstrap``)."""
        return self._members[name].rebootstrap()

    def fenced(self, name: str, task: int) -> bool:
        """``Supervisor``'s ``on_fenced``: see :meth:`_ProcessMembership.fenced`."""
        return self._members[name].fenced(task)

    def close(self, deadline_s: float) -> bool:
        """Stop the owned tasks and leave every group, at most ``deadline_s`` s.

        Returns:
            ``True`` when every membership thread ended within the deadline.
        """
        for m in self._members.values():
            m.closing.set()
        end = time.monotonic() + deadline_s
        ok = True
        for m in self._members.values():
            if m.thread.is_alive():
                m.thread.join(max(0.0, end - time.monotonic()))
                ok = ok and not m.thread.is_alive()
        if not ok:
            log.error("leaving the coordinators' groups did not end within %g s", deadline_s)
        return ok


def start_joined(config: ParsleyConfig, processes: Sequence[Process], *,
                 supervisor_factory: Callable[..., Supervisor], stop_deadline_s: float,
                 group_window_s: float | None = None, client_id: str | None = None
                 ) -> tuple[Supervisor, Membership]:
    """A ``--join`` start: resolve the topics, create the coordinators' topics, start a
    supervisor that owns no task yet and join the coordinators' groups.

    Args:
        config: the configuration.
        processes: the declared processes.
        supervisor_factory: ``(plans, owned=..., rebootstrap=..., on_fenced=...) ->
            Supervisor``
            (the caller's restart policy, target and deadlines bound in).
        stop_deadline_s: SIGTERM-to-SIGKILL deadline for revoked tasks, s.
        group_window_s: as :func:`coordinator.bootstrap.bootstrap_process`.
        client_id: as :class:`Membership`.

    Returns:
        The started supervisor and membership.

    Raises:
        ValueError: a wrong declaration.
        StartError: as :func:`ensure_coordinators_topics`.
        ParsleyFailClosedError: as :func:`refuse_beside_plain_coordinator`.
    """
    validate_declarations(config.application_id_prefix, list(processes))
    topics = ensure_coordinators_topics(config, processes)
    refuse_beside_plain_coordinator(config, processes,
                                    leave_window_s(config.kafka_properties))
    plans: dict[str, ProcessPlan] = {}
    for p in processes:
        declared = {*p.received_topics, *(c.name for c in p.outputs)}
        plans[p.name] = ProcessPlan(
            process=p, prefix=config.application_id_prefix,
            task_count=task_width({t: topics[t].partitions for t in p.received_topics}),
            topics={n: topics[n] for n in declared}, prior_state=False, start_positions={})
    holder: list[Membership] = []
    supervisor = supervisor_factory(
        plans, owned={p.name: frozenset() for p in processes},
        rebootstrap=lambda name: holder[0].rebootstrap(name),
        on_fenced=lambda name, task: bool(holder) and holder[0].fenced(name, task))
    supervisor.start()
    membership = Membership(config, processes, supervisor, stop_deadline_s=stop_deadline_s,
                            group_window_s=group_window_s, client_id=client_id,
                            task_counts={n: p.task_count for n, p in plans.items()})
    holder.append(membership)
    membership.start()
    return supervisor, membership
