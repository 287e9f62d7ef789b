"""What the supervisor knows of its workers: one record per worker (:class:`Task`) and per
process (:class:`Run`), the observer it tells, and the state its parts share
(:class:`SupervisorBase`; one lock guards it all).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import psutil  # type: ignore[import-untyped]
import zmq

from coordinator.bootstrap import ProcessPlan
from coordinator.config import ParsleyConfig
from parsley.refusals import Reason
from workers.protocol import StopKind, TaskSpec

__all__ = ["Run", "SupervisorBase", "Task", "TaskObserver"]

log = logging.getLogger("parsley.coordinator.supervisor")


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


@dataclass
class Task:
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
    killed_at: float | None = None  # when the stale SIGKILL was sent (monotonic s)
    unkillable: bool = False  # still alive UNKILLABLE_AFTER_S after that SIGKILL: reported
    crash_respawns: int = 0
    malformed_logged: bool = False
    released: bool = False  # stopped because its task moved to another coordinator


@dataclass
class Run:
    plan: ProcessPlan
    tasks: dict[int, Task] = field(default_factory=dict)
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


class SupervisorBase:
    """The state every part of the :class:`~coordinator.runtime.supervisor.Supervisor` shares.

    Its parts (spawn, intake, reap, restarts, shutdown: one module each) are mixins over this
    state; the ``Supervisor`` composes them and sets every attribute in its ``__init__``.
    A part calls another's methods through ``self`` (``_spawn``, ``_drain``, ``_signal``,
    ``_await_exit``, ``_on_exit``, ``_stop_tasks``, ``_stop_siblings``, ``_finish_stop``).
    """

    _config: ParsleyConfig
    _observer: TaskObserver | None
    _on_fenced: Callable[[str, int], bool] | None
    _target: Callable[[TaskSpec], int] | None
    _rebootstrap: Callable[[str], ProcessPlan] | None
    _max_attempts: int
    _backoff_s: float
    _backoff_cap_s: float
    _stale_after_s: float
    _reset_after_s: float
    _stop_deadline_s: float
    _runs: dict[str, Run]
    _lock: threading.RLock
    _changed: threading.Condition
    _ctx: Any  # the multiprocess spawn context
    _zmq: zmq.Context[zmq.Socket[bytes]]
    _pull: zmq.Socket[bytes] | None
    _endpoint: str
    _thread: threading.Thread | None
    _closing: threading.Event
    _helpers: list[threading.Thread]

    def _observe(self, event: str, *args: Any) -> None:
        """Tell the observer, if any, of ``event`` (a :class:`TaskObserver` method)."""
        if self._observer is None:
            return
        try:
            getattr(self._observer, event)(*args)
        except Exception:
            log.exception("the supervisor's observer failed on %s", event)

    def _helper(self, fn: Callable[..., Any], *args: Any) -> None:
        th = threading.Thread(target=fn, args=args, daemon=True, name="parsley-supervisor-helper")
        self._helpers.append(th)
        th.start()

