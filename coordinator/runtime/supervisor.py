"""One worker OS process per task: spawn, watch, classify exits, blast radius, bounded shutdown.

The supervisor spawns task ``i`` of every planned process as its own OS
process (``multiprocess`` spawn context; the :class:`workers.protocol.TaskSpec`
pickles with dill), listens on one ZeroMQ ``PULL`` socket for the workers'
``status`` and ``final`` messages, and watches each worker's exit with
psutil-backed process handles. Decisions key on the
:class:`~workers.protocol.StopKind` a worker reports (or its exit code), never
on message text (docs/operations.md, "Supervision").

* **Blast radius** (docs/failing-closed.md, "Blast radius"): any task stopping without a stop
  request stops every task of its process; other processes keep running.
* **Restart policy** (docs/runbooks.md, "Fix the restart rule"), :class:`RestartPolicy`:
  ``never`` (default) restarts nothing. Under ``transient``: ``SUBSTRATE``
  restarts the whole process through its bootstrap (re-resolving topics and
  pre-commits) with exponential backoff and a bounded attempt count;
  ``APPLICATION`` and ``FATAL`` never (the same message fails again; a fenced
  worker has a successor); ``REFUSAL`` never, except ``COVERED_POSITION_FED``
  once; ``CRASHED`` (no report) respawns that one task, bounded, while the
  others keep running.
* **Ownership passes only on a confirmed exit** (docs/operations.md, "Supervision"): nothing is
  respawned for a task whose worker has not been seen to exit.
* **One owner per child**: the watch thread alone reaps the workers
  (``waitpid``) and records each exit; every other thread (a shutdown, a
  restart) waits on that record. A signal goes to a worker only while it is
  not yet reaped, checked under the same lock as the reaping, so never to a
  PID that is no longer a child of ours.
* **Stale tasks**: a worker that sends no report (status or final) for
  ``stale_task_ms`` is SIGKILLed by PID and treated as a crash: respawned
  under ``transient``, its process stopped under ``never``, with a detail that
  names the task, how long it was silent and its last reported state.
* **A restart budget that resets** (docs/operations.md, "Supervision"):
  ``max_restarts`` respawns of a task, or restarts of a process, with a
  backoff doubling from ``restart_backoff_ms`` up to 30 s; a task RUNNING for
  ``restart_reset_ms`` without a break resets its count (and its process's,
  once every task has) to zero.
* **Bounded shutdown**: SIGTERM, a deadline, SIGKILL, and a
  :class:`ShutdownReport` naming every worker that had to be killed or did not
  stop at all.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import multiprocess  # type: ignore[import-untyped]
import orjson
import psutil  # type: ignore[import-untyped]
import zmq

from coordinator.bootstrap import ProcessPlan, StartError
from coordinator.config import ParsleyConfig
from coordinator.control.status import (
    ProcessState,
    ProcessStatus,
    TaskStatus,
    aggregate_state,
    process_state,
    task_status_from_report,
)
from parsley.refusals import ParsleyFailClosedError, Reason
from workers.protocol import (
    EXIT_CODES,
    FINAL,
    REFUSAL_EXIT_BASE,
    STATUS,
    StopKind,
    TaskSpec,
    exit_verdict,
)

__all__ = [
    "DEFAULT_STOP_DEADLINE_S",
    "RestartPolicy",
    "ShutdownReport",
    "StoppedWorker",
    "Supervisor",
    "TaskObserver",
    "WorkerTarget",
    "classify_exit",
    "describe_exit",
]

log = logging.getLogger("parsley.coordinator.supervisor")

DEFAULT_STOP_DEADLINE_S: Final = 10.0
"""s a worker has between SIGTERM and SIGKILL."""
KILL_WAIT_S: Final = 3.0
"""s to wait for a SIGKILLed worker to be reaped before reporting it as not stopped."""
FINAL_GRACE_S: Final = 0.5
"""s to wait for a final message after an exit whose code promises one."""
BACKOFF_CAP_S: Final = 30.0
"""The longest restart delay, s."""

WorkerTarget = Callable[[TaskSpec], int]
"""``run(spec) -> exit code``: a worker's entry point (``workers.main.run``)."""


class TaskObserver(Protocol):
    """What the supervisor tells an observer of its workers (the metrics,
    :class:`coordinator.control.metrics.MetricsBook`).

    Called under the supervisor's lock, from its watch thread or the thread
    that spawns: an observer must return quickly and never call the supervisor.
    An exception from it is logged and otherwise ignored.
    """

    def spawned(self, process: str, task: int, pid: int) -> None:
        """A worker for ``process``/``task`` was spawned as ``pid``."""

    def reported(self, process: str, task: int, pid: int, message: Mapping[str, Any]) -> None:
        """The current worker's ``status`` or ``final`` message (:mod:`workers.protocol`)."""

    def exited(self, process: str, task: int, pid: int, kind: StopKind,
               reason: Reason | None) -> None:
        """A worker's exit, classified (:func:`classify_exit`)."""


class RestartPolicy(enum.Enum):
    """What the supervisor restarts on its own (docs/runbooks.md, "Fix the restart rule")."""

    NEVER = "never"
    """Restart nothing; every stop is left to the operator."""
    TRANSIENT = "transient"
    """Restart substrate failures (whole process, through its bootstrap, bounded),
    COVERED_POSITION_FED once, and crashed workers (that task, bounded)."""


