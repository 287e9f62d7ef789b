"""The restart policy: what a worker's exit does to its process (blast radius, respawn, restart
through the bootstrap), stale workers, and the restart budget that resets
(docs/runbooks.md, "Fix the restart rule"; docs/operations.md, "Supervision").
"""

from __future__ import annotations

import enum
import logging
import signal
from typing import Final

import psutil  # type: ignore[import-untyped]

from coordinator.bootstrap import StartError
from coordinator.runtime.supervisor.exits import classify_exit, describe_exit, fenced_by_successor
from coordinator.runtime.supervisor.state import Run, SupervisorBase, Task
from parsley.refusals import ParsleyFailClosedError, Reason
from workers.protocol import StopKind

__all__ = ["BACKOFF_CAP_S", "RestartPolicy", "Restarts"]

log = logging.getLogger("parsley.coordinator.supervisor")


UNKILLABLE_AFTER_S: Final = 10.0
"""How long a stale worker may outlive the coordinator's SIGKILL before it is reported as
unkillable and its process stopped, s."""
BACKOFF_CAP_S: Final = 30.0
"""The longest restart delay, s."""


class RestartPolicy(enum.Enum):
    """What the supervisor restarts on its own (docs/runbooks.md, "Fix the restart rule")."""

    NEVER = "never"
    """Restart nothing; every stop is left to the operator."""
    TRANSIENT = "transient"
    """Restart substrate failures (whole process, through its bootstrap, bounded),
    COVERED_POSITION_FED once, and crashed workers (that task, bounded)."""


class Restarts(SupervisorBase):
    """Decides on each exit and carries out respawns and restarts."""

    def _healthy(self, t: Task, now: float) -> bool:
        """Whether ``t`` has been healthy for the reset period (monotonic s ``now``).

        Healthy means reporting RUNNING without a break for ``restart_reset_ms``,
        up to a fresh report. Fresh: newer than three status intervals and than the
        stale bound. The latest report must come ``restart_reset_ms`` or more after
        the one that began the RUNNING stretch. A task that reported RUNNING and
        then fell silent, as a hung handler does, is never healthy, so its respawns
        keep spending the budget (docs/operations.md, "Supervision", "The restart
        budget").
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
                        if self._signal(t, signal.SIGKILL):
                            t.killed_at = now
                    elif t.killed_at is not None and not t.unkillable \
                            and now - t.killed_at >= UNKILLABLE_AFTER_S:
                        self._unkillable(run, t, now)
                if run.substrate_attempts and healthy == len(run.indexes()):
                    log.info("%s: every task RUNNING and reporting for %g s: the process's "
                             "restart budget (%d used) and backoff start again",
                             run.plan.application_id, self._reset_after_s, run.substrate_attempts)
                    run.substrate_attempts = 0

    def _unkillable(self, run: Run, t: Task, now: float) -> None:
        """A stale worker still alive :data:`UNKILLABLE_AFTER_S` after its SIGKILL (asleep
        in the kernel, uninterruptible): report it and stop its process; never respawn its
        task while it lives (no second worker may run for a task). Holds the lock."""
        t.unkillable = True
        state = "unknown"
        if t.handle is not None:
            try:
                state = str(t.handle.status())
            except psutil.Error:
                state = "gone"
        assert t.stale is not None and t.killed_at is not None
        detail = (f"task {t.index} of '{run.plan.name}' (pid {t.pid}) sent no report for "
                  f"{t.stale[0]:.1f} s and is still alive {now - t.killed_at:.1f} s after the "
                  f"coordinator's SIGKILL (process state {state}"
                  + (": uninterruptible sleep in the kernel, e.g. on a hung disk or network "
                     "file system" if state == psutil.STATUS_DISK_SLEEP else "")
                  + "); its task is not respawned while it lives, since no second worker may "
                  "run for a task: find what it waits on (cat /proc/<pid>/stack), end it, "
                  "then start the process again (docs/operations.md, \"Supervision\")")
        log.error("%s: %s", run.plan.application_id, detail)
        if run.stopped or run.closing:
            return
        run.stopped, run.restarting = True, False
        run.refusal_reason, run.failure_detail = None, detail
        self._changed.notify_all()
        self._helper(self._stop_siblings, run)

    def _stale_detail(self, run: Run, t: Task) -> str:
        assert t.stale is not None
        silent, state = t.stale
        last = "it never reported" if state is None else f"last reported state {state}"
        return (f"task {t.index} of '{run.plan.name}' (pid {t.pid}) sent no report for "
                f"{silent:.1f} s ({last}): killed by the coordinator (SIGKILL) past the "
                f"stale bound of {self._stale_after_s:g} s (stale_task_ms)")

    def _on_exit(self, run: Run, t: Task, code: int | None) -> None:
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

    def _delay(self, attempt: int) -> float:
        return float(min(self._backoff_cap_s, self._backoff_s * (2 ** attempt)))

    def _respawn_task(self, run: Run, index: int, attempts: int, delay: float,
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

    def _restart_process(self, run: Run, delay: float) -> None:
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

    def _finish_stop(self, run: Run, reason: Reason | None, detail: str | None) -> None:
        with self._changed:
            run.stopped, run.restarting = True, False
            run.refusal_reason, run.failure_detail = reason, detail
            log.error("%s: %s: %s", run.plan.application_id,
                      reason.name if reason else "stopped", detail)
            self._changed.notify_all()
