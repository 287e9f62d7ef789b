"""Bounded shutdown: SIGTERM, a deadline, SIGKILL, and a :class:`ShutdownReport` naming every
worker that had to be killed or did not stop at all; the blast radius stops a process's other
tasks the same way.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Final

from coordinator.runtime.supervisor.state import Run, SupervisorBase, Task

__all__ = ["DEFAULT_STOP_DEADLINE_S", "KILL_WAIT_S", "Shutdown", "ShutdownReport", "StoppedWorker"]

log = logging.getLogger("parsley.coordinator.supervisor")


DEFAULT_STOP_DEADLINE_S: Final = 10.0
"""s a worker has between SIGTERM and SIGKILL."""
KILL_WAIT_S: Final = 3.0
"""s to wait for a SIGKILLed worker to be reaped before reporting it as not stopped."""


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


class Shutdown(SupervisorBase):
    """Stops workers, bounded in time."""

    def _stop_siblings(self, run: Run) -> None:
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

    def _stop_tasks(self, run: Run, deadline_s: float) -> ShutdownReport:
        with self._lock:
            tasks = [t for t in run.tasks.values() if t.exit_code is None]
        return self._stop_and_forget(run, tasks, deadline_s)

    def _stop_and_forget(self, run: Run, tasks: list[Task], deadline_s: float
                         ) -> ShutdownReport:
        """Terminate ``tasks`` of ``run`` (:meth:`_terminate`) and drop those that exited
        from ``run.tasks``; a task respawned meanwhile under the same index stays."""
        report = self._terminate(run.plan.name, tasks, deadline_s)
        with self._changed:
            for t in tasks:
                if t.exit_code is not None and run.tasks.get(t.index) is t:
                    run.tasks.pop(t.index)
            self._changed.notify_all()
        return report

    def _terminate(self, process: str, tasks: list[Task], deadline_s: float
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

        def one(run: Run) -> None:
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