def describe_exit(exitcode: int | None) -> str:
    """``"exited with code N"`` or ``"was killed by signal N (SIGNAME)"``."""
    if exitcode is None:
        return "has not exited"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-exitcode} ({name})"
    return f"exited with code {exitcode}"


SUCCESSOR_FENCED: Final = "fenced by a live successor:"
"""How a worker's ``failure_detail`` begins when a live successor holds its task's
``group.instance.id`` (KIP-345; ``workers.main._successor_stop``)."""


def fenced_by_successor(kind: StopKind, detail: str | None) -> bool:
    """Whether a worker's stop is the task moving to a live successor (pure).

    Only a ``FATAL`` stop whose final report says a live successor holds the task's
    ``group.instance.id`` (:data:`SUCCESSOR_FENCED`) counts; every other ``FATAL`` (an
    unexpected exception, a native panic, a fatal client error) is a failure that stops
    the process, with ``--join`` as without (docs/operations.md, "Several coordinators").
    """
    return kind is StopKind.FATAL and detail is not None \
        and detail.startswith(SUCCESSOR_FENCED)


def classify_exit(final: Mapping[str, Any], code: int | None
                  ) -> tuple[StopKind, Reason | None, str | None]:
    """How a worker stopped, from its final report or, when that was lost, its exit code (pure).

    Never reads message text (docs/operations.md, "Supervision": classified by the stop kind).

    Args:
        final: the worker's ``"final"`` message (``workers.protocol``), or ``{}``
            when none arrived.
        code: its exit status (``multiprocess.Process.exitcode``).

    Returns:
        ``(kind, reason, detail)``: the report's stop kind, refusal reason and
        ``failure_detail`` when there is a report (an unreadable kind falls back
        to the exit code's, a missing reason to the code's reason); without a
        report the exit code's :class:`workers.protocol.ExitVerdict` and a
        detail saying the final report was lost — ``"refusal <REASON> (final
        report lost)"``, ``"refusal, reason unknown (final report lost)"`` for
        exit code 10, ``None`` for a crash (the caller describes the exit).
    """
    verdict = exit_verdict(code)
    if not final:
        if verdict.kind is StopKind.CRASHED:
            return verdict.kind, None, None
        if verdict.kind is StopKind.REFUSAL:
            what = (f"refusal {verdict.reason.name}" if verdict.reason is not None
                    else "refusal, reason unknown")
        else:
            what = f"stop {verdict.kind.value}"
        return verdict.kind, verdict.reason, f"{what} (final report lost)"
    try:
        kind = StopKind(final["stop_kind"])
    except (KeyError, ValueError, TypeError):
        kind = verdict.kind
    reason: Reason | None = None
    if kind is StopKind.REFUSAL:
        if final.get("refusal_reason"):
            with contextlib.suppress(ValueError, TypeError):
                reason = Reason(final["refusal_reason"])
        if reason is None:
            reason = verdict.reason
    raw = final.get("failure_detail")
    return kind, reason, raw if isinstance(raw, str) and raw else None


def _worker_main(target: WorkerTarget, spec: TaskSpec) -> None:
    # Ctrl-C reaches the whole process group; the coordinator alone decides the stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    code = target(spec)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(int(code) if code is not None else 0)


def _default_target() -> WorkerTarget:
    from workers.main import run  # type: ignore[import-not-found,unused-ignore]

    return run  # type: ignore[no-any-return,unused-ignore]


@dataclass(frozen=True, slots=True)
class StoppedWorker:
    """A worker the shutdown had to deal with.

    Attributes:
        process: the process name.
        task: the task index.
        pid: its OS process id.
        outcome: ``"killed"`` (SIGKILL after the deadline) or ``"not_stopped"``
            (still alive after SIGKILL: ownership of the task did not pass).
    """

    process: str
    task: int
    pid: int
    outcome: str


@dataclass(frozen=True, slots=True)
class ShutdownReport:
    """What a bounded shutdown achieved.

    Attributes:
        stopped: ``process/task`` of workers that exited within the deadline.
        killed: workers SIGKILLed after the deadline (they did exit).
        not_stopped: workers still alive after SIGKILL.
        deadline_s: the SIGTERM-to-SIGKILL deadline used, s.
    """

    stopped: tuple[str, ...] = ()
    killed: tuple[StoppedWorker, ...] = ()
    not_stopped: tuple[StoppedWorker, ...] = ()
    deadline_s: float = DEFAULT_STOP_DEADLINE_S

    @property
    def clean(self) -> bool:
        """Every worker exited within the deadline."""
        return not self.killed and not self.not_stopped

    def merge(self, other: ShutdownReport) -> ShutdownReport:
        """Both reports' workers together."""
        return ShutdownReport(self.stopped + other.stopped, self.killed + other.killed,
                              self.not_stopped + other.not_stopped,
                              max(self.deadline_s, other.deadline_s))

    def to_json(self) -> dict[str, Any]:
        """``{"clean", "deadline_s", "stopped", "killed", "not_stopped"}``."""
        def row(w: StoppedWorker) -> dict[str, Any]:
            return {"process": w.process, "task": w.task, "pid": w.pid}
        return {"clean": self.clean, "deadline_s": self.deadline_s, "stopped": list(self.stopped),
                "killed": [row(w) for w in self.killed],
                "not_stopped": [row(w) for w in self.not_stopped]}

    def summary(self) -> str:
        """One line for the log."""
        if self.clean:
            return f"{len(self.stopped)} worker(s) stopped within {self.deadline_s:g} s"
        parts = []
        if self.killed:
            parts.append("killed after the deadline: " + ", ".join(
                f"{w.process}/{w.task} (pid {w.pid})" for w in self.killed))
        if self.not_stopped:
            parts.append("did not stop even after SIGKILL: " + ", ".join(
                f"{w.process}/{w.task} (pid {w.pid})" for w in self.not_stopped))
        return f"{len(self.stopped)} worker(s) stopped within {self.deadline_s:g} s; " + \
            "; ".join(parts)


