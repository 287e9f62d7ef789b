"""One worker OS process per task: spawn, watch, classify exits, blast radius, bounded shutdown.

The :class:`Supervisor` spawns task ``i`` of every planned process as its own OS process,
listens on one ZeroMQ ``PULL`` socket for the workers' reports and watches each worker's exit.
Its jobs have a module each: :mod:`.spawn`, :mod:`.intake` (reports and status), :mod:`.reap`
(one reaper per child), :mod:`.restarts` (restart policy, stale tasks, the budget),
:mod:`.shutdown` (bounded stops), :mod:`.exits` (how a worker stopped, pure), over the state
of :mod:`.state`. The rules they keep (blast radius, ownership passes only on a confirmed
exit, one owner per child, stale tasks, a restart budget that resets, bounded shutdown) are
in docs/architecture.md, "The coordinator", "Supervision", and docs/operations.md,
"Supervision".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

import multiprocess  # type: ignore[import-untyped]
import zmq

from coordinator.bootstrap import ProcessPlan
from coordinator.config import ParsleyConfig
from coordinator.runtime.supervisor.intake import Intake
from coordinator.runtime.supervisor.reap import Reaping
from coordinator.runtime.supervisor.restarts import BACKOFF_CAP_S, RestartPolicy, Restarts
from coordinator.runtime.supervisor.shutdown import (
    DEFAULT_STOP_DEADLINE_S,
    Shutdown,
    ShutdownReport,
)
from coordinator.runtime.supervisor.spawn import Spawning, WorkerTarget, report_endpoint
from coordinator.runtime.supervisor.state import Run, TaskObserver
from parsley.refusals import Reason

__all__ = ["Supervisor"]

log = logging.getLogger("parsley.coordinator.supervisor")


class Supervisor(Spawning, Intake, Reaping, Restarts, Shutdown):
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
            none, until the coordinators' group assigns some;
            :mod:`coordinator.runtime.membership`); ``None`` (default) for every task.
        on_fenced: ``(process, task) -> bool``, asked when a worker stops fenced by a live
            successor (:func:`.exits.fenced_by_successor`; any other ``FATAL`` stops the
            process); ``True`` takes the exit as the task moving away (no
            blast radius; :mod:`coordinator.runtime.membership` decides what runs it).

    Besides the methods here, :meth:`status` is :mod:`.intake`'s and :meth:`stop` and
    :meth:`close` are :mod:`.shutdown`'s.
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
        self._runs = {name: Run(plan, owned=None if owned is None else owned.get(name))
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
        pull.bind(report_endpoint(self._config))
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
        return self._stop_and_forget(
            run, tasks, self._stop_deadline_s if deadline_s is None else deadline_s)

    def fail_process(self, name: str, reason: Reason | None, detail: str) -> None:
        """Stop process ``name`` here with ``reason`` and ``detail`` (a refusal at the
        bootstrap of tasks it gained), stopping its tasks here (the blast radius)."""
        run = self._runs[name]
        self._finish_stop(run, reason, detail)
        self._helper(self._stop_siblings, run)
