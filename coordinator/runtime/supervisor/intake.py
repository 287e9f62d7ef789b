"""Status intake: the workers' ``status`` and ``final`` messages off the supervisor's ZeroMQ
``PULL`` socket, and the :class:`~coordinator.control.status.ProcessStatus` built from them.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import orjson
import psutil  # type: ignore[import-untyped]
import zmq

from coordinator.control.status import (
    ProcessState,
    ProcessStatus,
    TaskStatus,
    aggregate_state,
    process_state,
    task_status_from_report,
)
from coordinator.runtime.supervisor.state import SupervisorBase, Task
from workers.protocol import FINAL, STATUS

__all__ = ["Intake"]

log = logging.getLogger("parsley.coordinator.supervisor")


class Intake(SupervisorBase):
    """Reads worker reports and answers :meth:`status`."""

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
                ended = {t.index for t in run.tasks.values() if _ended(t)}
                for t in sorted(run.tasks.values(), key=lambda t: t.index):
                    if t.report is None or t.report_at is None or t.index in ended:
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
                # Over every task: one whose worker ended (and waits for its respawn, or for
                # its exit to be reaped) is STARTING.
                reported = {t.index: None if t.report is None else str(t.report.get("state"))
                            for t in run.tasks.values() if t.index not in ended}
                state = process_state(run.plan.task_count, reported) if run.owned is None \
                    else aggregate_state(reported.get(i) for i in run.indexes())
                out[name] = ProcessStatus(state, run.refusal_reason, run.failure_detail,
                                          tuple(tasks), run.restarts)
        return out

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
                    # Never older than the worker itself (a sent_ms from a broken clock).
                    late = min(_in_flight_s(msg), max(0.0, now - t.started_at))
                    t.report, t.report_at = msg, now - late
                    state = msg.get("state")
                    t.last_state = state if isinstance(state, str) else None
                    if state == "RUNNING":
                        t.running_since = t.running_since or now
                    else:
                        t.running_since = None
                elif kind == FINAL:
                    t.final = msg


def _ended(t: Task) -> bool:
    """Whether ``t``'s worker has ended: its exit reaped, its final message read (it has
    stopped, or is stopping: its last status no longer says what the task does), or the
    process a zombie not reaped yet. A coordinator that reads a backlog of reports after a
    pause reads the final, or finds the zombie, before it reaps the exit."""
    if t.exit_code is not None or t.final is not None:
        return True
    if t.handle is None:
        return False
    try:
        return bool(t.handle.status() == psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return True  # gone


def _in_flight_s(msg: dict[str, Any]) -> float:
    """How long a report waited between its worker's send and this read, s (0 when unknown).

    The worker stamps ``sent_ms`` with the host's wall clock (``workers.status``), which the
    coordinator shares: its workers run on its host. A report read late (a coordinator
    paused, or busy, while its worker kept reporting) is aged from when it was sent, so it
    never shows as fresh what the worker said long ago (docs/operations.md, "Status").
    """
    sent = msg.get("sent_ms")
    if not isinstance(sent, (int, float)) or isinstance(sent, bool):
        return 0.0
    return max(0.0, time.time() - sent / 1000.0)