@dataclass
class _Task:
    index: int
    proc: Any  # multiprocess.Process
    pid: int
    handle: psutil.Process | None
    started_at: float = field(default_factory=time.monotonic)
    report: dict[str, Any] | None = None
    report_at: float | None = None
    heard_at: float | None = None
    last_state: str | None = None
    running_since: float | None = None
    final: dict[str, Any] | None = None
    exit_code: int | None = None
    exited_at: float | None = None
    exited: threading.Event = field(default_factory=threading.Event)
    stale: tuple[float, str | None] | None = None
    crash_respawns: int = 0
    malformed_logged: bool = False
    released: bool = False  # stopped because its task moved to another coordinator


@dataclass
class _Run:
    plan: ProcessPlan
    tasks: dict[int, _Task] = field(default_factory=dict)
    stopped: bool = False
    closing: bool = False
    refusal_reason: Reason | None = None
    failure_detail: str | None = None
    restarts: int = 0
    substrate_attempts: int = 0
    covered_restart_used: bool = False
    restarting: bool = False
    generation: int = 0
    owned: frozenset[int] | None = None  # the tasks this coordinator runs; None: all

    def indexes(self) -> list[int]:
        """The task indexes this coordinator runs: all W, or the ones it owns (``--join``)."""
        return list(range(self.plan.task_count)) if self.owned is None else sorted(self.owned)


def _status_endpoint(config: ParsleyConfig) -> str:
    base = Path(config.state_dir) / ".coordinator"
    path = base / f"{config.application_id_prefix}-{os.getpid()}-{uuid.uuid4().hex[:6]}.status"
    if len(str(path)) < 100:
        base.mkdir(parents=True, exist_ok=True)
        return f"ipc://{path}"
    return "tcp://127.0.0.1:*"


class Supervisor:
    """Spawns and supervises the workers of a set of bootstrapped processes.

    Args:
        config: the configuration (intervals, budget, state dir, client properties).
        plans: ``{process name: ProcessPlan}`` from :func:`coordinator.bootstrap.bootstrap`.
        restart: the :class:`RestartPolicy`.
        target: the worker entry point; ``workers.main.run`` by default.
        rebootstrap: re-runs one process's bootstrap for a restart
            (``name -> ProcessPlan``); without it, no process restart is made.
        max_attempts: restarts of one process for substrate failures, and
            respawns of one crashed (or stale) task, before the supervisor
            gives up; ``config.max_restarts`` if ``None``.
        backoff_s: first restart delay, s; doubles per attempt up to
            ``backoff_cap_s``; ``config.restart_backoff_ms`` if ``None``.
        backoff_cap_s: longest restart delay, s.
        stop_deadline_s: SIGTERM-to-SIGKILL deadline for a blast-radius stop, s.
        stale_after_s: a worker silent this long is killed as stale, s;
            ``config.stale_task_ms`` if ``None``.
        reset_after_s: a task RUNNING this long resets the budget and backoff, s;
            ``config.restart_reset_ms`` if ``None``.
        observer: told of every spawn, accepted report and classified exit
            (:class:`TaskObserver`), or ``None``.
        owned: ``{process: task indexes}`` this coordinator runs at first (``--join``:
            none, until the coordinators' group assigns some; :mod:`coordinator.runtime.membership`);
            ``None`` (default) for every task.
        on_fenced: ``(process, task) -> bool``, asked when a worker stops fenced by a live
            successor (:func:`fenced_by_successor`; any other ``FATAL`` stops the
            process); ``True`` takes the exit as the task moving away (no
            blast radius; :mod:`coordinator.runtime.membership` decides what runs it).
    """

    def __init__(
        self,
        config: ParsleyConfig,
        plans: Mapping[str, ProcessPlan],
        *,
        restart: RestartPolicy = RestartPolicy.NEVER,
        target: WorkerTarget | None = None,
        rebootstrap: Callable[[str], ProcessPlan] | None = None,
        max_attempts: int | None = None,
        backoff_s: float | None = None,
        backoff_cap_s: float = BACKOFF_CAP_S,
        stop_deadline_s: float = DEFAULT_STOP_DEADLINE_S,
        stale_after_s: float | None = None,
        reset_after_s: float | None = None,
        observer: TaskObserver | None = None,
        owned: Mapping[str, frozenset[int]] | None = None,
        on_fenced: Callable[[str, int], bool] | None = None,
    ) -> None:
        self._config = config
        self._observer = observer
        self._on_fenced = on_fenced
        self._policy = RestartPolicy(restart)
        self._target = target
        self._rebootstrap = rebootstrap
        self._max_attempts = config.max_restarts if max_attempts is None else max_attempts
        self._backoff_s = config.restart_backoff_ms / 1000.0 if backoff_s is None else backoff_s
        self._stale_after_s = (config.stale_task_ms / 1000.0 if stale_after_s is None
                               else stale_after_s)
        self._reset_after_s = (config.restart_reset_ms / 1000.0 if reset_after_s is None
                               else reset_after_s)
        self._backoff_cap_s = backoff_cap_s
        self._stop_deadline_s = stop_deadline_s
        self._runs = {name: _Run(plan, owned=None if owned is None else owned.get(name))
                      for name, plan in plans.items()}
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._ctx = multiprocess.get_context("spawn")
        self._zmq: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self._pull: zmq.Socket[bytes] | None = None
        self._endpoint = ""
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()
        self._helpers: list[threading.Thread] = []

    # --- lifecycle -------------------------------------------------------

    @property
    def status_endpoint(self) -> str:
        """The ZeroMQ endpoint the workers push to."""
        return self._endpoint

    def start(self) -> None:
        """Bind the report socket, spawn every task of every process, start watching.

        Raises:
            RuntimeError: a worker could not be spawned (every spawned worker
                is stopped again first).
        """
        pull = self._zmq.socket(zmq.PULL)
        pull.setsockopt(zmq.LINGER, 0)
        pull.bind(_status_endpoint(self._config))
        self._endpoint = pull.getsockopt_string(zmq.LAST_ENDPOINT)
        self._pull = pull
        # The watch thread (every worker's one reaper) runs before the first spawn.
        self._thread = threading.Thread(target=self._watch, name="parsley-supervisor",
                                        daemon=True)
        self._thread.start()
        try:
            with self._lock:
                for run in self._runs.values():
                    self._spawn_all(run)
        except BaseException:
            self._terminate_all(self._stop_deadline_s)
            self._closing.set()
            self._thread.join(timeout=5)
            pull.close(0)
            raise

    def _spec(self, plan: ProcessPlan, task: int) -> TaskSpec:
        c = self._config
        return TaskSpec(
            process=plan.process, prefix=plan.prefix, task=task, task_count=plan.task_count,
            bootstrap_servers=c.bootstrap_servers, status_endpoint=self._endpoint,
            state_dir=c.state_dir, topic_ids=plan.topic_ids, partitions=plan.partitions,
            kafka_properties=c.kafka_properties_for(plan.process),
            metadata_budget_bytes=c.metadata_budget_bytes,
            commit_interval_ms=c.commit_interval_ms, status_interval_ms=c.status_interval_ms,
            cross_partition_causes=c.cross_partition_causes,
        )

    def _spawn(self, plan: ProcessPlan, task: int) -> _Task:
        target = self._target or _default_target()
        proc = self._ctx.Process(
            target=_worker_main, args=(target, self._spec(plan, task)),
            name=f"parsley-{plan.application_id}-task-{task}", daemon=True,
        )
        proc.start()
        # One reaper: multiprocess's own bookkeeping reaps finished children from
        # whichever thread starts the next process; ours are reaped by the watch thread.
        multiprocess.process._children.discard(proc)
        pid = int(proc.pid)
        handle: psutil.Process | None
        try:
            handle = psutil.Process(pid)
            handle.cpu_percent(None)
        except psutil.Error:
            handle = None
        log.info("%s: task %d started as pid %d", plan.application_id, task, pid)
        self._observe("spawned", plan.name, task, pid)
        return _Task(task, proc, pid, handle)

    def _spawn_all(self, run: _Run) -> None:
        run.generation += 1
        run.tasks = {}
        for i in run.indexes():
            run.tasks[i] = self._spawn(run.plan, i)

    # --- observing -------------------------------------------------------

    def status(self) -> dict[str, ProcessStatus]:
        """Every process's :class:`ProcessStatus`, tasks aged now."""
        now = time.monotonic()
        interval = self._config.status_interval_ms
        out: dict[str, ProcessStatus] = {}
        with self._lock:
            for name, run in self._runs.items():
                if run.stopped:
                    out[name] = ProcessStatus(ProcessState.STOPPED, run.refusal_reason,
                                              run.failure_detail, (), run.restarts)
                    continue
                tasks: list[TaskStatus] = []
                for t in sorted(run.tasks.values(), key=lambda t: t.index):
                    if t.report is None or t.report_at is None or t.exit_code is not None:
                        continue
                    rss, cpu = None, None
                    if t.handle is not None:
                        with contextlib.suppress(psutil.Error):
                            rss = int(t.handle.memory_info().rss)
                            cpu = float(t.handle.cpu_percent(None))
                    try:
                        tasks.append(task_status_from_report(
                            t.report, age_ms=int((now - t.report_at) * 1000),
                            status_interval_ms=interval, rss_bytes=rss, cpu_percent=cpu))
                    except (KeyError, TypeError, ValueError) as exc:
                        if not t.malformed_logged:  # once per worker, not once per status()
                            t.malformed_logged = True
                            log.warning("%s: task %d (pid %d) sent a malformed status report "
                                        "(%s: %s); it has no status entry until a readable "
                                        "one arrives", run.plan.application_id, t.index, t.pid,
                                        type(exc).__name__, exc)
                # Over every task: one that exited and waits for its respawn is STARTING.
                reported = {t.index: None if t.report is None else str(t.report.get("state"))
                            for t in run.tasks.values() if t.exit_code is None}
                state = process_state(run.plan.task_count, reported) if run.owned is None \
                    else aggregate_state(reported.get(i) for i in run.indexes())
                out[name] = ProcessStatus(state, run.refusal_reason, run.failure_detail,
                                          tuple(tasks), run.restarts)
        return out

    def stopped(self) -> dict[str, bool]:
        """``{process: stopped}``."""
        with self._lock:
            return {name: run.stopped for name, run in self._runs.items()}

    def wait_any_stopped(self, timeout_s: float | None = None) -> bool:
        """Block until some process is STOPPED; ``False`` on timeout."""
        with self._changed:
            return self._changed.wait_for(
                lambda: any(r.stopped for r in self._runs.values()), timeout_s)

    def wait_all_stopped(self, timeout_s: float | None = None) -> bool:
        """Block until every process is STOPPED; ``False`` on timeout."""
        with self._changed:
            return self._changed.wait_for(
                lambda: all(r.stopped for r in self._runs.values()), timeout_s)

    # --- the watch loop --------------------------------------------------

    def _watch(self) -> None:
        assert self._pull is not None
        poller = zmq.Poller()
        poller.register(self._pull, zmq.POLLIN)
        tick_ms = max(20, min(200, self._config.status_interval_ms // 4))
        while not self._closing.is_set():
            try:
                if poller.poll(tick_ms):
                    self._drain()
                self._check_exits()
                self._check_liveness(time.monotonic())
            except Exception:  # never let the watch die silently
                log.exception("supervisor watch loop error")
                time.sleep(0.1)

    def _drain(self) -> None:
        assert self._pull is not None
        while True:
            try:
                raw = self._pull.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                msg = orjson.loads(raw)
                kind, name = msg["kind"], msg["process"]
                task, pid = int(msg["task"]), int(msg["pid"])
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                log.warning("ignored a malformed worker message (%d bytes)", len(raw))
                continue
            with self._lock:
                run = self._runs.get(name)
                t = None if run is None else run.tasks.get(task)
                if t is None or t.pid != pid:
                    continue  # a previous incarnation's report
                now = time.monotonic()
                t.heard_at = now
                self._observe("reported", name, task, pid, msg)
                if kind == STATUS:
                    t.report, t.report_at = msg, now
                    state = msg.get("state")
                    t.last_state = state if isinstance(state, str) else None
                    if state == "RUNNING":
                        t.running_since = t.running_since or now
                    else:
                        t.running_since = None
                elif kind == FINAL:
                    t.final = msg

    def _reap(self, t: _Task) -> bool:
        """Record ``t``'s exit if it has exited (``waitpid`` without blocking); hold the lock.

        The watch thread is the one caller while it runs, so no two threads
        ever wait on one child; the record (``exit_code``, ``exited``) is what
        every other thread reads.
        """
        if t.exit_code is None:
            code = t.proc.exitcode
            if code is None:
                return False
            t.exit_code, t.exited_at = code, time.monotonic()
            t.exited.set()
            self._changed.notify_all()
        return True

    def _await_exit(self, t: _Task, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the reaper to record ``t``'s exit; ``True`` if it did.

        Reaps itself only when the watch thread is not running (a start that
        failed before it did, or after it ended), so there is still one reaper.
        """
        end = time.monotonic() + max(0.0, timeout_s)
        while True:
            remaining = end - time.monotonic()
            if t.exited.wait(max(0.0, min(0.05, remaining))):
                return True
            if self._thread is None or not self._thread.is_alive():
                with self._lock:
                    if self._reap(t):
                        return True
            if remaining <= 0:
                return t.exited.is_set()

    def _signal(self, t: _Task, sig: signal.Signals) -> bool:
        """Send ``sig`` to ``t``'s worker if it is still a live child of ours; ``True`` if sent.

        Checked under the reaper's lock: a worker not yet reaped keeps its PID
        (at worst as a zombie), so the PID cannot belong to another process.
        """
        with self._lock:
            if self._reap(t):
                return False
            if t.handle is not None:
                try:
                    if not t.handle.is_running() or t.handle.ppid() != os.getpid():
                        log.error("pid %d is no longer task %d's worker; not signalled",
                                  t.pid, t.index)
                        return False
                except psutil.Error:
                    return False
            try:
                os.kill(t.pid, sig)
            except ProcessLookupError:
                return False
            return True

    def _check_exits(self) -> None:
        with self._lock:
            exited = [(run, t) for run in self._runs.values() for t in list(run.tasks.values())
                      if t.exited_at is None and self._reap(t)]
        for run, t in exited:
            code = t.exit_code
            # Every stop kind's exit, a clean one included, follows its final report,
            # which carries the counts since the last status (the last commit's too).
            if t.final is None and code is not None and (
                    code in EXIT_CODES.values() or code >= REFUSAL_EXIT_BASE):
                deadline = time.monotonic() + FINAL_GRACE_S
                while t.final is None and time.monotonic() < deadline:
                    self._drain()
                    time.sleep(0.02)
            self._on_exit(run, t, code)

    def _healthy(self, t: _Task, now: float) -> bool:
        """Whether ``t`` has been healthy for the reset period (monotonic s ``now``).

        Healthy means reporting RUNNING without a break for ``restart_reset_ms``,
        up to a fresh report: its latest report is newer than three status
        intervals (and than the stale bound), and came ``restart_reset_ms`` or
        more after the report that began its RUNNING stretch. A task that
        reported RUNNING and then fell silent (a hung handler) is never healthy,
        so its respawns keep spending the budget (docs/operations.md, "The
        restart budget").
        """
        if t.stale is not None or t.running_since is None or t.heard_at is None:
            return False
        fresh_s = min(3 * self._config.status_interval_ms / 1000.0, self._stale_after_s)
        return now - t.heard_at < fresh_s and \
            t.heard_at - t.running_since >= self._reset_after_s

    def _check_liveness(self, now: float) -> None:
        """Kill stale workers; reset the restart budget of tasks healthy long enough
        (:meth:`_healthy`)."""
        with self._lock:
            for run in self._runs.values():
                if run.stopped or run.closing or run.restarting:
                    continue
                healthy = 0
                for t in list(run.tasks.values()):
                    if t.exit_code is not None:
                        continue
                    if self._healthy(t, now):
                        healthy += 1
                        if t.crash_respawns:
                            log.info("%s: task %d RUNNING and reporting for %g s: its restart "
                                     "budget (%d used) and backoff start again",
                                     run.plan.application_id, t.index, self._reset_after_s,
                                     t.crash_respawns)
                            t.crash_respawns = 0
                    silent = now - (t.heard_at if t.heard_at is not None else t.started_at)
                    if t.stale is None and silent >= self._stale_after_s:
                        t.stale = (silent, t.last_state)
                        log.error("%s: task %d (pid %d) sent no report for %.1f s (last "
                                  "reported state %s): killing it (SIGKILL)",
                                  run.plan.application_id, t.index, t.pid, silent,
                                  t.last_state or "none")
                        self._signal(t, signal.SIGKILL)
                if run.substrate_attempts and healthy == len(run.indexes()):
                    log.info("%s: every task RUNNING and reporting for %g s: the process's "
                             "restart budget (%d used) and backoff start again",
                             run.plan.application_id, self._reset_after_s, run.substrate_attempts)
                    run.substrate_attempts = 0

    def _stale_detail(self, run: _Run, t: _Task) -> str:
        assert t.stale is not None
        silent, state = t.stale
        last = "it never reported" if state is None else f"last reported state {state}"
        return (f"task {t.index} of '{run.plan.name}' (pid {t.pid}) sent no report for "
                f"{silent:.1f} s ({last}): killed by the coordinator (SIGKILL) past the "
                f"stale bound of {self._stale_after_s:g} s (stale_task_ms)")

    def _on_exit(self, run: _Run, t: _Task, code: int | None) -> None:
        name = run.plan.name
        final = t.final or {}
        kind, reason, detail = classify_exit(final, code)
        final_detail = detail
        with self._lock:
            self._observe("exited", name, t.index, t.pid, kind, reason)
        if t.stale is not None and not final:
            detail = self._stale_detail(run, t)
        elif not final and detail is not None:
            detail = f"task {t.index} of '{name}' (pid {t.pid}) {detail}, {describe_exit(code)}"
        elif kind is StopKind.CRASHED or not detail:
            detail = (f"task {t.index} of '{name}' (pid {t.pid}) {describe_exit(code)}"
                      + ("" if kind is not StopKind.CRASHED else " without a final report")
                      + (f": {final.get('failure_detail')}" if final.get("failure_detail")
                         else ""))
        with self._changed:
            t.report = None  # the entry retires with the task
            if run.tasks.get(t.index) is not t:
                return  # an incarnation a restart already replaced
            run.tasks.pop(t.index)
            if t.released:
                self._changed.notify_all()
                return
            if fenced_by_successor(kind, final_detail) and self._on_fenced is not None \
                    and not (run.closing or run.stopped or run.restarting) \
                    and self._on_fenced(name, t.index):
                log.warning("%s: task %d (pid %d) was fenced: %s; its successor runs it "
                            "(docs/operations.md, \"Several coordinators\")",
                            run.plan.application_id, t.index, t.pid, detail)
                self._changed.notify_all()
                return
            if run.closing or run.stopped or run.restarting or self._closing.is_set():
                self._changed.notify_all()
                return
            log.warning("%s: task %d (pid %d) stopped: %s%s", run.plan.application_id, t.index,
                        t.pid, kind.value, f" {reason.name}" if reason else "")
            if kind is StopKind.CRASHED and self._policy is RestartPolicy.TRANSIENT \
                    and t.crash_respawns < self._max_attempts:
                delay = self._delay(t.crash_respawns)
                log.warning("%s; respawning task %d in %.1f s (attempt %d of %d; the count "
                            "starts again after %g s RUNNING and reporting)", detail, t.index,
                            delay, t.crash_respawns + 1, self._max_attempts, self._reset_after_s)
                self._helper(self._respawn_task, run, t.index, t.crash_respawns + 1, delay,
                             run.generation)
                return
            restart = self._policy is RestartPolicy.TRANSIENT and self._rebootstrap is not None \
                and (
                    (kind is StopKind.SUBSTRATE and run.substrate_attempts < self._max_attempts)
                    or (reason is Reason.COVERED_POSITION_FED and not run.covered_restart_used)
                )
            if restart:
                if reason is Reason.COVERED_POSITION_FED:
                    run.covered_restart_used = True
                    delay = 0.0
                else:
                    delay = self._delay(run.substrate_attempts)
                    run.substrate_attempts += 1
                run.restarting = True
                run.refusal_reason, run.failure_detail = reason, detail
                log.warning("%s: restarting the process through its bootstrap in %.1f s (%s)",
                            run.plan.application_id, delay, detail)
                self._helper(self._restart_process, run, delay)
                return
            if kind is StopKind.CRASHED and self._policy is RestartPolicy.TRANSIENT:
                detail += (f"; not respawned: the restart budget (max_restarts "
                           f"{self._max_attempts}) is spent, no respawn having run and reported "
                           f"for {self._reset_after_s:g} s (restart_reset_ms) before failing again")
            # Blast radius: the whole process stops; its reason and detail remain.
            run.stopped = True
            run.refusal_reason = reason
            run.failure_detail = detail
            log.error("%s: %s: %s (failing closed)" if reason else "%s: %s: %s",
                      run.plan.application_id, reason.name if reason else kind.value, detail)
            self._changed.notify_all()
        self._helper(self._stop_siblings, run)

    def _observe(self, event: str, *args: Any) -> None:
        """Tell the observer, if any, of ``event`` (a :class:`TaskObserver` method)."""
        if self._observer is None:
            return
        try:
            getattr(self._observer, event)(*args)
        except Exception:
            log.exception("the supervisor's observer failed on %s", event)

    def _delay(self, attempt: int) -> float:
        return float(min(self._backoff_cap_s, self._backoff_s * (2 ** attempt)))

    def _helper(self, fn: Callable[..., Any], *args: Any) -> None:
        th = threading.Thread(target=fn, args=args, daemon=True, name="parsley-supervisor-helper")
        self._helpers.append(th)
        th.start()

    def _respawn_task(self, run: _Run, index: int, attempts: int, delay: float,
                      generation: int) -> None:
        if self._closing.wait(delay):
            return
        with self._changed:
            if run.stopped or run.closing or run.restarting or run.generation != generation:
                return
            t = self._spawn(run.plan, index)
            t.crash_respawns = attempts
            run.tasks[index] = t
            run.restarts += 1
            self._changed.notify_all()

    def _restart_process(self, run: _Run, delay: float) -> None:
        report = self._stop_tasks(run, self._stop_deadline_s)
        if report.not_stopped:
            # Ownership passes only on a confirmed exit: never two workers for one task.
            self._finish_stop(run, run.refusal_reason, f"{run.failure_detail}; not restarted: "
                              + report.summary())
            return
        while True:
            if self._closing.wait(delay) or run.closing:
                return
            assert self._rebootstrap is not None
            try:
                plan = self._rebootstrap(run.plan.name)
            except ParsleyFailClosedError as exc:
                self._finish_stop(run, exc.reason, exc.detail)
                return
            except (StartError, OSError) as exc:
                with self._lock:
                    if run.substrate_attempts >= self._max_attempts:
                        self._finish_stop(run, None, f"restart through the bootstrap failed "
                                                     f"{run.substrate_attempts} time(s): {exc}")
                        return
                    delay = self._delay(run.substrate_attempts)
                    run.substrate_attempts += 1
                log.warning("%s: bootstrap for the restart failed (%s); again in %.1f s",
                            run.plan.application_id, exc, delay)
                continue
            except Exception as exc:
                self._finish_stop(run, None, f"restart through the bootstrap failed: {exc!r}")
                return
            with self._changed:
                if self._closing.is_set() or run.closing:
                    return
                run.plan = plan
                self._spawn_all(run)
                run.restarts += 1
                run.restarting = False
                run.refusal_reason = None
                run.failure_detail = None
                self._changed.notify_all()
            return

    def _finish_stop(self, run: _Run, reason: Reason | None, detail: str | None) -> None:
        with self._changed:
            run.stopped, run.restarting = True, False
            run.refusal_reason, run.failure_detail = reason, detail
            log.error("%s: %s: %s", run.plan.application_id,
                      reason.name if reason else "stopped", detail)
            self._changed.notify_all()

    # --- tasks that move between coordinators (coordinator.runtime.membership) ----

    def assign_tasks(self, name: str, plan: ProcessPlan, indexes: set[int]) -> None:
        """Run tasks ``indexes`` of process ``name`` here too, from ``plan`` (their bootstrap).

        A process stopped here stays stopped (the tasks are recorded as owned, not
        spawned); a process restarting spawns them with its restart.
        (docs/operations.md, "Several coordinators").
        """
        with self._changed:
            run = self._runs[name]
            run.owned = frozenset(run.owned or ()) | frozenset(indexes)
            run.plan = plan
            if run.stopped or run.closing or run.restarting or self._closing.is_set():
                return
            for i in sorted(indexes):
                if i not in run.tasks:
                    run.tasks[i] = self._spawn(plan, i)
            self._changed.notify_all()

    def release_tasks(self, name: str, indexes: set[int], deadline_s: float | None = None
                      ) -> ShutdownReport:
        """Stop tasks ``indexes`` of ``name`` because they move to another coordinator.

        SIGTERM, ``deadline_s`` (the supervisor's stop deadline if ``None``), SIGKILL,
        confirmed exits; their exits are not failures (no blast radius, no restart).

        Returns:
            The :class:`ShutdownReport` of those workers.
        """
        with self._lock:
            run = self._runs[name]
            run.owned = frozenset(run.owned or ()) - frozenset(indexes)
            tasks = [t for i, t in run.tasks.items() if i in indexes and t.exit_code is None]
            for t in tasks:
                t.released = True
        report = self._terminate(name, tasks,
                                 self._stop_deadline_s if deadline_s is None else deadline_s)
        with self._changed:
            for t in tasks:
                if t.exit_code is not None and run.tasks.get(t.index) is t:
                    run.tasks.pop(t.index)
            self._changed.notify_all()
        return report

    def fail_process(self, name: str, reason: Reason | None, detail: str) -> None:
        """Stop process ``name`` here with ``reason`` and ``detail`` (a refusal at the
        bootstrap of tasks it gained), stopping its tasks here (the blast radius)."""
        run = self._runs[name]
        self._finish_stop(run, reason, detail)
        self._helper(self._stop_siblings, run)

    # --- stopping --------------------------------------------------------

    def _stop_siblings(self, run: _Run) -> None:
        """The blast radius: stop the process's other tasks and log what became of each."""
        with self._lock:
            names = ", ".join(f"{run.plan.name}/{t.index} (pid {t.pid})"
                              for t in sorted(run.tasks.values(), key=lambda t: t.index)
                              if t.exit_code is None)
        report = self._stop_tasks(run, self._stop_deadline_s)
        if not names:
            return
        if report.clean:
            log.info("%s: stopped its other tasks: %s; %s", run.plan.application_id, names,
                     report.summary())
        else:
            log.error("%s: stopped its other tasks: %s; %s", run.plan.application_id, names,
                      report.summary())

    def _stop_tasks(self, run: _Run, deadline_s: float) -> ShutdownReport:
        with self._lock:
            tasks = [t for t in run.tasks.values() if t.exit_code is None]
        report = self._terminate(run.plan.name, tasks, deadline_s)
        with self._changed:
            for t in tasks:
                if t.exit_code is not None and run.tasks.get(t.index) is t:
                    run.tasks.pop(t.index)
            self._changed.notify_all()
        return report

    def _terminate(self, process: str, tasks: list[_Task], deadline_s: float
                   ) -> ShutdownReport:
        """SIGTERM every live worker, wait ``deadline_s``, SIGKILL the rest, confirm exits.

        Exits are the reaper's record (:meth:`_await_exit`); signals go only to
        workers not yet reaped (:meth:`_signal`).
        """
        alive = [t for t in tasks if not t.exited.is_set()]
        for t in alive:
            self._signal(t, signal.SIGTERM)
        deadline = time.monotonic() + deadline_s
        for t in alive:
            self._await_exit(t, deadline - time.monotonic())
        late = [t for t in alive if not t.exited.is_set()]
        for t in late:
            self._signal(t, signal.SIGKILL)
        kill_deadline = time.monotonic() + KILL_WAIT_S
        for t in late:
            self._await_exit(t, kill_deadline - time.monotonic())
        stopped = tuple(f"{process}/{t.index}" for t in tasks if t not in late)
        killed = tuple(StoppedWorker(process, t.index, t.pid, "killed") for t in late
                       if t.exited.is_set())
        survived = tuple(StoppedWorker(process, t.index, t.pid, "not_stopped") for t in late
                         if not t.exited.is_set())
        if killed or survived:
            log.error("%s: workers did not stop within %g s: killed %s, not stopped %s",
                      process, deadline_s, [w.pid for w in killed],
                      [w.pid for w in survived])
        return ShutdownReport(stopped, killed, survived, deadline_s)

    def _terminate_all(self, deadline_s: float) -> ShutdownReport:
        report = ShutdownReport(deadline_s=deadline_s)
        with self._lock:
            runs = list(self._runs.values())
            for run in runs:
                run.closing = True
        threads: list[threading.Thread] = []
        reports: list[ShutdownReport] = []

        def one(run: _Run) -> None:
            reports.append(self._stop_tasks(run, deadline_s))
        for run in runs:
            th = threading.Thread(target=one, args=(run,), daemon=True)
            th.start()
            threads.append(th)
        for th in threads:
            th.join()
        for r in reports:
            report = report.merge(r)
        return report

    def stop(self, deadline_s: float | None = None) -> ShutdownReport:
        """Stop every worker of every process: SIGTERM, deadline, SIGKILL.

        Processes still running become STOPPED with nothing recorded (closed by
        the application); a process that had stopped keeps its reason and detail.

        Args:
            deadline_s: s between SIGTERM and SIGKILL (the supervisor's default if ``None``).

        Returns:
            The :class:`ShutdownReport`, naming every worker that had to be
            killed or did not stop.
        """
        deadline = self._stop_deadline_s if deadline_s is None else deadline_s
        report = self._terminate_all(deadline)
        with self._changed:
            for run in self._runs.values():
                if not run.stopped:
                    run.stopped = True
                    if not run.restarting:
                        run.refusal_reason = None
                        run.failure_detail = None
                    run.restarting = False
            self._changed.notify_all()
        return report

    def close(self, deadline_s: float | None = None) -> ShutdownReport:
        """:meth:`stop`, then end the watch loop and close the report socket."""
        report = self.stop(deadline_s)
        self._closing.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for th in self._helpers:
            th.join(timeout=0.1)
        if self._pull is not None:
            self._pull.close(0)
            self._pull = None
            if self._endpoint.startswith("ipc://"):
                with contextlib.suppress(OSError):
                    os.unlink(self._endpoint[len("ipc://"):])
        return report

